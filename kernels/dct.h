/* dct.h — chunked orthonormal DCT-II and its inverse on the CPU, for the DeMo transform.
 *
 * A 2-D tensor (rows, cols), row-major, is cut into tiles of cr x cc elements, where
 * cr = dct_chunk_size(rows, chunk) and cc = dct_chunk_size(cols, chunk); each tile gets
 * a separable 2-D orthonormal DCT-II: Y = Cr X Cc^T, with C[u][n] = s_u cos(pi (2n+1) u
 * / (2N)), s_0 = sqrt(1/N), s_u = sqrt(2/N). A 1-D tensor of length n is the 2-D tensor
 * (1, n): its tiles are 1 x c and the row transform is the identity.
 *
 * Coefficients are kept TILE-MAJOR: tiles in row-major order over the tile grid, each
 * tile's cr*cc coefficients contiguous, row frequency u major: coef[t*cr*cc + u*cc + v].
 * This is the layout top-k and packing want (compress/demo.c).
 *
 * Determinism: every output element is accumulated in a fixed order with plain float
 * multiply and add (no BLAS, no threads, no reassociation; the build is ISO C, so the
 * compiler does not contract into FMA), so replicas built the same way get bit-identical
 * results whatever the thread count. The basis comes from libm cos() in double, rounded
 * to float.
 *
 * Not for: the DeMo state or top-k (compress/demo.h); devices (a CUDA version will sit
 * beside this one, tested against it). A plan holds scratch space: one thread at a time.
 */
#ifndef SWARMTRAIN_DCT_H
#define SWARMTRAIN_DCT_H

#include <stddef.h>
#include <stdint.h>

/* Largest chunk size any plan accepts (tiles up to 256 x 256 = 65536 coefficients). */
#define DCT_MAX_CHUNK 256
/* The DeMo default chunk. */
#define DCT_DEFAULT_CHUNK 64

typedef struct dct_plan dct_plan_t;

/* The largest divisor of n not above chunk; 0 when n < 1 or chunk < 1. Can't fail. */
int64_t dct_chunk_size(int64_t n, int64_t chunk);

/* What a plan's tiles go through. */
typedef enum {
    DCT_II = 0,       /* the orthonormal DCT-II above (DeMo's transform) */
    DCT_IDENTITY = 1, /* none: each tile's coefficients are its own elements, in the same
                       * tile-major layout (top-k in parameter space) */
} dct_kind_t;

/* Fills m (n x n, row-major) with the orthonormal DCT-II matrix of size n. */
void dct_basis(float *m, int n);
/* Fills m (n x n, row-major) with the basis of kind: dct_basis's, or the identity. */
void dct_basis_of(float *m, int n, dct_kind_t kind);

/* A plan for tensors of shape (rows, cols); chunk in 1..DCT_MAX_CHUNK (0 means the
 * default); kind DCT_II or DCT_IDENTITY (the same products with the identity basis, so
 * exact: each output is one element times 1 plus zeros). Returns NULL with a message in
 * err on bad sizes, an unknown kind or no memory. Caller owns the result. */
dct_plan_t *dct_plan_new(int64_t rows, int64_t cols, int chunk, dct_kind_t kind, char *err);
/* Frees the plan and sets *p to NULL; NULL or *p == NULL is a no-op. */
void dct_plan_destroy(dct_plan_t **p);

int64_t dct_plan_rows(const dct_plan_t *p);
int64_t dct_plan_cols(const dct_plan_t *p);
int dct_plan_tile_rows(const dct_plan_t *p); /* cr */
int dct_plan_tile_cols(const dct_plan_t *p); /* cc */
int64_t dct_plan_tiles(const dct_plan_t *p); /* (rows / cr) * (cols / cc) */

/* coef (tile-major, rows*cols) = per-tile DCT-II (or identity) of x (row-major, rows*cols).
 * coef and x must not overlap. Can't fail. */
void dct_forward(dct_plan_t *p, float *restrict coef, const float *restrict x);
/* x (row-major) = per-tile inverse (DCT-III, or identity) of coef (tile-major).
 * x and coef must not overlap. Can't fail. */
void dct_inverse(dct_plan_t *p, float *restrict x, const float *restrict coef);

#endif
