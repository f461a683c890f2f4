/* outer.c — a stage replica's local steps between its pool's exchanges (outer.h). */
#include "model/outer.h"

#include "common/status.h"

#include <string.h>

int outer_open(outer_t *o, int H, float outer_lr, int64_t steps, stage_t *st, kern_t *k,
               demo_opt_t *dopt, char *err)
{
    memset(o, 0, sizeof *o);
    if (H < 1 || !dopt) return 0;
    if (!(outer_lr > 0))
        return status_set(err, STATUS_EINVAL, "local steps: the outer rate must be > 0");
    size_t bytes = stage_num_params(st) * sizeof(float);
    o->st = st, o->k = k;
    o->psync = kern_alloc(k, bytes), o->m = kern_alloc(k, bytes), o->v = kern_alloc(k, bytes);
    if (!o->psync || !o->m || !o->v) {
        outer_close(o);
        return status_set(err, STATUS_ENOMEM, "local steps: out of memory");
    }
    o->H = H, o->outer_lr = outer_lr, o->steps = steps;
    o->update = update_rule(st, k, dopt, &o->opt);
    outer_begin(o);
    return 0;
}

void outer_close(outer_t *o)
{
    if (o->k) {
        kern_free(o->k, o->psync);
        kern_free(o->k, o->m);
        kern_free(o->k, o->v);
    }
    memset(o, 0, sizeof *o);
}

void outer_begin(outer_t *o)
{
    if (!outer_on(o)) return;
    size_t bytes = stage_num_params(o->st) * sizeof(float);
    kern_copy(o->k, o->psync, stage_params(o->st), bytes);
    kern_zero(o->k, o->m, bytes);
    kern_zero(o->k, o->v, bytes);
    o->t = 0;
}

void outer_local_step(outer_t *o, const optim_config_t *oc, int64_t step, uint32_t count,
                      float *gnorm)
{
    if (!outer_on(o)) return;
    if (count == 0) stage_zero_grads(o->st); /* its moments still move it, as train's replicas */
    optim_adamw_step_on(o->st, oc, step, 1.0f / (float)(count ? count : 1), o->m, o->v, &o->t,
                        gnorm);
}

void outer_delta(outer_t *o)
{
    if (!outer_on(o)) return;
    size_t P = stage_num_params(o->st);
    float *g = stage_grads(o->st);
    kern_copy(o->k, g, o->psync, P * sizeof(float));
    kern_axpy(o->k, g, -1.0f, stage_params(o->st), P);
}

void outer_restore(outer_t *o)
{
    if (outer_on(o))
        kern_copy(o->k, stage_params(o->st), o->psync, stage_num_params(o->st) * sizeof(float));
}

void outer_end_round(outer_t *o)
{
    if (outer_on(o))
        kern_copy(o->k, o->psync, stage_params(o->st), stage_num_params(o->st) * sizeof(float));
}

const float *outer_shared(const outer_t *o, stage_t *st)
{
    return outer_on(o) ? o->psync : stage_params(st);
}

optim_config_t outer_opt(const optim_config_t *inner, float outer_lr, int linear)
{
    optim_config_t oc = *inner;
    oc.lr = inner->lr * outer_lr;
    if (linear) { /* SparseLoCo's outer rate: a constant multiple of the round's change */
        oc.lr = outer_lr;
        oc.warmup = 0;
        oc.schedule = OPTIM_SCHEDULE_CONSTANT;
    }
    oc.wd = 0;   /* every local AdamW step decayed already */
    oc.clip = 0; /* delta is not a gradient of one step */
    return oc;
}

const optim_config_t *outer_schedule(outer_t *o, const optim_config_t *inner)
{
    o->opt = outer_opt(inner, o->outer_lr, demo_opt_rule(o->update.dopt) == DEMO_UPDATE_LINEAR);
    return &o->opt;
}

const model_update_t *outer_rule(outer_t *o, const optim_config_t *inner)
{
    outer_schedule(o, inner);
    return &o->update;
}
