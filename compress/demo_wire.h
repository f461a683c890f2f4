/* demo_wire.h — the frame of a DeMo stage message ("STDX", docs/codec-format.md 4): its
 * 32-octet header, octet by octet, the checksum that seals it, the fingerprint of the
 * tensor table it names, and the padding rule of its last octet.
 *
 *   offset  size  field
 *   0       4     magic "STDX"
 *   4       1     version (DEMO_STAGE_VERSION)
 *   5       1     value format (demo_vfmt_t)
 *   6       2     chunk u16
 *   8       3     k u24 (entries per tile)
 *   11      1     index mode (demo_imode_t), low 4 bits; transform (demo_xform_t), high 4
 *   12      4     tensors u32
 *   16      8     step i64
 *   24      4     table u32: CRC-32C of (rows u32, cols u32) of every tensor, table order
 *   28      4     crc u32: CRC-32C of octets 0..27 and 32..end
 *   32      ...   the bodies (compress/demo.h), back to back, zero bits to the last octet
 *
 * The bodies and their lengths follow from a stage's tensor table (model/demo_opt.c), so
 * this file checks what the header alone can: the caller checks chunk, k's range, the
 * tensor count, the table, the step and the length against its own stage, in that order,
 * then the checksum and the padding here.
 *
 * Not for: the bodies (demo.h), the tensor table (model/stage.h), applying messages.
 */
#ifndef SWARMTRAIN_DEMO_WIRE_H
#define SWARMTRAIN_DEMO_WIRE_H

#include "compress/demo.h"

#include <stddef.h>
#include <stdint.h>

#define DEMO_STAGE_VERSION    3
#define DEMO_STAGE_HEADER_LEN 32

/* What a stage message's header says. */
typedef struct {
    int version;
    demo_vfmt_t vfmt;
    int chunk;
    uint32_t k; /* 24 bits on the wire */
    demo_imode_t imode;
    demo_xform_t xform;
    uint32_t ntensors;
    int64_t step;
    uint32_t table; /* demo_stage_table_add over the tensors */
    uint32_t crc;
} demo_stage_hdr_t;

/* The table fingerprint: fold one tensor's shape into crc (start from 0). Can't fail. */
uint32_t demo_stage_table_add(uint32_t crc, int64_t rows, int64_t cols);

/* Writes octets 0..27 of a header (magic, version DEMO_STAGE_VERSION, h's fields; h->version
 * and h->crc are not read). h->k must be below 2^24. The checksum is demo_stage_seal's. */
void demo_stage_hdr_put(uint8_t *msg, const demo_stage_hdr_t *h);

/* Reads a header into *h, checking, in this order: at least 32 octets (msg may be NULL),
 * the magic, the version (STATUS_EVERSION), the value format, the index mode and the
 * transform (STATUS_EMALFORMED). 0, or the status and one line in err. */
int demo_stage_hdr_get(const uint8_t *msg, size_t len, demo_stage_hdr_t *h, char *err);

/* The checksum of a message of len >= 32 octets (octets 28..31 left out). */
uint32_t demo_stage_crc(const uint8_t *msg, size_t len);

/* Writes demo_stage_crc into octets 28..31. */
void demo_stage_seal(uint8_t *msg, size_t len);

/* Whether the checksum in octets 28..31 matches: 0, or STATUS_ECORRUPT and err. */
int demo_stage_check_crc(const uint8_t *msg, size_t len, char *err);

/* Whether the bits after body_bits of the bodies (the last octet's padding) are zero:
 * 0, or STATUS_EMALFORMED and err. len must be DEMO_STAGE_HEADER_LEN + ceil(body_bits / 8). */
int demo_stage_check_padding(const uint8_t *msg, size_t len, uint64_t body_bits, char *err);

#endif
