/* test_msg.c — unit tests of swarm/msg (docs/protocol.md): the wire layout of every
 * message type against an independent encoder written from the spec, round trips with
 * every field checked, member tables, every truncation point, 10,000 seeded random
 * corruptions of headers and of tables (run under ASan + UBSan: every decode reads from
 * a heap buffer of exactly the frame's length), version and magic, reserved bits, each
 * out-of-range field at its boundary, and what msg_encode refuses.
 * Not for: sockets, gossip or what peers do with messages (net.c, peer.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/status.h"
#include "swarm/msg.h"

#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes the spec gives (docs/protocol.md, sections 5 and 6). */
#define COMMON_LEN   56
#define MB_LEN       15
#define MEMBER_FIXED 201 /* 113 + 3 checkpoint steps + the owner's 64-octet signature */

/* ---- an independent encoder, written from the spec's tables ----------------------- */

typedef struct {
    uint8_t b[1 << 18];
    size_t n;
} bb_t;

static void put(bb_t *b, const void *src, size_t n)
{
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, src, n);
    b->n += n;
}

static void put_u(bb_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++) {
        uint8_t o = (uint8_t)(v >> (8 * i));
        put(b, &o, 1);
    }
}

static void put_f32(bb_t *b, float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    put_u(b, u, 4);
}

/* Spec strings: u16 length, then that many octets from s (which may hold NULs). */
static void put_str(bb_t *b, const char *s, size_t n)
{
    put_u(b, n, 2);
    put(b, s, n);
}

/* Deviations from a well-formed header, to build malformed input on purpose. */
typedef struct {
    const char *magic; /* NULL: "SWT" */
    int version;       /* 0: MSG_VERSION */
    uint16_t reserved;
    long str_len; /* < 0: strlen of the string field */
} wire_opts_t;

/* The route id at hop i, distinct for every hop and octet. */
static void route_id(uint8_t id[MSG_ID_LEN], int i)
{
    for (int j = 0; j < MSG_ID_LEN; j++) id[j] = (uint8_t)(0x40 + i * 3 + j);
}

static void spec_encode(bb_t *b, const msg_t *m, const wire_opts_t *o)
{
    static const wire_opts_t none = {.str_len = -1};
    if (!o) o = &none;
    b->n = 0;
    put(b, o->magic ? o->magic : "SWT", 3);
    put_u(b, o->version ? (uint64_t)o->version : MSG_VERSION, 1);
    put_u(b, m->type, 1);
    put_u(b, m->flags, 1);
    put_u(b, o->reserved, 2);
    put_u(b, m->swarm, 8);
    put(b, m->sender, MSG_ID_LEN);
    put_u(b, m->seq, 8);
    const char *s = NULL;
    switch (m->type) {
    case MSG_HELLO:
    case MSG_WELCOME:
        s = m->addr;
        break;
    case MSG_NACK:
    case MSG_LEAVE:
    case MSG_ERROR:
        s = m->text;
        break;
    default:
        break;
    }
    size_t slen = s ? (o->str_len >= 0 ? (size_t)o->str_len : strlen(s)) : 0;
    switch (m->type) {
    case MSG_HELLO:
        put_str(b, s, slen);
        put_u(b, (uint16_t)m->stage, 2);
        break;
    case MSG_WELCOME:
        put_str(b, s, slen);
        break;
    case MSG_FWD:
    case MSG_BWD:
    case MSG_NACK:
        put_u(b, (uint64_t)m->mb.step, 8);
        put_u(b, m->mb.index, 4);
        put_u(b, m->mb.attempt, 2);
        put_u(b, m->mb.kind, 1);
        put_u(b, (uint16_t)m->stage, 2);
        put_u(b, m->nroute, 1);
        for (int i = 0; i < m->nroute; i++) {
            uint8_t id[MSG_ID_LEN];
            if (i < MSG_ROUTE_MAX)
                memcpy(id, m->route[i], MSG_ID_LEN);
            else
                route_id(id, i);
            put(b, id, MSG_ID_LEN);
        }
        put_f32(b, m->loss);
        put_u(b, m->skip, 8);
        if (m->type == MSG_NACK) put_str(b, s, slen);
        break;
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_EXCH:
    case MSG_EXCH_REQ:
    case MSG_REDO:
        put_u(b, (uint16_t)m->stage, 2);
        put_u(b, (uint64_t)m->step, 8);
        put_u(b, m->count, 4);
        put_u(b, m->hash, 8);
        put_u(b, (uint64_t)m->since, 8);
        if (m->type == MSG_EXCH || m->type == MSG_EXCH_REQ) put(b, m->origin, MSG_ID_LEN);
        break;
    case MSG_RELAY:
        put(b, m->dest, MSG_ID_LEN);
        break;
    case MSG_PROBE:
        put_u(b, m->probe_kind, 1);
        put_u(b, m->probe, 8);
        put(b, m->dest, MSG_ID_LEN);
        put_u(b, m->count, 4);
        break;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        put_u(b, (uint16_t)m->stage, 2);
        put_u(b, (uint64_t)m->step, 8);
        put_u(b, m->offset, 8);
        put_u(b, m->total, 8);
        put_u(b, m->length, 4);
        put(b, m->state_hash, 32);
        break;
    case MSG_LEAVE:
    case MSG_ERROR:
        put_u(b, (uint16_t)m->code, 2);
        put_str(b, s, slen);
        break;
    default:
        break;
    }
    if (m->type == MSG_HELLO || m->type == MSG_LEAVE) put(b, m->sig, MSG_SIG_LEN); /* signed */
}

static void spec_member(bb_t *b, const msg_member_t *e, long addr_len)
{
    put(b, e->id, MSG_ID_LEN);
    put_str(b, e->addr, addr_len >= 0 ? (size_t)addr_len : strlen(e->addr));
    put_u(b, (uint16_t)e->stage, 2);
    put_u(b, e->state, 1);
    put_u(b, e->heartbeat, 8);
    put_u(b, (uint64_t)e->step, 8);
    put_u(b, (uint64_t)e->serving_from, 8);
    put_f32(b, e->throughput);
    put_f32(b, e->loss);
    put_u(b, e->served, 8);
    put_u(b, e->bytes_in, 8);
    put_u(b, e->bytes_out, 8);
    put_u(b, e->retries, 8);
    put_u(b, e->rejected, 8);
    put_u(b, e->uptime_s, 4);
    for (int c = 0; c < MSG_CKPT_MAX; c++) put_u(b, (uint64_t)e->ckpt[c], 8);
    put(b, e->sig, MSG_SIG_LEN);
}

static void spec_members(bb_t *b, const msg_member_t *v, int n)
{
    b->n = 0;
    put_u(b, (uint32_t)n, 4);
    for (int i = 0; i < n; i++) spec_member(b, &v[i], -1);
}

/* ---- samples ---------------------------------------------------------------------- */

/* A message of `type` with every field of msg_t set to something distinctive (also the
 * fields the type does not carry: the encoder must leave those out). */
static msg_t sample(int type)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = (uint8_t)type;
    m.flags = (uint8_t)(0x80 | type);
    m.swarm = 0x0123456789abcdefULL ^ (uint64_t)type;
    for (int j = 0; j < MSG_ID_LEN; j++) m.sender[j] = (uint8_t)(0xa0 + j);
    m.seq = (1ULL << 63) | (0x1122334455ULL + (uint64_t)type);
    snprintf(m.addr, sizeof m.addr, "tcp://10.1.2.%d:4%04d", type, type);
    m.stage = type == MSG_HELLO ? -1 : 3;
    m.mb = (msg_mb_t){
        .step = 0x0102030405060708LL, .index = 0xdeadbeefu, .attempt = 0xbeef, .kind = 1};
    m.nroute = 3;
    for (int i = 0; i < MSG_ROUTE_MAX; i++) route_id(m.route[i], i);
    m.loss = 2.71828f;
    m.skip = 0x8040201008040206ULL;
    m.step = 0x0a0b0c0d0e0f1011LL;
    m.count = 0x01020304u;
    m.hash = 0xf0e1d2c3b4a59687ULL;
    m.since = 0x0000123456789abcLL;
    for (int j = 0; j < MSG_ID_LEN; j++) m.origin[j] = (uint8_t)(0x60 + 2 * j);
    for (int j = 0; j < MSG_ID_LEN; j++) m.dest[j] = (uint8_t)(0x33 ^ (5 * j));
    m.probe_kind = PROBE_REQ;
    m.probe = 0x0fedcba987654321ULL;
    m.offset = 1u << 20;
    m.total = 3u << 20;
    m.length = 1u << 20;
    for (int j = 0; j < 32; j++) m.state_hash[j] = (uint8_t)(0x11 * (j % 16) + j / 16);
    m.code = -7;
    snprintf(m.text, sizeof m.text, "reason for %s", msg_type_name(type));
    if (type == MSG_STATE_REQ) m.step = -1; /* "the state you hold now" */
    for (int j = 0; j < MSG_SIG_LEN; j++) m.sig[j] = (uint8_t)(0xc0 ^ j);
    return m;
}

/* What decoding sample(type) must give: the common header and the type's own fields,
 * every other field zero. */
static msg_t expected(const msg_t *s)
{
    msg_t e;
    memset(&e, 0, sizeof e);
    e.type = s->type;
    e.flags = s->flags;
    e.swarm = s->swarm;
    memcpy(e.sender, s->sender, MSG_ID_LEN);
    e.seq = s->seq;
    switch (s->type) {
    case MSG_HELLO:
        strcpy(e.addr, s->addr);
        e.stage = s->stage;
        break;
    case MSG_WELCOME:
        strcpy(e.addr, s->addr);
        break;
    case MSG_FWD:
    case MSG_BWD:
    case MSG_NACK:
        e.mb = s->mb;
        e.stage = s->stage;
        e.nroute = s->nroute;
        memcpy(e.route, s->route, (size_t)s->nroute * MSG_ID_LEN);
        e.loss = s->loss;
        e.skip = s->skip;
        if (s->type == MSG_NACK) strcpy(e.text, s->text);
        break;
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_EXCH:
    case MSG_EXCH_REQ:
    case MSG_REDO:
        e.stage = s->stage;
        e.step = s->step;
        e.count = s->count;
        e.hash = s->hash;
        e.since = s->since;
        if (s->type == MSG_EXCH || s->type == MSG_EXCH_REQ)
            memcpy(e.origin, s->origin, MSG_ID_LEN);
        break;
    case MSG_RELAY:
        memcpy(e.dest, s->dest, MSG_ID_LEN);
        break;
    case MSG_PROBE:
        e.probe_kind = s->probe_kind;
        e.probe = s->probe;
        memcpy(e.dest, s->dest, MSG_ID_LEN);
        e.count = s->count;
        break;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        e.stage = s->stage;
        e.step = s->step;
        e.offset = s->offset;
        e.total = s->total;
        e.length = s->length;
        memcpy(e.state_hash, s->state_hash, 32);
        break;
    case MSG_LEAVE:
    case MSG_ERROR:
        e.code = s->code;
        strcpy(e.text, s->text);
        break;
    default:
        break;
    }
    if (s->type == MSG_HELLO || s->type == MSG_LEAVE) memcpy(e.sig, s->sig, MSG_SIG_LEN);
    return e;
}

/* The header length the spec gives for m. */
static size_t spec_len(const msg_t *m)
{
    size_t r = (size_t)m->nroute * MSG_ID_LEN;
    switch (m->type) {
    case MSG_HELLO:
        return COMMON_LEN + 2 + strlen(m->addr) + 2 + MSG_SIG_LEN;
    case MSG_WELCOME:
        return COMMON_LEN + 2 + strlen(m->addr);
    case MSG_FWD:
    case MSG_BWD:
        return COMMON_LEN + MB_LEN + 2 + 1 + r + 4 + 8;
    case MSG_NACK:
        return COMMON_LEN + MB_LEN + 2 + 1 + r + 4 + 8 + 2 + strlen(m->text);
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_REDO:
        return COMMON_LEN + 30;
    case MSG_EXCH:
    case MSG_EXCH_REQ:
        return COMMON_LEN + 30 + MSG_ID_LEN;
    case MSG_RELAY:
        return COMMON_LEN + MSG_ID_LEN;
    case MSG_PROBE:
        return COMMON_LEN + 1 + 8 + MSG_ID_LEN + 4;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        return COMMON_LEN + 62;
    case MSG_LEAVE:
        return COMMON_LEN + 2 + 2 + strlen(m->text) + MSG_SIG_LEN;
    case MSG_ERROR:
        return COMMON_LEN + 2 + 2 + strlen(m->text);
    default:
        return COMMON_LEN;
    }
}

static msg_member_t sample_member(int i)
{
    msg_member_t e;
    memset(&e, 0, sizeof e);
    for (int j = 0; j < MSG_ID_LEN; j++) e.id[j] = (uint8_t)(i * 31 + j);
    snprintf(e.addr, sizeof e.addr, "tcp://192.168.0.%d:%d", i, 5000 + i);
    e.stage = (int16_t)(i % MSG_ROUTE_MAX);
    e.state = (uint8_t)(i % 4);
    e.heartbeat = 0x100000000ULL + (uint64_t)i;
    e.step = 1000 + i;
    e.serving_from = i % 2 ? 1002 + i : -1; /* serving_from is not range-checked */
    e.throughput = 12.5f * (float)i;
    e.loss = i % 3 ? 3.25f + (float)i : NAN;
    e.served = 7u * (uint64_t)i;
    e.bytes_in = 0x1111111111ULL * (uint64_t)(i + 1);
    e.bytes_out = 0x2222222222ULL * (uint64_t)(i + 1);
    e.retries = (uint64_t)i;
    e.rejected = 2u * (uint64_t)i;
    e.uptime_s = 3600u + (uint32_t)i;
    for (int c = 0; c < MSG_CKPT_MAX; c++) e.ckpt[c] = i % 2 ? 900 + i - 50 * c : 0;
    for (int j = 0; j < MSG_SIG_LEN; j++) e.sig[j] = (uint8_t)(i * 7 + j);
    return e;
}

/* ---- helpers ---------------------------------------------------------------------- */

/* Decodes bytes from a heap copy of exactly len octets, so ASan sees any over-read. */
static int decode_exact(const uint8_t *bytes, size_t len, msg_t *m)
{
    char err[STATUS_ERR_LEN] = "";
    uint8_t *p = malloc(len ? len : 1);
    assert_non_null(p);
    if (len) memcpy(p, bytes, len);
    int rc = msg_decode(p, len, m, err);
    if (rc) assert_true(err[0] != 0); /* every refusal says why */
    free(p);
    return rc;
}

static int decode_bb(const bb_t *b, msg_t *m)
{
    return decode_exact(b->b, b->n, m);
}

/* Decodes a member table into a heap array of exactly max entries. */
static int members_exact(const uint8_t *bytes, size_t len, int max, msg_member_t *out, int *n)
{
    char err[STATUS_ERR_LEN] = "";
    uint8_t *p = malloc(len ? len : 1);
    msg_member_t *v = malloc((size_t)(max ? max : 1) * sizeof *v);
    assert_non_null(p);
    assert_non_null(v);
    if (len) memcpy(p, bytes, len);
    *n = -1;
    int rc = msg_members_decode(p, len, v, max, n, err);
    if (rc) assert_true(err[0] != 0);
    if (!rc && out) memcpy(out, v, (size_t)*n * sizeof *v);
    free(p);
    free(v);
    return rc;
}

static size_t encode_ok(const msg_t *m, uint8_t *buf, size_t cap)
{
    char err[STATUS_ERR_LEN];
    size_t len = 0;
    int rc = msg_encode(m, buf, cap, &len, err);
    if (rc) fail_msg("msg_encode(%s): %s", msg_type_name(m->type), err);
    return len;
}

static int encode_rc(const msg_t *m)
{
    char err[STATUS_ERR_LEN] = "";
    uint8_t buf[MSG_HEADER_MAX];
    size_t len = 0;
    int rc = msg_encode(m, buf, sizeof buf, &len, err);
    if (rc) assert_true(err[0] != 0);
    return rc;
}

static void assert_msg_equal(const msg_t *got, const msg_t *want)
{
    assert_int_equal(got->type, want->type);
    assert_int_equal(got->flags, want->flags);
    assert_true(got->swarm == want->swarm);
    assert_memory_equal(got->sender, want->sender, MSG_ID_LEN);
    assert_true(got->seq == want->seq);
    assert_string_equal(got->addr, want->addr);
    assert_int_equal(got->stage, want->stage);
    assert_true(got->mb.step == want->mb.step);
    assert_int_equal(got->mb.index, want->mb.index);
    assert_int_equal(got->mb.attempt, want->mb.attempt);
    assert_int_equal(got->mb.kind, want->mb.kind);
    assert_int_equal(got->nroute, want->nroute);
    assert_memory_equal(got->route, want->route, sizeof got->route);
    assert_memory_equal(&got->loss, &want->loss, sizeof got->loss);
    assert_true(got->skip == want->skip);
    assert_true(got->step == want->step);
    assert_int_equal(got->count, want->count);
    assert_true(got->hash == want->hash);
    assert_true(got->since == want->since);
    assert_true(got->offset == want->offset);
    assert_true(got->total == want->total);
    assert_int_equal(got->length, want->length);
    assert_memory_equal(got->state_hash, want->state_hash, 32);
    assert_int_equal(got->code, want->code);
    assert_string_equal(got->text, want->text);
    /* and nothing else: the string tails and padding are zero on both sides */
    assert_memory_equal(got, want, sizeof *got);
}

static void assert_member_equal(const msg_member_t *a, const msg_member_t *b)
{
    assert_memory_equal(a->id, b->id, MSG_ID_LEN);
    assert_string_equal(a->addr, b->addr);
    assert_int_equal(a->stage, b->stage);
    assert_int_equal(a->state, b->state);
    assert_true(a->heartbeat == b->heartbeat);
    assert_true(a->step == b->step);
    assert_true(a->serving_from == b->serving_from);
    assert_memory_equal(&a->throughput, &b->throughput, 4);
    assert_memory_equal(&a->loss, &b->loss, 4); /* NaN stays NaN, bit for bit */
    assert_true(a->served == b->served);
    assert_true(a->bytes_in == b->bytes_in);
    assert_true(a->bytes_out == b->bytes_out);
    assert_true(a->retries == b->retries);
    assert_true(a->rejected == b->rejected);
    assert_int_equal(a->uptime_s, b->uptime_s);
    assert_memory_equal(a->sig, b->sig, MSG_SIG_LEN);
}

/* ---- layout and round trips -------------------------------------------------------- */

static void test_payload_counts(void **state)
{
    (void)state;
    static const int want[MSG_TYPE_MAX + 1] = {
        [MSG_HELLO] = 0,      [MSG_WELCOME] = 2,    [MSG_GOSSIP] = 1,    [MSG_LEAVE] = 0,
        [MSG_FWD] = 2,        [MSG_BWD] = 1,        [MSG_NACK] = 0,      [MSG_PROGRESS] = 1,
        [MSG_STEP_DONE] = 0,  [MSG_EXCH] = 3,       [MSG_STATE_REQ] = 0, [MSG_STATE_REP] = 1,
        [MSG_STATUS_REQ] = 0, [MSG_STATUS_REP] = 1, [MSG_ERROR] = 0,     [MSG_EXCH_REQ] = 0,
        [MSG_REDO] = 1,       [MSG_RELAY] = -1,      [MSG_PROBE] = 1};
    static const char *names[MSG_TYPE_MAX + 1] = {
        "?",         "HELLO",      "WELCOME",    "GOSSIP",    "LEAVE", "FWD",
        "BWD",       "NACK",       "PROGRESS",   "STEP_DONE", "EXCH",  "STATE_REQ",
        "STATE_REP", "STATUS_REQ", "STATUS_REP", "ERROR", "EXCH_REQ", "REDO", "RELAY",
        "PROBE"};
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        assert_int_equal(msg_payloads(t), want[t]);
        assert_string_equal(msg_type_name(t), names[t]);
    }
    assert_int_equal(msg_payloads(0), 0);
    assert_int_equal(msg_payloads(MSG_TYPE_MAX + 1), 0);
    assert_string_equal(msg_type_name(0), "?");
    assert_string_equal(msg_type_name(MSG_TYPE_MAX + 1), "?");
    assert_string_equal(msg_type_name(-1), "?");
    uint8_t id[MSG_ID_LEN] = {0xde, 0xad, 0x0b, 0xef, 0x99};
    char hex[9];
    assert_string_equal(msg_id_short(id, hex), "dead0bef");
}

/* The common header at the offsets of the spec's table, octet by octet. */
/* Entry signatures are remembered (msg.c): a signature made again is the one Ed25519 makes
 * afresh, and a check that passed once passes only for that very entry and signature. */
static void test_member_signature_memo(void **state)
{
    (void)state;
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    assert_int_equal(sodium_init() < 0, 0);
    crypto_sign_keypair(pk, sk);
    msg_member_t e = sample_member(1);
    memcpy(e.id, pk, MSG_ID_LEN);
    e.state = MEMBER_SERVING;
    msg_member_t a = e, b = e;
    msg_member_sign(&a, sk);
    msg_member_sign(&b, sk); /* from the memo */
    assert_memory_equal(a.sig, b.sig, MSG_SIG_LEN);
    for (int pass = 0; pass < 2; pass++) /* the second from the memo */
        assert_true(msg_member_verify(&a, MEMBER_SERVING));
    assert_false(msg_member_verify(&a, MEMBER_JOINING)); /* read as another state */
    msg_member_t c = a;
    c.sig[7] ^= 1; /* another signature of the same entry */
    assert_false(msg_member_verify(&c, MEMBER_SERVING));
    c = a;
    c.heartbeat++; /* another entry under the same signature */
    assert_false(msg_member_verify(&c, MEMBER_SERVING));
    c = a;
    c.step++;
    msg_member_sign(&c, sk); /* a new version: signed afresh, verifies */
    assert_memory_not_equal(c.sig, a.sig, MSG_SIG_LEN);
    assert_true(msg_member_verify(&c, MEMBER_SERVING));
    uint8_t pk2[crypto_sign_PUBLICKEYBYTES], sk2[crypto_sign_SECRETKEYBYTES];
    crypto_sign_keypair(pk2, sk2);
    c = a;
    msg_member_sign(&c, sk2); /* another key: never the memo's signature of a's entry */
    assert_memory_not_equal(c.sig, a.sig, MSG_SIG_LEN);
    assert_false(msg_member_verify(&c, MEMBER_SERVING));
}

static void test_golden_step_done(void **state)
{
    (void)state;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_STEP_DONE;
    m.flags = 1;
    m.swarm = 0x0807060504030201ULL;
    for (int j = 0; j < MSG_ID_LEN; j++) m.sender[j] = (uint8_t)j;
    m.seq = 0x8000000000000005ULL;
    m.stage = 0;
    m.step = 42;
    static const uint8_t want[] = {
        0x53, 0x57, 0x54,                               /* "SWT" */
        0x08,                                           /* version */
        0x09,                                           /* type STEP_DONE */
        0x01,                                           /* flags: run finished */
        0x00, 0x00,                                     /* reserved */
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, /* swarm */
        0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12, 13,
        14,   15,   16,   17,   18,   19,   20,   21,   22,   23,   24,   25,   26, 27,
        28,   29,   30,   31,   0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, /* seq */
        0x00, 0x00,                                                             /* stage */
        0x2a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* step */
        0x00, 0x00, 0x00, 0x00,                                                 /* count */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* hash */
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,                         /* since */
    };
    uint8_t buf[MSG_HEADER_MAX];
    size_t len = encode_ok(&m, buf, sizeof buf);
    assert_int_equal(len, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
}

/* Every type: msg_encode gives exactly the spec's octets and length, and decoding gives
 * back every field the type carries and zero for the rest. */
static void test_roundtrip_all_types(void **state)
{
    (void)state;
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        for (int variant = 0; variant < 3; variant++) {
            msg_t m = sample(t);
            if (variant == 1) { /* extremes */
                m.nroute = MSG_ROUTE_MAX;
                m.stage = t == MSG_HELLO ? MSG_ROUTE_MAX - 1 : MSG_ROUTE_MAX - 1;
                m.mb.kind = 0;
                m.mb.step = INT64_MAX;
                m.step = t == MSG_STATE_REQ ? INT64_MAX : 0;
                m.since = INT64_MAX;
                m.offset = m.total = UINT64_MAX;
                m.length = 0;
                memset(m.addr, 'a', MSG_ADDR_MAX);
                m.addr[MSG_ADDR_MAX] = 0;
                memset(m.text, 't', MSG_TEXT_MAX);
                m.text[MSG_TEXT_MAX] = 0;
                m.loss = -INFINITY;
                m.code = INT16_MIN;
            } else if (variant == 2) { /* minima */
                m.nroute = 0;
                m.stage = t == MSG_HELLO ? -1 : 0;
                m.mb.step = 0;
                m.step = t == MSG_STATE_REQ || t == MSG_STATE_REP ? -1 : 0;
                m.since = 0;
                m.offset = m.total = 0;
                m.length = 0;
                m.addr[0] = 0;
                m.text[0] = 0;
                m.loss = NAN;
                m.flags = 0;
            }
            uint8_t buf[MSG_HEADER_MAX];
            size_t len = encode_ok(&m, buf, sizeof buf);
            assert_int_equal(len, spec_len(&m));
            bb_t *b = malloc(sizeof *b);
            assert_non_null(b);
            spec_encode(b, &m, NULL);
            assert_int_equal(b->n, len);
            assert_memory_equal(b->b, buf, len);
            free(b);
            msg_t got, want = expected(&m);
            memset(&got, 0xa5, sizeof got);
            assert_int_equal(decode_exact(buf, len, &got), 0);
            assert_msg_equal(&got, &want);
        }
    }
}

/* The longest header (NACK: 64 hops and 1024 octets of text) fits MSG_HEADER_MAX. */
static void test_largest_header_fits(void **state)
{
    (void)state;
    msg_t m = sample(MSG_NACK);
    m.nroute = MSG_ROUTE_MAX;
    memset(m.text, 'x', MSG_TEXT_MAX);
    m.text[MSG_TEXT_MAX] = 0;
    uint8_t buf[MSG_HEADER_MAX];
    size_t len = encode_ok(&m, buf, sizeof buf);
    assert_int_equal(len, COMMON_LEN + MB_LEN + 3 + 64 * 32 + 4 + 8 + 2 + MSG_TEXT_MAX);
    assert_true(len <= MSG_HEADER_MAX);
}

static void test_members_roundtrip(void **state)
{
    (void)state;
    enum { N = 9 };
    msg_member_t v[N];
    for (int i = 0; i < N; i++) v[i] = sample_member(i);
    memset(v[1].addr, 'z', MSG_ADDR_MAX); /* longest address */
    v[1].addr[MSG_ADDR_MAX] = 0;
    v[2].addr[0] = 0; /* empty address */
    v[3].stage = MSG_ROUTE_MAX - 1;
    v[4].throughput = 0.0f;
    v[5].loss = INFINITY; /* loss is not range-checked; throughput is */
    v[6].heartbeat = UINT64_MAX;
    v[6].step = INT64_MAX;
    v[7].state = MEMBER_DEAD;
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    for (int n = 0; n <= N; n++) {
        size_t cap = msg_members_size(v, n), len = 0;
        size_t want = 4;
        for (int i = 0; i < n; i++) want += MEMBER_FIXED + strlen(v[i].addr);
        assert_int_equal(cap, want);
        uint8_t *buf = malloc(cap);
        char err[STATUS_ERR_LEN];
        assert_non_null(buf);
        assert_int_equal(msg_members_encode(v, n, buf, cap, &len, err), 0);
        assert_int_equal(len, cap);
        spec_members(b, v, n);
        assert_int_equal(b->n, len);
        assert_memory_equal(b->b, buf, len);
        msg_member_t got[N];
        int k = -1;
        assert_int_equal(members_exact(buf, len, N, got, &k), 0);
        assert_int_equal(k, n);
        for (int i = 0; i < n; i++) assert_member_equal(&got[i], &v[i]);
        /* a table of exactly `max` entries decodes; one more than max does not */
        if (n > 0) {
            assert_int_equal(members_exact(buf, len, n, NULL, &k), 0);
            assert_int_equal(members_exact(buf, len, n - 1, NULL, &k), STATUS_EMALFORMED);
        }
        free(buf);
    }
    free(b);
}

/* ---- truncation, trailing bytes, random corruption ---------------------------------- */

static void test_truncation_every_point(void **state)
{
    (void)state;
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        msg_t m = sample(t), got;
        uint8_t buf[MSG_HEADER_MAX + 1];
        size_t len = encode_ok(&m, buf, MSG_HEADER_MAX);
        assert_int_equal(decode_exact(buf, len, &got), 0);
        for (size_t k = 0; k < len; k++)
            if (decode_exact(buf, k, &got) != STATUS_EMALFORMED)
                fail_msg("%s cut to %zu of %zu octets was not refused", msg_type_name(t), k, len);
        buf[len] = 0; /* one trailing octet */
        assert_int_equal(decode_exact(buf, len + 1, &got), STATUS_EMALFORMED);
    }
    assert_int_equal(msg_decode(NULL, 0, &(msg_t){0}, NULL), STATUS_EMALFORMED);

    msg_member_t v[3] = {sample_member(1), sample_member(2), sample_member(3)};
    size_t cap = msg_members_size(v, 3) + 1, len = 0;
    uint8_t *buf = malloc(cap);
    assert_non_null(buf);
    assert_int_equal(msg_members_encode(v, 3, buf, cap, &len, NULL), 0);
    int k;
    assert_int_equal(members_exact(buf, len, 3, NULL, &k), 0);
    for (size_t cut = 0; cut < len; cut++)
        if (members_exact(buf, cut, 3, NULL, &k) != STATUS_EMALFORMED)
            fail_msg("member table cut to %zu of %zu octets was not refused", cut, len);
    buf[len] = 0;
    assert_int_equal(members_exact(buf, len + 1, 3, NULL, &k), STATUS_EMALFORMED);
    free(buf);
}

static uint64_t rng_state = 0x5eed5eed1234abcdULL;

static uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1DULL;
}

/* One to three random edits: bit flips, random octets, truncation, extension, and
 * 16/32-bit overwrites (which hit length and count fields). */
static size_t corrupt(uint8_t *p, size_t len, size_t cap)
{
    int edits = 1 + (int)(rnd() % 3);
    for (int e = 0; e < edits; e++) {
        size_t at = len ? (size_t)(rnd() % len) : 0;
        switch (rnd() % 7) {
        case 0:
        case 1:
            if (len) p[at] ^= (uint8_t)(1u << (rnd() % 8));
            break;
        case 2:
            if (len) p[at] = (uint8_t)rnd();
            break;
        case 3:
            len = len ? (size_t)(rnd() % len) : 0;
            break;
        case 4:
            for (int i = 1 + (int)(rnd() % 8); i > 0 && len < cap; i--) p[len++] = (uint8_t)rnd();
            break;
        case 5:
            if (len >= 2) {
                at = (size_t)(rnd() % (len - 1));
                uint16_t v = rnd() % 2 ? (uint16_t)rnd() : (uint16_t)(rnd() % 300);
                p[at] = (uint8_t)v, p[at + 1] = (uint8_t)(v >> 8);
            }
            break;
        default:
            if (len >= 4) {
                at = (size_t)(rnd() % (len - 3));
                uint32_t v = rnd() % 2 ? (uint32_t)rnd() : (uint32_t)(rnd() % 2000);
                for (int i = 0; i < 4; i++) p[at + i] = (uint8_t)(v >> (8 * i));
            }
            break;
        }
    }
    return len;
}

/* 10,000 corrupted headers: each is refused (malformed or another version) or decodes
 * into a message that re-encodes to exactly the same octets (the encoding is canonical,
 * so "valid" really means well formed). */
static void test_random_corruption_headers(void **state)
{
    (void)state;
    enum { SAMPLES = 2 * MSG_TYPE_MAX, ITER = 10000 };
    uint8_t base[SAMPLES][MSG_HEADER_MAX];
    size_t blen[SAMPLES];
    for (int i = 0; i < SAMPLES; i++) {
        msg_t m = sample(1 + i % MSG_TYPE_MAX);
        if (i >= MSG_TYPE_MAX) m.nroute = 1, m.addr[3] = 0, m.text[2] = 0;
        blen[i] = encode_ok(&m, base[i], MSG_HEADER_MAX);
    }
    int ok = 0, malformed = 0, version = 0;
    rng_state = 0x5eed5eed1234abcdULL;
    for (int it = 0; it < ITER; it++) {
        int s = (int)(rnd() % SAMPLES);
        uint8_t p[MSG_HEADER_MAX + 32];
        memcpy(p, base[s], blen[s]);
        size_t len = corrupt(p, blen[s], sizeof p);
        msg_t got;
        int rc = decode_exact(p, len, &got);
        if (rc == STATUS_EMALFORMED) {
            malformed++;
        } else if (rc == STATUS_EVERSION) {
            version++;
            assert_true(len >= 4 && p[3] != MSG_VERSION);
        } else {
            assert_int_equal(rc, 0);
            ok++;
            assert_true(got.type >= 1 && got.type <= MSG_TYPE_MAX);
            assert_true(got.nroute <= MSG_ROUTE_MAX);
            assert_true(strlen(got.addr) <= MSG_ADDR_MAX && strlen(got.text) <= MSG_TEXT_MAX);
            uint8_t again[MSG_HEADER_MAX];
            size_t alen = encode_ok(&got, again, sizeof again);
            if (alen != len || memcmp(again, p, len))
                fail_msg("iteration %d: %s decoded but does not re-encode to its octets", it,
                         msg_type_name(got.type));
        }
    }
    print_message("headers: %d valid, %d malformed, %d other version\n", ok, malformed, version);
    assert_true(ok > 0 && malformed > 0 && version > 0);
    assert_int_equal(ok + malformed + version, ITER);
}

static void test_random_corruption_tables(void **state)
{
    (void)state;
    enum { N = 4, ITER = 10000 };
    msg_member_t v[N];
    for (int i = 0; i < N; i++) v[i] = sample_member(i + 1);
    v[1].loss = NAN;
    uint8_t base[N + 1][4 + N * (MEMBER_FIXED + 40)];
    size_t blen[N + 1];
    for (int n = 0; n <= N; n++) {
        assert_true(msg_members_size(v, n) <= sizeof base[n]);
        assert_int_equal(msg_members_encode(v, n, base[n], sizeof base[n], &blen[n], NULL), 0);
    }
    int ok = 0, malformed = 0;
    rng_state = 0x7ab1e5eed0000001ULL;
    for (int it = 0; it < ITER; it++) {
        int s = (int)(rnd() % (N + 1));
        uint8_t p[sizeof base[0] + 32];
        memcpy(p, base[s], blen[s]);
        size_t len = corrupt(p, blen[s], sizeof p);
        msg_member_t got[N + 1];
        int k;
        int rc = members_exact(p, len, N + 1, got, &k);
        if (rc) {
            assert_int_equal(rc, STATUS_EMALFORMED);
            malformed++;
            continue;
        }
        ok++;
        assert_true(k >= 0 && k <= N + 1);
        for (int i = 0; i < k; i++) {
            assert_true(got[i].stage >= 0 && got[i].stage < MSG_ROUTE_MAX);
            assert_true(got[i].state <= MEMBER_SUSPECT);
            assert_true(isfinite(got[i].throughput) && got[i].throughput >= 0);
            assert_true(got[i].step >= 0);
        }
        uint8_t again[sizeof p];
        size_t alen = 0;
        assert_int_equal(msg_members_encode(got, k, again, sizeof again, &alen, NULL), 0);
        if (alen != len || memcmp(again, p, len))
            fail_msg("iteration %d: table decoded but does not re-encode to its octets", it);
    }
    print_message("tables: %d valid, %d malformed\n", ok, malformed);
    assert_true(ok > 0 && malformed > 0);
}

/* ---- refusals, one field at a time, each beside the accepted boundary value ---------- */

static void test_version(void **state)
{
    (void)state;
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    msg_t got;
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        msg_t m = sample(t);
        for (int v = 0; v < 256; v++) {
            if (v == MSG_VERSION) continue;
            spec_encode(b, &m, &(wire_opts_t){.version = v, .str_len = -1});
            if (v == 0) b->b[3] = 0; /* opts.version 0 means "the default" */
            assert_int_equal(decode_bb(b, &got), STATUS_EVERSION);
        }
        spec_encode(b, &m, NULL);
        assert_int_equal(decode_bb(b, &got), 0);
    }
    /* the version is judged before anything after it: "SWT" 9 alone, or with junk */
    assert_int_equal(decode_exact((const uint8_t *)"SWT\x09", 4, &got), STATUS_EVERSION);
    assert_int_equal(decode_exact((const uint8_t *)"SWT\x09\xff\xff\xff", 7, &got),
                     STATUS_EVERSION);
    assert_int_equal(decode_exact((const uint8_t *)"SWT", 3, &got), STATUS_EMALFORMED);
    free(b);
}

/* PROBE (SWIM, docs/protocol.md 5.19): every kind below PROBE_KINDS reads back with its
 * probe number, target and count; any other kind is refused. */
static void test_probe_kinds(void **state)
{
    (void)state;
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    msg_t m = sample(MSG_PROBE), got;
    for (int k = 0; k < 256; k++) {
        m.probe_kind = (uint8_t)k;
        spec_encode(b, &m, NULL);
        if (k >= PROBE_KINDS) {
            assert_int_equal(decode_bb(b, &got), STATUS_EMALFORMED);
            continue;
        }
        assert_int_equal(decode_bb(b, &got), 0);
        assert_int_equal(got.probe_kind, k);
        assert_true(got.probe == m.probe);
        assert_int_equal(got.count, m.count);
        assert_memory_equal(got.dest, m.dest, MSG_ID_LEN);
    }
    free(b);
}

static void test_magic_reserved_type(void **state)
{
    (void)state;
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    msg_t got;
    static const char *bad_magic[] = {"swt", "XWT", "SXT", "SWX", "\0WT", "TWS"};
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        msg_t m = sample(t);
        for (size_t i = 0; i < sizeof bad_magic / sizeof *bad_magic; i++) {
            spec_encode(b, &m, &(wire_opts_t){.magic = bad_magic[i], .str_len = -1});
            assert_int_equal(decode_bb(b, &got), STATUS_EMALFORMED);
        }
        for (int bitn = 0; bitn < 16; bitn++) {
            spec_encode(b, &m, &(wire_opts_t){.reserved = (uint16_t)(1u << bitn), .str_len = -1});
            assert_int_equal(decode_bb(b, &got), STATUS_EMALFORMED);
        }
        /* every flags value is accepted (only STEP_DONE bit 0 has a meaning) */
        for (int f = 0; f < 256; f += 51) {
            m.flags = (uint8_t)f;
            spec_encode(b, &m, NULL);
            assert_int_equal(decode_bb(b, &got), 0);
            assert_int_equal(got.flags, f);
        }
    }
    /* unknown types, with a body of the size of any known one */
    msg_t m = sample(MSG_GOSSIP);
    static const int bad_type[] = {0, MSG_TYPE_MAX + 1, 0x7f, 0xff};
    for (size_t i = 0; i < sizeof bad_type / sizeof *bad_type; i++) {
        spec_encode(b, &m, NULL);
        b->b[4] = (uint8_t)bad_type[i];
        assert_int_equal(decode_bb(b, &got), STATUS_EMALFORMED);
    }
    free(b);
}

/* Builds m with the spec encoder and decodes it: the status. */
static int spec_rc(const msg_t *m, const wire_opts_t *o)
{
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    spec_encode(b, m, o);
    msg_t got;
    int rc = decode_bb(b, &got);
    free(b);
    return rc;
}

static void test_route_and_microbatch_ranges(void **state)
{
    (void)state;
    static const int types[] = {MSG_FWD, MSG_BWD, MSG_NACK};
    for (size_t i = 0; i < 3; i++) {
        msg_t m = sample(types[i]);
        m.nroute = MSG_ROUTE_MAX;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.nroute = MSG_ROUTE_MAX + 1; /* with all 65 ids present: only the count is wrong */
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.nroute = 255;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);

        m = sample(types[i]);
        m.stage = 0;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.stage = MSG_ROUTE_MAX - 1;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.stage = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.stage = MSG_ROUTE_MAX;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.stage = INT16_MIN;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);

        m = sample(types[i]);
        m.mb.step = 0;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.mb.step = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.mb.step = INT64_MIN;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);

        m = sample(types[i]);
        m.mb.kind = 1;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.mb.kind = 2;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.mb.kind = 0xff;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);

        /* the skip mask: any middle or last stage may be named; stage 0 never */
        m = sample(types[i]);
        m.skip = 0;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.skip = ~1ULL;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.skip = 1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.skip = 0x7;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    }
}

static void test_step_stage_ranges(void **state)
{
    (void)state;
    static const int pool[] = {MSG_PROGRESS, MSG_STEP_DONE, MSG_EXCH};
    for (size_t i = 0; i < 3; i++) {
        msg_t m = sample(pool[i]);
        m.stage = 0, m.step = 0, m.since = 0;
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.stage = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.stage = 0, m.step = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.step = INT64_MIN;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.step = 0, m.since = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    }
    static const int st[] = {MSG_STATE_REQ, MSG_STATE_REP};
    for (size_t i = 0; i < 2; i++) {
        msg_t m = sample(st[i]);
        m.stage = 0, m.step = -1; /* -1: "whatever step you hold" */
        assert_int_equal(spec_rc(&m, NULL), 0);
        m.step = -2;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
        m.step = 5, m.stage = -1;
        assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    }
    /* STATE_REP: the chunk lies inside the state */
    msg_t m = sample(MSG_STATE_REP);
    m.total = 100, m.offset = 100, m.length = 0;
    assert_int_equal(spec_rc(&m, NULL), 0);
    m.offset = 60, m.length = 40;
    assert_int_equal(spec_rc(&m, NULL), 0);
    m.length = 41;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    m.offset = 101, m.length = 0;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    m.offset = UINT64_MAX, m.total = UINT64_MAX - 1;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    /* STATE_REQ asks; the server bounds what it answers, the decoder does not */
    m = sample(MSG_STATE_REQ);
    m.offset = 101, m.total = 0, m.length = UINT32_MAX;
    assert_int_equal(spec_rc(&m, NULL), 0);
    /* HELLO: a wanted stage of -1 (any) up to MSG_ROUTE_MAX - 1 */
    m = sample(MSG_HELLO);
    m.stage = -1;
    assert_int_equal(spec_rc(&m, NULL), 0);
    m.stage = MSG_ROUTE_MAX - 1;
    assert_int_equal(spec_rc(&m, NULL), 0);
    m.stage = -2;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    m.stage = MSG_ROUTE_MAX;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
    m.stage = INT16_MAX;
    assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
}

static void test_strings(void **state)
{
    (void)state;
    static const struct {
        int type;
        long max;
    } cases[] = {{MSG_HELLO, MSG_ADDR_MAX},
                 {MSG_WELCOME, MSG_ADDR_MAX},
                 {MSG_NACK, MSG_TEXT_MAX},
                 {MSG_LEAVE, MSG_TEXT_MAX},
                 {MSG_ERROR, MSG_TEXT_MAX}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg_t m = sample(cases[i].type);
        char *s = cases[i].max == MSG_ADDR_MAX ? m.addr : m.text;
        /* the array holds max + 1 octets; fill them all so an over-long length has bytes */
        memset(s, 'q', (size_t)cases[i].max + 1);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = cases[i].max}), 0);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = cases[i].max + 1}),
                         STATUS_EMALFORMED);
        /* a length beyond the frame */
        bb_t *b = malloc(sizeof *b);
        assert_non_null(b);
        s[cases[i].max] = 0;
        spec_encode(b, &m, NULL);
        msg_t got;
        assert_int_equal(decode_bb(b, &got), 0);
        /* the string's u16 length sits right after the fixed fields before it */
        size_t at = cases[i].type == MSG_HELLO || cases[i].type == MSG_WELCOME ? COMMON_LEN
                    : cases[i].type == MSG_NACK ? COMMON_LEN + MB_LEN + 3 + 3 * 32 + 4 + 8
                                                : COMMON_LEN + 2;
        assert_int_equal(b->b[at] | b->b[at + 1] << 8, cases[i].max);
        b->b[at] = 0xff, b->b[at + 1] = 0xff;
        assert_int_equal(decode_bb(b, &got), STATUS_EMALFORMED);
        free(b);
        /* embedded NUL, at the start, inside and at the end */
        memcpy(s, "ab\0cd", 6);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = 2}), 0);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = 5}), STATUS_EMALFORMED);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = 3}), STATUS_EMALFORMED);
        memcpy(s, "\0xyz", 5);
        assert_int_equal(spec_rc(&m, &(wire_opts_t){.str_len = 4}), STATUS_EMALFORMED);
    }
}

static void test_members_refused(void **state)
{
    (void)state;
    bb_t *b = malloc(sizeof *b);
    assert_non_null(b);
    int k;
    msg_member_t e = sample_member(5);
    /* one field wrong at a time, beside its accepted boundary */
    struct {
        int16_t stage;
        uint8_t st;
        float tp;
        int64_t step;
        int want;
    } cases[] = {
        {0, MEMBER_JOINING, 0.0f, 0, 0},
        {MSG_ROUTE_MAX - 1, MEMBER_DEAD, 1e30f, INT64_MAX, 0},
        {0, MEMBER_SUSPECT, 1, 0, 0},
        {-1, MEMBER_SERVING, 1, 0, STATUS_EMALFORMED},
        {MSG_ROUTE_MAX, MEMBER_SERVING, 1, 0, STATUS_EMALFORMED},
        {0, MEMBER_SUSPECT + 1, 1, 0, STATUS_EMALFORMED},
        {0, 0xff, 1, 0, STATUS_EMALFORMED},
        {0, MEMBER_SERVING, NAN, 0, STATUS_EMALFORMED},
        {0, MEMBER_SERVING, INFINITY, 0, STATUS_EMALFORMED},
        {0, MEMBER_SERVING, -1.0f, 0, STATUS_EMALFORMED},
        {0, MEMBER_SERVING, 1, -1, STATUS_EMALFORMED},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        msg_member_t x = e;
        x.stage = cases[i].stage, x.state = cases[i].st, x.throughput = cases[i].tp;
        x.step = cases[i].step;
        msg_member_t two[2] = {sample_member(1), x}; /* the bad entry second */
        spec_members(b, two, 2);
        if (members_exact(b->b, b->n, 2, NULL, &k) != cases[i].want)
            fail_msg("member case %zu: expected %d", i, cases[i].want);
    }
    /* a checkpoint step below 0 (0 means none) */
    for (int c = 0; c < MSG_CKPT_MAX; c++) {
        msg_member_t x = e;
        x.ckpt[c] = -1;
        msg_member_t two[2] = {sample_member(1), x};
        spec_members(b, two, 2);
        assert_int_equal(members_exact(b->b, b->n, 2, NULL, &k), STATUS_EMALFORMED);
        x.ckpt[c] = INT64_MAX;
        two[1] = x;
        spec_members(b, two, 2);
        assert_int_equal(members_exact(b->b, b->n, 2, NULL, &k), 0);
    }
    /* addresses: longest accepted, one longer refused, embedded NUL refused */
    msg_member_t x = e;
    memset(x.addr, 'a', MSG_ADDR_MAX + 1);
    b->n = 0;
    put_u(b, 1, 4);
    spec_member(b, &x, MSG_ADDR_MAX);
    assert_int_equal(members_exact(b->b, b->n, 1, NULL, &k), 0);
    b->n = 0;
    put_u(b, 1, 4);
    spec_member(b, &x, MSG_ADDR_MAX + 1);
    assert_int_equal(members_exact(b->b, b->n, 1, NULL, &k), STATUS_EMALFORMED);
    memcpy(x.addr, "tcp\0//", 7);
    b->n = 0;
    put_u(b, 1, 4);
    spec_member(b, &x, 6);
    assert_int_equal(members_exact(b->b, b->n, 1, NULL, &k), STATUS_EMALFORMED);
    /* a count the octets cannot hold, refused before any entry is read */
    b->n = 0;
    put_u(b, 1000, 4);
    spec_member(b, &e, -1);
    assert_int_equal(members_exact(b->b, b->n, 1000, NULL, &k), STATUS_EMALFORMED);
    /* count 0 with trailing octets */
    b->n = 0;
    put_u(b, 0, 4);
    put_u(b, 0, 1);
    assert_int_equal(members_exact(b->b, b->n, 4, NULL, &k), STATUS_EMALFORMED);
    b->n = 0;
    put_u(b, 0, 4);
    assert_int_equal(members_exact(b->b, b->n, 0, NULL, &k), 0);
    assert_int_equal(k, 0);
    /* MSG_MEMBERS_MAX entries decode; one more does not, whatever max the caller gives */
    for (int n = MSG_MEMBERS_MAX; n <= MSG_MEMBERS_MAX + 1; n++) {
        b->n = 0;
        put_u(b, (uint32_t)n, 4);
        for (int i = 0; i < n; i++) {
            msg_member_t y = sample_member(i % 200);
            y.state = MEMBER_SERVING;
            spec_member(b, &y, -1);
        }
        assert_int_equal(members_exact(b->b, b->n, MSG_MEMBERS_MAX + 8, NULL, &k),
                         n == MSG_MEMBERS_MAX ? 0 : STATUS_EMALFORMED);
    }
    free(b);
}

/* ---- what msg_encode refuses ---------------------------------------------------------- */

static void test_encode_refuses(void **state)
{
    (void)state;
    static const int bad_type[] = {0, MSG_TYPE_MAX + 1, 255};
    for (size_t i = 0; i < 3; i++) {
        msg_t m = sample(MSG_GOSSIP);
        m.type = (uint8_t)bad_type[i];
        assert_int_equal(encode_rc(&m), STATUS_EINVAL);
    }
    static const int routed[] = {MSG_FWD, MSG_BWD, MSG_NACK};
    for (size_t i = 0; i < 3; i++) {
        msg_t m = sample(routed[i]);
        m.nroute = MSG_ROUTE_MAX;
        assert_int_equal(encode_rc(&m), 0);
        m.nroute = MSG_ROUTE_MAX + 1;
        assert_int_equal(encode_rc(&m), STATUS_EINVAL);
    }
    static const int with_addr[] = {MSG_HELLO, MSG_WELCOME};
    for (size_t i = 0; i < 2; i++) {
        msg_t m = sample(with_addr[i]);
        memset(m.addr, 'a', MSG_ADDR_MAX);
        m.addr[MSG_ADDR_MAX] = 0;
        assert_int_equal(encode_rc(&m), 0);
        m.addr[MSG_ADDR_MAX] = 'a'; /* no terminator within MSG_ADDR_MAX + 1 octets */
        assert_int_equal(encode_rc(&m), STATUS_EINVAL);
    }
    static const int with_text[] = {MSG_NACK, MSG_LEAVE, MSG_ERROR};
    for (size_t i = 0; i < 3; i++) {
        msg_t m = sample(with_text[i]);
        memset(m.text, 't', MSG_TEXT_MAX);
        m.text[MSG_TEXT_MAX] = 0;
        assert_int_equal(encode_rc(&m), 0);
        m.text[MSG_TEXT_MAX] = 't';
        assert_int_equal(encode_rc(&m), STATUS_EINVAL);
    }
    /* every capacity short of the length is refused without writing past it */
    for (int t = 1; t <= MSG_TYPE_MAX; t++) {
        msg_t m = sample(t);
        size_t want = spec_len(&m);
        for (size_t cap = 0; cap <= want; cap++) {
            uint8_t *buf = malloc(cap ? cap : 1);
            size_t len = 0;
            assert_non_null(buf);
            int rc = msg_encode(&m, cap ? buf : NULL, cap, &len, NULL);
            assert_int_equal(rc, cap < want ? STATUS_EINVAL : 0);
            if (!rc) assert_int_equal(len, want);
            free(buf);
        }
    }
    /* member tables: entry count, unterminated address, capacity */
    msg_member_t v[3] = {sample_member(1), sample_member(2), sample_member(3)};
    uint8_t buf[1024];
    size_t len;
    assert_int_equal(msg_members_encode(v, -1, buf, sizeof buf, &len, NULL), STATUS_EINVAL);
    assert_int_equal(msg_members_encode(v, MSG_MEMBERS_MAX + 1, buf, sizeof buf, &len, NULL),
                     STATUS_EINVAL);
    size_t want = msg_members_size(v, 3);
    for (size_t cap = 0; cap <= want; cap++) {
        uint8_t *p = malloc(cap ? cap : 1);
        assert_non_null(p);
        assert_int_equal(msg_members_encode(v, 3, cap ? p : NULL, cap, &len, NULL),
                         cap < want ? STATUS_EINVAL : 0);
        free(p);
    }
    memset(v[2].addr, 'a', sizeof v[2].addr);
    assert_int_equal(msg_members_encode(v, 3, buf, sizeof buf, &len, NULL), STATUS_EINVAL);
}

/* Unreachable members' endpoints (docs/protocol.md 3.4): "relay:" alone or with the relay's
 * 64 lowercase hex digits; HELLO, WELCOME and member entries carrying any other "relay:"
 * endpoint are refused, other endpoints are not looked into. */
static void test_relay_addresses(void **state)
{
    (void)state;
    uint8_t id[MSG_ID_LEN], got_id[MSG_ID_LEN];
    for (int j = 0; j < MSG_ID_LEN; j++) id[j] = (uint8_t)(0xf0 ^ (7 * j));
    char addr[MSG_ADDR_MAX + 1];
    msg_addr_set_relay(addr, NULL);
    assert_string_equal(addr, "relay:");
    memset(got_id, 0xff, sizeof got_id);
    assert_int_equal(msg_addr_relay(addr, got_id), 1);
    static const uint8_t zero[MSG_ID_LEN];
    assert_memory_equal(got_id, zero, MSG_ID_LEN);
    msg_addr_set_relay(addr, id);
    assert_int_equal(strlen(addr), 6 + 64);
    assert_int_equal(strncmp(addr, "relay:f0f7fee5", 14), 0);
    assert_int_equal(msg_addr_relay(addr, got_id), 1);
    assert_memory_equal(got_id, id, MSG_ID_LEN);
    assert_int_equal(msg_addr_relay(addr, NULL), 1);
    static const char *other[] = {"tcp://10.0.0.1:7000", "", "relay", "Relay:", "tcp://relay:1"};
    for (size_t i = 0; i < sizeof other / sizeof *other; i++)
        assert_int_equal(msg_addr_relay(other[i], NULL), 0);
    /* malformed relay endpoints: a short id, an upper-case or non-hex digit, one too many */
    char bad[4][MSG_ADDR_MAX + 1];
    snprintf(bad[0], sizeof bad[0], "%.69s", addr);
    snprintf(bad[1], sizeof bad[1], "%s", addr);
    bad[1][10] = 'A';
    snprintf(bad[2], sizeof bad[2], "%s", addr);
    bad[2][40] = 'g';
    snprintf(bad[3], sizeof bad[3], "%s0", addr);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(msg_addr_relay(bad[i], NULL), 0);
        static const int with_addr[] = {MSG_HELLO, MSG_WELCOME};
        for (int t = 0; t < 2; t++) {
            msg_t m = sample(with_addr[t]);
            snprintf(m.addr, sizeof m.addr, "%.255s", bad[i]);
            assert_int_equal(spec_rc(&m, NULL), STATUS_EMALFORMED);
            snprintf(m.addr, sizeof m.addr, "%s", i % 2 ? addr : "relay:");
            assert_int_equal(spec_rc(&m, NULL), 0);
        }
        msg_member_t v[2] = {sample_member(1), sample_member(2)};
        snprintf(v[1].addr, sizeof v[1].addr, "%.255s", bad[i]);
        bb_t *b = malloc(sizeof *b);
        assert_non_null(b);
        spec_members(b, v, 2);
        int k;
        assert_int_equal(members_exact(b->b, b->n, 2, NULL, &k), STATUS_EMALFORMED);
        snprintf(v[1].addr, sizeof v[1].addr, "%s", addr);
        spec_members(b, v, 2);
        assert_int_equal(members_exact(b->b, b->n, 2, NULL, &k), 0);
        free(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_payload_counts),
        cmocka_unit_test(test_golden_step_done),
        cmocka_unit_test(test_roundtrip_all_types),
        cmocka_unit_test(test_largest_header_fits),
        cmocka_unit_test(test_members_roundtrip),
        cmocka_unit_test(test_truncation_every_point),
        cmocka_unit_test(test_random_corruption_headers),
        cmocka_unit_test(test_random_corruption_tables),
        cmocka_unit_test(test_version),
        cmocka_unit_test(test_probe_kinds),
        cmocka_unit_test(test_magic_reserved_type),
        cmocka_unit_test(test_route_and_microbatch_ranges),
        cmocka_unit_test(test_step_stage_ranges),
        cmocka_unit_test(test_strings),
        cmocka_unit_test(test_members_refused),
        cmocka_unit_test(test_encode_refuses),
        cmocka_unit_test(test_relay_addresses),
        cmocka_unit_test(test_member_signature_memo),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
