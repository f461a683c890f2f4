/* kern_cuda.cu — the "cuda" backend: device memory, cuBLAS matmuls and own kernels for
 * every op in kernels.h except attention (kern_cuda_attn.cu) and the compression ops
 * (kern_cuda_compress.cu), and kern_cuda_new.
 *
 * Every op is queued on one stream per backend in call order; only download, sumsq and
 * sync wait for the device. A failed CUDA or cuBLAS call cannot be returned from an op,
 * so it is recorded in the context (kern_cuda_last_error), printed once on stderr, and
 * read by callers through kern_status / kern_error (kernels.h).
 *
 * Numerics: matmuls use TF32 tensor cores with fp32 accumulation unless
 * SWARMTRAIN_CUDA_TF32=0 (then about 1e-6 of the "ref" result, else about 1e-3,
 * normalized); everything else is fp32 with the reductions noted at each kernel.
 * Every op is deterministic: no atomics, and every reduction has a fixed order for given
 * sizes (cuBLAS is deterministic on one GPU model with one stream).
 *
 * Not for: host pointers (ops take device memory from k->alloc), several threads calling
 * one kern_t at once, GPUs older than sm_80 (refused at kern_cuda_new), cub/thrust (they
 * cost minutes of compile time per file). */
#include "kernels/cuda/kern_cuda.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- errors and scratch ----------------------------------------------------------------- */

int kc_fail(kc_ctx *c, const char *file, int line, const char *call, const char *what, int code)
{
    if (c && !c->failed) {
        const char *base = strrchr(file, '/');
        snprintf(c->err, sizeof c->err, "%s:%d: %s: %s (%d)", base ? base + 1 : file, line, call,
                 what ? what : "unknown error", code);
        c->failed = 1;
        fprintf(stderr, "swarmtrain: cuda backend failed: %s\n", c->err);
    }
    return 0;
}

void *kc_scratch(kc_ctx *c, size_t bytes)
{
    if (bytes <= c->scratch_bytes) return c->scratch;
    size_t want = bytes < ((size_t)1 << 20) ? ((size_t)1 << 20) : bytes + bytes / 4;
    /* cudaFree waits for the device, so work queued on the old buffer is done. */
    if (c->scratch) KC_CUDA(c, cudaFree(c->scratch));
    c->scratch = NULL;
    c->scratch_bytes = 0;
    if (!KC_CUDA(c, cudaMalloc(&c->scratch, want))) return c->scratch = NULL;
    c->scratch_bytes = want;
    return c->scratch;
}

extern "C" const char *kern_cuda_last_error(kern_t *k)
{
    kc_ctx *c = kc_of(k);
    return c->failed ? c->err : NULL;
}

extern "C" int kern_cuda_tf32(kern_t *k)
{
    return kc_of(k)->tf32;
}

/* --- device helpers --------------------------------------------------------------------- */

#define KC_THREADS  256
#define KC_GRID_CAP 65535u /* grid-stride loops cover the rest */

__device__ __forceinline__ float kc_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float kc_sigmoid(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

#define KC_FOR_EACH(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

/* --- memory ----------------------------------------------------------------------------- */

__global__ void kc_probe_kernel(int *x)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) *x = 0x5157;
}

static void *kc_alloc(kern_t *k, size_t bytes)
{
    kc_ctx *c = kc_of(k);
    void *p = NULL;
    size_t rounded = bytes ? (bytes + 255) / 256 * 256 : 256;
    /* An allocation failure is the caller's to handle (alloc may fail): not recorded as a
     * backend failure, just NULL. */
    if (cudaMalloc(&p, rounded) != cudaSuccess) {
        (void)cudaGetLastError(); /* clear it so later launch checks do not see it */
        return NULL;
    }
    if (!KC_CUDA(c, cudaMemsetAsync(p, 0, rounded, c->stream)) ||
        !KC_CUDA(c, cudaStreamSynchronize(c->stream))) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void kc_free(kern_t *k, void *p)
{
    if (p) KC_CUDA(kc_of(k), cudaFree(p));
}

static void kc_upload(kern_t *k, void *dst, const void *host_src, size_t bytes)
{
    kc_ctx *c = kc_of(k);
    if (!bytes) return;
    /* Synchronous: the caller may reuse host_src as soon as we return. */
    KC_CUDA(c, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, c->stream));
    KC_CUDA(c, cudaStreamSynchronize(c->stream));
}

static void kc_download(kern_t *k, void *host_dst, const void *src, size_t bytes)
{
    kc_ctx *c = kc_of(k);
    if (!bytes) return;
    KC_CUDA(c, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, c->stream));
    KC_CUDA(c, cudaStreamSynchronize(c->stream));
}

static void kc_copy(kern_t *k, void *dst, const void *src, size_t bytes)
{
    kc_ctx *c = kc_of(k);
    if (bytes) KC_CUDA(c, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->stream));
}

static void kc_zero(kern_t *k, void *p, size_t bytes)
{
    kc_ctx *c = kc_of(k);
    if (bytes) KC_CUDA(c, cudaMemsetAsync(p, 0, bytes, c->stream));
}

static void kc_sync(kern_t *k)
{
    kc_ctx *c = kc_of(k);
    KC_CUDA(c, cudaStreamSynchronize(c->stream));
}

static void kc_release(kern_t *k)
{
    kc_ctx *c = kc_of(k);
    if (c) {
        if (c->stream) cudaStreamSynchronize(c->stream);
        if (c->blas) cublasDestroy(c->blas);
        if (c->scratch) cudaFree(c->scratch);
        if (c->sumsq_dev) cudaFree(c->sumsq_dev);
        if (c->hash_dev) cudaFree(c->hash_dev);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c);
    }
    free(k);
}

/* --- matmul (cuBLAS) -------------------------------------------------------------------
 * cuBLAS is column-major, and a row-major (R, K) buffer read column-major is the (K, R)
 * transpose. So each product is computed transposed, with the buffers as they lie:
 *   forward   out^T (OC, N) = w (OC, C) . inp^T (C, N): buffer w is w^T (C, OC) -> op T,
 *             buffer inp is inp^T (C, N) -> op N, buffer out is out^T with ld OC;
 *   dinp      dinp^T (C, N) += w^T (C, OC) . dout^T (OC, N): both as they lie (op N, N);
 *   dw        dw^T (C, OC) += inp^T (C, N) . dout (N, OC): buffer dout is dout^T -> op T.
 * TF32 (default) rounds the inputs to 10 mantissa bits and accumulates in fp32. */

static void kc_matmul_forward(kern_t *k, float *out, const float *inp, const float *w, int N, int C,
                              int OC)
{
    kc_ctx *c = kc_of(k);
    const float one = 1.0f, zero = 0.0f;
    if (N <= 0 || OC <= 0) return;
    if (C <= 0) {
        KC_CUDA(c, cudaMemsetAsync(out, 0, (size_t)N * OC * sizeof(float), c->stream));
        return;
    }
    KC_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, w, C, inp, C, &zero,
                           out, OC));
}

static void kc_matmul_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                               const float *inp, const float *w, int N, int C, int OC)
{
    kc_ctx *c = kc_of(k);
    const float one = 1.0f;
    if (N <= 0 || C <= 0 || OC <= 0) return;
    if (dinp)
        KC_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, w, C, dout, OC,
                               &one, dinp, C));
    if (dw)
        KC_BLAS(c, cublasSgemm(c->blas, CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC,
                               &one, dw, C));
}

/* --- embedding -------------------------------------------------------------------------- */

__global__ void kc_embedding_forward_kernel(float *__restrict__ out,
                                            const int32_t *__restrict__ tokens,
                                            const float *__restrict__ wte, int N, int C)
{
    KC_FOR_EACH(i, (size_t)N * C)
    {
        size_t n = i / (size_t)C, col = i % (size_t)C;
        out[i] = wte[(size_t)tokens[n] * C + col];
    }
}

static void kc_embedding_forward(kern_t *k, float *out, const int32_t *tokens, const float *wte,
                                 int N, int C)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)N * C;
    if (!n) return;
    kc_embedding_forward_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0,
                                  c->stream>>>(out, tokens, wte, N, C);
    KC_LAUNCHED(c, "kc_embedding_forward_kernel");
}

/* The backward pass is deterministic without sorting: each row n links to the next row
 * with the same token (next[n], or -1), and the first row of each chain (no row links to
 * it) sums its chain in row order and adds the sum once to its dwte row. Cost: the link
 * scan is O(N * distance to the next equal token); the sums read dout once. */
__global__ void kc_embedding_link_kernel(int *__restrict__ next, int *__restrict__ has_prev,
                                         const int32_t *__restrict__ tokens, int N)
{
    int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    int32_t tok = tokens[n];
    int nx = -1;
    for (int m = n + 1; m < N; m++)
        if (tokens[m] == tok) {
            nx = m;
            break;
        }
    next[n] = nx;
    if (nx >= 0) has_prev[nx] = 1; /* each row has at most one predecessor: no race */
}

__global__ void kc_embedding_backward_kernel(float *__restrict__ dwte,
                                             const float *__restrict__ dout,
                                             const int32_t *__restrict__ tokens,
                                             const int *__restrict__ next,
                                             const int *__restrict__ has_prev, int C)
{
    int n = blockIdx.x;
    if (has_prev[n]) return; /* not a chain head; the whole block leaves */
    float *row = dwte + (size_t)tokens[n] * C;
    for (int col = threadIdx.x; col < C; col += blockDim.x) {
        float acc = 0.0f;
        for (int m = n; m >= 0; m = next[m]) acc += dout[(size_t)m * C + col];
        row[col] += acc;
    }
}

static void kc_embedding_backward(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                                  int N, int C)
{
    kc_ctx *c = kc_of(k);
    if (!dwte || N <= 0 || C <= 0) return;
    int *next = (int *)kc_scratch(c, 2 * (size_t)N * sizeof(int));
    if (!next) return;
    int *has_prev = next + N;
    KC_CUDA(c, cudaMemsetAsync(has_prev, 0, (size_t)N * sizeof(int), c->stream));
    kc_embedding_link_kernel<<<kc_blocks((size_t)N, KC_THREADS, 1u << 30), KC_THREADS, 0,
                               c->stream>>>(next, has_prev, tokens, N);
    KC_LAUNCHED(c, "kc_embedding_link_kernel");
    kc_embedding_backward_kernel<<<N, KC_THREADS, 0, c->stream>>>(dwte, dout, tokens, next,
                                                                  has_prev, C);
    KC_LAUNCHED(c, "kc_embedding_backward_kernel");
}

/* --- RMSNorm ---------------------------------------------------------------------------
 * One warp per row; sums of squares and dot products in fp32 lanes, reduced by shuffles
 * (fixed tree). */

#define KC_ROWS_PER_BLOCK (KC_THREADS / 32)

__global__ void kc_rmsnorm_forward_kernel(float *__restrict__ out, float *__restrict__ rstd,
                                          const float *__restrict__ inp,
                                          const float *__restrict__ w, int N, int C, float eps)
{
    int row = blockIdx.x * KC_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return; /* warp-uniform */
    const float *x = inp + (size_t)row * C;
    float *y = out + (size_t)row * C;
    float ss = 0.0f;
    for (int i = lane; i < C; i += 32) ss += x[i] * x[i];
    ss = kc_warp_sum(ss);
    float r = 1.0f / sqrtf(ss / (float)C + eps);
    for (int i = lane; i < C; i += 32) y[i] = x[i] * r * w[i];
    if (lane == 0) rstd[row] = r;
}

/* dx_j += r w_j dy_j - (r^3 / C) x_j sum_i(dy_i w_i x_i) (see kern_ref.c). */
__global__ void kc_rmsnorm_backward_dinp_kernel(float *__restrict__ dinp,
                                                const float *__restrict__ dout,
                                                const float *__restrict__ inp,
                                                const float *__restrict__ w,
                                                const float *__restrict__ rstd, int N, int C)
{
    int row = blockIdx.x * KC_ROWS_PER_BLOCK + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= N) return;
    const float *x = inp + (size_t)row * C, *dy = dout + (size_t)row * C;
    float *dx = dinp + (size_t)row * C;
    float dot = 0.0f;
    for (int i = lane; i < C; i += 32) dot += dy[i] * w[i] * x[i];
    dot = kc_warp_sum(dot);
    float r = rstd[row];
    float k3 = r * r * r / (float)C * dot;
    for (int i = lane; i < C; i += 32) dx[i] += r * w[i] * dy[i] - k3 * x[i];
}

/* dw_j += sum_n dy_nj x_nj r_n in two passes, deterministic: chunks of rows into
 * partial (P, C), then each column sums its P partials in order. */
__global__ void kc_rmsnorm_dw_partial_kernel(float *__restrict__ partial,
                                             const float *__restrict__ dout,
                                             const float *__restrict__ inp,
                                             const float *__restrict__ rstd, int N, int C,
                                             int rows_per_chunk)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x, p = blockIdx.y;
    if (col >= C) return;
    int n0 = p * rows_per_chunk, n1 = min(N, n0 + rows_per_chunk);
    float acc = 0.0f;
    for (int n = n0; n < n1; n++)
        acc += dout[(size_t)n * C + col] * inp[(size_t)n * C + col] * rstd[n];
    partial[(size_t)p * C + col] = acc;
}

__global__ void kc_rmsnorm_dw_sum_kernel(float *__restrict__ dw, const float *__restrict__ partial,
                                         int P, int C)
{
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (col >= C) return;
    float acc = 0.0f;
    for (int p = 0; p < P; p++) acc += partial[(size_t)p * C + col];
    dw[col] += acc;
}

static void kc_rmsnorm_forward(kern_t *k, float *out, float *rstd, const float *inp, const float *w,
                               int N, int C, float eps)
{
    kc_ctx *c = kc_of(k);
    if (N <= 0) return;
    unsigned blocks = (unsigned)((N + KC_ROWS_PER_BLOCK - 1) / KC_ROWS_PER_BLOCK);
    kc_rmsnorm_forward_kernel<<<blocks, KC_THREADS, 0, c->stream>>>(out, rstd, inp, w, N, C, eps);
    KC_LAUNCHED(c, "kc_rmsnorm_forward_kernel");
}

static void kc_rmsnorm_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, const float *rstd, int N, int C)
{
    kc_ctx *c = kc_of(k);
    if (N <= 0 || C <= 0) return;
    if (dinp) {
        unsigned blocks = (unsigned)((N + KC_ROWS_PER_BLOCK - 1) / KC_ROWS_PER_BLOCK);
        kc_rmsnorm_backward_dinp_kernel<<<blocks, KC_THREADS, 0, c->stream>>>(dinp, dout, inp, w,
                                                                              rstd, N, C);
        KC_LAUNCHED(c, "kc_rmsnorm_backward_dinp_kernel");
    }
    if (dw) {
        /* Chunks depend on N only, so the summation order is fixed for given sizes. */
        int rows_per_chunk = N / 256 > 32 ? (N + 255) / 256 : 32;
        int P = (N + rows_per_chunk - 1) / rows_per_chunk;
        float *partial = (float *)kc_scratch(c, (size_t)P * C * sizeof(float));
        if (!partial) return;
        dim3 grid((unsigned)((C + KC_THREADS - 1) / KC_THREADS), (unsigned)P);
        kc_rmsnorm_dw_partial_kernel<<<grid, KC_THREADS, 0, c->stream>>>(partial, dout, inp, rstd,
                                                                         N, C, rows_per_chunk);
        KC_LAUNCHED(c, "kc_rmsnorm_dw_partial_kernel");
        kc_rmsnorm_dw_sum_kernel<<<grid.x, KC_THREADS, 0, c->stream>>>(dw, partial, P, C);
        KC_LAUNCHED(c, "kc_rmsnorm_dw_sum_kernel");
    }
}

/* --- RoPE ------------------------------------------------------------------------------- */

/* One thread per rotated pair (b, t, q|k, h, i); sign -1 is the inverse rotation. */
__global__ void kc_rope_kernel(float *__restrict__ qkv, const float *__restrict__ freqs, int B,
                               int T, int NH, int HS, float sign)
{
    int half = HS / 2, C = NH * HS;
    KC_FOR_EACH(i, (size_t)B * T * 2 * NH * half)
    {
        int j = (int)(i % half);
        size_t rest = i / half;
        int h = (int)(rest % NH);
        rest /= NH;
        int part = (int)(rest % 2);
        size_t bt = rest / 2;
        int t = (int)(bt % T);
        float *x = qkv + bt * 3 * C + (size_t)part * C + (size_t)h * HS;
        float co = freqs[((size_t)t * half + j) * 2 + 0];
        float si = sign * freqs[((size_t)t * half + j) * 2 + 1];
        float x0 = x[j], x1 = x[j + half];
        x[j] = x0 * co - x1 * si;
        x[j + half] = x1 * co + x0 * si;
    }
}

static void kc_rope(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS,
                    float sign)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)B * T * 2 * NH * (HS / 2);
    if (!n || !qkv) return;
    kc_rope_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(
        qkv, freqs, B, T, NH, HS, sign);
    KC_LAUNCHED(c, "kc_rope_kernel");
}

static void kc_rope_forward(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS)
{
    kc_rope(k, qkv, freqs, B, T, NH, HS, 1.0f);
}

static void kc_rope_backward(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH,
                             int HS)
{
    kc_rope(k, dqkv, freqs, B, T, NH, HS, -1.0f);
}

/* --- SwiGLU ----------------------------------------------------------------------------- */

__global__ void kc_swiglu_forward_kernel(float *__restrict__ out, const float *__restrict__ h,
                                         int N, int F)
{
    KC_FOR_EACH(i, (size_t)N * F)
    {
        size_t n = i / F, f = i % F;
        float g = h[n * 2 * F + f], u = h[n * 2 * F + F + f];
        out[i] = g * kc_sigmoid(g) * u;
    }
}

/* silu'(g) = sig(g) (1 + g (1 - sig(g))). */
__global__ void kc_swiglu_backward_kernel(float *__restrict__ dh, const float *__restrict__ dout,
                                          const float *__restrict__ h, int N, int F)
{
    KC_FOR_EACH(i, (size_t)N * F)
    {
        size_t n = i / F, f = i % F;
        float g = h[n * 2 * F + f], u = h[n * 2 * F + F + f], d = dout[i];
        float sig = kc_sigmoid(g);
        dh[n * 2 * F + f] += d * u * sig * (1.0f + g * (1.0f - sig));
        dh[n * 2 * F + F + f] += d * g * sig;
    }
}

static void kc_swiglu_forward(kern_t *k, float *out, const float *h, int N, int F)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)N * F;
    if (!n) return;
    kc_swiglu_forward_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(
        out, h, N, F);
    KC_LAUNCHED(c, "kc_swiglu_forward_kernel");
}

static void kc_swiglu_backward(kern_t *k, float *dh, const float *dout, const float *h, int N,
                               int F)
{
    kc_ctx *c = kc_of(k);
    size_t n = (size_t)N * F;
    if (!n || !dh) return;
    kc_swiglu_backward_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(
        dh, dout, h, N, F);
    KC_LAUNCHED(c, "kc_swiglu_backward_kernel");
}

/* --- cross-entropy ---------------------------------------------------------------------
 * One block per row. Each thread keeps an online (max, sum of exp) over its strided
 * elements; the pairs are merged by a fixed tree (shuffles, then the warps in order). */

struct kc_ms {
    float m, s;
};

__device__ __forceinline__ kc_ms kc_ms_merge(kc_ms a, kc_ms b)
{
    float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return a; /* both empty */
    kc_ms r;
    r.m = m;
    r.s = (a.m == -INFINITY ? 0.0f : a.s * expf(a.m - m)) +
          (b.m == -INFINITY ? 0.0f : b.s * expf(b.m - m));
    return r;
}

/* Log-sum-exp of x (V), returned to every thread of the block. All reads of x finish
 * before it returns (the __syncthreads below), which makes in-place backward safe. */
__device__ float kc_block_logsumexp(const float *x, int V)
{
    __shared__ kc_ms warp_ms[KC_THREADS / 32];
    kc_ms a = {-INFINITY, 0.0f};
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float v = x[i];
        if (v == -INFINITY) continue;
        if (v > a.m) {
            a.s = (a.m == -INFINITY ? 0.0f : a.s * expf(a.m - v)) + 1.0f;
            a.m = v;
        } else {
            a.s += expf(v - a.m);
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        kc_ms b;
        b.m = __shfl_xor_sync(0xffffffffu, a.m, o);
        b.s = __shfl_xor_sync(0xffffffffu, a.s, o);
        a = kc_ms_merge(a, b);
    }
    if (threadIdx.x % 32 == 0) warp_ms[threadIdx.x / 32] = a;
    __syncthreads();
    kc_ms t = warp_ms[0];
    for (int w = 1; w < (int)(blockDim.x / 32); w++) t = kc_ms_merge(t, warp_ms[w]);
    return t.m + logf(t.s);
}

__global__ void kc_crossentropy_forward_kernel(float *__restrict__ losses,
                                               const float *__restrict__ logits,
                                               const int32_t *__restrict__ targets, int V)
{
    const float *x = logits + (size_t)blockIdx.x * V;
    float lse = kc_block_logsumexp(x, V);
    if (threadIdx.x == 0) losses[blockIdx.x] = lse - x[targets[blockIdx.x]];
}

/* No __restrict__: dlogits may be logits. */
__global__ void kc_crossentropy_backward_kernel(float *dlogits, const float *logits,
                                                const int32_t *__restrict__ targets, float dloss,
                                                int V)
{
    const float *x = logits + (size_t)blockIdx.x * V;
    float *dx = dlogits + (size_t)blockIdx.x * V;
    float lse = kc_block_logsumexp(x, V);
    int target = targets[blockIdx.x];
    for (int i = threadIdx.x; i < V; i += blockDim.x) {
        float p = expf(x[i] - lse);
        dx[i] = dloss * (p - (i == target ? 1.0f : 0.0f));
    }
}

static void kc_crossentropy_forward(kern_t *k, float *losses, const float *logits,
                                    const int32_t *targets, int N, int V)
{
    kc_ctx *c = kc_of(k);
    if (N <= 0) return;
    kc_crossentropy_forward_kernel<<<N, KC_THREADS, 0, c->stream>>>(losses, logits, targets, V);
    KC_LAUNCHED(c, "kc_crossentropy_forward_kernel");
}

static void kc_crossentropy_backward(kern_t *k, float *dlogits, const float *logits,
                                     const int32_t *targets, float dloss, int N, int V)
{
    kc_ctx *c = kc_of(k);
    if (N <= 0) return;
    kc_crossentropy_backward_kernel<<<N, KC_THREADS, 0, c->stream>>>(dlogits, logits, targets,
                                                                     dloss, V);
    KC_LAUNCHED(c, "kc_crossentropy_backward_kernel");
}

/* --- elementwise ------------------------------------------------------------------------ */

/* No __restrict__: out may be a or b. */
__global__ void kc_add_kernel(float *out, const float *a, const float *b, size_t n)
{
    KC_FOR_EACH(i, n) out[i] = a[i] + b[i];
}

__global__ void kc_axpy_kernel(float *__restrict__ y, float alpha, const float *__restrict__ x,
                               size_t n)
{
    KC_FOR_EACH(i, n) y[i] += alpha * x[i];
}

__global__ void kc_scale_kernel(float *x, float alpha, size_t n)
{
    KC_FOR_EACH(i, n) x[i] *= alpha;
}

static void kc_add(kern_t *k, float *out, const float *a, const float *b, size_t n)
{
    kc_ctx *c = kc_of(k);
    if (!n) return;
    kc_add_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(out, a, b,
                                                                                       n);
    KC_LAUNCHED(c, "kc_add_kernel");
}

static void kc_axpy(kern_t *k, float *y, float alpha, const float *x, size_t n)
{
    kc_ctx *c = kc_of(k);
    if (!n) return;
    kc_axpy_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(y, alpha, x,
                                                                                        n);
    KC_LAUNCHED(c, "kc_axpy_kernel");
}

static void kc_scale(kern_t *k, float *x, float alpha, size_t n)
{
    kc_ctx *c = kc_of(k);
    if (!n) return;
    kc_scale_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(x, alpha,
                                                                                         n);
    KC_LAUNCHED(c, "kc_scale_kernel");
}

/* --- sumsq ------------------------------------------------------------------------------
 * Deterministic: a grid fixed by n (at most KC_SUMSQ_BLOCKS blocks), each thread sums its
 * strided elements in double, a fixed tree per block, then one block sums the partials
 * the same way. */

#define KC_SUMSQ_BLOCKS 1024u

/* The sum of v over the block's threads, by a fixed tree (T: double or an integer). */
template <typename T> __device__ T kc_block_sum(T v)
{
    __shared__ T buf[KC_THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = KC_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    return buf[0];
}

__global__ void kc_sumsq_partial_kernel(double *__restrict__ partial, const float *__restrict__ x,
                                        size_t n)
{
    double acc = 0.0;
    KC_FOR_EACH(i, n) acc += (double)x[i] * (double)x[i];
    double s = kc_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

/* One block adds the per-block partial sums, in a fixed order. */
template <typename T>
__global__ void kc_sum_final_kernel(T *__restrict__ result, const T *__restrict__ partial,
                                    unsigned nparts)
{
    T acc = 0;
    for (unsigned i = threadIdx.x; i < nparts; i += blockDim.x) acc += partial[i];
    T s = kc_block_sum(acc);
    if (threadIdx.x == 0) *result = s;
}

static double kc_sumsq(kern_t *k, const float *x, size_t n)
{
    kc_ctx *c = kc_of(k);
    double host = 0.0;
    if (!n) return 0.0;
    unsigned blocks = kc_blocks(n, KC_THREADS, KC_SUMSQ_BLOCKS);
    double *partial = (double *)kc_scratch(c, blocks * sizeof(double));
    if (!partial) return NAN;
    kc_sumsq_partial_kernel<<<blocks, KC_THREADS, 0, c->stream>>>(partial, x, n);
    KC_LAUNCHED(c, "kc_sumsq_partial_kernel");
    kc_sum_final_kernel<double><<<1, KC_THREADS, 0, c->stream>>>(c->sumsq_dev, partial, blocks);
    KC_LAUNCHED(c, "kc_sum_final_kernel<double>");
    if (!KC_CUDA(c, cudaMemcpyAsync(&host, c->sumsq_dev, sizeof host, cudaMemcpyDeviceToHost,
                                    c->stream)) ||
        !KC_CUDA(c, cudaStreamSynchronize(c->stream)))
        return NAN; /* a norm the caller cannot mistake for a good one */
    return host;
}

/* --- hash64 -----------------------------------------------------------------------------
 * The sum of kern_hash64_word over the elements, mod 2^64: integer additions, so the grid
 * and the order do not matter. Per-block partial sums, then one block adds them. */

__global__ void kc_hash64_partial_kernel(unsigned long long *__restrict__ partial,
                                         const float *__restrict__ x, size_t n)
{
    unsigned long long acc = 0;
    KC_FOR_EACH(i, n) acc += kern_hash64_word(i, __float_as_uint(x[i]));
    unsigned long long s = kc_block_sum(acc);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

static uint64_t kc_hash64(kern_t *k, const float *x, size_t n)
{
    kc_ctx *c = kc_of(k);
    unsigned long long sum = 0;
    if (n) {
        unsigned blocks = kc_blocks(n, KC_THREADS, KC_SUMSQ_BLOCKS);
        unsigned long long *partial =
            (unsigned long long *)kc_scratch(c, blocks * sizeof(unsigned long long));
        if (!partial) return 0;
        kc_hash64_partial_kernel<<<blocks, KC_THREADS, 0, c->stream>>>(partial, x, n);
        KC_LAUNCHED(c, "kc_hash64_partial_kernel");
        kc_sum_final_kernel<unsigned long long>
            <<<1, KC_THREADS, 0, c->stream>>>(c->hash_dev, partial, blocks);
        KC_LAUNCHED(c, "kc_sum_final_kernel<u64>");
        if (!KC_CUDA(c, cudaMemcpyAsync(&sum, c->hash_dev, sizeof sum, cudaMemcpyDeviceToHost,
                                        c->stream)) ||
            !KC_CUDA(c, cudaStreamSynchronize(c->stream)))
            return 0; /* recorded: kern_cuda_last_error says the backend failed */
    }
    return kern_hash64_finish(n, sum);
}

/* --- AdamW ------------------------------------------------------------------------------ */

__global__ void kc_adamw_kernel(float *__restrict__ p, const float *__restrict__ g,
                                float *__restrict__ m, float *__restrict__ v, size_t n, float lr,
                                float beta1, float beta2, float eps, float wd, float bc1, float bc2)
{
    KC_FOR_EACH(i, n)
    {
        float gi = g[i];
        float pi = p[i] - lr * wd * p[i];
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    }
}

static void kc_adamw(kern_t *k, float *p, const float *g, float *m, float *v, size_t n, float lr,
                     float beta1, float beta2, float eps, float wd, int t)
{
    kc_ctx *c = kc_of(k);
    if (!n) return;
    float bc1 = (float)(1.0 - pow((double)beta1, (double)t));
    float bc2 = (float)(1.0 - pow((double)beta2, (double)t));
    kc_adamw_kernel<<<kc_blocks(n, KC_THREADS, KC_GRID_CAP), KC_THREADS, 0, c->stream>>>(
        p, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2);
    KC_LAUNCHED(c, "kc_adamw_kernel");
}

/* --- construction ----------------------------------------------------------------------- */

static kern_t *kc_new_fail(kern_t *k, char *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static kern_t *kc_new_fail(kern_t *k, char *err, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, KC_ERR_LEN, fmt, ap);
        va_end(ap);
    }
    if (k) kc_release(k);
    (void)cudaGetLastError();
    return NULL;
}

/* The device is SWARMTRAIN_CUDA_DEVICE (default 0) among those CUDA_VISIBLE_DEVICES
 * shows; the backend stays on it. */
extern "C" kern_t *kern_cuda_new(char *err)
{
    int count = 0, dev = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess)
        return kc_new_fail(NULL, err, "no usable CUDA device: cudaGetDeviceCount: %s (%d)",
                           cudaGetErrorString(e), (int)e);
    if (count <= 0) return kc_new_fail(NULL, err, "no usable CUDA device: none found");
    const char *env = getenv("SWARMTRAIN_CUDA_DEVICE");
    if (env && *env) {
        char *end;
        long d = strtol(env, &end, 10);
        if (*end || d < 0 || d >= count)
            return kc_new_fail(NULL, err, "SWARMTRAIN_CUDA_DEVICE=%s: not a device index below %d",
                               env, count);
        dev = (int)d;
    }
    cudaDeviceProp prop;
    if ((e = cudaSetDevice(dev)) != cudaSuccess ||
        (e = cudaGetDeviceProperties(&prop, dev)) != cudaSuccess)
        return kc_new_fail(NULL, err, "CUDA device %d: %s (%d)", dev, cudaGetErrorString(e),
                           (int)e);
    if (prop.major < 8)
        return kc_new_fail(NULL, err,
                           "CUDA device %d (%s) has compute capability %d.%d; this backend "
                           "needs 8.0 or newer",
                           dev, prop.name, prop.major, prop.minor);

    kern_t *k = (kern_t *)calloc(1, sizeof *k);
    kc_ctx *c = (kc_ctx *)calloc(1, sizeof *c);
    if (!k || !c) {
        free(c);
        return kc_new_fail(k, err, "cuda: out of host memory");
    }
    k->ctx = c;
    c->device = dev;
    c->sm_count = prop.multiProcessorCount;
    snprintf(c->name, sizeof c->name, "cuda:%s", prop.name);
    const char *tf = getenv("SWARMTRAIN_CUDA_TF32");
    c->tf32 = !(tf && !strcmp(tf, "0"));

    if ((e = cudaStreamCreate(&c->stream)) != cudaSuccess)
        return kc_new_fail(k, err, "cuda: cudaStreamCreate: %s (%d)", cudaGetErrorString(e),
                           (int)e);
    cublasStatus_t s = cublasCreate(&c->blas);
    if (s != CUBLAS_STATUS_SUCCESS) {
        c->blas = NULL;
        return kc_new_fail(k, err, "cuda: cublasCreate: %s (%d)", cublasGetStatusString(s), (int)s);
    }
    if ((s = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS ||
        (s = cublasSetMathMode(c->blas, c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                : CUBLAS_DEFAULT_MATH)) != CUBLAS_STATUS_SUCCESS)
        return kc_new_fail(k, err, "cuda: cuBLAS setup: %s (%d)", cublasGetStatusString(s), (int)s);
    if ((e = cudaMalloc(&c->sumsq_dev, sizeof(double))) != cudaSuccess ||
        (e = cudaMalloc(&c->hash_dev, sizeof(unsigned long long))) != cudaSuccess)
        return kc_new_fail(k, err, "cuda: cudaMalloc: %s (%d)", cudaGetErrorString(e), (int)e);

    /* Probe: a kernel must run here (a build without code for this GPU fails now, not
     * at the first op). */
    int probe = 0;
    int *dprobe = (int *)kc_scratch(c, sizeof(int));
    if (dprobe) {
        kc_probe_kernel<<<1, 32, 0, c->stream>>>(dprobe);
        if (KC_LAUNCHED(c, "kc_probe_kernel"))
            KC_CUDA(c, cudaMemcpyAsync(&probe, dprobe, sizeof probe, cudaMemcpyDeviceToHost,
                                       c->stream));
        KC_CUDA(c, cudaStreamSynchronize(c->stream));
    }
    if (c->failed || probe != 0x5157)
        return kc_new_fail(k, err, "cuda: %s: a test kernel did not run: %s", c->name,
                           c->failed ? c->err : "wrong result");
    if (!kern_cuda_attention_init(c))
        return kc_new_fail(k, err, "cuda: %s: attention setup: %s", c->name, c->err);

    k->name = c->name;
    k->threads = 1;
    k->on_device = 1;
    k->failure = kern_cuda_last_error; /* kern_status reads the failure recorded here */
    k->alloc = kc_alloc;
    k->free = kc_free;
    k->upload = kc_upload;
    k->download = kc_download;
    k->copy = kc_copy;
    k->zero = kc_zero;
    k->sync = kc_sync;
    k->release = kc_release;
    k->matmul_forward = kc_matmul_forward;
    k->matmul_backward = kc_matmul_backward;
    k->embedding_forward = kc_embedding_forward;
    k->embedding_backward = kc_embedding_backward;
    k->rmsnorm_forward = kc_rmsnorm_forward;
    k->rmsnorm_backward = kc_rmsnorm_backward;
    k->rope_forward = kc_rope_forward;
    k->rope_backward = kc_rope_backward;
    k->attention_forward = kern_cuda_attention_forward;
    k->attention_backward = kern_cuda_attention_backward;
    k->swiglu_forward = kc_swiglu_forward;
    k->swiglu_backward = kc_swiglu_backward;
    k->crossentropy_forward = kc_crossentropy_forward;
    k->crossentropy_backward = kc_crossentropy_backward;
    k->add = kc_add;
    k->axpy = kc_axpy;
    k->scale = kc_scale;
    k->sumsq = kc_sumsq;
    k->hash64 = kc_hash64;
    k->adamw = kc_adamw;
    kern_cuda_compress_init(k);
    return k;
}
