/* model.h — the whole model in one process: S stages chained through host buffers,
 * exactly as a swarm chains them through the wire (one microbatch at a time).
 * Not for: the swarm (peer.c), which runs one stage per process. */
#ifndef SWARMTRAIN_MODEL_H
#define SWARMTRAIN_MODEL_H

#include "model/optim.h"
#include "model/stage.h"

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

/* Forward only, no loss: logits (batch*seq, vocab) of tokens (batch*seq) into host memory
 * out, for sampling and export checks. 0 or a status + err. */
int model_logits(model_t *m, const int32_t *tokens, float *out, char *err);

void model_zero_grads(model_t *m);

/* The overlap (train.h, overlap): from now on model_train_micro runs stage 0's forward on
 * `params` (stage 0's parameters of the step before: stage_num_params floats of backend
 * memory, not owned, kept until turned off) and the later stages on their own; stage 0's
 * backward then runs on a forward recomputed with its current parameters, as a swarm's
 * stage 0 computes a microbatch it sourced before its pool applied the step before. The
 * gradient that comes back is taken as is (computed downstream on the stale activation).
 * NULL turns it off. No effect with one stage or on a path whose first hop is not the
 * whole of stage 0 (a FRONT swap). 0, or STATUS_ENOMEM. */
int model_set_stale_first(model_t *m, const float *params, char *err);

/* SkipPipe: the passes from now on run only the stages on the path of mask skip
 * (swarm/path.h: bit s set = stage s left out; the first and last stage always run), the
 * activation going from each stage on the path to the next one on it, the gradient back
 * the same way. 0 (the default) runs every stage. STATUS_EINVAL for a mask that skips
 * stage 0, the last stage or a stage that does not exist. */
int model_set_skip(model_t *m, uint64_t skip, char *err);
uint64_t model_skip(const model_t *m);

/* CheckFree+: the passes from now on swap stage 0's blocks with stage 1's
 * (PATH_SWAP_FRONT) or stage S-1's with stage S-2's (PATH_SWAP_END), as a swarm's swapped
 * microbatch visits them (swarm/path.h); PATH_SWAP_NONE (the default) does not. The swap
 * applies only where the skip mask keeps the neighbour. STATUS_EINVAL for an unknown value. */
int model_set_swap(model_t *m, int swap, char *err);

/* Puts a compress/ codec on every stage boundary, as the wire would: activations going
 * forward and gradients coming back are encoded by one stage and decoded by the next
 * (stage_wire_*; with a tap, through host buffers). codec < 0 turns it off (the default:
 * exact f32 hand-over). block is the int8/int4 block (0: default).
 * Returns 0 or STATUS_EINVAL for an unknown codec. */
int model_set_codec(model_t *m, int codec, uint32_t block, char *err);

/* Encoded bytes and elements that crossed boundaries since model_new. */
void model_wire_stats(const model_t *m, uint64_t *bytes, uint64_t *elems);

/* Calls fn for every boundary tensor before it is encoded: boundary b lies between
 * stage b and the next stage on the path (b+1 without skipping); is_grad 0 going
 * forward, 1 coming back. NULL turns it off. */
typedef void (*model_tap_fn)(void *ctx, int boundary, int is_grad, const float *x, size_t n);
void model_set_tap(model_t *m, model_tap_fn fn, void *ctx);

/* AdamW on every stage (per-stage clipping, see optim.h); *grad_norm receives the
 * norm of the whole model's gradient (sqrt of the sum of the stages' squares). */
void model_adamw_step(model_t *m, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm);

#endif
