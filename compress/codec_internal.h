/* codec_internal.h — little-endian byte helpers shared by the compress/ encoders.
 * Private to compress/: not an interface for other modules. */
#ifndef SWARMTRAIN_CODEC_INTERNAL_H
#define SWARMTRAIN_CODEC_INTERNAL_H

#include <stdint.h>
#include <string.h>

static inline void codec_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static inline void codec_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void codec_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void codec_put_f32(uint8_t *p, float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    codec_put_u32(p, v);
}
static inline uint16_t codec_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t codec_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t codec_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static inline float codec_get_f32(const uint8_t *p)
{
    uint32_t v = codec_get_u32(p);
    float f;
    memcpy(&f, &v, 4);
    return f;
}
static inline uint32_t codec_f32_bits(float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    return v;
}
static inline float codec_bits_f32(uint32_t v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}

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

#endif
