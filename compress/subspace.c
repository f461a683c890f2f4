/* subspace.c — the "subspace" activation codec: a transform coder within a byte budget.
 * A tensor seen as a matrix X (M rows of C, C its last dimension) is sent as its
 * coordinates in its own principal basis: the top components of X^T X (subspace iteration,
 * then Rayleigh-Ritz to order them), each basis vector in int8, each column of
 * coordinates with its own width of 1..8 bits chosen greedily where it removes the most
 * squared error per bit, so that the message fills but never exceeds the budget (by
 * default 0.1 octet per element). Every message carries its own basis: decodable alone.
 * Format: docs/codec-format.md section 2.5; why: docs/design-notes.md ("Activations at
 * 0.1 byte per element").
 * Called only by codec.c (codec_internal.h). Like lowrank.c it allocates scratch in its
 * encoder (the C x C Gram matrix, M x K coordinates), freed before it returns. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif
#include "compress/codec.h"
#include "compress/codec_internal.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Largest coordinate step: |u| <= 128 * 2^100 and |v| <= 1 keep every decoded value finite. */
#define SS_MAX_STEP 0x1.0p100f
/* Largest basis scale: a unit vector has no entry above 1 = 127 * scale. */
#define SS_MAX_VSCALE (1.0f / 127.0f)
#define SS_MAX_BITS   8
/* A component enters with this many bits at once: on `tiny` (1000 steps, 0.1 B/elem both
 * ways) entry widths of 1, 3, 4, 5, 6 bits gave val_loss 1.88, 1.76, 1.73, 1.72, 1.74:
 * many coarse components lose more than fewer fine ones (design-notes). */
#define SS_MIN_BITS      5
#define SS_ITERS         8
#define SS_MAX_GRAM_ROWS 4096

/* Step of a b-bit mid-rise uniform quantizer for a unit Gaussian that minimizes the squared
 * error (Max 1960), and that error; the encoder scales the step by the column's rms and
 * then searches around it. */
static const double ss_step[SS_MAX_BITS + 1] = {0,      1.596,  0.9957, 0.5860, 0.3352,
                                                0.1881, 0.1041, 0.0569, 0.0308};
static const double ss_dist[SS_MAX_BITS + 1] = {1,       0.3634,  0.1188,  0.03744, 0.01154,
                                                0.00349, 0.00104, 0.00030, 0.000086};

static void ss_dims(const int64_t *shape, int ndim, uint64_t *m, uint64_t *c)
{
    uint64_t rows = 1;
    for (int i = 0; i + 1 < ndim; i++) rows *= (uint64_t)shape[i];
    *m = rows;
    *c = (uint64_t)shape[ndim - 1];
}

/* Octets of the fixed part of a message with k components (u16 k, then per component its
 * width, basis scale, basis, step). */
static uint64_t ss_fixed(uint64_t m, uint64_t c, uint64_t k)
{
    return 2 + 4 + m + k * (1 + 4 + c + 4);
}

uint64_t codec_subspace_payload_len(uint64_t n, uint32_t milli)
{
    uint64_t total = n * milli / 1000;
    return total > CODEC_HEADER_LEN ? total - CODEC_HEADER_LEN : 0;
}

int codec_subspace_block_ok(const int64_t *shape, int ndim, uint32_t milli)
{
    if (milli < 1 || milli > CODEC_SUBSPACE_MAX_MILLI) return 0;
    uint64_t m, c;
    ss_dims(shape, ndim, &m, &c);
    /* room for one component at one bit */
    return codec_subspace_payload_len(m * c, milli) >= ss_fixed(m, c, 1) + (m + 7) / 8;
}

/* The most components a payload of p octets can hold, each at one bit at least. */
static uint64_t ss_kmax(uint64_t m, uint64_t c, uint64_t p)
{
    uint64_t lim = m < c ? m : c, k = 0;
    if (lim > CODEC_LOWRANK_MAX_RANK) lim = CODEC_LOWRANK_MAX_RANK;
    /* ss_fixed(c, k) + ceil(k m / 8) <= p; start from the estimate and step down */
    k = (p > 6 + m ? p - 6 - m : 0) / (9 + c + (m + 7) / 8) + 1;
    if (k > lim) k = lim;
    while (k > 0 && ss_fixed(m, c, k) + (k * m + 7) / 8 > p) k--;
    return k;
}

/* Cyclic Jacobi on the symmetric k x k matrix a (destroyed); eigenvectors into the columns
 * of w (k x k, row-major), eigenvalues into ev. */
static void ss_jacobi(double *a, double *w, double *ev, uint64_t k)
{
    for (uint64_t i = 0; i < k * k; i++) w[i] = 0;
    for (uint64_t i = 0; i < k; i++) w[i * k + i] = 1;
    for (int sweep = 0; sweep < 50; sweep++) {
        double off = 0, dia = 0;
        for (uint64_t p = 0; p < k; p++) {
            dia += a[p * k + p] * a[p * k + p];
            for (uint64_t q = p + 1; q < k; q++) off += a[p * k + q] * a[p * k + q];
        }
        if (!(off > 1e-28 * dia)) break;
        for (uint64_t p = 0; p < k; p++)
            for (uint64_t q = p + 1; q < k; q++) {
                double apq = a[p * k + q];
                if (apq == 0) continue;
                double th = 0.5 * (a[q * k + q] - a[p * k + p]) / apq;
                double t = (th >= 0 ? 1.0 : -1.0) / (fabs(th) + sqrt(th * th + 1));
                double cs = 1 / sqrt(t * t + 1), sn = t * cs;
                for (uint64_t i = 0; i < k; i++) {
                    double x = a[i * k + p], y = a[i * k + q];
                    a[i * k + p] = cs * x - sn * y;
                    a[i * k + q] = sn * x + cs * y;
                }
                for (uint64_t i = 0; i < k; i++) {
                    double x = a[p * k + i], y = a[q * k + i];
                    a[p * k + i] = cs * x - sn * y;
                    a[q * k + i] = sn * x + cs * y;
                }
                for (uint64_t i = 0; i < k; i++) {
                    double x = w[i * k + p], y = w[i * k + q];
                    w[i * k + p] = cs * x - sn * y;
                    w[i * k + q] = sn * x + cs * y;
                }
            }
    }
    for (uint64_t i = 0; i < k; i++) ev[i] = a[i * k + i];
}

/* Round half to even for |v| < 2^22. */
static inline float ss_round(float v)
{
    return (v + 12582912.0f) - 12582912.0f;
}

/* Appends the low `bits` bits of v to the bit stream at *pos (LSB first). */
static inline void ss_put_bits(uint8_t *s, uint64_t *pos, unsigned v, unsigned bits)
{
    for (unsigned b = 0; b < bits; b++, (*pos)++)
        if (v >> b & 1) s[*pos >> 3] = (uint8_t)(s[*pos >> 3] | 1u << (*pos & 7));
}

static inline unsigned ss_get_bits(const uint8_t *s, uint64_t pos, unsigned bits)
{
    unsigned v = 0;
    for (unsigned b = 0; b < bits; b++, pos++) v |= (unsigned)(s[pos >> 3] >> (pos & 7) & 1) << b;
    return v;
}

/* Squared error of quantizing u[0, m) with b bits and step s (mid-rise, clamped). */
static double ss_sse(const double *u, uint64_t m, uint64_t stride, unsigned b, double s)
{
    double half = (double)(1u << (b - 1)), e = 0;
    for (uint64_t i = 0; i < m; i++) {
        double x = u[i * stride], q = floor(x / s);
        q = q < -half ? -half : q > half - 1 ? half - 1 : q;
        double d = x - (q + 0.5) * s;
        e += d * d;
    }
    return e;
}

int codec_subspace_encode(uint8_t *out, uint64_t plen, const float *x, const int64_t *shape,
                          int ndim, char *err)
{
    uint64_t m, c;
    ss_dims(shape, ndim, &m, &c);
    uint64_t k = ss_kmax(m, c, plen);
    int rc = 0;
    double *g = NULL, *q = NULL, *z = NULL, *u = NULL, *h = NULL, *w = NULL, *ev = NULL;
    float *vhat = NULL, *xn = NULL, *gain = NULL;
    unsigned *bits = NULL;
    uint64_t *ord = NULL;
    if (!k || c > (UINT64_C(1) << 26) || !(g = calloc(c * c, sizeof *g)) ||
        !(q = malloc(c * k * sizeof *q)) || !(z = malloc(c * k * sizeof *z)) ||
        !(u = calloc(m * k, sizeof *u)) || !(h = malloc(k * k * sizeof *h)) ||
        !(w = malloc(k * k * sizeof *w)) || !(ev = malloc(k * sizeof *ev)) ||
        !(vhat = malloc(c * k * sizeof *vhat)) || !(bits = calloc(k, sizeof *bits)) ||
        !(ord = malloc(k * sizeof *ord)) || !(xn = malloc(m * c * sizeof *xn)) ||
        !(gain = malloc(m * sizeof *gain))) {
        rc = status_set(err, k ? STATUS_ENOMEM : STATUS_EINVAL,
                        "codec subspace: %s for a %llu-wide basis", k ? "out of memory" : "no room",
                        (unsigned long long)c);
        goto done;
    }
    /* every row's norm on a log scale (u8: 1/8 octave steps below the largest, 0 for a zero
     * row), and the rows divided by it: the components then code directions, and a row of
     * small gradient stays small */
    double top = 0;
    for (uint64_t r = 0; r < m; r++) {
        double e = 0;
        for (uint64_t a = 0; a < c; a++) e += (double)x[r * c + a] * x[r * c + a];
        gain[r] = (float)sqrt(e);
        top = gain[r] > top ? gain[r] : top;
    }
    float base = (float)top;
    if (!(base <= SS_MAX_STEP)) {
        rc = status_set(err, STATUS_EINVAL, "codec subspace: values too large to scale");
        goto done;
    }
    codec_put_f32(out + 2, base);
    for (uint64_t r = 0; r < m; r++) {
        int gq = 0;
        if (gain[r] > 0 && base > 0) {
            double t = floor(8.0 * log2((double)gain[r] / (double)base) + 0.5) + 255;
            gq = t < 0 ? 0 : t > 255 ? 255 : (int)t;
        }
        out[6 + r] = (uint8_t)gq;
        float gr = gq ? base * exp2f((float)(gq - 255) / 8.0f) : 0.0f, inv = gq ? 1.0f / gr : 0.0f;
        for (uint64_t a = 0; a < c; a++) xn[r * c + a] = x[r * c + a] * inv;
    }
    x = xn;
    /* the Gram matrix of (at most 4096 evenly strided) rows, and its top subspace, as
     * lowrank.c */
    double gmax = codec_lr_gram(x, m, c, SS_MAX_GRAM_ROWS, g);
    if (gmax > 0)
        for (uint64_t i = 0; i < c * c; i++) g[i] /= gmax;
    codec_lr_iterate(g, c, (uint32_t)k, SS_ITERS, gmax > 0, q, z);
    /* Rayleigh-Ritz: H = Q^T G Q, its eigenvectors rotate Q into ordered components */
    memset(z, 0, c * k * sizeof *z);
    for (uint64_t a = 0; a < c; a++)
        for (uint64_t b = 0; b < c; b++) {
            double gab = g[a * c + b];
            for (uint64_t j = 0; j < k; j++) z[a * k + j] += gab * q[b * k + j];
        }
    for (uint64_t i = 0; i < k; i++)
        for (uint64_t j = 0; j < k; j++) {
            double s = 0;
            for (uint64_t a = 0; a < c; a++) s += q[a * k + i] * z[a * k + j];
            h[i * k + j] = s;
        }
    for (uint64_t i = 0; i < k; i++)
        for (uint64_t j = 0; j < i; j++)
            h[i * k + j] = h[j * k + i] = 0.5 * (h[i * k + j] + h[j * k + i]);
    ss_jacobi(h, w, ev, k);
    for (uint64_t a = 0; a < c; a++) { /* z = Q W */
        for (uint64_t j = 0; j < k; j++) {
            double s = 0;
            for (uint64_t i = 0; i < k; i++) s += q[a * k + i] * w[i * k + j];
            z[a * k + j] = s;
        }
    }
    for (uint64_t j = 0; j < k; j++) ord[j] = j;
    for (uint64_t i = 1; i < k; i++) { /* by eigenvalue, largest first (insertion, stable) */
        uint64_t t = ord[i], j = i;
        for (; j > 0 && ev[ord[j - 1]] < ev[t]; j--) ord[j] = ord[j - 1];
        ord[j] = t;
    }
    /* the basis in int8 per component, as the receiver will see it */
    for (uint64_t j = 0; j < k; j++) {
        uint64_t col = ord[j];
        float a = 0;
        for (uint64_t i = 0; i < c; i++) {
            float v = fabsf((float)z[i * k + col]);
            a = v > a ? v : a;
        }
        a = a < 1.0f ? a : 1.0f;
        float s = a / 127.0f, inv = s > 0 ? 1.0f / s : 0;
        h[j] = s; /* h reused: the basis scales */
        for (uint64_t i = 0; i < c; i++) {
            float t = ss_round((float)z[i * k + col] * inv);
            t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
            q[i * k + j] = t; /* q reused: the int8 codes */
            vhat[i * k + j] = t * s;
        }
    }
    /* U = X Vhat: every row's coordinates, and each component's energy */
    for (uint64_t r = 0; r < m; r++) {
        const float *xr = x + r * c;
        double *ur = u + r * k;
        for (uint64_t a = 0; a < c; a++) {
            double xa = xr[a];
            if (xa == 0) continue;
            const float *va = vhat + a * k;
            for (uint64_t j = 0; j < k; j++) ur[j] += xa * (double)va[j];
        }
    }
    for (uint64_t j = 0; j < k; j++) {
        double e = 0;
        for (uint64_t r = 0; r < m; r++) e += u[r * k + j] * u[r * k + j];
        ev[j] = e;
    }
    /* greedy widths: each step adds the bit that removes the most expected error per
     * octet; a component enters with SS_MIN_BITS bits and its basis vector */
    double used = (double)ss_fixed(m, c, 0) * 8;
    const unsigned minb = SS_MIN_BITS;
    for (;;) {
        uint64_t best = k;
        double br = 0, bc = 0;
        for (uint64_t j = 0; j < k; j++) {
            unsigned b = bits[j];
            if (b >= SS_MAX_BITS || !(ev[j] > 0)) continue;
            unsigned nb = b ? b + 1 : minb;
            double cost = (double)m * (nb - b) +
                          (b ? 0 : 8.0 * (double)(ss_fixed(m, c, 1) - ss_fixed(m, c, 0)));
            double won = ev[j] * (ss_dist[b] - ss_dist[nb]);
            if (won / cost > br) {
                br = won / cost;
                best = j;
                bc = cost;
            }
        }
        if (best == k || used + bc > 8.0 * (double)plen) break;
        bits[best] = bits[best] ? bits[best] + 1 : minb;
        used += bc;
    }
    uint64_t r = 0, sum = 0;
    for (uint64_t j = 0; j < k; j++) r += bits[j] > 0;
    if (!r) { /* all-zero input: one component at one bit, step 0 */
        bits[0] = 1;
        r = 1;
    }
    for (uint64_t j = 0; j < k; j++) sum += bits[j];
    if (ss_fixed(m, c, r) + (sum * m + 7) / 8 > plen) {
        rc = status_set(err, STATUS_EINVAL, "codec subspace: widths over the budget");
        goto done;
    }
    /* write: k, widths, basis scales, basis, steps, codes */
    codec_put_u16(out, (uint16_t)r);
    uint8_t *wid = out + 6 + m, *vs = wid + r, *vq = vs + 4 * r, *st = vq + r * c, *cs = st + 4 * r;
    uint64_t pos = 0, o = 0;
    for (uint64_t j = 0; j < k; j++) {
        if (!bits[j]) continue;
        unsigned b = bits[j];
        wid[o] = (uint8_t)b;
        codec_put_f32(vs + 4 * o, (float)h[j]);
        for (uint64_t i = 0; i < c; i++) vq[o * c + i] = (uint8_t)(int8_t)q[i * k + j];
        double sd = sqrt(ev[j] / (double)m), best = 0, be = 0;
        static const double mul[] = {0.55, 0.7, 0.85, 1.0, 1.2, 1.45};
        for (size_t t = 0; t < sizeof mul / sizeof mul[0]; t++) {
            double s = (double)(float)(ss_step[b] * sd * mul[t]);
            if (!(s > 0)) continue;
            double e = ss_sse(u + j, m, k, b, s);
            if (best == 0 || e < be) {
                best = s;
                be = e;
            }
        }
        if (!(best <= (double)SS_MAX_STEP)) {
            rc = status_set(err, STATUS_EINVAL, "codec subspace: values too large to scale");
            goto done;
        }
        float s = (float)best;
        codec_put_f32(st + 4 * o, s);
        int half = 1 << (b - 1);
        for (uint64_t i = 0; i < m; i++) {
            int qv = half;
            if (s > 0) {
                double t = floor(u[i * k + j] / (double)s);
                t = t < -half ? -half : t > half - 1 ? half - 1 : t;
                qv = (int)t + half;
            }
            ss_put_bits(cs, &pos, (unsigned)qv, b);
        }
        o++;
    }
done:
    free(g);
    free(q);
    free(z);
    free(u);
    free(h);
    free(w);
    free(ev);
    free(vhat);
    free(bits);
    free(ord);
    free(xn);
    free(gain);
    return rc;
}

int codec_subspace_check(const uint8_t *p, uint64_t plen, uint64_t m, uint64_t c, char *err)
{
    if (plen < 2) return status_set(err, STATUS_EMALFORMED, "codec subspace: no room for k");
    uint64_t r = codec_get_u16(p), lim = m < c ? m : c;
    if (r < 1 || r > lim || ss_fixed(m, c, r) > plen)
        return status_set(err, STATUS_EMALFORMED, "codec subspace: %llu components",
                          (unsigned long long)r);
    uint32_t gb = codec_get_u32(p + 2);
    if ((gb >> 31) || !(codec_bits_f32(gb) <= SS_MAX_STEP))
        return status_set(err, STATUS_EMALFORMED, "codec subspace: bad row scale");
    const uint8_t *wid = p + 6 + m, *vs = wid + r, *vq = vs + 4 * r, *st = vq + r * c;
    uint64_t sum = 0;
    for (uint64_t j = 0; j < r; j++) {
        if (wid[j] < 1 || wid[j] > SS_MAX_BITS)
            return status_set(err, STATUS_EMALFORMED, "codec subspace: width %u", wid[j]);
        sum += wid[j];
        uint32_t b = codec_get_u32(vs + 4 * j), s = codec_get_u32(st + 4 * j);
        if ((b >> 31) || !(codec_bits_f32(b) <= SS_MAX_VSCALE) || (s >> 31) ||
            !(codec_bits_f32(s) <= SS_MAX_STEP))
            return status_set(err, STATUS_EMALFORMED, "codec subspace: bad scale %llu",
                              (unsigned long long)j);
    }
    uint64_t bitsn = sum * m, end = ss_fixed(m, c, r) + (bitsn + 7) / 8;
    if (end > plen)
        return status_set(err, STATUS_EMALFORMED, "codec subspace: codes overrun the payload");
    uint32_t bad = 0;
    for (uint64_t i = 0; i < r * c; i++) bad |= vq[i] == 0x80u;
    if (bad) return status_set(err, STATUS_EMALFORMED, "codec subspace: basis value -128");
    const uint8_t *cs = st + 4 * r;
    if (bitsn & 7) bad |= cs[bitsn >> 3] >> (bitsn & 7);
    for (uint64_t i = end; i < plen; i++) bad |= p[i];
    if (bad) return status_set(err, STATUS_EMALFORMED, "codec subspace: nonzero padding");
    return 0;
}

void codec_subspace_decode(float *restrict out, const uint8_t *restrict p, uint64_t m, uint64_t c)
{
    uint64_t r = codec_get_u16(p);
    const uint8_t *wid = p + 6 + m, *vs = wid + r, *st = vs + 4 * r + r * c;
    const int8_t *vq = (const int8_t *)(vs + 4 * r);
    const uint8_t *cs = st + 4 * r;
    for (uint64_t i = 0; i < m * c; i++) out[i] = 0.0f;
    uint64_t pos = 0;
    for (uint64_t j = 0; j < r; j++) {
        unsigned b = wid[j];
        float s = codec_get_f32(st + 4 * j), v = codec_get_f32(vs + 4 * j);
        float half = (float)(1u << (b - 1));
        const int8_t *vj = vq + j * c;
        for (uint64_t i = 0; i < m; i++, pos += b) {
            float uu = ((float)ss_get_bits(cs, pos, b) - half + 0.5f) * s;
            float wgt = uu * v;
            if (wgt == 0.0f) continue;
            float *o = out + i * c;
            for (uint64_t a = 0; a < c; a++) o[a] += wgt * (float)vj[a];
        }
    }
    float base = codec_get_f32(p + 2);
    for (uint64_t i = 0; i < m; i++) {
        unsigned gq = p[6 + i];
        float gr = gq ? base * exp2f((float)((int)gq - 255) / 8.0f) : 0.0f;
        for (uint64_t a = 0; a < c; a++) out[i * c + a] *= gr;
    }
}
