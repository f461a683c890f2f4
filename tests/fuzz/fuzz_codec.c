/* fuzz_codec.c — fuzz target: the activation/gradient codec format "STAC"
 * (compress/codec.c, docs/codec-format.md): codec_peek, codec_open, codec_decode, and
 * codec_seal on the same bytes.
 *
 * Input: one flag octet, then the message. Flag bit 0 set: the target first writes the
 * correct CRC-32C into the header, so that mutations reach the value checks behind it.
 * Invariants: decode and open accept the same messages; an accepted message of a float
 * codec re-encodes to exactly its bytes; an int8/int4 one re-encodes to values within the
 * format's error bound of the decoded ones, a lowrank one to a message of the same rank
 * and a subspace one to a message of the same length, each decoding to finite values (or
 * a refusal: values too large to scale); sealing an
 * accepted payload gives back its header; a payload that seals decodes.
 *
 * Not for: the DeMo messages (fuzz_demo.c). */
#include "fuzz.h"
#include "common/le.h"

#include "common/status.h"
#include "compress/codec.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    int fix_crc = data[0] & 1;
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
    if (fix_crc && len >= CODEC_HEADER_LEN) {
        uint32_t crc = codec_crc32c(0, buf, 36);
        le_put_u32(buf + 36, codec_crc32c(crc, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN));
    }
    char err[STATUS_ERR_LEN];
    codec_info_t info;
    int peek = codec_peek(buf, len, &info, err);
    const uint8_t *payload = NULL;
    codec_info_t oinfo;
    int open = codec_open(buf, len, &oinfo, &payload, err);
    float *x = NULL, *y = NULL;
    uint8_t *re = NULL;
    if (peek) {
        FUZZ_CHECK(open != 0);
        goto done;
    }
    FUZZ_CHECK(info.payload_len == len - CODEC_HEADER_LEN && info.elems >= 1);
    if (info.elems > (1u << 22)) goto done; /* a valid message this large is not an input */
    x = malloc(info.elems * sizeof *x);
    if (!x) goto done;
    int64_t shape[CODEC_MAX_DIMS];
    int ndim = 0;
    int dec = codec_decode(buf, len, x, info.elems, shape, &ndim, err);
    FUZZ_CHECK((dec == 0) == (open == 0));
    /* a payload seals iff its values decode (the header is rewritten from the shape) */
    codec_params_t params = {.block = info.block};
    uint8_t *sealed = malloc(len);
    if (!sealed) goto done;
    memcpy(sealed, buf, len);
    memset(sealed, 0, CODEC_HEADER_LEN);
    int seal = codec_seal(info.codec, &params, info.shape, info.ndim, sealed, len, err);
    if (dec == 0) {
        FUZZ_CHECK(seal == 0 && !memcmp(sealed, buf, len));
    } else if (seal == 0) { /* then only the CRC was wrong */
        FUZZ_CHECK(le_get_u32(buf + 36) != le_get_u32(sealed + 36));
        FUZZ_CHECK(codec_decode(sealed, len, x, info.elems, NULL, NULL, err) == 0);
    }
    free(sealed);
    if (dec) goto done;
    fuzz_accepted++;
    FUZZ_CHECK(ndim == info.ndim && oinfo.elems == info.elems);
    FUZZ_CHECK(payload == buf + CODEC_HEADER_LEN);
    for (uint64_t i = 0; i < info.elems; i++) FUZZ_CHECK(isfinite(x[i]));

    /* re-encode what was decoded */
    size_t cap = codec_encoded_size(info.codec, &params, shape, ndim), wrote = 0;
    FUZZ_CHECK(cap == len);
    re = malloc(cap);
    y = malloc(info.elems * sizeof *y);
    if (!re || !y) goto done;
    int enc = codec_encode(info.codec, &params, x, shape, ndim, re, cap, &wrote, err);
    if (info.codec == CODEC_LOWRANK || info.codec == CODEC_SUBSPACE) {
        /* lossy without a per-element bound; it may refuse decoded values whose factors
         * would exceed its scale limit, else what it sends decodes, finite, at the same rank
         * (lowrank) or budget (subspace: the block field) */
        FUZZ_CHECK(enc == 0 || enc == STATUS_EINVAL);
        if (enc) goto done;
        FUZZ_CHECK(wrote == len && !memcmp(re + 24, buf + 24, 4));
        FUZZ_CHECK(codec_decode(re, wrote, y, info.elems, NULL, NULL, err) == 0);
        for (uint64_t i = 0; i < info.elems; i++) FUZZ_CHECK(isfinite(y[i]));
        goto done;
    }
    FUZZ_CHECK(enc == 0);
    FUZZ_CHECK(wrote == len);
    if (info.codec == CODEC_F32 || info.codec == CODEC_F16 || info.codec == CODEC_BF16) {
        FUZZ_CHECK(!memcmp(re, buf, len));
    } else {
        FUZZ_CHECK(codec_decode(re, wrote, y, info.elems, NULL, NULL, err) == 0);
        uint32_t block = info.block;
        for (uint64_t b = 0; b * block < info.elems; b++) {
            uint64_t off = b * block, n = info.elems - off < block ? info.elems - off : block;
            float a = 0;
            for (uint64_t i = 0; i < n; i++) a = fmaxf(a, fabsf(x[off + i]));
            float bound = (info.codec == CODEC_INT8 ? a / 254 : a / 14) * 1.0001f + 1e-30f;
            for (uint64_t i = 0; i < n; i++) FUZZ_CHECK(fabsf(y[off + i] - x[off + i]) <= bound);
        }
    }
done:
    free(x);
    free(y);
    free(re);
    free(buf);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const int64_t shapes[][CODEC_MAX_DIMS + 1] = {
        {1, 7}, {2, 3, 5}, {3, 2, 2, 4}, {4, 1, 2, 3, 2}, {1, 33}};
    float x[64];
    for (int i = 0; i < 64; i++) x[i] = (float)((i * 37) % 23 - 11) * 0.37f + (i == 5 ? 0 : 1e-3f);
    uint8_t buf[1 + 2048];
    char err[STATUS_ERR_LEN];
    for (int c = 0; c < CODEC_COUNT; c++) {
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            int ndim = (int)shapes[s][0];
            const int64_t *shape = shapes[s] + 1;
            codec_params_t params = {.block = (s & 1) ? 4 : 8};
            if (c == CODEC_SUBSPACE) /* budgets in milli-octets per element with room */
                params.block = (s & 1) ? CODEC_SUBSPACE_MAX_MILLI : 20000;
            size_t wrote = 0;
            if (codec_encode((codec_id_t)c, &params, x, shape, ndim, buf + 1, sizeof buf - 1,
                             &wrote, err))
                continue;
            for (int flag = 0; flag < 2; flag++) {
                buf[0] = (uint8_t)flag;
                char name[64];
                snprintf(name, sizeof name, "%s-%zu-%s", codec_name(c), s,
                         flag ? "fixcrc" : "as-is");
                emit(ctx, name, buf, wrote + 1);
            }
        }
    }
}
