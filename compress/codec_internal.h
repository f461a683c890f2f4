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

#endif
