/* kern.c — choosing and destroying a backend, and the host-side helpers of some ops (the
 * rotary frequency table, quantize payload sizes, sign packing for apply_sign).
 * Not for: any op (kern_ref.c, kern_cpu.c, cuda/). */
#include "kernels/kernels.h"
#include "common/log.h"
#include "common/status.h"

#include <math.h>
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
                log_info("device: auto took cuda (%s)", k->name);
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

void *kern_host_alloc(kern_t *k, size_t bytes)
{
    (void)k;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    void *p = aligned_alloc(64, rounded);
    if (p) memset(p, 0, rounded);
    return p;
}

void kern_host_free(kern_t *k, void *p)
{
    (void)k;
    free(p);
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
