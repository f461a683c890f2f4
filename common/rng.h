/* rng.h — small deterministic random numbers (SplitMix64 seeding xoshiro256**).
 * Every replica that seeds the same way draws the same numbers on every machine.
 * Not for: anything secret (use libsodium). */
#ifndef SWARMTRAIN_RNG_H
#define SWARMTRAIN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng_t;

/* Seeds from a 64-bit value; the state depends on nothing else. */
void rng_seed(rng_t *r, uint64_t seed);

/* Mixes several 64-bit words into one seed (e.g. run seed, layer, tensor, step). */
uint64_t rng_mix(uint64_t a, uint64_t b);

/* 64-bit FNV-1a of a string, to key seeds by tensor name. */
uint64_t rng_hash_str(const char *s);

uint64_t rng_next(rng_t *r);
/* Uniform in [0, n); n > 0. */
uint64_t rng_below(rng_t *r, uint64_t n);
/* Uniform in [0, 1). */
double rng_uniform(rng_t *r);
/* Standard normal (Box-Muller, no cached second value so the stream is simple). */
double rng_normal(rng_t *r);

#endif
