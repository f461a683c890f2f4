/* dct.c — chunked orthonormal DCT-II / DCT-III on the CPU, by small per-tile matrix
 * products written as axpy loops (vectorized over the contiguous dimension).
 * Not for: top-k, packing or any DeMo state (compress/demo.c). */
/* These loops must vectorize even in -O2 builds (GCC's -O2 cost model skips loops
 * with unknown trip counts; -O3 is 4-5x faster here). Vectorizing them changes no
 * result: no reductions are reordered and no float contraction is enabled. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif
#include "kernels/dct.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct dct_plan {
    int64_t rows, cols;
    int cr, cc;
    float *br;  /* (cr, cr) row basis: br[u*cr + i] */
    float *brt; /* (cr, cr) its transpose */
    float *bc;  /* (cc, cc) column basis: bc[v*cc + j] */
    float *bct; /* (cc, cc) its transpose */
    float *tmp; /* (cr, cc) scratch for one tile */
};

int64_t dct_chunk_size(int64_t n, int64_t chunk)
{
    if (n < 1 || chunk < 1) return 0;
    for (int64_t c = chunk < n ? chunk : n; c > 1; c--)
        if (n % c == 0) return c;
    return 1;
}

void dct_basis(float *m, int n)
{
    const double pi = 3.14159265358979323846;
    for (int u = 0; u < n; u++) {
        double s = u == 0 ? sqrt(1.0 / n) : sqrt(2.0 / n);
        for (int i = 0; i < n; i++)
            m[(size_t)u * n + i] = (float)(s * cos(pi * (2.0 * i + 1.0) * u / (2.0 * n)));
    }
}

void dct_basis_of(float *m, int n, dct_kind_t kind)
{
    if (kind == DCT_II) {
        dct_basis(m, n);
        return;
    }
    for (int u = 0; u < n; u++)
        for (int i = 0; i < n; i++) m[(size_t)u * n + i] = u == i ? 1.0f : 0.0f;
}

static void transpose(float *restrict t, const float *restrict m, int n)
{
    for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++) t[(size_t)b * n + a] = m[(size_t)a * n + b];
}

dct_plan_t *dct_plan_new(int64_t rows, int64_t cols, int chunk, dct_kind_t kind, char *err)
{
    if (kind != DCT_II && kind != DCT_IDENTITY) {
        status_set(err, STATUS_EINVAL, "dct: unknown transform %d", (int)kind);
        return NULL;
    }
    if (chunk == 0) chunk = DCT_DEFAULT_CHUNK;
    if (chunk < 1 || chunk > DCT_MAX_CHUNK) {
        status_set(err, STATUS_EINVAL, "dct: chunk %d outside 1..%d", chunk, DCT_MAX_CHUNK);
        return NULL;
    }
    if (rows < 1 || cols < 1 || rows > INT64_MAX / cols) {
        status_set(err, STATUS_EINVAL, "dct: bad shape (%lld, %lld)", (long long)rows,
                   (long long)cols);
        return NULL;
    }
    dct_plan_t *p = calloc(1, sizeof *p);
    if (!p) goto nomem;
    p->rows = rows;
    p->cols = cols;
    p->cr = (int)dct_chunk_size(rows, chunk);
    p->cc = (int)dct_chunk_size(cols, chunk);
    size_t r2 = (size_t)p->cr * p->cr, c2 = (size_t)p->cc * p->cc;
    p->br = malloc(r2 * sizeof(float));
    p->brt = malloc(r2 * sizeof(float));
    p->bc = malloc(c2 * sizeof(float));
    p->bct = malloc(c2 * sizeof(float));
    p->tmp = malloc((size_t)p->cr * p->cc * sizeof(float));
    if (!p->br || !p->brt || !p->bc || !p->bct || !p->tmp) goto nomem;
    dct_basis_of(p->br, p->cr, kind);
    dct_basis_of(p->bc, p->cc, kind);
    transpose(p->brt, p->br, p->cr);
    transpose(p->bct, p->bc, p->cc);
    return p;

nomem:
    dct_plan_destroy(&p);
    status_set(err, STATUS_ENOMEM, "dct: out of memory for a plan");
    return NULL;
}

void dct_plan_destroy(dct_plan_t **pp)
{
    if (!pp || !*pp) return;
    dct_plan_t *p = *pp;
    free(p->br);
    free(p->brt);
    free(p->bc);
    free(p->bct);
    free(p->tmp);
    free(p);
    *pp = NULL;
}

int64_t dct_plan_rows(const dct_plan_t *p)
{
    return p->rows;
}
int64_t dct_plan_cols(const dct_plan_t *p)
{
    return p->cols;
}
int dct_plan_tile_rows(const dct_plan_t *p)
{
    return p->cr;
}
int dct_plan_tile_cols(const dct_plan_t *p)
{
    return p->cc;
}
int64_t dct_plan_tiles(const dct_plan_t *p)
{
    return (p->rows / p->cr) * (p->cols / p->cc);
}

/* out (m, n) = a (m, kk) . b (kk, n), all row-major with leading dimensions lda, ldb, ldo;
 * each out element sums over kk in ascending order. */
/* Exempt from the sanitizers (SWARMTRAIN_SANITIZE): checking every element made the
 * sanitizer build's DeMo 6x slower than the rest of a peer together (the swarm tests in
 * CI were CPU-bound on it). Its callers check each buffer's extent once per call instead
 * (check_extent), which AddressSanitizer does verify; every index here is below the plan's
 * rows x cols. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((no_sanitize("address", "undefined")))
#endif
static void small_gemm(float *restrict out, size_t ldo, const float *restrict a, size_t lda,
                       const float *restrict b, size_t ldb, int m, int kk, int n)
{
    for (int i = 0; i < m; i++) {
        float *restrict o = out + (size_t)i * ldo;
        const float *restrict ar = a + (size_t)i * lda;
        for (int j = 0; j < n; j++) o[j] = 0.0f;
        for (int l = 0; l < kk; l++) {
            const float s = ar[l];
            const float *restrict br = b + (size_t)l * ldb;
            for (int j = 0; j < n; j++) o[j] += s * br[j];
        }
    }
}

/* Reads the first and the last byte of a buffer of n floats: under AddressSanitizer a
 * buffer shorter than the plan's tensor fails here, as it would have in small_gemm. */
static void check_extent(const float *a, size_t n)
{
    const volatile unsigned char *b = (const volatile unsigned char *)a;
    unsigned char first = b[0], last = b[n * sizeof *a - 1];
    (void)first, (void)last;
}

void dct_forward(dct_plan_t *p, float *restrict coef, const float *restrict x)
{
    check_extent(x, (size_t)(p->rows * p->cols));
    check_extent(coef, (size_t)(p->rows * p->cols));
    const int cr = p->cr, cc = p->cc;
    const int64_t ntr = p->rows / cr, ntc = p->cols / cc;
    const size_t tn = (size_t)cr * cc;
    for (int64_t tr = 0; tr < ntr; tr++) {
        for (int64_t tc = 0; tc < ntc; tc++) {
            const float *xt = x + (size_t)(tr * cr) * p->cols + (size_t)(tc * cc);
            float *yt = coef + (size_t)(tr * ntc + tc) * tn;
            if (cr == 1) {
                /* y = x . Cc^T */
                small_gemm(yt, cc, xt, p->cols, p->bct, cc, 1, cc, cc);
            } else {
                /* tmp = X . Cc^T, then Y = Cr . tmp */
                small_gemm(p->tmp, cc, xt, p->cols, p->bct, cc, cr, cc, cc);
                small_gemm(yt, cc, p->br, cr, p->tmp, cc, cr, cr, cc);
            }
        }
    }
}

void dct_inverse(dct_plan_t *p, float *restrict x, const float *restrict coef)
{
    check_extent(x, (size_t)(p->rows * p->cols));
    check_extent(coef, (size_t)(p->rows * p->cols));
    const int cr = p->cr, cc = p->cc;
    const int64_t ntr = p->rows / cr, ntc = p->cols / cc;
    const size_t tn = (size_t)cr * cc;
    for (int64_t tr = 0; tr < ntr; tr++) {
        for (int64_t tc = 0; tc < ntc; tc++) {
            float *xt = x + (size_t)(tr * cr) * p->cols + (size_t)(tc * cc);
            const float *yt = coef + (size_t)(tr * ntc + tc) * tn;
            if (cr == 1) {
                /* x = y . Cc */
                small_gemm(xt, p->cols, yt, cc, p->bc, cc, 1, cc, cc);
            } else {
                /* tmp = Y . Cc, then X = Cr^T . tmp */
                small_gemm(p->tmp, cc, yt, cc, p->bc, cc, cr, cc, cc);
                small_gemm(xt, p->cols, p->brt, cr, p->tmp, cc, cr, cr, cc);
            }
        }
    }
}
