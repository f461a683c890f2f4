/* kern_cuda_compress.cu — the compression ops of the "cuda" backend (kernels.h: tile DCT,
 * per-tile top-k, scatter, apply_sign, blockwise int8/int4 quantize and dequantize), so
 * that DeMo and the activation codecs run where the tensors live and only what goes on
 * the wire crosses PCIe (model/demo_opt.c, model/stage.c).
 *
 * Numerics, against "ref" (which is bit-identical to kernels/dct.c and compress/):
 * - DCT: every output is the same sum in the same ascending order as dct.c, but each
 *   step is a fused multiply-add (fmaf), so results differ by float rounding: a few 1e-7
 *   of the largest coefficient (tests/test_cuda_compress.c allows 1e-5).
 * - topk, scatter, apply_sign, quantize, dequantize: exact. Given the same input they
 *   give bit-identical results (the quantizer's divisions are IEEE, and rintf rounds to
 *   nearest even as codec.c does); only a top-k tie that DCT rounding breaks the other
 *   way can differ in a DeMo step.
 * Deterministic: no atomics; every reduction has a fixed order for given sizes.
 *
 * Shapes of the work: the DCT is two passes through a row-major intermediate in the
 * backend's scratch (one thread per output element, bases read through L1); top-k is one
 * block per tile, which finds the k-th largest key bit by bit (at most 47 counting passes
 * over the tile, usually ~31) and compacts the selection in index order with a block
 * scan; quantize is one warp per quantization block.
 *
 * Not for: cub/thrust (minutes of compile time per file), the formats themselves
 * (compress/ checks and frames what these ops produce). */
#include "kernels/cuda/kern_cuda.cuh"

#include <math.h>
#include <stdint.h>

#define KCC_THREADS  256
#define KCC_GRID_CAP 65535u

#define KCC_FOR_EACH(i, n)                                                                         \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* --- tile DCT -------------------------------------------------------------------------
 * Forward, per tile: pass 1 tmp[i][v] = sum_j x[i][j] bc[v][j] (row-major, like x);
 * pass 2 coef[t][u][v] = sum_i br[u][i] tmp[tile row i][v]. Inverse: pass 1
 * tmp[i][j] = sum_v coef[t][i][v] bc[v][j]; pass 2 x[i][j] = sum_u br[u][i] tmp[u][j].
 * When cr == 1, pass 2 is a multiplication by 1: pass 1 writes the output directly (a
 * 1-row tensor's tile-major and row-major layouts are the same). */

/* Forward pass 1: out row-major (rows, cols); also the whole transform when cr == 1. */
__global__ void kcc_dct_fwd_rows(float *__restrict__ out, const float *__restrict__ x,
                                 const float *__restrict__ bc, size_t n, int64_t cols, int cc)
{
    KCC_FOR_EACH(e, n)
    {
        size_t r = e / (size_t)cols, c = e % (size_t)cols;
        size_t c0 = c - c % (size_t)cc;
        int v = (int)(c % (size_t)cc);
        const float *xr = x + r * (size_t)cols + c0, *bv = bc + (size_t)v * cc;
        float acc = 0.0f;
        for (int j = 0; j < cc; j++) acc = fmaf(xr[j], bv[j], acc);
        out[e] = acc;
    }
}

/* Forward pass 2: coef tile-major from tmp row-major. */
__global__ void kcc_dct_fwd_cols(float *__restrict__ coef, const float *__restrict__ tmp,
                                 const float *__restrict__ br, size_t n, int64_t cols, int cr,
                                 int cc)
{
    const size_t tn = (size_t)cr * cc, ntc = (size_t)cols / cc;
    KCC_FOR_EACH(e, n)
    {
        size_t t = e / tn, w = e % tn;
        int u = (int)(w / cc), v = (int)(w % cc);
        size_t tr = t / ntc, tc = t % ntc;
        const float *tcol = tmp + tr * cr * (size_t)cols + tc * cc + v, *bu = br + (size_t)u * cr;
        float acc = 0.0f;
        for (int i = 0; i < cr; i++) acc = fmaf(bu[i], tcol[(size_t)i * cols], acc);
        coef[e] = acc;
    }
}

/* Inverse pass 1: out row-major (rows, cols) from coef tile-major; the whole inverse when
 * cr == 1. */
__global__ void kcc_dct_inv_rows(float *__restrict__ out, const float *__restrict__ coef,
                                 const float *__restrict__ bc, size_t n, int64_t cols, int cr,
                                 int cc)
{
    const size_t tn = (size_t)cr * cc, ntc = (size_t)cols / cc;
    KCC_FOR_EACH(e, n)
    {
        size_t r = e / (size_t)cols, c = e % (size_t)cols;
        size_t tr = r / cr, tc = c / cc;
        int i = (int)(r % cr), j = (int)(c % cc);
        const float *yr = coef + (tr * ntc + tc) * tn + (size_t)i * cc;
        float acc = 0.0f;
        for (int v = 0; v < cc; v++) acc = fmaf(yr[v], bc[(size_t)v * cc + j], acc);
        out[e] = acc;
    }
}

/* Inverse pass 2: x row-major from tmp row-major. */
__global__ void kcc_dct_inv_cols(float *__restrict__ x, const float *__restrict__ tmp,
                                 const float *__restrict__ br, size_t n, int64_t cols, int cr)
{
    KCC_FOR_EACH(e, n)
    {
        size_t r = e / (size_t)cols, c = e % (size_t)cols;
        size_t r0 = r - r % cr;
        int i = (int)(r % cr);
        const float *tcol = tmp + r0 * (size_t)cols + c;
        float acc = 0.0f;
        for (int u = 0; u < cr; u++)
            acc = fmaf(br[(size_t)u * cr + i], tcol[(size_t)u * cols], acc);
        x[e] = acc;
    }
}

static void kcc_dct_forward(kern_t *k, float *coef, const float *x, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)rows * (size_t)cols;
    if (!n) return;
    unsigned grid = kc_blocks(n, KCC_THREADS, KCC_GRID_CAP);
    if (cr == 1) {
        kcc_dct_fwd_rows<<<grid, KCC_THREADS, 0, c->stream>>>(coef, x, bc, n, cols, cc);
        KC_LAUNCHED(c, "kcc_dct_fwd_rows");
        return;
    }
    float *tmp = (float *)kc_scratch(c, n * sizeof(float));
    if (!tmp) return;
    kcc_dct_fwd_rows<<<grid, KCC_THREADS, 0, c->stream>>>(tmp, x, bc, n, cols, cc);
    KC_LAUNCHED(c, "kcc_dct_fwd_rows");
    kcc_dct_fwd_cols<<<grid, KCC_THREADS, 0, c->stream>>>(coef, tmp, br, n, cols, cr, cc);
    KC_LAUNCHED(c, "kcc_dct_fwd_cols");
}

static void kcc_dct_inverse(kern_t *k, float *x, const float *coef, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)rows * (size_t)cols;
    if (!n) return;
    unsigned grid = kc_blocks(n, KCC_THREADS, KCC_GRID_CAP);
    if (cr == 1) {
        kcc_dct_inv_rows<<<grid, KCC_THREADS, 0, c->stream>>>(x, coef, bc, n, cols, cr, cc);
        KC_LAUNCHED(c, "kcc_dct_inv_rows");
        return;
    }
    float *tmp = (float *)kc_scratch(c, n * sizeof(float));
    if (!tmp) return;
    kcc_dct_inv_rows<<<grid, KCC_THREADS, 0, c->stream>>>(tmp, coef, bc, n, cols, cr, cc);
    KC_LAUNCHED(c, "kcc_dct_inv_rows");
    kcc_dct_inv_cols<<<grid, KCC_THREADS, 0, c->stream>>>(x, tmp, br, n, cols, cr);
    KC_LAUNCHED(c, "kcc_dct_inv_cols");
}

/* --- top-k ----------------------------------------------------------------------------
 * Key of element i of a tile: |x| bits above, the complemented 16-bit index below, so
 * that larger keys come first and ties go to the lower index (demo_topk's order); the
 * keys of a tile are distinct. The k-th largest key thr is built from the top bit down:
 * a candidate bit stays when at least kk keys are >= the candidate. Then the kept
 * elements (key >= thr, exactly kk of them) are written in index order: each thread owns
 * a contiguous run of indices, counts its kept ones, and a block scan gives its offset. */

__device__ __forceinline__ uint64_t kcc_topk_key(float x, int i)
{
    return (uint64_t)(__float_as_uint(x) & 0x7fffffffu) << 16 | (uint32_t)(0xffff - i);
}

/* Sum of v over the block, returned to every thread; buf holds blockDim.x ints (a power
 * of two). Ends with a barrier, so buf may be reused at once. */
__device__ int kcc_block_sum_int(int v, int *buf)
{
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    int r = buf[0];
    __syncthreads();
    return r;
}

__global__ void kcc_topk_kernel(uint16_t *__restrict__ idx, float *__restrict__ val,
                                const float *__restrict__ x, int64_t tiles, int tn, int kk)
{
    __shared__ int buf[KCC_THREADS];
    const int per = (tn + (int)blockDim.x - 1) / (int)blockDim.x;
    const int lo = min(tn, (int)threadIdx.x * per), hi = min(tn, lo + per);
    for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const float *xt = x + (size_t)t * tn;
        uint64_t thr = 0;
        if (kk < tn) {
            for (int b = 46; b >= 0; b--) {
                uint64_t cand = thr | (uint64_t)1 << b;
                int cnt = 0;
                for (int i = threadIdx.x; i < tn; i += blockDim.x)
                    cnt += kcc_topk_key(xt[i], i) >= cand;
                cnt = kcc_block_sum_int(cnt, buf); /* the same on every thread */
                if (cnt >= kk) {
                    thr = cand;
                    if (cnt == kk) break;
                }
            }
        }
        int mine = 0;
        for (int i = lo; i < hi; i++) mine += kcc_topk_key(xt[i], i) >= thr;
        buf[threadIdx.x] = mine;
        __syncthreads();
        if (threadIdx.x == 0) { /* exclusive scan, in thread order */
            int run = 0;
            for (int j = 0; j < (int)blockDim.x; j++) {
                int m = buf[j];
                buf[j] = run;
                run += m;
            }
        }
        __syncthreads();
        size_t e = (size_t)t * kk + (size_t)buf[threadIdx.x];
        for (int i = lo; i < hi; i++)
            if (kcc_topk_key(xt[i], i) >= thr) {
                idx[e] = (uint16_t)i;
                val[e++] = xt[i];
            }
        __syncthreads(); /* buf is reused by the next tile */
    }
}

static void kcc_topk(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn,
                     int kk)
{
    kc_ctx *c = kc_of(k);
    if (tiles <= 0 || tn <= 0 || kk <= 0) return;
    unsigned grid = (unsigned)(tiles < (int64_t)KCC_GRID_CAP ? tiles : KCC_GRID_CAP);
    kcc_topk_kernel<<<grid, KCC_THREADS, 0, c->stream>>>(idx, val, x, tiles, tn, kk);
    KC_LAUNCHED(c, "kcc_topk_kernel");
}

/* --- scatter and apply_sign ----------------------------------------------------------- */

__device__ __forceinline__ float kcc_round_bf16(float v)
{
    uint32_t b = __float_as_uint(v);
    return __uint_as_float((b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u);
}

/* One thread per entry; indices are distinct within a tile, so no two threads write the
 * same element. */
__global__ void kcc_scatter_kernel(float *__restrict__ x, const uint16_t *__restrict__ idx,
                                   const float *__restrict__ val, size_t n, int tn, int kk,
                                   int bf16)
{
    KCC_FOR_EACH(e, n)
    {
        size_t t = e / (size_t)kk;
        float v = val[e];
        x[t * tn + idx[e]] = bf16 ? kcc_round_bf16(v) : v;
    }
}

static void kcc_scatter(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles,
                        int tn, int kk, int bf16)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)tiles * kk;
    if (tiles <= 0 || tn <= 0) return;
    KC_CUDA(c, cudaMemsetAsync(x, 0, (size_t)tiles * tn * sizeof(float), c->stream));
    if (!n) return;
    kcc_scatter_kernel<<<kc_blocks(n, KCC_THREADS, KCC_GRID_CAP), KCC_THREADS, 0, c->stream>>>(
        x, idx, val, n, tn, kk, bf16);
    KC_LAUNCHED(c, "kcc_scatter_kernel");
}

/* lr * s is exact for s in {-1, 0, 1}, so p - lr * s rounds once, as on the host. */
__global__ void kcc_apply_sign_kernel(float *__restrict__ p, const uint8_t *__restrict__ signs,
                                      float lr, size_t n)
{
    KCC_FOR_EACH(i, n)
    {
        unsigned code = (signs[i >> 2] >> (2 * (i & 3))) & 3u;
        float s = code == 1 ? 1.0f : code == 2 ? -1.0f : 0.0f;
        p[i] = p[i] - lr * s;
    }
}

static void kcc_apply_sign(kern_t *k, float *p, const uint8_t *signs, float lr, size_t n)
{
    kc_ctx *c = kc_of(k);
    if (!n) return;
    kcc_apply_sign_kernel<<<kc_blocks(n, KCC_THREADS, KCC_GRID_CAP), KCC_THREADS, 0, c->stream>>>(
        p, signs, lr, n);
    KC_LAUNCHED(c, "kcc_apply_sign_kernel");
}

/* --- quantize / dequantize -------------------------------------------------------------
 * One warp per quantization block: lanes take every 32nd element for the absmax (a max is
 * exact in any order) and a non-finite flag, reduced by shuffles; lane 0 writes the
 * scale; then the lanes quantize the block's elements (int4: its pairs, one octet each).
 * The arithmetic is codec.c's: s = absmax / lim, q = rne(x * (1/s)) or rne(x / s) when
 * 1/s overflows, clamped. */

__device__ __forceinline__ float kcc_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ int kcc_quant(float x, float s, float inv, int use_inv, float lim)
{
    float v = rintf(use_inv ? x * inv : x / s);
    v = v > lim ? lim : v < -lim ? -lim : v;
    return (int)v;
}

__global__ void kcc_quantize_kernel(uint8_t *__restrict__ payload, const float *__restrict__ x,
                                    size_t n, int bits, uint32_t block)
{
    const size_t nb = (n + block - 1) / block;
    const int lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    const float lim = bits == 8 ? 127.0f : 7.0f;
    float *scales = (float *)payload;
    uint8_t *q = payload + 4 * nb;
    for (size_t b = (size_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; b < nb; b += warps) {
        size_t off = b * block, len = n - off < block ? n - off : block;
        float amax = 0.0f, bad = 0.0f;
        for (size_t i = lane; i < len; i += 32) {
            float xi = x[off + i];
            bad = isfinite(xi) ? bad : 1.0f;
            amax = fmaxf(amax, fabsf(xi));
        }
        amax = kcc_warp_max(amax);
        bad = kcc_warp_max(bad);
        float s = bad != 0.0f ? __uint_as_float(0x7fc00000u) : amax / lim;
        float inv = 1.0f / s;
        int zero = bad != 0.0f || s == 0.0f, use_inv = isfinite(inv);
        if (lane == 0) scales[b] = s;
        if (bits == 8) {
            for (size_t i = lane; i < len; i += 32)
                q[off + i] =
                    (uint8_t)(int8_t)(zero ? 0 : kcc_quant(x[off + i], s, inv, use_inv, lim));
        } else { /* blocks are even: pair p of the block is octet (off / 2) + p */
            for (size_t p = lane; 2 * p < len; p += 32) {
                int lo = zero ? 0 : kcc_quant(x[off + 2 * p], s, inv, use_inv, lim);
                int hi = 2 * p + 1 < len
                             ? (zero ? 0 : kcc_quant(x[off + 2 * p + 1], s, inv, use_inv, lim)) + 8
                             : 0; /* the pad nibble of an odd n */
                q[off / 2 + p] = (uint8_t)((lo + 8) | (hi << 4));
            }
        }
    }
}

static void kcc_quantize(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits,
                         uint32_t block)
{
    kc_ctx *c = kc_of(k);
    if (!n || !block) return;
    size_t nb = (n + block - 1) / block;
    kcc_quantize_kernel<<<kc_blocks(nb, KCC_THREADS / 32, KCC_GRID_CAP), KCC_THREADS, 0,
                          c->stream>>>(payload, x, n, bits, block);
    KC_LAUNCHED(c, "kcc_quantize_kernel");
}

/* q * s, one thread per element (codec_decode's one multiplication). */
__global__ void kcc_dequantize_kernel(float *__restrict__ x, const uint8_t *__restrict__ payload,
                                      size_t n, int bits, uint32_t block)
{
    const size_t nb = (n + block - 1) / block;
    const float *scales = (const float *)payload;
    const uint8_t *q = payload + 4 * nb;
    KCC_FOR_EACH(i, n)
    {
        int v = bits == 8 ? (int)(int8_t)q[i] : ((q[i >> 1] >> (4 * (i & 1))) & 15) - 8;
        x[i] = (float)v * scales[i / block];
    }
}

static void kcc_dequantize(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                           uint32_t block)
{
    kc_ctx *c = kc_of(k);
    if (!n || !block) return;
    kcc_dequantize_kernel<<<kc_blocks(n, KCC_THREADS, KCC_GRID_CAP), KCC_THREADS, 0, c->stream>>>(
        x, payload, n, bits, block);
    KC_LAUNCHED(c, "kcc_dequantize_kernel");
}

/* --- registration --------------------------------------------------------------------- */

void kern_cuda_compress_init(kern_t *k)
{
    k->dct_forward = kcc_dct_forward;
    k->dct_inverse = kcc_dct_inverse;
    k->topk = kcc_topk;
    k->scatter = kcc_scatter;
    k->apply_sign = kcc_apply_sign;
    k->quantize = kcc_quantize;
    k->dequantize = kcc_dequantize;
}
