/* test_cuda_compress.c — compression on the device: the "cuda" backend's compression ops
 * (kernels.h: tile DCT, top-k, scatter, apply_sign, quantize, dequantize) against "ref",
 * and the device paths built on them against the host paths: DeMo steps of a cuda-backed
 * stage (model/demo_opt.c keeps D on the device) against a cpu-backed one, and the
 * stage boundary's messages (stage_wire_*) against codec_encode / codec_decode.
 *
 * Skips (exit 77) when the build has no CUDA or no usable device is found, saying why.
 * SWARMTRAIN_TEST_BACKEND=cpu runs the same checks with the cpu backend posing as a
 * device (on_device = 1: stage and demo_opt then take their device paths, through upload
 * and download); there every comparison below must be exact, since "cpu" is bit-identical
 * to the host code (ctest runs this as test_cuda_compress_cpu, without a GPU).
 *
 * Tolerances on a GPU, and why:
 *   DCT (forward, inverse)         1e-5 normalized: the same sums in the same order, each
 *                                  step a fused multiply-add (measured ~1e-7);
 *   topk, scatter, apply_sign,     exact: no arithmetic but IEEE divisions, one rounding
 *   quantize, dequantize           each, compares and copies;
 *   a DeMo step's selected values  1e-5 of the tensor's largest (they are DCT outputs);
 *   the residual momentum          5e-5 normalized (D = beta D + lr g in FMA, DCT,
 *                                  removal: a few roundings of values up to max |D|);
 *   which coefficients are chosen  exact on data built with well-separated magnitudes;
 *                                  on random data a tile's choice may differ only between
 *                                  values within 1e-5 of the max of its k-th largest
 *                                  (a near-tie the DCT's rounding decides), at most 1%;
 *   parameters after a mixed pool  exact: aggregation is on the host, the update
 *   applies the same messages      p * (1 - lr wd) - lr sign(Q) rounds the same way.
 * Not for: the other ops (test_cuda.c), speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "compress/demo.h"
#include "kernels/dct.h"
#include "kernels/kern_impl.h" /* a host backend posing as a device (main) */
#include "model/demo_opt.h"
#include "model/stage.h"
#include "testutil.h"
#ifdef SWARMTRAIN_HAVE_CUDA
#include "kernels/cuda/kern_cuda.h"
#endif

#define TOL_DCT 1e-5
#define TOL_VAL 1e-5
#define TOL_D   5e-5

static kern_t *gk;  /* under test: "cuda", or a cpu posing as a device */
static kern_t *gr;  /* the "ref" oracle */
static kern_t *gc;  /* a host "cpu" backend: the host paths of stage and demo_opt */
static int is_cuda; /* gk is cuda (else everything must be exact) */

/* --- helpers ----------------------------------------------------------------------- */

static void no_backend_error(void)
{
#ifdef SWARMTRAIN_HAVE_CUDA
    if (!is_cuda) return;
    const char *e = kern_cuda_last_error(gk);
    if (e) fail_msg("cuda backend error: %s", e);
#endif
}

static float *randn(size_t n, uint64_t seed, float std)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    testutil_fill_normal(x, n, seed, std);
    return x;
}

static void *dev(const void *host, size_t bytes)
{
    void *d = kern_alloc(gk, bytes ? bytes : 1);
    assert_non_null(d);
    if (host) kern_upload(gk, d, host, bytes);
    return d;
}

static void *fetch(const void *d, size_t bytes)
{
    void *h = malloc(bytes ? bytes : 1);
    assert_non_null(h);
    kern_download(gk, h, d, bytes);
    no_backend_error();
    return h;
}

/* Normalized error of the device's n floats against want, within tol (0 off a GPU). */
static void check_close(const char *what, const float *d, const float *want, size_t n, double tol)
{
    float *got = fetch(d, n * sizeof(float));
    double err = testutil_norm_err(got, want, n);
    printf("  %-30s n=%-8zu err %.2e (tol %.0e)\n", what, n, err, is_cuda ? tol : 0.0);
    if (!(err <= (is_cuda ? tol : 0.0)))
        fail_msg("%s: normalized error %.3e > %.1e", what, err, is_cuda ? tol : 0.0);
    free(got);
}

static void check_exact(const char *what, const void *d, const void *want, size_t bytes)
{
    uint8_t *got = fetch(d, bytes);
    if (memcmp(got, want, bytes)) {
        size_t i = 0;
        while (got[i] == ((const uint8_t *)want)[i]) i++;
        fail_msg("%s: differs from ref at byte %zu of %zu", what, i, bytes);
    }
    printf("  %-30s %zu bytes identical\n", what, bytes);
    free(got);
}

static float *basis_host(int n)
{
    float *b = malloc((size_t)n * n * sizeof *b);
    assert_non_null(b);
    dct_basis(b, n);
    return b;
}

/* --- the ops against ref ---------------------------------------------------------------- */

static void dct_case(int64_t rows, int64_t cols, int chunk, uint64_t seed)
{
    int cr = (int)dct_chunk_size(rows, chunk), cc = (int)dct_chunk_size(cols, chunk);
    size_t n = (size_t)(rows * cols);
    float *br = basis_host(cr), *bc = basis_host(cc), *x = randn(n, seed, 1.0f);
    float *want = malloc(n * sizeof *want), *back = malloc(n * sizeof *back);
    assert_true(want && back);
    kern_dct_forward(gr, want, x, br, bc, rows, cols, cr, cc);
    kern_dct_inverse(gr, back, x, br, bc, rows, cols, cr, cc);
    float *dbr = dev(br, (size_t)cr * cr * 4), *dbc = dev(bc, (size_t)cc * cc * 4);
    float *dx = dev(x, n * 4), *dy = dev(NULL, n * 4);
    char what[64];
    snprintf(what, sizeof what, "dct_forward %lldx%lld c%d", (long long)rows, (long long)cols,
             chunk);
    kern_dct_forward(gk, dy, dx, dbr, dbc, rows, cols, cr, cc);
    check_close(what, dy, want, n, TOL_DCT);
    snprintf(what, sizeof what, "dct_inverse %lldx%lld c%d", (long long)rows, (long long)cols,
             chunk);
    kern_dct_inverse(gk, dy, dx, dbr, dbc, rows, cols, cr, cc);
    check_close(what, dy, back, n, TOL_DCT);
    kern_free(gk, dbr);
    kern_free(gk, dbc);
    kern_free(gk, dx);
    kern_free(gk, dy);
    free(br);
    free(bc);
    free(x);
    free(want);
    free(back);
}

static void test_dct(void **state)
{
    (void)state;
    dct_case(64, 64, 16, 1);
    dct_case(1, 256, 64, 2); /* 1-D */
    dct_case(30, 42, 8, 3);  /* 6 x 7 tiles */
    dct_case(128, 192, 64, 4);
    dct_case(256, 256, 256, 5); /* one 256 x 256 tile: the largest */
}

/* Ties in |x| (and +-0) every third value, so the index tie-break is exercised. */
static float *tie_values(size_t n, uint64_t seed)
{
    float *x = randn(n, seed, 1.0f);
    for (size_t i = 0; i < n; i++)
        if (i % 3 == 0) x[i] = (float)((int)((i * 7919) % 11) - 5) * 0.25f;
    return x;
}

static void topk_case(int64_t tiles, int tn, int kk, uint64_t seed)
{
    size_t n = (size_t)tiles * tn, ne = (size_t)tiles * kk;
    float *x = tie_values(n, seed), *val = malloc(ne * sizeof *val);
    uint16_t *idx = malloc(ne * sizeof *idx);
    assert_true(val && idx);
    if (tn <= 4096) {
        kern_topk(gr, idx, val, x, tiles, tn, kk);
    } else { /* ref is O(tn^2): demo_topk is the oracle for the largest tiles */
        uint64_t *keys = malloc((size_t)tn * sizeof *keys);
        assert_non_null(keys);
        for (int64_t t = 0; t < tiles; t++) {
            demo_topk(idx + (size_t)t * kk, x + (size_t)t * tn, tn, kk, keys);
            for (int j = 0; j < kk; j++)
                val[(size_t)t * kk + j] = x[(size_t)t * tn + idx[(size_t)t * kk + j]];
        }
        free(keys);
    }
    float *dx = dev(x, n * 4), *dval = dev(NULL, ne * 4);
    uint16_t *didx = dev(NULL, ne * 2);
    kern_topk(gk, didx, dval, dx, tiles, tn, kk);
    char what[64];
    snprintf(what, sizeof what, "topk idx %lldx%d k%d", (long long)tiles, tn, kk);
    check_exact(what, didx, idx, ne * 2);
    check_exact("topk val", dval, val, ne * 4);
    kern_free(gk, dx);
    kern_free(gk, dval);
    kern_free(gk, didx);
    free(x);
    free(val);
    free(idx);
}

static void test_topk(void **state)
{
    (void)state;
    topk_case(7, 64, 1, 10);
    topk_case(7, 64, 8, 11);
    topk_case(7, 64, 64, 12);
    topk_case(3, 4096, 32, 13);
    topk_case(300, 256, 4, 14); /* more tiles than blocks in flight */
    topk_case(1, 65536, 100, 15);
    topk_case(5, 1, 1, 16);
}

static void test_scatter_sign(void **state)
{
    (void)state;
    /* scatter: the selection of random tiles, f32 and bf16-rounded */
    int64_t tiles = 50;
    int tn = 256, kk = 9;
    size_t n = (size_t)tiles * tn, ne = (size_t)tiles * kk;
    float *x = randn(n, 20, 1.0f), *val = malloc(ne * 4), *want = malloc(n * 4);
    uint16_t *idx = malloc(ne * 2);
    assert_true(val && want && idx);
    kern_topk(gr, idx, val, x, tiles, tn, kk);
    float *dval = dev(val, ne * 4), *dy = dev(NULL, n * 4);
    uint16_t *didx = dev(idx, ne * 2);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        kern_scatter(gr, want, idx, val, tiles, tn, kk, bf16);
        kern_scatter(gk, dy, didx, dval, tiles, tn, kk, bf16);
        check_exact(bf16 ? "scatter bf16" : "scatter", dy, want, n * 4);
    }
    /* apply_sign: zeros and a NaN among the signs */
    size_t m = 100003;
    float *q = randn(m, 21, 1.0f), *p = randn(m, 22, 1.0f);
    for (size_t i = 0; i < m; i += 5) q[i] = 0.0f;
    q[1] = NAN;
    uint8_t *signs = malloc(kern_sign_bytes(m));
    assert_non_null(signs);
    kern_sign_pack(signs, q, m);
    float *dp = dev(p, m * 4);
    uint8_t *ds = dev(signs, kern_sign_bytes(m));
    kern_apply_sign(gk, dp, ds, 0.01f, m);
    demo_apply_sign(p, q, 0.01f, m);
    check_exact("apply_sign", dp, p, m * 4);
    kern_free(gk, dval);
    kern_free(gk, dy);
    kern_free(gk, didx);
    kern_free(gk, dp);
    kern_free(gk, ds);
    free(x);
    free(val);
    free(want);
    free(idx);
    free(q);
    free(p);
    free(signs);
}

static void quant_case(int bits, size_t n, uint32_t block, uint64_t seed)
{
    float *x = randn(n, seed, 3.0f);
    for (size_t i = 0; i < n && i < block; i++) x[i] = 0.0f; /* s = 0 */
    for (size_t i = block; i < n && i < 2 * block; i++)
        x[i] = (float)(i % 5) * 1e-44f; /* 1/s inf */
    for (size_t i = 2 * block; i < n && i < 3 * block; i++) x[i] = (float)((int)(i % 9) - 4) * 0.5f;
    size_t plen = kern_quant_bytes(n, bits, block);
    uint8_t *want = malloc(plen);
    float *back = malloc(n * 4);
    assert_true(want && back);
    kern_quantize(gr, want, x, n, bits, block);
    kern_dequantize(gr, back, want, n, bits, block);
    float *dx = dev(x, n * 4);
    uint8_t *dp = dev(NULL, plen);
    kern_quantize(gk, dp, dx, n, bits, block);
    char what[64];
    snprintf(what, sizeof what, "quantize int%d n%zu b%u", bits, n, block);
    check_exact(what, dp, want, plen);
    kern_dequantize(gk, dx, dp, n, bits, block);
    check_exact("dequantize", dx, back, n * 4);
    if (n > block) { /* a non-finite value: NaN scale for its block only */
        x[block] = NAN;
        kern_upload(gk, dx, x, n * 4);
        kern_quantize(gk, dp, dx, n, bits, block);
        uint8_t *got = fetch(dp, plen);
        float s1;
        memcpy(&s1, got + 4, 4);
        assert_true(isnan(s1));
        assert_memory_equal(got, want, 4);
        free(got);
    }
    kern_free(gk, dx);
    kern_free(gk, dp);
    free(x);
    free(want);
    free(back);
}

static void test_quantize(void **state)
{
    (void)state;
    const size_t ns[] = {1, 7, 64, 1000, 65537};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        quant_case(8, ns[i], 1, 30 + i);
        quant_case(8, ns[i], 64, 40 + i);
        quant_case(8, ns[i], 100, 50 + i);
        quant_case(4, ns[i], 2, 60 + i);
        quant_case(4, ns[i], 64, 70 + i);
        quant_case(4, ns[i], 4096, 80 + i);
    }
}

/* --- a DeMo step on a device stage against the host path ------------------------------ */

static model_config_t small_cfg(int stages)
{
    model_config_t c = {.vocab = 256,
                        .dim = 64,
                        .n_layers = 2,
                        .n_heads = 2,
                        .ffn = 128,
                        .seq = 16,
                        .batch = 2,
                        .stages = stages,
                        .norm_eps = 1e-5f,
                        .rope_theta = 10000.0f};
    return c;
}

/* Gradients whose DCT coefficients have well-separated magnitudes in every tile (a
 * random permutation of 1..tn, random signs), so that rounding cannot change a top-k. */
static void separated_grads(float *g, const stage_tensor_t *tab, int nt, int chunk, uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < nt; i++) {
        const stage_tensor_t *t = &tab[i];
        dct_plan_t *plan = dct_plan_new(t->rows, t->cols, chunk, DCT_II, err);
        assert_non_null(plan);
        int tn = dct_plan_tile_rows(plan) * dct_plan_tile_cols(plan);
        int64_t tiles = dct_plan_tiles(plan);
        float *coef = malloc(t->numel * sizeof *coef);
        int *perm = malloc((size_t)tn * sizeof *perm);
        assert_true(coef && perm);
        for (int64_t tt = 0; tt < tiles; tt++) {
            for (int j = 0; j < tn; j++) perm[j] = j + 1;
            for (int j = tn - 1; j > 0; j--) {
                int o = (int)rng_below(&r, (uint64_t)j + 1), v = perm[j];
                perm[j] = perm[o];
                perm[o] = v;
            }
            for (int j = 0; j < tn; j++)
                coef[(size_t)tt * tn + j] = (rng_below(&r, 2) ? -1.0f : 1.0f) * perm[j] / tn;
        }
        dct_inverse(plan, g + t->offset, coef);
        dct_plan_destroy(&plan);
        free(coef);
        free(perm);
    }
}

/* Compares one tensor's bodies made by the device (a) and the host (b): the same
 * coefficients chosen (swaps allowed only at a near-tie, counted), the same values (to
 * TOL_VAL of the largest; sign: the same signs, scales within one bf16 step). */
static int compare_bodies(const uint8_t *a, const uint8_t *b, size_t len, uint64_t pos,
                          const stage_tensor_t *t, const demo_cfg_t *dc, uint64_t seed,
                          int *tiles_out)
{
    char err[STATUS_ERR_LEN];
    int chunk = dc->chunk, cr = (int)dct_chunk_size(t->rows, chunk),
        cc = (int)dct_chunk_size(t->cols, chunk);
    int kt = demo_entries_per_tile_ex(t->rows, t->cols, chunk, dc->k, dc->vfmt, dc->imode);
    int64_t tiles = (t->rows / cr) * (t->cols / cc);
    size_t ne = (size_t)tiles * kt;
    uint16_t *ia = malloc(ne * 2), *ib = malloc(ne * 2);
    float *va = malloc(ne * 4), *vb = malloc(ne * 4), sa = 0, sb = 0;
    assert_true(ia && ib && va && vb);
    assert_int_equal(demo_body_unpack_ex(a, len, pos, t->rows, t->cols, chunk, dc->k, dc->vfmt,
                                         dc->imode, seed, ia, va, ne, &sa, err),
                     0);
    assert_int_equal(demo_body_unpack_ex(b, len, pos, t->rows, t->cols, chunk, dc->k, dc->vfmt,
                                         dc->imode, seed, ib, vb, ne, &sb, err),
                     0);
    double vmax = 0;
    for (size_t e = 0; e < ne; e++) vmax = fmax(vmax, fabs((double)vb[e]));
    int swaps = 0;
    for (int64_t tt = 0; tt < tiles; tt++) {
        const uint16_t *xa = ia + (size_t)tt * kt, *xb = ib + (size_t)tt * kt;
        const float *ya = va + (size_t)tt * kt, *yb = vb + (size_t)tt * kt;
        if (!memcmp(xa, xb, (size_t)kt * 2)) {
            for (int j = 0; j < kt; j++) {
                double d = fabs((double)ya[j] - yb[j]);
                double tol = dc->vfmt == DEMO_VAL_F32    ? TOL_VAL * vmax
                             : dc->vfmt == DEMO_VAL_BF16 ? TOL_VAL * vmax + fabs(yb[j]) / 128
                                                         : 0.0;
                if (dc->vfmt == DEMO_VAL_SIGN) {
                    if ((ya[j] < 0) != (yb[j] < 0))
                        fail_msg("%s tile %lld: sign of entry %d differs", t->name, (long long)tt,
                                 j);
                } else if (!(d <= (is_cuda ? tol : 0.0))) {
                    fail_msg("%s tile %lld entry %d: %.9g vs %.9g", t->name, (long long)tt, j,
                             ya[j], yb[j]);
                }
            }
            continue;
        }
        /* a different choice: only between values at the k-th largest magnitude */
        swaps++;
        if (!is_cuda)
            fail_msg("%s tile %lld: a different selection off a GPU", t->name, (long long)tt);
        if (dc->vfmt == DEMO_VAL_SIGN) continue; /* magnitudes are not on the wire */
        double ta = INFINITY, tb = INFINITY;
        for (int j = 0; j < kt; j++) ta = fmin(ta, fabs(ya[j])), tb = fmin(tb, fabs(yb[j]));
        for (int j = 0; j < kt; j++) {
            int in_b = 0, in_a = 0;
            for (int l = 0; l < kt; l++) in_b |= xb[l] == xa[j], in_a |= xa[l] == xb[j];
            if (!in_b && fabs(fabs(ya[j]) - tb) > TOL_VAL * vmax + 1e-6 * tb)
                fail_msg("%s tile %lld: coefficient %d chosen on the device only, |%.9g| is no "
                         "near-tie (host threshold %.9g)",
                         t->name, (long long)tt, xa[j], ya[j], tb);
            if (!in_a && fabs(fabs(yb[j]) - ta) > TOL_VAL * vmax + 1e-6 * ta)
                fail_msg("%s tile %lld: coefficient %d chosen on the host only, |%.9g| is no "
                         "near-tie (device threshold %.9g)",
                         t->name, (long long)tt, xb[j], yb[j], ta);
        }
    }
    if (dc->vfmt == DEMO_VAL_SIGN && !(fabs(sa - sb) <= (is_cuda ? sb / 128 : 0.0)))
        fail_msg("%s: sign scale %.9g vs %.9g", t->name, sa, sb);
    free(ia);
    free(ib);
    free(va);
    free(vb);
    *tiles_out += (int)tiles;
    return swaps;
}

/* `steps` DeMo steps of one stage on the device (gk) and on the host (gc) from the same
 * parameters and gradients: messages and residual momentum compared as above, then both
 * apply both messages (a mixed pool) and must hold bit-identical parameters. Step 0's
 * gradients have separated DCT magnitudes (no swaps allowed); later steps' are random
 * normal with a zero row block (all-zero tiles: the index tie-break). */
static void demo_round(const demo_cfg_t *dc, int steps, uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    model_config_t cfg = small_cfg(1);
    stage_t *sg = stage_new(&cfg, 0, gk, 1, 7, err), *sc = stage_new(&cfg, 0, gc, 1, 7, err);
    assert_true(sg && sc);
    demo_opt_t *og = demo_opt_new(sg, dc, err), *oc = demo_opt_new(sc, dc, err);
    assert_true(og && oc);
    int nt;
    const stage_tensor_t *tab = stage_tensors(sc, &nt);
    size_t P = stage_num_params(sc), len = demo_opt_msg_size(oc);
    assert_int_equal(demo_opt_msg_size(og), len);
    optim_config_t opt = optim_defaults();
    opt.warmup = 0;
    opt.clip = 0;
    uint8_t *mg = malloc(len), *mc = malloc(len);
    float *g = malloc(P * 4), *pg = malloc(P * 4), *pc = malloc(P * 4), *dg = malloc(P * 4),
          *dcm = malloc(P * 4);
    assert_true(mg && mc && g && pg && pc && dg && dcm);
    for (int step = 0; step < steps; step++) {
        if (step == 0) {
            separated_grads(g, tab, nt, dc->chunk, seed);
        } else {
            testutil_fill_normal(g, P, seed + (uint64_t)step, 1.0f);
            memset(g, 0, (size_t)16 * cfg.dim * 4); /* 16 embedding rows: zero tiles */
        }
        kern_upload(gk, stage_grads(sg), g, P * 4);
        kern_upload(gc, stage_grads(sc), g, P * 4);
        float ng = 0, nc = 0;
        assert_int_equal(demo_opt_prepare(og, &opt, step, 1.0f, mg, &ng, err), 0);
        assert_int_equal(demo_opt_prepare(oc, &opt, step, 1.0f, mc, &nc, err), 0);
        no_backend_error();
        assert_true(fabs(ng - nc) <= 1e-5 * nc);
        assert_int_equal(demo_opt_check(oc, step, mg, len, err), 0); /* a valid message */
        if (!is_cuda) assert_memory_equal(mg, mc, len);
        assert_memory_equal(mg, mc, DEMO_OPT_HEADER_LEN - 4); /* all but the CRC */
        int swaps = 0, tiles = 0;
        uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
        for (int i = 0; i < nt; i++) {
            swaps += compare_bodies(mg, mc, len, pos, &tab[i], dc, demo_opt_tensor_seed(step, i),
                                    &tiles);
            pos +=
                demo_body_bits_ex(tab[i].rows, tab[i].cols, dc->chunk, dc->k, dc->vfmt, dc->imode);
        }
        demo_opt_get_momentum(og, dg);
        demo_opt_get_momentum(oc, dcm);
        double derr = testutil_norm_err(dg, dcm, P);
        printf("  demo step %d (chunk %d k %d %s): %d of %d tiles chose differently, D err %.2e\n",
               step, dc->chunk, dc->k,
               dc->vfmt == DEMO_VAL_F32    ? "f32"
               : dc->vfmt == DEMO_VAL_BF16 ? "bf16"
                                           : "sign",
               swaps, tiles, derr);
        if (step == 0) assert_int_equal(swaps, 0);
        assert_true(swaps * 100 <= tiles);
        if (!swaps && !(derr <= (is_cuda ? TOL_D : 0.0)))
            fail_msg("residual momentum: normalized error %.3e > %.1e", derr, TOL_D);
        /* the mixed pool: both apply both messages, each in its own order */
        const uint8_t *m1[2] = {mg, mc}, *m2[2] = {mc, mg};
        size_t lens[2] = {len, len};
        assert_int_equal(demo_opt_apply(og, &opt, step, m1, lens, 2, err), 0);
        assert_int_equal(demo_opt_apply(oc, &opt, step, m2, lens, 2, err), 0);
        kern_download(gk, pg, stage_params(sg), P * 4);
        no_backend_error();
        memcpy(pc, stage_params(sc), P * 4);
        if (memcmp(pg, pc, P * 4)) fail_msg("step %d: parameters differ after a mixed pool", step);
        /* the next step starts from the same momentum, so that its comparison is fair */
        demo_opt_set_momentum(og, dcm);
        demo_opt_get_momentum(og, dg);
        assert_memory_equal(dg, dcm, P * 4);
    }
    free(mg);
    free(mc);
    free(g);
    free(pg);
    free(pc);
    free(dg);
    free(dcm);
    demo_opt_destroy(&og);
    demo_opt_destroy(&oc);
    stage_destroy(&sg);
    stage_destroy(&sc);
}

static void test_demo_step(void **state)
{
    (void)state;
    demo_cfg_t f32 = {.chunk = 16, .k = 4, .vfmt = DEMO_VAL_F32, .beta = 0.9f};
    demo_cfg_t bf16 = {.chunk = 32, .k = 8, .vfmt = DEMO_VAL_BF16, .beta = 0.999f};
    demo_cfg_t sign = {.chunk = 64, .k = 8, .vfmt = DEMO_VAL_SIGN, .beta = 0.999f};
    /* shared indices (the device path gathers on the host) and the rms update (the step
     * made on the host, subtracted on the device) */
    demo_cfg_t shared = {.chunk = 16,
                         .k = 9,
                         .vfmt = DEMO_VAL_F32,
                         .beta = 0.999f,
                         .imode = DEMO_IDX_SHARED,
                         .update = DEMO_UPDATE_RMS};
    demo_round(&f32, 3, 100);
    demo_round(&bf16, 2, 200);
    demo_round(&sign, 2, 300);
    demo_round(&shared, 2, 400);
}

/* --- the stage boundary ------------------------------------------------------------------ */

static int32_t *tokens(size_t n, uint64_t seed)
{
    int32_t *t = malloc(n * sizeof *t);
    assert_non_null(t);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) t[i] = (int32_t)rng_below(&r, 256);
    return t;
}

/* Stage 0 of two encodes its output, stage 1 decodes it and encodes its input gradient,
 * stage 0 decodes that: every message equals codec_encode of the same floats (downloaded),
 * and a pass fed by stage_wire_decode equals one fed codec_decode's floats, bit for bit. */
static void wire_case(int codec, uint32_t block)
{
    char err[STATUS_ERR_LEN];
    model_config_t cfg = small_cfg(2);
    size_t BT = (size_t)cfg.batch * cfg.seq, n = BT * cfg.dim, w = 0, w2 = 0;
    stage_t *s0 = stage_new(&cfg, 0, gk, 2, 3, err), *s1 = stage_new(&cfg, 1, gk, 2, 3, err);
    assert_true(s0 && s1);
    size_t P0 = stage_num_params(s0);
    int32_t *tok = tokens(BT, 90), *tgt = tokens(BT, 91);
    float *y = malloc(n * 4), *x = malloc(n * 4), *dx = malloc(n * 4), *g1 = malloc(P0 * 4),
          *g2 = malloc(P0 * 4);
    size_t cap = stage_wire_size(s0, codec, block);
    assert_true(cap > CODEC_HEADER_LEN);
    uint8_t *fwd = malloc(cap), *bwd = malloc(cap), *ref = malloc(cap);
    assert_true(y && x && dx && g1 && g2 && fwd && bwd && ref);
    int64_t shape[3] = {cfg.batch, cfg.seq, cfg.dim};
    codec_params_t cp = {.block = block};
    float loss1 = 0, loss2 = 0;

    /* forward: stage 0's message */
    assert_int_equal(stage_forward(s0, 0, tok, NULL, NULL, y, NULL, err), 0);
    assert_int_equal(stage_wire_encode_output(s0, 0, codec, block, fwd, cap, &w, err), 0);
    assert_int_equal(codec_encode((codec_id_t)codec, &cp, y, shape, 3, ref, cap, &w2, err), 0);
    assert_int_equal(w, w2);
    if (memcmp(fwd, ref, w))
        fail_msg("%s: the stage's message differs from codec_encode's", codec_name(codec));
    /* stage 1 from the message, then from host floats */
    assert_int_equal(stage_wire_decode(s1, fwd, w, err), 0);
    assert_int_equal(stage_forward(s1, 0, NULL, NULL, tgt, NULL, &loss1, err), 0);
    assert_int_equal(codec_decode(fwd, w, x, n, NULL, NULL, err), 0);
    assert_int_equal(stage_forward(s1, 1, NULL, x, tgt, NULL, &loss2, err), 0);
    if (memcmp(&loss1, &loss2, 4))
        fail_msg("%s: loss %.9g through the wire path, %.9g through host floats", codec_name(codec),
                 loss1, loss2);
    /* backward: stage 1's message */
    assert_int_equal(stage_backward(s1, 0, NULL, dx, err), 0);
    assert_int_equal(stage_wire_encode_dx(s1, codec, block, bwd, cap, &w, err), 0);
    assert_int_equal(codec_encode((codec_id_t)codec, &cp, dx, shape, 3, ref, cap, &w2, err), 0);
    if (memcmp(bwd, ref, w)) fail_msg("%s: the stage's dx message differs", codec_name(codec));
    /* stage 0's gradient from the message, then from host floats */
    stage_zero_grads(s0);
    assert_int_equal(stage_wire_decode(s0, bwd, w, err), 0);
    assert_int_equal(stage_backward(s0, 0, NULL, NULL, err), 0);
    kern_download(gk, g1, stage_grads(s0), P0 * 4);
    stage_zero_grads(s0);
    assert_int_equal(stage_forward(s0, 1, tok, NULL, NULL, NULL, NULL, err), 0);
    assert_int_equal(codec_decode(bwd, w, x, n, NULL, NULL, err), 0);
    assert_int_equal(stage_backward(s0, 1, x, NULL, err), 0);
    kern_download(gk, g2, stage_grads(s0), P0 * 4);
    if (memcmp(g1, g2, P0 * 4))
        fail_msg("%s: stage 0's gradient through the wire path differs", codec_name(codec));
    no_backend_error();
    printf("  wire %-4s block %-4u %zu bytes, loss %.6f both ways\n", codec_name(codec), block, w,
           loss1);

    /* malformed input is refused, and a message of another shape */
    memcpy(ref, fwd, w);
    ref[w - 1] ^= 0x40;
    assert_true(stage_wire_decode(s1, ref, w, err) < 0);
    assert_true(stage_wire_decode(s1, fwd, 10, err) < 0);
    int64_t other[3] = {cfg.batch, cfg.seq / 2, 2 * cfg.dim};
    assert_int_equal(codec_encode((codec_id_t)codec, &cp, y, other, 3, ref, cap, &w2, err), 0);
    assert_int_equal(stage_wire_decode(s1, ref, w2, err), STATUS_EMALFORMED);
    /* well-formed values above 2^20 are refused too: a gradient of 3e38 overflowed the
     * receiving stage's parameter gradients to Inf (found by fuzz_stage); f16 cannot carry
     * them at all */
    for (size_t i = 0; i < n; i++) x[i] = (i & 1 ? -1.0f : 1.0f) * (i % 7 == 3 ? 2e6f : 1.0f);
    if (codec != CODEC_F16) {
        assert_int_equal(codec_encode((codec_id_t)codec, &cp, x, shape, 3, ref, cap, &w2, err), 0);
        assert_int_equal(stage_wire_decode(s1, ref, w2, err), STATUS_EMALFORMED);
        assert_int_equal(stage_wire_decode(s0, ref, w2, err), STATUS_EMALFORMED);
    }
    /* nothing to encode on the wrong side, or into too small a buffer */
    assert_int_equal(stage_wire_encode_dx(s0, codec, block, ref, cap, &w, err), STATUS_EINVAL);
    assert_int_equal(stage_wire_encode_output(s1, 0, codec, block, ref, cap, &w, err),
                     STATUS_EINVAL);
    assert_int_equal(stage_wire_encode_output(s0, 1, codec, block, ref, cap - 1, &w, err),
                     STATUS_EINVAL);
    /* a non-finite activation never goes on the wire */
    float nan = NAN;
    kern_upload(gk, stage_params(s0) + 100, &nan, 4); /* embedding row 1 (100 / dim) */
    for (size_t i = 0; i < BT; i++) tok[i] = 1;
    assert_int_equal(stage_forward(s0, 0, tok, NULL, NULL, NULL, NULL, err), 0);
    assert_int_equal(stage_wire_encode_output(s0, 0, codec, block, ref, cap, &w, err),
                     STATUS_EINVAL);
    free(tok);
    free(tgt);
    free(y);
    free(x);
    free(dx);
    free(g1);
    free(g2);
    free(fwd);
    free(bwd);
    free(ref);
    stage_destroy(&s0);
    stage_destroy(&s1);
}

static void test_wire(void **state)
{
    (void)state;
    wire_case(CODEC_INT8, 0);
    wire_case(CODEC_INT8, 7);
    wire_case(CODEC_INT4, 0);
    wire_case(CODEC_INT4, 2);
    wire_case(CODEC_BF16, 0);
    wire_case(CODEC_F32, 0);
}

/* --- main ---------------------------------------------------------------------------------- */

int main(void)
{
    char err[STATUS_ERR_LEN] = "";
    const char *name = getenv("SWARMTRAIN_TEST_BACKEND");
    if (!name || !*name) name = "cuda";
    gk = kern_new(name, 2, err);
    if (!gk) {
        printf("test_cuda_compress: skipping: %s\n", err);
        return 77;
    }
    gr = kern_new("ref", 1, err);
    gc = kern_new("cpu", 2, err);
    if (!gr || !gc) {
        printf("test_cuda_compress: a host backend failed: %s\n", err);
        kern_destroy(&gk);
        kern_destroy(&gr);
        return 1;
    }
    is_cuda = !strncmp(kern_name(gk), "cuda", 4);
    if (!is_cuda) gk->on_device = 1; /* a host backend posing as a device: all exact */
    printf("test_cuda_compress: %s%s against ref and the cpu host paths\n", kern_name(gk),
           is_cuda ? "" : " posing as a device");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dct),          cmocka_unit_test(test_topk),
        cmocka_unit_test(test_scatter_sign), cmocka_unit_test(test_quantize),
        cmocka_unit_test(test_demo_step),    cmocka_unit_test(test_wire),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    kern_destroy(&gc);
    kern_destroy(&gr);
    kern_destroy(&gk);
    return rc;
}
