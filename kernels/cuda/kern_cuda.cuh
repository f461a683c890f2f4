/* kern_cuda.cuh — private to the CUDA backend: its context, the error-recording check
 * macros, scratch memory, and the entry points shared by its .cu files.
 * Not for: anything outside kernels/cuda/ (callers use kernels.h and kern_cuda.h). */
#ifndef SWARMTRAIN_KERN_CUDA_CUH
#define SWARMTRAIN_KERN_CUDA_CUH

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stddef.h>

extern "C" {
#include "kernels/kern_impl.h"
}
#include "kernels/cuda/kern_cuda.h"

/* Same size as STATUS_ERR_LEN (common/status.h); this library does not link common/. */
#define KC_ERR_LEN 256

typedef struct kc_ctx {
    int device;
    int sm_count;
    int tf32;              /* matmul in TF32 tensor-core math */
    char name[KC_ERR_LEN]; /* "cuda:<device name>", what k->name points to */
    cudaStream_t stream;   /* every op is queued here, in call order */
    cublasHandle_t blas;
    void *scratch; /* device scratch for ops that need it (one op at a time) */
    size_t scratch_bytes;
    double *sumsq_dev;            /* one double: the device result of sumsq */
    unsigned long long *hash_dev; /* the device result of hash64 */
    int failed;                   /* set by the first recorded failure */
    char err[KC_ERR_LEN];         /* that failure, one line */
} kc_ctx;

/* Records the first failure in ctx->err and prints it once on stderr; later failures
 * are dropped so that the first cause stays visible. Returns 0. */
int kc_fail(kc_ctx *c, const char *file, int line, const char *call, const char *what, int code);

static inline int kc_cuda_ok(kc_ctx *c, cudaError_t e, const char *file, int line, const char *call)
{
    return e == cudaSuccess ? 1 : kc_fail(c, file, line, call, cudaGetErrorString(e), (int)e);
}

static inline int kc_blas_ok(kc_ctx *c, cublasStatus_t s, const char *file, int line,
                             const char *call)
{
    return s == CUBLAS_STATUS_SUCCESS
               ? 1
               : kc_fail(c, file, line, call, cublasGetStatusString(s), (int)s);
}

/* Check a cudaError_t / cublasStatus_t expression, recording a failure; 1 on success,
 * 0 on failure, so callers may branch on them. KC_LAUNCHED goes after each kernel
 * launch, where a bad launch configuration shows up. */
#define KC_CUDA(c, call)       kc_cuda_ok((c), (call), __FILE__, __LINE__, #call)
#define KC_BLAS(c, call)       kc_blas_ok((c), (call), __FILE__, __LINE__, #call)
#define KC_LAUNCHED(c, kernel) kc_cuda_ok((c), cudaGetLastError(), __FILE__, __LINE__, kernel)

static inline kc_ctx *kc_of(kern_t *k)
{
    return (kc_ctx *)k->ctx;
}

/* Device scratch of at least `bytes`, valid until the next call (grows, never shrinks).
 * NULL (failure recorded) when it cannot be had. Only for the backend's own ops, which
 * run on ctx->stream in order, so one buffer serves them all. */
void *kc_scratch(kc_ctx *c, size_t bytes);

/* Blocks of `threads` to cover n items, capped for grid-stride loops. */
static inline unsigned kc_blocks(size_t n, unsigned threads, unsigned cap)
{
    size_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return (unsigned)(b < cap ? b : cap);
}

/* --- kern_cuda_attn.cu ---------------------------------------------------------------- */

/* Sets the kernels' shared-memory limits; returns 0 and records the failure otherwise. */
int kern_cuda_attention_init(kc_ctx *c);
void kern_cuda_attention_forward(kern_t *k, float *out, float *lse, const float *qkv, int B, int T,
                                 int NH, int HS);
void kern_cuda_attention_backward(kern_t *k, float *dqkv, const float *dout, const float *qkv,
                                  const float *out, const float *lse, int B, int T, int NH, int HS);

/* --- kern_cuda_compress.cu ------------------------------------------------------------ */

/* Fills k's compression ops (dct_forward ... dequantize). Can't fail. */
void kern_cuda_compress_init(kern_t *k);

#endif
