/* kern_cuda.h — the few things the CUDA backend offers beyond the kernels.h table, for
 * tests and tools that know they hold a "cuda" kern_t.
 * Not for: ops (kernels.h is the only op interface); model code never needs this file. */
#ifndef SWARMTRAIN_KERN_CUDA_H
#define SWARMTRAIN_KERN_CUDA_H

#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The first CUDA or cuBLAS failure seen by any op of this backend, as one line
 * ("file:line: call: text (code)"), or NULL while none has happened. Ops cannot return
 * an error, so a failure is recorded here, printed once on stderr, and the backend's
 * results from then on are not to be trusted. k must be a "cuda" backend. Callers that
 * hold any backend read the same failure through kern_status / kern_error (kernels.h). */
const char *kern_cuda_last_error(kern_t *k);

/* 1 when matmuls use TF32 tensor cores (the default; SWARMTRAIN_CUDA_TF32=0 turns it
 * off at kern_cuda_new), 0 when they are plain fp32. */
int kern_cuda_tf32(kern_t *k);

#ifdef __cplusplus
}
#endif

#endif
