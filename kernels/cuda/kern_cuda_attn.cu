/* kern_cuda_attn.cu — causal multi-head attention for the "cuda" backend, fused and tiled
 * in the manner of FlashAttention: no T x T matrix ever reaches global memory.
 *
 * Forward, one block per (query tile, batch*head): the query tile stays in shared
 * memory; key/value tiles stream through it; each row keeps an online softmax (running
 * max m and sum l, rescaling its output accumulator when m grows), and writes
 * out = o / l and lse = m + log l.
 *
 * Backward recomputes probabilities from lse, P = exp(scale q.k - lse), in three
 * deterministic kernels (no atomics):
 *   1. Drow = rowsum(dO * O) per (b, h, t), into scratch;
 *   2. one block per (key tile, b*h) holds dK, dV of its keys in registers and loops
 *      over the query tiles at or after it: dV += P^T dO, dS = P (dO.V^T - Drow),
 *      dK += scale dS^T Q;
 *   3. one block per (query tile, b*h) loops over key tiles up to it and accumulates
 *      dQ += scale dS K (recomputing S and dS, which costs one more pass over S than
 *      atomics would, and keeps the sums in a fixed order).
 * Each gradient element is written by one thread, once, with +=.
 *
 * Threads: 4 per tile row (a "quad", always within one warp). For the scores each thread
 * of a quad takes every 4th column of the tile; for the output accumulators each takes
 * every 4th group of 4 head dimensions (KC_DIM). Shared memory is read as float4; rows
 * are padded by 4 floats so that the rows a warp reads at once fall on different banks.
 * All arithmetic is fp32 (no tensor cores).
 *
 * Head sizes: any HS <= 128 (padded with zeros to 32, 64 or 128); HS = 64 is the main
 * case. Any T >= 1.
 * Not for: non-causal or masked attention, dropout, KV caches, fp16/bf16. */
#include "kernels/cuda/kern_cuda.cuh"

#include <math.h>
#include <stdio.h>

#define KC_FULL_MASK 0xffffffffu

/* Shared-memory floats of each kernel, for a head dimension D and a tile of TILE rows. */
#define KC_DP(D)             ((D) + 4)
#define KC_TP(TILE)          ((TILE) + 4)
#define KC_FWD_SMEM(D, TILE) ((size_t)(3 * (TILE)*KC_DP(D) + (TILE)*KC_TP(TILE)) * 4)
#define KC_DKV_SMEM(D, TILE)                                                                       \
    ((size_t)(4 * (TILE)*KC_DP(D) + 2 * (TILE)*KC_TP(TILE) + 2 * (TILE)) * 4)
#define KC_DQ_SMEM(D, TILE) ((size_t)(4 * (TILE)*KC_DP(D) + (TILE)*KC_TP(TILE)) * 4)

/* Tiles: 64 rows for the forward pass at D <= 64, else 32 (so every kernel fits the
 * 99 KiB of shared memory that sm_86/sm_89 allow per block). */
#define KC_BWD_TILE 32

/* Head dimension of accumulator e (0 <= e < D/4) of quad lane ql. */
#define KC_DIM(ql, e) (((e) >> 2) * 16 + (ql)*4 + ((e)&3))

__device__ __forceinline__ float4 kc_ld4(const float *p)
{
    return *reinterpret_cast<const float4 *>(p);
}

__device__ __forceinline__ float kc_dot4(float acc, float4 a, float4 b)
{
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
    acc = fmaf(a.z, b.z, acc);
    return fmaf(a.w, b.w, acc);
}

/* Component u of v; u is a compile-time constant after unrolling, so no local array. */
__device__ __forceinline__ float kc_comp(float4 v, int u)
{
    return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}

/* acc[4 e4 .. 4 e4 + 3] += w * v */
__device__ __forceinline__ void kc_axpy4(float *acc, float w, float4 v)
{
    acc[0] = fmaf(w, v.x, acc[0]);
    acc[1] = fmaf(w, v.y, acc[1]);
    acc[2] = fmaf(w, v.z, acc[2]);
    acc[3] = fmaf(w, v.w, acc[3]);
}

/* Copies rows [t0, t0 + TILE) of one head of a (B, T, stride) tensor into a padded
 * shared tile, zero beyond T and beyond HS. `src` points at (b, 0, head column 0). */
template <int D, int TILE>
__device__ __forceinline__ void kc_load_tile(float *dst, const float *__restrict__ src,
                                             size_t stride, int t0, int T, int HS)
{
    for (int idx = threadIdx.x; idx < TILE * D; idx += blockDim.x) {
        int row = idx / D, d = idx % D, t = t0 + row;
        dst[row * KC_DP(D) + d] = (t < T && d < HS) ? src[(size_t)t * stride + d] : 0.0f;
    }
}

/* --- forward ---------------------------------------------------------------------------- */

template <int D, int TILE>
__global__ void __launch_bounds__(TILE * 4)
    kc_attn_forward_kernel(float *__restrict__ out, float *__restrict__ lse,
                           const float *__restrict__ qkv, int T, int NH, int HS, float scale)
{
    constexpr int NS = TILE / 4, ND = D / 4, DP = KC_DP(D), TP = KC_TP(TILE);
    extern __shared__ __align__(16) float smem[];
    float *Qs = smem, *Ks = Qs + TILE * DP, *Vs = Ks + TILE * DP, *Ps = Vs + TILE * DP;

    const int r = threadIdx.x >> 2, ql = threadIdx.x & 3;
    const int qt = gridDim.x - 1 - blockIdx.x; /* the longest rows start first */
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const size_t C3 = (size_t)3 * C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const int q0 = qt * TILE, qpos = q0 + r;

    kc_load_tile<D, TILE>(Qs, base, C3, q0, T, HS);

    float o[ND];
#pragma unroll
    for (int e = 0; e < ND; e++) o[e] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int nkt = min(T - 1, q0 + TILE - 1) / TILE + 1; /* key tiles up to the diagonal */
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * TILE;
        __syncthreads(); /* the previous tile's readers are done */
        kc_load_tile<D, TILE>(Ks, base + C, C3, k0, T, HS);
        kc_load_tile<D, TILE>(Vs, base + 2 * C, C3, k0, T, HS);
        __syncthreads();

        float s[NS];
#pragma unroll
        for (int j = 0; j < NS; j++) s[j] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            float4 q4 = kc_ld4(&Qs[r * DP + d]);
#pragma unroll
            for (int j = 0; j < NS; j++)
                s[j] = kc_dot4(s[j], q4, kc_ld4(&Ks[(ql + 4 * j) * DP + d]));
        }
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < NS; j++) {
            int kpos = k0 + ql + 4 * j;
            s[j] = (kpos <= qpos && kpos < T) ? s[j] * scale : -INFINITY;
            tmax = fmaxf(tmax, s[j]);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(KC_FULL_MASK, tmax, 1));
        tmax = fmaxf(tmax, __shfl_xor_sync(KC_FULL_MASK, tmax, 2));
        const float mnew = fmaxf(m, tmax);
        const float alpha = (m == -INFINITY) ? 0.0f : expf(m - mnew);
        float psum = 0.0f;
#pragma unroll
        for (int j = 0; j < NS; j++) {
            float p = (s[j] == -INFINITY) ? 0.0f : expf(s[j] - mnew);
            Ps[r * TP + ql + 4 * j] = p;
            psum += p;
        }
        psum += __shfl_xor_sync(KC_FULL_MASK, psum, 1);
        psum += __shfl_xor_sync(KC_FULL_MASK, psum, 2);
        l = l * alpha + psum;
        m = mnew;
        __syncwarp(); /* the quad's P row is complete */
#pragma unroll
        for (int e = 0; e < ND; e++) o[e] *= alpha;
        for (int j = 0; j < TILE; j += 4) {
            float4 p4 = kc_ld4(&Ps[r * TP + j]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int e4 = 0; e4 < ND / 4; e4++)
                    kc_axpy4(&o[4 * e4], kc_comp(p4, u),
                             kc_ld4(&Vs[(j + u) * DP + e4 * 16 + ql * 4]));
        }
    }

    if (qpos < T) {
        /* l >= 1 here: the row's own maximum contributes exp(0). */
        float inv = 1.0f / l;
        float *orow = out + ((size_t)b * T + qpos) * C + (size_t)h * HS;
#pragma unroll
        for (int e = 0; e < ND; e++) {
            int d = KC_DIM(ql, e);
            if (d < HS) orow[d] = o[e] * inv;
        }
        if (ql == 0) lse[(size_t)bh * T + qpos] = m + logf(l);
    }
}

/* --- backward --------------------------------------------------------------------------- */

/* Drow[(b, h), t] = sum_d dO[b, t, h, d] * O[b, t, h, d]; one warp per row. */
__global__ void kc_attn_rowdot_kernel(float *__restrict__ Drow, const float *__restrict__ dout,
                                      const float *__restrict__ out, int B, int T, int NH, int HS)
{
    size_t w = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    int lane = threadIdx.x % 32;
    if (w >= (size_t)B * NH * T) return; /* warp-uniform */
    int t = (int)(w % T);
    size_t bh = w / T;
    int h = (int)(bh % NH), b = (int)(bh / NH), C = NH * HS;
    size_t off = ((size_t)b * T + t) * C + (size_t)h * HS;
    float acc = 0.0f;
    for (int d = lane; d < HS; d += 32) acc += dout[off + d] * out[off + d];
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(KC_FULL_MASK, acc, o);
    if (lane == 0) Drow[w] = acc;
}

/* dK and dV of one key tile; the tile row of a quad is a key. */
template <int D, int TILE>
__global__ void __launch_bounds__(TILE * 4)
    kc_attn_backward_dkv_kernel(float *dqkv, const float *__restrict__ dout,
                                const float *__restrict__ qkv, const float *__restrict__ lse,
                                const float *__restrict__ Drow, int T, int NH, int HS, float scale)
{
    constexpr int NS = TILE / 4, ND = D / 4, DP = KC_DP(D), TP = KC_TP(TILE);
    extern __shared__ __align__(16) float smem[];
    float *Ks = smem, *Vs = Ks + TILE * DP, *Qs = Vs + TILE * DP, *dOs = Qs + TILE * DP;
    float *Ps = dOs + TILE * DP, *dSs = Ps + TILE * TP, *Ls = dSs + TILE * TP, *Ds = Ls + TILE;

    const int r = threadIdx.x >> 2, ql = threadIdx.x & 3;
    const int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const size_t C3 = (size_t)3 * C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float *obase = dout + (size_t)b * T * C + (size_t)h * HS;
    const int k0 = kt * TILE, kpos = k0 + r;

    kc_load_tile<D, TILE>(Ks, base + C, C3, k0, T, HS);
    kc_load_tile<D, TILE>(Vs, base + 2 * C, C3, k0, T, HS);

    float dk[ND], dv[ND];
#pragma unroll
    for (int e = 0; e < ND; e++) dk[e] = dv[e] = 0.0f;

    const int nqt = (T + TILE - 1) / TILE;
    for (int qt = kt; qt < nqt; qt++) { /* earlier queries cannot see these keys */
        const int q0 = qt * TILE;
        __syncthreads();
        kc_load_tile<D, TILE>(Qs, base, C3, q0, T, HS);
        kc_load_tile<D, TILE>(dOs, obase, (size_t)C, q0, T, HS);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) {
            int t = q0 + i;
            Ls[i] = t < T ? lse[(size_t)bh * T + t] : 0.0f;
            Ds[i] = t < T ? Drow[(size_t)bh * T + t] : 0.0f;
        }
        __syncthreads();

        float s[NS], dp[NS];
#pragma unroll
        for (int j = 0; j < NS; j++) s[j] = dp[j] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            float4 k4 = kc_ld4(&Ks[r * DP + d]), v4 = kc_ld4(&Vs[r * DP + d]);
#pragma unroll
            for (int j = 0; j < NS; j++) {
                int i = ql + 4 * j;
                s[j] = kc_dot4(s[j], k4, kc_ld4(&Qs[i * DP + d]));
                dp[j] = kc_dot4(dp[j], v4, kc_ld4(&dOs[i * DP + d]));
            }
        }
#pragma unroll
        for (int j = 0; j < NS; j++) {
            int i = ql + 4 * j, qpos = q0 + i;
            bool valid = qpos < T && kpos <= qpos;
            float p = valid ? expf(s[j] * scale - Ls[i]) : 0.0f;
            Ps[r * TP + i] = p;
            dSs[r * TP + i] = p * (dp[j] - Ds[i]);
        }
        __syncwarp();
        for (int i = 0; i < TILE; i += 4) {
            float4 p4 = kc_ld4(&Ps[r * TP + i]), ds4 = kc_ld4(&dSs[r * TP + i]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int e4 = 0; e4 < ND / 4; e4++) {
                    int off = (i + u) * DP + e4 * 16 + ql * 4;
                    kc_axpy4(&dv[4 * e4], kc_comp(p4, u), kc_ld4(&dOs[off]));
                    kc_axpy4(&dk[4 * e4], kc_comp(ds4, u), kc_ld4(&Qs[off]));
                }
        }
    }

    if (kpos < T) {
        float *grow = dqkv + ((size_t)b * T + kpos) * C3 + (size_t)h * HS;
#pragma unroll
        for (int e = 0; e < ND; e++) {
            int d = KC_DIM(ql, e);
            if (d < HS) {
                grow[C + d] += scale * dk[e];
                grow[2 * C + d] += dv[e];
            }
        }
    }
}

/* dQ of one query tile; the tile row of a quad is a query. */
template <int D, int TILE>
__global__ void __launch_bounds__(TILE * 4)
    kc_attn_backward_dq_kernel(float *dqkv, const float *__restrict__ dout,
                               const float *__restrict__ qkv, const float *__restrict__ lse,
                               const float *__restrict__ Drow, int T, int NH, int HS, float scale)
{
    constexpr int NS = TILE / 4, ND = D / 4, DP = KC_DP(D), TP = KC_TP(TILE);
    extern __shared__ __align__(16) float smem[];
    float *Qs = smem, *dOs = Qs + TILE * DP, *Ks = dOs + TILE * DP, *Vs = Ks + TILE * DP;
    float *dSs = Vs + TILE * DP;

    const int r = threadIdx.x >> 2, ql = threadIdx.x & 3;
    const int qt = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / NH, h = bh % NH;
    const int C = NH * HS;
    const size_t C3 = (size_t)3 * C;
    const float *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
    const float *obase = dout + (size_t)b * T * C + (size_t)h * HS;
    const int q0 = qt * TILE, qpos = q0 + r;
    const float Lr = qpos < T ? lse[(size_t)bh * T + qpos] : 0.0f;
    const float Dr = qpos < T ? Drow[(size_t)bh * T + qpos] : 0.0f;

    kc_load_tile<D, TILE>(Qs, base, C3, q0, T, HS);
    kc_load_tile<D, TILE>(dOs, obase, (size_t)C, q0, T, HS);

    float dq[ND];
#pragma unroll
    for (int e = 0; e < ND; e++) dq[e] = 0.0f;

    const int nkt = min(T - 1, q0 + TILE - 1) / TILE + 1;
    for (int kt = 0; kt < nkt; kt++) {
        const int k0 = kt * TILE;
        __syncthreads();
        kc_load_tile<D, TILE>(Ks, base + C, C3, k0, T, HS);
        kc_load_tile<D, TILE>(Vs, base + 2 * C, C3, k0, T, HS);
        __syncthreads();

        float s[NS], dp[NS];
#pragma unroll
        for (int j = 0; j < NS; j++) s[j] = dp[j] = 0.0f;
#pragma unroll 2
        for (int d = 0; d < D; d += 4) {
            float4 q4 = kc_ld4(&Qs[r * DP + d]), do4 = kc_ld4(&dOs[r * DP + d]);
#pragma unroll
            for (int j = 0; j < NS; j++) {
                int jj = ql + 4 * j;
                s[j] = kc_dot4(s[j], q4, kc_ld4(&Ks[jj * DP + d]));
                dp[j] = kc_dot4(dp[j], do4, kc_ld4(&Vs[jj * DP + d]));
            }
        }
#pragma unroll
        for (int j = 0; j < NS; j++) {
            int jj = ql + 4 * j, kpos = k0 + jj;
            bool valid = qpos < T && kpos <= qpos;
            float p = valid ? expf(s[j] * scale - Lr) : 0.0f;
            dSs[r * TP + jj] = p * (dp[j] - Dr);
        }
        __syncwarp();
        for (int j = 0; j < TILE; j += 4) {
            float4 ds4 = kc_ld4(&dSs[r * TP + j]);
#pragma unroll
            for (int u = 0; u < 4; u++)
#pragma unroll
                for (int e4 = 0; e4 < ND / 4; e4++)
                    kc_axpy4(&dq[4 * e4], kc_comp(ds4, u),
                             kc_ld4(&Ks[(j + u) * DP + e4 * 16 + ql * 4]));
        }
    }

    if (qpos < T) {
        float *grow = dqkv + ((size_t)b * T + qpos) * C3 + (size_t)h * HS;
#pragma unroll
        for (int e = 0; e < ND; e++) {
            int d = KC_DIM(ql, e);
            if (d < HS) grow[d] += scale * dq[e];
        }
    }
}

/* --- dispatch --------------------------------------------------------------------------- */

/* The padded head dimension for HS, or 0 when HS is not supported. */
static int kc_attn_dim(int HS)
{
    return HS <= 32 ? 32 : HS <= 64 ? 64 : HS <= 128 ? 128 : 0;
}

template <int D, int TILE> static int kc_attn_set_smem(kc_ctx *c, int optin)
{
    size_t need[3] = {KC_FWD_SMEM(D, TILE), KC_DKV_SMEM(D, KC_BWD_TILE),
                      KC_DQ_SMEM(D, KC_BWD_TILE)};
    for (int i = 0; i < 3; i++)
        if (need[i] > (size_t)optin) {
            char what[96];
            snprintf(what, sizeof what,
                     "attention at head size %d needs %zu bytes of shared memory", D, need[i]);
            return kc_fail(c, __FILE__, __LINE__, what, "more than the device allows per block",
                           optin);
        }
    return KC_CUDA(c, cudaFuncSetAttribute(kc_attn_forward_kernel<D, TILE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)need[0])) &&
           KC_CUDA(c, cudaFuncSetAttribute(kc_attn_backward_dkv_kernel<D, KC_BWD_TILE>,
                                           cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)need[1])) &&
           KC_CUDA(c,
                   cudaFuncSetAttribute(kc_attn_backward_dq_kernel<D, KC_BWD_TILE>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need[2]));
}

int kern_cuda_attention_init(kc_ctx *c)
{
    int optin = 0;
    if (!KC_CUDA(
            c, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device)))
        return 0;
    return kc_attn_set_smem<32, 64>(c, optin) && kc_attn_set_smem<64, 64>(c, optin) &&
           kc_attn_set_smem<128, 32>(c, optin);
}

template <int D, int TILE>
static void kc_attn_forward_launch(kc_ctx *c, float *out, float *lse, const float *qkv, int B,
                                   int T, int NH, int HS)
{
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    float scale = (float)(1.0 / sqrt((double)HS));
    kc_attn_forward_kernel<D, TILE>
        <<<grid, TILE * 4, KC_FWD_SMEM(D, TILE), c->stream>>>(out, lse, qkv, T, NH, HS, scale);
    KC_LAUNCHED(c, "kc_attn_forward_kernel");
}

template <int D>
static void kc_attn_backward_launch(kc_ctx *c, float *dqkv, const float *dout, const float *qkv,
                                    const float *lse, const float *Drow, int B, int T, int NH,
                                    int HS)
{
    const int TILE = KC_BWD_TILE;
    dim3 grid((unsigned)((T + TILE - 1) / TILE), (unsigned)(B * NH));
    float scale = (float)(1.0 / sqrt((double)HS));
    kc_attn_backward_dkv_kernel<D, TILE><<<grid, TILE * 4, KC_DKV_SMEM(D, TILE), c->stream>>>(
        dqkv, dout, qkv, lse, Drow, T, NH, HS, scale);
    KC_LAUNCHED(c, "kc_attn_backward_dkv_kernel");
    kc_attn_backward_dq_kernel<D, TILE><<<grid, TILE * 4, KC_DQ_SMEM(D, TILE), c->stream>>>(
        dqkv, dout, qkv, lse, Drow, T, NH, HS, scale);
    KC_LAUNCHED(c, "kc_attn_backward_dq_kernel");
}

static int kc_attn_check(kc_ctx *c, int B, int T, int NH, int HS)
{
    if (B <= 0 || T <= 0 || NH <= 0) return 0;
    if (kc_attn_dim(HS) && B * NH <= 65535) return 1;
    char what[96];
    snprintf(what, sizeof what, "attention B=%d NH=%d HS=%d", B, NH, HS);
    return kc_fail(c, __FILE__, __LINE__, what, "unsupported: needs HS <= 128, B*NH <= 65535", HS);
}

void kern_cuda_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                                 int NH, int HS)
{
    kc_ctx *c = kc_of(k);
    if (!kc_attn_check(c, B, T, NH, HS)) return;
    switch (kc_attn_dim(HS)) {
    case 32:
        kc_attn_forward_launch<32, 64>(c, out, lse, qkv, B, T, NH, HS);
        break;
    case 64:
        kc_attn_forward_launch<64, 64>(c, out, lse, qkv, B, T, NH, HS);
        break;
    default:
        kc_attn_forward_launch<128, 32>(c, out, lse, qkv, B, T, NH, HS);
        break;
    }
}

void kern_cuda_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int NH, int HS)
{
    kc_ctx *c = kc_of(k);
    if (!dqkv || !kc_attn_check(c, B, T, NH, HS)) return;
    size_t rows = (size_t)B * NH * T;
    float *Drow = (float *)kc_scratch(c, rows * sizeof(float));
    if (!Drow) return;
    kc_attn_rowdot_kernel<<<kc_blocks(rows * 32, 256, 1u << 30), 256, 0, c->stream>>>(
        Drow, dout, out, B, T, NH, HS);
    KC_LAUNCHED(c, "kc_attn_rowdot_kernel");
    switch (kc_attn_dim(HS)) {
    case 32:
        kc_attn_backward_launch<32>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, HS);
        break;
    case 64:
        kc_attn_backward_launch<64>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, HS);
        break;
    default:
        kc_attn_backward_launch<128>(c, dqkv, dout, qkv, lse, Drow, B, T, NH, HS);
        break;
    }
}
