/* kern_ref.c — the "ref" backend: plain single-threaded loops for every op in kernels.h,
 * written to be read and believed. It is the oracle the tests hold "cpu" and "cuda" to.
 * Reductions accumulate in double so that the oracle is closer to the truth than the
 * backends it judges.
 * Not for: speed (kern_cpu.c), anything a backend does not share with this one. */
#include "kernels/kern_impl.h"
#include "common/status.h"

#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- memory ------------------------------------------------------------------------ */

static void ref_memcpy(kern_t *k, void *dst, const void *src, size_t bytes)
{
    (void)k;
    if (bytes) memcpy(dst, src, bytes);
}

static void ref_zero(kern_t *k, void *p, size_t bytes)
{
    (void)k;
    if (bytes) memset(p, 0, bytes);
}

static void ref_sync(kern_t *k)
{
    (void)k;
}

static void ref_release(kern_t *k)
{
    free(k);
}

/* --- linear algebra ---------------------------------------------------------------- */

static void ref_matmul_forward(kern_t *k, float *out, const float *inp, const float *w, int N,
                               int C, int OC)
{
    (void)k;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < OC; o++) {
            double acc = 0;
            for (int c = 0; c < C; c++)
                acc += (double)inp[(size_t)n * C + c] * w[(size_t)o * C + c];
            out[(size_t)n * OC + o] = (float)acc;
        }
}

static void ref_matmul_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                                const float *inp, const float *w, int N, int C, int OC)
{
    (void)k;
    if (dinp)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)n * OC + o] * w[(size_t)o * C + c];
                dinp[(size_t)n * C + c] += (float)acc;
            }
    if (dw)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0;
                for (int n = 0; n < N; n++)
                    acc += (double)dout[(size_t)n * OC + o] * inp[(size_t)n * C + c];
                dw[(size_t)o * C + c] += (float)acc;
            }
}

/* --- embedding --------------------------------------------------------------------- */

static void ref_embedding_forward(kern_t *k, float *out, const int32_t *tokens, const float *wte,
                                  int N, int C)
{
    (void)k;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = wte[(size_t)tokens[n] * C + c];
}

static void ref_embedding_backward(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                                   int N, int C)
{
    (void)k;
    if (!dwte) return;
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) dwte[(size_t)tokens[n] * C + c] += dout[(size_t)n * C + c];
}

/* --- RMSNorm ----------------------------------------------------------------------- */

static void ref_rmsnorm_forward(kern_t *k, float *out, float *rstd, const float *inp,
                                const float *w, int N, int C, float eps)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        double ss = 0;
        for (int c = 0; c < C; c++) ss += (double)x[c] * x[c];
        float r = (float)(1.0 / sqrt(ss / C + eps));
        for (int c = 0; c < C; c++) out[(size_t)n * C + c] = x[c] * r * w[c];
        rstd[n] = r;
    }
}

/* y_i = x_i r w_i with r = (mean(x^2) + eps)^-1/2, so dr/dx_j = -r^3 x_j / C and
 * dx_j = r w_j dy_j - (r^3 / C) x_j sum_i(dy_i w_i x_i). */
static void ref_rmsnorm_backward(kern_t *k, float *dinp, float *dw, const float *dout,
                                 const float *inp, const float *w, const float *rstd, int N, int C)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        const float *dy = dout + (size_t)n * C;
        double r = rstd[n];
        if (dw)
            for (int c = 0; c < C; c++) dw[c] += (float)((double)dy[c] * x[c] * r);
        if (dinp) {
            double dot = 0;
            for (int c = 0; c < C; c++) dot += (double)dy[c] * w[c] * x[c];
            for (int c = 0; c < C; c++)
                dinp[(size_t)n * C + c] +=
                    (float)(r * w[c] * dy[c] - r * r * r / C * (double)x[c] * dot);
        }
    }
}

/* --- RoPE -------------------------------------------------------------------------- */

/* Rotates the q and k heads of every token by angle sign * theta(t, i). */
static void ref_rope_rotate(float *qkv, const float *freqs, int B, int T, int NH, int HS,
                            float sign)
{
    assert(HS % 2 == 0);
    int C = NH * HS, half = HS / 2;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int part = 0; part < 2; part++) /* q, then k */
                for (int h = 0; h < NH; h++) {
                    float *x = qkv + ((size_t)b * T + t) * 3 * C + (size_t)part * C + h * HS;
                    for (int i = 0; i < half; i++) {
                        float c = freqs[((size_t)t * half + i) * 2 + 0];
                        float s = sign * freqs[((size_t)t * half + i) * 2 + 1];
                        float x0 = x[i], x1 = x[i + half];
                        x[i] = x0 * c - x1 * s;
                        x[i + half] = x1 * c + x0 * s;
                    }
                }
}

static void ref_rope_forward(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH,
                             int HS)
{
    (void)k;
    ref_rope_rotate(qkv, freqs, B, T, NH, HS, 1.0f);
}

/* The rotation is orthogonal, so its gradient is its transpose: the inverse rotation. */
static void ref_rope_backward(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH,
                              int HS)
{
    (void)k;
    ref_rope_rotate(dqkv, freqs, B, T, NH, HS, -1.0f);
}

/* --- attention --------------------------------------------------------------------- */

static double ref_dot(const float *a, const float *b, int n)
{
    double acc = 0;
    for (int i = 0; i < n; i++) acc += (double)a[i] * b[i];
    return acc;
}

/* The scores are recomputed from q and k wherever they are needed, so that the oracle
 * needs no scratch memory (ops may not fail). */
static void ref_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                                  int NH, int HS)
{
    (void)k;
    int C = NH * HS;
    size_t C3 = (size_t)3 * C;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                double m = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    double s = scale * ref_dot(q, qkv + ((size_t)b * T + j) * C3 + C + h * HS, HS);
                    if (s > m) m = s;
                }
                double sum = 0;
                for (int j = 0; j <= t; j++)
                    sum += exp(scale * ref_dot(q, qkv + ((size_t)b * T + j) * C3 + C + h * HS, HS) -
                               m);
                double l = m + log(sum);
                float *o = out + ((size_t)b * T + t) * C + h * HS;
                for (int d = 0; d < HS; d++) o[d] = 0;
                for (int j = 0; j <= t; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * C3 + C + h * HS;
                    const float *vj = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
                    double p = exp(scale * ref_dot(q, kj, HS) - l);
                    for (int d = 0; d < HS; d++) o[d] += (float)(p * vj[d]);
                }
                lse[((size_t)b * NH + h) * T + t] = (float)l;
            }
}

/* With p_j = exp(s_j - lse), o = sum_j p_j v_j:
 *   dv_j += p_j do;  dp_j = do . v_j;  ds_j = p_j (dp_j - sum_i p_i dp_i);
 *   dq += scale sum_j ds_j k_j;  dk_j += scale ds_j q. */
static void ref_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                                   const float *out, const float *lse, int B, int T, int NH, int HS)
{
    (void)k;
    (void)out; /* D is summed from p and dp directly; out is what the fast paths use */
    if (!dqkv) return;
    int C = NH * HS;
    size_t C3 = (size_t)3 * C;
    double scale = 1.0 / sqrt((double)HS);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < T; t++) {
                const float *q = qkv + ((size_t)b * T + t) * C3 + h * HS;
                const float *dO = dout + ((size_t)b * T + t) * C + h * HS;
                float *dq = dqkv + ((size_t)b * T + t) * C3 + h * HS;
                double l = lse[((size_t)b * NH + h) * T + t];
                double D = 0;
                for (int j = 0; j <= t; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * C3 + C + h * HS;
                    const float *vj = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
                    D += exp(scale * ref_dot(q, kj, HS) - l) * ref_dot(dO, vj, HS);
                }
                for (int j = 0; j <= t; j++) {
                    const float *kj = qkv + ((size_t)b * T + j) * C3 + C + h * HS;
                    const float *vj = qkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
                    float *dk = dqkv + ((size_t)b * T + j) * C3 + C + h * HS;
                    float *dv = dqkv + ((size_t)b * T + j) * C3 + 2 * C + h * HS;
                    double p = exp(scale * ref_dot(q, kj, HS) - l);
                    double ds = p * (ref_dot(dO, vj, HS) - D);
                    for (int d = 0; d < HS; d++) {
                        dq[d] += (float)(scale * ds * kj[d]);
                        dk[d] += (float)(scale * ds * q[d]);
                        dv[d] += (float)(p * dO[d]);
                    }
                }
            }
}

/* --- SwiGLU ------------------------------------------------------------------------ */

static void ref_swiglu_forward(kern_t *k, float *out, const float *h, int N, int F)
{
    (void)k;
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double g = h[(size_t)n * 2 * F + f], u = h[(size_t)n * 2 * F + F + f];
            out[(size_t)n * F + f] = (float)(g / (1.0 + exp(-g)) * u);
        }
}

/* silu'(g) = sig(g) (1 + g (1 - sig(g))). */
static void ref_swiglu_backward(kern_t *k, float *dh, const float *dout, const float *h, int N,
                                int F)
{
    (void)k;
    if (!dh) return;
    for (int n = 0; n < N; n++)
        for (int f = 0; f < F; f++) {
            double g = h[(size_t)n * 2 * F + f], u = h[(size_t)n * 2 * F + F + f];
            double d = dout[(size_t)n * F + f];
            double sig = 1.0 / (1.0 + exp(-g));
            dh[(size_t)n * 2 * F + f] += (float)(d * u * sig * (1.0 + g * (1.0 - sig)));
            dh[(size_t)n * 2 * F + F + f] += (float)(d * g * sig);
        }
}

/* --- cross-entropy ----------------------------------------------------------------- */

static double ref_logsumexp(const float *x, int V)
{
    double m = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
        if (x[i] > m) m = x[i];
    for (int i = 0; i < V; i++) sum += exp(x[i] - m);
    return m + log(sum);
}

static void ref_crossentropy_forward(kern_t *k, float *losses, const float *logits,
                                     const int32_t *targets, int N, int V)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        losses[n] = (float)(ref_logsumexp(x, V) - x[targets[n]]);
    }
}

/* No restrict: dlogits may be logits. Each element is read before it is written. */
static void ref_crossentropy_backward(kern_t *k, float *dlogits, const float *logits,
                                      const int32_t *targets, float dloss, int N, int V)
{
    (void)k;
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * V;
        float *dx = dlogits + (size_t)n * V;
        double l = ref_logsumexp(x, V);
        for (int i = 0; i < V; i++) {
            double p = exp(x[i] - l);
            dx[i] = (float)(dloss * (p - (i == targets[n] ? 1.0 : 0.0)));
        }
    }
}

/* --- elementwise ------------------------------------------------------------------- */

static void ref_add(kern_t *k, float *out, const float *a, const float *b, size_t n)
{
    (void)k;
    for (size_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void ref_axpy(kern_t *k, float *y, float alpha, const float *x, size_t n)
{
    (void)k;
    for (size_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

static void ref_scale(kern_t *k, float *x, float alpha, size_t n)
{
    (void)k;
    for (size_t i = 0; i < n; i++) x[i] *= alpha;
}

static double ref_sumsq(kern_t *k, const float *x, size_t n)
{
    (void)k;
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

static uint64_t ref_hash64(kern_t *k, const float *x, size_t n)
{
    (void)k;
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], 4);
        sum += kern_hash64_word(i, b);
    }
    return kern_hash64_finish(n, sum);
}

/* --- optimizer --------------------------------------------------------------------- */

static void ref_adamw(kern_t *k, float *p, const float *g, float *m, float *v, size_t n, float lr,
                      float beta1, float beta2, float eps, float wd, int t)
{
    (void)k;
    double bc1 = 1.0 - pow(beta1, t), bc2 = 1.0 - pow(beta2, t);
    for (size_t i = 0; i < n; i++) {
        double pi = (double)p[i] - (double)lr * wd * p[i];
        double mi = beta1 * (double)m[i] + (1.0 - beta1) * g[i];
        double vi = beta2 * (double)v[i] + (1.0 - beta2) * (double)g[i] * g[i];
        m[i] = (float)mi;
        v[i] = (float)vi;
        p[i] = (float)(pi - lr * (mi / bc1) / (sqrt(vi / bc2) + eps));
    }
}

/* --- compression (DeMo transform, blockwise quantization) ---------------------------
 * Here the oracle is not "closer to the truth" but the host formats' own float
 * arithmetic, step for step: kernels/dct.c (each output a float sum in ascending order,
 * no fused multiply-add), demo_topk's selection, codec.c's int8/int4 rounding. Those
 * define what goes on the wire, so "ref" must reproduce them bit for bit (tested). */

/* One tile's y = Cr x Cc^T or its inverse, in place of small_gemm's two products:
 * pass 1 writes the intermediate (cr, cc) into the output tile; pass 2 combines it
 * column by column through col. Every sum runs in dct.c's order. */
static void ref_dct_tile(float *out, size_t ldo, const float *in, size_t ldi, const float *br,
                         const float *bc, int cr, int cc, int inverse)
{
    float col[256];
    /* pass 1: forward tmp[i][v] = sum_j x[i][j] bc[v][j]; inverse tmp[i][j] = sum_v
     * y[i][v] bc[v][j] */
    for (int i = 0; i < cr; i++)
        for (int a = 0; a < cc; a++) {
            float acc = 0.0f;
            for (int b = 0; b < cc; b++)
                acc += inverse ? in[(size_t)i * ldi + b] * bc[(size_t)b * cc + a]
                               : in[(size_t)i * ldi + b] * bc[(size_t)a * cc + b];
            out[(size_t)i * ldo + a] = acc;
        }
    /* pass 2: forward y[u][v] = sum_i br[u][i] tmp[i][v]; inverse x[i][j] = sum_u
     * br[u][i] tmp[u][j] */
    for (int a = 0; a < cc; a++) {
        for (int i = 0; i < cr; i++) col[i] = out[(size_t)i * ldo + a];
        for (int u = 0; u < cr; u++) {
            float acc = 0.0f;
            for (int i = 0; i < cr; i++)
                acc += inverse ? br[(size_t)i * cr + u] * col[i] : br[(size_t)u * cr + i] * col[i];
            out[(size_t)u * ldo + a] = acc;
        }
    }
}

static void ref_dct(float *out, const float *in, const float *br, const float *bc, int64_t rows,
                    int64_t cols, int cr, int cc, int inverse)
{
    const int64_t ntc = cols / cc;
    const size_t tn = (size_t)cr * cc;
    for (int64_t tr = 0; tr < rows / cr; tr++)
        for (int64_t tc = 0; tc < ntc; tc++) {
            size_t grid = (size_t)(tr * cr) * (size_t)cols + (size_t)(tc * cc);
            size_t tile = (size_t)(tr * ntc + tc) * tn;
            if (inverse)
                ref_dct_tile(out + grid, (size_t)cols, in + tile, (size_t)cc, br, bc, cr, cc, 1);
            else
                ref_dct_tile(out + tile, (size_t)cc, in + grid, (size_t)cols, br, bc, cr, cc, 0);
        }
}

static void ref_dct_forward(kern_t *k, float *coef, const float *x, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    (void)k;
    assert(cr >= 1 && cr <= 256 && cc >= 1 && cc <= 256 && rows % cr == 0 && cols % cc == 0);
    ref_dct(coef, x, br, bc, rows, cols, cr, cc, 0);
}

static void ref_dct_inverse(kern_t *k, float *x, const float *coef, const float *br,
                            const float *bc, int64_t rows, int64_t cols, int cr, int cc)
{
    (void)k;
    assert(cr >= 1 && cr <= 256 && cc >= 1 && cc <= 256 && rows % cr == 0 && cols % cc == 0);
    ref_dct(x, coef, br, bc, rows, cols, cr, cc, 1);
}

/* Order of the top-k: |x| (as bits) descending, then index ascending. */
static int ref_topk_before(const float *x, int i, int j)
{
    uint32_t a, b;
    memcpy(&a, &x[i], 4);
    memcpy(&b, &x[j], 4);
    a &= 0x7fffffffu, b &= 0x7fffffffu;
    return a > b || (a == b && i < j);
}

/* An element is kept when fewer than kk elements come before it. */
static void ref_topk(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn,
                     int kk)
{
    (void)k;
    assert(kk >= 1 && kk <= tn && tn <= 65536);
    for (int64_t t = 0; t < tiles; t++) {
        const float *xt = x + (size_t)t * tn;
        size_t e = (size_t)t * kk;
        for (int i = 0; i < tn; i++) {
            int before = 0;
            for (int j = 0; j < tn && before < kk; j++) before += ref_topk_before(xt, j, i);
            if (before < kk) {
                idx[e] = (uint16_t)i;
                val[e++] = xt[i];
            }
        }
    }
}

static float ref_round_bf16(float v)
{
    uint32_t b;
    memcpy(&b, &v, 4);
    b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;
    memcpy(&v, &b, 4);
    return v;
}

static void ref_scatter(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles,
                        int tn, int kk, int bf16)
{
    (void)k;
    memset(x, 0, (size_t)tiles * tn * sizeof(float));
    for (int64_t t = 0; t < tiles; t++)
        for (int j = 0; j < kk; j++) {
            size_t e = (size_t)t * kk + j;
            x[(size_t)t * tn + idx[e]] = bf16 ? ref_round_bf16(val[e]) : val[e];
        }
}

static void ref_apply_sign(kern_t *k, float *p, const uint8_t *signs, float lr, size_t n)
{
    (void)k;
    for (size_t i = 0; i < n; i++) {
        int code = (signs[i / 4] >> (2 * (i % 4))) & 3;
        float s = code == 1 ? 1.0f : code == 2 ? -1.0f : 0.0f;
        p[i] -= lr * s;
    }
}

static void ref_quantize(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits,
                         uint32_t block)
{
    (void)k;
    const float lim = bits == 8 ? 127.0f : 7.0f;
    size_t nb = (n + block - 1) / block;
    uint8_t *q = payload + 4 * nb;
    if (bits == 4) memset(q, 0, (n + 1) / 2);
    for (size_t b = 0; b < nb; b++) {
        size_t off = b * block, len = n - off < block ? n - off : block;
        float amax = 0.0f;
        int finite = 1;
        for (size_t i = 0; i < len; i++) {
            finite &= isfinite(x[off + i]) != 0;
            amax = fabsf(x[off + i]) > amax ? fabsf(x[off + i]) : amax;
        }
        float s = finite ? amax / lim : NAN;
        memcpy(payload + 4 * b, &s, 4);
        for (size_t i = 0; i < len; i++) {
            float v = 0.0f;
            if (finite && s != 0.0f) {
                float inv = 1.0f / s;
                v = rintf(isfinite(inv) ? x[off + i] * inv : x[off + i] / s);
                v = v > lim ? lim : v < -lim ? -lim : v;
            }
            if (bits == 8)
                q[off + i] = (uint8_t)(int8_t)v;
            else
                q[(off + i) / 2] |= (uint8_t)(((int)v + 8) << (4 * ((off + i) % 2)));
        }
    }
}

static void ref_dequantize(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                           uint32_t block)
{
    (void)k;
    size_t nb = (n + block - 1) / block;
    const uint8_t *q = payload + 4 * nb;
    for (size_t i = 0; i < n; i++) {
        float s;
        memcpy(&s, payload + 4 * (i / block), 4);
        int v = bits == 8 ? (int)(int8_t)q[i] : ((q[i / 2] >> (4 * (i % 2))) & 15) - 8;
        x[i] = (float)v * s;
    }
}

/* --- construction ------------------------------------------------------------------ */

kern_t *kern_ref_new(char *err)
{
    kern_t *k = calloc(1, sizeof *k);
    if (!k) {
        status_set(err, STATUS_ENOMEM, "ref: out of memory");
        return NULL;
    }
    k->name = "ref";
    k->threads = 1;
    k->on_device = 0;
    k->alloc = kern_host_alloc;
    k->free = kern_host_free;
    k->upload = ref_memcpy;
    k->download = ref_memcpy;
    k->copy = ref_memcpy;
    k->zero = ref_zero;
    k->sync = ref_sync;
    k->release = ref_release;
    k->matmul_forward = ref_matmul_forward;
    k->matmul_backward = ref_matmul_backward;
    k->embedding_forward = ref_embedding_forward;
    k->embedding_backward = ref_embedding_backward;
    k->rmsnorm_forward = ref_rmsnorm_forward;
    k->rmsnorm_backward = ref_rmsnorm_backward;
    k->rope_forward = ref_rope_forward;
    k->rope_backward = ref_rope_backward;
    k->attention_forward = ref_attention_forward;
    k->attention_backward = ref_attention_backward;
    k->swiglu_forward = ref_swiglu_forward;
    k->swiglu_backward = ref_swiglu_backward;
    k->crossentropy_forward = ref_crossentropy_forward;
    k->crossentropy_backward = ref_crossentropy_backward;
    k->add = ref_add;
    k->axpy = ref_axpy;
    k->scale = ref_scale;
    k->sumsq = ref_sumsq;
    k->hash64 = ref_hash64;
    k->adamw = ref_adamw;
    k->dct_forward = ref_dct_forward;
    k->dct_inverse = ref_dct_inverse;
    k->topk = ref_topk;
    k->scatter = ref_scatter;
    k->apply_sign = ref_apply_sign;
    k->quantize = ref_quantize;
    k->dequantize = ref_dequantize;
    return k;
}
