/* fuzz_demo.c — fuzz target: DeMo messages (compress/demo.c, docs/codec-format.md): the
 * self-describing version-1 message "STDM" (demo_msg_parse, demo_msg_unpack) and the
 * bit-packed version-2 bodies of a stage message (demo_body_unpack_ex, demo_body_add_ex).
 *
 * Input: a mode octet. Mode even: a v1 message follows (mode bit 1: the target writes its
 * correct CRC-32C first). Mode odd: body parameters (rows u8, cols u8, chunk u8, k u8,
 * value format, index mode, bit position u8, seed u64), then the buffer holding the body.
 * Invariants: parse and unpack agree; an accepted message or body, packed again from its
 * decoded entries, decodes to the same entries (v1 top-k: the same bytes, but for the
 * canonical zero: pack writes +0 and a sign of 0 as +); demo_body_add accepts exactly the
 * bodies unpack accepts and leaves sum/cnt alone when it refuses.
 *
 * Not for: the stage message frame (fuzz_demo_opt.c). */
#include "fuzz.h"
#include "common/le.h"

#include "common/status.h"
#include "compress/codec.h"
#include "compress/demo.h"

#include <math.h>
#include <string.h>

static void v1(const uint8_t *data, size_t size, int fix_crc)
{
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return;
    memcpy(buf, data, size);
    if (fix_crc && size >= DEMO_HEADER_LEN) {
        uint32_t crc = codec_crc32c(0, buf, 28);
        le_put_u32(buf + 28, codec_crc32c(crc, buf + DEMO_HEADER_LEN, size - DEMO_HEADER_LEN));
    }
    char err[STATUS_ERR_LEN];
    demo_msg_info_t info, info2;
    int parse = demo_msg_parse(buf, size, &info, err);
    uint16_t one_i;
    float one_v;
    int unpack0 = demo_msg_unpack(buf, size, &info2, &one_i, &one_v, 1, err);
    if (parse) {
        FUZZ_CHECK(unpack0 != 0 && unpack0 != STATUS_EINVAL);
        free(buf);
        return;
    }
    fuzz_accepted++;
    uint64_t ne = (uint64_t)info.tiles * (uint64_t)info.k;
    FUZZ_CHECK(info.payload_len == size - DEMO_HEADER_LEN);
    FUZZ_CHECK(unpack0 == 0 ? ne <= 1 : unpack0 == STATUS_EINVAL);
    uint16_t *idx = malloc(ne * sizeof *idx), *idx2 = malloc(ne * sizeof *idx2);
    float *val = malloc(ne * sizeof *val), *val2 = malloc(ne * sizeof *val2);
    uint8_t *re = malloc(size);
    FUZZ_CHECK(idx && idx2 && val && val2 && re);
    FUZZ_CHECK(demo_msg_unpack(buf, size, &info2, idx, val, ne, err) == 0);
    int neg_zero = 0;
    for (uint64_t e = 0; e < ne; e++) {
        FUZZ_CHECK(idx[e] < info.tile_rows * info.tile_cols);
        FUZZ_CHECK(fabsf(val[e]) <= 1e30f);
        neg_zero |= val[e] == 0 && signbit(val[e]);
    }
    size_t wrote = 0;
    FUZZ_CHECK(demo_msg_pack(re, size, &wrote, info.rows, info.cols, info.chunk, info.k, info.vfmt,
                             info.xform, info.dense ? NULL : idx, val, err) == 0);
    FUZZ_CHECK(wrote == size);
    FUZZ_CHECK(demo_msg_unpack(re, wrote, &info2, idx2, val2, ne, err) == 0);
    for (uint64_t e = 0; e < ne; e++) FUZZ_CHECK(idx2[e] == idx[e] && val2[e] == val[e]);
    if (!neg_zero && !(info.vfmt == DEMO_VAL_SIGN && info.scale == 0))
        FUZZ_CHECK(!memcmp(re, buf, size));
    free(idx);
    free(idx2);
    free(val);
    free(val2);
    free(re);
    free(buf);
}

static void body(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    /* at most 64 x 64: tiles of up to 4096 coefficients (16-bit indices) at a bounded cost */
    int64_t rows = 1 + (int64_t)(fuzz_u(&in, 1) % 64), cols = 1 + (int64_t)(fuzz_u(&in, 1) % 64);
    int chunk = 1 + (int)fuzz_u(&in, 1);
    int k = 1 + (int)fuzz_u(&in, 1);
    demo_vfmt_t vfmt = (demo_vfmt_t)(fuzz_u(&in, 1) % 3);
    demo_imode_t imode = (demo_imode_t)(fuzz_u(&in, 1) & 1);
    uint64_t bitpos = fuzz_u(&in, 1) % 64;
    uint64_t seed = fuzz_u(&in, 8);
    size_t len;
    const uint8_t *src = fuzz_rest(&in, &len);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return;
    memcpy(buf, src, len);
    size_t n = (size_t)(rows * cols);
    uint16_t *idx = malloc(n * sizeof *idx), *idx2 = malloc(n * sizeof *idx2);
    float *val = malloc(n * sizeof *val), *val2 = malloc(n * sizeof *val2);
    double *sum = calloc(n, sizeof *sum);
    uint32_t *cnt = calloc(n, sizeof *cnt);
    uint8_t *re = calloc(len ? len : 1, 1);
    char err[STATUS_ERR_LEN];
    /* the receiver's state for (rows, cols, chunk), kept while the input's stays the same */
    static demo_t *d;
    static int64_t d_rows, d_cols;
    static int d_chunk;
    if (!d || d_rows != rows || d_cols != cols || d_chunk != chunk) {
        demo_destroy(&d);
        demo_cfg_t cfg = {.chunk = chunk, .k = k, .vfmt = vfmt, .beta = 0.9f, .imode = imode};
        d = demo_new(rows, cols, &cfg, err);
        d_rows = rows;
        d_cols = cols;
        d_chunk = chunk;
    }
    FUZZ_CHECK(idx && idx2 && val && val2 && sum && cnt && re && d);
    float scale = -1, scale2 = -1;
    int rc = demo_body_unpack_ex(buf, len, bitpos, rows, cols, chunk, k, vfmt, imode, seed, idx,
                                 val, n, &scale, err);
    int add = demo_body_add_ex(d, buf, len, bitpos, k, vfmt, imode, seed, sum, cnt, err);
    FUZZ_CHECK((rc == 0) == (add == 0));
    if (rc) {
        for (size_t i = 0; i < n; i++) FUZZ_CHECK(sum[i] == 0 && cnt[i] == 0);
        goto done;
    }
    fuzz_accepted++;
    uint64_t bits = demo_body_bits_ex(rows, cols, chunk, k, vfmt, imode);
    int per_tile = demo_entries_per_tile_ex(rows, cols, chunk, k, vfmt, imode);
    FUZZ_CHECK(bits > 0 && per_tile > 0 && bitpos + bits <= 8 * (uint64_t)len);
    size_t ne = n / (size_t)demo_entries_per_tile_ex(rows, cols, chunk, 1 << 20, vfmt, imode) *
                (size_t)per_tile; /* tiles * entries per tile */
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) total += cnt[i];
    FUZZ_CHECK(total == ne);
    FUZZ_CHECK(demo_body_pack_ex(re, len, bitpos, rows, cols, chunk, k, vfmt, imode, seed, idx, val,
                                 err) == 0);
    FUZZ_CHECK(demo_body_unpack_ex(re, len, bitpos, rows, cols, chunk, k, vfmt, imode, seed, idx2,
                                   val2, n, &scale2, err) == 0);
    FUZZ_CHECK(scale2 == scale);
    for (size_t e = 0; e < ne; e++) FUZZ_CHECK(idx2[e] == idx[e] && val2[e] == val[e]);
done:
    free(idx);
    free(idx2);
    free(val);
    free(val2);
    free(sum);
    free(cnt);
    free(re);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    if (data[0] & 1)
        body(data + 1, size - 1);
    else
        v1(data + 1, size - 1, data[0] & 2);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const struct {
        int rows, cols, chunk, k;
    } shapes[] = {{8, 8, 4, 2}, {1, 24, 8, 3}, {16, 20, 16, 5}, {3, 5, 2, 4}, {32, 17, 32, 1}};
    char err[STATUS_ERR_LEN];
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        for (int f = 0; f < 3; f++) {
            for (int imode = 0; imode < 2; imode++) {
                demo_cfg_t cfg = {.chunk = shapes[s].chunk,
                                  .k = shapes[s].k,
                                  .vfmt = (demo_vfmt_t)f,
                                  .beta = 0.9f,
                                  .imode = (demo_imode_t)imode};
                int64_t r = shapes[s].rows, c = shapes[s].cols, n = r * c;
                demo_t *d = demo_new(r, c, &cfg, err);
                if (!d) continue;
                float *g = malloc((size_t)n * sizeof *g);
                for (int64_t i = 0; i < n; i++) g[i] = sinf((float)(i * 7 + s)) * (i % 5 ? 1 : -3);
                if (demo_accumulate(d, g, 0.01f, err)) goto next;
                uint8_t buf[1 + 16 + 8192];
                char name[64];
                if (imode == 0) { /* a v1 message */
                    size_t w = 0;
                    if (demo_extract(d, buf + 1, sizeof buf - 1, &w, err) == 0) {
                        buf[0] = 0;
                        snprintf(name, sizeof name, "v1-%zu-%d", s, f);
                        emit(ctx, name, buf, w + 1);
                        buf[0] = 2;
                        snprintf(name, sizeof name, "v1-%zu-%d-fixcrc", s, f);
                        emit(ctx, name, buf, w + 1);
                    }
                    if (demo_accumulate(d, g, 0.01f, err)) goto next;
                }
                /* a body at bit 3 */
                uint64_t seed = 0x1234567 + s, bits = demo_body_size(d);
                uint8_t *p = buf + 1 + 15;
                size_t len = (3 + bits + 7) / 8;
                if (len > sizeof buf - 16) goto next;
                memset(p, 0, len);
                if (demo_extract_body_ex(d, p, len, 3, seed, err)) goto next;
                buf[0] = 1;
                buf[1] = (uint8_t)(r - 1);
                buf[2] = (uint8_t)(c - 1);
                buf[3] = (uint8_t)(shapes[s].chunk - 1);
                buf[4] = (uint8_t)(shapes[s].k - 1);
                buf[5] = (uint8_t)f;
                buf[6] = (uint8_t)imode;
                buf[7] = 3;
                for (int i = 0; i < 8; i++) buf[8 + i] = (uint8_t)(seed >> (8 * i));
                snprintf(name, sizeof name, "body-%zu-%d-%d", s, f, imode);
                emit(ctx, name, buf, 16 + len);
            next:
                free(g);
                demo_destroy(&d);
            }
        }
    }
}
