/* fuzz.h — what every fuzz target (tests/fuzz/fuzz_*.c) defines and may use.
 *
 * A target is one libFuzzer entry point, LLVMFuzzerTestOneInput, over one family of
 * decoders. The same file links either with libFuzzer (clang, -DSWARMTRAIN_FUZZ=ON: the
 * coverage-guided runs of tools/fuzz) or with standalone.c (any compiler: replays the
 * seed corpus, then random mutations of it, for a count or a time; what ctest -L fuzz
 * runs in the ASan build). Each target also writes its own seeds (fuzz_seeds), made by
 * the encoders, so the corpus in tests/fuzz/corpus/ can be regenerated
 * (`fuzz_X -write-seeds=DIR`).
 *
 * A target checks more than "no crash": decode -> encode -> decode agreement or another
 * cheap invariant, failing through FUZZ_CHECK (abort: a crash to either driver).
 *
 * Not for: unit tests of the decoders (tests/test_*.c). */
#ifndef SWARMTRAIN_FUZZ_H
#define SWARMTRAIN_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Called once with each seed the target's encoders make; name is a file name. */
typedef void (*fuzz_emit_fn)(void *ctx, const char *name, const uint8_t *data, size_t len);
void fuzz_seeds(fuzz_emit_fn emit, void *ctx);

/* Inputs a target's decoders accepted (the target counts them). The standalone driver
 * reports it and fails when no input at all was accepted: seeds gone stale. */
extern unsigned long long fuzz_accepted;

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz invariant failed: %s (%s:%d)\n", #cond, __FILE__, __LINE__);     \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A bounded little-endian reader over the input, for targets whose input starts with a few
 * parameters: reads past the end give zeros. */
typedef struct {
    const uint8_t *p;
    size_t n, at;
} fuzz_in_t;

static inline uint64_t fuzz_u(fuzz_in_t *in, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++, in->at++)
        if (in->at < in->n) v |= (uint64_t)in->p[in->at] << (8 * i);
    return v;
}

/* The rest of the input (pointer and length). */
static inline const uint8_t *fuzz_rest(const fuzz_in_t *in, size_t *len)
{
    *len = in->at < in->n ? in->n - in->at : 0;
    return in->p + (in->at < in->n ? in->at : in->n);
}

#endif
