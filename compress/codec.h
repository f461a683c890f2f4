/* codec.h — activation and gradient codecs: float tensors <-> self-describing bytes.
 *
 * One interface, seven codecs: raw f32, f16 and bf16 (round to nearest even), blockwise
 * int8 (absmax scaling, one f32 scale per block), blockwise int4 (two values per
 * byte, one f32 scale per block), lowrank (the tensor as M rows of its last dimension
 * C, sent as a rank-r product: an int8 basis of its top principal subspace and int4
 * coordinates; by default at most 0.1 byte per element; the block field is the rank) and
 * subspace (the same matrix as row gains, an ordered principal basis and coordinates of
 * 1..8 bits per component, filling a budget exactly: the block field is the budget in
 * thousandths of a byte per element, by default 100). The byte
 * format is specified in docs/codec-format.md: a 40-byte little-endian header (magic "STAC",
 * version, codec, shape, block, payload length, CRC-32C) followed by the payload.
 *
 * Promises:
 * - encode refuses non-finite input (STATUS_EINVAL): NaN never goes on the wire; so are
 *   values the codec cannot carry (|x| >= 65520 for f16, values that round to Inf in
 *   bf16, scales above the bounds in the format spec).
 * - decode trusts nothing: truncated, oversized, wrong magic/version/codec, shape or
 *   block inconsistent with the payload length, checksum mismatch, absurd element
 *   counts, non-finite or out-of-range values or scales, non-canonical padding: each
 *   gives a negative status and one line in err. It never reads outside [buf, buf+len)
 *   nor writes beyond out_cap_elems floats; on error *out is unspecified but only the
 *   first min(elems, out_cap_elems) floats were touched.
 * - Error bounds, per element x of a block with absmax a: f16 |e| <= 2^-11 |x| for
 *   normal results (|x| >= 2^-14), else <= 2^-25; bf16 |e| <= 2^-8 |x| for |x| >= FLT_MIN,
 *   else <= 2^-134; int8
 *   |e| <= a/254 and int4 |e| <= a/14 (plus a few float roundings: a relative 1e-5);
 *   lowrank has none (what lies outside the sent subspace is lost).
 *
 * Not for: the DeMo gradient messages (compress/demo.h), transport, or any allocation:
 * callers give the buffers (codec_encoded_size, codec_peek say how large); the one
 * exceptions are the lowrank and subspace encoders, which allocate and free their
 * O(C*C + C*r + M*r) scratch
 * (STATUS_ENOMEM when it cannot).
 */
#ifndef SWARMTRAIN_CODEC_H
#define SWARMTRAIN_CODEC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CODEC_F32 = 0,
    CODEC_F16 = 1,
    CODEC_BF16 = 2,
    CODEC_INT8 = 3,
    CODEC_INT4 = 4,
    CODEC_LOWRANK = 5,
    CODEC_SUBSPACE = 6,
} codec_id_t;

#define CODEC_COUNT         7
#define CODEC_VERSION       1
#define CODEC_HEADER_LEN    40
#define CODEC_MAX_DIMS      4
#define CODEC_DEFAULT_BLOCK 64
/* Largest block; int4 blocks must also be even. */
#define CODEC_MAX_BLOCK (1u << 20)
/* Largest rank of a lowrank message. */
#define CODEC_LOWRANK_MAX_RANK 65535u
/* The subspace codec's budget (block field) in thousandths of an octet per element: the
 * default (0.1 octet per element) and the largest. */
#define CODEC_SUBSPACE_DEFAULT_MILLI 100u
#define CODEC_SUBSPACE_MAX_MILLI     32000u
/* Largest element count a header may announce (2^40). */
#define CODEC_MAX_ELEMS (UINT64_C(1) << 40)

/* Codec parameters; a NULL pointer or block 0 means the default block. */
typedef struct {
    uint32_t block; /* int8/int4: elements per scale; lowrank: the rank wished (lowered to
                       what the shape allows; 0: the largest within 0.1 byte/element);
                       subspace: the budget in 1/1000 byte per element (0: 100);
                       ignored by the float codecs */
} codec_params_t;

/* What a valid header says (codec_peek). */
typedef struct {
    codec_id_t codec;
    int ndim;
    int64_t shape[CODEC_MAX_DIMS];
    uint64_t elems;       /* product of the shape */
    uint32_t block;       /* 0 for the float codecs */
    uint64_t payload_len; /* bytes after the header */
} codec_info_t;

/* The codec named "f32", "f16", "bf16", "int8", "int4", "lowrank" or "subspace" (ids are
 * >= 0), else
 * STATUS_ENOTFOUND. */
int codec_by_name(const char *name);
/* The name of codec id, or NULL when id is not a codec. */
const char *codec_name(int id);

/* The exact size in bytes of the encoding of a tensor of this shape, header included;
 * 0 when the arguments are invalid. Can't fail otherwise. */
size_t codec_encoded_size(codec_id_t codec, const codec_params_t *params, const int64_t *shape,
                          int ndim);

/* The block field a message of this shape gets with these parameters: the int8/int4
 * block, lowrank's rank (a wish clamped to what the shape allows; 0 or NULL params: the
 * largest within 0.1 byte per element), subspace's budget (0 or NULL: 100), 0 for the float
 * codecs or invalid arguments. */
uint32_t codec_block_for(codec_id_t codec, const codec_params_t *params, const int64_t *shape,
                         int ndim);

/* Encodes x (product of shape elements, 1 <= ndim <= CODEC_MAX_DIMS) into out[0, cap).
 * On success returns 0 and sets *written. On failure returns a negative status
 * (STATUS_EINVAL for bad arguments, too small a cap or non-finite / unrepresentable
 * input) with a message in err; out is then unspecified. */
int codec_encode(codec_id_t codec, const codec_params_t *params, const float *x,
                 const int64_t *shape, int ndim, uint8_t *out, size_t cap, size_t *written,
                 char *err) __attribute__((warn_unused_result));

/* Checks the header and the lengths of buf (not the checksum nor the values) and fills
 * *info; to size the output before codec_decode. Negative status + err when malformed. */
int codec_peek(const uint8_t *buf, size_t len, codec_info_t *info, char *err)
    __attribute__((warn_unused_result));

/* Decodes buf[0, len) into out (at most out_cap_elems floats); on success returns 0 and
 * sets shape_out[0, *ndim_out) (shape_out holds CODEC_MAX_DIMS; either may be NULL).
 * Every malformation listed above -> negative status and err; STATUS_EINVAL when the
 * output is too small; STATUS_EVERSION for another format version. */
int codec_decode(const uint8_t *buf, size_t len, float *out, size_t out_cap_elems,
                 int64_t *shape_out, int *ndim_out, char *err) __attribute__((warn_unused_result));

/* --- payloads made elsewhere ---------------------------------------------------------
 * A device backend quantizes where the tensor lives (kernels.h quantize) and brings back
 * only the payload; these two calls put the format's header around it and take it off
 * again, with the same checks as codec_encode and codec_decode, so that the header and
 * CRC code exists once. */

/* buf[CODEC_HEADER_LEN, len) holds the payload of a tensor of this shape in this codec
 * (len must equal codec_encoded_size); checks it as a decoder would (every scale finite,
 * >= +0 and within bounds, no int8 -128, no int4 nibble 0 and a zero pad nibble, finite
 * float values) and writes the header with its CRC into buf[0, CODEC_HEADER_LEN).
 * 0, or STATUS_EINVAL + err for bad arguments or a payload that would not decode (a
 * non-finite input shows as a NaN scale; buf is then unspecified). */
int codec_seal(codec_id_t codec, const codec_params_t *params, const int64_t *shape, int ndim,
               uint8_t *buf, size_t len, char *err) __attribute__((warn_unused_result));

/* Validates buf[0, len) exactly as codec_decode does (header, lengths, checksum, every
 * value rule) without converting: fills *info (may be NULL) and points *payload at the
 * payload_len bytes after the header. Negative status + err when malformed. */
int codec_open(const uint8_t *buf, size_t len, codec_info_t *info, const uint8_t **payload,
               char *err) __attribute__((warn_unused_result));

/* CRC-32C (Castagnoli) of buf[0, n) continuing from crc (start with 0). Hardware
 * instruction when built with SSE4.2, a table otherwise; same result either way. */
uint32_t codec_crc32c(uint32_t crc, const void *buf, size_t n);

/* Scalar conversions the codecs use, exposed for tests and other modules. f16/bf16 from
 * f32 round to nearest even; non-finite inputs map to the matching Inf/NaN codes. */
uint16_t codec_f32_to_f16(float f);
float codec_f16_to_f32(uint16_t h);
uint16_t codec_f32_to_bf16(float f);
float codec_bf16_to_f32(uint16_t h);

#endif
