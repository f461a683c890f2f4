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

#endif
