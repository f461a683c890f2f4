/* demo_wire.c — the octets of a DeMo stage message's frame: header, checksum, table
 * fingerprint, padding (demo_wire.h, docs/codec-format.md 4). Readers check the length
 * before every read.
 * Not for: the bodies (demo.c) or what a stage does with a message (model/demo_opt.c). */
#include "compress/demo_wire.h"
#include "common/le.h"
#include "common/status.h"
#include "compress/codec.h"

#include <string.h>

uint32_t demo_stage_table_add(uint32_t crc, int64_t rows, int64_t cols)
{
    uint8_t b[8];
    le_put_u32(b, (uint32_t)rows);
    le_put_u32(b + 4, (uint32_t)cols);
    return codec_crc32c(crc, b, 8);
}

void demo_stage_hdr_put(uint8_t *msg, const demo_stage_hdr_t *h)
{
    memcpy(msg, "STDX", 4);
    msg[4] = DEMO_STAGE_VERSION;
    msg[5] = (uint8_t)h->vfmt;
    le_put_u16(msg + 6, (uint16_t)h->chunk);
    le_put_uint(msg + 8, h->k, 3);
    msg[11] = (uint8_t)((unsigned)h->imode | (unsigned)h->xform << 4);
    le_put_u32(msg + 12, h->ntensors);
    le_put_u64(msg + 16, (uint64_t)h->step);
    le_put_u32(msg + 24, h->table);
}

int demo_stage_hdr_get(const uint8_t *m, size_t len, demo_stage_hdr_t *h, char *err)
{
    if (!m || len < DEMO_STAGE_HEADER_LEN)
        return status_set(err, STATUS_EMALFORMED, "stage message: truncated header (%zu bytes)",
                          m ? len : 0);
    if (memcmp(m, "STDX", 4)) return status_set(err, STATUS_EMALFORMED, "stage message: bad magic");
    if (m[4] != DEMO_STAGE_VERSION)
        return status_set(err, STATUS_EVERSION, "stage message version %d (we speak %d)", m[4],
                          DEMO_STAGE_VERSION);
    if (m[5] > DEMO_VAL_SIGN)
        return status_set(err, STATUS_EMALFORMED, "stage message: unknown value format %d", m[5]);
    if ((m[11] & 15) > DEMO_IDX_SHARED)
        return status_set(err, STATUS_EMALFORMED, "stage message: unknown index mode %d",
                          m[11] & 15);
    if (m[11] >> 4 > DEMO_XFORM_NONE)
        return status_set(err, STATUS_EMALFORMED, "stage message: unknown transform %d",
                          m[11] >> 4);
    h->version = m[4];
    h->vfmt = (demo_vfmt_t)m[5];
    h->chunk = le_get_u16(m + 6);
    h->k = (uint32_t)le_get_uint(m + 8, 3);
    h->imode = (demo_imode_t)(m[11] & 15);
    h->xform = (demo_xform_t)(m[11] >> 4);
    h->ntensors = le_get_u32(m + 12);
    h->step = (int64_t)le_get_u64(m + 16);
    h->table = le_get_u32(m + 24);
    h->crc = le_get_u32(m + 28);
    return 0;
}

uint32_t demo_stage_crc(const uint8_t *msg, size_t len)
{
    uint32_t crc = codec_crc32c(0, msg, 28);
    return codec_crc32c(crc, msg + DEMO_STAGE_HEADER_LEN, len - DEMO_STAGE_HEADER_LEN);
}

void demo_stage_seal(uint8_t *msg, size_t len)
{
    le_put_u32(msg + 28, demo_stage_crc(msg, len));
}

int demo_stage_check_crc(const uint8_t *msg, size_t len, char *err)
{
    if (demo_stage_crc(msg, len) != le_get_u32(msg + 28))
        return status_set(err, STATUS_ECORRUPT, "stage message: checksum");
    return 0;
}

int demo_stage_check_padding(const uint8_t *msg, size_t len, uint64_t body_bits, char *err)
{
    if (body_bits & 7 && msg[len - 1] >> (body_bits & 7))
        return status_set(err, STATUS_EMALFORMED, "stage message: nonzero padding bits");
    return 0;
}
