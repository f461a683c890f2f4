/* stage.h — one pipeline stage of the LLaMA-style model: its parameters, gradients and
 * optimizer state in one contiguous buffer each, described by a tensor table, and the
 * forward and backward passes of the blocks it owns.
 *
 * The model's N blocks are cut into S stages of N/S blocks. Stage 0 also owns the token
 * embedding; stage S-1 owns the final RMSNorm, the LM head and the loss. With S = 1 one
 * stage is the whole model.
 *
 * Several microbatches may be in flight: each forward pass runs in a slot (0 ..
 * max_inflight-1) that keeps the activations its backward pass needs, until that slot
 * is used again. Boundary tensors (x_in, y_out, dy, dx: (batch, seq, dim) floats;
 * tokens and targets: (batch, seq) int32) are host memory; everything else lives in
 * the backend's memory. A boundary tensor may instead cross as a codec message encoded
 * from or decoded into backend memory (stage_wire_*, below): on a device, int8/int4
 * activations are then quantized where they live and only the payload crosses PCIe.
 *
 * Not for: choosing routes, the network, the optimizer's schedule (train.c), DeMo.
 */
#ifndef SWARMTRAIN_STAGE_H
#define SWARMTRAIN_STAGE_H

#include "kernels/kernels.h"
#include "model/config.h"

#include <stddef.h>
#include <stdint.h>

typedef struct stage stage_t;

/* One named tensor inside the stage's buffers (same offsets in params, grads, m, v). */
typedef struct {
    char name[64];  /* LLaMA names: "layers.3.attention.wq.weight", "output.weight" */
    int ndim;       /* 1 or 2 */
    int rows, cols; /* 1-D tensors: rows = 1 */
    size_t offset;  /* in floats from the start of the buffer */
    size_t numel;
    int layer; /* global block index, -1 for embedding / final norm / head */
    int decay; /* 1: weight decay applies (matrices and the embedding) */
} stage_tensor_t;

/* Builds stage `index` of cfg->stages on backend k with max_inflight activation slots,
 * parameters initialized from seed: normal(0, 0.02) for matrices and the embedding,
 * 1 for norm weights. A tensor's initial values depend only on (seed, its name), and
 * names carry the global layer index, so every replica of a stage starts identical.
 * Returns NULL with a message in err on an invalid config or allocation failure. */
stage_t *stage_new(const model_config_t *cfg, int index, kern_t *k, int max_inflight, uint64_t seed,
                   char *err);

/* NULL-safe; sets *st to NULL. Does not destroy the backend. */
void stage_destroy(stage_t **st);

int stage_index(const stage_t *st);
int stage_is_first(const stage_t *st);
int stage_is_last(const stage_t *st);
const model_config_t *stage_config(const stage_t *st);
kern_t *stage_kern(const stage_t *st);

/* The tensor table; *n receives its length. */
const stage_tensor_t *stage_tensors(const stage_t *st, int *n);
size_t stage_num_params(const stage_t *st);

/* The buffers (backend memory, stage_num_params floats each). m and v are the AdamW
 * moments; the step counter of the optimizer is stage_opt_step. */
float *stage_params(stage_t *st);
float *stage_grads(stage_t *st);
float *stage_opt_m(stage_t *st);
float *stage_opt_v(stage_t *st);
int64_t *stage_opt_step(stage_t *st);

/* Forward pass of one microbatch into `slot`.
 * First stage: reads tokens (batch*seq, each < vocab) — x_in is ignored.
 * Other stages: reads x_in, or with x_in NULL the tensor stage_wire_decode placed.
 * Last stage: reads targets (each < vocab), writes the mean loss to *loss — y_out is
 *   ignored. Other stages: writes y_out, or with y_out NULL keeps the output in the slot
 *   only (for stage_wire_encode_output).
 * targets may be NULL on the last stage for a forward pass that computes no loss
 * (then *loss is left alone). Returns 0, or STATUS_EINVAL for a bad slot or token. */
int stage_forward(stage_t *st, int slot, const int32_t *tokens, const float *x_in,
                  const int32_t *targets, float *y_out, float *loss, char *err);

/* The parts of a stage a pass may run alone, for CheckFree+'s swaps (swarm/path.h): stage
 * 0's embedding (EMBED: tokens in, the embedded tokens out) and its blocks (BLOCKS: x_in in),
 * the last stage's blocks (BLOCKS: no loss, an output to hand on) and its final norm, head
 * and loss (HEAD: x_in in). ALL is the whole stage (stage_forward). One slot may hold one
 * microbatch's EMBED and BLOCKS, or BLOCKS and HEAD, at once: each part's backward needs
 * only what the other does not overwrite, if the first stage runs EMBED before BLOCKS and
 * the last BLOCKS before HEAD (a pass invalidates what it overwrites: EMBED the BLOCKS,
 * BLOCKS the HEAD). A middle stage has BLOCKS (= ALL) only. */
enum { STAGE_PART_ALL, STAGE_PART_EMBED, STAGE_PART_BLOCKS, STAGE_PART_HEAD };

/* stage_forward of one part (the arguments it does not use are ignored); STATUS_EINVAL for
 * a part this stage does not have. */
int stage_forward_part(stage_t *st, int slot, int part, const int32_t *tokens, const float *x_in,
                       const int32_t *targets, float *y_out, float *loss, char *err);

/* stage_forward_part with `params` (stage_num_params floats of backend memory) in place of
 * the stage's own, which are kept in `save` (as many floats) meanwhile and put back: the
 * slot then holds the activations of `params` (a backward needs them, or a forward run
 * again with the stage's own). The overlap's forward of a microbatch ahead of its step. */
int stage_forward_with(stage_t *st, const float *params, float *save, int slot, int part,
                       const int32_t *tokens, const float *x_in, const int32_t *targets,
                       float *y_out, float *loss, char *err);

/* The parameters whose gradients a backward pass of `part` adds to: [*offset, *offset +
 * *count) of the buffers (every part's tensors lie together). *count 0 for a part this
 * stage does not have. */
void stage_part_params(const stage_t *st, int part, size_t *offset, size_t *count);

/* Copies the logits of slot's last forward pass on the last stage ((batch*seq, vocab)
 * floats, row-major) to host memory out; valid until a backward pass of the slot
 * overwrites them. 0, or STATUS_EINVAL (not the last stage, or no forward pass there). */
int stage_logits(stage_t *st, int slot, float *out, char *err);

/* Backward pass of the microbatch in `slot`: accumulates (+=) parameter gradients of
 * the mean loss over the microbatch's tokens. Last stage: starts from its loss (dy is
 * ignored); other stages read dy = dL/dy_out (dy NULL: the tensor stage_wire_decode
 * placed). Non-first stages write dx = dL/dx_in (dx NULL: kept for stage_wire_encode_dx
 * only); the first stage ignores dx. The slot's forward must have had targets on the
 * last stage. Returns 0 or STATUS_EINVAL. */
int stage_backward(stage_t *st, int slot, const float *dy, float *dx, char *err);

/* stage_backward of one part, whose forward pass the slot holds: EMBED reads dy and writes
 * no dx; BLOCKS on stage 0 writes dx too (for stage_wire_encode_dx); HEAD starts from the
 * loss. STATUS_EINVAL for a part not held. */
int stage_backward_part(stage_t *st, int slot, int part, const float *dy, float *dx, char *err);

/* --- the stage boundary as codec messages (compress/codec.h, shape (batch, seq, dim)) ---
 * codec is a codec id (codec_by_name), block the int8/int4 block (0: the default). A host
 * backend encodes and decodes its own memory with codec_encode / codec_decode (the same
 * bytes and values as through host buffers). A device backend runs int8 and int4 on the
 * device: kernels.h quantize + download of the payload + codec_seal, and codec_open +
 * upload of the payload + dequantize (bit-identical to the host codec); the float codecs
 * go through a host buffer. */

/* Bytes of one encoded boundary tensor, header included; 0 for a bad codec or block. */
size_t stage_wire_size(const stage_t *st, int codec, uint32_t block);

/* Encodes the output of slot's last forward pass (one without the head; valid until the
 * slot's next forward) into out[0, cap); *written = stage_wire_size. 0, or STATUS_EINVAL
 * + err (bad slot, codec or cap, non-finite activations), STATUS_ENOMEM. */
int stage_wire_encode_output(stage_t *st, int slot, int codec, uint32_t block, uint8_t *out,
                             size_t cap, size_t *written, char *err)
    __attribute__((warn_unused_result));

/* Encodes dL/dx_in of the last stage_backward (not of an embedding; valid until the next
 * stage_backward), as stage_wire_encode_output. */
int stage_wire_encode_dx(stage_t *st, int codec, uint32_t block, uint8_t *out, size_t cap,
                         size_t *written, char *err) __attribute__((warn_unused_result));

/* Checks a message from the wire (every rule of codec_decode, and the shape (batch, seq,
 * dim)) and places its tensor where the next stage_forward with x_in NULL or
 * stage_backward with dy NULL reads it. Malformed input: a negative status + err, and
 * nothing a later pass may use. */
int stage_wire_decode(stage_t *st, const uint8_t *buf, size_t len, char *err)
    __attribute__((warn_unused_result));

/* Zeroes the gradient buffer. */
void stage_zero_grads(stage_t *st);

/* Per-op time profile, for the benchmark: when on, every op is synced and timed.
 * Categories: see stage_profile_names. */
enum {
    STAGE_PROF_MATMUL,
    STAGE_PROF_ATTENTION,
    STAGE_PROF_NORM,
    STAGE_PROF_ROPE,
    STAGE_PROF_SWIGLU,
    STAGE_PROF_LOSS,
    STAGE_PROF_OTHER,
    STAGE_PROF_N
};
void stage_profile(stage_t *st, int on);
/* Seconds per category since profiling was turned on; names[i] describe them. */
const double *stage_profile_seconds(const stage_t *st);
extern const char *const stage_profile_names[STAGE_PROF_N];

#endif
