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
 * Not for: the full model stage (peer/ tests), speed regressions (the bench only prints). */
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

#include "common/status.h"
#include "kernels/cuda/kern_cuda.h"
#include "kernels/kernels.h"
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
    void *d = gk->alloc(gk, bytes);
    assert_non_null(d);
    if (host) gk->upload(gk, d, host, bytes);
    return d;
}

/* Downloads n floats from the device into a fresh host buffer. */
static float *host(const float *d, size_t n)
{
    float *h = malloc((n ? n : 1) * sizeof *h);
    assert_non_null(h);
    gk->download(gk, h, d, n * sizeof *h);
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
    float *a = gk->alloc(gk, n * sizeof(float));
    float *b = gk->alloc(gk, n * sizeof(float));
    assert_non_null(a);
    assert_non_null(b);
    assert_int_equal(((uintptr_t)a) % 64, 0);
    float *h = host(a, n);
    for (size_t i = 0; i < n; i++) assert_true(h[i] == 0.0f); /* alloc zeroes */
    float *x = randn(n, 1, 1.0f);
    gk->upload(gk, a, x, n * sizeof(float));
    gk->copy(gk, b, a, n * sizeof(float));
    gk->zero(gk, a, 10 * sizeof(float));
    gk->sync(gk);
    float *ha = host(a, n), *hb = host(b, n);
    assert_memory_equal(hb, x, n * sizeof(float));
    for (size_t i = 0; i < 10; i++) assert_true(ha[i] == 0.0f);
    assert_memory_equal(ha + 10, x + 10, (n - 10) * sizeof(float));
    gk->free(gk, a);
    gk->free(gk, b);
    gk->free(gk, NULL);
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

    gr->matmul_forward(gr, out, inp, w, N, C, OC);
    gk->matmul_forward(gk, d_out, d_inp, d_w, N, C, OC);
    check("matmul_forward out", d_out, out, no, tol_mm);

    /* accumulate into random gradients */
    gr->matmul_backward(gr, dinp, dw, dout, inp, w, N, C, OC);
    gk->matmul_backward(gk, d_dinp, d_dw, d_dout, d_inp, d_w, N, C, OC);
    check("matmul_backward dinp (+=)", d_dinp, dinp, ni, tol_mm);
    check("matmul_backward dw (+=)", d_dw, dw, nw, tol_mm);

    /* NULL outputs are skipped: dw only, then dinp only */
    gr->matmul_backward(gr, NULL, dw, dout, inp, w, N, C, OC);
    gk->matmul_backward(gk, NULL, d_dw, d_dout, d_inp, d_w, N, C, OC);
    gr->matmul_backward(gr, dinp, NULL, dout, inp, w, N, C, OC);
    gk->matmul_backward(gk, d_dinp, NULL, d_dout, d_inp, d_w, N, C, OC);
    check("matmul_backward dinp (NULL dw)", d_dinp, dinp, ni, tol_mm);
    check("matmul_backward dw (NULL dinp)", d_dw, dw, nw, tol_mm);

    gk->free(gk, d_inp), gk->free(gk, d_w), gk->free(gk, d_dout);
    gk->free(gk, d_out), gk->free(gk, d_dinp), gk->free(gk, d_dw);
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

    gr->embedding_forward(gr, out, tok, wte, N, C);
    gk->embedding_forward(gk, d_out, d_tok, d_wte, N, C);
    check("embedding_forward", d_out, out, no, 0.0);

    gr->embedding_backward(gr, dwte, dout, tok, N, C);
    gk->embedding_backward(gk, d_dwte, d_dout, d_tok, N, C);
    check("embedding_backward (+=)", d_dwte, dwte, nw, TOL_EW);

    /* deterministic: the same sum twice gives the same bits */
    float *first = host(d_dwte, nw);
    gk->upload(gk, d_dwte, dwte0, nw * 4);
    gk->embedding_backward(gk, d_dwte, d_dout, d_tok, N, C);
    float *second = host(d_dwte, nw);
    assert_memory_equal(first, second, nw * 4);
    gk->embedding_backward(gk, NULL, d_dout, d_tok, N, C); /* NULL: nothing */
    no_backend_error();

    gk->free(gk, d_tok), gk->free(gk, d_wte), gk->free(gk, d_dout), gk->free(gk, d_out);
    gk->free(gk, d_dwte);
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

    gr->rmsnorm_forward(gr, out, rstd, inp, w, N, C, eps);
    gk->rmsnorm_forward(gk, d_out, d_rstd, d_inp, d_w, N, C, eps);
    check("rmsnorm_forward out", d_out, out, n, TOL_EW);
    check("rmsnorm_forward rstd", d_rstd, rstd, N, TOL_EW);

    /* the backward uses the oracle's rstd on both sides, so that only it is compared */
    gk->upload(gk, d_rstd, rstd, N * 4);
    gr->rmsnorm_backward(gr, dinp, dw, dout, inp, w, rstd, N, C);
    gk->rmsnorm_backward(gk, d_dinp, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    check("rmsnorm_backward dinp (+=)", d_dinp, dinp, n, TOL_EW);
    check("rmsnorm_backward dw (+=)", d_dw, dw, C, TOL_RED);

    gr->rmsnorm_backward(gr, NULL, dw, dout, inp, w, rstd, N, C);
    gk->rmsnorm_backward(gk, NULL, d_dw, d_dout, d_inp, d_w, d_rstd, N, C);
    gr->rmsnorm_backward(gr, dinp, NULL, dout, inp, w, rstd, N, C);
    gk->rmsnorm_backward(gk, d_dinp, NULL, d_dout, d_inp, d_w, d_rstd, N, C);
    check("rmsnorm_backward dinp (NULL dw)", d_dinp, dinp, n, TOL_EW);
    check("rmsnorm_backward dw (NULL dinp)", d_dw, dw, C, TOL_RED);

    gk->free(gk, d_inp), gk->free(gk, d_w), gk->free(gk, d_dout), gk->free(gk, d_out);
    gk->free(gk, d_rstd), gk->free(gk, d_dinp), gk->free(gk, d_dw);
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

    gr->rope_forward(gr, qkv, freqs, B, T, NH, HS);
    gk->rope_forward(gk, d_qkv, d_f, B, T, NH, HS);
    check("rope_forward (v untouched)", d_qkv, qkv, n, TOL_EW);
    gr->rope_backward(gr, dqkv, freqs, B, T, NH, HS);
    gk->rope_backward(gk, d_dqkv, d_f, B, T, NH, HS);
    check("rope_backward", d_dqkv, dqkv, n, TOL_EW);

    gk->free(gk, d_f), gk->free(gk, d_qkv), gk->free(gk, d_dqkv);
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
    gr->attention_forward(gr, out, lse, qkv, B, T, NH, HS);
    gk->attention_forward(gk, d_out, d_lse, d_qkv, B, T, NH, HS);
    snprintf(what, sizeof what, "attention_forward out");
    check(what, d_out, out, no, TOL_RED);
    check("attention_forward lse", d_lse, lse, nl, TOL_EW);

    /* both sides start from the oracle's out and lse */
    gk->upload(gk, d_out, out, no * 4);
    gk->upload(gk, d_lse, lse, nl * 4);
    gr->attention_backward(gr, dqkv, dout, qkv, out, lse, B, T, NH, HS);
    gk->attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    check("attention_backward dqkv (+=)", d_dqkv, dqkv, nqkv, TOL_RED);

    /* the gradient alone (from zero), so that the += base does not hide its error */
    float *zero = calloc(nqkv, 4);
    gr->attention_backward(gr, zero, dout, qkv, out, lse, B, T, NH, HS);
    gk->zero(gk, d_dqkv, nqkv * 4);
    gk->attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    check("attention_backward dqkv (from 0)", d_dqkv, zero, nqkv, TOL_RED);
    float *first = host(d_dqkv, nqkv);
    gk->zero(gk, d_dqkv, nqkv * 4);
    gk->attention_backward(gk, d_dqkv, d_dout, d_qkv, d_out, d_lse, B, T, NH, HS);
    float *second = host(d_dqkv, nqkv);
    assert_memory_equal(first, second, nqkv * 4); /* deterministic */

    gk->free(gk, d_qkv), gk->free(gk, d_dout), gk->free(gk, d_out), gk->free(gk, d_lse);
    gk->free(gk, d_dqkv);
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

    gr->swiglu_forward(gr, out, h, N, F);
    gk->swiglu_forward(gk, d_out, d_h, N, F);
    check("swiglu_forward", d_out, out, no, TOL_EW);
    gr->swiglu_backward(gr, dh, dout, h, N, F);
    gk->swiglu_backward(gk, d_dh, d_dout, d_h, N, F);
    check("swiglu_backward (+=)", d_dh, dh, nh, TOL_EW);
    gk->swiglu_backward(gk, NULL, d_dout, d_h, N, F);
    no_backend_error();

    gk->free(gk, d_h), gk->free(gk, d_dout), gk->free(gk, d_out), gk->free(gk, d_dh);
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

    gr->crossentropy_forward(gr, losses, logits, tgt, N, V);
    gk->crossentropy_forward(gk, d_losses, d_logits, d_tgt, N, V);
    check("crossentropy_forward", d_losses, losses, N, TOL_EW);

    gr->crossentropy_backward(gr, dl, logits, tgt, 1.0f / N, N, V);
    gk->upload(gk, d_dl, logits, n * 4); /* garbage to be overwritten */
    gk->crossentropy_backward(gk, d_dl, d_logits, d_tgt, 1.0f / N, N, V);
    check("crossentropy_backward (overwrites)", d_dl, dl, n, TOL_EW);
    gk->crossentropy_backward(gk, d_logits, d_logits, d_tgt, 1.0f / N, N, V);
    check("crossentropy_backward (in place)", d_logits, dl, n, TOL_EW);

    gk->free(gk, d_logits), gk->free(gk, d_losses), gk->free(gk, d_dl), gk->free(gk, d_tgt);
    free(logits), free(losses), free(dl), free(tgt);
}

/* --- elementwise, sumsq, AdamW ------------------------------------------------------- */

static void test_elementwise(void **state)
{
    (void)state;
    size_t n = 100003;
    float *a = randn(n, 80, 1.0f), *b = randn(n, 81, 1.0f), *out = malloc(n * 4);
    float *d_a = dev(a, n * 4), *d_b = dev(b, n * 4), *d_out = dev(NULL, n * 4);

    gr->add(gr, out, a, b, n);
    gk->add(gk, d_out, d_a, d_b, n);
    check("add", d_out, out, n, 0.0);
    gr->add(gr, a, a, b, n); /* out == a */
    gk->add(gk, d_a, d_a, d_b, n);
    check("add (in place)", d_a, a, n, 0.0);
    gr->axpy(gr, a, -0.37f, b, n);
    gk->axpy(gk, d_a, -0.37f, d_b, n);
    check("axpy", d_a, a, n, TOL_EW);
    gr->scale(gr, a, 1.7f, n);
    gk->scale(gk, d_a, 1.7f, n);
    check("scale", d_a, a, n, 0.0);

    double want = gr->sumsq(gr, a, n), got = gk->sumsq(gk, d_a, n);
    no_backend_error();
    printf("  %-34s n=%-8zu %.17g vs %.17g\n", "sumsq", n, got, want);
    assert_true(fabs(got - want) <= 1e-9 * want);
    assert_true(gk->sumsq(gk, d_a, n) == got); /* deterministic */
    assert_true(gk->sumsq(gk, d_a, 1) == (double)a[0] * a[0]);
    assert_true(gk->sumsq(gk, d_a, 0) == 0.0);

    gk->free(gk, d_a), gk->free(gk, d_b), gk->free(gk, d_out);
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
        gr->adamw(gr, p, g, m, v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
        gk->adamw(gk, d_p, d_g, d_m, d_v, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
    }
    check("adamw p", d_p, p, n, TOL_EW);
    check("adamw m", d_m, m, n, TOL_EW);
    check("adamw v", d_v, v, n, TOL_EW);
    gk->free(gk, d_p), gk->free(gk, d_g), gk->free(gk, d_m), gk->free(gk, d_v);
    free(p), free(g), free(m), free(v);
}

/* --- benchmark (SWARMTRAIN_CUDA_BENCH=1) ---------------------------------------------- */

typedef struct {
    int B, T, C, NH, HS, F, V;
    const char *name;
} bench_cfg;

static cudaEvent_t ev0, ev1;

static void bench_start(void)
{
    gk->sync(gk);
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
    BENCH(name, f, gk->matmul_forward(gk, out, inp, w, N, C, OC));
    snprintf(name, sizeof name, "matmul bwd %s", what);
    BENCH(name, 2 * f, gk->matmul_backward(gk, dinp, dw, out, inp, w, N, C, OC));
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
    float *pool = gk->alloc(gk, pool_n * 4);
    if (!pool) {
        printf("  bench %s: out of device memory\n", g->name);
        return;
    }
    float *h = randn(1 << 20, 99, 0.5f);
    for (size_t off = 0; off < pool_n; off += 1 << 20)
        gk->upload(gk, pool + off, h, (pool_n - off < (1u << 20) ? pool_n - off : 1u << 20) * 4);
    free(h);
    int32_t *tok = gk->alloc(gk, (size_t)N * 4);
    int32_t *htok = rand_tokens(N, V, 98);
    gk->upload(gk, tok, htok, (size_t)N * 4);
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
    gk->scale(gk, a, 0.2f, (size_t)N * 3 * C);                        /* tame scores */
    BENCH("attention fwd", af, gk->attention_forward(gk, c, d, a, g->B, g->T, g->NH, g->HS));
    BENCH("attention bwd (2.5x fwd flops)", 2.5 * af,
          gk->attention_backward(gk, b, c, a, c, d, g->B, g->T, g->NH, g->HS));
    BENCH("rmsnorm fwd", 0, gk->rmsnorm_forward(gk, c, d, a, w, N, C, 1e-5f));
    BENCH("rmsnorm bwd", 0, gk->rmsnorm_backward(gk, b, w + C, c, a, w, d, N, C));
    BENCH("swiglu fwd", 0, gk->swiglu_forward(gk, c, a, N, F));
    BENCH("swiglu bwd", 0, gk->swiglu_backward(gk, b, c, a, N, F));
    BENCH("embedding fwd", 0, gk->embedding_forward(gk, c, tok, w, N, C));
    BENCH("embedding bwd", 0, gk->embedding_backward(gk, w, c, tok, N, C));
    BENCH("crossentropy fwd", 0, gk->crossentropy_forward(gk, d, a, tok, N, V));
    BENCH("crossentropy bwd", 0, gk->crossentropy_backward(gk, c, a, tok, 1.0f / N, N, V));
    BENCH("add (N*C)", 0, gk->add(gk, c, a, b, (size_t)N * C));
    BENCH("adamw (3C*C params)", 0,
          gk->adamw(gk, w, w + wmax, b, c, (size_t)3 * C * C, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1));
    double s = 0;
    BENCH("sumsq (3C*C)", 0, s += gk->sumsq(gk, w, (size_t)3 * C * C));
    (void)s;
    no_backend_error();
    gk->free(gk, pool);
    gk->free(gk, tok);
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
    is_cuda = !strncmp(gk->name, "cuda", 4);
    tol_mm = is_cuda && kern_cuda_tf32(gk) ? 3e-3 : 2e-5;
    printf("test_cuda: %s against ref (matmul tolerance %.0e)\n", gk->name, tol_mm);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),      cmocka_unit_test(test_matmul),
        cmocka_unit_test(test_embedding),   cmocka_unit_test(test_rmsnorm),
        cmocka_unit_test(test_rope),        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_swiglu),      cmocka_unit_test(test_crossentropy),
        cmocka_unit_test(test_elementwise), cmocka_unit_test(test_adamw),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    const char *bench = getenv("SWARMTRAIN_CUDA_BENCH");
    if (bench && !strcmp(bench, "1") && is_cuda) bench_all();
    kern_destroy(&gr);
    kern_destroy(&gk);
    return rc;
}

#endif
