/* test_codec.c — the activation codecs: names, CRC-32C, f16/bf16 rounding, round trips
 * with their error bounds, golden vectors of docs/codec-format.md, and the decoder's
 * never-trust promises (every truncation, header field and value check, 10,000 random
 * corruptions per codec; the suite runs under ASan + UBSan).
 * Not for: DeMo messages (test_demo.c) or speed (tools/bench_codecs.c). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "compress/codec.h"
#include "common/le.h"
#include "common/rng.h"
#include "common/status.h"
#include "testutil.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Golden vectors: x = {1.0f, -2.5f, 0.0f, 3.0f, 0.1f}, shape (5), block 4 for int8 and
 * int4. Produced by an independent encoder written from docs/codec-format.md (Python
 * struct + bitwise CRC-32C) and checked by hand: e.g. int4 block 0 absmax 3, s = 3/7,
 * q = {2, -6, 0, 7} -> nibbles {10, 2, 8, 15} -> bytes 0x2a 0xf8; block 1 q = {7} ->
 * 0x0f with a zero pad nibble. */
static const uint8_t golden_f32[60] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x37, 0x82, 0x16, 0x7e, 0x00, 0x00, 0x80, 0x3f, 0x00,
    0x00, 0x20, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0x40, 0xcd, 0xcc, 0xcc, 0x3d,
};
static const uint8_t golden_f16[50] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x01, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x3b, 0x11, 0x77,
    0xb3, 0x00, 0x3c, 0x00, 0xc1, 0x00, 0x00, 0x00, 0x42, 0x66, 0x2e,
};
static const uint8_t golden_bf16[50] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x02, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2d, 0x2c, 0x6e,
    0xb0, 0x80, 0x3f, 0x20, 0xc0, 0x00, 0x00, 0x40, 0x40, 0xcd, 0x3d,
};
static const uint8_t golden_int8[53] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x03, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00,
    0x0d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x84, 0x82, 0xa3, 0x15, 0x06, 0x83,
    0xc1, 0x3c, 0xa0, 0x69, 0x4e, 0x3a, 0x2a, 0x96, 0x00, 0x7f, 0x7f,
};
static const uint8_t golden_int4[51] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x04, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00,
    0x00, 0x00, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0xcb, 0xbc,
    0x74, 0xb7, 0x6d, 0xdb, 0x3e, 0xa1, 0x0e, 0x6a, 0x3c, 0x2a, 0xf8, 0x0f,
};

/* lowrank, shape (5): one row, so rank 1 (the block field asked 4 and is clamped). The basis
 * is x / |x| (|x| = sqrt(16.26)): scale (3/|x|)/127 = 0x3bbff55c, q = round(x * 127/3) =
 * {42, -106, 0, 127, 4}; the factor u = x . v' = 4.0328 -> scale u/7 = 0x3f137b7b, q = 7
 * -> nibble 15 with a zero pad nibble. */
static const uint8_t golden_lowrank[54] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x05, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00,
    0x0e, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc8, 0xc7, 0xb8, 0xa6, 0x5c, 0xf5,
    0xbf, 0x3b, 0x2a, 0x96, 0x00, 0x7f, 0x04, 0x7b, 0x7b, 0x13, 0x3f, 0x0f,
};

/* subspace, shape (5) at a budget of 12.4 octets per element (block 12400): 62 octets. One
 * row, so one component: row gain base = |x| = 0x4081092b, gain code 255; the basis is
 * x/|x| in int8 as lowrank's (scale 0x3bbff55c, q = {42, -106, 0, 127, 4}); the component
 * enters at 5 bits and the budget's last 3 bits raise it to 8; its coordinate u = 1.0002,
 * step 0.0308 (the 8-bit Gaussian step at rms 1) = 0x3cfc55e9, code floor(u/step) + 128 =
 * 160 = 0xa0. */
static const uint8_t golden_subspace[62] = {
    0x53, 0x54, 0x41, 0x43, 0x01, 0x06, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x70, 0x30, 0x00, 0x00, 0x16, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x0e, 0xf9, 0xbb, 0x12, 0x01, 0x00, 0x2b, 0x09, 0x81, 0x40, 0xff, 0x08,
    0x5c, 0xf5, 0xbf, 0x3b, 0x2a, 0x96, 0x00, 0x7f, 0x04, 0xe9, 0x55, 0xfc, 0x3c, 0xa0,
};

static const float golden_x[5] = {1.0f, -2.5f, 0.0f, 3.0f, 0.1f};

static const uint8_t *const golden[CODEC_COUNT] = {
    golden_f32, golden_f16, golden_bf16, golden_int8, golden_int4, golden_lowrank, golden_subspace};
static const size_t golden_len[CODEC_COUNT] = {
    sizeof golden_f32,  sizeof golden_f16,     sizeof golden_bf16,    sizeof golden_int8,
    sizeof golden_int4, sizeof golden_lowrank, sizeof golden_subspace};

/* Rewrites the checksum so that a deliberate change reaches the checks behind it. */
static void refix_crc(uint8_t *buf, size_t len)
{
    if (len < CODEC_HEADER_LEN) return;
    uint32_t crc = codec_crc32c(0, buf, 36);
    crc = codec_crc32c(crc, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN);
    for (int i = 0; i < 4; i++) buf[36 + i] = (uint8_t)(crc >> (8 * i));
}

static uint8_t *encode_alloc(codec_id_t c, uint32_t block, const float *x, const int64_t *shape,
                             int ndim, size_t *len)
{
    if (c == CODEC_SUBSPACE && block < 100) block = CODEC_SUBSPACE_MAX_MILLI; /* room for all */
    codec_params_t p = {block};
    size_t cap = codec_encoded_size(c, &p, shape, ndim);
    assert_true(cap > 0);
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    char err[STATUS_ERR_LEN] = "";
    int rc = codec_encode(c, &p, x, shape, ndim, buf, cap, len, err);
    if (rc) print_error("encode %s: %s\n", codec_name(c), err);
    assert_int_equal(rc, 0);
    assert_int_equal(*len, cap);
    return buf;
}

static void test_names(void **state)
{
    (void)state;
    const char *names[] = {"f32", "f16", "bf16", "int8", "int4", "lowrank", "subspace"};
    for (int i = 0; i < CODEC_COUNT; i++) {
        assert_int_equal(codec_by_name(names[i]), i);
        assert_string_equal(codec_name(i), names[i]);
    }
    assert_int_equal(codec_by_name("int3"), STATUS_ENOTFOUND);
    assert_int_equal(codec_by_name(NULL), STATUS_ENOTFOUND);
    assert_null(codec_name(CODEC_COUNT));
    assert_null(codec_name(-1));
}

static void test_crc32c(void **state)
{
    (void)state;
    assert_int_equal(codec_crc32c(0, "123456789", 9), 0xE3069283u);
    /* any split gives the same value (the word path and the byte path agree) */
    uint8_t buf[100];
    for (int i = 0; i < 100; i++) buf[i] = (uint8_t)(i * 37 + 11);
    uint32_t whole = codec_crc32c(0, buf, 100);
    for (int s = 0; s <= 100; s++)
        assert_int_equal(codec_crc32c(codec_crc32c(0, buf, (size_t)s), buf + s, 100 - (size_t)s),
                         whole);
}

static void test_f16_rounding(void **state)
{
    (void)state;
    /* every finite half survives f16 -> f32 -> f16; midpoints round to even */
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00) continue;
        float f = codec_f16_to_f32((uint16_t)h);
        assert_int_equal(codec_f32_to_f16(f), h);
        if ((h & 0x7fff) < 0x7bff) {
            float g = codec_f16_to_f32((uint16_t)(h + 1));
            float mid = (f + g) * 0.5f; /* exact: halves have 11 significant bits */
            uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
            if ((h & 0x7fff) == 0 && (h & 0x8000)) continue; /* -0 and the next negative */
            assert_int_equal(codec_f32_to_f16(mid), want);
            assert_int_equal(codec_f32_to_f16(nextafterf(mid, f)), h);
            assert_int_equal(codec_f32_to_f16(nextafterf(mid, g)), h + 1);
        }
    }
    assert_int_equal(codec_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(codec_f32_to_f16(65520.0f), 0x7c00); /* ties to even: infinity */
    /* bf16: ties to even, NaN stays NaN */
    assert_int_equal(codec_f32_to_bf16(1.0f), 0x3f80);
    float tie_down, tie_up;
    uint32_t b = 0x3f808000u; /* halfway between 0x3f80 and 0x3f81: to even 0x3f80 */
    memcpy(&tie_down, &b, 4);
    b = 0x3f818000u; /* halfway between 0x3f81 and 0x3f82: to even 0x3f82 */
    memcpy(&tie_up, &b, 4);
    assert_int_equal(codec_f32_to_bf16(tie_down), 0x3f80);
    assert_int_equal(codec_f32_to_bf16(tie_up), 0x3f82);
    assert_true(isnan(codec_bf16_to_f32(codec_f32_to_bf16(NAN))));
}

static void test_golden(void **state)
{
    (void)state;
    const int64_t shape[1] = {5};
    for (int c = 0; c < CODEC_COUNT; c++) {
        size_t len;
        uint8_t *buf =
            encode_alloc((codec_id_t)c, c == CODEC_SUBSPACE ? 12400 : 4, golden_x, shape, 1, &len);
        assert_int_equal(len, golden_len[c]);
        assert_memory_equal(buf, golden[c], len);
        float out[5];
        int64_t sh[CODEC_MAX_DIMS];
        int nd = 0;
        char err[STATUS_ERR_LEN];
        assert_int_equal(codec_decode(golden[c], golden_len[c], out, 5, sh, &nd, err), 0);
        assert_int_equal(nd, 1);
        assert_int_equal(sh[0], 5);
        if (c == CODEC_F32) assert_memory_equal(out, golden_x, sizeof out);
        free(buf);
    }
    /* the f32 payload is the input, the int8 one dequantizes as the spec says */
    float out[5];
    char err[STATUS_ERR_LEN];
    assert_int_equal(codec_decode(golden_int8, sizeof golden_int8, out, 5, NULL, NULL, err), 0);
    assert_true(out[0] == 42.0f * (3.0f / 127.0f));
    assert_true(out[4] == 127.0f * (0.1f / 127.0f));
    /* lowrank: x' = (7 * us) * vs * q, summed over the rank in order */
    assert_int_equal(codec_decode(golden_lowrank, sizeof golden_lowrank, out, 5, NULL, NULL, err),
                     0);
    float us, vs;
    memcpy(&vs, golden_lowrank + 40, 4);
    memcpy(&us, golden_lowrank + 49, 4);
    assert_true(out[0] == 7.0f * us * vs * 42.0f);
    assert_true(out[3] == 7.0f * us * vs * 127.0f);
    assert_true(out[2] == 0.0f);
    for (int i = 0; i < 5; i++) assert_true(fabsf(out[i] - golden_x[i]) < 0.01f);
}

/* Checks a decoded tensor against x within the bound each codec promises. */
static void check_bounds(codec_id_t c, uint32_t block, const float *x, const float *y, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - (double)y[i]), a = fabs((double)x[i]);
        switch (c) {
        case CODEC_F32:
            assert_true(e == 0.0);
            break;
        case CODEC_F16:
            if (a >= 0x1.0p-14)
                assert_true(e <= a * 0x1.0p-11);
            else
                assert_true(e <= 0x1.0p-25);
            break;
        case CODEC_BF16:
            if (a >= FLT_MIN)
                assert_true(e <= a * 0x1.0p-8);
            else
                assert_true(e <= 0x1.0p-134); /* subnormal: half a bf16 ulp */
            break;
        case CODEC_INT8:
        case CODEC_INT4: {
            size_t b0 = i / block * block, b1 = b0 + block < n ? b0 + block : n;
            double am = 0;
            for (size_t j = b0; j < b1; j++) am = fmax(am, fabs((double)x[j]));
            double bound = am / (c == CODEC_INT8 ? 254.0 : 14.0) * (1 + 1e-5) + 1e-44;
            if (e > bound)
                print_error("%s i=%zu x=%g y=%g e=%g bound=%g\n", codec_name(c), i, x[i], y[i], e,
                            bound);
            assert_true(e <= bound);
            break;
        }
        case CODEC_LOWRANK: /* no per-element bound: test_lowrank, test_subspace */
        case CODEC_SUBSPACE:
            break;
        }
    }
}

static void test_round_trips(void **state)
{
    (void)state;
    const size_t n = 3 * 5 * 71; /* odd, not a multiple of any block */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    testutil_fill_normal(x, n, 7, 1.0f);
    /* blocks on very different scales, a zero block, denormals and an exact -0 */
    for (size_t i = 0; i < n; i++) x[i] *= (float)pow(10.0, (double)((int)(i / 40) % 9 - 4));
    for (size_t i = 200; i < 264; i++) x[i] = 0.0f;
    for (size_t i = 300; i < 310; i++) x[i] = (float)(i - 305) * 1e-41f;
    x[5] = -0.0f;
    const int64_t shape[3] = {3, 5, 71};
    const uint32_t blocks[] = {64, 33, 2, 1, 4096};
    for (int c = 0; c < CODEC_COUNT; c++) {
        for (size_t bi = 0; bi < sizeof blocks / sizeof *blocks; bi++) {
            uint32_t block = blocks[bi];
            if (c == CODEC_INT4 && block % 2) continue;
            if (c < CODEC_INT8 && bi > 0) break;
            size_t len;
            uint8_t *buf = encode_alloc((codec_id_t)c, block, x, shape, 3, &len);
            int64_t sh[CODEC_MAX_DIMS];
            int nd;
            char err[STATUS_ERR_LEN];
            int rc = codec_decode(buf, len, y, n, sh, &nd, err);
            if (rc) print_error("%s: %s\n", codec_name(c), err);
            assert_int_equal(rc, 0);
            assert_int_equal(nd, 3);
            assert_int_equal(sh[0], 3);
            assert_int_equal(sh[1], 5);
            assert_int_equal(sh[2], 71);
            check_bounds((codec_id_t)c, block, x, y, n);
            /* one element too few of output room is refused, not overrun */
            assert_int_equal(codec_decode(buf, len, y, n - 1, NULL, NULL, err), STATUS_EINVAL);
            free(buf);
        }
    }
    free(x);
    free(y);
}

static void test_encode_refuses(void **state)
{
    (void)state;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int64_t shape[1] = {8};
    uint8_t buf[256];
    size_t w;
    char err[STATUS_ERR_LEN];
    const float bad[] = {NAN, INFINITY, -INFINITY};
    for (int c = 0; c < CODEC_COUNT; c++) {
        for (int b = 0; b < 3; b++) {
            x[3] = bad[b];
            err[0] = 0;
            assert_int_equal(
                codec_encode((codec_id_t)c, NULL, x, shape, 1, buf, sizeof buf, &w, err),
                STATUS_EINVAL);
            assert_true(strlen(err) > 0);
        }
        x[3] = 4;
        /* too small an output, bad shapes, bad blocks */
        assert_int_equal(codec_encode((codec_id_t)c, NULL, x, shape, 1, buf, 20, &w, err),
                         STATUS_EINVAL);
        const int64_t zero[1] = {0}, neg[2] = {4, -2}, huge[4] = {1 << 20, 1 << 20, 1 << 20, 2};
        assert_int_equal(codec_encode((codec_id_t)c, NULL, x, zero, 1, buf, sizeof buf, &w, err),
                         STATUS_EINVAL);
        assert_int_equal(codec_encode((codec_id_t)c, NULL, x, neg, 2, buf, sizeof buf, &w, err),
                         STATUS_EINVAL);
        assert_int_equal(codec_encoded_size((codec_id_t)c, NULL, huge, 4), 0);
        assert_int_equal(codec_encode((codec_id_t)c, NULL, x, shape, 5, buf, sizeof buf, &w, err),
                         STATUS_EINVAL);
    }
    codec_params_t odd = {3}, big = {CODEC_MAX_BLOCK + 1};
    assert_int_equal(codec_encode(CODEC_INT4, &odd, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    assert_int_equal(codec_encode(CODEC_INT8, &big, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    assert_int_equal(codec_encode((codec_id_t)9, NULL, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    x[0] = 70000.0f; /* beyond f16 */
    assert_int_equal(codec_encode(CODEC_F16, NULL, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    assert_int_equal(codec_encode(CODEC_BF16, NULL, x, shape, 1, buf, sizeof buf, &w, err), 0);
    x[0] = FLT_MAX; /* rounds to infinity in bf16; int8's scale would overflow on decode */
    assert_int_equal(codec_encode(CODEC_BF16, NULL, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    assert_int_equal(codec_encode(CODEC_INT8, NULL, x, shape, 1, buf, sizeof buf, &w, err),
                     STATUS_EINVAL);
    x[0] = FLT_MAX / 2; /* still fine for int8: scale below FLT_MAX / 128 */
    assert_int_equal(codec_encode(CODEC_INT8, NULL, x, shape, 1, buf, sizeof buf, &w, err), 0);
}

static void test_truncations(void **state)
{
    (void)state;
    float x[37], y[37];
    testutil_fill_normal(x, 37, 3, 2.0f);
    const int64_t shape[2] = {37, 1};
    for (int c = 0; c < CODEC_COUNT; c++) {
        size_t len;
        uint8_t *buf = encode_alloc((codec_id_t)c, 8, x, shape, 2, &len);
        char err[STATUS_ERR_LEN];
        for (size_t l = 0; l < len; l++) {
            /* a fresh heap copy of exactly l bytes: ASan sees any read past it */
            uint8_t *t = malloc(l ? l : 1);
            memcpy(t, buf, l);
            err[0] = 0;
            int rc = codec_decode(t, l, y, 37, NULL, NULL, err);
            assert_true(rc < 0);
            assert_true(strlen(err) > 0);
            free(t);
        }
        uint8_t *t = malloc(len + 1);
        memcpy(t, buf, len);
        t[len] = 0;
        assert_int_equal(codec_decode(t, len + 1, y, 37, NULL, NULL, err), STATUS_EMALFORMED);
        assert_non_null(strstr(err, "oversized"));
        free(t);
        free(buf);
    }
}

static void test_header_checks(void **state)
{
    (void)state;
    uint8_t b[64];
    float y[64];
    char err[STATUS_ERR_LEN];
    int64_t sh[CODEC_MAX_DIMS];
    int nd;
#define FRESH(c)  memcpy(b, golden[c], golden_len[c])
#define DECODE(c) codec_decode(b, golden_len[c], y, 64, sh, &nd, err)
    FRESH(CODEC_INT8);
    b[0] = 'X';
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EMALFORMED);
    FRESH(CODEC_INT8);
    b[4] = 2;
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EVERSION);
    FRESH(CODEC_INT8);
    b[5] = 7; /* unknown codec */
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EMALFORMED);
    FRESH(CODEC_INT8);
    b[5] = CODEC_INT4; /* another codec: the block and the length no longer agree */
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EMALFORMED);
    FRESH(CODEC_INT8);
    b[44] ^= 1; /* a payload bit: checksum */
    assert_int_equal(DECODE(CODEC_INT8), STATUS_ECORRUPT);
    FRESH(CODEC_INT8);
    b[8] = 6; /* shape says 6, payload holds 5 */
    refix_crc(b, golden_len[CODEC_INT8]);
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EMALFORMED);
    FRESH(CODEC_F32);
    b[6] = 0; /* ndim 0 */
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    FRESH(CODEC_F32);
    b[12] = 1; /* a dimension beyond ndim */
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    FRESH(CODEC_F32);
    b[7] = 1; /* reserved */
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    FRESH(CODEC_F32);
    b[24] = 4; /* a block on a float codec */
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    /* absurd element count: 4 dims of 2^32 - 1, payload length to match them mod 2^64 */
    FRESH(CODEC_F32);
    b[6] = 4;
    for (int i = 0; i < 4; i++) le_put_u32(b + 8 + 4 * i, 0xffffffffu);
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "2^40"));
    /* payload length field wrapping: 2^64 - 20 announced */
    FRESH(CODEC_F32);
    for (int i = 0; i < 8; i++) b[28 + i] = 0xff;
    b[28] = 0xec;
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    /* non-finite values and scales, with a valid checksum */
    FRESH(CODEC_F32);
    le_put_u32(b + 40, 0x7fc00000u);
    refix_crc(b, golden_len[CODEC_F32]);
    assert_int_equal(DECODE(CODEC_F32), STATUS_EMALFORMED);
    FRESH(CODEC_F16);
    b[41] = 0x7c; /* +Inf half */
    b[40] = 0;
    refix_crc(b, golden_len[CODEC_F16]);
    assert_int_equal(DECODE(CODEC_F16), STATUS_EMALFORMED);
    FRESH(CODEC_BF16);
    b[41] = 0x7f;
    b[40] = 0x80; /* +Inf bf16 */
    refix_crc(b, golden_len[CODEC_BF16]);
    assert_int_equal(DECODE(CODEC_BF16), STATUS_EMALFORMED);
    const uint32_t bad_scales[] = {0x7fc00000u, 0x7f800000u, 0x80000000u, 0xbf800000u, 0x7f000000u};
    for (int c = CODEC_INT8; c <= CODEC_INT4; c++) {
        for (size_t s = 0; s < sizeof bad_scales / sizeof *bad_scales; s++) {
            FRESH(c);
            le_put_u32(b + 44, bad_scales[s]); /* second block's scale */
            refix_crc(b, golden_len[c]);
            err[0] = 0;
            assert_int_equal(DECODE(c), STATUS_EMALFORMED);
            assert_non_null(strstr(err, "scale"));
        }
    }
    FRESH(CODEC_INT8);
    b[49] = 0x80; /* -128: not produced by the encoder */
    refix_crc(b, golden_len[CODEC_INT8]);
    assert_int_equal(DECODE(CODEC_INT8), STATUS_EMALFORMED);
    FRESH(CODEC_INT4);
    b[48] = 0x20; /* nibble 0 */
    refix_crc(b, golden_len[CODEC_INT4]);
    assert_int_equal(DECODE(CODEC_INT4), STATUS_EMALFORMED);
    FRESH(CODEC_INT4);
    b[50] = 0x1f; /* nonzero pad nibble */
    refix_crc(b, golden_len[CODEC_INT4]);
    assert_int_equal(DECODE(CODEC_INT4), STATUS_EMALFORMED);
    /* and the untouched vectors still decode */
    for (int c = 0; c < CODEC_COUNT; c++) {
        FRESH(c);
        assert_int_equal(DECODE(c), 0);
    }
#undef FRESH
#undef DECODE
}

static void test_random_corruptions(void **state)
{
    (void)state;
    enum { N = 150, CAP = 160, ITERS = 10000 };
    float x[N];
    testutil_fill_normal(x, N, 11, 1.0f);
    const int64_t shape[2] = {10, 15};
    rng_t r;
    rng_seed(&r, 20240601);
    for (int c = 0; c < CODEC_COUNT; c++) {
        size_t len;
        uint8_t *buf = encode_alloc((codec_id_t)c, 16, x, shape, 2, &len);
        int ok = 0, fail = 0;
        for (int it = 0; it < ITERS; it++) {
            size_t l = len;
            int op = (int)rng_below(&r, 4);
            if (op == 2) l = (size_t)rng_below(&r, len + 1);      /* truncate */
            if (op == 3) l = len + 1 + (size_t)rng_below(&r, 64); /* extend */
            uint8_t *t = malloc(l ? l : 1);
            for (size_t i = 0; i < l; i++) t[i] = i < len ? buf[i] : (uint8_t)rng_next(&r);
            int edits = 1 + (int)rng_below(&r, 4);
            for (int e = 0; e < edits && l; e++) {
                size_t at = (size_t)rng_below(&r, l);
                if (rng_below(&r, 2))
                    t[at] ^= (uint8_t)(1u << rng_below(&r, 8));
                else
                    t[at] = (uint8_t)rng_next(&r);
            }
            if (rng_below(&r, 2)) refix_crc(t, l); /* half the time, get past the checksum */
            float *y = malloc(CAP * sizeof *y);
            int64_t sh[CODEC_MAX_DIMS];
            int nd = -1;
            char err[STATUS_ERR_LEN];
            int rc = codec_decode(t, l, y, CAP, sh, &nd, err);
            const uint8_t *pay = NULL;
            int rc2 = codec_open(t, l, NULL, &pay, err);
            if (rc != STATUS_EINVAL) assert_int_equal(rc2, rc); /* EINVAL: y too small */
            if (!rc2) assert_ptr_equal(pay, t + CODEC_HEADER_LEN);
            if (rc == 0) {
                ok++;
                assert_true(nd >= 1 && nd <= CODEC_MAX_DIMS);
                int64_t n = 1;
                for (int d = 0; d < nd; d++) n *= sh[d];
                assert_true(n >= 1 && n <= CAP);
                for (int64_t i = 0; i < n; i++) assert_true(isfinite(y[i]));
            } else {
                fail++;
                assert_true(rc < 0);
                assert_true(strlen(err) > 0);
            }
            free(y);
            free(t);
        }
        print_message("%s: %d corruptions decoded, %d refused\n", codec_name(c), ok, fail);
        assert_true(fail > ITERS / 2);
        free(buf);
    }
}

/* codec_seal around a payload made elsewhere gives codec_encode's message; both seal and
 * codec_open refuse what a decoder refuses. */
static void test_seal_open(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    float x[37];
    testutil_fill_normal(x, 37, 5, 1.5f);
    const int64_t shape[2] = {37, 1};
    for (int c = 0; c < CODEC_COUNT; c++) {
        size_t len;
        codec_params_t cp = {.block = c == CODEC_SUBSPACE ? CODEC_SUBSPACE_MAX_MILLI : 6};
        uint8_t *buf = encode_alloc((codec_id_t)c, 6, x, shape, 2, &len), *t = malloc(len + 1);
        assert_non_null(t);
        memset(t, 0xee, CODEC_HEADER_LEN);
        memcpy(t + CODEC_HEADER_LEN, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN);
        assert_int_equal(codec_seal((codec_id_t)c, &cp, shape, 2, t, len, err), 0);
        assert_memory_equal(t, buf, len);
        codec_info_t info;
        const uint8_t *pay = NULL;
        assert_int_equal(codec_open(t, len, &info, &pay, err), 0);
        assert_ptr_equal(pay, t + CODEC_HEADER_LEN);
        assert_int_equal(info.payload_len, len - CODEC_HEADER_LEN);
        assert_int_equal(info.elems, 37);
        assert_int_equal(codec_seal((codec_id_t)c, &cp, shape, 2, t, len + 1, err), STATUS_EINVAL);
        assert_int_equal(codec_seal((codec_id_t)c, &cp, shape, 2, t, len - 1, err), STATUS_EINVAL);
        /* a value the decoder refuses, in each codec's terms */
        uint8_t *p = t + CODEC_HEADER_LEN;
        switch (c) {
        case CODEC_F32:
            memcpy(p + 8, &(float){NAN}, 4);
            break;
        case CODEC_F16:
            p[3] = 0x7c; /* element 1: infinity */
            break;
        case CODEC_BF16:
            p[3] = 0x7f, p[2] = 0x80;
            break;
        case CODEC_INT8:
            memcpy(p + 4, &(float){NAN}, 4); /* block 1's scale */
            break;
        case CODEC_INT4:
            p[len - CODEC_HEADER_LEN - 1] |= 0x10; /* the pad nibble of 37 elements */
            break;
        case CODEC_LOWRANK:
            memcpy(p, &(float){NAN}, 4); /* the basis scale */
            break;
        case CODEC_SUBSPACE:
            memcpy(p + 2, &(float){NAN}, 4); /* the row gains' base */
            break;
        }
        err[0] = 0;
        assert_int_equal(codec_seal((codec_id_t)c, &cp, shape, 2, t, len, err), STATUS_EINVAL);
        assert_true(strlen(err) > 0);
        refix_crc(t, len);
        assert_int_equal(codec_open(t, len, NULL, &pay, err), STATUS_EMALFORMED);
        if (c == CODEC_INT8) { /* a -128 */
            memcpy(t + CODEC_HEADER_LEN, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN);
            p[len - CODEC_HEADER_LEN - 2] = 0x80;
            assert_int_equal(codec_seal(CODEC_INT8, &cp, shape, 2, t, len, err), STATUS_EINVAL);
        }
        if (c == CODEC_INT4) { /* a nibble 0 */
            memcpy(t + CODEC_HEADER_LEN, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN);
            p[len - CODEC_HEADER_LEN - 2] &= 0xf0;
            assert_int_equal(codec_seal(CODEC_INT4, &cp, shape, 2, t, len, err), STATUS_EINVAL);
        }
        /* the checksum still counts */
        memcpy(t, buf, len);
        t[len - 1] ^= 1;
        assert_int_equal(codec_open(t, len, NULL, &pay, err), STATUS_ECORRUPT);
        free(t);
        free(buf);
    }
    codec_params_t odd = {.block = 3};
    uint8_t b[64] = {0};
    assert_int_equal(codec_seal(CODEC_INT4, &odd, shape, 2, b, sizeof b, err), STATUS_EINVAL);
    assert_int_equal(codec_seal((codec_id_t)7, NULL, shape, 2, b, sizeof b, err), STATUS_EINVAL);
}

/* Frobenius ||x - y|| / ||x||. */
static double rel_l2(const float *x, const float *y, size_t n)
{
    double se = 0, sx = 0;
    for (size_t i = 0; i < n; i++) {
        se += ((double)x[i] - y[i]) * ((double)x[i] - y[i]);
        sx += (double)x[i] * x[i];
    }
    return sx > 0 ? sqrt(se / sx) : sqrt(se);
}

/* lowrank: what its rank buys, its default size, determinism and its own value rules. */
static void test_lowrank(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    /* the default rank keeps the swarm's boundary tensors within 0.1 byte per element */
    const int64_t tiny[3] = {16, 64, 64}, small[3] = {8, 256, 256}, big[3] = {4, 2048, 2048};
    assert_int_equal(codec_block_for(CODEC_LOWRANK, NULL, tiny, 3), 10);
    assert_int_equal(codec_block_for(CODEC_LOWRANK, NULL, small, 3), 37);
    const int64_t *shapes[3] = {tiny, small, big};
    for (int i = 0; i < 3; i++) {
        double n = (double)(shapes[i][0] * shapes[i][1] * shapes[i][2]);
        size_t sz = codec_encoded_size(CODEC_LOWRANK, NULL, shapes[i], 3);
        assert_true(sz > 0 && (double)sz <= 0.1 * n);
    }
    /* a wish above min(M, C) is clamped; the float codecs have no block */
    codec_params_t wish = {1000};
    assert_int_equal(codec_block_for(CODEC_LOWRANK, &wish, tiny, 3), 64);
    assert_int_equal(codec_block_for(CODEC_F32, NULL, tiny, 3), 0);

    /* a rank-3 matrix (200 x 48) comes back within int4's error on the factors */
    enum { M = 201, C = 48, K = 3 };
    float *a = malloc(M * K * sizeof *a), *b = malloc(K * C * sizeof *b);
    float *x = malloc(M * C * sizeof *x), *y = malloc(M * C * sizeof *y);
    testutil_fill_normal(a, M * K, 21, 1.0f);
    testutil_fill_normal(b, K * C, 22, 1.0f);
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float v = 0;
            for (int k = 0; k < K; k++) v += a[i * K + k] * b[k * C + c] * (float)(k + 1);
            x[i * C + c] = v;
        }
    const int64_t shape[2] = {M, C};
    for (uint32_t r = 1; r <= 6; r++) {
        size_t len, len2;
        uint8_t *buf = encode_alloc(CODEC_LOWRANK, r, x, shape, 2, &len);
        uint8_t *again = encode_alloc(CODEC_LOWRANK, r, x, shape, 2, &len2);
        assert_memory_equal(buf, again, len); /* deterministic */
        assert_int_equal(buf[24], r);
        assert_int_equal(codec_decode(buf, len, y, M * C, NULL, NULL, err), 0);
        double e = rel_l2(x, y, M * C);
        print_message("lowrank rank %u of a rank-3 matrix: relative L2 error %.4f\n", r, e);
        if (r >= K) assert_true(e < 0.12); /* int4 on the factors: ~0.1, as the int4 codec */
        if (r == 1) assert_true(e > 0.2);
        free(buf);
        free(again);
    }
    /* zeros give zeros; an odd M keeps its pad nibbles 0 */
    memset(x, 0, M * C * sizeof *x);
    size_t len;
    uint8_t *buf = encode_alloc(CODEC_LOWRANK, 4, x, shape, 2, &len);
    assert_int_equal(codec_decode(buf, len, y, M * C, NULL, NULL, err), 0);
    for (int i = 0; i < M * C; i++) assert_true(y[i] == 0.0f);
    /* value rules, with a valid checksum: rank 0 or above min(M, C) in the header, a basis
     * scale above 1/127, a -128, a factor scale above 2^100, a nibble 0, a pad nibble */
    uint8_t *t = malloc(len);
    const size_t ru = 4 * 4 + 4 * C; /* where the factor scales start (rank 4) */
    const size_t un = ru + 4 * 4 * ((M + 63) / 64);
    for (int k = 0; k < 7; k++) {
        memcpy(t, buf, len);
        uint8_t *p = t + CODEC_HEADER_LEN;
        switch (k) {
        case 0:
            t[24] = 0;
            break;
        case 1:
            le_put_u32(t + 24, C + 1);
            break;
        case 2:
            memcpy(p + 4, &(float){1.0f / 126.0f}, 4);
            break;
        case 3:
            p[16] = 0x80;
            break;
        case 4:
            memcpy(p + ru, &(float){0x1.0p101f}, 4);
            break;
        case 5:
            p[un] = 0x08;
            break;
        case 6:
            p[un + (M + 1) / 2 - 1] = 0x18;
            break;
        }
        refix_crc(t, len);
        err[0] = 0;
        assert_int_equal(codec_decode(t, len, y, M * C, NULL, NULL, err), STATUS_EMALFORMED);
        assert_true(strlen(err) > 0);
    }
    free(t);
    free(buf);
    /* values whose factors cannot be scaled are refused, not sent as infinities */
    for (int i = 0; i < M * C; i++) x[i] = (i % 3 ? 1 : -1) * 1e36f;
    size_t w;
    uint8_t *o = malloc(codec_encoded_size(CODEC_LOWRANK, NULL, shape, 2));
    assert_int_equal(codec_encode(CODEC_LOWRANK, NULL, x, shape, 2, o,
                                  codec_encoded_size(CODEC_LOWRANK, NULL, shape, 2), &w, err),
                     STATUS_EINVAL);
    free(o);
    free(a);
    free(b);
    free(x);
    free(y);
}

/* subspace: the budget it fills, what it keeps of a low-rank matrix, determinism and its
 * own value rules. */
static void test_subspace(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    /* the default budget: 0.1 octet per element, header included, filled to the octet */
    const int64_t tiny[3] = {16, 64, 64}, small[3] = {8, 256, 256};
    const int64_t *shapes[2] = {tiny, small};
    for (int i = 0; i < 2; i++) {
        uint64_t n = (uint64_t)(shapes[i][0] * shapes[i][1] * shapes[i][2]);
        assert_int_equal(codec_block_for(CODEC_SUBSPACE, NULL, shapes[i], 3),
                         CODEC_SUBSPACE_DEFAULT_MILLI);
        assert_int_equal(codec_encoded_size(CODEC_SUBSPACE, NULL, shapes[i], 3), n / 10);
    }
    /* a budget without room for one component at one bit, or above the largest, is refused */
    codec_params_t tight = {1}, over = {CODEC_SUBSPACE_MAX_MILLI + 1};
    assert_int_equal(codec_encoded_size(CODEC_SUBSPACE, &tight, tiny, 3), 0);
    assert_int_equal(codec_encoded_size(CODEC_SUBSPACE, &over, tiny, 3), 0);

    /* a rank-3 matrix with rows of very different norms comes back nearly whole from 0.2
     * octet per element (its components at 8 bits, the rest of a larger budget is spent on
     * directions of float rounding and does not help) */
    enum { M = 203, C = 48, K = 3 };
    float *a = malloc(M * K * sizeof *a), *b = malloc(K * C * sizeof *b);
    float *x = malloc(M * C * sizeof *x), *y = malloc(M * C * sizeof *y);
    testutil_fill_normal(a, M * K, 21, 1.0f);
    testutil_fill_normal(b, K * C, 22, 1.0f);
    for (int i = 0; i < M; i++)
        for (int c = 0; c < C; c++) {
            float v = 0;
            for (int k = 0; k < K; k++) v += a[i * K + k] * b[k * C + c] * (float)(k + 1);
            x[i * C + c] = v * (float)(1 + i % 7);
        }
    const int64_t shape[2] = {M, C};
    const uint32_t budgets[] = {200, 500, 1000};
    for (int t = 0; t < 3; t++) {
        size_t len, len2;
        uint8_t *buf = encode_alloc(CODEC_SUBSPACE, budgets[t], x, shape, 2, &len);
        uint8_t *again = encode_alloc(CODEC_SUBSPACE, budgets[t], x, shape, 2, &len2);
        assert_memory_equal(buf, again, len); /* deterministic */
        assert_int_equal(len, (size_t)M * C * budgets[t] / 1000);
        assert_int_equal(codec_decode(buf, len, y, M * C, NULL, NULL, err), 0);
        double e = rel_l2(x, y, M * C);
        print_message("subspace at %u milli-octets/element, a rank-3 matrix: %u components, "
                      "relative L2 error %.4f\n",
                      budgets[t], le_get_u16(buf + CODEC_HEADER_LEN), e);
        assert_true(e < 0.03);
        free(buf);
        free(again);
    }
    /* zeros give zeros */
    float *z = calloc(M * C, sizeof *z);
    size_t len;
    uint8_t *buf = encode_alloc(CODEC_SUBSPACE, 500, z, shape, 2, &len);
    assert_int_equal(codec_decode(buf, len, y, M * C, NULL, NULL, err), 0);
    for (int i = 0; i < M * C; i++) assert_true(y[i] == 0.0f);
    free(buf);
    /* value rules, with a valid checksum: 0 components, more than min(M, C), a bad row
     * base, a width 0 or 9, a bad basis scale, a -128, a bad step, nonzero padding */
    buf = encode_alloc(CODEC_SUBSPACE, 500, x, shape, 2, &len);
    const size_t r = le_get_u16(buf + CODEC_HEADER_LEN), wid = 6 + M, vs = wid + r;
    const size_t vq = vs + 4 * r, st = vq + r * C;
    uint8_t *t = malloc(len);
    for (int k = 0; k < 9; k++) {
        memcpy(t, buf, len);
        uint8_t *p = t + CODEC_HEADER_LEN;
        switch (k) {
        case 0:
            le_put_u16(p, 0);
            break;
        case 1:
            le_put_u16(p, C + 1);
            break;
        case 2:
            memcpy(p + 2, &(float){0x1.0p101f}, 4);
            break;
        case 3:
            p[wid] = 0;
            break;
        case 4:
            p[wid] = 9;
            break;
        case 5:
            memcpy(p + vs, &(float){1.0f / 126.0f}, 4);
            break;
        case 6:
            p[vq + 1] = 0x80;
            break;
        case 7:
            memcpy(p + st, &(float){-1.0f}, 4);
            break;
        case 8:
            p[len - CODEC_HEADER_LEN - 1] = 0x80; /* the budget is not filled to the bit */
            break;
        }
        refix_crc(t, len);
        err[0] = 0;
        int rc = codec_decode(t, len, y, M * C, NULL, NULL, err);
        if (rc != STATUS_EMALFORMED) print_error("case %d: %d %s\n", k, rc, err);
        assert_int_equal(rc, STATUS_EMALFORMED);
        assert_true(strlen(err) > 0);
    }
    free(t);
    free(buf);
    /* rows whose norm cannot be scaled are refused, not sent as infinities */
    for (int i = 0; i < M * C; i++) x[i] = (i % 3 ? 1 : -1) * 1e36f;
    codec_params_t half = {500};
    size_t cap = codec_encoded_size(CODEC_SUBSPACE, &half, shape, 2), w;
    uint8_t *o = malloc(cap);
    assert_int_equal(codec_encode(CODEC_SUBSPACE, &half, x, shape, 2, o, cap, &w, err),
                     STATUS_EINVAL);
    free(o);
    free(z);
    free(a);
    free(b);
    free(x);
    free(y);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names),
        cmocka_unit_test(test_crc32c),
        cmocka_unit_test(test_f16_rounding),
        cmocka_unit_test(test_golden),
        cmocka_unit_test(test_round_trips),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_truncations),
        cmocka_unit_test(test_header_checks),
        cmocka_unit_test(test_random_corruptions),
        cmocka_unit_test(test_seal_open),
        cmocka_unit_test(test_lowrank),
        cmocka_unit_test(test_subspace),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
