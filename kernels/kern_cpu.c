/* kern_cpu.c — the "cpu" backend: OpenBLAS sgemm for every matrix product, OpenMP with
 * k->threads threads for everything else, vectorizable loops for the elementwise ops.
 *
 * There is one thread pool: OpenBLAS is held to one thread and we split its work across
 * our OpenMP threads ourselves (two pools on two cores starve each other). Split points
 * never cut a dot product or a reduction, and every reduction has a fixed order, so the
 * results do not depend on the thread count.
 *
 * Not for: the readable version of any op (kern_ref.c), device memory (cuda/). */
#include "kernels/kern_impl.h"
#include "common/log.h"
#include "common/status.h"

#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* Below this many elements an elementwise op runs on the calling thread: waking the pool
 * costs more than the work. */
#define CPU_SERIAL_BELOW 32768
/* A matrix product is cut into chunks of whole output rows, one per thread. OpenBLAS must
 * compute every row the same way whatever the cut, so chunk edges fall on multiples of
 * CPU_GEMM_GRAIN rows (a multiple of the kernels' register tiles: cuts at multiples of 16
 * rows keep the AVX-512 results, of 24 the AVX2 ones; measured on OpenBLAS 0.3.21) and no
 * chunk is below CPU_GEMM_MIN_MACS multiply-adds (OpenBLAS switches to other "small
 * matrix" kernels at M*N*K <= 1e6 on AVX-512). A product too small to cut that way runs
 * whole on one thread. */
#define CPU_GEMM_GRAIN    48
#define CPU_GEMM_MIN_MACS 2.1e6
/* Query/key rows per block in attention: blocks above the causal diagonal are skipped. */
#define CPU_ATTN_BLOCK 64
/* sumsq adds this many fixed partial sums in order, whatever the thread count. */
#define CPU_SUMSQ_PARTS 64

typedef struct {
    int nscratch;    /* one scratch buffer per pool thread */
    float **scratch; /* attention's T x T score and gradient matrices */
    size_t *cap;     /* floats in each scratch buffer */
} cpu_ctx_t;

static inline int cpu_min(int a, int b)
{
    return a < b ? a : b;
}

/* Thread `tid` of `nth` gets rows [*lo, *hi) of n, cut at multiples of `grain`. */
static void cpu_split(int n, int grain, int nth, int tid, int *lo, int *hi)
{
    long units = (n + grain - 1) / grain;
    long u0 = units * tid / nth, u1 = units * (tid + 1) / nth;
    *lo = (int)(u0 * grain < n ? u0 * grain : n);
    *hi = (int)(u1 * grain < n ? u1 * grain : n);
}

/* exp(x) for float, written so that loops over it vectorize (no calls, no branches):
 * Cephes' expf (x = n ln2 + r, |r| <= ln2/2, degree-6 polynomial), relative error below
 * 1e-7 over [-87, 88.3] (8.4e-8 measured against double exp). Below -87 it returns 0; above 88.3 it
 * returns exp(88.3). NaN in, NaN out. */
static inline float cpu_expf(float x)
{
    float xc = x > 88.3f ? 88.3f : x;
    xc = xc < -87.0f ? -87.0f : xc;
    /* round x log2(e) to the nearest integer by adding 1.5 * 2^23 */
    float t = fmaf(xc, 1.44269504088896341f, 12582912.0f);
    float n = t - 12582912.0f;
    uint32_t tbits;
    memcpy(&tbits, &t, sizeof tbits);
    float r = fmaf(n, -0.693359375f, xc);
    r = fmaf(n, 2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = fmaf(p, r, 1.3981999507e-3f);
    p = fmaf(p, r, 8.3334519073e-3f);
    p = fmaf(p, r, 4.1665795894e-2f);
    p = fmaf(p, r, 1.6666665459e-1f);
    p = fmaf(p, r, 5.0000001201e-1f);
    float y = fmaf(p, r * r, r) + 1.0f;
    uint32_t ebits = (tbits - 0x4B400000u + 127u) << 23; /* 2^n */
    float s;
    memcpy(&s, &ebits, sizeof s);
    y *= s;
    return x < -87.0f ? 0.0f : y;
}

/* --- memory ------------------------------------------------------------------------ */

/* Large copies and clears are split across the pool (gradients are zeroed every step). */
static void cpu_memcpy(kern_t *k, void *dst, const void *src, size_t bytes)
{
    if (bytes < ((size_t)1 << 20)) {
        if (bytes) memcpy(dst, src, bytes);
        return;
    }
    long chunks = (long)((bytes + 65535) / 65536);
#pragma omp parallel for num_threads(k->threads) schedule(static)
    for (long i = 0; i < chunks; i++) {
        size_t off = (size_t)i * 65536, len = bytes - off < 65536 ? bytes - off : 65536;
        memcpy((char *)dst + off, (const char *)src + off, len);
    }
}

static void cpu_zero(kern_t *k, void *p, size_t bytes)
{
    if (bytes < ((size_t)1 << 20)) {
        if (bytes) memset(p, 0, bytes);
        return;
    }
    long chunks = (long)((bytes + 65535) / 65536);
#pragma omp parallel for num_threads(k->threads) schedule(static)
    for (long i = 0; i < chunks; i++) {
        size_t off = (size_t)i * 65536, len = bytes - off < 65536 ? bytes - off : 65536;
        memset((char *)p + off, 0, len);
    }
}

static void cpu_sync(kern_t *k)
{
    (void)k;
}

static void cpu_release(kern_t *k)
{
    cpu_ctx_t *ctx = k->ctx;
    if (ctx) {
        for (int i = 0; i < ctx->nscratch; i++) free(ctx->scratch[i]);
        free(ctx->scratch);
        free(ctx->cap);
        free(ctx);
    }
    free(k);
}

/* --- linear algebra ---------------------------------------------------------------- */

/* Chunks for `rows` output rows of `row_macs` multiply-adds each: as many as there are
 * threads, fewer when a chunk would be too small (see CPU_GEMM_GRAIN). */
static int cpu_gemm_chunks(int rows, double row_macs, int threads)
{
    int units = (rows + CPU_GEMM_GRAIN - 1) / CPU_GEMM_GRAIN;
    int n = threads < units ? threads : units;
    for (; n > 1; n--) {
        int ok = 1;
        for (int c = 0; c < n && ok; c++) {
            int lo, hi;
            cpu_split(rows, CPU_GEMM_GRAIN, n, c, &lo, &hi);
            ok = (double)(hi - lo) * row_macs >= CPU_GEMM_MIN_MACS;
        }
        if (ok) break;
    }
    return n > 1 ? n : 1;
}

/* Chunks are fixed before the threads start; a thread takes chunks tid, tid + nth, ... so
 * that a smaller team than asked for still computes the same chunks. */
static void cpu_matmul_forward(kern_t *k, float *out, const float *inp, const float *w, int N,
                               int C, int OC)
{
    int chunks = cpu_gemm_chunks(N, (double)C * OC, k->threads);
#pragma omp parallel num_threads(chunks)
    for (int c = omp_get_thread_num(); c < chunks; c += omp_get_num_threads()) {
        int lo, hi;
        cpu_split(N, CPU_GEMM_GRAIN, chunks, c, &lo, &hi);
        if (hi > lo)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, hi - lo, OC, C, 1.0f,
                        inp + (size_t)lo * C, C, w, C, 0.0f, out + (size_t)lo * OC, OC);
    }
}

/* dinp is cut by rows of N, dw by rows of OC: each chunk owns whole output rows, and each
 * output element is one full dot product. */
static void cpu_matmul_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC)
{
    int cin = dinp ? cpu_gemm_chunks(N, (double)C * OC, k->threads) : 0;
    int cw = dw ? cpu_gemm_chunks(OC, (double)N * C, k->threads) : 0;
    int team = cin > cw ? cin : cw;
    if (!team) return;
#pragma omp parallel num_threads(team)
    {
        int tid = omp_get_thread_num(), nth = omp_get_num_threads(), lo, hi;
        for (int c = tid; c < cin; c += nth) {
            cpu_split(N, CPU_GEMM_GRAIN, cin, c, &lo, &hi);
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, hi - lo, C, OC, 1.0f,
                            dout + (size_t)lo * OC, OC, w, C, 1.0f, dinp + (size_t)lo * C, C);
        }
        for (int c = tid; c < cw; c += nth) {
            cpu_split(OC, CPU_GEMM_GRAIN, cw, c, &lo, &hi);
            if (hi > lo)
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, hi - lo, C, N, 1.0f, dout + lo,
                            OC, inp, C, 1.0f, dw + (size_t)lo * C, C);
        }
    }
}

/* --- embedding --------------------------------------------------------------------- */

static void cpu_embedding_forward(kern_t *k, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * C >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++)
        memcpy(out + (size_t)n * C, wte + (size_t)tokens[n] * C, (size_t)C * sizeof(float));
}

/* Rows may repeat a token, so threads own column ranges and each walks every row in order
 * (no races, and the sum order is fixed). */
static void cpu_embedding_backward(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                                   int N, int C)
{
    if (!dwte) return;
#pragma omp parallel num_threads(k->threads) if ((size_t)N * C >= CPU_SERIAL_BELOW)
    {
        int lo, hi;
        cpu_split(C, 16, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
        for (int n = 0; n < N && hi > lo; n++) {
            float *restrict dst = dwte + (size_t)tokens[n] * C;
            const float *restrict src = dout + (size_t)n * C;
#pragma omp simd
            for (int c = lo; c < hi; c++) dst[c] += src[c];
        }
    }
}

/* --- RMSNorm ----------------------------------------------------------------------- */

static void cpu_rmsnorm_forward(kern_t *k, float *out, float *rstd, const float *inp,
                                const float *w, int N, int C, float eps)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * C >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++) {
        const float *restrict x = inp + (size_t)n * C;
        float *restrict y = out + (size_t)n * C;
        float ss = 0;
#pragma omp simd reduction(+ : ss)
        for (int c = 0; c < C; c++) ss += x[c] * x[c];
        float r = 1.0f / sqrtf(ss / (float)C + eps);
#pragma omp simd
        for (int c = 0; c < C; c++) y[c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

/* dx_j = r w_j dy_j - (r^3 / C) x_j sum_i(dy_i w_i x_i); dw_j += sum_n dy_j x_j r. */
static void cpu_rmsnorm_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int N, int C)
{
    int nt = (size_t)N * C >= CPU_SERIAL_BELOW ? k->threads : 1;
    if (dinp) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int n = 0; n < N; n++) {
            const float *restrict x = inp + (size_t)n * C;
            const float *restrict dy = dout + (size_t)n * C;
            float *restrict dx = dinp + (size_t)n * C;
            float r = rstd[n], dot = 0;
#pragma omp simd reduction(+ : dot)
            for (int c = 0; c < C; c++) dot += dy[c] * w[c] * x[c];
            float coef = r * r * r / (float)C * dot;
#pragma omp simd
            for (int c = 0; c < C; c++) dx[c] += r * w[c] * dy[c] - coef * x[c];
        }
    }
    if (dw) {
        /* columns per thread, every row in order: the sum over rows never depends on nt */
#pragma omp parallel num_threads(nt)
        {
            int lo, hi;
            cpu_split(C, 16, omp_get_num_threads(), omp_get_thread_num(), &lo, &hi);
            for (int n = 0; n < N && hi > lo; n++) {
                const float *restrict x = inp + (size_t)n * C;
                const float *restrict dy = dout + (size_t)n * C;
                float r = rstd[n];
#pragma omp simd
                for (int c = lo; c < hi; c++) dw[c] += dy[c] * x[c] * r;
            }
        }
    }
}

/* --- RoPE -------------------------------------------------------------------------- */

static void cpu_rope_rotate(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS,
                            float sign)
{
    assert(HS % 2 == 0);
    int C = NH * HS, half = HS / 2;
    int rows = B * T;
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)rows * 2 * C >= CPU_SERIAL_BELOW)
    for (int row = 0; row < rows; row++) {
        int t = row % T;
        const float *f = freqs + (size_t)t * half * 2;
        for (int hh = 0; hh < 2 * NH; hh++) { /* q heads, then k heads */
            float *restrict x0 = qkv + (size_t)row * 3 * C + (size_t)hh * HS;
            float *restrict x1 = x0 + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                float c = f[2 * i], s = sign * f[2 * i + 1];
                float a = x0[i], b = x1[i];
                x0[i] = a * c - b * s;
                x1[i] = b * c + a * s;
            }
        }
    }
}

static void cpu_rope_forward(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH,
                             int HS)
{
    cpu_rope_rotate(k, qkv, freqs, B, T, NH, HS, 1.0f);
}

static void cpu_rope_backward(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH,
                              int HS)
{
    cpu_rope_rotate(k, dqkv, freqs, B, T, NH, HS, -1.0f);
}

/* --- attention --------------------------------------------------------------------- */

/* Makes sure every pool thread has `floats` of scratch: 0, or -1 with the failure recorded
 * (kern_fail, STATUS_ENOMEM; the op then computes nothing and the caller reads
 * kern_status). */
static int cpu_scratch_reserve(kern_t *k, size_t floats)
{
    cpu_ctx_t *ctx = k->ctx;
    for (int i = 0; i < ctx->nscratch; i++) {
        if (ctx->cap[i] >= floats) continue;
        free(ctx->scratch[i]);
        ctx->scratch[i] = aligned_alloc(64, (floats * sizeof(float) + 63) / 64 * 64);
        ctx->cap[i] = ctx->scratch[i] ? floats : 0;
        if (!ctx->scratch[i]) {
            kern_fail(k, STATUS_ENOMEM, "out of memory for %zu bytes of attention scratch",
                      floats * sizeof(float));
            return -1;
        }
    }
    return 0;
}

/* One (b, h): S = scale Q K^T by row blocks (blocks right of the diagonal are never
 * computed), causal softmax in place, O = P V. Q, K, V, O are strided views (ld 3C, C). */
static void cpu_attention_forward_head(float *O, float *lse, const float *Q, const float *K,
                                       const float *V, float *S, int T, int C, int HS)
{
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int r0 = 0; r0 < T; r0 += CPU_ATTN_BLOCK) {
        int r1 = cpu_min(T, r0 + CPU_ATTN_BLOCK);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, scale,
                    Q + (size_t)r0 * C3, C3, K, C3, 0.0f, S + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++) {
            float *restrict s = S + (size_t)t * T;
            float m = -INFINITY, sum = 0;
#pragma omp simd reduction(max : m)
            for (int j = 0; j <= t; j++) m = s[j] > m ? s[j] : m;
#pragma omp simd reduction(+ : sum)
            for (int j = 0; j <= t; j++) {
                s[j] = cpu_expf(s[j] - m);
                sum += s[j];
            }
            float inv = 1.0f / sum;
#pragma omp simd
            for (int j = 0; j <= t; j++) s[j] *= inv;
            for (int j = t + 1; j < r1; j++) s[j] = 0.0f;
            lse[t] = m + logf(sum);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, 1.0f,
                    S + (size_t)r0 * T, T, V, C3, 0.0f, O + (size_t)r0 * C, C);
    }
}

static void cpu_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int HS)
{
    int C = NH * HS;
    size_t C3 = (size_t)3 * C;
    if (cpu_scratch_reserve(k, (size_t)T * T)) return;
    cpu_ctx_t *ctx = k->ctx;
#pragma omp parallel for num_threads(k->threads) schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        const float *base = qkv + (size_t)b * T * C3 + (size_t)h * HS;
        cpu_attention_forward_head(out + (size_t)b * T * C + (size_t)h * HS, lse + (size_t)bh * T,
                                   base, base + C, base + 2 * C, ctx->scratch[omp_get_thread_num()],
                                   T, C, HS);
    }
}

/* One (b, h), flash-style: P = exp(scale Q K^T - lse) recomputed by row blocks,
 * D = rowsum(dO * O), dS = P * (dO V^T - D), then dQ += scale dS K, dK += scale dS^T Q,
 * dV += P^T dO, each as sgemm over the causal blocks only. P and dS are T x T scratch. */
static void cpu_attention_backward_head(float *dQ, float *dK, float *dV, const float *dO,
                                        const float *Q, const float *K, const float *V,
                                        const float *O, const float *lse, float *P, float *dS,
                                        int T, int C, int HS)
{
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)HS);
    for (int r0 = 0; r0 < T; r0 += CPU_ATTN_BLOCK) {
        int r1 = cpu_min(T, r0 + CPU_ATTN_BLOCK);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, scale,
                    Q + (size_t)r0 * C3, C3, K, C3, 0.0f, P + (size_t)r0 * T, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, HS, 1.0f,
                    dO + (size_t)r0 * C, C, V, C3, 0.0f, dS + (size_t)r0 * T, T);
        for (int t = r0; t < r1; t++) {
            float *restrict p = P + (size_t)t * T;
            float *restrict ds = dS + (size_t)t * T;
            const float *restrict o = O + (size_t)t * C;
            const float *restrict dot = dO + (size_t)t * C;
            float l = lse[t], D = 0;
#pragma omp simd reduction(+ : D)
            for (int d = 0; d < HS; d++) D += dot[d] * o[d];
#pragma omp simd
            for (int j = 0; j <= t; j++) {
                p[j] = cpu_expf(p[j] - l);
                ds[j] = p[j] * (ds[j] - D);
            }
            for (int j = t + 1; j < r1; j++) p[j] = ds[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, HS, r1, scale,
                    dS + (size_t)r0 * T, T, K, C3, 1.0f, dQ + (size_t)r0 * C3, C3);
    }
    /* key/value rows c0..c1 receive from query rows c0..T-1 (rows below are masked) */
    for (int c0 = 0; c0 < T; c0 += CPU_ATTN_BLOCK) {
        int c1 = cpu_min(T, c0 + CPU_ATTN_BLOCK);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, HS, T - c0, scale,
                    dS + (size_t)c0 * T + c0, T, Q + (size_t)c0 * C3, C3, 1.0f,
                    dK + (size_t)c0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, c1 - c0, HS, T - c0, 1.0f,
                    P + (size_t)c0 * T + c0, T, dO + (size_t)c0 * C, C, 1.0f, dV + (size_t)c0 * C3,
                    C3);
    }
}

/* Different (b, h) write disjoint rows/columns of dqkv, so the pairs run in parallel. */
static void cpu_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int NH, int HS)
{
    if (!dqkv) return;
    int C = NH * HS;
    size_t C3 = (size_t)3 * C;
    if (cpu_scratch_reserve(k, (size_t)2 * T * T)) return;
    cpu_ctx_t *ctx = k->ctx;
#pragma omp parallel for num_threads(k->threads) schedule(static)
    for (int bh = 0; bh < B * NH; bh++) {
        int b = bh / NH, h = bh % NH;
        size_t qoff = (size_t)b * T * C3 + (size_t)h * HS;
        size_t ooff = (size_t)b * T * C + (size_t)h * HS;
        float *P = ctx->scratch[omp_get_thread_num()];
        cpu_attention_backward_head(dqkv + qoff, dqkv + qoff + C, dqkv + qoff + 2 * C, dout + ooff,
                                    qkv + qoff, qkv + qoff + C, qkv + qoff + 2 * C, out + ooff,
                                    lse + (size_t)bh * T, P, P + (size_t)T * T, T, C, HS);
    }
}

/* --- SwiGLU ------------------------------------------------------------------------ */

static void cpu_swiglu_forward(kern_t *k, float *out, const float *h, int N, int F)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * F >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++) {
        const float *restrict g = h + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        float *restrict y = out + (size_t)n * F;
#pragma omp simd
        for (int f = 0; f < F; f++) y[f] = g[f] / (1.0f + cpu_expf(-g[f])) * u[f];
    }
}

static void cpu_swiglu_backward(kern_t *k, float *dh, const float *dout, const float *h, int N,
                                int F)
{
    if (!dh) return;
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * F >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++) {
        const float *restrict g = h + (size_t)n * 2 * F;
        const float *restrict u = g + F;
        const float *restrict dy = dout + (size_t)n * F;
        float *restrict dg = dh + (size_t)n * 2 * F;
        float *restrict du = dg + F;
#pragma omp simd
        for (int f = 0; f < F; f++) {
            float sig = 1.0f / (1.0f + cpu_expf(-g[f]));
            dg[f] += dy[f] * u[f] * sig * (1.0f + g[f] * (1.0f - sig));
            du[f] += dy[f] * g[f] * sig;
        }
    }
}

/* --- cross-entropy ----------------------------------------------------------------- */

/* max and sum of exp(x - max) of one row. */
static void cpu_row_softmax_stats(const float *restrict x, int V, float *max, float *sum)
{
    float m = -INFINITY, s = 0;
#pragma omp simd reduction(max : m)
    for (int i = 0; i < V; i++) m = x[i] > m ? x[i] : m;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < V; i++) s += cpu_expf(x[i] - m);
    *max = m;
    *sum = s;
}

static void cpu_crossentropy_forward(kern_t *k, float *losses, const float *logits,
                                     const int32_t *targets, int N, int V)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * V >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float m, s;
        cpu_row_softmax_stats(x, V, &m, &s);
        losses[n] = m + logf(s) - x[targets[n]];
    }
}

/* No restrict between dlogits and logits: they may be the same buffer. Each element is
 * read before it is written, and the target's logit is saved first. */
static void cpu_crossentropy_backward(kern_t *k, float *dlogits, const float *logits,
                                      const int32_t *targets, float dloss, int N, int V)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if ((size_t)N * V >= CPU_SERIAL_BELOW)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        float m, s;
        cpu_row_softmax_stats(x, V, &m, &s);
        /* exp(x - max) / sum rather than exp(x - lse): lse's rounding would cost 1e-6 */
        float inv = 1.0f / s, xt = x[targets[n]];
#pragma omp simd
        for (int i = 0; i < V; i++) dx[i] = dloss * (cpu_expf(x[i] - m) * inv);
        dx[targets[n]] = dloss * (cpu_expf(xt - m) * inv - 1.0f);
    }
}

/* --- elementwise ------------------------------------------------------------------- */

/* out may be a or b, hence no restrict; lanes only ever touch their own index. */
static void cpu_add(kern_t *k, float *out, const float *a, const float *b, size_t n)
{
#pragma omp parallel for simd num_threads(k->threads)                                              \
    schedule(static) if (parallel                                                                  \
                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_axpy(kern_t *k, float *restrict y, float alpha, const float *restrict x, size_t n)
{
#pragma omp parallel for simd num_threads(k->threads)                                              \
    schedule(static) if (parallel                                                                  \
                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void cpu_scale(kern_t *k, float *x, float alpha, size_t n)
{
#pragma omp parallel for simd num_threads(k->threads)                                              \
    schedule(static) if (parallel                                                                  \
                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

/* CPU_SUMSQ_PARTS fixed slices, each summed on its own, then added in order: the same
 * result for any thread count. */
static double cpu_sumsq(kern_t *k, const float *x, size_t n)
{
    double part[CPU_SUMSQ_PARTS];
    size_t len = (n + CPU_SUMSQ_PARTS - 1) / CPU_SUMSQ_PARTS;
#pragma omp parallel for num_threads(k->threads) schedule(static) if (parallel                     \
                                                                      : n >= CPU_SERIAL_BELOW)
    for (int p = 0; p < CPU_SUMSQ_PARTS; p++) {
        size_t lo = (size_t)p * len < n ? (size_t)p * len : n;
        size_t hi = lo + len < n ? lo + len : n;
        double s = 0;
#pragma omp simd reduction(+ : s)
        for (size_t i = lo; i < hi; i++) s += (double)x[i] * (double)x[i];
        part[p] = s;
    }
    double total = 0;
    for (int p = 0; p < CPU_SUMSQ_PARTS; p++) total += part[p];
    return total;
}

/* An integer sum: the same for any thread count and order. */
static uint64_t cpu_hash64(kern_t *k, const float *x, size_t n)
{
    uint64_t sum = 0;
#pragma omp parallel for num_threads(k->threads) schedule(static) reduction(+ : sum) if (parallel  \
                                                                                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        sum += kern_hash64_word(i, b);
    }
    return kern_hash64_finish(n, sum);
}

/* --- optimizer --------------------------------------------------------------------- */

static void cpu_adamw(kern_t *k, float *restrict p, const float *restrict g, float *restrict m,
                      float *restrict v, size_t n, float lr, float beta1, float beta2, float eps,
                      float wd, int t)
{
    /* bias corrections as multipliers: one division and one square root per element */
    float step = (float)(lr / (1.0 - pow(beta1, t)));
    float rbc2 = (float)(1.0 / (1.0 - pow(beta2, t)));
    float keep = 1.0f - lr * wd;
#pragma omp parallel for simd num_threads(k->threads)                                              \
    schedule(static) if (parallel                                                                  \
                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) {
        float mi = beta1 * m[i] + (1.0f - beta1) * g[i];
        float vi = beta2 * v[i] + (1.0f - beta2) * g[i] * g[i];
        m[i] = mi;
        v[i] = vi;
        p[i] = keep * p[i] - step * mi / (sqrtf(vi * rbc2) + eps);
    }
}

/* --- compression (DeMo transform, blockwise quantization) ---------------------------
 * Not a hot path: a host backend's DeMo and codecs run in compress/ on its own buffers.
 * These ops exist so that every backend has the table, parallel over tiles or blocks, each
 * computed by one thread in kern_ref.c's order: bit-identical to "ref" for any thread
 * count. topk uses the device's algorithm (a bitwise search for the k-th largest key, no
 * scratch), so the host tests check that algorithm against ref's ranks. */

/* One tile of the DCT (inverse 0) or its inverse (1); see ref_dct_tile. */
static void cpu_dct_tile(float *restrict out, size_t ldo, const float *restrict in, size_t ldi,
                         const float *restrict br, const float *restrict bc, int cr, int cc,
                         int inverse)
{
    float col[256];
    for (int i = 0; i < cr; i++)
        for (int a = 0; a < cc; a++) {
            const float *x = in + (size_t)i * ldi;
            float acc = 0.0f;
            if (inverse)
                for (int b = 0; b < cc; b++) acc += x[b] * bc[(size_t)b * cc + a];
            else
                for (int b = 0; b < cc; b++) acc += x[b] * bc[(size_t)a * cc + b];
            out[(size_t)i * ldo + a] = acc;
        }
    for (int a = 0; a < cc; a++) {
        for (int i = 0; i < cr; i++) col[i] = out[(size_t)i * ldo + a];
        for (int u = 0; u < cr; u++) {
            float acc = 0.0f;
            if (inverse)
                for (int i = 0; i < cr; i++) acc += br[(size_t)i * cr + u] * col[i];
            else
                for (int i = 0; i < cr; i++) acc += br[(size_t)u * cr + i] * col[i];
            out[(size_t)u * ldo + a] = acc;
        }
    }
}

static void cpu_dct(kern_t *k, float *out, const float *in, const float *br, const float *bc,
                    int64_t rows, int64_t cols, int cr, int cc, int inverse)
{
    assert(cr >= 1 && cr <= 256 && cc >= 1 && cc <= 256 && rows % cr == 0 && cols % cc == 0);
    const int64_t ntc = cols / cc, tiles = (rows / cr) * ntc;
    const size_t tn = (size_t)cr * cc;
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if (parallel                                                                  \
                         : (size_t)(rows * cols) >= CPU_SERIAL_BELOW)
    for (int64_t t = 0; t < tiles; t++) {
        int64_t tr = t / ntc, tc = t % ntc;
        size_t grid = (size_t)(tr * cr) * (size_t)cols + (size_t)(tc * cc), tile = (size_t)t * tn;
        if (inverse)
            cpu_dct_tile(out + grid, (size_t)cols, in + tile, (size_t)cc, br, bc, cr, cc, 1);
        else
            cpu_dct_tile(out + tile, (size_t)cc, in + grid, (size_t)cols, br, bc, cr, cc, 0);
    }
}

static void cpu_dct_forward(kern_t *k, float *coef, const float *x, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    cpu_dct(k, coef, x, br, bc, rows, cols, cr, cc, 0);
}

static void cpu_dct_inverse(kern_t *k, float *x, const float *coef, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    cpu_dct(k, x, coef, br, bc, rows, cols, cr, cc, 1);
}

/* Top-k key: |x| bits above, the complemented 16-bit index below (47 bits): larger keys
 * come first, and the keys of one tile are distinct. */
static inline uint64_t cpu_topk_key(float x, int i)
{
    uint32_t b;
    memcpy(&b, &x, 4);
    return (uint64_t)(b & 0x7fffffffu) << 16 | (uint32_t)(0xffff - i);
}

/* The kk-th largest key of a tile, found bit by bit from the top: the largest thr with at
 * least kk keys >= thr. Stops early once exactly kk keys are >= the candidate. */
static uint64_t cpu_topk_threshold(const float *x, int tn, int kk)
{
    uint64_t thr = 0;
    if (kk >= tn) return 0;
    for (int b = 46; b >= 0; b--) {
        uint64_t cand = thr | (uint64_t)1 << b;
        int cnt = 0;
        for (int i = 0; i < tn; i++) cnt += cpu_topk_key(x[i], i) >= cand;
        if (cnt >= kk) {
            thr = cand;
            if (cnt == kk) break;
        }
    }
    return thr;
}

static void cpu_topk(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn,
                     int kk)
{
    assert(kk >= 1 && kk <= tn && tn <= 65536);
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if (parallel                                                                  \
                         : (size_t)tiles * tn >= CPU_SERIAL_BELOW)
    for (int64_t t = 0; t < tiles; t++) {
        const float *xt = x + (size_t)t * tn;
        uint64_t thr = cpu_topk_threshold(xt, tn, kk);
        size_t e = (size_t)t * kk;
        for (int i = 0; i < tn; i++)
            if (cpu_topk_key(xt[i], i) >= thr) {
                idx[e] = (uint16_t)i;
                val[e++] = xt[i];
            }
    }
}

static void cpu_scatter(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles,
                        int tn, int kk, int bf16)
{
#pragma omp parallel for num_threads(k->threads)                                                   \
    schedule(static) if (parallel                                                                  \
                         : (size_t)tiles * tn >= CPU_SERIAL_BELOW)
    for (int64_t t = 0; t < tiles; t++) {
        float *xt = x + (size_t)t * tn;
        memset(xt, 0, (size_t)tn * sizeof(float));
        for (int j = 0; j < kk; j++) {
            size_t e = (size_t)t * kk + j;
            float v = val[e];
            if (bf16) {
                uint32_t b;
                memcpy(&b, &v, 4);
                b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
                memcpy(&v, &b, 4);
            }
            xt[idx[e]] = v;
        }
    }
}

static void cpu_apply_sign(kern_t *k, float *restrict p, const uint8_t *restrict signs, float lr,
                           size_t n)
{
#pragma omp parallel for simd num_threads(k->threads)                                              \
    schedule(static) if (parallel                                                                  \
                         : n >= CPU_SERIAL_BELOW)
    for (size_t i = 0; i < n; i++) {
        unsigned code = (signs[i >> 2] >> (2 * (i & 3))) & 3u;
        float s = (float)(code == 1) - (float)(code == 2);
        p[i] -= lr * s;
    }
}

/* One block of quantize; q points at the block's first q byte (int4: its first octet,
 * blocks being even). */
static void cpu_quantize_block(uint8_t *scale, uint8_t *q, const float *x, size_t len, int bits)
{
    const float lim = bits == 8 ? 127.0f : 7.0f;
    float amax = 0.0f;
    uint32_t bad = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
        float a = fabsf(x[i]);
        amax = a > amax ? a : amax;
    }
    float s = bad ? NAN : amax / lim, inv = 1.0f / s;
    memcpy(scale, &s, 4);
    int use_inv = isfinite(inv) != 0, zero = bad || s == 0.0f;
    for (size_t i = 0; i < len; i++) {
        float v = 0.0f;
        if (!zero) {
            v = rintf(use_inv ? x[i] * inv : x[i] / s);
            v = v > lim ? lim : v < -lim ? -lim : v;
        }
        if (bits == 8)
            q[i] = (uint8_t)(int8_t)v;
        else if (i % 2)
            q[i / 2] |= (uint8_t)(((int)v + 8) << 4);
        else
            q[i / 2] = (uint8_t)((int)v + 8);
    }
}

static void cpu_quantize(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits,
                         uint32_t block)
{
    size_t nb = (n + block - 1) / block;
    uint8_t *q = payload + 4 * nb;
#pragma omp parallel for num_threads(k->threads) schedule(static) if (parallel                     \
                                                                      : n >= CPU_SERIAL_BELOW)
    for (size_t b = 0; b < nb; b++) {
        size_t off = b * block, len = n - off < block ? n - off : block;
        cpu_quantize_block(payload + 4 * b, bits == 8 ? q + off : q + off / 2, x + off, len, bits);
    }
}

static void cpu_dequantize(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                           uint32_t block)
{
    size_t nb = (n + block - 1) / block;
    const uint8_t *q = payload + 4 * nb;
#pragma omp parallel for num_threads(k->threads) schedule(static) if (parallel                     \
                                                                      : n >= CPU_SERIAL_BELOW)
    for (size_t b = 0; b < nb; b++) {
        size_t off = b * block, len = n - off < block ? n - off : block;
        float s;
        memcpy(&s, payload + 4 * b, 4);
        for (size_t i = off; i < off + len; i++) {
            int v = bits == 8 ? (int)(int8_t)q[i] : ((q[i / 2] >> (4 * (i % 2))) & 15) - 8;
            x[i] = (float)v * s;
        }
    }
}

/* --- construction ------------------------------------------------------------------ */

/* OpenBLAS picks its kernels when it loads, from a table of CPU models; a model newer than
 * the library (e.g. OpenBLAS 0.3.21 on Emerald Rapids) falls back to the SSE3 "Prescott"
 * kernels, 2-3x slower. The choice can only be overridden before the library loads, by
 * OPENBLAS_CORETYPE in the environment: the swarmtrain binary re-executes itself with it
 * (tools/main.c); a library user is told once. */
const char *kern_cpu_blas_better_core(void)
{
    const char *core = openblas_get_corename();
    if (!core || getenv("OPENBLAS_CORETYPE")) return NULL;
    __builtin_cpu_init();
    const char *better = NULL;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        better = "SkylakeX";
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        better = "Haswell";
    static const char *weak[] = {"Prescott", "Core2",       "Penryn", "Dunnington", "Nehalem",
                                 "Atom",     "Sandybridge", "Katmai", "Coppermine", "Northwood"};
    for (size_t i = 0; better && i < sizeof weak / sizeof *weak; i++)
        if (!strcmp(core, weak[i])) return better;
    return NULL;
}

static void cpu_check_blas_core(void)
{
    static int warned;
    const char *better = kern_cpu_blas_better_core();
    if (warned || !better) return;
    warned = 1;
    log_warn("kern cpu: OpenBLAS does not know this CPU and uses its %s kernels; set "
             "OPENBLAS_CORETYPE=%s in the environment for 2-3x faster matrix products",
             openblas_get_corename(), better);
}

kern_t *kern_cpu_new(int threads, char *err)
{
    if (threads <= 0) threads = 1;
    kern_t *k = calloc(1, sizeof *k);
    cpu_ctx_t *ctx = calloc(1, sizeof *ctx);
    if (!k || !ctx) goto nomem;
    k->ctx = ctx;
    ctx->nscratch = threads;
    ctx->scratch = calloc((size_t)threads, sizeof *ctx->scratch);
    ctx->cap = calloc((size_t)threads, sizeof *ctx->cap);
    if (!ctx->scratch || !ctx->cap) goto nomem;

    /* OpenBLAS gets no threads of its own: we split its work across ours. */
    openblas_set_num_threads(1);
    cpu_check_blas_core();

    k->name = "cpu";
    k->threads = threads;
    k->on_device = 0;
    k->alloc = kern_host_alloc;
    k->free = kern_host_free;
    k->upload = cpu_memcpy;
    k->download = cpu_memcpy;
    k->copy = cpu_memcpy;
    k->zero = cpu_zero;
    k->sync = cpu_sync;
    k->release = cpu_release;
    k->matmul_forward = cpu_matmul_forward;
    k->matmul_backward = cpu_matmul_backward;
    k->embedding_forward = cpu_embedding_forward;
    k->embedding_backward = cpu_embedding_backward;
    k->rmsnorm_forward = cpu_rmsnorm_forward;
    k->rmsnorm_backward = cpu_rmsnorm_backward;
    k->rope_forward = cpu_rope_forward;
    k->rope_backward = cpu_rope_backward;
    k->attention_forward = cpu_attention_forward;
    k->attention_backward = cpu_attention_backward;
    k->swiglu_forward = cpu_swiglu_forward;
    k->swiglu_backward = cpu_swiglu_backward;
    k->crossentropy_forward = cpu_crossentropy_forward;
    k->crossentropy_backward = cpu_crossentropy_backward;
    k->add = cpu_add;
    k->axpy = cpu_axpy;
    k->scale = cpu_scale;
    k->sumsq = cpu_sumsq;
    k->hash64 = cpu_hash64;
    k->adamw = cpu_adamw;
    k->dct_forward = cpu_dct_forward;
    k->dct_inverse = cpu_dct_inverse;
    k->topk = cpu_topk;
    k->scatter = cpu_scatter;
    k->apply_sign = cpu_apply_sign;
    k->quantize = cpu_quantize;
    k->dequantize = cpu_dequantize;
    return k;

nomem:
    if (ctx) {
        free(ctx->scratch);
        free(ctx->cap);
        free(ctx);
    }
    free(k);
    status_set(err, STATUS_ENOMEM, "cpu: out of memory");
    return NULL;
}
