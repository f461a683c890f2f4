/* kern_impl.h — private to kernels/: the table of function pointers every backend fills
 * (kern_ref.c, kern_cpu.c, cuda/), and the failure record behind kern_status.
 * Not for: callers of ops (kernels.h's kern_* functions are the interface; the table's
 * order and fields may change with any backend). */
#ifndef SWARMTRAIN_KERN_IMPL_H
#define SWARMTRAIN_KERN_IMPL_H

#include "kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

/* Each op as documented in kernels.h under its kern_ name. */
struct kern {
    const char *name; /* "ref", "cpu", "cuda" */
    int threads;      /* host threads the backend may use (cpu); 1 for ref */
    int on_device;    /* 1 when pointers are device memory (host cannot dereference) */
    void *ctx;        /* backend-private state */
    /* the first failure (kern_fail), 0 while none: read by kern_status / kern_error */
    int status;
    char err[256];
    /* a backend that records failures itself (cuda): its first one, or NULL; may be NULL */
    const char *(*failure)(kern_t *k);

    void *(*alloc)(kern_t *k, size_t bytes);
    void (*free)(kern_t *k, void *p);
    void (*upload)(kern_t *k, void *dst, const void *host_src, size_t bytes);
    void (*download)(kern_t *k, void *host_dst, const void *src, size_t bytes);
    void (*copy)(kern_t *k, void *dst, const void *src, size_t bytes);
    void (*zero)(kern_t *k, void *p, size_t bytes);
    void (*sync)(kern_t *k);
    void (*release)(kern_t *k);
    void (*matmul_forward)(kern_t *k, float *out, const float *inp, const float *w, int N, int C,
                           int OC);
    void (*matmul_backward)(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                            const float *w, int N, int C, int OC);
    void (*embedding_forward)(kern_t *k, float *out, const int32_t *tokens, const float *wte, int N,
                              int C);
    void (*embedding_backward)(kern_t *k, float *dwte, const float *dout, const int32_t *tokens,
                               int N, int C);
    void (*rmsnorm_forward)(kern_t *k, float *out, float *rstd, const float *inp, const float *w,
                            int N, int C, float eps);
    void (*rmsnorm_backward)(kern_t *k, float *dinp, float *dw, const float *dout, const float *inp,
                             const float *w, const float *rstd, int N, int C);
    void (*rope_forward)(kern_t *k, float *qkv, const float *freqs, int B, int T, int NH, int HS);
    void (*rope_backward)(kern_t *k, float *dqkv, const float *freqs, int B, int T, int NH, int HS);
    void (*attention_forward)(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                              int NH, int HS);
    void (*attention_backward)(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                               const float *out, const float *lse, int B, int T, int NH, int HS);
    void (*swiglu_forward)(kern_t *k, float *out, const float *h, int N, int F);
    void (*swiglu_backward)(kern_t *k, float *dh, const float *dout, const float *h, int N, int F);
    void (*crossentropy_forward)(kern_t *k, float *losses, const float *logits,
                                 const int32_t *targets, int N, int V);
    void (*crossentropy_backward)(kern_t *k, float *dlogits, const float *logits,
                                  const int32_t *targets, float dloss, int N, int V);
    void (*add)(kern_t *k, float *out, const float *a, const float *b, size_t n);
    void (*axpy)(kern_t *k, float *y, float alpha, const float *x, size_t n);
    void (*scale)(kern_t *k, float *x, float alpha, size_t n);
    double (*sumsq)(kern_t *k, const float *x, size_t n);
    uint64_t (*hash64)(kern_t *k, const float *x, size_t n);
    void (*adamw)(kern_t *k, float *p, const float *g, float *m, float *v, size_t n, float lr,
                  float beta1, float beta2, float eps, float wd, int t);
    void (*dct_forward)(kern_t *k, float *coef, const float *x, const float *br, const float *bc,
                        int64_t rows, int64_t cols, int cr, int cc);
    void (*dct_inverse)(kern_t *k, float *x, const float *coef, const float *br, const float *bc,
                        int64_t rows, int64_t cols, int cr, int cc);
    void (*topk)(kern_t *k, uint16_t *idx, float *val, const float *x, int64_t tiles, int tn,
                 int kk);
    void (*scatter)(kern_t *k, float *x, const uint16_t *idx, const float *val, int64_t tiles,
                    int tn, int kk, int bf16);
    void (*apply_sign)(kern_t *k, float *p, const uint8_t *signs, float lr, size_t n);
    void (*quantize)(kern_t *k, uint8_t *payload, const float *x, size_t n, int bits,
                     uint32_t block);
    void (*dequantize)(kern_t *k, float *x, const uint8_t *payload, size_t n, int bits,
                       uint32_t block);
};

/* Records a failure of k (the first one only: later ones would hide its cause) with a
 * status and one line, and logs it once. Returns status. For backends; can't fail. */
int kern_fail(kern_t *k, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
