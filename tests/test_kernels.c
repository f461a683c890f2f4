/* test_kernels.c — the kernel backends against each other and against calculus.
 *
 * 1. "cpu" (1, 2, 3 threads) against "ref" on random data of awkward sizes, by normalized
 *    error, and cpu results bitwise identical for every thread count.
 * 2. "ref"'s backward ops against central finite differences of its forward ops.
 * 3. Accumulate semantics: backward ops add into their gradients, skip NULL ones;
 *    crossentropy_backward overwrites and works in place.
 * 4. Hand-computed values: a few forwards, two AdamW steps; RoPE forward then backward is
 *    the identity; attention's lse is the log-sum-exp of the scaled causal scores; a later
 *    token's k and v never change an earlier output.
 * 5. The compression ops against the host code they stand in for, bit for bit: "ref"'s
 *    tile DCT against kernels/dct.c, its top-k against demo_topk, accumulate + DCT +
 *    top-k + scatter + inverse DCT + axpy against demo_accumulate + demo_extract (entries
 *    and residual), apply_sign against demo_apply_sign, quantize / dequantize against
 *    codec_encode's payload bytes and codec_decode's values; and "cpu" (1, 2, 3 threads)
 *    bitwise equal to "ref" for all of them.
 * Not for: the CUDA backend (its own suites), speed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels/kern_impl.h" /* kern_fail: a backend failure, made on purpose */
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "compress/demo.h"
#include "kernels/dct.h"
#include "testutil.h"

#include <cblas.h>
#include <math.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

extern char **environ;

/* cpu against ref. Both compute in float; ref accumulates in double, cpu in float with
 * vectorized partial sums and a polynomial exp (relative error ~2e-7). Over the lengths
 * used here (reductions of at most a few hundred terms) the worst element stays below
 * ~1e-6 of the result's largest magnitude; 1e-5 leaves room without hiding a wrong index,
 * a missing term or a wrong sign, which all show up at 1e-2 or more. */
#define TOL_CPU 1e-5
/* Central differences of float forwards: L = sum(out * R) is summed in double, but every
 * out element carries a float rounding (~6e-8 relative), so the difference quotient has
 * an absolute noise of ~1e-7 |L| / eps, plus the O(eps^2) truncation of the nonlinear ops.
 * With eps = 1e-2 and |L| ~ 10 both stay below ~1e-4 of the largest gradient (3e-5 is
 * the worst seen here); 2e-3 keeps a wide margin and still catches a wrong factor or a
 * missing term, which are errors of order 1e-1 to 1. */
#define FD_EPS 1e-2f
#define TOL_FD 2e-3
/* Accumulation: (g + x) computed by the op against g + (x computed alone) differ only by
 * the rounding of one extra float addition per element, or a few when sgemm adds its
 * K-blocks one at a time. */
#define TOL_ACC 1e-6

#define NB 4 /* backends under comparison: [0] ref, [1..3] cpu with 1, 2, 3 threads */

static kern_t *kref;
static kern_t *kcpu[3];
static int verbose; /* TEST_KERNELS_VERBOSE=1 prints every measured error */

static kern_t *backend(int b)
{
    return b ? kcpu[b - 1] : kref;
}

static int setup(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN] = "";
    const char *v = getenv("TEST_KERNELS_VERBOSE");
    verbose = v && *v && strcmp(v, "0");
    kref = kern_new("ref", 1, err);
    if (!kref) return -1;
    for (int i = 0; i < 3; i++) {
        kcpu[i] = kern_new("cpu", i + 1, err);
        if (!kcpu[i]) return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    kern_destroy(&kref);
    for (int i = 0; i < 3; i++) kern_destroy(&kcpu[i]);
    return 0;
}

/* --- buffers (host memory: both backends under test are host backends) ------------ */

static float *fbuf(size_t n)
{
    float *p = kern_alloc(kref, n * sizeof(float));
    assert_non_null(p);
    return p;
}

static float *frand(size_t n, uint64_t seed, float std)
{
    float *p = fbuf(n);
    testutil_fill_normal(p, n, seed, std);
    return p;
}

static float *fdup(const float *x, size_t n)
{
    float *p = fbuf(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static void ffree(void *p)
{
    kern_free(kref, p);
}

static void ffree_all(float *r[NB])
{
    for (int b = 0; b < NB; b++) ffree(r[b]);
}

static int32_t *ibuf_rand(size_t n, int32_t V, uint64_t seed)
{
    int32_t *p = kern_alloc(kref, n * sizeof(int32_t));
    assert_non_null(p);
    rng_t r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (int32_t)rng_below(&r, (uint64_t)V);
    return p;
}

static double dot_d(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

/* r[0] is ref's result, r[1..3] cpu's with 1..3 threads: cpu within tol of ref, and cpu
 * bitwise the same for every thread count. */
static void compare(const char *what, float *r[NB], size_t n, double tol)
{
    for (int b = 1; b < NB; b++) {
        double e = testutil_norm_err(r[b], r[0], n);
        if (verbose) print_message("%-22s n %-8zu cpu(%d) vs ref %.3g\n", what, n, b, e);
        if (!(e <= tol))
            fail_msg("%s: cpu(%d threads) vs ref: normalized error %.3g > %.3g", what, b, e, tol);
    }
    for (int b = 2; b < NB; b++)
        if (memcmp(r[b], r[1], n * sizeof(float)))
            fail_msg("%s: cpu with %d threads differs from cpu with 1 thread", what, b);
}

/* --- 0. memory ------------------------------------------------------------------- */

static void test_memory(void **state)
{
    (void)state;
    for (int b = 0; b < 2; b++) {
        kern_t *k = backend(b);
        assert_int_equal(kern_on_device(k), 0);
        size_t big = (size_t)3 << 20; /* above cpu's parallel copy threshold */
        unsigned char *a = kern_alloc(k, big + 7), *c = kern_alloc(k, big + 7);
        assert_non_null(a);
        assert_non_null(c);
        assert_int_equal((uintptr_t)a % 64, 0);
        for (size_t i = 0; i < big + 7; i++)
            if (a[i]) fail_msg("%s: alloc not zeroed at %zu", kern_name(k), i);
        unsigned char *host = malloc(big + 7), *back = malloc(big + 7);
        assert_non_null(host);
        assert_non_null(back);
        for (size_t i = 0; i < big + 7; i++) host[i] = (unsigned char)(i * 131 + 7);
        kern_upload(k, a, host, big + 7);
        kern_copy(k, c, a, big + 7);
        kern_download(k, back, c, big + 7);
        assert_memory_equal(back, host, big + 7);
        kern_zero(k, c + 5, big);
        kern_sync(k);
        assert_int_equal(c[4], host[4]);
        assert_int_equal(c[big + 5], host[big + 5]);
        for (size_t i = 5; i < big + 5; i++)
            if (c[i]) fail_msg("%s: zero left a byte at %zu", kern_name(k), i);
        void *z = kern_alloc(k, 0);
        assert_non_null(z);
        kern_free(k, z);
        kern_free(k, NULL);
        kern_free(k, a);
        kern_free(k, c);
        free(host);
        free(back);
    }
    char err[STATUS_ERR_LEN] = "";
    assert_null(kern_new("no-such-backend", 1, err));
    assert_true(strlen(err) > 0);
    kern_t *k = NULL;
    kern_destroy(&k);
    kern_destroy(NULL);
}

/* --- 1. cpu against ref ------------------------------------------------------------ */

static void matmul_case(int N, int C, int OC, uint64_t seed)
{
    float *inp = frand((size_t)N * C, seed, 1.0f), *w = frand((size_t)OC * C, seed + 1, 0.5f);
    float *dout = frand((size_t)N * OC, seed + 2, 1.0f);
    float *out[NB], *dinp[NB], *dw[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        out[b] = fbuf((size_t)N * OC);
        dinp[b] = fbuf((size_t)N * C);
        dw[b] = fbuf((size_t)OC * C);
        kern_matmul_forward(k, out[b], inp, w, N, C, OC);
        kern_matmul_backward(k, dinp[b], dw[b], dout, inp, w, N, C, OC);
    }
    compare("matmul out", out, (size_t)N * OC, TOL_CPU);
    compare("matmul dinp", dinp, (size_t)N * C, TOL_CPU);
    compare("matmul dw", dw, (size_t)OC * C, TOL_CPU);
    ffree_all(out);
    ffree_all(dinp);
    ffree_all(dw);
    ffree(inp);
    ffree(w);
    ffree(dout);
}

static void test_cpu_matmul(void **state)
{
    (void)state;
    matmul_case(1, 5, 3, 10);
    matmul_case(37, 19, 23, 11);
    matmul_case(203, 67, 45, 12); /* large enough to be split across threads */
    matmul_case(517, 33, 130, 13);
    matmul_case(777, 100, 130, 14); /* cut into 3 chunks for dinp, out and dw alike */
}

static void embedding_case(int N, int C, int V, uint64_t seed)
{
    int32_t *tok = ibuf_rand((size_t)N, V, seed);
    float *wte = frand((size_t)V * C, seed + 1, 1.0f), *dout = frand((size_t)N * C, seed + 2, 1.0f);
    float *out[NB], *dwte[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        out[b] = fbuf((size_t)N * C);
        dwte[b] = fbuf((size_t)V * C);
        kern_embedding_forward(k, out[b], tok, wte, N, C);
        kern_embedding_backward(k, dwte[b], dout, tok, N, C);
    }
    compare("embedding out", out, (size_t)N * C, 0.0); /* a copy is exact */
    compare("embedding dwte", dwte, (size_t)V * C, TOL_CPU);
    ffree_all(out);
    ffree_all(dwte);
    ffree(tok);
    ffree(wte);
    ffree(dout);
}

static void test_cpu_embedding(void **state)
{
    (void)state;
    embedding_case(7, 5, 3, 20);
    embedding_case(517, 77, 13, 21); /* repeated tokens, parallel path */
}

static void rmsnorm_case(int N, int C, uint64_t seed)
{
    float *inp = frand((size_t)N * C, seed, 2.0f), *w = frand((size_t)C, seed + 1, 1.0f);
    float *dout = frand((size_t)N * C, seed + 2, 1.0f);
    float *out[NB], *rstd[NB], *dinp[NB], *dw[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        out[b] = fbuf((size_t)N * C);
        rstd[b] = fbuf((size_t)N);
        dinp[b] = fbuf((size_t)N * C);
        dw[b] = fbuf((size_t)C);
        kern_rmsnorm_forward(k, out[b], rstd[b], inp, w, N, C, 1e-5f);
        /* both backward from ref's rstd so only the backward is compared here */
        kern_rmsnorm_backward(k, dinp[b], dw[b], dout, inp, w, rstd[0], N, C);
    }
    compare("rmsnorm out", out, (size_t)N * C, TOL_CPU);
    compare("rmsnorm rstd", rstd, (size_t)N, TOL_CPU);
    compare("rmsnorm dinp", dinp, (size_t)N * C, TOL_CPU);
    compare("rmsnorm dw", dw, (size_t)C, TOL_CPU);
    ffree_all(out);
    ffree_all(rstd);
    ffree_all(dinp);
    ffree_all(dw);
    ffree(inp);
    ffree(w);
    ffree(dout);
}

static void test_cpu_rmsnorm(void **state)
{
    (void)state;
    rmsnorm_case(5, 3, 30);
    rmsnorm_case(517, 77, 31);
}

static float *rope_freqs(int T, int HS)
{
    float *f = fbuf((size_t)T * HS);
    kern_rope_freqs(f, T, HS, 10000.0f);
    return f;
}

static void rope_case(int B, int T, int NH, int HS, uint64_t seed)
{
    size_t n = (size_t)B * T * 3 * NH * HS;
    float *x = frand(n, seed, 1.0f), *freqs = rope_freqs(T, HS);
    float *fwd[NB], *bwd[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        fwd[b] = fdup(x, n);
        bwd[b] = fdup(x, n);
        kern_rope_forward(k, fwd[b], freqs, B, T, NH, HS);
        kern_rope_backward(k, bwd[b], freqs, B, T, NH, HS);
    }
    compare("rope forward", fwd, n, TOL_CPU);
    compare("rope backward", bwd, n, TOL_CPU);
    ffree_all(fwd);
    ffree_all(bwd);
    ffree(x);
    ffree(freqs);
}

static void test_cpu_rope(void **state)
{
    (void)state;
    rope_case(2, 13, 3, 6, 40);
    rope_case(3, 130, 3, 16, 41);
}

static void attention_case(int B, int T, int NH, int HS, uint64_t seed)
{
    int C = NH * HS;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    float *qkv = frand(nqkv, seed, 1.0f), *dout = frand(nout, seed + 1, 1.0f);
    float *out[NB], *lse[NB], *dqkv[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        out[b] = fbuf(nout);
        lse[b] = fbuf(nlse);
        dqkv[b] = fbuf(nqkv);
        kern_attention_forward(k, out[b], lse[b], qkv, B, T, NH, HS);
        /* all backward from ref's forward so only the backward is compared here */
        kern_attention_backward(k, dqkv[b], dout, qkv, out[0], lse[0], B, T, NH, HS);
    }
    compare("attention out", out, nout, TOL_CPU);
    compare("attention lse", lse, nlse, TOL_CPU);
    compare("attention dqkv", dqkv, nqkv, TOL_CPU);
    ffree_all(out);
    ffree_all(lse);
    ffree_all(dqkv);
    ffree(qkv);
    ffree(dout);
}

static void test_cpu_attention(void **state)
{
    (void)state;
    attention_case(2, 13, 3, 6, 50);
    attention_case(1, 70, 2, 8, 51);   /* crosses the cpu's 64-row block */
    attention_case(2, 1, 1, 2, 52);    /* one token */
    attention_case(3, 130, 3, 16, 53); /* three blocks, the last of two rows */
}

static void swiglu_case(int N, int F, uint64_t seed)
{
    float *h = frand((size_t)N * 2 * F, seed, 2.0f), *dout = frand((size_t)N * F, seed + 1, 1.0f);
    float *out[NB], *dh[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        out[b] = fbuf((size_t)N * F);
        dh[b] = fbuf((size_t)N * 2 * F);
        kern_swiglu_forward(k, out[b], h, N, F);
        kern_swiglu_backward(k, dh[b], dout, h, N, F);
    }
    compare("swiglu out", out, (size_t)N * F, TOL_CPU);
    compare("swiglu dh", dh, (size_t)N * 2 * F, TOL_CPU);
    ffree_all(out);
    ffree_all(dh);
    ffree(h);
    ffree(dout);
}

static void test_cpu_swiglu(void **state)
{
    (void)state;
    swiglu_case(3, 5, 60);
    swiglu_case(301, 113, 61);
}

static void crossentropy_case(int N, int V, uint64_t seed)
{
    float *logits = frand((size_t)N * V, seed, 3.0f);
    int32_t *tgt = ibuf_rand((size_t)N, V, seed + 1);
    float *loss[NB], *dl[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        loss[b] = fbuf((size_t)N);
        dl[b] = frand((size_t)N * V, seed + 2, 1.0f); /* garbage: backward overwrites */
        kern_crossentropy_forward(k, loss[b], logits, tgt, N, V);
        kern_crossentropy_backward(k, dl[b], logits, tgt, 0.37f, N, V);
    }
    compare("crossentropy losses", loss, (size_t)N, TOL_CPU);
    compare("crossentropy dlogits", dl, (size_t)N * V, TOL_CPU);
    ffree_all(loss);
    ffree_all(dl);
    ffree(logits);
    ffree(tgt);
}

static void test_cpu_crossentropy(void **state)
{
    (void)state;
    crossentropy_case(3, 7, 70);
    crossentropy_case(129, 257, 71);
}

static void elementwise_case(size_t n, uint64_t seed)
{
    float *a = frand(n, seed, 1.0f), *x = frand(n, seed + 1, 1.0f);
    float *add[NB], *addin[NB], *axpy[NB], *scl[NB];
    double ss[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        add[b] = fbuf(n);
        kern_add(k, add[b], a, x, n);
        addin[b] = fdup(a, n); /* out aliases a */
        kern_add(k, addin[b], addin[b], x, n);
        axpy[b] = fdup(a, n);
        kern_axpy(k, axpy[b], -0.75f, x, n);
        scl[b] = fdup(a, n);
        kern_scale(k, scl[b], 1.5f, n);
        ss[b] = kern_sumsq(k, a, n);
    }
    compare("add", add, n, TOL_CPU);
    compare("add in place", addin, n, TOL_CPU);
    compare("axpy", axpy, n, TOL_CPU);
    compare("scale", scl, n, TOL_CPU);
    /* sumsq is a double sum of squares of floats (exact products): only the summation
     * order differs from ref, 1e-12 relative is generous for n ~ 1e6. */
    for (int b = 1; b < NB; b++) {
        if (!(fabs(ss[b] - ss[0]) <= 1e-12 * ss[0]))
            fail_msg("sumsq: cpu(%d) %.17g vs ref %.17g", b, ss[b], ss[0]);
        if (memcmp(&ss[b], &ss[1], sizeof(double)))
            fail_msg("sumsq: cpu with %d threads differs from 1 thread", b);
    }
    ffree_all(add);
    ffree_all(addin);
    ffree_all(axpy);
    ffree_all(scl);
    ffree(a);
    ffree(x);
}

static void test_cpu_elementwise(void **state)
{
    (void)state;
    elementwise_case(7, 80);
    elementwise_case(1000003, 81);
}

static void adamw_case(size_t n, uint64_t seed)
{
    float *p0 = frand(n, seed, 1.0f), *m0 = frand(n, seed + 1, 0.1f);
    float *v0 = frand(n, seed + 2, 0.1f);
    for (size_t i = 0; i < n; i++) v0[i] = v0[i] * v0[i];
    float *p[NB], *m[NB], *v[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        p[b] = fdup(p0, n);
        m[b] = fdup(m0, n);
        v[b] = fdup(v0, n);
        for (int t = 1; t <= 3; t++) {
            float *g = frand(n, seed + 10 + (uint64_t)t, 1.0f);
            kern_adamw(k, p[b], g, m[b], v[b], n, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, t);
            ffree(g);
        }
    }
    compare("adamw p", p, n, TOL_CPU);
    compare("adamw m", m, n, TOL_CPU);
    compare("adamw v", v, n, TOL_CPU);
    ffree_all(p);
    ffree_all(m);
    ffree_all(v);
    ffree(p0);
    ffree(m0);
    ffree(v0);
}

/* hash64: one definition on every backend (a golden value, checked against an independent
 * Python rendering of the formula in kernels.h), the same for every thread count, and it
 * sees a single changed bit, a sign of zero and a swap of two elements. */
static void test_hash64(void **state)
{
    (void)state;
    const float golden[4] = {1.0f, -2.5f, 0.0f, 3.0e-8f};
    const size_t n = 1000003;
    float *a = frand(n, 90, 1.0f);
    uint64_t h[NB];
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        assert_true(kern_hash64(k, golden, 4) == 0x290ea8f705b319acULL);
        assert_true(kern_hash64(k, golden, 0) == 0);
        h[b] = kern_hash64(k, a, n);
        if (b && h[b] != h[0])
            fail_msg("hash64: cpu(%d) %016llx vs ref %016llx", b, (unsigned long long)h[b],
                     (unsigned long long)h[0]);
    }
    kern_t *k = backend(2);
    uint32_t bits;
    memcpy(&bits, &a[n / 2], 4);
    bits ^= 1; /* the last mantissa bit of one element */
    memcpy(&a[n / 2], &bits, 4);
    assert_true(kern_hash64(k, a, n) != h[0]);
    memcpy(&bits, &a[n / 2], 4);
    bits ^= 1;
    memcpy(&a[n / 2], &bits, 4);
    assert_true(kern_hash64(k, a, n) == h[0]);
    float t = a[3]; /* a swap of two different elements */
    a[3] = a[4], a[4] = t;
    assert_true(a[3] != a[4] && kern_hash64(k, a, n) != h[0]);
    const float zeros[2] = {0.0f, -0.0f}, pz[2] = {0.0f, 0.0f};
    assert_true(kern_hash64(k, zeros, 2) != kern_hash64(k, pz, 2));
    ffree(a);
}

static void test_cpu_adamw(void **state)
{
    (void)state;
    adamw_case(5, 90);
    adamw_case(100003, 91);
}

/* --- 2. ref's backward against finite differences ---------------------------------- */

typedef double (*loss_fn)(void *ctx);

/* Normalized error of the analytical gradient g against central differences of L at
 * x[idx[s]]; x is restored afterwards. */
static double fd_err(loss_fn L, void *ctx, float *x, const float *g, const size_t *idx, int count)
{
    float *fd = malloc((size_t)count * sizeof(float)), *an = malloc((size_t)count * sizeof(float));
    assert_non_null(fd);
    assert_non_null(an);
    for (int s = 0; s < count; s++) {
        size_t i = idx[s];
        float old = x[i], xp = old + FD_EPS, xm = old - FD_EPS;
        x[i] = xp;
        double lp = L(ctx);
        x[i] = xm;
        double lm = L(ctx);
        x[i] = old;
        fd[s] = (float)((lp - lm) / ((double)xp - (double)xm));
        an[s] = g[i];
    }
    double e = testutil_norm_err(an, fd, (size_t)count);
    if (verbose) print_message("finite differences: error %.3g\n", e);
    free(fd);
    free(an);
    return e;
}

#define FD_SAMPLES 48

static void fd_pick(size_t *idx, size_t n, uint64_t seed)
{
    rng_t r;
    rng_seed(&r, seed);
    for (int s = 0; s < FD_SAMPLES; s++) idx[s] = (size_t)rng_below(&r, n);
}

static void fd_expect(const char *what, loss_fn L, void *ctx, float *x, const float *g, size_t n,
                      uint64_t seed)
{
    size_t idx[FD_SAMPLES];
    fd_pick(idx, n, seed);
    double e = fd_err(L, ctx, x, g, idx, FD_SAMPLES);
    if (!(e <= TOL_FD))
        fail_msg("%s: gradient vs finite differences: error %.3g > %g", what, e, TOL_FD);
}

typedef struct {
    float *inp, *w, *out, *R;
    int N, C, OC;
} fd_matmul_t;

static double fd_matmul_loss(void *p)
{
    fd_matmul_t *c = p;
    kern_matmul_forward(kref, c->out, c->inp, c->w, c->N, c->C, c->OC);
    return dot_d(c->out, c->R, (size_t)c->N * c->OC);
}

static void test_fd_matmul(void **state)
{
    (void)state;
    fd_matmul_t c = {.N = 9, .C = 7, .OC = 5};
    c.inp = frand((size_t)c.N * c.C, 100, 1.0f);
    c.w = frand((size_t)c.OC * c.C, 101, 1.0f);
    c.out = fbuf((size_t)c.N * c.OC);
    c.R = frand((size_t)c.N * c.OC, 102, 1.0f);
    float *dinp = fbuf((size_t)c.N * c.C), *dw = fbuf((size_t)c.OC * c.C);
    kern_matmul_backward(kref, dinp, dw, c.R, c.inp, c.w, c.N, c.C, c.OC);
    fd_expect("matmul dinp", fd_matmul_loss, &c, c.inp, dinp, (size_t)c.N * c.C, 103);
    fd_expect("matmul dw", fd_matmul_loss, &c, c.w, dw, (size_t)c.OC * c.C, 104);
    ffree(c.inp);
    ffree(c.w);
    ffree(c.out);
    ffree(c.R);
    ffree(dinp);
    ffree(dw);
}

typedef struct {
    float *wte, *out, *R;
    int32_t *tok;
    int N, C;
} fd_embed_t;

static double fd_embed_loss(void *p)
{
    fd_embed_t *c = p;
    kern_embedding_forward(kref, c->out, c->tok, c->wte, c->N, c->C);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

static void test_fd_embedding(void **state)
{
    (void)state;
    int V = 6;
    fd_embed_t c = {.N = 11, .C = 4};
    c.tok = ibuf_rand((size_t)c.N, V - 1, 110); /* token V-1 unused: its gradient is 0 */
    c.wte = frand((size_t)V * c.C, 111, 1.0f);
    c.out = fbuf((size_t)c.N * c.C);
    c.R = frand((size_t)c.N * c.C, 112, 1.0f);
    float *dwte = fbuf((size_t)V * c.C);
    kern_embedding_backward(kref, dwte, c.R, c.tok, c.N, c.C);
    size_t idx[FD_SAMPLES];
    for (int s = 0; s < FD_SAMPLES; s++) idx[s] = (size_t)s % ((size_t)V * c.C); /* all */
    double e = fd_err(fd_embed_loss, &c, c.wte, dwte, idx, V * c.C);
    if (!(e <= TOL_FD)) fail_msg("embedding dwte vs finite differences: %.3g", e);
    ffree(c.tok);
    ffree(c.wte);
    ffree(c.out);
    ffree(c.R);
    ffree(dwte);
}

typedef struct {
    float *inp, *w, *out, *rstd, *R;
    int N, C;
} fd_rms_t;

static double fd_rms_loss(void *p)
{
    fd_rms_t *c = p;
    kern_rmsnorm_forward(kref, c->out, c->rstd, c->inp, c->w, c->N, c->C, 1e-5f);
    return dot_d(c->out, c->R, (size_t)c->N * c->C);
}

static void test_fd_rmsnorm(void **state)
{
    (void)state;
    fd_rms_t c = {.N = 6, .C = 9};
    c.inp = frand((size_t)c.N * c.C, 120, 1.0f);
    c.w = frand((size_t)c.C, 121, 1.0f);
    c.out = fbuf((size_t)c.N * c.C);
    c.rstd = fbuf((size_t)c.N);
    c.R = frand((size_t)c.N * c.C, 122, 1.0f);
    float *dinp = fbuf((size_t)c.N * c.C), *dw = fbuf((size_t)c.C);
    fd_rms_loss(&c);
    kern_rmsnorm_backward(kref, dinp, dw, c.R, c.inp, c.w, c.rstd, c.N, c.C);
    fd_expect("rmsnorm dinp", fd_rms_loss, &c, c.inp, dinp, (size_t)c.N * c.C, 123);
    fd_expect("rmsnorm dw", fd_rms_loss, &c, c.w, dw, (size_t)c.C, 124);
    ffree(c.inp);
    ffree(c.w);
    ffree(c.out);
    ffree(c.rstd);
    ffree(c.R);
    ffree(dinp);
    ffree(dw);
}

typedef struct {
    float *qkv, *tmp, *freqs, *R;
    int B, T, NH, HS;
} fd_rope_t;

static double fd_rope_loss(void *p)
{
    fd_rope_t *c = p;
    size_t n = (size_t)c->B * c->T * 3 * c->NH * c->HS;
    memcpy(c->tmp, c->qkv, n * sizeof(float));
    kern_rope_forward(kref, c->tmp, c->freqs, c->B, c->T, c->NH, c->HS);
    return dot_d(c->tmp, c->R, n);
}

static void test_fd_rope(void **state)
{
    (void)state;
    fd_rope_t c = {.B = 2, .T = 5, .NH = 2, .HS = 6};
    size_t n = (size_t)c.B * c.T * 3 * c.NH * c.HS;
    c.qkv = frand(n, 130, 1.0f);
    c.tmp = fbuf(n);
    c.R = frand(n, 131, 1.0f);
    c.freqs = fbuf((size_t)c.T * c.HS);
    kern_rope_freqs(c.freqs, c.T, c.HS, 3.0f); /* small theta: every pair turns visibly */
    float *g = fdup(c.R, n);
    kern_rope_backward(kref, g, c.freqs, c.B, c.T, c.NH, c.HS);
    fd_expect("rope", fd_rope_loss, &c, c.qkv, g, n, 132);
    ffree(c.qkv);
    ffree(c.tmp);
    ffree(c.R);
    ffree(c.freqs);
    ffree(g);
}

typedef struct {
    float *qkv, *out, *lse, *R;
    int B, T, NH, HS;
} fd_attn_t;

static double fd_attn_loss(void *p)
{
    fd_attn_t *c = p;
    kern_attention_forward(kref, c->out, c->lse, c->qkv, c->B, c->T, c->NH, c->HS);
    return dot_d(c->out, c->R, (size_t)c->B * c->T * c->NH * c->HS);
}

static void test_fd_attention(void **state)
{
    (void)state;
    fd_attn_t c = {.B = 2, .T = 7, .NH = 3, .HS = 4};
    int C = c.NH * c.HS;
    size_t nqkv = (size_t)c.B * c.T * 3 * C, nout = (size_t)c.B * c.T * C;
    c.qkv = frand(nqkv, 140, 1.0f);
    c.out = fbuf(nout);
    c.lse = fbuf((size_t)c.B * c.NH * c.T);
    c.R = frand(nout, 141, 1.0f);
    float *dqkv = fbuf(nqkv);
    fd_attn_loss(&c);
    kern_attention_backward(kref, dqkv, c.R, c.qkv, c.out, c.lse, c.B, c.T, c.NH, c.HS);
    static const char *part_name[3] = {"attention dq", "attention dk", "attention dv"};
    for (int part = 0; part < 3; part++) {
        size_t idx[FD_SAMPLES];
        rng_t r;
        rng_seed(&r, 142 + (uint64_t)part);
        for (int s = 0; s < FD_SAMPLES; s++) {
            size_t row = (size_t)rng_below(&r, (uint64_t)c.B * c.T);
            idx[s] = row * 3 * C + (size_t)part * C + (size_t)rng_below(&r, (uint64_t)C);
        }
        double e = fd_err(fd_attn_loss, &c, c.qkv, dqkv, idx, FD_SAMPLES);
        if (!(e <= TOL_FD)) fail_msg("%s vs finite differences: %.3g", part_name[part], e);
    }
    ffree(c.qkv);
    ffree(c.out);
    ffree(c.lse);
    ffree(c.R);
    ffree(dqkv);
}

typedef struct {
    float *h, *out, *R;
    int N, F;
} fd_swiglu_t;

static double fd_swiglu_loss(void *p)
{
    fd_swiglu_t *c = p;
    kern_swiglu_forward(kref, c->out, c->h, c->N, c->F);
    return dot_d(c->out, c->R, (size_t)c->N * c->F);
}

static void test_fd_swiglu(void **state)
{
    (void)state;
    fd_swiglu_t c = {.N = 5, .F = 7};
    c.h = frand((size_t)c.N * 2 * c.F, 150, 1.5f);
    c.out = fbuf((size_t)c.N * c.F);
    c.R = frand((size_t)c.N * c.F, 151, 1.0f);
    float *dh = fbuf((size_t)c.N * 2 * c.F);
    kern_swiglu_backward(kref, dh, c.R, c.h, c.N, c.F);
    fd_expect("swiglu", fd_swiglu_loss, &c, c.h, dh, (size_t)c.N * 2 * c.F, 152);
    ffree(c.h);
    ffree(c.out);
    ffree(c.R);
    ffree(dh);
}

typedef struct {
    float *logits, *loss;
    int32_t *tgt;
    float dloss;
    int N, V;
} fd_ce_t;

static double fd_ce_loss(void *p)
{
    fd_ce_t *c = p;
    kern_crossentropy_forward(kref, c->loss, c->logits, c->tgt, c->N, c->V);
    double s = 0;
    for (int n = 0; n < c->N; n++) s += c->loss[n];
    return c->dloss * s;
}

static void test_fd_crossentropy(void **state)
{
    (void)state;
    fd_ce_t c = {.N = 6, .V = 9, .dloss = 0.7f};
    c.logits = frand((size_t)c.N * c.V, 160, 2.0f);
    c.loss = fbuf((size_t)c.N);
    c.tgt = ibuf_rand((size_t)c.N, c.V, 161);
    float *dl = fbuf((size_t)c.N * c.V);
    kern_crossentropy_backward(kref, dl, c.logits, c.tgt, c.dloss, c.N, c.V);
    fd_expect("crossentropy", fd_ce_loss, &c, c.logits, dl, (size_t)c.N * c.V, 162);
    ffree(c.logits);
    ffree(c.loss);
    ffree(c.tgt);
    ffree(dl);
}

/* --- 3. accumulate, NULL, in place --------------------------------------------------- */

/* The op run into zeros gives g; run into x it must give x + g. */
static void expect_accumulated(const char *what, const char *backend_name, const float *got,
                               const float *x, const float *g, size_t n)
{
    float *want = fbuf(n);
    for (size_t i = 0; i < n; i++) want[i] = x[i] + g[i];
    double e = testutil_norm_err(got, want, n);
    if (!(e <= TOL_ACC))
        fail_msg("%s (%s): does not accumulate: error %.3g", what, backend_name, e);
    ffree(want);
}

static void test_accumulate(void **state)
{
    (void)state;
    const int N = 67, C = 24, OC = 19, V = 10, F = 11, B = 2, T = 9, NH = 2, HS = 6;
    const int CA = NH * HS; /* attention width */
    for (int b = 0; b < 2; b++) {
        kern_t *k = b ? kcpu[2] : kref;
        /* matmul */
        float *inp = frand((size_t)N * C, 200, 1.0f), *w = frand((size_t)OC * C, 201, 1.0f);
        float *dout = frand((size_t)N * OC, 202, 1.0f);
        float *x1 = frand((size_t)N * C, 203, 3.0f), *x2 = frand((size_t)OC * C, 204, 3.0f);
        float *g1 = fbuf((size_t)N * C), *g2 = fbuf((size_t)OC * C);
        float *a1 = fdup(x1, (size_t)N * C), *a2 = fdup(x2, (size_t)OC * C);
        kern_matmul_backward(k, g1, g2, dout, inp, w, N, C, OC);
        kern_matmul_backward(k, a1, a2, dout, inp, w, N, C, OC);
        expect_accumulated("matmul dinp", kern_name(k), a1, x1, g1, (size_t)N * C);
        expect_accumulated("matmul dw", kern_name(k), a2, x2, g2, (size_t)OC * C);
        /* NULL outputs: each alone gives what it gave together */
        float *o1 = fbuf((size_t)N * C), *o2 = fbuf((size_t)OC * C);
        kern_matmul_backward(k, o1, NULL, dout, inp, w, N, C, OC);
        kern_matmul_backward(k, NULL, o2, dout, inp, w, N, C, OC);
        kern_matmul_backward(k, NULL, NULL, dout, inp, w, N, C, OC);
        assert_memory_equal(o1, g1, (size_t)N * C * sizeof(float));
        assert_memory_equal(o2, g2, (size_t)OC * C * sizeof(float));
        ffree(w);
        ffree(dout);
        ffree(o1);
        ffree(o2);
        ffree(g1);
        ffree(g2);
        ffree(a1);
        ffree(a2);
        ffree(x1);
        ffree(x2);

        /* rmsnorm (inp reused as N x C) */
        float *rw = frand((size_t)C, 210, 1.0f), *rout = fbuf((size_t)N * C);
        float *rstd = fbuf((size_t)N), *rdout = frand((size_t)N * C, 211, 1.0f);
        kern_rmsnorm_forward(k, rout, rstd, inp, rw, N, C, 1e-5f);
        x1 = frand((size_t)N * C, 212, 1.0f);
        x2 = frand((size_t)C, 213, 10.0f);
        g1 = fbuf((size_t)N * C);
        g2 = fbuf((size_t)C);
        a1 = fdup(x1, (size_t)N * C);
        a2 = fdup(x2, (size_t)C);
        kern_rmsnorm_backward(k, g1, g2, rdout, inp, rw, rstd, N, C);
        kern_rmsnorm_backward(k, a1, a2, rdout, inp, rw, rstd, N, C);
        expect_accumulated("rmsnorm dinp", kern_name(k), a1, x1, g1, (size_t)N * C);
        expect_accumulated("rmsnorm dw", kern_name(k), a2, x2, g2, (size_t)C);
        o1 = fbuf((size_t)N * C);
        o2 = fbuf((size_t)C);
        kern_rmsnorm_backward(k, o1, NULL, rdout, inp, rw, rstd, N, C);
        kern_rmsnorm_backward(k, NULL, o2, rdout, inp, rw, rstd, N, C);
        kern_rmsnorm_backward(k, NULL, NULL, rdout, inp, rw, rstd, N, C);
        assert_memory_equal(o1, g1, (size_t)N * C * sizeof(float));
        assert_memory_equal(o2, g2, (size_t)C * sizeof(float));
        ffree(rw);
        ffree(rout);
        ffree(rstd);
        ffree(rdout);
        ffree(o1);
        ffree(o2);
        ffree(g1);
        ffree(g2);
        ffree(a1);
        ffree(a2);
        ffree(x1);
        ffree(x2);
        ffree(inp);

        /* embedding */
        int32_t *tok = ibuf_rand((size_t)N, V, 220);
        float *edout = frand((size_t)N * C, 221, 1.0f);
        x1 = frand((size_t)V * C, 222, 1.0f);
        g1 = fbuf((size_t)V * C);
        a1 = fdup(x1, (size_t)V * C);
        kern_embedding_backward(k, g1, edout, tok, N, C);
        kern_embedding_backward(k, a1, edout, tok, N, C);
        kern_embedding_backward(k, NULL, edout, tok, N, C);
        expect_accumulated("embedding dwte", kern_name(k), a1, x1, g1, (size_t)V * C);
        ffree(tok);
        ffree(edout);
        ffree(x1);
        ffree(g1);
        ffree(a1);

        /* swiglu */
        float *h = frand((size_t)N * 2 * F, 230, 1.0f), *sdout = frand((size_t)N * F, 231, 1.0f);
        x1 = frand((size_t)N * 2 * F, 232, 1.0f);
        g1 = fbuf((size_t)N * 2 * F);
        a1 = fdup(x1, (size_t)N * 2 * F);
        kern_swiglu_backward(k, g1, sdout, h, N, F);
        kern_swiglu_backward(k, a1, sdout, h, N, F);
        kern_swiglu_backward(k, NULL, sdout, h, N, F);
        expect_accumulated("swiglu dh", kern_name(k), a1, x1, g1, (size_t)N * 2 * F);
        ffree(h);
        ffree(sdout);
        ffree(x1);
        ffree(g1);
        ffree(a1);

        /* attention */
        size_t nqkv = (size_t)B * T * 3 * CA, nout = (size_t)B * T * CA;
        float *qkv = frand(nqkv, 240, 1.0f), *aout = fbuf(nout), *lse = fbuf((size_t)B * NH * T);
        float *adout = frand(nout, 241, 1.0f);
        kern_attention_forward(k, aout, lse, qkv, B, T, NH, HS);
        x1 = frand(nqkv, 242, 1.0f);
        g1 = fbuf(nqkv);
        a1 = fdup(x1, nqkv);
        kern_attention_backward(k, g1, adout, qkv, aout, lse, B, T, NH, HS);
        kern_attention_backward(k, a1, adout, qkv, aout, lse, B, T, NH, HS);
        kern_attention_backward(k, NULL, adout, qkv, aout, lse, B, T, NH, HS);
        expect_accumulated("attention dqkv", kern_name(k), a1, x1, g1, nqkv);
        ffree(qkv);
        ffree(aout);
        ffree(lse);
        ffree(adout);
        ffree(x1);
        ffree(g1);
        ffree(a1);
    }
}

static void test_crossentropy_in_place(void **state)
{
    (void)state;
    const int N = 37, V = 300;
    float *logits = frand((size_t)N * V, 250, 2.0f);
    int32_t *tgt = ibuf_rand((size_t)N, V, 251);
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        float *sep = frand((size_t)N * V, 252, 5.0f); /* overwritten, not added to */
        float *inplace = fdup(logits, (size_t)N * V);
        kern_crossentropy_backward(k, sep, logits, tgt, 1.3f, N, V);
        kern_crossentropy_backward(k, inplace, inplace, tgt, 1.3f, N, V);
        assert_memory_equal(inplace, sep, (size_t)N * V * sizeof(float));
        /* rows of softmax - onehot sum to zero, and the target's entry is the negative one */
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int i = 0; i < V; i++) s += sep[(size_t)n * V + i];
            if (fabs(s) > 1e-5) fail_msg("%s: row %d of dlogits sums to %g", kern_name(k), n, s);
            assert_true(sep[(size_t)n * V + tgt[n]] < 0);
        }
        ffree(sep);
        ffree(inplace);
    }
    ffree(logits);
    ffree(tgt);
}

/* --- 4. known values and properties ------------------------------------------------ */

static void expect_near(const char *what, const char *name, float got, double want, double tol)
{
    if (!(fabs(got - want) <= tol * fmax(1.0, fabs(want))))
        fail_msg("%s (%s): got %.9g, want %.9g", what, name, got, want);
}

static void test_known_values(void **state)
{
    (void)state;
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        const char *nm = kern_name(k);
        /* matmul: [[1,2],[3,4]] . [[1,0],[0,1],[1,1]]^T */
        float inp[4] = {1, 2, 3, 4}, w[6] = {1, 0, 0, 1, 1, 1}, out[6];
        kern_matmul_forward(k, out, inp, w, 2, 2, 3);
        float mm[6] = {1, 2, 3, 3, 4, 7};
        for (int i = 0; i < 6; i++) expect_near("matmul", nm, out[i], mm[i], 0);
        /* rmsnorm: x = (3, 4), mean square 12.5 */
        float x[2] = {3, 4}, rw[2] = {1, 2}, y[2], r;
        kern_rmsnorm_forward(k, y, &r, x, rw, 1, 2, 0.0f);
        expect_near("rmsnorm rstd", nm, r, 1 / sqrt(12.5), 1e-6);
        expect_near("rmsnorm out0", nm, y[0], 3 / sqrt(12.5), 1e-6);
        expect_near("rmsnorm out1", nm, y[1], 8 / sqrt(12.5), 1e-6);
        /* swiglu: silu(1) * 2, silu(0) * 5, silu(-2) * 1 */
        float h[6] = {1, 0, -2, 2, 5, 1}, sw[3];
        kern_swiglu_forward(k, sw, h, 1, 3);
        expect_near("swiglu 0", nm, sw[0], 2 / (1 + exp(-1.0)), 1e-6);
        expect_near("swiglu 1", nm, sw[1], 0, 1e-6);
        expect_near("swiglu 2", nm, sw[2], -2 / (1 + exp(2.0)), 1e-6);
        /* crossentropy: uniform row = log V; (0, ln 3) with target 1 = -log(3/4) */
        float lg[7] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0, (float)log(3.0)}, ls[2];
        int32_t tg[2] = {2, 1};
        kern_crossentropy_forward(k, ls, lg, tg, 1, 5);
        expect_near("crossentropy uniform", nm, ls[0], log(5.0), 1e-6);
        kern_crossentropy_forward(k, ls + 1, lg + 5, tg + 1, 1, 2);
        expect_near("crossentropy 2", nm, ls[1], -log(0.75), 1e-6);
        /* embedding */
        float wte[6] = {1, 2, 3, 4, 5, 6}, e[6];
        int32_t et[3] = {2, 0, 2};
        kern_embedding_forward(k, e, et, wte, 3, 2);
        float ew[6] = {5, 6, 1, 2, 5, 6};
        for (int i = 0; i < 6; i++) expect_near("embedding", nm, e[i], ew[i], 0);
        /* rope, HS = 2, T = 2: position 1 turns (1, 0) by 1 radian (theta irrelevant for
         * i = 0); position 0 does not turn. Layout per token: q | k | v. */
        float fr[4], qkv[12] = {1, 0, 0, 1, 7, 8, 1, 0, 0, 1, 7, 8};
        kern_rope_freqs(fr, 2, 2, 10000.0f);
        kern_rope_forward(k, qkv, fr, 1, 2, 1, 2);
        float rw2[12] = {
            1, 0, 0, 1, 7, 8, (float)cos(1.0), (float)sin(1.0), (float)-sin(1.0), (float)cos(1.0),
            7, 8};
        for (int i = 0; i < 12; i++) expect_near("rope", nm, qkv[i], rw2[i], 1e-6);
        /* attention with q = 0: uniform weights, out[t] = mean(v[0..t]), lse = log(t+1) */
        float aq[12] = {0, 0, 1, 2, 2, 4, 0, 0, -3, 1, 6, 0}, ao[4], al[2];
        kern_attention_forward(k, ao, al, aq, 1, 2, 1, 2);
        expect_near("attention o00", nm, ao[0], 2, 1e-6);
        expect_near("attention o01", nm, ao[1], 4, 1e-6);
        expect_near("attention o10", nm, ao[2], 4, 1e-6);
        expect_near("attention o11", nm, ao[3], 2, 1e-6);
        expect_near("attention lse0", nm, al[0], 0, 1e-6);
        expect_near("attention lse1", nm, al[1], log(2.0), 1e-6);
    }
}

/* p = (1, -0.5, 0, 2), gradients g1 = (0.5, 0.1, -0.2, 0), g2 = (-0.25, 0.1, 0.3, 0),
 * lr 0.1, betas 0.9 / 0.999, eps 1e-8, weight decay 0.1. For p0, step 1:
 *   p = 1 - 0.1*0.1*1 = 0.99; m = 0.05; v = 0.001*0.25 = 2.5e-4;
 *   m^ = 0.05/0.1 = 0.5; v^ = 2.5e-4/0.001 = 0.25; p = 0.99 - 0.1*0.5/(0.5+1e-8) = 0.890000002
 * step 2: p = 0.890000002*0.99 = 0.881100002; m = 0.045 - 0.025 = 0.02;
 *   v = 0.999*2.5e-4 + 0.001*0.0625 = 3.1225e-4; m^ = 0.02/0.19; v^ = 3.1225e-4/0.001999;
 *   p = 0.881100002 - 0.1*0.105263158/(0.395225381+1e-8) = 0.854466299.
 * p3 has no gradient: it only decays, 2 * 0.99^2 = 1.9602. The rest likewise (double). */
static void test_adamw_two_steps(void **state)
{
    (void)state;
    const float g1[4] = {0.5f, 0.1f, -0.2f, 0.0f}, g2[4] = {-0.25f, 0.1f, 0.3f, 0.0f};
    const double p1[4] = {0.890000002, -0.59499999, 0.099999995, 1.98};
    const double p2[4] = {0.854466299, -0.68904998, 0.0742298144, 1.9602};
    const double m2[4] = {0.02, 0.019, 0.012, 0}, v2[4] = {0.00031225, 1.999e-05, 0.00012996, 0};
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        float p[4] = {1.0f, -0.5f, 0.0f, 2.0f}, m[4] = {0}, v[4] = {0};
        kern_adamw(k, p, g1, m, v, 4, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
        for (int i = 0; i < 4; i++) expect_near("adamw step 1", kern_name(k), p[i], p1[i], 1e-6);
        kern_adamw(k, p, g2, m, v, 4, 0.1f, 0.9f, 0.999f, 1e-8f, 0.1f, 2);
        for (int i = 0; i < 4; i++) {
            expect_near("adamw step 2 p", kern_name(k), p[i], p2[i], 1e-6);
            expect_near("adamw step 2 m", kern_name(k), m[i], m2[i], 1e-6);
            /* 0.999f is 0.99900001: (1 - beta2) is off by 1.3e-5 relative before the op
             * starts, so v gets 2e-5 (a wrong formula is off by far more) */
            if (!(fabs(v[i] - v2[i]) <= 2e-5 * v2[i] + 1e-12))
                fail_msg("adamw step 2 v (%s): got %.9g, want %.9g", kern_name(k), v[i], v2[i]);
        }
    }
}

static void test_rope_inverse(void **state)
{
    (void)state;
    const int B = 2, T = 13, NH = 3, HS = 8;
    size_t n = (size_t)B * T * 3 * NH * HS;
    float *x = frand(n, 300, 1.0f), *freqs = rope_freqs(T, HS);
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        float *y = fdup(x, n);
        kern_rope_forward(k, y, freqs, B, T, NH, HS);
        /* the forward must move q and k of later positions (else the test below is empty) */
        assert_true(testutil_norm_err(y, x, n) > 1e-2);
        kern_rope_backward(k, y, freqs, B, T, NH, HS);
        double e = testutil_norm_err(y, x, n);
        if (!(e <= 1e-6))
            fail_msg("rope (%s): backward . forward != identity: %.3g", kern_name(k), e);
        ffree(y);
    }
    ffree(x);
    ffree(freqs);
}

static void test_attention_lse(void **state)
{
    (void)state;
    const int B = 2, T = 70, NH = 3, HS = 8, C = NH * HS;
    float *qkv = frand((size_t)B * T * 3 * C, 310, 1.5f);
    for (int b = 0; b < NB; b++) {
        kern_t *k = backend(b);
        float *out = fbuf((size_t)B * T * C), *lse = fbuf((size_t)B * NH * T);
        kern_attention_forward(k, out, lse, qkv, B, T, NH, HS);
        for (int bb = 0; bb < B; bb++)
            for (int h = 0; h < NH; h++)
                for (int t = 0; t < T; t++) {
                    const float *q = qkv + ((size_t)bb * T + t) * 3 * C + h * HS;
                    double s[70], m = -INFINITY, sum = 0;
                    for (int j = 0; j <= t; j++) {
                        const float *kj = qkv + ((size_t)bb * T + j) * 3 * C + C + h * HS;
                        s[j] = 0;
                        for (int d = 0; d < HS; d++) s[j] += (double)q[d] * kj[d];
                        s[j] /= sqrt((double)HS);
                        m = fmax(m, s[j]);
                    }
                    for (int j = 0; j <= t; j++) sum += exp(s[j] - m);
                    double want = m + log(sum);
                    float got = lse[((size_t)bb * NH + h) * T + t];
                    if (!(fabs(got - want) <= 1e-5 * fmax(1.0, fabs(want))))
                        fail_msg("attention lse (%s) at b %d h %d t %d: %.9g vs %.9g", kern_name(k),
                                 bb, h, t, got, want);
                }
        ffree(out);
        ffree(lse);
    }
    ffree(qkv);
}

static void test_attention_causal(void **state)
{
    (void)state;
    const int B = 1, T = 70, NH = 2, HS = 8, C = NH * HS;
    const int cut[2] = {5, 63}; /* 63 -> 64 crosses the cpu's block boundary */
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C;
    float *qkv = frand(nqkv, 320, 1.0f);
    for (int b = 0; b < NB; b++)
        for (int ci = 0; ci < 2; ci++) {
            kern_t *k = backend(b);
            int t = cut[ci];
            float *q2 = fdup(qkv, nqkv);
            for (int c = C; c < 3 * C; c++) q2[(size_t)(t + 1) * 3 * C + c] += 3.0f; /* k, v */
            float *o1 = fbuf(nout), *o2 = fbuf(nout), *l1 = fbuf((size_t)NH * T),
                  *l2 = fbuf((size_t)NH * T);
            kern_attention_forward(k, o1, l1, qkv, B, T, NH, HS);
            kern_attention_forward(k, o2, l2, q2, B, T, NH, HS);
            size_t upto = (size_t)(t + 1) * C;
            if (memcmp(o1, o2, upto * sizeof(float)))
                fail_msg("attention (%s): token %d's k/v changed an earlier output", kern_name(k),
                         t + 1);
            /* and it did change the outputs from t + 1 on */
            assert_true(testutil_norm_err(o2 + upto, o1 + upto, nout - upto) > 1e-3);
            ffree(q2);
            ffree(o1);
            ffree(o2);
            ffree(l1);
            ffree(l2);
        }
    ffree(qkv);
}

/* --- 5. compression ops against the host code --------------------------------------- */

/* Every backend's n bytes (ref's first) must equal want bitwise. */
static void same_bytes(const char *what, void *r[NB], const void *want, size_t n)
{
    for (int b = 0; b < NB; b++)
        if (memcmp(r[b], want, n)) {
            size_t i = 0;
            while (((const uint8_t *)r[b])[i] == ((const uint8_t *)want)[i]) i++;
            fail_msg("%s: %s differs from the host code at byte %zu of %zu", what,
                     b ? "cpu" : "ref", i, n);
        }
}

static float *basis(int n)
{
    float *b = fbuf((size_t)n * n);
    dct_basis(b, n);
    return b;
}

static void dct_case(int64_t rows, int64_t cols, int chunk, uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    size_t n = (size_t)(rows * cols);
    dct_plan_t *plan = dct_plan_new(rows, cols, chunk, DCT_II, err);
    assert_non_null(plan);
    int cr = dct_plan_tile_rows(plan), cc = dct_plan_tile_cols(plan);
    float *br = basis(cr), *bc = basis(cc);
    float *x = frand(n, seed, 1.0f), *want = fbuf(n), *back = fbuf(n);
    float *r[NB];
    dct_forward(plan, want, x);
    for (int b = 0; b < NB; b++) {
        r[b] = fbuf(n);
        kern_dct_forward(backend(b), r[b], x, br, bc, rows, cols, cr, cc);
    }
    same_bytes("dct_forward", (void **)r, want, n * sizeof(float));
    /* the inverse, of the coefficients and of random ones */
    for (int pass = 0; pass < 2; pass++) {
        const float *coef = pass ? x : want;
        dct_inverse(plan, back, coef);
        for (int b = 0; b < NB; b++)
            kern_dct_inverse(backend(b), r[b], coef, br, bc, rows, cols, cr, cc);
        same_bytes("dct_inverse", (void **)r, back, n * sizeof(float));
        if (!pass) assert_true(testutil_norm_err(back, x, n) < 1e-5);
    }
    ffree_all(r);
    ffree(br);
    ffree(bc);
    ffree(x);
    ffree(want);
    ffree(back);
    dct_plan_destroy(&plan);
}

static void test_compress_dct(void **state)
{
    (void)state;
    dct_case(64, 64, 16, 400);
    dct_case(48, 80, 16, 401); /* 16 x 16 tiles */
    dct_case(1, 100, 64, 402); /* 1-D: 1 x 50 tiles */
    dct_case(30, 42, 8, 403);  /* 6 x 7 tiles */
    dct_case(12, 12, 64, 404); /* one tile */
    dct_case(128, 192, 64, 405);
    dct_case(7, 3, 256, 406); /* primes: 7 x 3, one tile */
}

/* Values with many exact ties in |x| (and +0 / -0), so that the index tie-break shows. */
static float *tie_values(size_t n, uint64_t seed)
{
    float *x = frand(n, seed, 1.0f);
    for (size_t i = 0; i < n; i++)
        if (i % 3 == 0) x[i] = (float)((int)((i * 7919) % 11) - 5) * 0.25f; /* -0 too */
    return x;
}

static void topk_case(int64_t tiles, int tn, int kk, uint64_t seed)
{
    size_t ne = (size_t)tiles * kk;
    float *x = tie_values((size_t)tiles * tn, seed);
    uint16_t *want = malloc(ne * sizeof *want);
    uint64_t *keys = malloc((size_t)tn * sizeof *keys);
    float *wval = fbuf(ne);
    assert_non_null(want);
    assert_non_null(keys);
    for (int64_t t = 0; t < tiles; t++) {
        demo_topk(want + (size_t)t * kk, x + (size_t)t * tn, tn, kk, keys);
        for (int j = 0; j < kk; j++)
            wval[(size_t)t * kk + j] = x[(size_t)t * tn + want[(size_t)t * kk + j]];
    }
    uint16_t *idx[NB];
    float *val[NB];
    for (int b = 0; b < NB; b++) {
        idx[b] = kern_alloc(kref, ne * sizeof(uint16_t));
        val[b] = fbuf(ne);
        kern_topk(backend(b), idx[b], val[b], x, tiles, tn, kk);
    }
    same_bytes("topk idx", (void **)idx, want, ne * sizeof(uint16_t));
    same_bytes("topk val", (void **)val, wval, ne * sizeof(float));
    for (int b = 0; b < NB; b++) {
        ffree(idx[b]);
        ffree(val[b]);
    }
    ffree(x);
    ffree(wval);
    free(want);
    free(keys);
}

static void test_compress_topk(void **state)
{
    (void)state;
    topk_case(5, 64, 1, 410);
    topk_case(5, 64, 7, 411);
    topk_case(5, 64, 63, 412);
    topk_case(5, 64, 64, 413);
    topk_case(3, 4096, 32, 414);
    topk_case(40, 16, 3, 415);
    topk_case(2, 1, 1, 416);
    /* the largest tile: cpu (the device's algorithm) against demo_topk; ref is O(tn^2) */
    int tn = 65536, kk = 100;
    float *x = tie_values((size_t)tn, 417);
    uint16_t *want = malloc((size_t)kk * sizeof *want), *got = malloc((size_t)kk * sizeof *got);
    uint64_t *keys = malloc((size_t)tn * sizeof *keys);
    float *val = fbuf((size_t)kk);
    assert_true(want && got && keys);
    demo_topk(want, x, tn, kk, keys);
    kern_topk(kcpu[2], got, val, x, 1, tn, kk);
    assert_memory_equal(got, want, (size_t)kk * sizeof *want);
    ffree(x);
    ffree(val);
    free(want);
    free(got);
    free(keys);
}

/* What a device does for demo_accumulate + demo_extract, with the ops, against them:
 * the same entries (f32 values, so the v1 message carries them exactly) and the same
 * residual D, bit for bit. */
static void demo_step_case(int64_t rows, int64_t cols, int chunk, int k, demo_vfmt_t vfmt,
                           uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    demo_cfg_t cfg = {.chunk = chunk, .k = k, .vfmt = vfmt, .beta = 0.9f};
    demo_t *d = demo_new(rows, cols, &cfg, err);
    assert_non_null(d);
    size_t n = (size_t)(rows * cols), len = demo_msg_size(d), wlen = 0;
    int cr = (int)dct_chunk_size(rows, chunk), cc = (int)dct_chunk_size(cols, chunk);
    int tn = cr * cc, kt = demo_entries_per_tile(rows, cols, chunk, k, vfmt);
    int64_t tiles = (rows / cr) * (cols / cc);
    size_t ne = (size_t)tiles * kt;
    float *br = basis(cr), *bc = basis(cc), *g0 = frand(n, seed, 1.0f),
          *g1 = frand(n, seed + 1, 1.0f);
    uint8_t *msg = malloc(len);
    uint16_t *widx = malloc(ne * sizeof *widx);
    float *wval = fbuf(ne);
    assert_true(msg && widx);
    float *D[NB], *coef = fbuf(n), *work = fbuf(n), *val = fbuf(ne);
    uint16_t *idx = kern_alloc(kref, ne * sizeof(uint16_t));
    for (int b = 0; b < NB; b++) D[b] = fbuf(n);
    for (int step = 0; step < 2; step++) {
        const float *g = step ? g1 : g0;
        assert_int_equal(demo_accumulate(d, g, 0.01f, err), 0);
        assert_int_equal(demo_extract(d, msg, len, &wlen, err), 0);
        for (int b = 0; b < NB; b++) {
            kern_t *kb = backend(b);
            kern_scale(kb, D[b], 0.9f, n);
            kern_axpy(kb, D[b], 0.01f, g, n);
            kern_dct_forward(kb, coef, D[b], br, bc, rows, cols, cr, cc);
            kern_topk(kb, idx, val, coef, tiles, tn, kt);
            if (vfmt == DEMO_VAL_F32) {
                demo_msg_info_t info;
                assert_int_equal(demo_msg_unpack(msg, wlen, &info, widx, wval, ne, err), 0);
                assert_memory_equal(val, wval, ne * sizeof(float));
                if (!info.dense) assert_memory_equal(idx, widx, ne * sizeof(uint16_t));
            }
            kern_scatter(kb, coef, idx, val, tiles, tn, kt, vfmt == DEMO_VAL_BF16);
            kern_dct_inverse(kb, work, coef, br, bc, rows, cols, cr, cc);
            kern_axpy(kb, D[b], -1.0f, work, n);
        }
        same_bytes("demo residual", (void **)D, demo_momentum(d), n * sizeof(float));
    }
    ffree_all(D);
    ffree(coef);
    ffree(work);
    ffree(val);
    ffree(idx);
    ffree(br);
    ffree(bc);
    ffree(g0);
    ffree(g1);
    ffree(wval);
    free(widx);
    free(msg);
    demo_destroy(&d);
}

static void test_compress_demo_step(void **state)
{
    (void)state;
    demo_step_case(64, 96, 32, 8, DEMO_VAL_F32, 420);
    demo_step_case(64, 96, 32, 8, DEMO_VAL_BF16, 421);
    demo_step_case(64, 96, 32, 8, DEMO_VAL_SIGN, 422);
    demo_step_case(1, 256, 64, 8, DEMO_VAL_SIGN, 423); /* a norm: dense tiles */
    demo_step_case(1, 256, 64, 4, DEMO_VAL_F32, 424);
    demo_step_case(24, 40, 16, 3, DEMO_VAL_F32, 425); /* 12 x 10 tiles */
}

static void test_compress_apply_sign(void **state)
{
    (void)state;
    size_t n = 100003;
    float *q = frand(n, 430, 1.0f), *p0 = frand(n, 431, 1.0f);
    for (size_t i = 0; i < n; i += 7) q[i] = i % 2 ? 0.0f : -0.0f;
    q[5] = NAN;
    uint8_t *signs = kern_alloc(kref, kern_sign_bytes(n));
    assert_non_null(signs);
    kern_sign_pack(signs, q, n);
    float *want = fdup(p0, n), *p[NB];
    demo_apply_sign(want, q, 0.003f, n);
    for (int b = 0; b < NB; b++) {
        p[b] = fdup(p0, n);
        kern_apply_sign(backend(b), p[b], signs, 0.003f, n);
    }
    same_bytes("apply_sign", (void **)p, want, n * sizeof(float));
    ffree_all(p);
    ffree(want);
    ffree(signs);
    ffree(q);
    ffree(p0);
}

/* Payload bytes against codec_encode's, values against codec_decode's. */
static void quant_case(codec_id_t codec, size_t n, uint32_t block, uint64_t seed)
{
    char err[STATUS_ERR_LEN];
    int bits = codec == CODEC_INT8 ? 8 : 4;
    float *x = frand(n, seed, 2.0f);
    /* a zero block, a denormal block (1/s overflows), huge values, exact halves */
    for (size_t i = 0; i < n && i < block; i++) x[i] = 0.0f;
    for (size_t i = block; i < n && i < 2 * block; i++) x[i] = (float)(i % 5) * 1e-44f;
    for (size_t i = 2 * block; i < n && i < 3 * block; i++) x[i] *= 1e35f;
    for (size_t i = 3 * block; i < n && i < 4 * block; i++) x[i] = (float)((int)(i % 9) - 4) * 0.5f;
    int64_t shape[1] = {(int64_t)n};
    codec_params_t cp = {.block = block};
    size_t total = codec_encoded_size(codec, &cp, shape, 1), w = 0,
           plen = kern_quant_bytes(n, bits, block);
    assert_int_equal(total, CODEC_HEADER_LEN + plen);
    uint8_t *msg = malloc(total);
    float *want = fbuf(n), *y[NB];
    uint8_t *pay[NB];
    assert_non_null(msg);
    assert_int_equal(codec_encode(codec, &cp, x, shape, 1, msg, total, &w, err), 0);
    assert_int_equal(codec_decode(msg, total, want, n, NULL, NULL, err), 0);
    for (int b = 0; b < NB; b++) {
        pay[b] = kern_alloc(kref, plen);
        y[b] = fbuf(n);
        kern_quantize(backend(b), pay[b], x, n, bits, block);
        kern_dequantize(backend(b), y[b], pay[b], n, bits, block);
    }
    same_bytes(bits == 8 ? "quantize int8" : "quantize int4", (void **)pay, msg + CODEC_HEADER_LEN,
               plen);
    same_bytes("dequantize", (void **)y, want, n * sizeof(float));
    /* a non-finite value: its block's scale is NaN, the others as before, and the
     * payload cannot be sealed */
    if (n > block) {
        x[block] = INFINITY;
        for (int b = 0; b < NB; b++) {
            kern_quantize(backend(b), pay[b], x, n, bits, block);
            float s0, s1;
            memcpy(&s0, pay[b], 4);
            memcpy(&s1, pay[b] + 4, 4);
            assert_true(isnan(s1));
            assert_memory_equal(&s0, msg + CODEC_HEADER_LEN, 4);
            memcpy(msg + CODEC_HEADER_LEN, pay[b], plen);
            assert_int_equal(codec_seal(codec, &cp, shape, 1, msg, total, err), STATUS_EINVAL);
        }
    }
    for (int b = 0; b < NB; b++) {
        ffree(pay[b]);
        ffree(y[b]);
    }
    ffree(x);
    ffree(want);
    free(msg);
}

static void test_compress_quantize(void **state)
{
    (void)state;
    const size_t ns[] = {1, 5, 63, 64, 65, 1000, 100003};
    const uint32_t b8[] = {1, 7, 64, 4096}, b4[] = {2, 6, 64, 4096};
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
        for (size_t j = 0; j < 4; j++) {
            quant_case(CODEC_INT8, ns[i], b8[j], 440 + i * 10 + j);
            quant_case(CODEC_INT4, ns[i], b4[j], 540 + i * 10 + j);
        }
    assert_int_equal(kern_quant_bytes(5, 4, 4), 8 + 3);
    assert_int_equal(kern_quant_bytes(5, 8, 4), 8 + 5);
}

/* OpenBLAS picks its kernels when it loads, and whether cpu results stay the same across
 * thread counts depends on those kernels. So the suite runs once more under each faster
 * kernel set this CPU can execute (a child process with OPENBLAS_CORETYPE set), unless
 * the core type was chosen already. Returns the number of failed runs. */
static int run_under_other_cores(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE")) return 0;
    const char *cores[2];
    int ncores = 0, failed = 0;
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        cores[ncores++] = "Haswell";
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
        cores[ncores++] = "SkylakeX";
    for (int i = 0; i < ncores; i++) {
        print_message("=== test_kernels again with OPENBLAS_CORETYPE=%s\n", cores[i]);
        setenv("OPENBLAS_CORETYPE", cores[i], 1); /* ours loaded already: only the child reads it */
        pid_t pid;
        int st = 0;
        if (posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ) != 0 ||
            waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            print_error("test_kernels with OPENBLAS_CORETYPE=%s failed\n", cores[i]);
            failed++;
        }
    }
    unsetenv("OPENBLAS_CORETYPE");
    return failed;
}

/* The cpu backend's attention scratch asks the allocator for T x T floats per thread; a
 * refused allocation must come back NULL here, not end the process (ASan's default). */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

/* A backend that fails records its first failure, keeps it, and says so through
 * kern_status / kern_error / kern_check; nothing aborts (kernels.h, "failures"). */
static void test_failures(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    const char *names[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        kern_t *k = kern_new(names[b], 2, err);
        assert_non_null(k);
        assert_int_equal(kern_status(k), 0);
        assert_string_equal(kern_error(k), "");
        assert_int_equal(kern_check(k, err), 0);
        assert_int_equal(kern_fail(k, STATUS_ENODEV, "lost device %d", 7), STATUS_ENODEV);
        kern_fail(k, STATUS_ENOMEM, "a later failure"); /* the first cause stays */
        assert_int_equal(kern_status(k), STATUS_ENODEV);
        assert_non_null(strstr(kern_error(k), "lost device 7"));
        assert_non_null(strstr(kern_error(k), names[b]));
        err[0] = 0;
        assert_int_equal(kern_check(k, err), STATUS_ENODEV);
        assert_string_equal(err, kern_error(k));
        kern_destroy(&k);
    }
    /* cpu: attention scratch the allocator cannot give (T x T floats, T = 2^30): the op
     * computes nothing (its pointers are never touched) and the backend reports
     * STATUS_ENOMEM; it used to abort() */
    kern_t *k = kern_new("cpu", 1, err);
    assert_non_null(k);
    kern_attention_forward(k, NULL, NULL, NULL, 1, 1 << 30, 1, 2);
    assert_int_equal(kern_status(k), STATUS_ENOMEM);
    assert_non_null(strstr(kern_error(k), "out of memory"));
    kern_destroy(&k);
}

int main(int argc, char **argv)
{
    (void)argc;
    int failed_children = run_under_other_cores(argv);
    print_message("=== test_kernels, OpenBLAS core %s\n", openblas_get_corename());
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_memory),
        cmocka_unit_test(test_failures),
        cmocka_unit_test(test_cpu_matmul),
        cmocka_unit_test(test_cpu_embedding),
        cmocka_unit_test(test_cpu_rmsnorm),
        cmocka_unit_test(test_cpu_rope),
        cmocka_unit_test(test_cpu_attention),
        cmocka_unit_test(test_cpu_swiglu),
        cmocka_unit_test(test_cpu_crossentropy),
        cmocka_unit_test(test_cpu_elementwise),
        cmocka_unit_test(test_cpu_adamw),
        cmocka_unit_test(test_hash64),
        cmocka_unit_test(test_fd_matmul),
        cmocka_unit_test(test_fd_embedding),
        cmocka_unit_test(test_fd_rmsnorm),
        cmocka_unit_test(test_fd_rope),
        cmocka_unit_test(test_fd_attention),
        cmocka_unit_test(test_fd_swiglu),
        cmocka_unit_test(test_fd_crossentropy),
        cmocka_unit_test(test_accumulate),
        cmocka_unit_test(test_crossentropy_in_place),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_adamw_two_steps),
        cmocka_unit_test(test_rope_inverse),
        cmocka_unit_test(test_attention_lse),
        cmocka_unit_test(test_attention_causal),
        cmocka_unit_test(test_compress_dct),
        cmocka_unit_test(test_compress_topk),
        cmocka_unit_test(test_compress_demo_step),
        cmocka_unit_test(test_compress_apply_sign),
        cmocka_unit_test(test_compress_quantize),
    };
    int failed = cmocka_run_group_tests(tests, setup, teardown);
    return failed || failed_children ? 1 : 0;
}
