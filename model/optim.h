/* optim.h — the learning-rate schedule and the AdamW step over a stage's buffers.
 * Not for: DeMo (compress/demo.h), which replaces the step for pool exchange. */
#ifndef SWARMTRAIN_OPTIM_H
#define SWARMTRAIN_OPTIM_H

#include "model/stage.h"

typedef enum { OPTIM_SCHEDULE_CONSTANT = 0, OPTIM_SCHEDULE_COSINE = 1 } optim_schedule_t;

typedef struct {
    float lr;           /* peak learning rate */
    float beta1, beta2; /* 0.9, 0.95 */
    float eps;          /* 1e-8 */
    float wd;           /* 0.1, on matrices and the embedding only */
    float clip;         /* clip the stage's gradient to this L2 norm; 0 = off */
    int warmup;         /* lr * min(1, (step+1)/warmup) */
    int schedule;       /* optim_schedule_t: after warmup, constant or cosine to min_lr */
    float min_lr_frac;  /* cosine floor as a fraction of lr */
    int total_steps;    /* length of the cosine */
} optim_config_t;

/* The defaults above (lr 3e-3, warmup 20, constant, clip 1). */
optim_config_t optim_defaults(void);

/* Learning rate at 0-based step. */
float optim_lr(const optim_config_t *oc, int64_t step);

/* One AdamW step for the stage at 0-based `step`, on gradients multiplied by
 * grad_scale (1/microbatches accumulated). The clip norm applies to this stage's
 * gradient: a swarm's stage pool cannot see other stages' gradients, so clipping is
 * per stage here too. Writes the pre-clip gradient norm to *grad_norm if not NULL.
 * Advances stage_opt_step. */
void optim_adamw_step(stage_t *st, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm);

/* The same step with moments m, v (backend memory, stage_num_params floats each) and step
 * counter *t of the caller's instead of the stage's: a swarm member's local steps between
 * its pool's exchanges (model/outer.h), whose moments are its own and never served. */
void optim_adamw_step_on(stage_t *st, const optim_config_t *oc, int64_t step, float grad_scale,
                         float *m, float *v, int64_t *t, float *grad_norm);

#endif
