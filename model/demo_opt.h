/* demo_opt.h — the DeMo optimizer step of one stage replica (DESIGN.md section 3):
 * weight decay, momentum accumulation, extraction of what this replica transmits, and
 * the update from the pool's messages. The same code serves R replicas in one process
 * (train --optimizer demo --replicas R) and a stage pool over the network: a replica's
 * whole contribution for a step is one "stage message" of bytes, and applying the pool's
 * messages needs nothing else.
 *
 * Stage message (version 3, docs/codec-format.md "DeMo stage messages"; its frame, octet
 * by octet, is compress/demo_wire.h's), little-endian:
 *   "STDX" | version u8 = 3 | vfmt u8 | chunk u16 | k u24 | index mode u8 | ntensors u32 |
 *   step i64 |
 *   table u32 (CRC-32C of the tensor shapes) | crc u32 (CRC-32C of the whole message but
 *   this field) | the bit-packed bodies of every tensor (compress/demo.h), table order,
 *   back to back, zero bits to the last octet.
 * One header per stage; per tensor only what the shared tensor table cannot give: the
 * selected indices (top-k mode; shared mode draws them from demo_opt_tensor_seed) and
 * values, and the bf16 sign scale in sign mode. A decoder computes the exact length from
 * the table and the header's (vfmt, chunk, k, index mode) and trusts nothing else: magic,
 * version, enumerations, chunk (must be this replica's), k, tensor count, table
 * fingerprint, step, length, checksum, padding, then every body. Senders may use another
 * k, value format or index mode than the receiver (the length follows from theirs).
 *
 * The update: p -= lr * sign(Q) (DEMO_UPDATE_SIGN), p -= lr * Q / rms(Q), rms over each
 * tensor (DEMO_UPDATE_RMS), p -= lr * Q / sqrt(V) per parameter with V Adam's second moment
 * of Q (DEMO_UPDATE_RMSPROP, the sign preset's; V in the stage's AdamW v, t in its step
 * counter), Adam on Q (DEMO_UPDATE_ADAM: M / sqrt(V), M in the stage's m), or p -= Q
 * (DEMO_UPDATE_LINEAR: Q as it is, the momentum having taken lr * g; SparseLoCo's outer
 * step with local steps), all from the same Q on every replica, so the moments too are
 * identical on every replica.
 *
 * On a device backend the residual momentum lives in device memory and the transform runs
 * there (kernels.h compression ops); per step the host sees only the selected entries
 * (shared indices: the coefficients, as there is no gather op) and sends back sign(Q), 2
 * bits per parameter (rms update: the step, 4 bytes per parameter). Aggregation stays on the host,
 * so a pool may mix CPU and GPU replicas: given the same messages they apply bit-identical updates.
 *
 * Not for: moving bytes (swarm/), the learning-rate schedule (optim.h).
 */
#ifndef SWARMTRAIN_DEMO_OPT_H
#define SWARMTRAIN_DEMO_OPT_H

#include "compress/demo.h"
#include "compress/demo_wire.h"
#include "model/optim.h"
#include "model/stage.h"

#include <stddef.h>
#include <stdint.h>

typedef struct demo_opt demo_opt_t;

/* The frame (header, checksum, padding) is compress/demo_wire.h's. */
#define DEMO_OPT_VERSION    DEMO_STAGE_VERSION
#define DEMO_OPT_HEADER_LEN DEMO_STAGE_HEADER_LEN

/* DeMo state (residual momentum per tensor, zero) for the stage. NULL + err on failure. */
demo_opt_t *demo_opt_new(stage_t *st, const demo_cfg_t *cfg, char *err);
void demo_opt_destroy(demo_opt_t **o);

/* Bytes of every stage message this replica makes (the same every step). */
size_t demo_opt_msg_size(const demo_opt_t *o);

/* Bytes of the stage message for a tensor table t[0, n) and cfg, without a stage (for
 * byte counts and benchmarks); 0 when cfg is invalid for some tensor. */
size_t demo_opt_stage_bytes(const stage_tensor_t *t, int n, const demo_cfg_t *cfg);

/* This replica's part of step `step`. The stage's gradients are the SUM over the n
 * microbatches this replica counted, grad_scale = 1/n (1 when it counted none): their
 * mean (gradients times grad_scale) is what the clip to oc->clip (per replica, per stage)
 * and *grad_norm (its pre-clip norm, when not NULL) see; the momentum takes lr times the
 * clipped SUM, D = beta D + lr c sum(g), c the clip's factor (1 when it does not bind).
 * Then p *= 1 - lr*wd on decayed tensors, and the transmitted part is extracted into msg
 * (demo_opt_msg_size bytes) and removed from D. 0 or a status + err.
 * Why the sum: in a swarm the pool's members count unequal shares of a step's
 * microbatches (stage 0's owners and the wiring split them at random: on a 4 x 2 tiny
 * swarm a member counts none or two at a quarter of its steps each), and every member's
 * message weighs the same in the pool's mean (in the sign preset exactly: +-1 each).
 * With the mean, a microbatch counted beside another weighed half in the momentum of one
 * it was counted alone, and one member's share of the pool's momentum decayed while it
 * counted none: measured in one process (train's replicas made to split like that at
 * half the steps), +3.6% final validation loss over even splits, +1.4% with the sum
 * (docs/design-notes.md, issue 27). Every DeMo update rule is invariant to one scale of
 * all of D (sign, rms, rmsprop, adam up to eps), so with one microbatch per replica the
 * sum and the mean give the same run. */
int demo_opt_prepare(demo_opt_t *o, const optim_config_t *oc, int64_t step, float grad_scale,
                     uint8_t *msg, float *grad_norm, char *err);

/* The decoupled weight decay of step `step` alone (p *= 1 - lr*wd on decayed tensors):
 * part of demo_opt_prepare, and what a replica that follows the pool's update without
 * contributing to it must do before demo_opt_apply. */
void demo_opt_decay(demo_opt_t *o, const optim_config_t *oc, int64_t step);

/* defer 1: demo_opt_prepare leaves the weight decay out, for the caller to apply with
 * demo_opt_decay just before demo_opt_apply (a swarm member: its parameters stay those of
 * the step's start until the pool's update, so that a state it serves in between is the
 * step's; docs/protocol.md 9.4). The result of prepare + decay + apply is the same. */
void demo_opt_defer_decay(demo_opt_t *o, int defer);

/* Applies the pool's step: msgs are the m stage messages of step `step` (this replica's
 * among them, any order); per tensor, every coefficient is the mean over the senders
 * that sent it, Q = IDCT of that, p -= lr * sign(Q). The result is bit-identical on every
 * replica given the same set of messages. Nothing is applied unless every message is
 * valid (STATUS_EMALFORMED + err naming the first bad one). */
int demo_opt_apply(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                   const uint8_t *const *msgs, const size_t *lens, int m, char *err);

/* The largest weight demo_opt_apply_w takes. */
#define DEMO_OPT_MAX_WEIGHT 65536u

/* demo_opt_apply with message j weighing w[j] (1 .. DEMO_OPT_MAX_WEIGHT; NULL: 1 each):
 * per coefficient, sum(w * value) / sum(w) over the senders that sent it. A pool weighs
 * a member's message 1 + the microbatches it counted (docs/protocol.md 12.5): its
 * residual momentum, which every member's message carries, plus each gradient new in it.
 * Why not the counts alone: a member that counted nothing still sends momentum the pool
 * needs; left out (weight 0), one process made to split a step's two microbatches 2/0 at
 * half the steps ended +2.4% above weighing the two alike, and weights 1 + count -0.8%
 * (tiny, 600 steps, 2 replicas, seeds 1337-1340; docs/design-notes.md, issue 27).
 * Weights are taken in lowest terms, so equal weights give demo_opt_apply's result bit for
 * bit. */
int demo_opt_apply_w(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                     const uint8_t *const *msgs, const size_t *lens, const uint32_t *w, int m,
                     char *err);

/* Validates one stage message of step `step` as demo_opt_apply would (frame, checksum,
 * every body) without applying anything: 0, or the status and reason in err. A peer
 * checks what it receives so that one bad sender cannot stop its pool's step. */
int demo_opt_check(demo_opt_t *o, int64_t step, const uint8_t *msg, size_t len, char *err);

/* demo_opt_check that also gives the message's L2 norm over every decoded value (what the
 * bound on a pool's updates compares, docs/protocol.md 12.5); norm may be NULL. */
int demo_opt_check_norm(demo_opt_t *o, int64_t step, const uint8_t *msg, size_t len, double *norm,
                        char *err);

/* Tests only (peer --poison): rewrites a valid stage message of this optimizer's format
 * into a well-framed (checksum recomputed) but poisoned one: kind 1 every value NaN (the
 * sign scale with sign values), 2 every value 1e29 (finite, within the format's bound),
 * 3 the first tile's indices out of order. 0, or STATUS_EINVAL when the format cannot
 * carry that poison (shared sign values have no magnitude; shared or dense bodies no
 * indices). */
int demo_opt_poison(const demo_opt_t *o, uint8_t *msg, size_t len, int kind, char *err);

/* The seed of tensor i (table order) at a step: the shared-index draw and the sign bit of
 * an exactly-zero value (docs/codec-format.md 4.2.1). Every replica derives the same. */
uint64_t demo_opt_tensor_seed(int64_t step, int i);

/* The residual momentum of all tensors, concatenated in table order (stage_num_params
 * floats), for checkpoints: get copies out, set copies in. */
/* The L2 norm of the aggregated update direction (the pool's averaged DCT coefficients,
 * before sign or RMS) of the last demo_opt_apply: bit-identical on every replica, unlike
 * a replica's own gradient norm. */
float demo_opt_update_norm(const demo_opt_t *o);
void demo_opt_get_momentum(demo_opt_t *o, float *out);
void demo_opt_set_momentum(demo_opt_t *o, const float *in);

/* Its update rule (DEMO_UPDATE_*). */
int demo_opt_rule(const demo_opt_t *o);

#endif
