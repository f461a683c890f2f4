/* model.h — the whole model in one process: S stages chained through host buffers,
 * exactly as a swarm chains them through the wire (one microbatch at a time).
 * Not for: the swarm (peer.c), which runs one stage per process. */
#ifndef SWARMTRAIN_MODEL_H
#define SWARMTRAIN_MODEL_H

#include "peer/optim.h"
#include "peer/stage.h"

typedef struct model model_t;

/* Builds cfg->stages stages on backend k, parameters from seed. NULL + err on failure. */
model_t *model_new(const model_config_t *cfg, kern_t *k, uint64_t seed, char *err);
void model_destroy(model_t **m);

int model_num_stages(const model_t *m);
stage_t *model_stage(model_t *m, int i);
size_t model_num_params(const model_t *m);

/* Forward and backward of one microbatch (batch x seq tokens and targets); gradients
 * accumulate. *loss receives the microbatch's mean loss. 0 or a status + err. */
int model_train_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                      char *err);

/* Forward only, for validation. */
int model_eval_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                     char *err);

void model_zero_grads(model_t *m);

/* AdamW on every stage (per-stage clipping, see optim.h); *grad_norm receives the
 * norm of the whole model's gradient (sqrt of the sum of the stages' squares). */
void model_adamw_step(model_t *m, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm);

#endif
