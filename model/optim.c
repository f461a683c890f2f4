/* optim.c — learning-rate schedule and AdamW over a stage's tensor table. */
#include "model/optim.h"

#include <math.h>

optim_config_t optim_defaults(void)
{
    return (optim_config_t){.lr = 3e-3f,
                            .beta1 = 0.9f,
                            .beta2 = 0.95f,
                            .eps = 1e-8f,
                            .wd = 0.1f,
                            .clip = 1.0f,
                            .warmup = 20,
                            .schedule = OPTIM_SCHEDULE_CONSTANT,
                            .min_lr_frac = 0.1f,
                            .total_steps = 0};
}

float optim_lr(const optim_config_t *oc, int64_t step)
{
    double lr = oc->lr;
    if (oc->warmup > 0 && step < oc->warmup) return (float)(lr * (double)(step + 1) / oc->warmup);
    if (oc->schedule == OPTIM_SCHEDULE_COSINE && oc->total_steps > oc->warmup) {
        double t = (double)(step - oc->warmup) / (double)(oc->total_steps - oc->warmup);
        if (t > 1) t = 1;
        double floor = lr * oc->min_lr_frac;
        return (float)(floor + 0.5 * (lr - floor) * (1 + cos(3.141592653589793 * t)));
    }
    return (float)lr;
}

void optim_adamw_step(stage_t *st, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm)
{
    optim_adamw_step_on(st, oc, step, grad_scale, stage_opt_m(st), stage_opt_v(st),
                        stage_opt_step(st), grad_norm);
}

void optim_adamw_step_on(stage_t *st, const optim_config_t *oc, int64_t step, float grad_scale,
                         float *m, float *v, int64_t *t, float *grad_norm)
{
    kern_t *k = stage_kern(st);
    size_t P = stage_num_params(st);
    float *g = stage_grads(st);
    double norm = grad_scale * sqrt(kern_sumsq(k, g, P));
    if (grad_norm) *grad_norm = (float)norm;
    float scale = grad_scale;
    if (oc->clip > 0 && norm > oc->clip) scale *= (float)(oc->clip / norm);
    if (scale != 1.0f) kern_scale(k, g, scale, P);

    float lr = optim_lr(oc, step);
    ++*t;
    int n;
    const stage_tensor_t *tab = stage_tensors(st, &n);
    float *p = stage_params(st);
    for (int i = 0; i < n; i++) {
        size_t o = tab[i].offset;
        kern_adamw(k, p + o, g + o, m + o, v + o, tab[i].numel, lr, oc->beta1, oc->beta2, oc->eps,
                   tab[i].decay ? oc->wd : 0.0f, (int)*t);
    }
}
