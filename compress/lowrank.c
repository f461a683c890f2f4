/* lowrank.c — the "lowrank" activation codec: a tensor seen as a matrix X (M rows of C,
 * C its last dimension) is sent as a rank-r product U V^T, V (C x r) an orthonormal basis
 * of X's top principal subspace found per message (subspace iteration on X^T X) in int8,
 * U = X V (M x r) in blockwise int4. Format: docs/codec-format.md section 2.4; why this
 * method: docs/design-notes.md ("Activations at 0.1 byte per element").
 * Called only by codec.c (codec_internal.h); not an interface of its own, and not for
 * the int8/int4/float codecs. Unlike those it allocates scratch (the C x C Gram matrix)
 * in its encoder, freed before it returns. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif
#include "compress/codec.h"
#include "compress/codec_internal.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rows of U per scale. */
#define LR_UBLOCK 64
/* Largest scale of U: with |v| <= 1 and r <= 2^20 every decoded value stays below 2^123. */
#define LR_MAX_USCALE 0x1.0p100f
/* Largest scale of V: the basis is orthonormal, so |v| <= 1 = 127 * scale. */
#define LR_MAX_VSCALE (1.0f / 127.0f)
/* Subspace iterations; more converge further, each costs C*C*r. */
#define LR_ITERS 8
/* The basis is computed from at most this many rows, evenly strided. */
#define LR_MAX_GRAM_ROWS 4096

/* The matrix view of a shape: M = product of all but the last dimension, C = the last. */
static void lr_dims(const int64_t *shape, int ndim, uint64_t *m, uint64_t *c)
{
    uint64_t rows = 1;
    for (int i = 0; i + 1 < ndim; i++) rows *= (uint64_t)shape[i];
    *m = rows;
    *c = (uint64_t)shape[ndim - 1];
}

static uint64_t lr_per_rank(uint64_t m, uint64_t c)
{
    return 4 + c + 4 * ((m + LR_UBLOCK - 1) / LR_UBLOCK) + (m + 1) / 2;
}

uint64_t codec_lowrank_payload_len(uint64_t m, uint64_t c, uint32_t r)
{
    return (uint64_t)r * lr_per_rank(m, c);
}

uint32_t codec_lowrank_rank(const int64_t *shape, int ndim, uint32_t want)
{
    uint64_t m, c;
    lr_dims(shape, ndim, &m, &c);
    uint64_t lim = m < c ? m : c, r;
    if (want) {
        r = want;
    } else { /* the largest rank within 0.1 byte per element, header included */
        uint64_t n = m * c, budget = n / 10, per = lr_per_rank(m, c);
        r = budget > CODEC_HEADER_LEN ? (budget - CODEC_HEADER_LEN) / per : 0;
        if (r < 1) r = 1;
    }
    if (r > lim) r = lim;
    if (r > CODEC_LOWRANK_MAX_RANK) r = CODEC_LOWRANK_MAX_RANK;
    return (uint32_t)r;
}

/* A fixed pseudo-random start (splitmix64), so that the encoder is deterministic. */
double codec_lr_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53 - 0.5;
}

/* Modified Gram-Schmidt, twice, on the r columns of q, element (i, j) at q[i*rs + j*cs];
 * a column that vanishes is replaced by a fresh pseudo-random one. */
static inline void lr_orth_cols(double *q, uint64_t c, uint32_t r, uint64_t rs, uint64_t cs,
                                uint64_t *seed)
{
    for (uint32_t j = 0; j < r; j++) {
        double *qj = q + j * cs;
        for (int tries = 0; tries < 8; tries++) {
            double before = 0;
            for (uint64_t i = 0; i < c; i++) before += qj[i * rs] * qj[i * rs];
            for (int pass = 0; pass < 2; pass++)
                for (uint32_t k = 0; k < j; k++) {
                    const double *qk = q + k * cs;
                    double d = 0;
                    for (uint64_t i = 0; i < c; i++) d += qk[i * rs] * qj[i * rs];
                    for (uint64_t i = 0; i < c; i++) qj[i * rs] -= d * qk[i * rs];
                }
            double nn = 0;
            for (uint64_t i = 0; i < c; i++) nn += qj[i * rs] * qj[i * rs];
            if (nn > 1e-20 * before && nn > 1e-300) {
                double inv = 1.0 / sqrt(nn);
                for (uint64_t i = 0; i < c; i++) qj[i * rs] *= inv;
                break;
            }
            for (uint64_t i = 0; i < c; i++) qj[i * rs] = codec_lr_rand(seed);
        }
    }
}

/* Orthonormalizes the r columns of q (C x r, row-major) in place: modified Gram-Schmidt,
 * twice; a column that vanishes is replaced by a fresh pseudo-random one. The columns are
 * worked on transposed (contiguous), the same operations in the same order, so the result
 * is the same bits either way; without memory for the copy, in place. */
void codec_lr_orth(double *q, uint64_t c, uint32_t r, uint64_t *seed)
{
    double *t = malloc(c * r * sizeof *t);
    if (!t) {
        lr_orth_cols(q, c, r, r, 1, seed);
        return;
    }
    for (uint64_t i = 0; i < c; i++)
        for (uint32_t j = 0; j < r; j++) t[j * c + i] = q[i * r + j];
    lr_orth_cols(t, c, r, 1, c, seed);
    for (uint64_t i = 0; i < c; i++)
        for (uint32_t j = 0; j < r; j++) q[i * r + j] = t[j * c + i];
    free(t);
}

double codec_lr_gram(const float *x, uint64_t m, uint64_t c, uint64_t max_rows, double *g)
{
    uint64_t rows = m < max_rows ? m : max_rows;
    for (uint64_t k = 0; k < rows; k++) { /* the upper triangle */
        const float *xr = x + (rows == m ? k : k * m / rows) * c;
        for (uint64_t a = 0; a < c; a++) {
            double xa = xr[a];
            if (xa == 0) continue;
            double *ga = g + a * c;
            for (uint64_t b = a; b < c; b++) ga[b] += xa * (double)xr[b];
        }
    }
    double gmax = 0;
    for (uint64_t a = 0; a < c; a++) {
        for (uint64_t b = 0; b < a; b++) g[a * c + b] = g[b * c + a];
        gmax = g[a * c + a] > gmax ? g[a * c + a] : gmax;
    }
    return gmax;
}

void codec_lr_iterate(const double *g, uint64_t c, uint32_t r, int iters, int run, double *q,
                      double *z)
{
    uint64_t seed = 0x53544143u; /* "STAC" */
    for (uint64_t i = 0; i < c * r; i++) q[i] = codec_lr_rand(&seed);
    codec_lr_orth(q, c, r, &seed);
    for (int it = 0; it < iters && run; it++) {
        memset(z, 0, c * r * sizeof *z);
        for (uint64_t a = 0; a < c; a++) {
            const double *ga = g + a * c;
            double *za = z + a * r;
            for (uint64_t b = 0; b < c; b++) {
                double gab = ga[b];
                const double *qb = q + b * r;
                for (uint32_t j = 0; j < r; j++) za[j] += gab * qb[j];
            }
        }
        memcpy(q, z, c * r * sizeof *q);
        codec_lr_orth(q, c, r, &seed);
    }
}

/* Round half to even for |v| < 2^22. */
static inline float lr_round(float v)
{
    return (v + 12582912.0f) - 12582912.0f;
}

int codec_lowrank_encode(uint8_t *out, const float *x, const int64_t *shape, int ndim, uint32_t r,
                         char *err)
{
    uint64_t m, c;
    lr_dims(shape, ndim, &m, &c);
    uint64_t nbm = (m + LR_UBLOCK - 1) / LR_UBLOCK, mh = (m + 1) / 2;
    float *vscale = NULL;
    int8_t *vq = (int8_t *)(out + 4 * (uint64_t)r);
    uint8_t *uscale = out + 4 * (uint64_t)r + (uint64_t)r * c;
    uint8_t *unib = uscale + 4 * (uint64_t)r * nbm;
    int rc = 0;
    double *g = NULL, *q = NULL, *z = NULL, *ub = NULL;
    float *vhat = NULL;
    /* sizes: r <= min(m, c) and m*c <= 2^40, so c*c and c*r fit comfortably */
    if (c > (UINT64_C(1) << 26) || !(g = calloc(c * c, sizeof *g)) ||
        !(q = malloc(c * r * sizeof *q)) || !(z = malloc(c * r * sizeof *z)) ||
        !(vhat = malloc(c * r * sizeof *vhat)) ||
        !(ub = malloc(LR_UBLOCK * (uint64_t)r * sizeof *ub)) ||
        !(vscale = malloc(r * sizeof *vscale))) {
        rc = status_set(err, STATUS_ENOMEM, "codec lowrank: out of memory for a %llu-wide basis",
                        (unsigned long long)c);
        goto done;
    }
    /* Gram matrix of (a strided subset of) the rows, in double: x^2 of any finite float and
     * sums of 2^40 of them stay finite */
    double gmax = codec_lr_gram(x, m, c, LR_MAX_GRAM_ROWS, g);
    /* scale G so the iteration cannot overflow (its eigenvectors do not change) */
    if (gmax > 0) {
        double inv = 1.0 / gmax;
        for (uint64_t i = 0; i < c * c; i++) g[i] *= inv;
    }
    codec_lr_iterate(g, c, r, LR_ITERS, gmax > 0, q, z);
    /* V in int8, one scale per column; |v| <= 1 so the scale is at most 1/127 */
    for (uint32_t j = 0; j < r; j++) {
        float a = 0;
        for (uint64_t i = 0; i < c; i++) {
            float v = fabsf((float)q[i * r + j]);
            a = v > a ? v : a;
        }
        a = a < 1.0f ? a : 1.0f;
        float s = a / 127.0f, inv = s > 0 ? 1.0f / s : 0;
        vscale[j] = s;
        codec_put_f32(out + 4 * j, s);
        for (uint64_t i = 0; i < c; i++) {
            float t = lr_round((float)q[i * r + j] * inv);
            t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
            vq[j * c + i] = (int8_t)t;
            vhat[i * r + j] = t * s; /* U is computed against the basis as decoded */
        }
    }
    /* U = X Vhat in double, 64 rows at a time, then int4 per column and block */
    for (uint64_t blk = 0; blk < nbm; blk++) {
        uint64_t r0 = blk * LR_UBLOCK, nr = m - r0 < LR_UBLOCK ? m - r0 : LR_UBLOCK;
        memset(ub, 0, nr * r * sizeof *ub);
        for (uint64_t i = 0; i < nr; i++) {
            const float *xr = x + (r0 + i) * c;
            double *u = ub + i * r;
            for (uint64_t a = 0; a < c; a++) {
                double xa = xr[a];
                const float *va = vhat + a * r;
                for (uint32_t j = 0; j < r; j++) u[j] += xa * (double)va[j];
            }
        }
        for (uint32_t j = 0; j < r; j++) {
            double a = 0;
            for (uint64_t i = 0; i < nr; i++) a = fabs(ub[i * r + j]) > a ? fabs(ub[i * r + j]) : a;
            double sd = a / 7.0;
            if (!(sd <= (double)LR_MAX_USCALE)) {
                rc = status_set(err, STATUS_EINVAL, "codec lowrank: values too large to scale");
                goto done;
            }
            float s = (float)sd;
            codec_put_f32(uscale + 4 * ((uint64_t)j * nbm + blk), s);
            uint8_t *col = unib + (uint64_t)j * mh;
            for (uint64_t i = 0; i < nr; i++) {
                int qv = 0;
                if (s > 0) {
                    float t = lr_round((float)(ub[i * r + j] / (double)s));
                    t = t > 7.0f ? 7.0f : t < -7.0f ? -7.0f : t;
                    qv = (int)t;
                }
                uint64_t e = r0 + i;
                uint8_t nib = (uint8_t)(qv + 8);
                if (e & 1)
                    col[e / 2] = (uint8_t)(col[e / 2] | (nib << 4));
                else
                    col[e / 2] = nib; /* the high nibble (or pad) is 0 until set */
            }
        }
    }
done:
    free(g);
    free(q);
    free(z);
    free(vhat);
    free(ub);
    free(vscale);
    return rc;
}

/* Scales at p[0, n): finite, sign clear, <= max. The first bad one or -1. */
static int64_t lr_bad_scale(const uint8_t *p, uint64_t n, float max)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t bits = codec_get_u32(p + 4 * i);
        float s = codec_bits_f32(bits);
        if ((bits >> 31) || !(s <= max)) return (int64_t)i;
    }
    return -1;
}

int codec_lowrank_check(const uint8_t *p, uint64_t m, uint64_t c, uint32_t r, char *err)
{
    uint64_t nbm = (m + LR_UBLOCK - 1) / LR_UBLOCK, mh = (m + 1) / 2;
    const uint8_t *vq = p + 4 * (uint64_t)r, *us = vq + (uint64_t)r * c;
    const uint8_t *un = us + 4 * (uint64_t)r * nbm;
    int64_t b = lr_bad_scale(p, r, LR_MAX_VSCALE);
    if (b >= 0)
        return status_set(err, STATUS_EMALFORMED, "codec lowrank: bad basis scale %lld",
                          (long long)b);
    if ((b = lr_bad_scale(us, (uint64_t)r * nbm, LR_MAX_USCALE)) >= 0)
        return status_set(err, STATUS_EMALFORMED, "codec lowrank: bad factor scale %lld",
                          (long long)b);
    uint32_t bad = 0;
    for (uint64_t i = 0; i < (uint64_t)r * c; i++) bad |= vq[i] == 0x80u;
    if (bad) return status_set(err, STATUS_EMALFORMED, "codec lowrank: basis value -128");
    for (uint32_t j = 0; j < r; j++) {
        const uint8_t *col = un + (uint64_t)j * mh;
        for (uint64_t i = 0; i < m / 2; i++) bad |= ((col[i] & 15) == 0) | ((col[i] >> 4) == 0);
        if (m & 1) bad |= ((col[m / 2] & 15) == 0) | ((col[m / 2] >> 4) != 0);
    }
    if (bad)
        return status_set(err, STATUS_EMALFORMED, "codec lowrank: nibble 0 or nonzero padding");
    return 0;
}

void codec_lowrank_decode(float *restrict out, const uint8_t *restrict p, uint64_t m, uint64_t c,
                          uint32_t r)
{
    uint64_t nbm = (m + LR_UBLOCK - 1) / LR_UBLOCK, mh = (m + 1) / 2;
    const int8_t *vq = (const int8_t *)(p + 4 * (uint64_t)r);
    const uint8_t *us = p + 4 * (uint64_t)r + (uint64_t)r * c;
    const uint8_t *un = us + 4 * (uint64_t)r * nbm;
    for (uint64_t i = 0; i < m; i++) {
        float *o = out + i * c;
        for (uint64_t a = 0; a < c; a++) o[a] = 0.0f;
        for (uint32_t j = 0; j < r; j++) {
            uint8_t byte = un[(uint64_t)j * mh + i / 2];
            int nib = (i & 1) ? byte >> 4 : byte & 15;
            float u =
                (float)(nib - 8) * codec_get_f32(us + 4 * ((uint64_t)j * nbm + i / LR_UBLOCK));
            float w = u * codec_get_f32(p + 4 * (uint64_t)j);
            if (w == 0.0f) continue;
            const int8_t *v = vq + (uint64_t)j * c;
            for (uint64_t a = 0; a < c; a++) o[a] += w * (float)v[a];
        }
    }
}
