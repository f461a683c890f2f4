/* update.c — the update rules of a pool's step (update.h). */
#include "model/update.h"

#include "common/status.h"

#include <stdlib.h>

/* DeMo: the weight decay too, on every member, not in demo_opt_prepare: until the pool's
 * update the parameters stay those of the step's start, and so does a state a member
 * serves in between (a joiner's hash once differed: it downloaded decayed parameters
 * labelled with the step, and decayed them again; sim mild 4x2 --swap 0.5 seed 7225
 * re-synced forever). */
static int apply_demo(const model_update_t *u, const update_batch_t *b, update_result_t *out,
                      char *err)
{
    demo_opt_decay(u->dopt, u->opt, b->step);
    int rc = demo_opt_apply_w(u->dopt, u->opt, b->step, b->bodies, b->lens, b->weights, b->n, err);
    out->gnorm = b->replica_gnorm;
    out->stage_gnorm = demo_opt_update_norm(u->dopt);
    return rc;
}

/* Dense: AdamW over the sum of the bodies, scaled by the microbatches they count. */
static int apply_dense(const model_update_t *u, const update_batch_t *b, update_result_t *out,
                       char *err)
{
    size_t P = stage_num_params(u->st);
    float *sum = calloc(P, sizeof(float));
    if (!sum) return status_set(err, STATUS_ENOMEM, "update: out of memory");
    for (int j = 0; j < b->n; j++) {
        const float *g = (const float *)(const void *)b->bodies[j];
        for (size_t i = 0; i < P; i++) sum[i] += g[i];
    }
    kern_upload(u->k, stage_grads(u->st), sum, P * sizeof(float));
    free(sum);
    float gnorm = 0;
    optim_adamw_step(u->st, u->opt, b->step, 1.0f / (float)(b->counted ? b->counted : 1), &gnorm);
    out->gnorm = gnorm;
    out->stage_gnorm = u->opt->clip > 0 && gnorm > u->opt->clip ? u->opt->clip : gnorm;
    return 0;
}

int update_predict(const model_update_t *u, const update_batch_t *b, float *out, char *err)
{
    size_t bytes = stage_num_params(u->st) * sizeof(float);
    float *keep[4] = {stage_params(u->st), stage_grads(u->st), stage_opt_m(u->st),
                      stage_opt_v(u->st)};
    float *saved[4] = {0};
    int rc = 0;
    for (int i = 0; i < 4 && !rc; i++) {
        if (!(saved[i] = kern_alloc(u->k, bytes))) rc = status_set(err, STATUS_ENOMEM, "update: out of memory");
        else kern_copy(u->k, saved[i], keep[i], bytes);
    }
    int64_t t = *stage_opt_step(u->st);
    update_result_t r;
    if (!rc) rc = u->apply(u, b, &r, err);
    if (!rc) kern_copy(u->k, out, stage_params(u->st), bytes);
    for (int i = 0; i < 4; i++)
        if (saved[i]) {
            kern_copy(u->k, keep[i], saved[i], bytes);
            kern_free(u->k, saved[i]);
        }
    *stage_opt_step(u->st) = t;
    return rc;
}

model_update_t update_rule(stage_t *st, kern_t *k, demo_opt_t *dopt, const optim_config_t *opt)
{
    return (model_update_t){
        .st = st, .k = k, .dopt = dopt, .opt = opt, .apply = dopt ? apply_demo : apply_dense};
}
