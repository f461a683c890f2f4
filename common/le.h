/* le.h — the one set of little-endian byte helpers: every octet-exact format of
 * swarmtrain (wire headers, member tables, STAC tensors, DeMo messages, store hashes,
 * safetensors) reads and writes its integers and floats through these, whatever the
 * host's byte order.
 *
 * le_put_* write exactly sizeof(type) octets at p; le_get_* read them. le_put_uint and
 * le_get_uint do the same for a width of 1..8 octets (a u24 field, a bounded writer that
 * takes the width as an argument). Floats travel as the IEEE-754 bits of binary32.
 * No bounds are checked here: callers check lengths first (a decoder never trusts one).
 *
 * Not for: buffers of many values in native order (the stage state, targets: those
 * are copied as they are, docs/protocol.md 17), hashing, or bounded readers (swarm/msg.c
 * wraps these in its own).
 */
#ifndef SWARMTRAIN_LE_H
#define SWARMTRAIN_LE_H

#include <stdint.h>
#include <string.h>

static inline void le_put_uint(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static inline uint64_t le_get_uint(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static inline void le_put_u16(uint8_t *p, uint16_t v)
{
    le_put_uint(p, v, 2);
}

static inline void le_put_u32(uint8_t *p, uint32_t v)
{
    le_put_uint(p, v, 4);
}

static inline void le_put_u64(uint8_t *p, uint64_t v)
{
    le_put_uint(p, v, 8);
}

static inline uint16_t le_get_u16(const uint8_t *p)
{
    return (uint16_t)le_get_uint(p, 2);
}

static inline uint32_t le_get_u32(const uint8_t *p)
{
    return (uint32_t)le_get_uint(p, 4);
}

static inline uint64_t le_get_u64(const uint8_t *p)
{
    return le_get_uint(p, 8);
}

/* The bits of a float as a u32, and back (no conversion). */
static inline uint32_t le_f32_bits(float f)
{
    uint32_t v;
    memcpy(&v, &f, 4);
    return v;
}

static inline float le_bits_f32(uint32_t v)
{
    float f;
    memcpy(&f, &v, 4);
    return f;
}

static inline void le_put_f32(uint8_t *p, float f)
{
    le_put_u32(p, le_f32_bits(f));
}

static inline float le_get_f32(const uint8_t *p)
{
    return le_bits_f32(le_get_u32(p));
}

#endif
