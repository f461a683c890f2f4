/* test_cuda.c — the "cuda" backend against the "ref" oracle: every op in kernels.h on the
 * same random inputs, compared by normalized error (max |a - b| / max |b|), including the
 * accumulate (+=) semantics of backward ops, NULL gradient outputs, in-place
 * cross-entropy, determinism, and attention at several T (odd ones too) and head sizes.
 *
 * Skips (exit 77) when the build has no CUDA or when no usable device is found, saying
 * why. SWARMTRAIN_CUDA_BENCH=1 also times every op at the "small" model sizes and at a
 * large configuration (cudaEvent timing; ms and GFLOP/s). SWARMTRAIN_TEST_BACKEND=cpu
 * runs the same parity checks on another backend (to check this test without a GPU).
 *
 * Tolerances (normalized error):
 *   matmul with TF32 (the default)   3e-3  (10-bit mantissa inputs, fp32 accumulation)
 *   matmul in fp32 (SWARMTRAIN_CUDA_TF32=0) and every other op   1e-5 .. 5e-5
 *   sumsq   1e-9 relative (double accumulation both sides, different order)
 * test_stage and test_stage_fp32 run a whole `small` stage (forward, backward, AdamW)
 * against the "cpu" backend, with TF32 as configured and with it off; their tolerances
 * are stated above stage_tol_tf32.
 * Not for: speed regressions (the bench only prints; `swarmtrain bench model` times the
 * model). */
#include <stdio.h>

#ifndef SWARMTRAIN_HAVE_CUDA

int main(void)
{
    printf("test_cuda: built without CUDA; skipping\n");
    return 77;
}

#else

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/rng.h"
#include "common/status.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/kernels.h"
#include "model/config.h"
#include "model/optim.h"
#include "model/stage.h"
#include "testutil.h"

static kern_t *gk;    /* the backend under test ("cuda" unless SWARMTRAIN_TEST_BACKEND) */
static kern_t *gr;    /* the "ref" oracle */
static int is_cuda;   /* gk is a cuda backend (kern_cuda_* may be called) */
static double tol_mm; /* matmul tolerance: TF32 or fp32 */

#define TOL_EW  1e-5 /* elementwise and row-local fp32 ops */
#define TOL_RED 5e-5 /* ops that sum over many rows or keys in fp32 */

/* --- helpers ------------------------------------------------------------------------- */

static float *randn(size_t n, uint64_t seed, float std)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    assert_non_null(x);
    testutil_fill_normal(x, n, seed, std);
    return x;
}

static float *dup(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    assert_non_null(y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static int32_t *rand_tokens(size_t n, int V, uint64_t seed)
{
    int32_t *t = malloc(n * sizeof *t);
    float *u = randn(n, seed, 1.0f);
    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        /* squash a normal into [0, V), skewed so that some tokens repeat often */
        int v = (int)(fabsf(u[i]) * V / 3.0f);
        t[i] = v < V ? v : (int32_t)(i % (size_t)V);
    }
    free(u);
    return t;
}

/* A device copy of host data. */
static void *dev(const void *host, size_t bytes)
{
    void *d = kern_alloc(gk, bytes);
    assert_non_null(d);
    if (host) kern_upload(gk, d, host, bytes);
    return d;
}

/* Downloads n floats from the device into a fresh host buffer. */
static float *host(const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    kern_download(gk, h, d, n * sizeof *h);
    return h;
}

static void no_backend_error(void)
{
    if (!is_cuda) return;
    const char *e = kern_cuda_last_error(gk);
    if (e) fail_msg("cuda backend error: %s", e);
}

/* Compares device buffer d (n floats) with the oracle's host result want. */
static void check(const char *what, const float *d, const float *want, size_t n, double tol)
{
    float *got = host(d, n);
    no_backend_error();
    double err = testutil_norm_err(got, want, n);
    printf("  %-34s n=%-8zu err %.2e (tol %.0e)\n", what, n, err, tol);
    if (!(err <= tol)) {
        size_t worst = 0;
        double wd = -1;
        for (size_t i = 0; i < n; i++) {
            double di = fabs((double)got[i] - want[i]);
            if (di > wd || isnan(di)) wd = isnan(di) ? INFINITY : di, worst = i;
        }
        fail_msg("%s: normalized error %.3e > %.1e (worst at %zu: got %.8g want %.8g)", what, err,
                 tol, worst, got[worst], want[worst]);
    }
    free(got);
}

/* --- memory ---------------------------------------------------------------------------- */

static void test_memory(void **state)
{
    (void)state;
    size_t n = 1000;
    float *a = kern_alloc(gk, n * sizeof(float));
    float *b = kern_alloc(gk, n * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(((uintptr_t)a) % 64, 0);
    float *h = host(a, n);
    for (size_t i = 0; i < n; i++) assert_true(h[i] == 0.0f); /* alloc zeroes */
    float *x = randn(n, 1, 1.0f);
    kern_upload(gk, a, x, n * sizeof(float));
    kern_copy(gk, b, a, n * sizeof(float));
    kern_zero(gk, a, 10 * sizeof(float));
    kern_sync(gk);
    float *ha = host(a, n), *hb = host(b, n);
    assert_memory_equal(hb, x, n * sizeof(float));
    for (size_t i = 0; i < 10; i++) assert_true(ha[i] == 0.0f);
    assert_memory_equal(ha + 10, x + 10, (n - 10) * sizeof(float));
    kern_free(gk, a);
    kern_free(gk, b);
    kern_free(gk, NULL);
    no_backend_error();
    free(h), free(x), free(ha), free(hb);
}

/* --- matmul ---------------------------------------------------------------------------- */

static void matmul_case(int N, int C, int OC)
{
    size_t ni = (size_t)N * C, nw = (size_t)OC * C, no = (size_t)N * OC;
    float *inp = randn(ni, 10, 1.0f), *w = randn(nw, 11, 0.1f), *dout = randn(no, 12, 1.0f);
    float *dinp0 = randn(ni, 13, 1.0f), *dw0 = randn(nw, 14, 1.0f);
    float *out = malloc(no * sizeof *out), *dinp = dup(dinp0, ni), *dw = dup(dw0, nw);

    float *d_inp = dev(inp, ni * 4), *d_w = dev(w, nw * 4), *d_dout = dev(dout, no * 4);
    float *d_out = dev(NULL, no * 4), *d_dinp = dev(dinp0, ni * 4), *d_dw = dev(dw0, nw * 4);

    kern_matmul_forward(gr, out, inp, w, N, C, OC);
    kern_matmul_forward(gk, d_out, d_inp, d_w, N, C, OC);
    check("matmul_forward out", d_out, out, no, tol_mm);

    /* accumulate into random gradients */
    kern_matmul_backward(gr, dinp, dw, dout, inp, w, N, C, OC);
    kern_matmul_backward(gk, d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC);
    check("matmul_backward dinp (+=)", d_dinp, dinp, ni, tol_mm);
    check("matmul_backward dw (+=)", d_dw, dw, nw, tol_mm);

    /* NULL outputs are skipped: dw only, then dinp only */
    kern_matmul_backward(gr, NULL, dw, dout, inp, w, N, C, OC);
    kern_matmul_backward(gk, NULL, d_dw, d_dout, d_inp, d_w, N, C, OC);
    kern_matmul_backward(gr, dinp, NULL, dout, inp, w, N, C, OC);
    kern_matmul_backward(gk, d_dinp, NULL, d_dout, d_inp, d_w, N, C, OC);
    check("matmul_backward dinp (NULL dw)", d_dinp, dinp, ni, tol_mm);
    check("matmul_backward dw (NULL dinp)", d_dw, dw, nw, tol_mm);

    kern_free(gk, d_inp), kern_free(gk, d_w), kern_free(gk, d_dout);
    kern_free(gk, d_out), kern_free(gk, d_dinp), kern_free(gk, d_dw);
    free(inp), free(w), free(dout), free(dinp0), free(dw0), free(out), free(dinp), free(dw);
}

static void test_matmul(void **state)
{
    (void)state;
    matmul_case(70, 96, 50);
    matmul_case(1, 3, 5);
    matmul_case(256, 256, 768);
}

/* --- embedding ------------------------------------------------------------------------- */

static void test_embedding(void **state)
{
    (void)state;
    int N = 301, C = 72, V = 50;
    size_t nw = (size_t)V * C, no = (size_t)N * C;
    int32_t *tok = rand_tokens(N, V, 20);
    float *wte = randn(nw, 21, 1.0f), *dout = randn(no, 22, 1.0f), *dwte0 = randn(nw, 23, 1.0f);
    float *out = malloc(no * sizeof *out), *dwte = dup(dwte0, nw);
    int32_t *d_tok = dev(tok, N * sizeof *tok);
    float *d_wte = dev(wte, nw * 4), *d_dout = dev(dout, no * 4), *d_out = dev(NULL, no * 4);
    float *d_dwte = dev(dwte0, nw * 4);

    kern_embedding_forward(gr, out, tok, wte, N, C);
    kern_embedding_forward(gk, d_out, d_tok, d_wte, N, C);
    check("embedding_forward", d_out, out, no, 0.0);

    kern_embedding_backward(gr, dwte, dout, tok, N, C);
    kern_embedding_backward(gk, d_dwte, d_dout, d_tok, N, C);
    check("embedding_backward (+=)", d_dwte, dwte, nw, TOL_EW);

    /* deterministic: the same sum twice gives the same bits */
    float *first = host(d_dwte, nw);
    kern_upload(gk, d_dwte, dwte0, nw * 4);
    kern_embedding_backward(gk, d_dwte, d_dout, d_tok, N, C);
    float *second = host(d_dwte, nw);
    assert_memory_equal(first, second, nw * 4);
    kern_embedding_backward(gk, NULL, d_dout, d_tok, N, C); /* NULL: nothing */
    no_backend_error();

    kern_free(gk, d_tok), kern_free(gk, d_wte), kern_free(gk, d_dout), kern_free(gk, d_out);
    kern_free(gk, d_dwte);
    free(tok), free(wte), free(dout), free(dwte0), free(out), free(dwte), free(first), free(second);
}

/* --- RMSNorm --------------------------------------------------------------------------- */

static void rmsnorm_case(int N, int C)
{
    size_t n = (size_t)N * C;
    float eps = 1e-5f;
    float *inp = randn(n, 30, 1.0f), *w = randn(C, 31, 1.0f), *dout = randn(n, 32, 1.0f);
    float *dinp0 = randn(n, 33, 1.0f), *dw0 = randn(C, 34, 1.0f);
    float *out = malloc(n * 4), *rstd = malloc(N * 4), *dinp = dup(dinp0, n), *dw = dup(dw0, C);
    float *d_inp = dev(inp, n * 4), *d_w = dev(w, C * 4), *d_dout = dev(dout, n * 4);
    float *d_out = dev(NULL, n * 4), *d_rstd = dev(NULL, N * 4);
    float *d_dinp = dev(dinp0, n * 4), *d_dw = dev(dw0, C * 4);

    kern_rmsnorm_forward(gr, out, rstd, inp, w, N, C, eps);
    kern_rmsnorm_forward(gk, d_out, d_rstd, d_inp, d_w, N, C, eps);
    check("rmsnorm_forward out", d_out, out, n, TOL_EW);
    check("rmsnorm_forward rstd", d_rstd, rstd, N, TOL_EW);

    /* the backward uses the oracle's rstd on both sides, so that only it is compared */
    kern_upload(gk, d_rstd, rstd, N * 4);
    kern_rmsnorm_backward(gr, dinp, dw, dout, inp, w, rstd, N, C);
    kern_rmsnorm_backward(gk, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    check("rmsnorm_backward dinp (+=)", d_dinp, dinp, n, TOL_EW);
    check("rmsnorm_backward dw (+=)", d_dw, dw, C, TOL_RED);

    kern_rmsnorm_backward(gr, NULL, dw, dout, inp, w, rstd, N, C);
    kern_rmsnorm_backward(gk, NULL, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    kern_rmsnorm_backward(gr, dinp, NULL, dout, inp, w, rstd, N, C);
    kern_rmsnorm_backward(gk, d_dinp, NULL, d_dout, d_inp, d_w, d_rstd, N, C);
    check("rmsnorm_backward dinp (NULL dw)", d_dinp, dinp, n, TOL_EW);
    check("rmsnorm_backward dw (NULL dinp)", d_dw, dw, C, TOL_RED);

    kern_free(gk, d_inp), kern_free(gk, d_w), kern_free(gk, d_dout), kern_free(gk, d_out);
    kern_free(gk, d_rstd), kern_free(gk, d_dinp), kern_free(gk, d_dw);
    free(inp), free(w), free(dout), free(dinp0), free(dw0), free(out), free(rstd), free(dinp),
        free(dw);
}

static void test_rmsnorm(void **state)
{
    (void)state;
    rmsnorm_case(67, 200);
    rmsnorm_case(5000, 33); /* several row chunks in the dw reduction */
}

/* --- RoPE ------------------------------------------------------------------------------ */

static void test_rope(void **state)
{
    (void)state;
    int B = 2, T = 13, NH = 3, HS = 16;
    size_t n = (size_t)B * T * 3 * NH * HS, nf = (size_t)T * HS;
    float *freqs = malloc(nf * 4);
    kern_rope_freqs(freqs, T, HS, 10000.0f);
    float *qkv = randn(n, 40, 1.0f), *dqkv = randn(n, 41, 1.0f);
    float *d_f = dev(freqs, nf * 4), *d_qkv = dev(qkv, n * 4), *d_dqkv = dev(dqkv, n * 4);

    kern_rope_forward(gr, qkv, freqs, B, T, NH, HS);
    kern_rope_forward(gk, d_qkv, d_f, B, T, NH, HS);
    check("rope_forward (v untouched)", d_qkv, qkv, n, TOL_EW);
    kern_rope_backward(gr, dqkv, freqs, B, T, NH, HS);
    kern_rope_backward(gk, d_dqkv, d_f, B, T, NH, HS);
    check("rope_backward", d_dqkv, dqkv, n, TOL_EW);

    kern_free(gk, d_f), kern_free(gk, d_qkv), kern_free(gk, d_dqkv);
    free(freqs), free(qkv), free(dqkv);
}

/* --- attention ------------------------------------------------------------------------- */

static void attention_case(int B, int T, int NH, int HS)
{
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, no = (size_t)B * T * C, nl = (size_t)B * NH * T;
    char what[96];
    float *qkv = randn(nqkv, 50 + T, 1.0f), *dout = randn(no, 51 + T, 1.0f);
    float *dqkv0 = randn(nqkv, 52 + T, 1.0f);
    float *out = malloc(no * 4), *lse = malloc(nl * 4), *dqkv = dup(dqkv0, nqkv);
    float *d_qkv = dev(qkv, nqkv * 4), *d_dout = dev(dout, no * 4);
    float *d_out = dev(NULL, no * 4), *d_lse = dev(NULL, nl * 4), *d_dqkv = dev(dqkv0, nqkv * 4);

    printf(" attention B=%d T=%d NH=%d HS=%d\n", B, T, NH, HS);
    kern_attention_forward(gr, out, lse, qkv, B, T, NH, HS);
    kern_attention_forward(gk, d_out, d_lse, d_qkv, B, T, NH, HS);
    snprintf(what, sizeof what, "attention_forward out");
    check(what, d_out, out, no, TOL_RED);
    check("attention_forward lse", d_lse, lse, nl, TOL_EW);

    /* both sides start from the oracle's out and lse */
    kern_upload(gk, d_out, out, no * 4);
    kern_upload(gk, d_lse, lse, nl * 4);
    kern_attention_backward(gr, dqkv, dout, qkv, out, lse, B, T, NH, HS);
    kern_attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    check("attention_backward dqkv (+=)", d_dqkv, dqkv, nqkv, TOL_RED);

    /* the gradient alone (from zero), so that the += base does not hide its error */
    float *zero = calloc(nqkv, 4);
    kern_attention_backward(gr, zero, dout, qkv, out, lse, B, T, NH, HS);
    kern_zero(gk, d_dqkv, nqkv * 4);
    kern_attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    check("attention_backward dqkv (from 0)", d_dqkv, zero, nqkv, TOL_RED);
    float *first = host(d_dqkv, nqkv);
    kern_zero(gk, d_dqkv, nqkv * 4);
    kern_attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    float *second = host(d_dqkv, nqkv);
    assert_memory_equal(first, second, nqkv * 4); /* deterministic */

    kern_free(gk, d_qkv), kern_free(gk, d_dout), kern_free(gk, d_out), kern_free(gk, d_lse);
    kern_free(gk, d_dqkv);
    free(qkv), free(dout), free(dqkv0), free(out), free(lse), free(dqkv), free(zero), free(first),
        free(second);
}

static void test_attention(void **state)
{
    (void)state;
    attention_case(2, 13, 2, 64); /* odd T, inside one tile */
    attention_case(1, 1, 1, 64);
    attention_case(1, 64, 2, 64); /* exactly one forward tile, two backward tiles */
    attention_case(2, 100, 2, 64);
    attention_case(1, 257, 1, 64);
    attention_case(1, 33, 2, 32);
    attention_case(1, 77, 1, 128);
    attention_case(1, 29, 3, 24); /* head sizes below the padded width */
    attention_case(1, 45, 1, 80);
}

/* --- SwiGLU ---------------------------------------------------------------------------- */

static void test_swiglu(void **state)
{
    (void)state;
    int N = 33, F = 100;
    size_t nh = (size_t)N * 2 * F, no = (size_t)N * F;
    float *h = randn(nh, 60, 2.0f), *dout = randn(no, 61, 1.0f), *dh0 = randn(nh, 62, 1.0f);
    float *out = malloc(no * 4), *dh = dup(dh0, nh);
    float *d_h = dev(h, nh * 4), *d_dout = dev(dout, no * 4), *d_out = dev(NULL, no * 4);
    float *d_dh = dev(dh0, nh * 4);

    kern_swiglu_forward(gr, out, h, N, F);
    kern_swiglu_forward(gk, d_out, d_h, N, F);
    check("swiglu_forward", d_out, out, no, TOL_EW);
    kern_swiglu_backward(gr, dh, dout, h, N, F);
    kern_swiglu_backward(gk, d_dh, d_dout, d_h, N, F);
    check("swiglu_backward (+=)", d_dh, dh, nh, TOL_EW);
    kern_swiglu_backward(gk, NULL, d_dout, d_h, N, F);
    no_backend_error();

    kern_free(gk, d_h), kern_free(gk, d_dout), kern_free(gk, d_out), kern_free(gk, d_dh);
    free(h), free(dout), free(dh0), free(out), free(dh);
}

/* --- cross-entropy --------------------------------------------------------------------- */

static void test_crossentropy(void **state)
{
    (void)state;
    int N = 40, V = 300;
    size_t n = (size_t)N * V;
    float *logits = randn(n, 70, 3.0f), *losses = malloc(N * 4), *dl = malloc(n * 4);
    int32_t *tgt = rand_tokens(N, V, 71);
    float *d_logits = dev(logits, n * 4), *d_losses = dev(NULL, N * 4), *d_dl = dev(NULL, n * 4);
    int32_t *d_tgt = dev(tgt, N * 4);

    kern_crossentropy_forward(gr, losses, logits, tgt, N, V);
    kern_crossentropy_forward(gk, d_losses, d_logits, d_tgt, N, V);
    check("crossentropy_forward", d_losses, losses, N, TOL_EW);

    kern_crossentropy_backward(gr, dl, logits, tgt, 1.0f / N, N, V);
    kern_upload(gk, d_dl, logits, n * 4); /* garbage to be overwritten */
    kern_crossentropy_backward(gk, d_dl, d_logits, d_tgt, 1.0f / N, N, V);
    check("crossentropy_backward (overwrites)", d_dl, dl, n, TOL_EW);
    kern_crossentropy_backward(gk, d_logits, d_logits, d_tgt, 1.0f / N, N, V);
    check("crossentropy_backward (in place)", d_logits, dl, n, TOL_EW);

    kern_free(gk, d_logits), kern_free(gk, d_losses), kern_free(gk, d_dl), kern_free(gk, d_tgt);
    free(logits), free(losses), free(dl), free(tgt);
}

/* --- elementwise, sumsq, AdamW ------------------------------------------------------- */

static void test_elementwise(void **state)
{
    (void)state;
    size_t n = 100003;
    float *a = randn(n, 80, 1.0f), *b = randn(n, 81, 1.0f), *out = malloc(n * 4);
    float *d_a = dev(a, n * 4), *d_b = dev(b, n * 4), *d_out = dev(NULL, n * 4);

    kern_add(gr, out, a, b, n);
    kern_add(gk, d_out, d_a, d_b, n);
    check("add", d_out, out, n, 0.0);
    kern_add(gr, a, a, b, n); /* out == a */
    kern_add(gk, d_a, d_a, d_b, n);
    check("add (in place)", d_a, a, n, 0.0);
    kern_axpy(gr, a, -0.37f, b, n);
    kern_axpy(gk, d_a, -0.37f, d_b, n);
    check("axpy", d_a, a, n, TOL_EW);
    kern_scale(gr, a, 1.7f, n);
    kern_scale(gk, d_a, 1.7f, n);
    check("scale", d_a, a, n, 0.0);

    /* hash64 is integer arithmetic on the bits: exactly ref's value */
    uint64_t hw = kern_hash64(gr, a, n), hg = kern_hash64(gk, d_a, n);
    no_backend_error();
    printf("  %-34s n=%-8zu %016llx vs %016llx\n", "hash64", n, (unsigned long long)hg,
           (unsigned long long)hw);
    assert_true(hg == hw);

    double want = kern_sumsq(gr, a, n), got = kern_sumsq(gk, d_a, n);
    no_backend_error();
    printf("  %-34s n=%-8zu %.17g vs %.17g\n", "sumsq", n, got, want);
    assert_true(fabs(got - want) <= 1e-9 * want);
    assert_true(kern_sumsq(gk, d_a, n) == got); /* deterministic */
    assert_true(kern_sumsq(gk, d_a, 1) == (double)a[0] * a[0]);
    assert_true(kern_sumsq(gk, d_a, 0) == 0.0);

    kern_free(gk, d_a), kern_free(gk, d_b), kern_free(gk, d_out);
    free(a), free(b), free(out);
}

static void test_adamw(void **state)
{
    (void)state;
    size_t n = 5001;
    float *p = randn(n, 90, 1.0f), *g = randn(n, 91, 0.1f), *m = randn(n, 92, 0.01f);
    float *v = randn(n, 93, 0.01f);
    for (size_t i = 0; i < n; i++) v[i] = v[i] * v[i];
    float *d_p = dev(p, n * 4), *d_g = dev(g, n * 4), *d_m = dev(m, n * 4), *d_v = dev(v, n * 4);
    for (int t = 1; t <= 3; t++) {
        kern_adamw(gr, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        kern_adamw(gk, d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    check("adamw p", d_p, p, n, TOL_EW);
    check("adamw m", d_m, m, n, TOL_EW);
    check("adamw v", d_v, v, n, TOL_EW);
    kern_free(gk, d_p), kern_free(gk, d_g), kern_free(gk, d_m), kern_free(gk, d_v);
    free(p), free(g), free(m), free(v);
}

/* --- a whole stage: forward, backward and AdamW against the "cpu" backend ---------------
 *
 * The `small` preset (model/config.c: dim 256, 8 layers, 4 heads, ffn 688, seq 256,
 * batch 8, vocab 256) is built from one seed as one stage and as both halves of a
 * 2-stage split, on the backend under test and on the oracle, and both are fed the same
 * tokens, targets, stage input x_in and output gradient dy. Compared: the loss, the
 * first half's output y, the last half's input gradient dx, every parameter gradient
 * tensor by name, and the parameters and losses over 3 AdamW steps (optim_defaults, the
 * training default). Error is ||got - want||_2 / ||want||_2 per tensor; the worst layer
 * of each kind is printed.
 *
 * The oracle is "cpu" (OpenBLAS + OpenMP, all cores), which test_kernels checks against
 * "ref" op by op: "ref" runs plain single-threaded loops, about 100 s per forward+backward
 * of `small` (25 s measured with 2 layers), and this test needs about six of them.
 * SWARMTRAIN_TEST_STAGE=preset[,key=value...] (e.g. "small,layers=2,seq=64,batch=2")
 * shrinks the model, for the CPU emulation of the kernels; SWARMTRAIN_TEST_STAGE_ORACLE
 * names another oracle backend ("ref").
 *
 * Tolerances (relative L2; a loss: relative), about 5x the worst error of a model:
 *                                   TF32 (default)         fp32 (SWARMTRAIN_CUDA_TF32=0)
 *   loss                            2e-4   (model 3e-5)    2e-6
 *   loss after each AdamW step      1e-3   (model 1e-4)    2e-5
 *   y_out, dx                       1e-2   (model 2e-3)    2e-5
 *   each gradient tensor, grad norm 2e-2   (model 4e-3)    5e-5
 *   each parameter after 3 steps    2e-3   (model 4e-4)    1e-5
 *   the whole update p3 - p0        5e-2   (model 1e-2)    1e-3
 *   each tensor's update            0.5 (both)
 * - TF32: each matmul input is cut to a 10-bit mantissa (unit roundoff 2^-11 = 4.9e-4)
 *   and accumulated in fp32, about 3e-4 of error per product; a stage chains ~5 products
 *   per block forward and ~10 backward through 8 blocks. "model" is the worst of two
 *   models that truncate every matmul input to TF32 (the worse case; rounding to nearest
 *   gives about half): this test with a cpu backend doing so, at `small`; and the CUDA
 *   kernels run by a CPU emulator whose cuBLAS does so, at `small` with 2 layers and seq
 *   64 or 256. Gradients of wq and wk are the worst.
 * - fp32: only the order of the fp32 sums differs (cuBLAS against OpenBLAS blocking, the
 *   online softmax of the tiled attention): the emulated kernels and "ref" both differ
 *   from "cpu" by about 1e-6 in gradients, 4e-7 in activations and 2e-5 in the update.
 * - AdamW's first steps move each parameter by about lr * sign(g), so a gradient element
 *   whose sign lies within rounding flips its update (2 lr): the update is noisy (one flip
 *   in a 256-element norm weight is 0.125), so each tensor's update is checked only for
 *   gross errors (a tensor not updated is off by 1), the parameters tightly (a backend that
 *   skipped the updates would be off by about 4e-2 in the matrices). */

#define STAGE_SEED              1234
#define STAGE_STEPS             3

typedef struct {
    double loss;   /* |got - want| / |want| of a mean loss */
    double steps;  /* the same after each AdamW step (flipped updates add up) */
    double act;    /* y_out, dx */
    double grad;   /* each parameter gradient tensor */
    double param;  /* each parameter tensor after STAGE_STEPS AdamW steps */
    double update; /* the whole update p3 - p0 after STAGE_STEPS steps */
} stage_tol_t;

static const stage_tol_t stage_tol_tf32 = {2e-4, 1e-3, 1e-2, 2e-2, 2e-3, 5e-2};
static const stage_tol_t stage_tol_fp32 = {2e-6, 2e-5, 2e-5, 5e-5, 1e-5, 1e-3};
#define STAGE_TOL_UPDATE_TENSOR 0.5

/* What one stage computed on one backend, copied to the host. */
typedef struct {
    float loss;          /* last stage */
    float *y;            /* (BT, C) stage output; not on the last stage */
    float *dx;           /* (BT, C) input gradient; not on the first stage */
    float *grads;        /* all gradients, stage_num_params floats */
    stage_tensor_t *tab; /* the tensor table */
    int ntab;
} stage_result_t;

typedef struct {
    int ready;
    model_config_t one, two; /* the model as 1 and as 2 stages */
    int32_t *tok, *tgt;      /* (BT) */
    stage_result_t whole, first, last;
    float loss[STAGE_STEPS + 1], gnorm[STAGE_STEPS];
    float *p0, *p3; /* parameters before and after STAGE_STEPS steps (one stage) */
} stage_oracle_t;

static stage_oracle_t oracle;
static kern_t *go; /* the oracle backend, made at first use */

static void no_error_on(kern_t *k)
{
    const char *e = strncmp(kern_name(k), "cuda", 4) ? NULL : kern_cuda_last_error(k);
    if (e) fail_msg("%s: backend error: %s", kern_name(k), e);
}

/* ||a - b||_2 / ||b||_2 in double; infinite when a holds a NaN or an infinity. */
static double l2_err(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : num > 0 ? INFINITY : 0.0;
}

static void check_scalar(const char *what, float got, float want, double tol)
{
    double err = fabs((double)got - want) / fmax(fabs((double)want), 1e-30);
    if (isnan(err)) err = INFINITY;
    printf("  %-40s err %.2e (tol %.0e)  %.7g vs %.7g\n", what, err, tol, got, want);
    if (!(err <= tol)) fail_msg("%s: relative error %.3e > %.1e", what, err, tol);
}

static void check_l2(const char *what, const float *got, const float *want, size_t n, double tol)
{
    double err = l2_err(got, want, n);
    printf("  %-40s err %.2e (tol %.0e)\n", what, err, tol);
    if (!(err <= tol)) fail_msg("%s: relative L2 error %.3e > %.1e", what, err, tol);
}

/* Compares two buffers laid out by one tensor table, tensor by tensor; prints the worst
 * of each kind of tensor ("layers.*.attention.wq.weight" over all layers) and fails
 * when any is above tol. */
static void check_tensors(const char *what, const stage_tensor_t *tab, int n, const float *got,
                          const float *want, double tol)
{
    char kind[24][64], worst[24][64], bad[64] = "";
    double kerr[24], bad_err = 0;
    int nk = 0;
    for (int i = 0; i < n; i++) {
        const char *name = tab[i].name, *rest = name;
        char key[64];
        if (!strncmp(name, "layers.", 7) && (rest = strchr(name + 7, '.')))
            snprintf(key, sizeof key, "layers.*%s", rest);
        else
            snprintf(key, sizeof key, "%s", name);
        double err = l2_err(got + tab[i].offset, want + tab[i].offset, tab[i].numel);
        int j = 0;
        while (j < nk && strcmp(kind[j], key)) j++;
        if (j == nk) {
            assert_true(nk < 24);
            snprintf(kind[j], sizeof kind[j], "%s", key);
            kerr[j] = -1, nk++;
        }
        if (err > kerr[j]) kerr[j] = err, snprintf(worst[j], sizeof worst[j], "%s", name);
        if (!(err <= tol) && !(err <= bad_err))
            bad_err = err, snprintf(bad, sizeof bad, "%s", name);
    }
    printf("  %s (tol %.0e):\n", what, tol);
    for (int j = 0; j < nk; j++)
        printf("    %-36s err %.2e  (worst: %s)\n", kind[j], kerr[j], worst[j]);
    if (*bad) fail_msg("%s: %s has relative L2 error %.3e > %.1e", what, bad, bad_err, tol);
}

static float *download_floats(kern_t *k, const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    kern_download(k, h, d, n * sizeof *h);
    return h;
}

static void stage_result_free(stage_result_t *r)
{
    free(r->y), free(r->dx), free(r->grads), free(r->tab);
    memset(r, 0, sizeof *r);
}

/* Stage `index` of cfg on k, parameters from STAGE_SEED: the forward pass (with the loss
 * on the last stage; x_in on the others) and, unless this is not the last stage and dy
 * is NULL, the backward pass from dy. */
static void stage_run(stage_result_t *r, const model_config_t *cfg, int index, kern_t *k,
                      const int32_t *tok, const int32_t *tgt, const float *x_in, const float *dy)
{
    char err[STATUS_ERR_LEN] = "";
    size_t act = (size_t)cfg->batch * cfg->seq * cfg->dim;
    memset(r, 0, sizeof *r);
    stage_t *st = stage_new(cfg, index, k, 1, STAGE_SEED, err);
    if (!st) fail_msg("stage_new on %s: %s", kern_name(k), err);
    int last = stage_is_last(st), first = stage_is_first(st);
    if (!last) r->y = malloc(act * sizeof(float)), assert_non_null(r->y);
    if (!first) r->dx = malloc(act * sizeof(float)), assert_non_null(r->dx);
    if (stage_forward(st, 0, tok, x_in, last ? tgt : NULL, r->y, &r->loss, err))
        fail_msg("stage_forward on %s: %s", kern_name(k), err);
    if (last || dy) {
        if (stage_backward(st, 0, dy, r->dx, err))
            fail_msg("stage_backward on %s: %s", kern_name(k), err);
        r->grads = download_floats(k, stage_grads(st), stage_num_params(st));
    }
    const stage_tensor_t *tab = stage_tensors(st, &r->ntab);
    r->tab = malloc((size_t)r->ntab * sizeof *r->tab);
    assert_non_null(r->tab);
    memcpy(r->tab, tab, (size_t)r->ntab * sizeof *r->tab);
    no_error_on(k);
    stage_destroy(&st);
}

/* STAGE_STEPS AdamW steps of the one-stage model on k: losses before each step and after
 * the last, gradient norms, and the parameters before and after. */
static void stage_steps(kern_t *k, const model_config_t *cfg, const int32_t *tok,
                        const int32_t *tgt, float *loss, float *gnorm, float **p0, float **p3)
{
    char err[STATUS_ERR_LEN] = "";
    optim_config_t oc = optim_defaults();
    stage_t *st = stage_new(cfg, 0, k, 1, STAGE_SEED, err);
    if (!st) fail_msg("stage_new on %s: %s", kern_name(k), err);
    size_t P = stage_num_params(st);
    *p0 = download_floats(k, stage_params(st), P);
    for (int s = 0; s <= STAGE_STEPS; s++) {
        stage_zero_grads(st);
        if (stage_forward(st, 0, tok, NULL, tgt, NULL, &loss[s], err))
            fail_msg("stage_forward on %s: %s", kern_name(k), err);
        if (s == STAGE_STEPS) break;
        if (stage_backward(st, 0, NULL, NULL, err))
            fail_msg("stage_backward on %s: %s", kern_name(k), err);
        optim_adamw_step(st, &oc, s, 1.0f, &gnorm[s]);
    }
    *p3 = download_floats(k, stage_params(st), P);
    no_error_on(k);
    stage_destroy(&st);
}

/* The model of these tests: "small", or SWARMTRAIN_TEST_STAGE. */
static int stage_test_config(model_config_t *c, char *err)
{
    const char *env = getenv("SWARMTRAIN_TEST_STAGE");
    char buf[256], *save = NULL, *item;
    snprintf(buf, sizeof buf, "%s", env && *env ? env : "small");
    item = strtok_r(buf, ",", &save);
    if (config_preset(c, item ? item : "", err)) return -1;
    while ((item = strtok_r(NULL, ",", &save))) {
        char *eq = strchr(item, '=');
        if (!eq) {
            snprintf(err, STATUS_ERR_LEN, "SWARMTRAIN_TEST_STAGE: '%s' is not key=value", item);
            return -1;
        }
        *eq = 0;
        if (config_set(c, item, eq + 1, err)) return -1;
    }
    c->stages = 1;
    return config_validate(c, err) ? -1 : 0;
}

/* Computes the oracle's results once. */
static const stage_oracle_t *stage_oracle(void)
{
    stage_oracle_t *o = &oracle;
    char err[STATUS_ERR_LEN] = "";
    if (o->ready) return o;
    if (stage_test_config(&o->one, err)) fail_msg("%s", err);
    o->two = o->one;
    o->two.stages = o->one.n_layers % 2 ? 1 : 2;
    if (!go) {
        const char *name = getenv("SWARMTRAIN_TEST_STAGE_ORACLE");
        go = kern_new(name && *name ? name : "cpu", 0, err);
        if (!go) fail_msg("oracle backend: %s", err);
    }
    size_t BT = (size_t)o->one.batch * o->one.seq;
    o->tok = malloc(BT * sizeof *o->tok), o->tgt = malloc(BT * sizeof *o->tgt);
    assert_non_null(o->tok), assert_non_null(o->tgt);
    rng_t r;
    rng_seed(&r, 77);
    for (size_t i = 0; i < BT; i++)
        o->tok[i] = (int32_t)rng_below(&r, (uint64_t)o->one.vocab),
        o->tgt[i] = (int32_t)rng_below(&r, (uint64_t)o->one.vocab);

    char text[512];
    config_to_text(&o->one, text, sizeof text);
    for (char *p = text; (p = strchr(p, '\n'));) *p = ' ';
    printf("  whole-stage model: %sbatch=%d; oracle %s\n", text, o->one.batch, kern_name(go));
    double t0 = clock_now();
    stage_run(&o->whole, &o->one, 0, go, o->tok, o->tgt, NULL, NULL);
    if (o->two.stages == 2) {
        stage_result_t fwd;
        stage_run(&fwd, &o->two, 0, go, o->tok, o->tgt, NULL, NULL); /* y of the first half */
        stage_run(&o->last, &o->two, 1, go, o->tok, o->tgt, fwd.y, NULL);
        stage_run(&o->first, &o->two, 0, go, o->tok, o->tgt, NULL, o->last.dx);
        stage_result_free(&fwd);
    }
    stage_steps(go, &o->one, o->tok, o->tgt, o->loss, o->gnorm, &o->p0, &o->p3);
    printf("  oracle done in %.1f s\n", clock_now() - t0);
    o->ready = 1;
    return o;
}

static void stage_oracle_free(void)
{
    stage_result_free(&oracle.whole), stage_result_free(&oracle.first);
    stage_result_free(&oracle.last);
    free(oracle.tok), free(oracle.tgt), free(oracle.p0), free(oracle.p3);
    memset(&oracle, 0, sizeof oracle);
    kern_destroy(&go);
}

/* Every whole-stage comparison of backend k against the oracle. */
static void stage_parity(kern_t *k, const stage_tol_t *tol)
{
    const stage_oracle_t *o = stage_oracle();
    stage_result_t r;
    char what[96];
    printf("  %s, %s matmul\n", kern_name(k),
           strncmp(kern_name(k), "cuda", 4) || !kern_cuda_tf32(k) ? "fp32" : "TF32");

    stage_run(&r, &o->one, 0, k, o->tok, o->tgt, NULL, NULL);
    check_scalar("1 stage: loss", r.loss, o->whole.loss, tol->loss);
    check_tensors("1 stage: gradients", r.tab, r.ntab, r.grads, o->whole.grads, tol->grad);
    stage_result_free(&r);

    if (o->two.stages == 2) {
        size_t act = (size_t)o->two.batch * o->two.seq * o->two.dim;
        stage_run(&r, &o->two, 1, k, o->tok, o->tgt, o->first.y, NULL);
        check_scalar("2 stages, last: loss", r.loss, o->last.loss, tol->loss);
        check_l2("2 stages, last: dx", r.dx, o->last.dx, act, tol->act);
        check_tensors("2 stages, last: gradients", r.tab, r.ntab, r.grads, o->last.grads,
                      tol->grad);
        stage_result_free(&r);
        stage_run(&r, &o->two, 0, k, o->tok, o->tgt, NULL, o->last.dx);
        check_l2("2 stages, first: y", r.y, o->first.y, act, tol->act);
        check_tensors("2 stages, first: gradients", r.tab, r.ntab, r.grads, o->first.grads,
                      tol->grad);
        stage_result_free(&r);
    } else {
        printf("  (odd layer count: no 2-stage split)\n");
    }

    float loss[STAGE_STEPS + 1], gnorm[STAGE_STEPS], *p0, *p3;
    stage_steps(k, &o->one, o->tok, o->tgt, loss, gnorm, &p0, &p3);
    size_t P = 0;
    for (int i = 0; i < o->whole.ntab; i++) P += o->whole.tab[i].numel;
    check_l2("AdamW: initial parameters", p0, o->p0, P, 0.0);
    for (int s = 0; s < STAGE_STEPS; s++) {
        snprintf(what, sizeof what, "AdamW step %d: gradient norm", s + 1);
        check_scalar(what, gnorm[s], o->gnorm[s], tol->grad);
        snprintf(what, sizeof what, "AdamW: loss after %d step(s)", s + 1);
        check_scalar(what, loss[s + 1], o->loss[s + 1], tol->steps);
    }
    snprintf(what, sizeof what, "AdamW: parameters after %d steps", STAGE_STEPS);
    check_tensors(what, o->whole.tab, o->whole.ntab, p3, o->p3, tol->param);
    float *u = malloc(P * sizeof *u);
    assert_non_null(u);
    for (size_t i = 0; i < P; i++) u[i] = o->p3[i] - o->p0[i], p3[i] -= p0[i];
    snprintf(what, sizeof what, "AdamW: update p%d - p0, all tensors", STAGE_STEPS);
    check_l2(what, p3, u, P, tol->update);
    snprintf(what, sizeof what, "AdamW: update p%d - p0", STAGE_STEPS);
    check_tensors(what, o->whole.tab, o->whole.ntab, p3, u, STAGE_TOL_UPDATE_TENSOR);
    free(u), free(p0), free(p3);
}

static void test_stage(void **state)
{
    (void)state;
    stage_parity(gk, is_cuda && kern_cuda_tf32(gk) ? &stage_tol_tf32 : &stage_tol_fp32);
}

/* The same with TF32 off, on a second cuda backend (SWARMTRAIN_CUDA_TF32=0 at kern_new);
 * skipped when the backend under test already is fp32 or is not cuda. */
static void test_stage_fp32(void **state)
{
    (void)state;
    if (!is_cuda || !kern_cuda_tf32(gk)) {
        printf("  (the backend under test already runs fp32 matmuls: see test_stage)\n");
        skip();
    }
    char err[STATUS_ERR_LEN] = "", saved[32] = "";
    const char *env = getenv("SWARMTRAIN_CUDA_TF32");
    int had = env != NULL;
    if (had) snprintf(saved, sizeof saved, "%s", env);
    setenv("SWARMTRAIN_CUDA_TF32", "0", 1);
    kern_t *k = kern_new("cuda", 0, err);
    if (had)
        setenv("SWARMTRAIN_CUDA_TF32", saved, 1);
    else
        unsetenv("SWARMTRAIN_CUDA_TF32");
    if (!k) fail_msg("a second cuda backend: %s", err);
    assert_int_equal(kern_cuda_tf32(k), 0);
    stage_parity(k, &stage_tol_fp32);
    kern_destroy(&k);
}

/* --- benchmark (SWARMTRAIN_CUDA_BENCH=1) ---------------------------------------------- */

typedef struct {
    int B, T, C, NH, HS, F, V;
    const char *name;
} bench_cfg;

static cudaEvent_t ev0, ev1;

static void bench_start(void)
{
    kern_sync(gk);
    cudaEventRecord(ev0, 0); /* the legacy stream orders against the backend's stream */
}

/* Prints the mean time of `reps` calls and GFLOP/s when flops > 0. */
static void bench_stop(const char *what, int reps, double flops)
{
    float ms = 0;
    cudaEventRecord(ev1, 0);
    cudaEventSynchronize(ev1);
    cudaEventElapsedTime(&ms, ev0, ev1);
    ms /= reps;
    if (flops > 0)
        printf("  %-40s %9.4f ms  %9.1f GFLOP/s\n", what, ms, flops / (ms * 1e-3) / 1e9);
    else
        printf("  %-40s %9.4f ms\n", what, ms);
}

#define BENCH(what, flops, call)                                                                   \
    do {                                                                                           \
        call;                                                                                      \
        bench_start();                                                                             \
        for (int r_ = 0; r_ < reps; r_++) call;                                                    \
        bench_stop((what), reps, (flops));                                                         \
    } while (0)

static void bench_matmul(const char *what, float *buf, int N, int C, int OC, int reps)
{
    char name[80];
    float *inp = buf, *w = inp + (size_t)N * C, *out = w + (size_t)OC * C;
    float *dinp = out + (size_t)N * OC, *dw = dinp + (size_t)N * C;
    double f = 2.0 * N * C * OC;
    snprintf(name, sizeof name, "matmul fwd %s %dx%dx%d", what, N, C, OC);
    BENCH(name, f, kern_matmul_forward(gk, out, inp, w, N, C, OC));
    snprintf(name, sizeof name, "matmul bwd %s", what);
    BENCH(name, 2 * f, kern_matmul_backward(gk, dinp, dw, out, inp, w, N, C, OC));
}

static void bench_config(const bench_cfg *g)
{
    int N = g->B * g->T, C = g->C, F = g->F, V = g->V, reps = 20;
    size_t big = (size_t)N * (2 * F > 3 * C ? 2 * F : 3 * C);
    if ((size_t)N * V > big) big = (size_t)N * V;
    size_t wmax = (size_t)C * (2 * F > V ? 2 * F : V);
    if ((size_t)3 * C * C > wmax) wmax = (size_t)3 * C * C;
    /* one pool: inputs, weights, outputs and gradients, all random-ish */
    size_t pool_n = 4 * big + 2 * wmax + 4 * (size_t)N * C;
    float *pool = kern_alloc(gk, pool_n * 4);
    if (!pool) {
        printf("  bench %s: out of device memory\n", g->name);
        return;
    }
    float *h = randn(1 << 20, 99, 0.5f);
    for (size_t off = 0; off < pool_n; off += 1 << 20)
        kern_upload(gk, pool + off, h, (pool_n - off < (1u << 20) ? pool_n - off : 1u << 20) * 4);
    free(h);
    int32_t *tok = kern_alloc(gk, (size_t)N * 4);
    int32_t *htok = rand_tokens(N, V, 98);
    kern_upload(gk, tok, htok, (size_t)N * 4);
    free(htok);

    printf("bench %s: B=%d T=%d C=%d NH=%d HS=%d F=%d V=%d (%s matmul)\n", g->name, g->B, g->T, C,
           g->NH, g->HS, F, V, is_cuda && kern_cuda_tf32(gk) ? "TF32" : "fp32");
    bench_matmul("qkv", pool, N, C, 3 * C, reps);
    bench_matmul("proj", pool, N, C, C, reps);
    bench_matmul("fc", pool, N, C, 2 * F, reps);
    bench_matmul("fc2", pool, N, F, C, reps);
    bench_matmul("lm_head", pool, N, C, V, reps);

    float *a = pool, *b = pool + big, *c = pool + 2 * big, *d = pool + 3 * big;
    float *w = pool + 4 * big;
    double af = 4.0 * g->B * g->NH * (double)g->T * g->T * g->HS / 2; /* causal: half */
    kern_scale(gk, a, 0.2f, (size_t)N * 3 * C);                       /* tame scores */
    BENCH("attention fwd", af, kern_attention_forward(gk, c, d, a, g->B, g->T, g->NH, g->HS));
    BENCH("attention bwd (2.5x fwd flops)", 2.5 * af,
          kern_attention_backward(gk, b, c, a, c, d, g->B, g->T, g->NH, g->HS));
    BENCH("rmsnorm fwd", 0, kern_rmsnorm_forward(gk, c, d, a, w, N, C, 1e-5f));
    BENCH("rmsnorm bwd", 0, kern_rmsnorm_backward(gk, b, w + C, c, a, w, d, N, C));
    BENCH("swiglu fwd", 0, kern_swiglu_forward(gk, c, a, N, F));
    BENCH("swiglu bwd", 0, kern_swiglu_backward(gk, b, c, a, N, F));
    BENCH("embedding fwd", 0, kern_embedding_forward(gk, c, tok, w, N, C));
    BENCH("embedding bwd", 0, kern_embedding_backward(gk, w, c, tok, N, C));
    BENCH("crossentropy fwd", 0, kern_crossentropy_forward(gk, d, a, tok, N, V));
    BENCH("crossentropy bwd", 0, kern_crossentropy_backward(gk, c, a, tok, 1.0f / N, N, V));
    BENCH("add (N*C)", 0, kern_add(gk, c, a, b, (size_t)N * C));
    BENCH("adamw (3C*C params)", 0,
          kern_adamw(gk, w, w + wmax, b, c, (size_t)3 * C * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1));
    double s = 0;
    BENCH("sumsq (3C*C)", 0, s += kern_sumsq(gk, w, (size_t)3 * C * C));
    (void)s;
    no_backend_error();
    kern_free(gk, pool);
    kern_free(gk, tok);
}

static void bench_all(void)
{
    const bench_cfg cfgs[] = {
        {8, 256, 256, 4, 64, 688, 256, "small"},
        {4, 1024, 1024, 16, 64, 2816, 256, "large"},
    };
    cudaEventCreate(&ev0);
    cudaEventCreate(&ev1);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) bench_config(&cfgs[i]);
    cudaEventDestroy(ev0);
    cudaEventDestroy(ev1);
}

/* --- main ------------------------------------------------------------------------------ */

int main(void)
{
    char err[STATUS_ERR_LEN] = "";
    const char *name = getenv("SWARMTRAIN_TEST_BACKEND");
    if (!name || !*name) name = "cuda";
    gk = kern_new(name, 0, err);
    if (!gk) {
        printf("test_cuda: skipping: %s\n", err);
        return 77;
    }
    gr = kern_new("ref", 1, err);
    if (!gr) {
        printf("test_cuda: the ref backend failed: %s\n", err);
        kern_destroy(&gk);
        return 1;
    }
    is_cuda = !strncmp(kern_name(gk), "cuda", 4);
    tol_mm = is_cuda && kern_cuda_tf32(gk) ? 3e-3 : 2e-5;
    printf("test_cuda: %s against ref (matmul tolerance %.0e)\n", kern_name(gk), tol_mm);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),      cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_embedding),   cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_swiglu),      cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_adamw),
        cmocka_unit_test(test_stage),       cmocka_unit_test(test_stage_fp32),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *bench = getenv("SWARMTRAIN_CUDA_BENCH");
    if (bench && !strcmp(bench, "1") && is_cuda) bench_all();
    stage_oracle_free();
    kern_destroy(&gr);
    kern_destroy(&gk);
    return rc;
}

#endif
