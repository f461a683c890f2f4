/* codec_internal.h — the little-endian helpers of compress/ under their older names.
 * They are common/le.h's (the one set for every module); these aliases keep codec.c and
 * codecs written against them compiling. New code includes common/le.h and calls le_*.
 * Private to compress/: not an interface for other modules. */
#ifndef SWARMTRAIN_CODEC_INTERNAL_H
#define SWARMTRAIN_CODEC_INTERNAL_H

#include "common/le.h"

#define codec_put_u16  le_put_u16
#define codec_put_u32  le_put_u32
#define codec_put_u64  le_put_u64
#define codec_put_f32  le_put_f32
#define codec_get_u16  le_get_u16
#define codec_get_u32  le_get_u32
#define codec_get_u64  le_get_u64
#define codec_get_f32  le_get_f32
#define codec_f32_bits le_f32_bits
#define codec_bits_f32 le_bits_f32

/* --- the lowrank codec (lowrank.c); the matrix view is M rows of C (the last dimension),
 * r the rank; callers have checked the shape, r and the payload length --------------- */

/* Payload bytes of a rank-r message of M x C. */
uint64_t codec_lowrank_payload_len(uint64_t m, uint64_t c, uint32_t r);
/* The rank a message of this (valid) shape gets for a wished rank (0: the largest within
 * 0.1 byte per element, at least 1), clamped to 1..min(M, C, CODEC_LOWRANK_MAX_RANK). */
uint32_t codec_lowrank_rank(const int64_t *shape, int ndim, uint32_t want);
/* Encodes finite x into the zeroed payload p. 0, STATUS_ENOMEM, or STATUS_EINVAL for
 * values too large to scale. */
int codec_lowrank_encode(uint8_t *p, const float *x, const int64_t *shape, int ndim, uint32_t r,
                         char *err);
/* Every value rule of the payload: 0 or STATUS_EMALFORMED + err. */
int codec_lowrank_check(const uint8_t *p, uint64_t m, uint64_t c, uint32_t r, char *err);
/* Decodes a checked payload into out[0, M*C). Can't fail. */
void codec_lowrank_decode(float *out, const uint8_t *p, uint64_t m, uint64_t c, uint32_t r);

/* The encoder's fixed pseudo-random start (SplitMix64 from *s, values in [-0.5, 0.5)) and
 * its orthonormalization of the r columns of q (C x r, row-major: modified Gram-Schmidt
 * twice, a vanishing column redrawn); shared with subspace.c. */
double codec_lr_rand(uint64_t *s);
void codec_lr_orth(double *q, uint64_t c, uint32_t r, uint64_t *seed);
/* The Gram matrix X^T X (c x c, into g, zeroed by the caller) of at most max_rows rows of
 * x (m rows of c, evenly strided), in double, both triangles; returns its largest
 * diagonal entry (0: X is zero). lowrank.c and subspace.c. */
double codec_lr_gram(const float *x, uint64_t m, uint64_t c, uint64_t max_rows, double *g);
/* The top r-dimensional invariant subspace of g (c x c, scaled to at most 1) by `iters`
 * subspace iterations from the fixed start, into q (c x r, orthonormal columns); z is
 * c x r scratch. With `run` 0 (a zero G) only the orthonormal start. */
void codec_lr_iterate(const double *g, uint64_t c, uint32_t r, int iters, int run, double *q,
                      double *z);

/* --- the subspace codec (subspace.c); the block field is the budget in thousandths of an
 * octet per element (milli), the payload fills floor(n * milli / 1000) octets with the
 * header ---------------------------------------------------------------------------- */

/* Payload octets of a message of n elements at this budget (0 when the header alone
 * exceeds it). */
uint64_t codec_subspace_payload_len(uint64_t n, uint32_t milli);
/* 1 when milli is in 1..CODEC_SUBSPACE_MAX_MILLI and leaves room for one component. */
int codec_subspace_block_ok(const int64_t *shape, int ndim, uint32_t milli);
/* Encodes finite x into the zeroed payload p of plen octets. 0, STATUS_ENOMEM, or
 * STATUS_EINVAL for values too large to scale. */
int codec_subspace_encode(uint8_t *p, uint64_t plen, const float *x, const int64_t *shape, int ndim,
                          char *err);
/* Every value rule of the payload: 0 or STATUS_EMALFORMED + err. */
int codec_subspace_check(const uint8_t *p, uint64_t plen, uint64_t m, uint64_t c, char *err);
/* Decodes a checked payload into out[0, M*C). Can't fail. */
void codec_subspace_decode(float *out, const uint8_t *p, uint64_t m, uint64_t c);

#endif
