/* kernels.h — the compute interface: one table of tensor ops per backend.
 *
 * A backend is a struct of function pointers plus private context (as in ggml's
 * backends), private to kernels/ (kern_impl.h). Callers hold an opaque kern_t and call
 * kern_op(k, ...); they never know which backend runs. Backends:
 *   "ref"  plain single-threaded loops, written to be obviously right: the test oracle;
 *   "cpu"  the fast CPU path: OpenBLAS sgemm + OpenMP, one thread pool of kern_threads(k);
 *   "cuda" (kernels/cuda/, when built) device memory, cuBLAS and own kernels.
 *
 * Not for: model structure (peer/), codec and DeMo formats, checks and aggregation
 * (compress/; the arithmetic of DCT, top-k and quantization is here), anything on the wire.
 *
 * Conventions, for every op:
 * - Arguments are outputs first, then inputs, then sizes (llm.c).
 * - Pointers are backend memory: from kern_alloc (host memory for ref/cpu, device memory
 *   for cuda). Host data enters with kern_upload and leaves with kern_download.
 * - Forward ops overwrite their outputs. Backward ops ACCUMULATE (+=) into every
 *   gradient they write (parameter and activation gradients alike), so that callers
 *   zero gradients once and residual branches add up by themselves. A gradient output
 *   passed as NULL is not computed. The one exception is crossentropy_backward, which
 *   starts the backward pass and overwrites (and may alias its logits input).
 * - Tensors are row-major, float32. Linear weights are stored (OC, C) as in PyTorch:
 *   y = x W^T.
 * - Ops return nothing; sizes are the caller's responsibility (asserted in debug
 *   builds). kern_new and kern_alloc return NULL on failure; any other failure of the
 *   backend is recorded and read with kern_status / kern_error (below). Nothing here
 *   aborts or exits.
 * - Results of "cpu" and "ref" agree to float rounding; results of "cpu" do not
 *   depend on the thread count for the same inputs unless noted (matmul: split points
 *   never cut a dot product, so each output element is computed the same way).
 */
#ifndef SWARMTRAIN_KERNELS_H
#define SWARMTRAIN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

typedef struct kern kern_t;

/* The table itself is private to kernels/ (kern_impl.h). Files that still call through it
 * (k->op(k, ...)) define SWARMTRAIN_KERN_LEGACY until they use the functions below. */
#if defined(SWARMTRAIN_KERN_LEGACY)
#include "kernels/kern_impl.h"
#endif

/* --- the backend ------------------------------------------------------------------ */
/* "ref", "cpu" or "cuda:<device name>"; can't fail. */
const char *kern_name(const kern_t *k);
/* Host threads the backend may use (cpu); 1 for ref. */
int kern_threads(const kern_t *k);
/* 1 when pointers are device memory (the host cannot dereference them). */
int kern_on_device(const kern_t *k);

/* --- failures -----------------------------------------------------------------------
 * An op cannot return an error (it is queued, on a device), so a backend that fails -
 * out of host memory for its scratch, a CUDA or cuBLAS call that failed, a lost GPU -
 * records its first failure in the kern_t and carries on without trusting its results.
 * kern_status is 0 while nothing failed, else the status of that first failure
 * (STATUS_ENOMEM for memory, STATUS_ENODEV for the device); kern_error is its one line
 * ("" while none). A caller checks kern_status after a pass (a forward, a backward, an
 * update, a state taken or loaded) and treats a failure as final: the backend's buffers
 * are not to be trusted any more, and a swarm peer stops with kern_error's text. */
int kern_status(kern_t *k);
const char *kern_error(kern_t *k);
/* 0 while nothing failed; else kern_status, with kern_error's line in err
 * (STATUS_ERR_LEN bytes), so that a pass ends with `return kern_check(k, err);`. */
int kern_check(kern_t *k, char *err);

/* --- memory -------------------------------------------------------------- */
/* Zeroed allocation of `bytes`, 64-byte aligned; NULL on failure. */
void *kern_alloc(kern_t *k, size_t bytes);
/* Frees what alloc returned; NULL is a no-op. */
void kern_free(kern_t *k, void *p);
/* Host -> backend, backend -> host, backend -> backend copies of `bytes`. */
void kern_upload(kern_t *k, void *dst, const void *host_src, size_t bytes);
void kern_download(kern_t *k, void *host_dst, const void *src, size_t bytes);
void kern_copy(kern_t *k, void *dst, const void *src, size_t bytes);
void kern_zero(kern_t *k, void *p, size_t bytes);
/* Waits for queued work (no-op on CPU backends). */
void kern_sync(kern_t *k);

/* --- linear algebra ----------------------------------------------------- */
/* out (N, OC) = inp (N, C) . w (OC, C)^T */
void kern_matmul_forward(kern_t *k, float *out, const float *inp, const float *w, int N, int C,
                         int OC);
/* dinp (N, C) += dout (N, OC) . w (OC, C);  dw (OC, C) += dout^T . inp (N, C) */
void kern_matmul_backward(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC);

/* --- embedding ---------------------------------------------------------- */
/* out (N, C) = wte[tokens[n]] for each n; tokens in [0, V) (checked by the caller). */
void kern_embedding_forward(kern_t *k, float *out, const int32_t *tokens, const float *wte, int N,
                            int C);
/* dwte[tokens[n]] += dout[n] */
void kern_embedding_backward(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                             int N, int C);

/* --- RMSNorm: out = inp * rstd * w, rstd = 1 / sqrt(mean(inp^2) + eps) ---- */
/* rstd (N) is kept for the backward pass. */
void kern_rmsnorm_forward(kern_t *k, float *out, float *rstd, const float *inp, const float *w,
                          int N, int C, float eps);
void kern_rmsnorm_backward(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C);

/* --- rotary position embedding, rotate-half convention ----------------------
 * qkv is (B, T, 3C) with C = NH*HS: per token [q (NH, HS) | k (NH, HS) | v (NH, HS)].
 * The q and k parts are rotated in place; v is untouched. For head element
 * i < HS/2 at position t, with (c, s) = freqs[t][i]:
 *   x'[i]        = x[i] c - x[i + HS/2] s
 *   x'[i + HS/2] = x[i + HS/2] c + x[i] s
 * freqs is (T, HS/2, 2) of (cos, sin), made by kern_rope_freqs and uploaded.
 * rope_backward applies the inverse rotation to dqkv in place (its q, k parts). */
void kern_rope_forward(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS);
void kern_rope_backward(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH, int HS);

/* --- causal multi-head attention ------------------------------------------
 * qkv (B, T, 3C) as above (after rope); out (B, T, C) with head h in columns
 * [h*HS, (h+1)*HS); scores scaled by 1/sqrt(HS); position t sees 0..t.
 * lse (B, NH, T) keeps the log-sum-exp of each row of scaled scores, so the
 * backward pass recomputes probabilities without a stored T x T matrix. */
void kern_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                            int NH, int HS);
/* dqkv (B, T, 3C) += gradients for q, k and v; `out` and `lse` from the forward. */
void kern_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                             const float *out, const float *lse, int B, int T, int NH, int HS);

/* --- SwiGLU: h (N, 2F) = [gate (F) | up (F)] per row ---------------------
 * out (N, F) = silu(gate) * up, silu(x) = x / (1 + exp(-x)). */
void kern_swiglu_forward(kern_t *k, float *out, const float *h, int N, int F);
/* dh (N, 2F) += */
void kern_swiglu_backward(kern_t *k, float *dh, const float *dout, const float *h, int N, int F);

/* --- softmax cross-entropy ---------------------------------------------- */
/* losses (N) = -log softmax(logits[n])[targets[n]]; targets in [0, V). */
void kern_crossentropy_forward(kern_t *k, float *losses, const float *logits,
                               const int32_t *targets, int N, int V);
/* dlogits (N, V) = dloss * (softmax(logits[n]) - onehot(targets[n])). OVERWRITES;
 * dlogits may equal logits (in place). */
void kern_crossentropy_backward(kern_t *k, float *dlogits, const float *logits,
                                const int32_t *targets, float dloss, int N, int V);

/* --- elementwise -------------------------------------------------------- */
/* out (n) = a + b; out may equal a or b. */
void kern_add(kern_t *k, float *out, const float *a, const float *b, size_t n);
/* y += alpha * x */
void kern_axpy(kern_t *k, float *y, float alpha, const float *x, size_t n);
/* x *= alpha */
void kern_scale(kern_t *k, float *x, float alpha, size_t n);
/* Sum of squares of x, accumulated in double; result on the host. */
double kern_sumsq(kern_t *k, const float *x, size_t n);
/* A 64-bit fingerprint of the bits of x[0, n), the same on every backend and thread
 * count (replicas on CPUs and GPUs compare theirs): kern_hash64_finish(n, the sum mod
 * 2^64 over i of kern_hash64_word(i, the bits of x[i])). An integer sum, so any order
 * gives the same value; one changed element always changes it, and otherwise two
 * different buffers agree with odds about 2^-64 (not a defence against forgery). */
uint64_t kern_hash64(kern_t *k, const float *x, size_t n);

/* --- optimizer -----------------------------------------------------------
 * AdamW on one tensor, PyTorch semantics: p -= lr * wd * p; m = b1 m + (1-b1) g;
 * v = b2 v + (1-b2) g^2; p -= lr * (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps).
 * t is the 1-based step number. */
void kern_adamw(kern_t *k, float *p, const float *g, float *m, float *v, size_t n, float lr,
                float beta1, float beta2, float eps, float wd, int t);

/* --- compression: the DeMo transform and blockwise quantization ----------------
 * The math of kernels/dct.h, compress/demo.h and compress/codec.h's int8/int4 codecs,
 * here so that a device backend compresses where its tensors live and only what goes
 * on the wire crosses PCIe (model/demo_opt.c, model/stage.c). compress/ keeps the
 * formats, checks and aggregation on the host; these ops only compute.
 * Exactness: "ref" and "cpu" are bit-identical to kernels/dct.c's dct_forward and
 * dct_inverse, to demo_topk's selection, to the removal step of demo_extract, to
 * demo_apply_sign, and byte-identical to codec_encode's int8/int4 payloads and
 * codec_decode's values (tests/test_kernels.c). "cuda" computes the same sums in the
 * same order with fused multiply-adds (DCT: a few 1e-7 of the largest coefficient);
 * its topk, scatter, apply_sign, quantize and dequantize are exact given the same
 * input, so only a top-k tie broken by DCT rounding can differ.
 *
 * Tile DCT (kernels/dct.h): x (rows, cols) row-major is cut into (cr, cc) tiles, cr
 * dividing rows and cc dividing cols (dct_chunk_size); coef holds the tiles' 2-D
 * orthonormal DCT-II coefficients TILE-MAJOR: coef[t*cr*cc + u*cc + v], tiles in
 * row-major order over the tile grid. br (cr, cr) and bc (cc, cc) are the DCT-II
 * bases made on the host by dct_basis and uploaded (one buffer serves both when
 * cr == cc; a 1-D tensor is (1, n) with br = {1}). coef and x must not overlap. */
void kern_dct_forward(kern_t *k, float *coef, const float *x, const float *br, const float *bc,
                      int64_t rows, int64_t cols, int cr, int cc);
/* x (rows, cols) = per-tile inverse (DCT-III) of coef, same layout and bases. */
void kern_dct_inverse(kern_t *k, float *x, const float *coef, const float *br, const float *bc,
                      int64_t rows, int64_t cols, int cr, int cc);
/* Per-tile top-k (demo_topk's rule): x is `tiles` tiles of tn contiguous values; of
 * each tile the kk values largest in |x|, ties to the lower index (|x| compared as
 * bits, so -0 ties +0), as idx (tiles, kk) ascending within a tile and
 * val (tiles, kk) = x at those indices. 1 <= kk <= tn <= 65536; x finite. */
void kern_topk(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn, int kk);
/* The sparse tiles topk selected, dense again: x (tiles, tn) = 0 except
 * x[t*tn + idx[t*kk + j]] = val[t*kk + j], rounded to bf16 (nearest even, as
 * codec_f32_to_bf16) when bf16 is 1. Indices distinct within a tile, below tn. */
void kern_scatter(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles, int tn,
                  int kk, int bf16);
/* p[i] -= lr * sign_i, the DeMo update, with the signs packed 2 bits per element by
 * kern_sign_pack (element i in bits 2(i%4) of byte i/4: 0 -> 0, 1 -> +1, 2 -> -1).
 * Same result as demo_apply_sign on the q the signs came from. */
void kern_apply_sign(kern_t *k, float *p, const uint8_t *signs, float lr, size_t n);
/* Blockwise absmax quantization of x (n) into payload (kern_quant_bytes(n, bits,
 * block) bytes), the exact payload of compress/codec.h's int8 (bits 8) or int4
 * (bits 4) codec (docs/codec-format.md 2.2): per block of `block` elements (the last
 * may be shorter) one f32 scale s = absmax/127 (/7), then q = clamp(rne(x * (1/s)),
 * -127, 127) (x / s when 1/s overflows; +-7 for int4, stored as the nibble q+8, low
 * nibble first, a pad nibble 0 when n is odd); s = 0 gives q = 0. A block holding a
 * non-finite value gets the scale NaN (and q = 0), which codec_seal refuses, so a
 * NaN never reaches the wire. block >= 1, even for int4; n >= 1; payload is backend
 * memory from alloc (the scales are f32 at 4-byte offsets). */
void kern_quantize(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits, uint32_t block);
/* x (n) = q * s from such a payload, as codec_decode computes it. The payload must
 * have passed codec_open (valid scales, no -128, no nibble 0): not checked here. */
void kern_dequantize(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                     uint32_t block);

/* Creates a backend by name: "ref", "cpu", "cuda" or "auto" (cuda when a device works,
 * else cpu, saying which on stderr). threads <= 0 means all online cores. Returns NULL
 * with a message in err (STATUS_ERR_LEN bytes) on failure. Caller owns the result. */
kern_t *kern_new(const char *name, int threads, char *err);

/* Destroys a backend; NULL or *k == NULL is a no-op; sets *k to NULL. */
void kern_destroy(kern_t **k);

/* The terms of hash64: splitmix64's finalizer (a bijection of 64-bit words) of the element's
 * bits plus its index times 2^64 / golden ratio, and of the sum with n. Inline so that every
 * backend (and the CUDA compiler, through kern_cuda.cuh) computes the same words. */
#ifdef __CUDACC__
#define KERN_HD __host__ __device__
#else
#define KERN_HD
#endif
static inline KERN_HD uint64_t kern_hash64_mix(uint64_t z)
{
    z ^= z >> 30;
    z *= 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 27;
    z *= 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static inline KERN_HD uint64_t kern_hash64_word(uint64_t i, uint32_t bits)
{
    return kern_hash64_mix((uint64_t)bits + i * 0x9e3779b97f4a7c15ULL);
}
static inline KERN_HD uint64_t kern_hash64_finish(uint64_t n, uint64_t sum)
{
    return kern_hash64_mix(sum ^ kern_hash64_mix(n));
}

/* Fills host memory freqs (T, HS/2, 2) with (cos, sin) of t * theta^(-2i/HS). */
void kern_rope_freqs(float *freqs, int T, int HS, float theta);

/* Bytes of a quantize payload: 4 * ceil(n / block) + n (bits 8) or + ceil(n / 2) (bits 4). */
size_t kern_quant_bytes(size_t n, int bits, uint32_t block);

/* Packs sign(q[i]) for apply_sign: 2 bits per element, kern_sign_bytes(n) bytes; a NaN
 * or zero q packs as 0 (no change), as demo_apply_sign treats it. Can't fail. */
void kern_sign_pack(uint8_t *signs, const float *q, size_t n);
static inline size_t kern_sign_bytes(size_t n)
{
    return (n + 3) / 4;
}

/* When OpenBLAS runs generic kernels on a CPU it did not recognize although a much faster
 * kernel set fits it ("SkylakeX", "Haswell"), the name of that set; else NULL (also when
 * OPENBLAS_CORETYPE is already set). It takes effect only through OPENBLAS_CORETYPE
 * in the environment before the library loads. */
const char *kern_cpu_blas_better_core(void);

/* alloc and free for backends whose memory is the host's (ref, cpu): zeroed, 64-byte
 * aligned, NULL on failure; free of NULL is a no-op. */
void *kern_host_alloc(kern_t *k, size_t bytes);
void kern_host_free(kern_t *k, void *p);

/* Backend constructors, used by kern_new. Each returns NULL and fills err on failure. */
kern_t *kern_ref_new(char *err);
kern_t *kern_cpu_new(int threads, char *err);
#ifdef SWARMTRAIN_HAVE_CUDA
kern_t *kern_cuda_new(char *err);
#endif

#endif
