/* kern.c — choosing and destroying a backend, the kern_* functions that call through its
 * table, its failure record, and the host-side helpers of some ops (the rotary frequency
 * table, quantize payload sizes, sign packing for apply_sign).
 * Not for: any op (kern_ref.c, kern_cpu.c, cuda/). */
#include "kernels/kern_impl.h"
#include "common/log.h"
#include "common/status.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

kern_t *kern_new(const char *name, int threads, char *err)
{
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    if (!name || !strcmp(name, "cpu")) return kern_cpu_new(threads, err);
    if (!strcmp(name, "ref")) return kern_ref_new(err);
    if (!strcmp(name, "cuda") || !strcmp(name, "auto")) {
#ifdef SWARMTRAIN_HAVE_CUDA
        char cerr[STATUS_ERR_LEN] = "";
        kern_t *k = kern_cuda_new(cerr);
        if (k || !strcmp(name, "cuda")) {
            if (!k)
                status_set(err, STATUS_ENODEV, "cuda: %s", cerr);
            else if (!strcmp(name, "auto"))
                log_info("device: auto took cuda (%s)", kern_name(k));
            return k;
        }
        log_info("device: auto found no usable GPU (%s); using cpu with %d threads", cerr, threads);
#else
        if (!strcmp(name, "cuda")) {
            status_set(err, STATUS_ENODEV,
                       "cuda: this build has no CUDA backend (nvcc was not found at build time)");
            return NULL;
        }
        log_info("device: auto: built without CUDA; using cpu with %d threads", threads);
#endif
        return kern_cpu_new(threads, err);
    }
    status_set(err, STATUS_EINVAL, "unknown device '%s' (expected auto, cpu, cuda or ref)", name);
    return NULL;
}

void kern_destroy(kern_t **k)
{
    if (!k || !*k) return;
    if ((*k)->release) (*k)->release(*k);
    *k = NULL;
}

/* ---- the backend and its failures ---------------------------------------------------- */

const char *kern_name(const kern_t *k)
{
    return k->name;
}

int kern_threads(const kern_t *k)
{
    return k->threads;
}

int kern_on_device(const kern_t *k)
{
    return k->on_device;
}

int kern_fail(kern_t *k, int status, const char *fmt, ...)
{
    if (k->status) return status;
    char why[200]; /* and the name before it */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    snprintf(k->err, sizeof k->err, "%s: %s", k->name, why);
    k->status = status;
    log_error("kern %s", k->err);
    return status;
}

int kern_status(kern_t *k)
{
    if (!k->status && k->failure) {
        const char *why = k->failure(k); /* logged by the backend when it happened */
        if (why) {
            snprintf(k->err, sizeof k->err, "%s: %s", k->name, why);
            k->status = STATUS_ENODEV;
        }
    }
    return k->status;
}

const char *kern_error(kern_t *k)
{
    return kern_status(k) ? k->err : "";
}

int kern_check(kern_t *k, char *err)
{
    int rc = kern_status(k);
    return rc ? status_set(err, rc, "%s", k->err) : 0;
}

/* ---- ops: through the backend's table --------------------------------------------------- */

void *kern_alloc(kern_t *k, size_t bytes)
{
    return k->alloc(k, bytes);
}

void kern_free(kern_t *k, void *p)
{
    k->free(k, p);
}

void kern_upload(kern_t *k, void *dst, const void *host_src, size_t bytes)
{
    k->upload(k, dst, host_src, bytes);
}

void kern_download(kern_t *k, void *host_dst, const void *src, size_t bytes)
{
    k->download(k, host_dst, src, bytes);
}

void kern_copy(kern_t *k, void *dst, const void *src, size_t bytes)
{
    k->copy(k, dst, src, bytes);
}

void kern_zero(kern_t *k, void *p, size_t bytes)
{
    k->zero(k, p, bytes);
}

void kern_sync(kern_t *k)
{
    k->sync(k);
}

void kern_matmul_forward(kern_t *k, float *out, const float *inp, const float *w, int N, int C,
                         int OC)
{
    k->matmul_forward(k, out, inp, w, N, C, OC);
}

void kern_matmul_backward(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                          const float *w, int N, int C, int OC)
{
    k->matmul_backward(k, dinp, dw, dout, inp, w, N, C, OC);
}

void kern_embedding_forward(kern_t *k, float *out, const int32_t *tokens, const float *wte, int N,
                            int C)
{
    k->embedding_forward(k, out, tokens, wte, N, C);
}

void kern_embedding_backward(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                             int N, int C)
{
    k->embedding_backward(k, dwte, dout, tokens, N, C);
}

void kern_rmsnorm_forward(kern_t *k, float *out, float *rstd, const float *inp, const float *w,
                          int N, int C, float eps)
{
    k->rmsnorm_forward(k, out, rstd, inp, w, N, C, eps);
}

void kern_rmsnorm_backward(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                           const float *w, const float *rstd, int N, int C)
{
    k->rmsnorm_backward(k, dinp, dw, dout, inp, w, rstd, N, C);
}

void kern_rope_forward(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS)
{
    k->rope_forward(k, qkv, freqs, B, T, NH, HS);
}

void kern_rope_backward(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH, int HS)
{
    k->rope_backward(k, dqkv, freqs, B, T, NH, HS);
}

void kern_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                            int NH, int HS)
{
    k->attention_forward(k, out, lse, qkv, B, T, NH, HS);
}

void kern_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                             const float *out, const float *lse, int B, int T, int NH, int HS)
{
    k->attention_backward(k, dqkv, dout, qkv, out, lse, B, T, NH, HS);
}

void kern_swiglu_forward(kern_t *k, float *out, const float *h, int N, int F)
{
    k->swiglu_forward(k, out, h, N, F);
}

void kern_swiglu_backward(kern_t *k, float *dh, const float *dout, const float *h, int N, int F)
{
    k->swiglu_backward(k, dh, dout, h, N, F);
}

void kern_crossentropy_forward(kern_t *k, float *losses, const float *logits,
                               const int32_t *targets, int N, int V)
{
    k->crossentropy_forward(k, losses, logits, targets, N, V);
}

void kern_crossentropy_backward(kern_t *k, float *dlogits, const float *logits,
                                const int32_t *targets, float dloss, int N, int V)
{
    k->crossentropy_backward(k, dlogits, logits, targets, dloss, N, V);
}

void kern_add(kern_t *k, float *out, const float *a, const float *b, size_t n)
{
    k->add(k, out, a, b, n);
}

void kern_axpy(kern_t *k, float *y, float alpha, const float *x, size_t n)
{
    k->axpy(k, y, alpha, x, n);
}

void kern_scale(kern_t *k, float *x, float alpha, size_t n)
{
    k->scale(k, x, alpha, n);
}

double kern_sumsq(kern_t *k, const float *x, size_t n)
{
    return k->sumsq(k, x, n);
}

uint64_t kern_hash64(kern_t *k, const float *x, size_t n)
{
    return k->hash64(k, x, n);
}

void kern_adamw(kern_t *k, float *p, const float *g, float *m, float *v, size_t n, float lr,
                float beta1, float beta2, float eps, float wd, int t)
{
    k->adamw(k, p, g, m, v, n, lr, beta1, beta2, eps, wd, t);
}

void kern_dct_forward(kern_t *k, float *coef, const float *x, const float *br, const float *bc,
                      int64_t rows, int64_t cols, int cr, int cc)
{
    k->dct_forward(k, coef, x, br, bc, rows, cols, cr, cc);
}

void kern_dct_inverse(kern_t *k, float *x, const float *coef, const float *br, const float *bc,
                      int64_t rows, int64_t cols, int cr, int cc)
{
    k->dct_inverse(k, x, coef, br, bc, rows, cols, cr, cc);
}

void kern_topk(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn, int kk)
{
    k->topk(k, idx, val, x, tiles, tn, kk);
}

void kern_scatter(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles, int tn,
                  int kk, int bf16)
{
    k->scatter(k, x, idx, val, tiles, tn, kk, bf16);
}

void kern_apply_sign(kern_t *k, float *p, const uint8_t *signs, float lr, size_t n)
{
    k->apply_sign(k, p, signs, lr, n);
}

void kern_quantize(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits, uint32_t block)
{
    k->quantize(k, payload, x, n, bits, block);
}

void kern_dequantize(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                     uint32_t block)
{
    k->dequantize(k, x, payload, n, bits, block);
}

/* ---- host-side helpers ------------------------------------------------------------------ */

void kern_rope_freqs(float *freqs, int T, int HS, float theta)
{
    int half = HS / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double f = pow((double)theta, -2.0 * i / HS);
            double a = (double)t * f;
            freqs[(t * half + i) * 2 + 0] = (float)cos(a);
            freqs[(t * half + i) * 2 + 1] = (float)sin(a);
        }
}

/* Zeroed, 64-byte aligned, from calloc: a large block comes from fresh pages that are zero
 * without being touched, so a stage's memory costs what it uses when it uses it (zeroing
 * by hand made a `small` joiner's 2 GB of activation slots 6-9 s of its set-up before its
 * first state request, on a loaded 2-core machine). The block calloc returned is kept just
 * before the aligned address, for kern_host_free. */
void *kern_host_alloc(kern_t *k, size_t bytes)
{
    (void)k;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (rounded > SIZE_MAX - 64) return NULL;
    uint8_t *raw = calloc(1, rounded + 64); /* at least 16-aligned: 16-64 octets before */
    if (!raw) return NULL;
    uint8_t *p = (uint8_t *)(((uintptr_t)raw + 64) & ~(uintptr_t)63);
    memcpy(p - sizeof raw, &raw, sizeof raw);
    return p;
}

void kern_host_free(kern_t *k, void *p)
{
    (void)k;
    if (!p) return;
    uint8_t *raw;
    memcpy(&raw, (uint8_t *)p - sizeof raw, sizeof raw);
    free(raw);
}

size_t kern_quant_bytes(size_t n, int bits, uint32_t block)
{
    size_t nb = (n + block - 1) / block;
    return 4 * nb + (bits == 4 ? (n + 1) / 2 : n);
}

void kern_sign_pack(uint8_t *signs, const float *q, size_t n)
{
    memset(signs, 0, kern_sign_bytes(n));
    for (size_t i = 0; i < n; i++) {
        unsigned code = q[i] > 0.0f ? 1u : q[i] < 0.0f ? 2u : 0u;
        signs[i >> 2] |= (uint8_t)(code << (2 * (i & 3)));
    }
}
