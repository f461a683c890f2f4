/* rng.c — SplitMix64 and xoshiro256** (public-domain algorithms by Vigna). */
#include "common/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(rng_t *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

uint64_t rng_mix(uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd6e8feb86659fd93ULL);
    return splitmix64(&x);
}

uint64_t rng_hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ULL;
    return h;
}

static inline uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(rng_t *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_below(rng_t *r, uint64_t n)
{
    /* Lemire's nearly divisionless method would be faster; modulo bias here is < 2^-40
     * for the sizes we draw (corpus offsets), and the simple form is easier to verify. */
    return rng_next(r) % n;
}

double rng_uniform(rng_t *r)
{
    return (double)(rng_next(r) >> 11) * 0x1.0p-53;
}

double rng_normal(rng_t *r)
{
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
