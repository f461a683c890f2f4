/* demo.h — the DeMo transform (decoupled momentum, Peng et al.; DESIGN.md section 3) on
 * flat host float buffers, one parameter tensor at a time.
 *
 * Per tensor a demo_t keeps the residual momentum D. Each optimizer step:
 *   1. the optimizer applies weight decay itself (p *= 1 - lr*wd);
 *   2. demo_accumulate:  D = beta*D + lr*g;
 *   3. demo_extract:     chunked DCT-II of D (kernels/dct.h), the top-k coefficients of
 *      every tile by magnitude (ties: lower index first), packed into a message;
 *      D -= IDCT(the transmitted sparse tiles); with the transform `none`
 *      (DEMO_XFORM_NONE) the same tiles of D itself, no DCT: top-k in parameter space;
 *   4. the pool exchanges messages (swarm/, not here); each member calls
 *      demo_aggregate over all messages, its own included: every coefficient = the mean
 *      over the senders that sent it, inverse DCT -> Q;
 *   5. demo_apply_sign:  p -= lr * sign(Q).
 *
 * Tensors are (rows, cols) row-major; a 1-D tensor of length n is (1, n): tiles 1 x c.
 *
 * What "transmitted" means for the residual: f32 values, the values; bf16, the
 * bf16-rounded values (so the rounding error stays in D and is sent later); sign-only,
 * the UNQUANTIZED top-k values (the magnitude information a sign throws away is not
 * kept for later: it is what the sign scheme deliberately gives up).
 *
 * Sign-only scale: ONE f32 per message (a bf16 in a v2 body; per tensor per sender) = the mean
 * |value| of the transmitted coefficients, i.e. the L2-best s for v ~ s*sign(v). Four bytes per
 * tensor
 * (~2-3% of a sign k=4 message of a 256x256 matrix) buy: senders weighted by how much momentum
 * they hold in the mean (a replica with a tiny D cannot flip a coefficient the others
 * agree on with large D), and decoded coefficients on the scale of the real ones, so
 * the same aggregate works when the update rule is not sign(Q) (model/demo_opt.h, rms). One
 * bit cannot say zero: in a v1 message an exactly-zero value decodes as +scale; in a body
 * it gets a sign drawn from the step's seed (so a tile with no momentum, such as unused
 * embedding rows, sends no fixed direction); the scale is 0 when the whole tensor's
 * selection is 0, as at the first step of an unused row block.
 *
 * 1-D tensors (norm weights) and tiny tiles: the SAME transform, plus one layout rule
 * that holds for every tensor: a tile is sent DENSE (all its coefficients, implicit
 * indices, same value format) whenever k*(index bits + value bits) >= tile*value bits,
 * i.e. whenever indices would make sparse no cheaper than sending everything. So a
 * message is never more bytes than the dense coefficients in its value format (<= a
 * dense f32 tensor + 32 header bytes), and dense tiles remove all of D. Why not always
 * dense f32 for norms: the small model has 17 norms of 256; dense f32 would be 17.4 kB
 * per step, about as much as ALL of its matrices at sign k=4 (~18 kB) and 4x their cost
 * at k=1, to move 0.07% of the parameters. Through DeMo a 256-norm costs 672 B at k=32
 * f32, 50 B at sign k=4, 37 B at sign k=1 (32-byte header included), and norms keep the
 * error-feedback semantics of every other tensor (nothing untransmitted is lost).
 *
 * Determinism: extract and aggregate use only kernels/dct.c's fixed-order loops;
 * aggregate sums in double in a canonical message order (by length, then bytes), so the
 * same SET of messages gives a bit-identical Q on every replica in any arrival order.
 *
 * Messages (docs/codec-format.md, "DeMo messages"): 32-byte header (magic "STDM",
 * version, value format, layout, index width, rows, cols, k, chunk, scale, CRC-32C; the
 * payload length is implied by these and must match exactly), then indices (u8 for tiles <= 256
 * coefficients, u16 otherwise, strictly ascending within a tile) and values (f32, bf16, or 1 bit
 * each, LSB first, 1 = negative). Decoders trust nothing (same rules as codec.h); values must be
 * finite with |v| <= DEMO_MAX_ABS so that no aggregate can overflow.
 *
 * Two wire forms of the same selection: the self-describing v1 message above (one per
 * tensor, 32 header bytes each), and the version-2 BODY (below): the same entries with no
 * header, indices in ceil(log2(tile size)) bits, the sign scale as a bf16, meant to be
 * concatenated into one stage message (model/demo_opt.h) whose single header and tensor
 * table supply everything a body leaves out. On the tiny model (39 tensors, 234 k
 * params) v1 headers alone were 0.006 bytes/param/step; v2 spends 32 bytes per stage.
 * Bodies have a second index mode, shared indices (below): no index bits and no scale
 * (a sign value decodes as +1 or -1: every replica sends the same coefficients and the
 * update that uses them is normalized, so a scale would only weight senders).
 *
 * Not for: the network, the model or its table of tensors, the optimizer (weight decay,
 * learning-rate schedule), gradient clipping. A demo_t is used by one thread at a time.
 */
#ifndef SWARMTRAIN_DEMO_H
#define SWARMTRAIN_DEMO_H

#include "kernels/dct.h"

#include <stddef.h>
#include <stdint.h>

typedef enum {
    DEMO_VAL_F32 = 0,  /* 4 bytes per value */
    DEMO_VAL_BF16 = 1, /* 2 bytes, round to nearest even */
    DEMO_VAL_SIGN = 2, /* 1 bit + one f32 scale per message */
} demo_vfmt_t;

/* Which coefficients of a tile a sender transmits. */
typedef enum {
    DEMO_IDX_TOPK = 0,   /* its own top-k by magnitude; the indices travel */
    DEMO_IDX_SHARED = 1, /* k drawn at random from a seed every replica knows (the step and
                          * the tensor's place in the stage): only the values travel */
} demo_imode_t;

/* What each tile goes through before its entries are chosen (the transform of step 3). */
typedef enum {
    DEMO_XFORM_DCT = 0,  /* the chunked DCT-II: DeMo's frequency-space selection */
    DEMO_XFORM_NONE = 1, /* none: the tile's own entries, top-k in parameter space
                          * (SparseLoCo's outer step; docs/design-notes.md, issue 27) */
} demo_xform_t;

#define DEMO_VERSION       1
#define DEMO_HEADER_LEN    32
#define DEMO_DEFAULT_CHUNK 64
#define DEMO_DEFAULT_K     32
#define DEMO_DEFAULT_BETA  0.999f
/* The `--demo-values sign` preset (tools/run_opts.c; measured in docs/design-notes.md,
 * "DeMo at 0.005 bytes/param"): what a sign run uses unless told otherwise. */
#define DEMO_SIGN_CHUNK  16
#define DEMO_SIGN_K      9
#define DEMO_SIGN_INDEX  DEMO_IDX_SHARED
#define DEMO_SIGN_UPDATE DEMO_UPDATE_RMSPROP
/* Issue 27 ("Learning under swarm conditions"): with k 9 of 256 shared coefficients a
 * coefficient leaves D about every 28 steps; at beta 0.999 what it sends then still
 * weighs gradients from long before. A residual of ~10 steps (0.9) and twice the rate
 * learned faster at 2 and 4 replicas (neither alone did). DEMO_SIGN_LR is the rate (--lr)
 * of a DeMo run; with --demo-local neither applies (not measured there). */
#define DEMO_SIGN_BETA 0.9f
#define DEMO_SIGN_LR   6e-3f
/* ... and with --demo-local (outer steps), SparseLoCo's shape: each replica's change over
 * the round into an error-feedback buffer decayed by 0.95, its top-k sent with indices,
 * and the pool's mean taken as it is (DEMO_UPDATE_LINEAR, outer rate 1). On `tiny`, 600
 * steps, H 8, k 9, seeds 1337/1338: +9.0%/+7.0% over AdamW against the rms outer update's
 * +23.6%/+18.5% (docs/design-notes.md, issue 27, session 28). Shared indices with the
 * linear update diverged. The top-k is taken in parameter space, not after the DCT: at k 9
 * about as good, at k 2 (0.00124 bytes/param/step at H 8) +11.2% against +16.8% (ibid.). */
#define DEMO_LOCAL_XFORM    DEMO_XFORM_NONE
#define DEMO_LOCAL_INDEX    DEMO_IDX_TOPK
#define DEMO_LOCAL_UPDATE   DEMO_UPDATE_LINEAR
#define DEMO_LOCAL_BETA     0.95f
#define DEMO_LOCAL_OUTER_LR 1.0f
/* Largest |value| (and sign scale) a message may carry: tile sums stay finite. */
#define DEMO_MAX_ABS 1e30f
/* Largest rows*cols of a tensor (2^40). */
#define DEMO_MAX_ELEMS (UINT64_C(1) << 40)
/* Version-2 bodies: the sign scale is a bf16 (16 bits). */
#define DEMO_BODY_SCALE_BITS 16

typedef struct {
    int chunk;          /* DCT chunk, 1..256; 0 = 64 */
    int k;              /* coefficients per tile, >= 1; 0 = 32; above the tile size = all */
    demo_vfmt_t vfmt;   /* value format */
    float beta;         /* momentum decay in [0, 1]; a NaN is refused */
    demo_imode_t imode; /* DEMO_IDX_TOPK (0) or DEMO_IDX_SHARED (version-2 bodies only) */
    int update;         /* model/demo_opt.h: DEMO_UPDATE_* */
    demo_xform_t xform; /* DEMO_XFORM_DCT (0) or DEMO_XFORM_NONE */
} demo_cfg_t;

/* How a replica turns the pool's aggregated direction Q into a step (model/demo_opt.h). */
enum {
    DEMO_UPDATE_SIGN = 0,    /* p -= lr * sign(Q) */
    DEMO_UPDATE_RMS = 1,     /* p -= lr * Q / rms(Q), rms over each tensor */
    DEMO_UPDATE_RMSPROP = 2, /* p -= lr * Q / (sqrt(V) + eps), V = Adam's second moment of Q
                              * (beta2, bias-corrected), per parameter */
    DEMO_UPDATE_ADAM = 3,    /* p -= lr * M / (sqrt(V) + eps), M its first moment (beta1) */
    DEMO_UPDATE_LINEAR = 4,  /* p -= Q: the momentum took lr * g already (SparseLoCo's outer
                              * step on the error-feedback buffer's transmitted part) */
};

/* What a valid message says (demo_msg_parse). */
typedef struct {
    int64_t rows, cols;
    int chunk, tile_rows, tile_cols;
    int64_t tiles;
    int k;         /* entries per tile (tile_rows*tile_cols when dense) */
    int dense;     /* 1: all coefficients of every tile, indices implicit */
    int idx_width; /* bytes per index: 0 (dense), 1 or 2 */
    demo_vfmt_t vfmt;
    float scale;          /* sign-only scale; 0 otherwise */
    demo_xform_t xform;   /* the sender's transform */
    uint64_t payload_len; /* bytes after the header */
} demo_msg_info_t;

typedef struct demo demo_t;

/* State for one (rows, cols) tensor with D = 0. NULL + err on bad config or no memory.
 * Caller owns the result. */
demo_t *demo_new(int64_t rows, int64_t cols, const demo_cfg_t *cfg, char *err);
/* Frees and sets *d to NULL; NULL-safe. */
void demo_destroy(demo_t **d);

/* The residual momentum D (rows*cols floats), for checkpoints and tests. */
float *demo_momentum(demo_t *d);
int64_t demo_elems(const demo_t *d);
/* Exact size of every message demo_extract writes for this tensor. */
size_t demo_msg_size(const demo_t *d);

/* D = beta*D + lr*g. Refuses (STATUS_EINVAL, D untouched) a non-finite g or lr. */
int demo_accumulate(demo_t *d, const float *g, float lr, char *err)
    __attribute__((warn_unused_result));

/* Writes this step's message (demo_msg_size bytes) into out and removes the transmitted
 * part from D. On error (cap too small, non-finite D) D is untouched. */
int demo_extract(demo_t *d, uint8_t *out, size_t cap, size_t *written, char *err)
    __attribute__((warn_unused_result));

/* q (rows*cols floats) = IDCT(per-coefficient mean over the m messages that carry it);
 * coefficients nobody sent are 0. Every message must be valid and of d's rows, cols and
 * chunk (k, value format and layout may differ between senders); otherwise nothing is
 * written to q and the status names the first bad message. m >= 1. */
int demo_aggregate(demo_t *d, const uint8_t *const *msgs, const size_t *lens, int m, float *q,
                   char *err) __attribute__((warn_unused_result));

/* "dct" or "none" (the run text's and --demo-transform's words); "?" for another value. */
const char *demo_xform_name(demo_xform_t x);
/* The DCT plan of a transform: DCT_II for DEMO_XFORM_DCT, DCT_IDENTITY for NONE. */
dct_kind_t demo_dct_kind(demo_xform_t x);

/* p[i] -= lr * sign(q[i]); sign(0) = 0 (a NaN q counts as 0). Can't fail. */
void demo_apply_sign(float *p, const float *q, float lr, size_t n);

/* --- the message layer, usable without a demo_t ---------------------------------- */

/* Entries per tile that a message for this configuration carries (k, or the tile size
 * when the dense rule applies); 0 when the arguments are invalid. */
int demo_entries_per_tile(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt);

/* Bytes of the message for this configuration (header included), without building it;
 * 0 when the arguments are invalid. chunk 0 / k 0 mean the defaults. */
size_t demo_message_bytes(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt);

/* Packs a message. idx and val hold demo_entries_per_tile(...) entries per tile, tile
 * by tile (tile-major order as in kernels/dct.h); idx within a tile strictly ascending
 * and below the tile size; idx may be NULL for a dense message (then val is every
 * coefficient in order), coefficients of the transform xform. Values are rounded to the
 * format (sign: scale = mean |val|).
 * STATUS_EINVAL on bad arguments, a non-finite or too large value, or cap too small. */
int demo_msg_pack(uint8_t *out, size_t cap, size_t *written, int64_t rows, int64_t cols, int chunk,
                  int k, demo_vfmt_t vfmt, demo_xform_t xform, const uint16_t *idx,
                  const float *val, char *err) __attribute__((warn_unused_result));

/* Validates all of a message (header, lengths, checksum, index order, values) and fills
 * *info. Negative status + err otherwise; never reads outside [buf, buf+len). */
int demo_msg_parse(const uint8_t *buf, size_t len, demo_msg_info_t *info, char *err)
    __attribute__((warn_unused_result));

/* Validates like demo_msg_parse, then writes tiles*k entries (decoded values, indices
 * within tiles; dense: 0..tile-1) to idx/val, which hold cap entries. STATUS_EINVAL when
 * cap is too small. */
int demo_msg_unpack(const uint8_t *buf, size_t len, demo_msg_info_t *info, uint16_t *idx,
                    float *val, size_t cap, char *err) __attribute__((warn_unused_result));

/* --- version-2 bodies: one tensor's part of a stage message (model/demo_opt.h) -------
 *
 * A body is what a v1 message carries minus its 32-byte header, bit-packed
 * (docs/codec-format.md, "DeMo stage messages"): sign scale (sign only, bf16), then
 * entries*ib index bits (ib = ceil(log2(tile size)), none when dense), then the values
 * (32, 16 or 1 bit each). Bit b of the stream is bit b%8 (LSB first) of octet b/8; a
 * body may start at any bit. Layout (dense or not, entries per tile) follows from
 * (rows, cols, chunk, k, vfmt) exactly as for v1 (demo_entries_per_tile); nothing of
 * it is sent. The stage layer owns the header, checksum, lengths and padding. */

/* Bits of the body for this configuration; 0 when the arguments are invalid. */
uint64_t demo_body_bits(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt);
/* Bits of every body demo_extract_body writes for this tensor. */
uint64_t demo_body_size(const demo_t *d);

/* Like demo_extract, but writes the body at bit `bitpos` of out (cap octets), touching
 * only bits [bitpos, bitpos + demo_body_size(d)). On error D is untouched. */
int demo_extract_body(demo_t *d, uint8_t *out, size_t cap, uint64_t bitpos, char *err)
    __attribute__((warn_unused_result));

/* Like demo_msg_pack, as a body at bit `bitpos` of out. */
int demo_body_pack(uint8_t *out, size_t cap, uint64_t bitpos, int64_t rows, int64_t cols, int chunk,
                   int k, demo_vfmt_t vfmt, const uint16_t *idx, const float *val, char *err)
    __attribute__((warn_unused_result));

/* Validates the body at bit `bitpos` of buf (len octets; a body that does not fit is
 * STATUS_EMALFORMED, never read) and writes its entries like demo_msg_unpack; *scale
 * (when not NULL) gets the sign scale, 0 for other formats. */
int demo_body_unpack(const uint8_t *buf, size_t len, uint64_t bitpos, int64_t rows, int64_t cols,
                     int chunk, int k, demo_vfmt_t vfmt, uint16_t *idx, float *val, size_t cap,
                     float *scale, char *err) __attribute__((warn_unused_result));

/* Aggregation of bodies, the v2 counterpart of demo_aggregate: the caller zeroes sum and
 * cnt (demo_elems entries each, tile-major coefficient order), calls demo_body_add for
 * each sender's body in a canonical order, then demo_body_finish. A body is for d's
 * rows, cols and chunk, with the sender's k and value format. demo_body_add validates
 * the whole body first: on error (STATUS_EMALFORMED) sum and cnt are untouched. */
int demo_body_add(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                  demo_vfmt_t vfmt, double *sum, uint32_t *cnt, char *err)
    __attribute__((warn_unused_result));
/* q (rows*cols floats) = IDCT(sum/cnt per coefficient; 0 where cnt is 0). */
void demo_body_finish(demo_t *d, const double *sum, const uint32_t *cnt, float *q);

/* Top-k of x[0, n) by |x|, ties to the lower index: writes the k selected indices in
 * ascending order to idx. keys is scratch of n entries. 1 <= k <= n <= 65536. The
 * building block of demo_extract, exposed for tests. Can't fail. */
void demo_topk(uint16_t *idx, const float *x, int n, int k, uint64_t *keys);

/* --- shared indices ---------------------------------------------------------------
 *
 * In DEMO_IDX_SHARED mode every replica transmits the SAME coefficients of each tile: kt
 * of its tn drawn uniformly without replacement, ascending, from a seed all replicas
 * derive alike (model/demo_opt.c: the step and the tensor's place in the stage), so no
 * index travels and a body is one value per entry (sign: +-1, no scale). Tile t of `tiles`
 * uses its own stream, rng_seed(rng_mix(seed, t)) (common/rng.h), and Floyd's algorithm:
 * for j = tn-kt .. tn-1, x = (next >> 32) * (j+1) >> 32; mark x, or j if x is marked;
 * the marked positions in ascending order are the indices (docs/codec-format.md 4.2).
 * kt >= tn gives every index. mark is scratch of tn octets. Can't fail. */
void demo_shared_indices(uint16_t *idx, int64_t tiles, int tn, int kt, uint64_t seed,
                         uint8_t *mark);

/* The _ex forms take the index mode and, for shared indices, the step's seed for the
 * tensor; the plain forms above are the top-k mode (seed unused). */
uint64_t demo_body_bits_ex(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                           demo_imode_t imode);
int demo_entries_per_tile_ex(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                             demo_imode_t imode);
/* Extracts with d's own configuration (its index mode). */
int demo_extract_body_ex(demo_t *d, uint8_t *out, size_t cap, uint64_t bitpos, uint64_t seed,
                         char *err) __attribute__((warn_unused_result));
/* Shared mode: idx is not written (the receiver draws it) and may be NULL. seed: as for
 * extraction (it also draws the sign bit of an exactly-zero value, see below). */
int demo_body_pack_ex(uint8_t *out, size_t cap, uint64_t bitpos, int64_t rows, int64_t cols,
                      int chunk, int k, demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed,
                      const uint16_t *idx, const float *val, char *err)
    __attribute__((warn_unused_result));
int demo_body_unpack_ex(const uint8_t *buf, size_t len, uint64_t bitpos, int64_t rows, int64_t cols,
                        int chunk, int k, demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed,
                        uint16_t *idx, float *val, size_t cap, float *scale, char *err)
    __attribute__((warn_unused_result));
int demo_body_add_ex(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                     demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed, double *sum,
                     uint32_t *cnt, char *err) __attribute__((warn_unused_result));
/* demo_body_add_ex with the body weighing w (>= 1) senders: sum += w * value, cnt += w
 * per entry (a pool's members weighted by what their messages stand for, demo_opt.h). */
int demo_body_add_w(const demo_t *d, const uint8_t *buf, size_t len, uint64_t bitpos, int k,
                    demo_vfmt_t vfmt, demo_imode_t imode, uint64_t seed, uint32_t w, double *sum,
                    uint32_t *cnt, char *err) __attribute__((warn_unused_result));

/* Canonical order of m messages: by length, then by bytes, written as indices to ord.
 * Identical messages are interchangeable, so the order depends on the set only; summing
 * in it makes aggregation bit-identical on every replica. Insertion sort: m is small. */
void demo_canonical_order(int *ord, const uint8_t *const *msgs, const size_t *lens, int m);
/* The same with weights w[0, m) (NULL: none): identical messages are ordered by weight,
 * so the order still depends on the set of (message, weight) pairs only. */
void demo_canonical_order_w(int *ord, const uint8_t *const *msgs, const size_t *lens,
                            const uint32_t *w, int m);

#endif
