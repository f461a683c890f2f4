/* codec.c — the activation codecs (f32, f16, bf16, blockwise int8 and int4), their
 * header, CRC-32C and the never-trust decoder. Format: docs/codec-format.md.
 * Not for: DeMo messages (demo.c), transport, allocation of tensors. */
/* These loops must vectorize even in -O2 builds (GCC's -O2 cost model skips loops
 * with unknown trip counts; -O3 is 4-5x faster here). Vectorizing them changes no
 * result: no reductions are reordered and no float contraction is enabled. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__OPTIMIZE__)
#pragma GCC optimize("O3")
#endif
#include "compress/codec.h"
#include "compress/codec_internal.h"
#include "common/status.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "swarmtrain codecs assume a little-endian host (payloads are copied as is)"
#endif

static const char codec_magic[4] = {'S', 'T', 'A', 'C'};
static const char *const codec_names[CODEC_COUNT] = {"f32",  "f16",     "bf16",    "int8",
                                                     "int4", "lowrank", "subspace"};

/* Largest scale a block may carry: q * scale stays finite for every valid q. */
#define INT8_MAX_SCALE (FLT_MAX / 128.0f)
#define INT4_MAX_SCALE (FLT_MAX / 8.0f)

static const uint32_t crc32c_table[256] = {
    0x00000000u, 0xf26b8303u, 0xe13b70f7u, 0x1350f3f4u, 0xc79a971fu, 0x35f1141cu, 0x26a1e7e8u,
    0xd4ca64ebu, 0x8ad958cfu, 0x78b2dbccu, 0x6be22838u, 0x9989ab3bu, 0x4d43cfd0u, 0xbf284cd3u,
    0xac78bf27u, 0x5e133c24u, 0x105ec76fu, 0xe235446cu, 0xf165b798u, 0x030e349bu, 0xd7c45070u,
    0x25afd373u, 0x36ff2087u, 0xc494a384u, 0x9a879fa0u, 0x68ec1ca3u, 0x7bbcef57u, 0x89d76c54u,
    0x5d1d08bfu, 0xaf768bbcu, 0xbc267848u, 0x4e4dfb4bu, 0x20bd8edeu, 0xd2d60dddu, 0xc186fe29u,
    0x33ed7d2au, 0xe72719c1u, 0x154c9ac2u, 0x061c6936u, 0xf477ea35u, 0xaa64d611u, 0x580f5512u,
    0x4b5fa6e6u, 0xb93425e5u, 0x6dfe410eu, 0x9f95c20du, 0x8cc531f9u, 0x7eaeb2fau, 0x30e349b1u,
    0xc288cab2u, 0xd1d83946u, 0x23b3ba45u, 0xf779deaeu, 0x05125dadu, 0x1642ae59u, 0xe4292d5au,
    0xba3a117eu, 0x4851927du, 0x5b016189u, 0xa96ae28au, 0x7da08661u, 0x8fcb0562u, 0x9c9bf696u,
    0x6ef07595u, 0x417b1dbcu, 0xb3109ebfu, 0xa0406d4bu, 0x522bee48u, 0x86e18aa3u, 0x748a09a0u,
    0x67dafa54u, 0x95b17957u, 0xcba24573u, 0x39c9c670u, 0x2a993584u, 0xd8f2b687u, 0x0c38d26cu,
    0xfe53516fu, 0xed03a29bu, 0x1f682198u, 0x5125dad3u, 0xa34e59d0u, 0xb01eaa24u, 0x42752927u,
    0x96bf4dccu, 0x64d4cecfu, 0x77843d3bu, 0x85efbe38u, 0xdbfc821cu, 0x2997011fu, 0x3ac7f2ebu,
    0xc8ac71e8u, 0x1c661503u, 0xee0d9600u, 0xfd5d65f4u, 0x0f36e6f7u, 0x61c69362u, 0x93ad1061u,
    0x80fde395u, 0x72966096u, 0xa65c047du, 0x5437877eu, 0x4767748au, 0xb50cf789u, 0xeb1fcbadu,
    0x197448aeu, 0x0a24bb5au, 0xf84f3859u, 0x2c855cb2u, 0xdeeedfb1u, 0xcdbe2c45u, 0x3fd5af46u,
    0x7198540du, 0x83f3d70eu, 0x90a324fau, 0x62c8a7f9u, 0xb602c312u, 0x44694011u, 0x5739b3e5u,
    0xa55230e6u, 0xfb410cc2u, 0x092a8fc1u, 0x1a7a7c35u, 0xe811ff36u, 0x3cdb9bddu, 0xceb018deu,
    0xdde0eb2au, 0x2f8b6829u, 0x82f63b78u, 0x709db87bu, 0x63cd4b8fu, 0x91a6c88cu, 0x456cac67u,
    0xb7072f64u, 0xa457dc90u, 0x563c5f93u, 0x082f63b7u, 0xfa44e0b4u, 0xe9141340u, 0x1b7f9043u,
    0xcfb5f4a8u, 0x3dde77abu, 0x2e8e845fu, 0xdce5075cu, 0x92a8fc17u, 0x60c37f14u, 0x73938ce0u,
    0x81f80fe3u, 0x55326b08u, 0xa759e80bu, 0xb4091bffu, 0x466298fcu, 0x1871a4d8u, 0xea1a27dbu,
    0xf94ad42fu, 0x0b21572cu, 0xdfeb33c7u, 0x2d80b0c4u, 0x3ed04330u, 0xccbbc033u, 0xa24bb5a6u,
    0x502036a5u, 0x4370c551u, 0xb11b4652u, 0x65d122b9u, 0x97baa1bau, 0x84ea524eu, 0x7681d14du,
    0x2892ed69u, 0xdaf96e6au, 0xc9a99d9eu, 0x3bc21e9du, 0xef087a76u, 0x1d63f975u, 0x0e330a81u,
    0xfc588982u, 0xb21572c9u, 0x407ef1cau, 0x532e023eu, 0xa145813du, 0x758fe5d6u, 0x87e466d5u,
    0x94b49521u, 0x66df1622u, 0x38cc2a06u, 0xcaa7a905u, 0xd9f75af1u, 0x2b9cd9f2u, 0xff56bd19u,
    0x0d3d3e1au, 0x1e6dcdeeu, 0xec064eedu, 0xc38d26c4u, 0x31e6a5c7u, 0x22b65633u, 0xd0ddd530u,
    0x0417b1dbu, 0xf67c32d8u, 0xe52cc12cu, 0x1747422fu, 0x49547e0bu, 0xbb3ffd08u, 0xa86f0efcu,
    0x5a048dffu, 0x8ecee914u, 0x7ca56a17u, 0x6ff599e3u, 0x9d9e1ae0u, 0xd3d3e1abu, 0x21b862a8u,
    0x32e8915cu, 0xc083125fu, 0x144976b4u, 0xe622f5b7u, 0xf5720643u, 0x07198540u, 0x590ab964u,
    0xab613a67u, 0xb831c993u, 0x4a5a4a90u, 0x9e902e7bu, 0x6cfbad78u, 0x7fab5e8cu, 0x8dc0dd8fu,
    0xe330a81au, 0x115b2b19u, 0x020bd8edu, 0xf0605beeu, 0x24aa3f05u, 0xd6c1bc06u, 0xc5914ff2u,
    0x37faccf1u, 0x69e9f0d5u, 0x9b8273d6u, 0x88d28022u, 0x7ab90321u, 0xae7367cau, 0x5c18e4c9u,
    0x4f48173du, 0xbd23943eu, 0xf36e6f75u, 0x0105ec76u, 0x12551f82u, 0xe03e9c81u, 0x34f4f86au,
    0xc69f7b69u, 0xd5cf889du, 0x27a40b9eu, 0x79b737bau, 0x8bdcb4b9u, 0x988c474du, 0x6ae7c44eu,
    0xbe2da0a5u, 0x4c4623a6u, 0x5f16d052u, 0xad7d5351u,
};

uint32_t codec_crc32c(uint32_t crc, const void *buf, size_t n)
{
    const uint8_t *p = buf;
    crc = ~crc;
#if defined(__SSE4_2__) && defined(__x86_64__)
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        crc = (uint32_t)_mm_crc32_u64(crc, w);
        p += 8;
        n -= 8;
    }
#endif
    while (n--) crc = crc32c_table[(crc ^ *p++) & 0xffu] ^ (crc >> 8);
    return ~crc;
}

/* --- scalar conversions (after Maratyszcza's FP16 library: exact RNE, no branches on
 * the common path, and GCC vectorizes the loops that call them) ------------------- */

uint16_t codec_f32_to_f16(float f)
{
    const float scale_to_inf = 0x1.0p+112f, scale_to_zero = 0x1.0p-110f;
    float base = (fabsf(f) * scale_to_inf) * scale_to_zero;
    const uint32_t w = codec_f32_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = codec_bits_f32((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = codec_f32_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

float codec_f16_to_f32(uint16_t h)
{
    const uint32_t w = (uint32_t)h << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const float normalized = codec_bits_f32((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = codec_bits_f32((two_w >> 17) | (126u << 23)) - 0.5f;
    const uint32_t result =
        sign | (two_w < (1u << 27) ? codec_f32_bits(denormalized) : codec_f32_bits(normalized));
    return codec_bits_f32(result);
}

uint16_t codec_f32_to_bf16(float f)
{
    uint32_t b = codec_f32_bits(f);
    if ((b & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((b >> 16) | 0x0040u); /* quiet NaN */
    b += 0x7fffu + ((b >> 16) & 1u);
    return (uint16_t)(b >> 16);
}

float codec_bf16_to_f32(uint16_t h)
{
    return codec_bits_f32((uint32_t)h << 16);
}

/* --- names and sizes ---------------------------------------------------------------- */

int codec_by_name(const char *name)
{
    if (!name) return STATUS_ENOTFOUND;
    for (int i = 0; i < CODEC_COUNT; i++)
        if (strcmp(name, codec_names[i]) == 0) return i;
    return STATUS_ENOTFOUND;
}

const char *codec_name(int id)
{
    return id >= 0 && id < CODEC_COUNT ? codec_names[id] : NULL;
}

/* Payload bytes for n elements; n <= CODEC_MAX_ELEMS and block checked by the caller, so
 * nothing here overflows 64 bits. */
static uint64_t payload_len(codec_id_t c, const int64_t *shape, int ndim, uint64_t n,
                            uint32_t block)
{
    switch (c) {
    case CODEC_SUBSPACE:
        return codec_subspace_payload_len(n, block);
    case CODEC_LOWRANK:
        return codec_lowrank_payload_len(n / (uint64_t)shape[ndim - 1], (uint64_t)shape[ndim - 1],
                                         block);
    case CODEC_F32:
        return 4 * n;
    case CODEC_F16:
    case CODEC_BF16:
        return 2 * n;
    case CODEC_INT8:
        return 4 * ((n + block - 1) / block) + n;
    case CODEC_INT4:
        return 4 * ((n + block - 1) / block) + (n + 1) / 2;
    }
    return 0;
}

static int block_ok(codec_id_t c, const int64_t *shape, int ndim, uint32_t block)
{
    switch (c) {
    case CODEC_LOWRANK: /* the rank: 1..min(M, C) (codec_lowrank_rank clamps a wish) */
        return block >= 1 && block == codec_lowrank_rank(shape, ndim, block);
    case CODEC_SUBSPACE: /* the budget: room for one component at one bit */
        return codec_subspace_block_ok(shape, ndim, block);
    case CODEC_F32:
    case CODEC_F16:
    case CODEC_BF16:
        return block == 0;
    case CODEC_INT8:
        return block >= 1 && block <= CODEC_MAX_BLOCK;
    case CODEC_INT4:
        return block >= 2 && block <= CODEC_MAX_BLOCK && block % 2 == 0;
    }
    return 0;
}

static int is_int_codec(codec_id_t c)
{
    return c == CODEC_INT8 || c == CODEC_INT4;
}

/* Product of the shape, or 0 when a dimension or the product is out of range. */
static uint64_t shape_elems(const int64_t *shape, int ndim)
{
    if (!shape || ndim < 1 || ndim > CODEC_MAX_DIMS) return 0;
    uint64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 1 || shape[i] > (int64_t)UINT32_MAX) return 0;
        n *= (uint64_t)shape[i]; /* <= 2^40 * 2^32: no overflow before the check below */
        if (n > CODEC_MAX_ELEMS) return 0;
    }
    return n;
}

static uint32_t params_block(codec_id_t c, const codec_params_t *params, const int64_t *shape,
                             int ndim)
{
    if (c == CODEC_LOWRANK)
        return shape_elems(shape, ndim)
                   ? codec_lowrank_rank(shape, ndim, params ? params->block : 0)
                   : 0;
    if (c == CODEC_SUBSPACE)
        return params && params->block ? params->block : CODEC_SUBSPACE_DEFAULT_MILLI;
    if (!is_int_codec(c)) return 0;
    return params && params->block ? params->block : CODEC_DEFAULT_BLOCK;
}

uint32_t codec_block_for(codec_id_t codec, const codec_params_t *params, const int64_t *shape,
                         int ndim)
{
    if ((int)codec < 0 || (int)codec >= CODEC_COUNT || !shape_elems(shape, ndim)) return 0;
    uint32_t block = params_block(codec, params, shape, ndim);
    return block_ok(codec, shape, ndim, block) ? block : 0;
}

size_t codec_encoded_size(codec_id_t codec, const codec_params_t *params, const int64_t *shape,
                          int ndim)
{
    if ((int)codec < 0 || (int)codec >= CODEC_COUNT) return 0;
    uint32_t block = params_block(codec, params, shape, ndim);
    uint64_t n = shape_elems(shape, ndim);
    if (!n || !block_ok(codec, shape, ndim, block)) return 0;
    uint64_t total = CODEC_HEADER_LEN + payload_len(codec, shape, ndim, n, block);
    if (total > SIZE_MAX) return 0;
    return (size_t)total;
}

/* --- encoders --------------------------------------------------------------------- */

static int all_finite(const float *x, uint64_t n)
{
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) bad |= (codec_f32_bits(x[i]) & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

static int encode_f16(uint8_t *restrict out, const float *restrict x, uint64_t n)
{
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = codec_f32_to_f16(x[i]);
        bad |= (h & 0x7c00u) == 0x7c00u;
        memcpy(out + 2 * i, &h, 2);
    }
    return !bad;
}

static int encode_bf16(uint8_t *restrict out, const float *restrict x, uint64_t n)
{
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t b = codec_f32_bits(x[i]); /* finite: no NaN special case needed */
        uint16_t h = (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
        bad |= (h & 0x7f80u) == 0x7f80u;
        memcpy(out + 2 * i, &h, 2);
    }
    return !bad;
}

static float block_absmax(const float *x, uint64_t n)
{
    float m = 0.0f;
    for (uint64_t i = 0; i < n; i++) {
        float a = fabsf(x[i]);
        m = a > m ? a : m;
    }
    return m;
}

/* Round to nearest even for |v| < 2^22: the classic add-and-subtract of 1.5 * 2^23. */
static inline float round_even(float v)
{
    return (v + 12582912.0f) - 12582912.0f;
}

/* q[i] = clamp(rne(x[i] / s), -lim, lim) for one block; s > 0. */
static void quantize_block(int8_t *restrict q, const float *restrict x, uint64_t n, float s,
                           float lim)
{
    const float inv = 1.0f / s;
    if (isfinite(inv)) {
        for (uint64_t i = 0; i < n; i++) {
            float v = round_even(x[i] * inv);
            v = v > lim ? lim : v;
            v = v < -lim ? -lim : v;
            q[i] = (int8_t)v;
        }
    } else { /* s denormal: 1/s overflows, divide instead */
        for (uint64_t i = 0; i < n; i++) {
            float v = round_even(x[i] / s);
            v = v > lim ? lim : v;
            v = v < -lim ? -lim : v;
            q[i] = (int8_t)v;
        }
    }
}

static int encode_int8(uint8_t *out, const float *x, uint64_t n, uint32_t block, char *err)
{
    uint64_t nb = (n + block - 1) / block;
    int8_t *q = (int8_t *)(out + 4 * nb);
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t off = b * block, len = n - off < block ? n - off : block;
        float s = block_absmax(x + off, len) / 127.0f;
        if (s > INT8_MAX_SCALE)
            return status_set(err, STATUS_EINVAL, "codec int8: block %llu too large to scale",
                              (unsigned long long)b);
        codec_put_f32(out + 4 * b, s);
        if (s == 0.0f)
            memset(q + off, 0, len);
        else
            quantize_block(q + off, x + off, len, s, 127.0f);
    }
    return 0;
}

static int encode_int4(uint8_t *out, const float *x, uint64_t n, uint32_t block, char *err)
{
    uint64_t nb = (n + block - 1) / block;
    uint8_t *nib = out + 4 * nb;
    int8_t q[256];
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t off = b * block, len = n - off < block ? n - off : block;
        float s = block_absmax(x + off, len) / 7.0f;
        if (s > INT4_MAX_SCALE)
            return status_set(err, STATUS_EINVAL, "codec int4: block %llu too large to scale",
                              (unsigned long long)b);
        codec_put_f32(out + 4 * b, s);
        /* blocks are even, so every block starts on a byte; quantize in pieces of 256 */
        for (uint64_t p = 0; p < len; p += 256) {
            uint64_t m = len - p < 256 ? len - p : 256;
            if (s == 0.0f)
                memset(q, 0, m);
            else
                quantize_block(q, x + off + p, m, s, 7.0f);
            uint8_t *o = nib + (off + p) / 2;
            for (uint64_t i = 0; i + 1 < m; i += 2)
                o[i / 2] = (uint8_t)((q[i] + 8) | ((q[i + 1] + 8) << 4));
            if (m & 1) o[m / 2] = (uint8_t)(q[m - 1] + 8); /* last element; high nibble 0 */
        }
    }
    return 0;
}

/* Writes the header of a message whose payload (plen bytes) already follows it, CRC
 * included. */
static void put_header(uint8_t *h, codec_id_t codec, const int64_t *shape, int ndim, uint32_t block,
                       uint64_t plen)
{
    memcpy(h, codec_magic, 4);
    h[4] = CODEC_VERSION;
    h[5] = (uint8_t)codec;
    h[6] = (uint8_t)ndim;
    h[7] = 0;
    for (int i = 0; i < CODEC_MAX_DIMS; i++)
        codec_put_u32(h + 8 + 4 * i, i < ndim ? (uint32_t)shape[i] : 0);
    codec_put_u32(h + 24, block);
    codec_put_u64(h + 28, plen);
    uint32_t crc = codec_crc32c(0, h, 36);
    crc = codec_crc32c(crc, h + CODEC_HEADER_LEN, plen);
    codec_put_u32(h + 36, crc);
}

int codec_encode(codec_id_t codec, const codec_params_t *params, const float *x,
                 const int64_t *shape, int ndim, uint8_t *out, size_t cap, size_t *written,
                 char *err)
{
    if ((int)codec < 0 || (int)codec >= CODEC_COUNT)
        return status_set(err, STATUS_EINVAL, "codec: unknown codec id %d", (int)codec);
    uint64_t n = shape_elems(shape, ndim);
    if (!n)
        return status_set(err, STATUS_EINVAL, "codec %s: bad shape (ndim %d)", codec_names[codec],
                          ndim);
    uint32_t block = params_block(codec, params, shape, ndim);
    if (!block_ok(codec, shape, ndim, block))
        return status_set(err, STATUS_EINVAL, "codec %s: bad block %u", codec_names[codec], block);
    size_t total = codec_encoded_size(codec, params, shape, ndim);
    if (!x || !out || total == 0 || cap < total)
        return status_set(err, STATUS_EINVAL, "codec %s: output needs %zu bytes, has %zu",
                          codec_names[codec], total, cap);
    if (!all_finite(x, n))
        return status_set(err, STATUS_EINVAL, "codec %s: refusing a non-finite tensor",
                          codec_names[codec]);

    uint8_t *pay = out + CODEC_HEADER_LEN;
    int rc = 0;
    switch (codec) {
    case CODEC_F32:
        memcpy(pay, x, 4 * n);
        break;
    case CODEC_F16:
        if (!encode_f16(pay, x, n))
            rc = status_set(err, STATUS_EINVAL, "codec f16: a value is beyond the f16 range");
        break;
    case CODEC_BF16:
        if (!encode_bf16(pay, x, n))
            rc = status_set(err, STATUS_EINVAL, "codec bf16: a value rounds to infinity");
        break;
    case CODEC_INT8:
        rc = encode_int8(pay, x, n, block, err);
        break;
    case CODEC_INT4:
        rc = encode_int4(pay, x, n, block, err);
        break;
    case CODEC_LOWRANK:
        memset(pay, 0, total - CODEC_HEADER_LEN);
        rc = codec_lowrank_encode(pay, x, shape, ndim, block, err);
        break;
    case CODEC_SUBSPACE:
        memset(pay, 0, total - CODEC_HEADER_LEN);
        rc = codec_subspace_encode(pay, total - CODEC_HEADER_LEN, x, shape, ndim, err);
        break;
    }
    if (rc) return rc;

    put_header(out, codec, shape, ndim, block, total - CODEC_HEADER_LEN);
    if (written) *written = total;
    return 0;
}

/* --- decoder ---------------------------------------------------------------------- */

int codec_peek(const uint8_t *buf, size_t len, codec_info_t *info, char *err)
{
    if (!buf || len < CODEC_HEADER_LEN)
        return status_set(err, STATUS_EMALFORMED, "codec: truncated header (%zu of %d bytes)",
                          buf ? len : 0, CODEC_HEADER_LEN);
    if (memcmp(buf, codec_magic, 4) != 0)
        return status_set(err, STATUS_EMALFORMED, "codec: bad magic");
    if (buf[4] != CODEC_VERSION)
        return status_set(err, STATUS_EVERSION, "codec: format version %u, this build speaks %d",
                          buf[4], CODEC_VERSION);
    codec_id_t c = (codec_id_t)buf[5];
    if (buf[5] >= CODEC_COUNT)
        return status_set(err, STATUS_EMALFORMED, "codec: unknown codec id %u", buf[5]);
    int ndim = buf[6];
    if (ndim < 1 || ndim > CODEC_MAX_DIMS)
        return status_set(err, STATUS_EMALFORMED, "codec: ndim %d outside 1..%d", ndim,
                          CODEC_MAX_DIMS);
    if (buf[7] != 0) return status_set(err, STATUS_EMALFORMED, "codec: reserved byte not zero");
    int64_t shape[CODEC_MAX_DIMS] = {0};
    for (int i = 0; i < CODEC_MAX_DIMS; i++) {
        uint32_t d = codec_get_u32(buf + 8 + 4 * i);
        if (i < ndim && d == 0)
            return status_set(err, STATUS_EMALFORMED, "codec: dimension %d is zero", i);
        if (i >= ndim && d != 0)
            return status_set(err, STATUS_EMALFORMED, "codec: unused dimension %d not zero", i);
        shape[i] = d;
    }
    uint64_t n = shape_elems(shape, ndim);
    if (!n) return status_set(err, STATUS_EMALFORMED, "codec: element count above 2^40");
    uint32_t block = codec_get_u32(buf + 24);
    if (!block_ok(c, shape, ndim, block))
        return status_set(err, STATUS_EMALFORMED, "codec %s: bad block %u", codec_names[c], block);
    uint64_t plen = codec_get_u64(buf + 28), want = payload_len(c, shape, ndim, n, block);
    if (plen != want)
        return status_set(err, STATUS_EMALFORMED,
                          "codec %s: payload length %llu, shape and block need %llu",
                          codec_names[c], (unsigned long long)plen, (unsigned long long)want);
    if ((uint64_t)(len - CODEC_HEADER_LEN) != plen)
        return status_set(err, STATUS_EMALFORMED,
                          "codec %s: %s: %zu bytes after the header, %llu "
                          "announced",
                          codec_names[c],
                          (uint64_t)(len - CODEC_HEADER_LEN) < plen ? "truncated" : "oversized",
                          len - CODEC_HEADER_LEN, (unsigned long long)plen);
    if (info) {
        info->codec = c;
        info->ndim = ndim;
        memcpy(info->shape, shape, sizeof shape);
        info->elems = n;
        info->block = block;
        info->payload_len = plen;
    }
    return 0;
}

static int decode_f16(float *restrict out, const uint8_t *restrict p, uint64_t n)
{
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = codec_get_u16(p + 2 * i);
        bad |= (h & 0x7c00u) == 0x7c00u;
        out[i] = codec_f16_to_f32(h);
    }
    return !bad;
}

static int decode_bf16(float *restrict out, const uint8_t *restrict p, uint64_t n)
{
    uint32_t bad = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint16_t h = codec_get_u16(p + 2 * i);
        bad |= (h & 0x7f80u) == 0x7f80u;
        out[i] = codec_bf16_to_f32(h);
    }
    return !bad;
}

/* Scales must be finite, >= 0 (not -0) and at most max. Returns the bad block or -1. */
static int64_t check_scales(const uint8_t *p, uint64_t nb, float max)
{
    for (uint64_t b = 0; b < nb; b++) {
        uint32_t bits = codec_get_u32(p + 4 * b);
        float s = codec_bits_f32(bits);
        if ((bits >> 31) || !(s <= max)) return (int64_t)b; /* NaN fails s <= max */
    }
    return -1;
}

static int decode_int8(float *out, const uint8_t *p, uint64_t n, uint32_t block, char *err)
{
    uint64_t nb = (n + block - 1) / block;
    int64_t bad = check_scales(p, nb, INT8_MAX_SCALE);
    if (bad >= 0)
        return status_set(err, STATUS_EMALFORMED, "codec int8: bad scale in block %lld",
                          (long long)bad);
    const int8_t *q = (const int8_t *)(p + 4 * nb);
    uint32_t badq = 0;
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t off = b * block, len = n - off < block ? n - off : block;
        float s = codec_get_f32(p + 4 * b);
        for (uint64_t i = 0; i < len; i++) {
            badq |= q[off + i] == -128;
            out[off + i] = (float)q[off + i] * s;
        }
    }
    if (badq) return status_set(err, STATUS_EMALFORMED, "codec int8: value -128 is not canonical");
    return 0;
}

static int decode_int4(float *out, const uint8_t *p, uint64_t n, uint32_t block, char *err)
{
    uint64_t nb = (n + block - 1) / block;
    int64_t bad = check_scales(p, nb, INT4_MAX_SCALE);
    if (bad >= 0)
        return status_set(err, STATUS_EMALFORMED, "codec int4: bad scale in block %lld",
                          (long long)bad);
    const uint8_t *nib = p + 4 * nb;
    uint32_t badq = 0;
    for (uint64_t b = 0; b < nb; b++) {
        uint64_t off = b * block, len = n - off < block ? n - off : block;
        float s = codec_get_f32(p + 4 * b);
        const uint8_t *src = nib + off / 2;
        float *dst = out + off;
        uint64_t pairs = len / 2;
        for (uint64_t i = 0; i < pairs; i++) {
            uint8_t v = src[i];
            int lo = v & 15, hi = v >> 4;
            badq |= (lo == 0) | (hi == 0);
            dst[2 * i] = (float)(lo - 8) * s;
            dst[2 * i + 1] = (float)(hi - 8) * s;
        }
        if (len & 1) { /* only the last block can be odd: its final byte has a 0 pad */
            uint8_t v = src[pairs];
            badq |= ((v & 15) == 0) | ((v >> 4) != 0);
            dst[len - 1] = (float)((v & 15) - 8) * s;
        }
    }
    if (badq) return status_set(err, STATUS_EMALFORMED, "codec int4: nibble 0 or nonzero padding");
    return 0;
}

int codec_decode(const uint8_t *buf, size_t len, float *out, size_t out_cap_elems,
                 int64_t *shape_out, int *ndim_out, char *err)
{
    codec_info_t info;
    int rc = codec_peek(buf, len, &info, err);
    if (rc) return rc;
    if (!out || info.elems > (uint64_t)out_cap_elems)
        return status_set(err, STATUS_EINVAL, "codec %s: output holds %zu floats, need %llu",
                          codec_names[info.codec], out ? out_cap_elems : 0,
                          (unsigned long long)info.elems);
    const uint8_t *pay = buf + CODEC_HEADER_LEN;
    uint32_t crc = codec_crc32c(0, buf, 36);
    crc = codec_crc32c(crc, pay, info.payload_len);
    if (crc != codec_get_u32(buf + 36))
        return status_set(err, STATUS_ECORRUPT, "codec %s: checksum mismatch",
                          codec_names[info.codec]);
    uint64_t n = info.elems;
    switch (info.codec) {
    case CODEC_F32:
        memcpy(out, pay, 4 * n);
        if (!all_finite(out, n))
            return status_set(err, STATUS_EMALFORMED, "codec f32: non-finite value");
        break;
    case CODEC_F16:
        if (!decode_f16(out, pay, n))
            return status_set(err, STATUS_EMALFORMED, "codec f16: non-finite value");
        break;
    case CODEC_BF16:
        if (!decode_bf16(out, pay, n))
            return status_set(err, STATUS_EMALFORMED, "codec bf16: non-finite value");
        break;
    case CODEC_INT8:
        if ((rc = decode_int8(out, pay, n, info.block, err))) return rc;
        break;
    case CODEC_INT4:
        if ((rc = decode_int4(out, pay, n, info.block, err))) return rc;
        break;
    case CODEC_LOWRANK: {
        uint64_t c = (uint64_t)info.shape[info.ndim - 1];
        if ((rc = codec_lowrank_check(pay, n / c, c, info.block, err))) return rc;
        codec_lowrank_decode(out, pay, n / c, c, info.block);
        break;
    }
    case CODEC_SUBSPACE: {
        uint64_t c = (uint64_t)info.shape[info.ndim - 1];
        if ((rc = codec_subspace_check(pay, info.payload_len, n / c, c, err))) return rc;
        codec_subspace_decode(out, pay, n / c, c);
        break;
    }
    }
    if (shape_out) memcpy(shape_out, info.shape, sizeof info.shape);
    if (ndim_out) *ndim_out = info.ndim;
    return 0;
}

/* --- payloads made elsewhere -------------------------------------------------------- */

/* Every value rule of section 2.2 on a payload whose length matches (shape, block): 0, or
 * STATUS_EMALFORMED + err naming the first kind of fault. */
static int payload_check(codec_id_t c, const uint8_t *p, const int64_t *shape, int ndim, uint64_t n,
                         uint32_t block, char *err)
{
    uint32_t bad = 0;
    uint64_t nb = is_int_codec(c) ? (n + block - 1) / block : 0;
    switch (c) {
    case CODEC_LOWRANK:
        return codec_lowrank_check(p, n / (uint64_t)shape[ndim - 1], (uint64_t)shape[ndim - 1],
                                   block, err);
    case CODEC_SUBSPACE:
        return codec_subspace_check(p, codec_subspace_payload_len(n, block),
                                    n / (uint64_t)shape[ndim - 1], (uint64_t)shape[ndim - 1], err);
    case CODEC_F32:
        for (uint64_t i = 0; i < n; i++)
            bad |= (codec_get_u32(p + 4 * i) & 0x7f800000u) == 0x7f800000u;
        break;
    case CODEC_F16:
        for (uint64_t i = 0; i < n; i++) bad |= (codec_get_u16(p + 2 * i) & 0x7c00u) == 0x7c00u;
        break;
    case CODEC_BF16:
        for (uint64_t i = 0; i < n; i++) bad |= (codec_get_u16(p + 2 * i) & 0x7f80u) == 0x7f80u;
        break;
    case CODEC_INT8: {
        int64_t b = check_scales(p, nb, INT8_MAX_SCALE);
        if (b >= 0)
            return status_set(err, STATUS_EMALFORMED, "codec int8: bad scale in block %lld",
                              (long long)b);
        const uint8_t *q = p + 4 * nb;
        for (uint64_t i = 0; i < n; i++) bad |= q[i] == 0x80u;
        if (bad)
            return status_set(err, STATUS_EMALFORMED, "codec int8: value -128 is not canonical");
        return 0;
    }
    case CODEC_INT4: {
        int64_t b = check_scales(p, nb, INT4_MAX_SCALE);
        if (b >= 0)
            return status_set(err, STATUS_EMALFORMED, "codec int4: bad scale in block %lld",
                              (long long)b);
        const uint8_t *q = p + 4 * nb;
        for (uint64_t i = 0; i < n / 2; i++) bad |= ((q[i] & 15) == 0) | ((q[i] >> 4) == 0);
        if (n & 1) bad |= ((q[n / 2] & 15) == 0) | ((q[n / 2] >> 4) != 0);
        if (bad)
            return status_set(err, STATUS_EMALFORMED, "codec int4: nibble 0 or nonzero padding");
        return 0;
    }
    }
    if (bad)
        return status_set(err, STATUS_EMALFORMED, "codec %s: non-finite value", codec_names[c]);
    return 0;
}

int codec_seal(codec_id_t codec, const codec_params_t *params, const int64_t *shape, int ndim,
               uint8_t *buf, size_t len, char *err)
{
    if ((int)codec < 0 || (int)codec >= CODEC_COUNT)
        return status_set(err, STATUS_EINVAL, "codec: unknown codec id %d", (int)codec);
    uint32_t block = params_block(codec, params, shape, ndim);
    uint64_t n = shape_elems(shape, ndim);
    size_t total = codec_encoded_size(codec, params, shape, ndim);
    if (!n || !total)
        return status_set(err, STATUS_EINVAL, "codec %s: bad shape (ndim %d) or block %u",
                          codec_names[codec], ndim, block);
    if (!buf || len != total)
        return status_set(err, STATUS_EINVAL, "codec %s: a sealed message is %zu bytes, not %zu",
                          codec_names[codec], total, buf ? len : 0);
    char e2[STATUS_ERR_LEN];
    if (payload_check(codec, buf + CODEC_HEADER_LEN, shape, ndim, n, block, e2))
        return status_set(err, STATUS_EINVAL, "refusing to seal: %s (non-finite input?)", e2);
    put_header(buf, codec, shape, ndim, block, total - CODEC_HEADER_LEN);
    return 0;
}

int codec_open(const uint8_t *buf, size_t len, codec_info_t *info, const uint8_t **payload,
               char *err)
{
    codec_info_t in;
    int rc = codec_peek(buf, len, &in, err);
    if (rc) return rc;
    uint32_t crc = codec_crc32c(0, buf, 36);
    crc = codec_crc32c(crc, buf + CODEC_HEADER_LEN, in.payload_len);
    if (crc != codec_get_u32(buf + 36))
        return status_set(err, STATUS_ECORRUPT, "codec %s: checksum mismatch",
                          codec_names[in.codec]);
    if ((rc = payload_check(in.codec, buf + CODEC_HEADER_LEN, in.shape, in.ndim, in.elems, in.block,
                            err)))
        return rc;
    if (info) *info = in;
    if (payload) *payload = buf + CODEC_HEADER_LEN;
    return 0;
}
