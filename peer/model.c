/* model.c — S stages chained in one process. */
#include "peer/model.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>

struct model {
    model_config_t cfg;
    kern_t *k;
    stage_t **stages;
    int S;
    float *act, *grad; /* host (BT, C) boundary buffers, one pair is enough serially */
    float *act2;
};

model_t *model_new(const model_config_t *cfg, kern_t *k, uint64_t seed, char *err)
{
    if (config_validate(cfg, err)) return NULL;
    model_t *m = calloc(1, sizeof *m);
    if (!m) goto nomem;
    m->cfg = *cfg;
    m->k = k;
    m->S = cfg->stages;
    size_t act = (size_t)cfg->batch * cfg->seq * cfg->dim;
    m->stages = calloc((size_t)m->S, sizeof *m->stages);
    m->act = malloc(act * sizeof(float));
    m->act2 = malloc(act * sizeof(float));
    m->grad = malloc(act * sizeof(float));
    if (!m->stages || !m->act || !m->act2 || !m->grad) goto nomem;
    for (int i = 0; i < m->S; i++)
        if (!(m->stages[i] = stage_new(cfg, i, k, 1, seed, err))) {
            model_destroy(&m);
            return NULL;
        }
    return m;
nomem:
    model_destroy(&m);
    status_set(err, STATUS_ENOMEM, "model: out of memory");
    return NULL;
}

void model_destroy(model_t **mp)
{
    if (!mp || !*mp) return;
    model_t *m = *mp;
    for (int i = 0; m->stages && i < m->S; i++) stage_destroy(&m->stages[i]);
    free(m->stages);
    free(m->act);
    free(m->act2);
    free(m->grad);
    free(m);
    *mp = NULL;
}

int model_num_stages(const model_t *m) { return m->S; }
stage_t *model_stage(model_t *m, int i) { return m->stages[i]; }

size_t model_num_params(const model_t *m)
{
    size_t n = 0;
    for (int i = 0; i < m->S; i++) n += stage_num_params(m->stages[i]);
    return n;
}

/* Forward through every stage; activations ping-pong between two host buffers. */
static int forward(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss, char *err)
{
    float *in = m->act, *out = m->act2;
    for (int i = 0; i < m->S; i++) {
        int rc = stage_forward(m->stages[i], 0, tokens, in, targets, out, loss, err);
        if (rc) return rc;
        float *t = in;
        in = out;
        out = t;
    }
    return 0;
}

int model_train_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                      char *err)
{
    int rc = forward(m, tokens, targets, loss, err);
    for (int i = m->S - 1; !rc && i >= 0; i--)
        rc = stage_backward(m->stages[i], 0, m->grad, m->grad, err);
    return rc;
}

int model_eval_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                     char *err)
{
    return forward(m, tokens, targets, loss, err);
}

void model_zero_grads(model_t *m)
{
    for (int i = 0; i < m->S; i++) stage_zero_grads(m->stages[i]);
}

void model_adamw_step(model_t *m, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm)
{
    double sq = 0;
    for (int i = 0; i < m->S; i++) {
        float n;
        optim_adamw_step(m->stages[i], oc, step, grad_scale, &n);
        sq += (double)n * n;
    }
    if (grad_norm) *grad_norm = (float)sqrt(sq);
}
