/* test_demo.c — kernels/dct and the DeMo transform: the DCT against the naive formula,
 * orthonormality and Parseval, chunk sizes; top-k against brute force (with ties); index
 * packing at both widths and their edges; aggregation by hand; the residual identity;
 * determinism under message permutation; the message decoder's never-trust promises;
 * and four simulated replicas that must stay bit-identical for 100 steps.
 * Not for: activation codecs (test_codec.c) or the pool exchange (swarm/). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "compress/demo.h"
#include "compress/demo_wire.h"
#include "kernels/dct.h"
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* --- naive references in double ----------------------------------------------------- */

static double basis(int u, int i, int n)
{
    const double pi = 3.14159265358979323846;
    return (u == 0 ? sqrt(1.0 / n) : sqrt(2.0 / n)) * cos(pi * (2.0 * i + 1.0) * u / (2.0 * n));
}

/* basis(u, i, n) for all u, i: table[u * n + i]. The naive sums below read the formula's
 * values from it (the same doubles, so the same sums) instead of calling cos() twice per
 * term, which was three quarters of this suite's time. Caller frees. */
static double *basis_table(int n)
{
    double *b = malloc((size_t)n * (size_t)n * sizeof *b);
    assert_non_null(b);
    for (int u = 0; u < n; u++)
        for (int i = 0; i < n; i++) b[u * n + i] = basis(u, i, n);
    return b;
}

/* Tile-major coefficients of x (rows, cols) with tiles cr x cc, straight from the formula. */
static void naive_dct(double *coef, const float *x, int64_t rows, int64_t cols, int cr, int cc)
{
    int64_t ntc = cols / cc;
    double *br = basis_table(cr), *bc = basis_table(cc);
    for (int64_t tr = 0; tr < rows / cr; tr++)
        for (int64_t tc = 0; tc < ntc; tc++)
            for (int u = 0; u < cr; u++)
                for (int v = 0; v < cc; v++) {
                    double s = 0;
                    for (int i = 0; i < cr; i++)
                        for (int j = 0; j < cc; j++)
                            s += br[u * cr + i] * bc[v * cc + j] *
                                 x[(tr * cr + i) * cols + tc * cc + j];
                    coef[((tr * ntc + tc) * cr + u) * cc + v] = s;
                }
    free(br);
    free(bc);
}

static void naive_idct(double *x, const double *coef, int64_t rows, int64_t cols, int cr, int cc)
{
    int64_t ntc = cols / cc;
    double *br = basis_table(cr), *bc = basis_table(cc);
    for (int64_t tr = 0; tr < rows / cr; tr++)
        for (int64_t tc = 0; tc < ntc; tc++)
            for (int i = 0; i < cr; i++)
                for (int j = 0; j < cc; j++) {
                    double s = 0;
                    for (int u = 0; u < cr; u++)
                        for (int v = 0; v < cc; v++)
                            s += br[u * cr + i] * bc[v * cc + j] *
                                 coef[((tr * ntc + tc) * cr + u) * cc + v];
                    x[(tr * cr + i) * cols + tc * cc + j] = s;
                }
    free(br);
    free(bc);
}

static double max_abs_d(const double *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) m = fmax(m, fabs(a[i]));
    return m;
}

/* --- DCT ---------------------------------------------------------------------------- */

static void test_chunk_size(void **state)
{
    (void)state;
    assert_int_equal(dct_chunk_size(688, 64), 43);
    assert_int_equal(dct_chunk_size(256, 64), 64);
    assert_int_equal(dct_chunk_size(257, 64), 1); /* prime */
    assert_int_equal(dct_chunk_size(240, 48), 48);
    assert_int_equal(dct_chunk_size(100, 64), 50);
    assert_int_equal(dct_chunk_size(30, 64), 30);
    assert_int_equal(dct_chunk_size(1, 64), 1);
    assert_int_equal(dct_chunk_size(96, 7), 6);
    assert_int_equal(dct_chunk_size(0, 64), 0);
    assert_int_equal(dct_chunk_size(64, 0), 0);
    char err[STATUS_ERR_LEN];
    assert_null(dct_plan_new(4, 4, 257, DCT_II, err));
    assert_null(dct_plan_new(0, 4, 64, DCT_II, err));
    dct_plan_t *p = dct_plan_new(688, 256, 0, DCT_II, err);
    assert_non_null(p);
    assert_int_equal(dct_plan_tile_rows(p), 43);
    assert_int_equal(dct_plan_tile_cols(p), 64);
    assert_int_equal(dct_plan_tiles(p), 16 * 4);
    dct_plan_destroy(&p);
    assert_null(p);
    dct_plan_destroy(&p);
}

static void check_dct_shape(int64_t rows, int64_t cols, int chunk, uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    dct_plan_t *p = dct_plan_new(rows, cols, chunk, DCT_II, err);
    assert_non_null(p);
    int cr = dct_plan_tile_rows(p), cc = dct_plan_tile_cols(p);
    assert_int_equal(cr, dct_chunk_size(rows, chunk));
    assert_int_equal(cc, dct_chunk_size(cols, chunk));
    size_t n = (size_t)(rows * cols);
    float *x = malloc(n * sizeof *x), *c = malloc(n * sizeof *c), *y = malloc(n * sizeof *y);
    double *ref = malloc(n * sizeof *ref), *xr = malloc(n * sizeof *xr);
    testutil_fill_normal(x, n, seed, 1.0f);
    dct_forward(p, c, x);
    naive_dct(ref, x, rows, cols, cr, cc);
    double scale = max_abs_d(ref, n), err_max = 0, ex = 0, ec = 0;
    for (size_t i = 0; i < n; i++) err_max = fmax(err_max, fabs(c[i] - ref[i]));
    if (err_max > 1e-5 * scale)
        print_error("dct %lldx%lld chunk %d: err %g scale %g\n", (long long)rows, (long long)cols,
                    chunk, err_max, scale);
    assert_true(err_max <= 1e-5 * scale);
    /* inverse against the naive inverse of the same coefficients */
    double *cd = malloc(n * sizeof *cd);
    for (size_t i = 0; i < n; i++) cd[i] = c[i];
    naive_idct(xr, cd, rows, cols, cr, cc);
    dct_inverse(p, y, c);
    double ie = 0;
    for (size_t i = 0; i < n; i++) ie = fmax(ie, fabs(y[i] - xr[i]));
    assert_true(ie <= 1e-5 * max_abs_d(xr, n));
    /* orthonormal: IDCT(DCT(x)) == x, and energy is preserved (Parseval) */
    for (size_t i = 0; i < n; i++) {
        assert_true(fabs(y[i] - x[i]) <= 1e-5);
        ex += (double)x[i] * x[i];
        ec += (double)c[i] * c[i];
    }
    assert_true(fabs(ex - ec) <= 1e-5 * ex);
    free(x);
    free(c);
    free(y);
    free(ref);
    free(xr);
    free(cd);
    dct_plan_destroy(&p);
}

static void test_dct_1d(void **state)
{
    (void)state;
    check_dct_shape(1, 64, 64, 1);
    check_dct_shape(1, 256, 64, 2);
    check_dct_shape(1, 240, 48, 3); /* chunk 48 */
    check_dct_shape(1, 688, 64, 4); /* tiles of 43 */
    check_dct_shape(1, 257, 64, 5); /* prime: tiles of 1 */
    check_dct_shape(1, 7, 64, 6);   /* smaller than the chunk */
}

static void test_dct_2d(void **state)
{
    (void)state;
    check_dct_shape(64, 64, 64, 10);
    check_dct_shape(96, 144, 48, 11); /* 48 x 48 tiles */
    check_dct_shape(86, 128, 64, 12); /* 43 x 64 tiles */
    check_dct_shape(30, 35, 64, 13);  /* one 30 x 35 tile */
    check_dct_shape(12, 20, 8, 14);   /* 6 x 5 tiles */
    check_dct_shape(5, 64, 64, 15);   /* rows prime below the chunk: 5 x 64 */
}

/* The identity plan: the coefficients are each tile's own elements, tile-major, exactly,
 * and the inverse puts them back; an unknown kind is refused. */
static void test_dct_identity(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    assert_null(dct_plan_new(4, 4, 2, (dct_kind_t)2, err));
    const int64_t shapes[][3] = {{48, 40, 16}, {1, 100, 16}, {30, 35, 64}, {7, 13, 4}};
    for (int s = 0; s < 4; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        dct_plan_t *p = dct_plan_new(rows, cols, (int)shapes[s][2], DCT_IDENTITY, err);
        assert_non_null(p);
        int cr = dct_plan_tile_rows(p), cc = dct_plan_tile_cols(p);
        size_t n = (size_t)(rows * cols);
        float *x = malloc(n * sizeof *x), *c = malloc(n * sizeof *c), *y = malloc(n * sizeof *y);
        testutil_fill_normal(x, n, (uint64_t)s + 40, 3.0f);
        x[0] = -0.0f;
        dct_forward(p, c, x);
        size_t at = 0;
        for (int64_t tr = 0; tr < rows / cr; tr++)
            for (int64_t tc = 0; tc < cols / cc; tc++)
                for (int u = 0; u < cr; u++)
                    for (int v = 0; v < cc; v++, at++) {
                        float want =
                            x[(size_t)(tr * cr + u) * (size_t)cols + (size_t)(tc * cc + v)];
                        if (c[at] != want) fail_msg("shape %d: coefficient %zu", s, at);
                    }
        dct_inverse(p, y, c);
        for (size_t i = 0; i < n; i++)
            if (y[i] != x[i]) fail_msg("shape %d: element %zu back %g, was %g", s, i, y[i], x[i]);
        free(x);
        free(c);
        free(y);
        dct_plan_destroy(&p);
    }
}

/* --- top-k -------------------------------------------------------------------------- */

static const float *brute_x;
static int brute_cmp(const void *a, const void *b)
{
    int i = *(const int *)a, j = *(const int *)b;
    float x = fabsf(brute_x[i]), y = fabsf(brute_x[j]);
    if (x != y) return x > y ? -1 : 1;
    return i < j ? -1 : 1;
}

static void test_topk_brute(void **state)
{
    (void)state;
    rng_t r;
    rng_seed(&r, 99);
    const int sizes[] = {1, 2, 5, 64, 256, 43 * 64, 4096};
    for (int trial = 0; trial < 300; trial++) {
        int n = sizes[trial % 7];
        int k = 1 + (int)rng_below(&r, (uint64_t)n);
        float *x = malloc((size_t)n * sizeof *x);
        int mode = trial % 3;
        for (int i = 0; i < n; i++) {
            if (mode == 0)
                x[i] = (float)rng_normal(&r);
            else if (mode == 1)
                x[i] = (float)((int)rng_below(&r, 7) - 3); /* many ties, +-0 */
            else
                x[i] = i % 5 == 0 ? -0.0f : (rng_below(&r, 2) ? 1.0f : -1.0f);
        }
        uint16_t *idx = malloc((size_t)k * sizeof *idx);
        uint64_t *keys = malloc((size_t)n * sizeof *keys);
        int *ord = malloc((size_t)n * sizeof *ord);
        demo_topk(idx, x, n, k, keys);
        for (int i = 0; i < n; i++) ord[i] = i;
        brute_x = x;
        qsort(ord, (size_t)n, sizeof *ord, brute_cmp);
        /* brute force: first k in (|x| desc, index asc), then ascending */
        char *sel = calloc((size_t)n, 1);
        for (int i = 0; i < k; i++) sel[ord[i]] = 1;
        int m = 0;
        for (int i = 0; i < n; i++)
            if (sel[i]) assert_int_equal(idx[m++], i);
        assert_int_equal(m, k);
        free(x);
        free(idx);
        free(keys);
        free(ord);
        free(sel);
    }
}

/* --- messages: packing, widths, edges ---------------------------------------------- */

static uint8_t *pack_alloc(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t f,
                           const uint16_t *idx, const float *val, size_t *len)
{
    size_t cap = demo_message_bytes(rows, cols, chunk, k, f);
    assert_true(cap > 0);
    uint8_t *buf = malloc(cap);
    char err[STATUS_ERR_LEN] = "";
    int rc = demo_msg_pack(buf, cap, len, rows, cols, chunk, k, f, DEMO_XFORM_DCT, idx, val, err);
    if (rc) print_error("pack: %s\n", err);
    assert_int_equal(rc, 0);
    assert_int_equal(*len, cap);
    return buf;
}

static void check_pack_roundtrip(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t f,
                                 int want_width, const uint16_t *edge, int nedge)
{
    int kt = demo_entries_per_tile(rows, cols, chunk, k, f);
    assert_int_equal(kt, k);
    int tn = (int)(dct_chunk_size(rows, chunk) * dct_chunk_size(cols, chunk));
    int64_t tiles = rows * cols / tn;
    size_t ne = (size_t)(tiles * kt);
    uint16_t *idx = malloc(ne * sizeof *idx), *idx2 = malloc(ne * sizeof *idx2);
    float *val = malloc(ne * sizeof *val), *val2 = malloc(ne * sizeof *val2);
    rng_t r;
    rng_seed(&r, (uint64_t)tn * 31 + (uint64_t)k);
    for (int64_t t = 0; t < tiles; t++) {
        /* kt distinct ascending indices; the first tile holds the edge indices */
        char *used = calloc((size_t)tn, 1);
        int m = 0;
        if (t == 0)
            for (int e = 0; e < nedge; e++) used[edge[e]] = 1, m++;
        while (m < kt) {
            int i = (int)rng_below(&r, (uint64_t)tn);
            if (!used[i]) used[i] = 1, m++;
        }
        m = 0;
        for (int i = 0; i < tn; i++)
            if (used[i]) idx[t * kt + m++] = (uint16_t)i;
        free(used);
    }
    for (size_t e = 0; e < ne; e++) val[e] = (float)rng_normal(&r);
    size_t len;
    uint8_t *buf = pack_alloc(rows, cols, chunk, k, f, idx, val, &len);
    demo_msg_info_t info;
    char err[STATUS_ERR_LEN];
    assert_int_equal(demo_msg_unpack(buf, len, &info, idx2, val2, ne, err), 0);
    assert_int_equal(info.idx_width, want_width);
    assert_int_equal(info.dense, 0);
    assert_int_equal(info.k, k);
    assert_memory_equal(idx, idx2, ne * sizeof *idx);
    assert_int_equal(idx2[0], edge[0]); /* tile 0 starts and ends with the edges */
    assert_int_equal(idx2[kt - 1], edge[nedge - 1]);
    double asum = 0;
    for (size_t e = 0; e < ne; e++) asum += fabsf(val[e]);
    for (size_t e = 0; e < ne; e++) {
        if (f == DEMO_VAL_F32) assert_true(val2[e] == val[e]);
        if (f == DEMO_VAL_BF16) assert_true(fabsf(val2[e] - val[e]) <= fabsf(val[e]) / 256);
        if (f == DEMO_VAL_SIGN) {
            assert_true(fabs(fabsf(val2[e]) - asum / ne) <= 1e-6 * asum / ne);
            assert_true((val2[e] < 0) == (val[e] < 0));
        }
    }
    /* one entry short of room: refused */
    assert_int_equal(demo_msg_unpack(buf, len, &info, idx2, val2, ne - 1, err), STATUS_EINVAL);
    free(buf);
    free(idx);
    free(idx2);
    free(val);
    free(val2);
}

static void test_index_packing(void **state)
{
    (void)state;
    const uint16_t e8[] = {0, 255}, e16[] = {0, 4095}, e64k[] = {0, 65535}, e43[] = {0, 2751};
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++) {
        check_pack_roundtrip(32, 48, 16, 6, (demo_vfmt_t)f, 1, e8, 2); /* 16x16 = 256: u8 */
        check_pack_roundtrip(1, 512, 256,
                             f == DEMO_VAL_SIGN   ? 20
                             : f == DEMO_VAL_BF16 ? 150
                                                  : 200,
                             (demo_vfmt_t)f, 1, e8, 2);                     /* 1-D, 256: u8 */
        check_pack_roundtrip(128, 64, 64, 32, (demo_vfmt_t)f, 2, e16, 2);   /* 4096: u16 */
        check_pack_roundtrip(86, 64, 64, 4, (demo_vfmt_t)f, 2, e43, 2);     /* 43x64: u16 */
        check_pack_roundtrip(256, 256, 256, 3, (demo_vfmt_t)f, 2, e64k, 2); /* 65536: u16 */
    }
    /* 257 coefficients no longer fit u8 */
    assert_int_equal(demo_message_bytes(1, 257, 257 > 256 ? 256 : 257, 1, DEMO_VAL_F32),
                     DEMO_HEADER_LEN + 257 * 4); /* prime: tiles of 1 -> dense */
    demo_msg_info_t info;
    uint8_t *b;
    size_t len;
    const uint16_t bad_order[2] = {5, 3};
    const float v2[2] = {1, 2};
    uint8_t out[256];
    char err[STATUS_ERR_LEN];
    assert_int_equal(demo_msg_pack(out, sizeof out, &len, 1, 64, 64, 2, DEMO_VAL_F32,
                                   DEMO_XFORM_DCT, bad_order, v2, err),
                     STATUS_EINVAL);
    const float vnan[2] = {1, NAN};
    const uint16_t ok_order[2] = {3, 5};
    assert_int_equal(demo_msg_pack(out, sizeof out, &len, 1, 64, 64, 2, DEMO_VAL_F32,
                                   DEMO_XFORM_DCT, ok_order, vnan, err),
                     STATUS_EINVAL);
    b = pack_alloc(1, 64, 64, 2, DEMO_VAL_F32, ok_order, v2, &len);
    assert_int_equal(demo_msg_parse(b, len, &info, err), 0);
    assert_int_equal(info.tiles, 1);
    free(b);
}

static void test_dense_rule(void **state)
{
    (void)state;
    /* 256-norm, chunk 64: 4 tiles of 64 */
    assert_int_equal(demo_message_bytes(1, 256, 64, 32, DEMO_VAL_F32), 32 + 4 * 32 * 5);
    assert_int_equal(demo_message_bytes(1, 256, 64, 4, DEMO_VAL_SIGN), 32 + 16 + 2);
    assert_int_equal(demo_message_bytes(1, 256, 64, 1, DEMO_VAL_SIGN), 32 + 4 + 1);
    /* sign k=8 on 64: 8 * 9 = 72 bits > 64: dense, all signs */
    assert_int_equal(demo_entries_per_tile(1, 256, 64, 8, DEMO_VAL_SIGN), 64);
    assert_int_equal(demo_message_bytes(1, 256, 64, 8, DEMO_VAL_SIGN), 32 + 32);
    /* f32 k=52 on 64: 52*40 = 2080 >= 2048: dense */
    assert_int_equal(demo_entries_per_tile(1, 256, 64, 52, DEMO_VAL_F32), 64);
    assert_int_equal(demo_entries_per_tile(1, 256, 64, 51, DEMO_VAL_F32), 51);
    /* never more than the dense coefficients, for every k */
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++)
        for (int k = 1; k <= 5000; k += 7) {
            size_t dense = demo_message_bytes(1, 256, 64, 64, (demo_vfmt_t)f);
            assert_true(demo_message_bytes(1, 256, 64, k, (demo_vfmt_t)f) <= dense);
            size_t d2 = demo_message_bytes(256, 256, 64, 4096, (demo_vfmt_t)f);
            assert_true(demo_message_bytes(256, 256, 64, k, (demo_vfmt_t)f) <= d2);
        }
    assert_int_equal(demo_message_bytes(0, 256, 64, 1, DEMO_VAL_F32), 0);
    assert_int_equal(demo_message_bytes(4, 256, 300, 1, DEMO_VAL_F32), 0);
    assert_int_equal(demo_message_bytes(4, 256, 64, -1, DEMO_VAL_F32), 0);
    assert_int_equal(demo_message_bytes(4, 256, 64, 1, (demo_vfmt_t)3), 0);
}

/* --- aggregation ------------------------------------------------------------------- */

static void test_aggregate_by_hand(void **state)
{
    (void)state;
    /* 1 x 16 tensor, chunk 8: two tiles of 8; f32 k=3 (3*40 < 8*32: sparse) */
    demo_cfg_t cfg = {8, 3, DEMO_VAL_F32, 0.9f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    demo_t *d = demo_new(1, 16, &cfg, err);
    assert_non_null(d);
    const uint16_t ia[6] = {0, 2, 5, 1, 2, 3}, ib[6] = {2, 3, 5, 4, 6, 7};
    const float va[6] = {1, 2, 3, 10, 20, 30}, vb[6] = {4, 5, -1, 40, 60, 70};
    /* a third sender with k=1 (mixed k is allowed) */
    const uint16_t ic[2] = {7, 0};
    const float vc[2] = {9, -8};
    size_t la, lb, lc;
    uint8_t *ma = pack_alloc(1, 16, 8, 3, DEMO_VAL_F32, ia, va, &la);
    uint8_t *mb = pack_alloc(1, 16, 8, 3, DEMO_VAL_F32, ib, vb, &lb);
    uint8_t *mc = pack_alloc(1, 16, 8, 1, DEMO_VAL_F32, ic, vc, &lc);
    /* tile 0: {0: 1, 2: (2+4)/2, 3: 5, 5: (3-1)/2, 7: 9}; tile 1: overlaps at 0 only
     * with c; a and b disjoint there: {0: -8, 1: 10, 2: 20, 3: 30, 4: 40, 6: 60, 7: 70} */
    const double want[16] = {1, 0, 3, 5, 0, 1, 0, 9, -8, 10, 20, 30, 40, 0, 60, 70};
    double ref[16];
    naive_idct(ref, want, 1, 16, 1, 8);
    const uint8_t *msgs[3] = {ma, mb, mc};
    const size_t lens[3] = {la, lb, lc};
    float q[16];
    assert_int_equal(demo_aggregate(d, msgs, lens, 3, q, err), 0);
    for (int i = 0; i < 16; i++) assert_true(fabs(q[i] - ref[i]) <= 1e-5 * 70);
    /* a single message: its own coefficients */
    const double want_a[16] = {1, 0, 2, 0, 0, 3, 0, 0, 0, 10, 20, 30, 0, 0, 0, 0};
    naive_idct(ref, want_a, 1, 16, 1, 8);
    assert_int_equal(demo_aggregate(d, msgs, lens, 1, q, err), 0);
    for (int i = 0; i < 16; i++) assert_true(fabs(q[i] - ref[i]) <= 1e-5 * 30);
    /* a message for another shape or a broken one: refused, naming it */
    size_t lx;
    uint8_t *mx =
        pack_alloc(1, 24, 8, 3, DEMO_VAL_F32, (const uint16_t[9]){0, 1, 2, 0, 1, 2, 0, 1, 2},
                   (const float[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}, &lx);
    const uint8_t *bad[2] = {ma, mx};
    const size_t blens[2] = {la, lx};
    assert_int_equal(demo_aggregate(d, bad, blens, 2, q, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "message 1"));
    const size_t tlens[2] = {la, lb - 1};
    assert_int_equal(demo_aggregate(d, msgs, tlens, 2, q, err), STATUS_EMALFORMED);
    assert_int_equal(demo_aggregate(d, msgs, lens, 0, q, err), STATUS_EINVAL);
    free(ma);
    free(mb);
    free(mc);
    free(mx);
    demo_destroy(&d);
}

/* Message of a replica whose D is random: D = g (beta 0, lr 1). */
static uint8_t *random_message(demo_t *d, uint64_t seed, size_t *len)
{
    int64_t n = demo_elems(d);
    float *g = malloc((size_t)n * sizeof *g);
    testutil_fill_normal(g, (size_t)n, seed, 1.0f);
    char err[STATUS_ERR_LEN];
    memset(demo_momentum(d), 0, (size_t)n * sizeof(float));
    assert_int_equal(demo_accumulate(d, g, 1.0f, err), 0);
    uint8_t *buf = malloc(demo_msg_size(d));
    assert_int_equal(demo_extract(d, buf, demo_msg_size(d), len, err), 0);
    free(g);
    return buf;
}

static void test_aggregate_permutation(void **state)
{
    (void)state;
    /* values whose double sum depends on the order: (1e20 + 1) - 1e20 != (1e20 - 1e20) + 1 */
    {
        demo_cfg_t cfg = {
            8, 1, DEMO_VAL_F32, 0.0f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
        char err[STATUS_ERR_LEN];
        demo_t *d = demo_new(1, 8, &cfg, err);
        const float vals[4] = {1e20f, 1.0f, -1e20f, 3e-10f};
        const uint16_t zero[1] = {0};
        uint8_t *m[4];
        size_t l[4];
        for (int i = 0; i < 4; i++)
            m[i] = pack_alloc(1, 8, 8, 1, DEMO_VAL_F32, zero, &vals[i], &l[i]);
        float q0[8], q1[8];
        const int perms[4][4] = {{0, 1, 2, 3}, {2, 1, 0, 3}, {3, 0, 2, 1}, {1, 3, 2, 0}};
        for (int p = 0; p < 4; p++) {
            const uint8_t *ms[4];
            size_t ls[4];
            for (int i = 0; i < 4; i++) ms[i] = m[perms[p][i]], ls[i] = l[perms[p][i]];
            assert_int_equal(demo_aggregate(d, ms, ls, 4, p ? q1 : q0, err), 0);
            if (p) assert_memory_equal(q0, q1, sizeof q0);
        }
        for (int i = 0; i < 4; i++) free(m[i]);
        demo_destroy(&d);
    }
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++) {
        demo_cfg_t cfg = {64,
                          f == DEMO_VAL_SIGN ? 4 : 32,
                          (demo_vfmt_t)f,
                          0.0f,
                          DEMO_IDX_TOPK,
                          DEMO_UPDATE_SIGN,
                          DEMO_XFORM_DCT};
        char err[STATUS_ERR_LEN];
        demo_t *d = demo_new(86, 128, &cfg, err);
        assert_non_null(d);
        enum { M = 5 };
        uint8_t *m[M];
        size_t l[M];
        for (int i = 0; i < M; i++) m[i] = random_message(d, 100 + (uint64_t)i, &l[i]);
        size_t n = (size_t)demo_elems(d);
        float *q0 = malloc(n * sizeof *q0), *q1 = malloc(n * sizeof *q1);
        const uint8_t *msgs[M];
        size_t lens[M];
        for (int i = 0; i < M; i++) msgs[i] = m[i], lens[i] = l[i];
        assert_int_equal(demo_aggregate(d, msgs, lens, M, q0, err), 0);
        rng_t r;
        rng_seed(&r, 5);
        for (int trial = 0; trial < 20; trial++) {
            for (int i = M - 1; i > 0; i--) { /* Fisher-Yates */
                int j = (int)rng_below(&r, (uint64_t)i + 1);
                const uint8_t *t = msgs[i];
                size_t tl = lens[i];
                msgs[i] = msgs[j], lens[i] = lens[j];
                msgs[j] = t, lens[j] = tl;
            }
            assert_int_equal(demo_aggregate(d, msgs, lens, M, q1, err), 0);
            assert_memory_equal(q0, q1, n * sizeof *q0);
        }
        for (int i = 0; i < M; i++) free(m[i]);
        free(q0);
        free(q1);
        demo_destroy(&d);
    }
}

/* --- extract: the residual identity ------------------------------------------------ */

static void check_residual(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t f)
{
    demo_cfg_t cfg = {chunk, k, f, 0.5f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    demo_t *d = demo_new(rows, cols, &cfg, err);
    assert_non_null(d);
    size_t n = (size_t)(rows * cols);
    float *g = malloc(n * sizeof *g), *old = malloc(n * sizeof *old);
    for (int step = 0; step < 3; step++) {
        testutil_fill_normal(g, n, 40 + (uint64_t)step, 1.0f);
        assert_int_equal(demo_accumulate(d, g, 0.1f, err), 0);
    }
    memcpy(old, demo_momentum(d), n * sizeof *old);
    size_t len, cap = demo_msg_size(d);
    uint8_t *buf = malloc(cap);
    assert_int_equal(demo_extract(d, buf, cap - 1, &len, err), STATUS_EINVAL); /* D untouched */
    assert_memory_equal(old, demo_momentum(d), n * sizeof *old);
    assert_int_equal(demo_extract(d, buf, cap, &len, err), 0);
    assert_int_equal(len, cap);
    assert_int_equal(len, demo_message_bytes(rows, cols, chunk, k, f));
    demo_msg_info_t info;
    uint16_t *idx = malloc(n * sizeof *idx);
    float *val = malloc(n * sizeof *val);
    assert_int_equal(demo_msg_unpack(buf, len, &info, idx, val, n, err), 0);
    /* the exact coefficients of old D, by the naive formula */
    int cr = info.tile_rows, cc = info.tile_cols, tn = cr * cc;
    double *c = malloc(n * sizeof *c), *s = calloc(n, sizeof *s), *x = malloc(n * sizeof *x);
    naive_dct(c, old, rows, cols, cr, cc);
    /* the selection is the top-k of the exact coefficients (ties aside: random data) */
    for (int64_t t = 0; t < info.tiles; t++) {
        double kth = INFINITY;
        for (int j = 0; j < info.k; j++) kth = fmin(kth, fabs(c[t * tn + idx[t * info.k + j]]));
        int above = 0;
        for (int j = 0; j < tn; j++) above += fabs(c[t * tn + j]) > kth * (1 + 1e-5);
        assert_true(above <= info.k - 1);
    }
    /* transmitted part: f32 and bf16 the sent values, sign the exact ones */
    for (int64_t t = 0; t < info.tiles; t++)
        for (int j = 0; j < info.k; j++) {
            size_t e = (size_t)(t * info.k + j), pos = (size_t)(t * tn + idx[e]);
            s[pos] = f == DEMO_VAL_SIGN ? c[pos] : val[e];
            if (f == DEMO_VAL_F32) assert_true(fabs(val[e] - c[pos]) <= 1e-5 * fabs(c[pos]) + 1e-6);
        }
    naive_idct(x, s, rows, cols, cr, cc);
    const float *D = demo_momentum(d);
    double scale = 0, worst = 0, removed = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(old[i]));
    for (size_t i = 0; i < n; i++) {
        worst = fmax(worst, fabs((double)old[i] - ((double)D[i] + x[i])));
        removed += x[i] * x[i];
    }
    if (worst > 2e-6 * scale) print_error("residual: worst %g scale %g\n", worst, scale);
    assert_true(worst <= 2e-6 * scale);
    assert_true(removed > 0);
    if (info.dense && f != DEMO_VAL_BF16) /* all sent: D is rounding (bf16 keeps its error) */
        for (size_t i = 0; i < n; i++) assert_true(fabs(D[i]) <= 2e-6 * scale);
    free(g);
    free(old);
    free(buf);
    free(idx);
    free(val);
    free(c);
    free(s);
    free(x);
    demo_destroy(&d);
}

static void test_residual_identity(void **state)
{
    (void)state;
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++) {
        check_residual(128, 64, 64, 32, (demo_vfmt_t)f);
        check_residual(86, 64, 64, 4, (demo_vfmt_t)f);  /* 43 x 64 tiles */
        check_residual(1, 256, 64, 4, (demo_vfmt_t)f);  /* a norm */
        check_residual(1, 256, 64, 60, (demo_vfmt_t)f); /* dense */
        check_residual(32, 48, 16, 5, (demo_vfmt_t)f);  /* u8 indices */
    }
}

static void test_accumulate(void **state)
{
    (void)state;
    demo_cfg_t cfg = {64, 32, DEMO_VAL_F32, 0.75f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    demo_t *d = demo_new(2, 4, &cfg, err);
    const float g1[8] = {1, 2, 3, 4, 5, 6, 7, 8}, g2[8] = {8, 7, 6, 5, 4, 3, 2, 1};
    assert_int_equal(demo_accumulate(d, g1, 0.5f, err), 0);
    assert_int_equal(demo_accumulate(d, g2, 0.25f, err), 0);
    for (int i = 0; i < 8; i++)
        assert_true(demo_momentum(d)[i] == 0.75f * (0.5f * g1[i]) + 0.25f * g2[i]);
    float bad[8];
    memcpy(bad, g1, sizeof bad);
    bad[6] = NAN;
    float keep[8];
    memcpy(keep, demo_momentum(d), sizeof keep);
    assert_int_equal(demo_accumulate(d, bad, 0.5f, err), STATUS_EINVAL);
    assert_int_equal(demo_accumulate(d, g1, INFINITY, err), STATUS_EINVAL);
    assert_memory_equal(keep, demo_momentum(d), sizeof keep);
    demo_destroy(&d);
    assert_null(d);
    cfg.beta = 1.5f;
    assert_null(demo_new(2, 4, &cfg, err));
    cfg.beta = 0.5f;
    cfg.chunk = 300;
    assert_null(demo_new(2, 4, &cfg, err));
    float p[4] = {1, 1, 1, 1};
    const float qq[4] = {2, -3, 0, NAN};
    demo_apply_sign(p, qq, 0.25f, 4);
    assert_true(p[0] == 0.75f && p[1] == 1.25f && p[2] == 1.0f && p[3] == 1.0f);
}

/* --- the decoder never trusts ------------------------------------------------------- */

static void refix_crc(uint8_t *b, size_t len)
{
    if (len < DEMO_HEADER_LEN) return;
    uint32_t crc = codec_crc32c(0, b, 28);
    crc = codec_crc32c(crc, b + DEMO_HEADER_LEN, len - DEMO_HEADER_LEN);
    for (int i = 0; i < 4; i++) b[28 + i] = (uint8_t)(crc >> (8 * i));
}

/* Top-k without a transform (DEMO_XFORM_NONE): a message carries each tile's k largest
 * |D| entries themselves, aggregating it gives them back in place (zeros elsewhere), and D
 * keeps exactly the rest. Messages say their transform (octet 22); a tensor refuses one of
 * the other transform, and an unknown transform is refused. */
static void test_no_transform(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    demo_cfg_t bad = {8, 3, DEMO_VAL_F32, 0.0f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, (demo_xform_t)2};
    assert_null(demo_new(4, 8, &bad, err));
    assert_non_null(strstr(err, "transform"));
    demo_cfg_t cfg = {4, 3, DEMO_VAL_F32, 0.0f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_NONE};
    demo_t *d = demo_new(4, 8, &cfg, err); /* two tiles of 4 x 4 */
    assert_non_null(d);
    float g[32], q[32];
    testutil_fill_normal(g, 32, 77, 1.0f);
    assert_int_equal(demo_accumulate(d, g, 1.0f, err), 0);
    size_t len, cap = demo_msg_size(d);
    uint8_t *m = malloc(cap);
    assert_int_equal(demo_extract(d, m, cap, &len, err), 0);
    assert_int_equal(m[22], DEMO_XFORM_NONE);
    const uint8_t *msgs[1] = {m};
    assert_int_equal(demo_aggregate(d, msgs, &len, 1, q, err), 0);
    const float *D = demo_momentum(d);
    for (int t = 0; t < 2; t++) { /* tile t: columns 4t..4t+3 */
        int sent = 0;
        for (int e = 0; e < 16; e++) {
            int i = (e / 4) * 8 + 4 * t + e % 4, larger = 0;
            for (int f = 0; f < 16; f++) {
                int j = (f / 4) * 8 + 4 * t + f % 4;
                larger += fabsf(g[j]) > fabsf(g[i]) || (fabsf(g[j]) == fabsf(g[i]) && f < e);
            }
            if (larger < 3) { /* among the tile's top 3: sent as it is, gone from D */
                sent++;
                assert_true(q[i] == g[i]);
                assert_true(D[i] == 0.0f);
            } else {
                assert_true(q[i] == 0.0f);
                assert_true(D[i] == g[i]);
            }
        }
        assert_int_equal(sent, 3);
    }
    /* a DCT tensor of the same shape refuses the message, and this one refuses the DCT's */
    cfg.xform = DEMO_XFORM_DCT;
    demo_t *e = demo_new(4, 8, &cfg, err);
    assert_int_equal(demo_aggregate(e, msgs, &len, 1, q, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "transform none"));
    assert_int_equal(demo_accumulate(e, g, 1.0f, err), 0);
    size_t elen;
    uint8_t *me = malloc(demo_msg_size(e));
    assert_int_equal(demo_extract(e, me, demo_msg_size(e), &elen, err), 0);
    assert_int_equal(me[22], DEMO_XFORM_DCT);
    const uint8_t *both[2] = {m, me};
    const size_t lens[2] = {len, elen};
    assert_int_equal(demo_aggregate(d, both, lens, 2, q, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "message 1 is in transform dct"));
    /* an unknown transform, or the octet after it set: malformed */
    demo_msg_info_t info;
    m[22] = DEMO_XFORM_NONE + 1;
    refix_crc(m, len);
    assert_int_equal(demo_msg_parse(m, len, &info, err), STATUS_EMALFORMED);
    m[22] = DEMO_XFORM_NONE;
    m[23] = 1;
    refix_crc(m, len);
    assert_int_equal(demo_msg_parse(m, len, &info, err), STATUS_EMALFORMED);
    free(m);
    free(me);
    demo_destroy(&d);
    demo_destroy(&e);
}

/* The stage message's frame (compress/demo_wire.h): a header octet by octet, its
 * checksum, and every refusal the header alone can make. */
static void test_stage_frame(void **state)
{
    (void)state;
    uint8_t m[DEMO_STAGE_HEADER_LEN + 3] = {0};
    demo_stage_hdr_t h = {.vfmt = DEMO_VAL_SIGN,
                          .chunk = 0x0110,
                          .k = 0x030201,
                          .imode = DEMO_IDX_SHARED,
                          .ntensors = 39,
                          .step = INT64_C(0x0102030405060708),
                          .table = demo_stage_table_add(demo_stage_table_add(0, 256, 64), 64, 1)};
    demo_stage_hdr_put(m, &h);
    m[DEMO_STAGE_HEADER_LEN + 2] = 0x01; /* 17 body bits: the last octet's bit 0 */
    demo_stage_seal(m, sizeof m);
    const uint8_t want[24] = {'S',  'T',  'D',  'X',  3,    2,    0x10, 0x01,
                              0x01, 0x02, 0x03, 1,    39,   0,    0,    0,
                              0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    assert_memory_equal(m, want, sizeof want);
    uint32_t table = 0;
    uint8_t shape[8] = {0, 1, 0, 0, 64, 0, 0, 0};
    table = codec_crc32c(table, shape, 8);
    uint8_t shape2[8] = {64, 0, 0, 0, 1, 0, 0, 0};
    table = codec_crc32c(table, shape2, 8);
    assert_int_equal(h.table, table);
    assert_int_equal(m[24] | m[25] << 8 | m[26] << 16 | (uint32_t)m[27] << 24, table);
    uint32_t crc = codec_crc32c(codec_crc32c(0, m, 28), m + 32, 3);
    assert_int_equal(m[28] | m[29] << 8 | m[30] << 16 | (uint32_t)m[31] << 24, crc);

    char err[STATUS_ERR_LEN];
    demo_stage_hdr_t r;
    assert_int_equal(demo_stage_hdr_get(m, sizeof m, &r, err), 0);
    assert_int_equal(r.version, DEMO_STAGE_VERSION);
    assert_int_equal(r.vfmt, h.vfmt);
    assert_int_equal(r.chunk, h.chunk);
    assert_int_equal(r.k, h.k);
    assert_int_equal(r.imode, h.imode);
    assert_int_equal(r.ntensors, 39);
    assert_true(r.step == h.step);
    assert_int_equal(r.table, h.table);
    assert_int_equal(demo_stage_check_crc(m, sizeof m, err), 0);
    assert_int_equal(demo_stage_check_padding(m, sizeof m, 17, err), 0);
    assert_int_equal(demo_stage_check_padding(m, sizeof m, 16, err), 0);
    m[34] = 0x03; /* bit 1 is padding after 17 bits */
    assert_int_equal(demo_stage_check_padding(m, sizeof m, 17, err), STATUS_EMALFORMED);
    assert_int_equal(demo_stage_check_crc(m, sizeof m, err), STATUS_ECORRUPT);

    assert_int_equal(demo_stage_hdr_get(NULL, 0, &r, err), STATUS_EMALFORMED);
    assert_int_equal(demo_stage_hdr_get(m, DEMO_STAGE_HEADER_LEN - 1, &r, err), STATUS_EMALFORMED);
    uint8_t b[DEMO_STAGE_HEADER_LEN];
    memcpy(b, m, sizeof b);
    b[0] = 'X';
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), STATUS_EMALFORMED);
    memcpy(b, m, sizeof b);
    b[4] = 2; /* the version before index modes: refused */
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), STATUS_EVERSION);
    memcpy(b, m, sizeof b);
    b[5] = DEMO_VAL_SIGN + 1;
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), STATUS_EMALFORMED);
    memcpy(b, m, sizeof b);
    b[11] = DEMO_IDX_SHARED + 1;
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), STATUS_EMALFORMED);
    assert_int_equal(r.xform, DEMO_XFORM_DCT);
    /* the transform: octet 11's high four bits */
    h.xform = DEMO_XFORM_NONE;
    demo_stage_hdr_put(b, &h);
    assert_int_equal(b[11], 0x11);
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), 0);
    assert_int_equal(r.imode, DEMO_IDX_SHARED);
    assert_int_equal(r.xform, DEMO_XFORM_NONE);
    b[11] = (DEMO_XFORM_NONE + 1) << 4;
    assert_int_equal(demo_stage_hdr_get(b, sizeof b, &r, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "transform"));
}

static void test_msg_truncations_and_fields(void **state)
{
    (void)state;
    const demo_vfmt_t fs[3] = {DEMO_VAL_F32, DEMO_VAL_BF16, DEMO_VAL_SIGN};
    for (int fi = 0; fi < 3; fi++) {
        demo_cfg_t cfg = {16, 3, fs[fi], 0.0f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
        char err[STATUS_ERR_LEN];
        demo_t *d = demo_new(16, 40, &cfg, err); /* tiles 16 x 10 */
        size_t len;
        uint8_t *m = random_message(d, 7, &len);
        demo_msg_info_t info;
        for (size_t l = 0; l < len; l++) {
            uint8_t *t = malloc(l ? l : 1);
            memcpy(t, m, l);
            err[0] = 0;
            assert_true(demo_msg_parse(t, l, &info, err) < 0);
            assert_true(strlen(err) > 0);
            free(t);
        }
        uint8_t *t = malloc(len + 1);
        memcpy(t, m, len);
        t[len] = 0;
        assert_int_equal(demo_msg_parse(t, len + 1, &info, err), STATUS_EMALFORMED);
        free(t);
        uint8_t *b = malloc(len);
#define FRESH memcpy(b, m, len)
        FRESH;
        b[4] = 9;
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EVERSION);
        FRESH;
        b[5] = 3;
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[6] = 1; /* claims dense */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[7] = 2; /* claims u16 */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[16] = 4; /* k 4: lengths disagree */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[8] = 0; /* rows 0 */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[11] = 0xff; /* rows ~4e9: element count beyond 2^40 */
        b[15] = 0xff;
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[20] = 0; /* chunk 0 */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[40] ^= 0x10; /* payload bit */
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_ECORRUPT);
        FRESH;
        b[DEMO_HEADER_LEN + 1] = b[DEMO_HEADER_LEN]; /* repeated index */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        FRESH;
        b[DEMO_HEADER_LEN + 2] = 200; /* index beyond the 160-coefficient tile */
        refix_crc(b, len);
        assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        /* values: NaN, Inf, above 1e30; sign: negative or NaN scale, padding bits */
        size_t vo = DEMO_HEADER_LEN + 4 * 3; /* 4 tiles x 3 u8 indices */
        if (fs[fi] == DEMO_VAL_F32) {
            const uint32_t bad[3] = {0x7fc00000u, 0x7f800000u, 0x7e000000u};
            for (int i = 0; i < 3; i++) {
                FRESH;
                for (int j = 0; j < 4; j++) b[vo + 4 + j] = (uint8_t)(bad[i] >> (8 * j));
                refix_crc(b, len);
                assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
            }
        } else if (fs[fi] == DEMO_VAL_BF16) {
            FRESH;
            b[vo + 2] = 0x80;
            b[vo + 3] = 0x7f;
            refix_crc(b, len);
            assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        } else {
            FRESH;
            b[27] |= 0x80; /* negative scale */
            refix_crc(b, len);
            assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
            FRESH;
            b[24] = 0, b[25] = 0, b[26] = 0xc0, b[27] = 0x7f; /* NaN */
            refix_crc(b, len);
            assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
            FRESH;
            b[len - 1] |= 0x80; /* 12 values: bits 12..15 of the last byte are padding */
            refix_crc(b, len);
            assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        }
        FRESH;
        if (fs[fi] != DEMO_VAL_SIGN) {
            b[24] = 1; /* scale on a non-sign message */
            refix_crc(b, len);
            assert_int_equal(demo_msg_parse(b, len, &info, err), STATUS_EMALFORMED);
        }
        FRESH;
        assert_int_equal(demo_msg_parse(b, len, &info, err), 0);
#undef FRESH
        free(b);
        free(m);
        demo_destroy(&d);
    }
}

static void test_msg_random_corruptions(void **state)
{
    (void)state;
    const demo_vfmt_t fs[4] = {DEMO_VAL_F32, DEMO_VAL_BF16, DEMO_VAL_SIGN, DEMO_VAL_SIGN};
    const int ks[4] = {5, 5, 3, 40}; /* the last one dense */
    for (int fi = 0; fi < 4; fi++) {
        demo_cfg_t cfg = {8, ks[fi], fs[fi], 0.0f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
        char err[STATUS_ERR_LEN];
        demo_t *d = demo_new(16, 24, &cfg, err);
        assert_non_null(d);
        size_t len;
        uint8_t *m = random_message(d, 3, &len);
        size_t n = (size_t)demo_elems(d);
        float *q = malloc(n * sizeof *q);
        rng_t r;
        rng_seed(&r, 777 + (uint64_t)fi);
        int ok = 0;
        for (int it = 0; it < 10000; it++) {
            size_t l = len;
            int op = (int)rng_below(&r, 4);
            if (op == 2) l = (size_t)rng_below(&r, len + 1);
            if (op == 3) l = len + 1 + (size_t)rng_below(&r, 32);
            uint8_t *t = malloc(l ? l : 1);
            for (size_t i = 0; i < l; i++) t[i] = i < len ? m[i] : (uint8_t)rng_next(&r);
            int edits = 1 + (int)rng_below(&r, 3);
            for (int e = 0; e < edits && l; e++) {
                size_t at = (size_t)rng_below(&r, l);
                if (rng_below(&r, 2))
                    t[at] ^= (uint8_t)(1u << rng_below(&r, 8));
                else
                    t[at] = (uint8_t)rng_next(&r);
            }
            if (rng_below(&r, 2)) refix_crc(t, l);
            /* unpack into exactly n entries, and aggregate it with the good message */
            uint16_t *idx = malloc(n * sizeof *idx);
            float *val = malloc(n * sizeof *val);
            demo_msg_info_t info;
            int rc = demo_msg_unpack(t, l, &info, idx, val, n, err);
            if (rc == 0) {
                size_t ne = (size_t)(info.tiles * info.k);
                assert_true(ne <= n);
                for (size_t e = 0; e < ne; e++) {
                    assert_true(fabsf(val[e]) <= DEMO_MAX_ABS);
                    assert_true(idx[e] < info.tile_rows * info.tile_cols);
                }
            }
            const uint8_t *msgs[2] = {m, t};
            const size_t lens[2] = {len, l};
            int rc2 = demo_aggregate(d, msgs, lens, 2, q, err);
            if (rc2 == 0) {
                ok++;
                for (size_t i = 0; i < n; i++) assert_true(isfinite(q[i]));
            } else {
                assert_true(rc2 < 0);
            }
            free(idx);
            free(val);
            free(t);
        }
        print_message("demo format %d k %d: %d of 10000 corrupted messages aggregated\n", fs[fi],
                      ks[fi], ok);
        free(q);
        free(m);
        demo_destroy(&d);
    }
}

/* --- version-2 bodies --------------------------------------------------------------- */

/* One tensor's body at an odd bit offset between two other bodies: the same entries as
 * the v1 message, the neighbours' bits untouched, the length of the formula. */
static void check_body_roundtrip(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t f)
{
    demo_cfg_t cfg = {chunk, k, f, 0.5f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    demo_t *a = demo_new(rows, cols, &cfg, err), *b = demo_new(rows, cols, &cfg, err);
    assert_non_null(a);
    assert_non_null(b);
    size_t n = (size_t)(rows * cols);
    float *g = malloc(n * sizeof *g);
    testutil_fill_normal(g, n, 91 + (uint64_t)k, 1.0f);
    g[0] = 0.0f; /* an exact zero, for the sign bits */
    assert_int_equal(demo_accumulate(a, g, 0.1f, err), 0);
    assert_int_equal(demo_accumulate(b, g, 0.1f, err), 0);
    uint64_t bits = demo_body_size(b);
    assert_int_equal(bits, demo_body_bits(rows, cols, chunk, k, f));
    /* the formula: scale, ceil(log2 tn)-bit indices unless dense, values */
    int kt = demo_entries_per_tile(rows, cols, chunk, k, f);
    int tn = (int)(dct_chunk_size(rows, chunk) * dct_chunk_size(cols, chunk)), ib = 0;
    if (kt < tn)
        while ((1 << ib) < tn) ib++;
    uint64_t ne = (uint64_t)(n / (size_t)tn) * (uint64_t)kt;
    int vb = f == DEMO_VAL_F32 ? 32 : f == DEMO_VAL_BF16 ? 16 : 1;
    assert_int_equal(bits, (f == DEMO_VAL_SIGN ? 16 : 0) + ne * (uint64_t)(ib + vb));

    size_t len1, cap1 = demo_msg_size(a);
    uint8_t *m1 = malloc(cap1);
    assert_int_equal(demo_extract(a, m1, cap1, &len1, err), 0);
    const uint64_t at = 13; /* 13 bits of something else before, 11 after */
    size_t cap2 = (size_t)((at + bits + 11 + 7) / 8);
    uint8_t *m2 = malloc(cap2);
    memset(m2, 0xa5, cap2);
    /* no room for the body: refused, D untouched */
    float *keep = malloc(n * sizeof *keep);
    memcpy(keep, demo_momentum(b), n * sizeof *keep);
    assert_int_equal(demo_extract_body(b, m2, (size_t)((at + bits + 7) / 8) - 1, at, err),
                     STATUS_EINVAL);
    assert_memory_equal(keep, demo_momentum(b), n * sizeof *keep);
    free(keep);
    assert_int_equal(demo_extract_body(b, m2, cap2, at, err), 0);
    /* same residual as the v1 extraction */
    assert_memory_equal(demo_momentum(a), demo_momentum(b), n * sizeof(float));
    /* neighbours untouched: bits [0, 13) and [13 + bits, 8 cap2) still 0xa5 */
    for (uint64_t i = 0; i < 8 * (uint64_t)cap2; i++) {
        if (i >= at && i < at + bits) continue;
        assert_int_equal((m2[i / 8] >> (i % 8)) & 1, (0xa5 >> (i % 8)) & 1);
    }
    uint16_t *i1 = malloc(n * sizeof *i1), *i2 = malloc(n * sizeof *i2);
    float *v1 = malloc(n * sizeof *v1), *v2 = malloc(n * sizeof *v2);
    demo_msg_info_t info;
    float scale;
    assert_int_equal(demo_msg_unpack(m1, len1, &info, i1, v1, n, err), 0);
    assert_int_equal(
        demo_body_unpack(m2, cap2, at, rows, cols, chunk, k, f, i2, v2, n, &scale, err), 0);
    assert_memory_equal(i1, i2, ne * sizeof *i1);
    for (uint64_t e = 0; e < ne; e++) {
        if (f != DEMO_VAL_SIGN) {
            assert_true(v1[e] == v2[e]);
        } else { /* bf16 scale: within 2^-8 of v1's f32 scale */
            assert_true((v1[e] < 0) == (v2[e] < 0));
            assert_true(fabsf(fabsf(v2[e]) - info.scale) <= info.scale / 256);
            assert_true(fabsf(v2[e]) == scale);
        }
    }
    /* a body that does not fit its buffer is refused, never read */
    size_t need = (size_t)((at + bits + 7) / 8);
    assert_int_equal(
        demo_body_unpack(m2, need - 1, at, rows, cols, chunk, k, f, i2, v2, n, &scale, err),
        STATUS_EMALFORMED);
    assert_int_equal(
        demo_body_unpack(m2, need, at, rows, cols, chunk, k, f, i2, v2, ne - 1, &scale, err),
        STATUS_EINVAL);
    /* aggregation of the body alone = the v1 aggregate of its message (f32, bf16: exactly) */
    double *sum = calloc(n, sizeof *sum);
    uint32_t *cnt = calloc(n, sizeof *cnt);
    float *q1 = malloc(n * sizeof *q1), *q2 = malloc(n * sizeof *q2);
    assert_int_equal(demo_body_add(b, m2, need - 1, at, k, f, sum, cnt, err), STATUS_EMALFORMED);
    for (size_t i = 0; i < n; i++) assert_true(sum[i] == 0 && cnt[i] == 0);
    assert_int_equal(demo_body_add(b, m2, cap2, at, k, f, sum, cnt, err), 0);
    demo_body_finish(b, sum, cnt, q2);
    const uint8_t *ms[1] = {m1};
    const size_t ls[1] = {len1};
    assert_int_equal(demo_aggregate(a, ms, ls, 1, q1, err), 0);
    if (f != DEMO_VAL_SIGN) assert_memory_equal(q1, q2, n * sizeof *q1);
    for (size_t i = 0; i < n; i++)
        assert_true(fabsf(q1[i] - q2[i]) <= 0.01f * fabsf(q1[i]) + 1e-6f);
    free(sum);
    free(cnt);
    free(q1);
    free(q2);
    free(i1);
    free(i2);
    free(v1);
    free(v2);
    free(m1);
    free(m2);
    free(g);
    demo_destroy(&a);
    demo_destroy(&b);
}

static void test_body_roundtrip(void **state)
{
    (void)state;
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++) {
        check_body_roundtrip(128, 64, 64, 4, (demo_vfmt_t)f); /* 4096: 12-bit indices */
        check_body_roundtrip(86, 64, 64, 3, (demo_vfmt_t)f);  /* 43 x 64 = 2752: 12 bits */
        check_body_roundtrip(64, 64, 16, 1, (demo_vfmt_t)f);  /* 256: 8 bits */
        check_body_roundtrip(32, 48, 8, 5, (demo_vfmt_t)f);   /* 64: 6 bits */
        check_body_roundtrip(1, 64, 16, 1, (demo_vfmt_t)f);   /* a norm, 1 x 16 tiles */
        check_body_roundtrip(1, 64, 64, 60, (demo_vfmt_t)f);  /* dense */
        check_body_roundtrip(6, 10, 3, 2, (demo_vfmt_t)f);    /* 3 x 5 = 15: 4 bits */
    }
    /* pack / unpack of chosen entries, a bf16 scale that would round above 1e30 */
    uint8_t buf[64];
    char err[STATUS_ERR_LEN];
    const uint16_t idx[2] = {3, 60};
    const float big[2] = {1e30f, -1e30f}, bad[2] = {1.0f, NAN};
    uint16_t i2[2];
    float v2[2], scale;
    assert_int_equal(demo_body_pack(buf, sizeof buf, 3, 1, 64, 64, 2, DEMO_VAL_SIGN, idx, big, err),
                     0);
    assert_int_equal(
        demo_body_unpack(buf, sizeof buf, 3, 1, 64, 64, 2, DEMO_VAL_SIGN, i2, v2, 2, &scale, err),
        0);
    assert_true(scale <= DEMO_MAX_ABS && scale > 0.99e30f);
    assert_true(v2[0] == scale && v2[1] == -scale && i2[0] == 3 && i2[1] == 60);
    assert_int_equal(demo_body_pack(buf, sizeof buf, 3, 1, 64, 64, 2, DEMO_VAL_F32, idx, bad, err),
                     STATUS_EINVAL);
    const uint16_t desc[2] = {60, 3};
    assert_int_equal(demo_body_pack(buf, sizeof buf, 3, 1, 64, 64, 2, DEMO_VAL_F32, desc, big, err),
                     STATUS_EINVAL);
    assert_int_equal(demo_body_pack(buf, 1, 3, 1, 64, 64, 2, DEMO_VAL_F32, idx, big, err),
                     STATUS_EINVAL);
    assert_int_equal(demo_body_bits(1, 64, 64, 0, (demo_vfmt_t)3), 0);
    /* decoder: repeated index, negative scale */
    memset(buf, 0, sizeof buf);
    assert_int_equal(
        demo_body_unpack(buf, sizeof buf, 0, 1, 64, 64, 2, DEMO_VAL_F32, i2, v2, 2, &scale, err),
        STATUS_EMALFORMED); /* indices 0, 0 */
    assert_int_equal(demo_body_pack(buf, sizeof buf, 0, 1, 64, 64, 2, DEMO_VAL_SIGN, idx, big, err),
                     0);
    buf[1] |= 0x80; /* bf16 sign bit */
    assert_int_equal(
        demo_body_unpack(buf, sizeof buf, 0, 1, 64, 64, 2, DEMO_VAL_SIGN, i2, v2, 2, &scale, err),
        STATUS_EMALFORMED);
}

/* --- shared indices ----------------------------------------------------------------- */

/* The draw: kt distinct indices per tile, ascending, below tn; the same for the same seed
 * and tile on every call; each tile its own stream; roughly uniform; kt >= tn: all.
 * A golden vector pins the algorithm of docs/codec-format.md 4.2. */
static void test_shared_indices(void **state)
{
    (void)state;
    uint8_t mark[4096];
    uint16_t a[3 * 40], b[3 * 40], one[40];
    demo_shared_indices(a, 3, 256, 40, 77, mark);
    demo_shared_indices(b, 3, 256, 40, 77, mark);
    assert_memory_equal(a, b, sizeof a);
    for (int t = 0; t < 3; t++)
        for (int j = 0; j < 40; j++) {
            assert_true(a[t * 40 + j] < 256);
            if (j) assert_true(a[t * 40 + j] > a[t * 40 + j - 1]);
        }
    assert_memory_not_equal(a, a + 40, 40 * sizeof *a); /* tiles differ */
    demo_shared_indices(b, 3, 256, 40, 78, mark);
    assert_memory_not_equal(a, b, sizeof a); /* seeds differ */
    /* tile t of a tensor is tile 0 of the stream rng_mix(seed, t)... by construction: the
     * same tile drawn alone with the same seed gives the same indices */
    demo_shared_indices(one, 1, 256, 40, 77, mark);
    assert_memory_equal(one, a, sizeof one);
    /* all */
    uint16_t all[16];
    demo_shared_indices(all, 1, 16, 16, 5, mark);
    for (int j = 0; j < 16; j++) assert_int_equal(all[j], j);
    /* golden: tn 256, kt 4, seed 1, tiles 0 and 1 (checked against an independent Python
     * rendering of SplitMix64, xoshiro256**, rng_mix and the draw) */
    uint16_t g[8];
    demo_shared_indices(g, 2, 256, 4, 1, mark);
    print_message("shared draw (tn 256, kt 4, seed 1): %u %u %u %u | %u %u %u %u\n", g[0], g[1],
                  g[2], g[3], g[4], g[5], g[6], g[7]);
    static const uint16_t golden[8] = {42, 154, 213, 235, 129, 168, 185, 186};
    assert_memory_equal(g, golden, sizeof g);
    /* uniform enough: over 4000 draws of 8 of 64, every index 500 +- 120 times */
    int hits[64] = {0};
    uint16_t d[8];
    for (uint64_t s = 0; s < 4000; s++) {
        demo_shared_indices(d, 1, 64, 8, s, mark);
        for (int j = 0; j < 8; j++) hits[d[j]]++;
    }
    for (int i = 0; i < 64; i++) assert_true(hits[i] > 380 && hits[i] < 620);
}

/* A shared-index body: no index bits; the receiver, drawing with the same seed, gets the
 * sender's entries (the coefficients at the drawn places); D loses exactly those; a body
 * that does not fit is refused; bodies of 4 replicas aggregate to the mean of the four. */
static void check_shared_body(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t f)
{
    demo_cfg_t cfg = {chunk, k, f, 0.5f, DEMO_IDX_SHARED, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    demo_t *a = demo_new(rows, cols, &cfg, err);
    assert_non_null(a);
    size_t n = (size_t)(rows * cols);
    int cr = (int)dct_chunk_size(rows, chunk), cc = (int)dct_chunk_size(cols, chunk), tn = cr * cc;
    int kt = demo_entries_per_tile_ex(rows, cols, chunk, k, f, DEMO_IDX_SHARED);
    assert_int_equal(kt, k < tn ? k : tn);
    uint64_t ne = (uint64_t)(n / (size_t)tn) * (uint64_t)kt;
    int vb = f == DEMO_VAL_F32 ? 32 : f == DEMO_VAL_BF16 ? 16 : 1;
    uint64_t bits = demo_body_size(a);
    assert_int_equal(bits, ne * (uint64_t)vb); /* no indices, no scale */
    assert_int_equal(bits, demo_body_bits_ex(rows, cols, chunk, k, f, DEMO_IDX_SHARED));
    /* the v1 message layer has no shared mode */
    uint8_t tiny_buf[64];
    size_t w;
    assert_int_equal(demo_extract(a, tiny_buf, sizeof tiny_buf, &w, err), STATUS_EINVAL);

    float *g = malloc(n * sizeof *g), *before = malloc(n * sizeof *before);
    testutil_fill_normal(g, n, 17 + (uint64_t)k, 1.0f);
    assert_int_equal(demo_accumulate(a, g, 0.1f, err), 0);
    memcpy(before, demo_momentum(a), n * sizeof *before);
    double *c0 = malloc(n * sizeof *c0);
    naive_dct(c0, before, rows, cols, cr, cc);
    const uint64_t at = 5, seed = 0x1234;
    size_t cap = (size_t)((at + bits + 7) / 8);
    uint8_t *m = calloc(cap, 1);
    assert_int_equal(demo_extract_body_ex(a, m, cap, at, seed, err), 0);
    uint16_t *idx = malloc(n * sizeof *idx), *drawn = malloc(n * sizeof *drawn);
    float *val = malloc(n * sizeof *val), scale;
    uint8_t *mark = malloc((size_t)tn);
    assert_int_equal(demo_body_unpack_ex(m, cap, at, rows, cols, chunk, k, f, DEMO_IDX_SHARED, seed,
                                         idx, val, n, &scale, err),
                     0);
    demo_shared_indices(drawn, (int64_t)(n / (size_t)tn), tn, kt, seed, mark);
    if (kt < tn) assert_memory_equal(idx, drawn, ne * sizeof *idx);
    double *sent = calloc(n, sizeof *sent);
    for (uint64_t e = 0; e < ne; e++) {
        uint64_t pos = (e / (uint64_t)kt) * (uint64_t)tn + idx[e];
        double want = c0[pos];
        if (f == DEMO_VAL_F32) assert_true(fabs(val[e] - want) <= 1e-4 * (1 + fabs(want)));
        if (f == DEMO_VAL_SIGN && want != 0) assert_true((val[e] < 0) == (want < 0));
        sent[pos] = f == DEMO_VAL_BF16 ? val[e] : want; /* bf16: the rounded value left D */
    }
    /* residual: D = before - IDCT(sent) */
    double *x = malloc(n * sizeof *x);
    naive_idct(x, sent, rows, cols, cr, cc);
    for (size_t i = 0; i < n; i++)
        assert_true(fabs(demo_momentum(a)[i] - (before[i] - x[i])) <= 1e-4);
    /* truncated: refused, nothing read */
    assert_int_equal(demo_body_unpack_ex(m, cap - 1, at, rows, cols, chunk, k, f, DEMO_IDX_SHARED,
                                         seed, idx, val, n, &scale, err),
                     STATUS_EMALFORMED);
    double *sum = calloc(n, sizeof *sum);
    uint32_t *cnt = calloc(n, sizeof *cnt);
    assert_int_equal(
        demo_body_add_ex(a, m, cap - 1, at, k, f, DEMO_IDX_SHARED, seed, sum, cnt, err),
        STATUS_EMALFORMED);
    for (size_t i = 0; i < n; i++) assert_true(sum[i] == 0 && cnt[i] == 0);
    /* 4 senders of this body: every drawn coefficient counted 4 times, nothing else */
    for (int r = 0; r < 4; r++)
        assert_int_equal(
            demo_body_add_ex(a, m, cap, at, k, f, DEMO_IDX_SHARED, seed, sum, cnt, err), 0);
    uint64_t counted = 0;
    for (size_t i = 0; i < n; i++) {
        assert_true(cnt[i] == 0 || cnt[i] == 4);
        counted += cnt[i] == 4;
    }
    assert_int_equal(counted, ne);
    free(sum);
    free(cnt);
    free(x);
    free(sent);
    free(mark);
    free(idx);
    free(drawn);
    free(val);
    free(m);
    free(c0);
    free(g);
    free(before);
    demo_destroy(&a);
}

static void test_shared_body(void **state)
{
    (void)state;
    for (int f = DEMO_VAL_F32; f <= DEMO_VAL_SIGN; f++) {
        check_shared_body(64, 64, 16, 9, (demo_vfmt_t)f);
        check_shared_body(128, 64, 64, 36, (demo_vfmt_t)f);
        check_shared_body(1, 64, 16, 9, (demo_vfmt_t)f);   /* a norm, 1 x 16 tiles */
        check_shared_body(1, 64, 16, 16, (demo_vfmt_t)f);  /* dense */
        check_shared_body(44, 64, 64, 36, (demo_vfmt_t)f); /* 44 x 64 tiles */
        check_shared_body(6, 10, 3, 2, (demo_vfmt_t)f);
    }
    /* a bad index mode is refused */
    assert_int_equal(demo_body_bits_ex(64, 64, 16, 1, DEMO_VAL_SIGN, (demo_imode_t)2), 0);
    demo_cfg_t cfg = {
        16, 1, DEMO_VAL_SIGN, 0.5f, (demo_imode_t)2, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
    char err[STATUS_ERR_LEN];
    assert_null(demo_new(64, 64, &cfg, err));
}

/* Sign mode cannot say zero: an exactly-zero value gets its sign bit from the seed, so a
 * tile with no momentum (unused embedding rows) sends no fixed direction step after step. */
static void test_sign_zero_unbiased(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    for (int mode = DEMO_IDX_TOPK; mode <= DEMO_IDX_SHARED; mode++) {
        demo_cfg_t cfg = {
            16, 1, DEMO_VAL_SIGN, 0.999f, (demo_imode_t)mode, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
        demo_t *d = demo_new(32, 32, &cfg, err); /* 4 tiles, D = 0 */
        assert_non_null(d);
        uint64_t bits = demo_body_size(d);
        uint8_t m[16], m2[16];
        int neg = 0, total = 0;
        for (uint64_t seed = 0; seed < 64; seed++) {
            memset(m, 0, sizeof m);
            memset(m2, 0, sizeof m2);
            assert_int_equal(demo_extract_body_ex(d, m, sizeof m, 0, seed, err), 0);
            assert_int_equal(demo_extract_body_ex(d, m2, sizeof m2, 0, seed, err), 0);
            assert_memory_equal(m, m2, sizeof m); /* deterministic */
            uint16_t idx[4];
            float val[4], scale;
            assert_int_equal(demo_body_unpack_ex(m, (size_t)((bits + 7) / 8), 0, 32, 32, 16, 1,
                                                 DEMO_VAL_SIGN, (demo_imode_t)mode, seed, idx, val,
                                                 4, &scale, err),
                             0);
            /* all zero: top-k's scale says so; shared bodies have none (votes of +-1) */
            assert_true(scale == (mode == DEMO_IDX_TOPK ? 0.0f : 1.0f));
            for (int e = 0; e < 4; e++) neg += signbit(val[e]) != 0, total++;
        }
        assert_true(neg > total / 4 && neg < 3 * total / 4);
        demo_destroy(&d);
    }
}

/* --- four replicas, 100 steps ------------------------------------------------------ */

static void test_replicas_stay_identical(void **state)
{
    (void)state;
    enum { R = 4, STEPS = 100, NT = 3 };
    const int64_t rows[NT] = {96, 1, 86}, cols[NT] = {80, 200, 64};
    const demo_vfmt_t fmt[NT] = {DEMO_VAL_F32, DEMO_VAL_SIGN, DEMO_VAL_BF16};
    const int ks[NT] = {32, 4, 8};
    char err[STATUS_ERR_LEN];
    for (int t = 0; t < NT; t++) {
        size_t n = (size_t)(rows[t] * cols[t]);
        demo_t *d[R];
        float *p[R], *q[R], *g = malloc(n * sizeof *g);
        uint8_t *msg[R];
        size_t len[R];
        for (int r = 0; r < R; r++) {
            demo_cfg_t cfg = {
                64, ks[t], fmt[t], 0.999f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT};
            d[r] = demo_new(rows[t], cols[t], &cfg, err);
            assert_non_null(d[r]);
            p[r] = malloc(n * sizeof(float));
            q[r] = malloc(n * sizeof(float));
            testutil_fill_normal(p[r], n, 1234, 0.02f); /* same init everywhere */
            msg[r] = malloc(demo_msg_size(d[r]));
        }
        rng_t rr;
        rng_seed(&rr, 42);
        for (int step = 0; step < STEPS; step++) {
            for (int r = 0; r < R; r++) {
                /* each replica: its own gradient, a bit of "loss" pulling p to 0 */
                testutil_fill_normal(g, n, rng_mix((uint64_t)step, (uint64_t)r), 0.01f);
                for (size_t i = 0; i < n; i++) g[i] += p[r][i];
                assert_int_equal(demo_accumulate(d[r], g, 1e-3f, err), 0);
                assert_int_equal(demo_extract(d[r], msg[r], demo_msg_size(d[r]), &len[r], err), 0);
            }
            for (int r = 0; r < R; r++) {
                /* every replica receives the messages in its own order */
                const uint8_t *ms[R];
                size_t ls[R];
                for (int i = 0; i < R; i++) {
                    int from = (i + r + step) % R;
                    if (r % 2) from = R - 1 - from;
                    ms[i] = msg[from];
                    ls[i] = len[from];
                }
                assert_int_equal(demo_aggregate(d[r], ms, ls, R, q[r], err), 0);
                demo_apply_sign(p[r], q[r], 1e-3f, n);
            }
            for (int r = 1; r < R; r++) assert_memory_equal(p[0], p[r], n * sizeof(float));
        }
        /* and the training did something: |p| shrank */
        double before = 0, after = 0;
        float *p0 = malloc(n * sizeof *p0);
        testutil_fill_normal(p0, n, 1234, 0.02f);
        for (size_t i = 0; i < n; i++) before += p0[i] * p0[i], after += p[0][i] * p[0][i];
        print_message("tensor %d: |p|^2 %.4g -> %.4g\n", t, before, after);
        assert_true(after < before);
        free(p0);
        for (int r = 0; r < R; r++) {
            demo_destroy(&d[r]);
            free(p[r]);
            free(q[r]);
            free(msg[r]);
        }
        free(g);
    }
}

/* --- bytes of the small model ------------------------------------------------------- */

static void test_small_model_bytes(void **state)
{
    (void)state;
    /* wte 256x256; 8 x {attn_norm 256, wq wk wv wo 256x256, ffn_norm 256, w1 w3 688x256,
     * w2 256x688}; norm 256; lm_head 256x256 */
    typedef struct {
        int64_t r, c;
        int count;
    } shp_t;
    const shp_t shapes[] = {
        {256, 256, 1 + 8 * 4 + 1}, {1, 256, 8 * 2 + 1}, {688, 256, 16}, {256, 688, 8}};
    const struct {
        int k;
        demo_vfmt_t f;
        const char *name;
    } cfgs[] = {{32, DEMO_VAL_F32, "k=32 f32"},
                {4, DEMO_VAL_SIGN, "k=4 sign"},
                {1, DEMO_VAL_SIGN, "k=1 sign"}};
    for (int c = 0; c < 3; c++) {
        double params = 0, bytes = 0, payload = 0;
        int tensors = 0;
        for (int s = 0; s < 4; s++) {
            size_t b = demo_message_bytes(shapes[s].r, shapes[s].c, 64, cfgs[c].k, cfgs[c].f);
            assert_true(b > 0);
            params += (double)shapes[s].count * shapes[s].r * shapes[s].c;
            bytes += (double)shapes[s].count * b;
            payload += (double)shapes[s].count * (b - DEMO_HEADER_LEN);
            tensors += shapes[s].count;
        }
        print_message("small model, %s: %d tensors, %.0f params, %.0f B/step (%.0f payload) = "
                      "%.5f B/param (%.5f without headers)\n",
                      cfgs[c].name, tensors, params, bytes, payload, bytes / params,
                      payload / params);
        assert_true(params > 6.4e6 && params < 6.5e6);
    }
    /* the reference numbers: 0.065, 0.0028, 0.0007 B/param (without headers) */
    size_t w = demo_message_bytes(256, 256, 64, 32, DEMO_VAL_F32);
    assert_int_equal(w, DEMO_HEADER_LEN + 16 * 32 * (2 + 4));
    assert_int_equal(demo_message_bytes(688, 256, 64, 32, DEMO_VAL_F32),
                     DEMO_HEADER_LEN + 16 * 4 * 32 * (2 + 4)); /* 43 x 64 tiles */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chunk_size),
        cmocka_unit_test(test_dct_1d),
        cmocka_unit_test(test_dct_2d),
        cmocka_unit_test(test_dct_identity),
        cmocka_unit_test(test_topk_brute),
        cmocka_unit_test(test_index_packing),
        cmocka_unit_test(test_dense_rule),
        cmocka_unit_test(test_aggregate_by_hand),
        cmocka_unit_test(test_aggregate_permutation),
        cmocka_unit_test(test_residual_identity),
        cmocka_unit_test(test_no_transform),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_stage_frame),
        cmocka_unit_test(test_msg_truncations_and_fields),
        cmocka_unit_test(test_msg_random_corruptions),
        cmocka_unit_test(test_body_roundtrip),
        cmocka_unit_test(test_shared_indices),
        cmocka_unit_test(test_shared_body),
        cmocka_unit_test(test_sign_zero_unbiased),
        cmocka_unit_test(test_replicas_stay_identical),
        cmocka_unit_test(test_small_model_bytes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
