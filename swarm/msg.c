/* msg.c — encoding and decoding of swarmtrain message headers and member tables
 * (docs/protocol.md). Readers check every length before every read. */
#include "swarm/msg.h"
#include "common/le.h"
#include "common/status.h"

#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

/* ---- a bounded little-endian writer and reader ------------------------------------ */

typedef struct {
    uint8_t *p;
    size_t cap, n;
    int overflow;
} wbuf_t;

static void w_bytes(wbuf_t *w, const void *src, size_t n)
{
    if (w->overflow || n > w->cap - w->n) {
        w->overflow = 1;
        return;
    }
    memcpy(w->p + w->n, src, n);
    w->n += n;
}

static void w_u(wbuf_t *w, uint64_t v, int bytes)
{
    uint8_t b[8];
    le_put_uint(b, v, bytes);
    w_bytes(w, b, (size_t)bytes);
}

static void w_f32(wbuf_t *w, float f)
{
    w_u(w, le_f32_bits(f), 4);
}

/* Strings: u16 length, then the bytes (no terminator). */
static void w_str(wbuf_t *w, const char *s, size_t max)
{
    size_t n = strnlen(s, max + 1);
    if (n > max) {
        w->overflow = 1;
        return;
    }
    w_u(w, n, 2);
    w_bytes(w, s, n);
}

typedef struct {
    const uint8_t *p;
    size_t len, n;
    int bad;
} rbuf_t;

static int r_bytes(rbuf_t *r, void *dst, size_t n)
{
    if (r->bad || n > r->len - r->n) {
        r->bad = 1;
        if (dst) memset(dst, 0, n);
        return -1;
    }
    if (dst) memcpy(dst, r->p + r->n, n);
    r->n += n;
    return 0;
}

static uint64_t r_u(rbuf_t *r, int bytes)
{
    uint8_t b[8];
    if (r_bytes(r, b, (size_t)bytes)) return 0;
    return le_get_uint(b, bytes);
}

static float r_f32(rbuf_t *r)
{
    return le_bits_f32((uint32_t)r_u(r, 4));
}

/* Reads a string of at most max bytes into dst (max+1 bytes); embedded NULs refused. */
static void r_str(rbuf_t *r, char *dst, size_t max)
{
    size_t n = (size_t)r_u(r, 2);
    if (r->bad || n > max || n > r->len - r->n) {
        r->bad = 1;
        dst[0] = 0;
        return;
    }
    memcpy(dst, r->p + r->n, n);
    dst[n] = 0;
    if (strlen(dst) != n) r->bad = 1;
    r->n += n;
}

/* ---- headers -------------------------------------------------------------------- */

int msg_payloads(int type)
{
    switch (type) {
    case MSG_WELCOME:
        return 2;
    case MSG_FWD:
        return 2;
    case MSG_BWD:
        return 1;
    case MSG_EXCH:
        return 3;
    case MSG_GOSSIP:
    case MSG_PROGRESS:
    case MSG_REDO:
    case MSG_STATE_REP:
    case MSG_STATUS_REP:
    case MSG_PROBE:
        return 1;
    case MSG_RELAY:
        return -1;
    default:
        return 0;
    }
}

const char *msg_type_name(int type)
{
    static const char *names[] = {"?",         "HELLO",      "WELCOME",    "GOSSIP",
                                  "LEAVE",     "FWD",        "BWD",        "NACK",
                                  "PROGRESS",  "STEP_DONE",  "EXCH",       "STATE_REQ",
                                  "STATE_REP", "STATUS_REQ", "STATUS_REP", "ERROR",
                                  "EXCH_REQ",  "REDO",       "RELAY",      "PROBE"};
    return type >= 1 && type <= MSG_TYPE_MAX ? names[type] : "?";
}

int msg_addr_relay(const char *addr, uint8_t relay[MSG_ID_LEN])
{
    size_t k = strlen(MSG_RELAY_SCHEME), n = strlen(addr);
    uint8_t id[MSG_ID_LEN] = {0};
    if (strncmp(addr, MSG_RELAY_SCHEME, k)) return 0;
    if (n != k && n != k + 2 * MSG_ID_LEN) return 0;
    for (size_t i = k; i < n; i++) {
        char c = addr[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return 0;
        id[(i - k) / 2] = (uint8_t)(id[(i - k) / 2] << 4 | v);
    }
    if (relay) memcpy(relay, id, MSG_ID_LEN);
    return 1;
}

void msg_addr_set_relay(char addr[MSG_ADDR_MAX + 1], const uint8_t relay[MSG_ID_LEN])
{
    int k = snprintf(addr, MSG_ADDR_MAX + 1, "%s", MSG_RELAY_SCHEME);
    for (int i = 0; relay && i < MSG_ID_LEN; i++)
        k += snprintf(addr + k, (size_t)(MSG_ADDR_MAX + 1 - k), "%02x", relay[i]);
}

/* An endpoint that claims the relay scheme must be a well-formed one. */
static int addr_ok(const char *addr)
{
    return strncmp(addr, MSG_RELAY_SCHEME, strlen(MSG_RELAY_SCHEME)) || msg_addr_relay(addr, NULL);
}

const char *msg_id_short(const uint8_t id[MSG_ID_LEN], char buf[9])
{
    snprintf(buf, 9, "%02x%02x%02x%02x", id[0], id[1], id[2], id[3]);
    return buf;
}

static void w_mb(wbuf_t *w, const msg_mb_t *mb)
{
    w_u(w, (uint64_t)mb->step, 8);
    w_u(w, mb->index, 4);
    w_u(w, mb->attempt, 2);
    w_u(w, mb->kind, 1);
}

static void r_mb(rbuf_t *r, msg_mb_t *mb)
{
    mb->step = (int64_t)r_u(r, 8);
    mb->index = (uint32_t)r_u(r, 4);
    mb->attempt = (uint16_t)r_u(r, 2);
    mb->kind = (uint8_t)r_u(r, 1);
    if (mb->kind > 1 || mb->step < 0) r->bad = 1;
}

int msg_encode(const msg_t *m, uint8_t *buf, size_t cap, size_t *len, char *err)
{
    if (m->type < 1 || m->type > MSG_TYPE_MAX)
        return status_set(err, STATUS_EINVAL, "msg_encode: unknown type %d", m->type);
    wbuf_t w = {.p = buf, .cap = cap};
    w_bytes(&w, "SWT", 3);
    w_u(&w, MSG_VERSION, 1);
    w_u(&w, m->type, 1);
    w_u(&w, m->flags, 1);
    w_u(&w, 0, 2);
    w_u(&w, m->swarm, 8);
    w_bytes(&w, m->sender, MSG_ID_LEN);
    w_u(&w, m->seq, 8);
    switch (m->type) {
    case MSG_HELLO:
        w_str(&w, m->addr, MSG_ADDR_MAX);
        w_u(&w, (uint16_t)m->stage, 2);
        break;
    case MSG_WELCOME:
        w_str(&w, m->addr, MSG_ADDR_MAX);
        break;
    case MSG_FWD:
    case MSG_BWD:
    case MSG_NACK:
        w_mb(&w, &m->mb);
        w_u(&w, (uint16_t)m->stage, 2);
        if (m->nroute > MSG_ROUTE_MAX)
            return status_set(err, STATUS_EINVAL, "msg_encode: route of %d hops", m->nroute);
        w_u(&w, m->nroute, 1);
        for (int i = 0; i < m->nroute; i++) w_bytes(&w, m->route[i], MSG_ID_LEN);
        w_f32(&w, m->loss);
        w_u(&w, m->skip, 8);
        if (m->type == MSG_NACK) w_str(&w, m->text, MSG_TEXT_MAX);
        break;
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_EXCH:
    case MSG_EXCH_REQ:
    case MSG_REDO:
        w_u(&w, (uint16_t)m->stage, 2);
        w_u(&w, (uint64_t)m->step, 8);
        w_u(&w, m->count, 4);
        w_u(&w, m->hash, 8);
        w_u(&w, (uint64_t)m->since, 8);
        if (m->type == MSG_EXCH || m->type == MSG_EXCH_REQ) w_bytes(&w, m->origin, MSG_ID_LEN);
        break;
    case MSG_RELAY:
        w_bytes(&w, m->dest, MSG_ID_LEN);
        break;
    case MSG_PROBE:
        w_u(&w, m->probe_kind, 1);
        w_u(&w, m->probe, 8);
        w_bytes(&w, m->dest, MSG_ID_LEN);
        w_u(&w, m->count, 4);
        break;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        w_u(&w, (uint16_t)m->stage, 2);
        w_u(&w, (uint64_t)m->step, 8);
        w_u(&w, m->offset, 8);
        w_u(&w, m->total, 8);
        w_u(&w, m->length, 4);
        w_bytes(&w, m->state_hash, 32);
        break;
    case MSG_LEAVE:
    case MSG_ERROR:
        w_u(&w, (uint16_t)m->code, 2);
        w_str(&w, m->text, MSG_TEXT_MAX);
        break;
    default:
        break; /* GOSSIP, STATUS_REQ, STATUS_REP: header only */
    }
    if (msg_signed(m->type)) w_bytes(&w, m->sig, MSG_SIG_LEN);
    if (w.overflow)
        return status_set(err, STATUS_EINVAL, "msg_encode: %s does not fit (%zu bytes)",
                          msg_type_name(m->type), cap);
    *len = w.n;
    return 0;
}

int msg_decode(const uint8_t *buf, size_t len, msg_t *m, char *err)
{
    rbuf_t r = {.p = buf, .len = len};
    char magic[3];
    memset(m, 0, sizeof *m);
    r_bytes(&r, magic, 3);
    int version = (int)r_u(&r, 1);
    if (r.bad || memcmp(magic, "SWT", 3)) goto malformed;
    if (version != MSG_VERSION)
        return status_set(err, STATUS_EVERSION, "message version %d (this peer speaks %d)", version,
                          MSG_VERSION);
    m->type = (uint8_t)r_u(&r, 1);
    m->flags = (uint8_t)r_u(&r, 1);
    if (r_u(&r, 2) != 0 || m->type < 1 || m->type > MSG_TYPE_MAX) goto malformed;
    m->swarm = r_u(&r, 8);
    r_bytes(&r, m->sender, MSG_ID_LEN);
    m->seq = r_u(&r, 8);
    switch (m->type) {
    case MSG_HELLO:
        r_str(&r, m->addr, MSG_ADDR_MAX);
        m->stage = (int16_t)r_u(&r, 2);
        if (m->stage < -1 || m->stage >= MSG_ROUTE_MAX || !addr_ok(m->addr)) goto malformed;
        break;
    case MSG_WELCOME:
        r_str(&r, m->addr, MSG_ADDR_MAX);
        if (!addr_ok(m->addr)) goto malformed;
        break;
    case MSG_FWD:
    case MSG_BWD:
    case MSG_NACK:
        r_mb(&r, &m->mb);
        m->stage = (int16_t)r_u(&r, 2);
        m->nroute = (uint8_t)r_u(&r, 1);
        if (m->nroute > MSG_ROUTE_MAX || m->stage < 0 || m->stage >= MSG_ROUTE_MAX) goto malformed;
        for (int i = 0; i < m->nroute; i++) r_bytes(&r, m->route[i], MSG_ID_LEN);
        m->loss = r_f32(&r);
        m->skip = r_u(&r, 8);
        if (m->skip & 1) goto malformed; /* stage 0 starts every path */
        if (m->type == MSG_NACK) r_str(&r, m->text, MSG_TEXT_MAX);
        break;
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_EXCH:
    case MSG_EXCH_REQ:
    case MSG_REDO:
        m->stage = (int16_t)r_u(&r, 2);
        m->step = (int64_t)r_u(&r, 8);
        m->count = (uint32_t)r_u(&r, 4);
        m->hash = r_u(&r, 8);
        m->since = (int64_t)r_u(&r, 8);
        if (m->type == MSG_EXCH || m->type == MSG_EXCH_REQ) r_bytes(&r, m->origin, MSG_ID_LEN);
        if (m->stage < 0 || m->step < 0 || m->since < 0) goto malformed;
        break;
    case MSG_RELAY:
        r_bytes(&r, m->dest, MSG_ID_LEN);
        break;
    case MSG_PROBE:
        m->probe_kind = (uint8_t)r_u(&r, 1);
        m->probe = r_u(&r, 8);
        r_bytes(&r, m->dest, MSG_ID_LEN);
        m->count = (uint32_t)r_u(&r, 4);
        if (m->probe_kind >= PROBE_KINDS) goto malformed;
        break;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        m->stage = (int16_t)r_u(&r, 2);
        m->step = (int64_t)r_u(&r, 8);
        m->offset = r_u(&r, 8);
        m->total = r_u(&r, 8);
        m->length = (uint32_t)r_u(&r, 4);
        r_bytes(&r, m->state_hash, 32);
        if (m->stage < 0 || m->step < -1) goto malformed;
        if (m->type == MSG_STATE_REP && (m->offset > m->total || m->length > m->total - m->offset))
            goto malformed;
        break;
    case MSG_LEAVE:
    case MSG_ERROR:
        m->code = (int16_t)r_u(&r, 2);
        r_str(&r, m->text, MSG_TEXT_MAX);
        break;
    default:
        break;
    }
    if (msg_signed(m->type)) r_bytes(&r, m->sig, MSG_SIG_LEN);
    if (r.bad || r.n != len) goto malformed;
    return 0;
malformed:
    return status_set(err, STATUS_EMALFORMED, "malformed %s message (%zu bytes)",
                      msg_type_name(m->type), len);
}

/* ---- member tables ---------------------------------------------------------------- */

enum { MEMBER_FIXED = MSG_ID_LEN + 2 + 2 + 1 + 8 + 8 + 8 + 4 + 4 + 8 * 5 + 4 + 8 * MSG_CKPT_MAX + MSG_SIG_LEN };

size_t msg_members_size(const msg_member_t *v, int n)
{
    size_t s = 4;
    for (int i = 0; i < n; i++) s += MEMBER_FIXED + strnlen(v[i].addr, MSG_ADDR_MAX);
    return s;
}

static void w_entry(wbuf_t *w0, const msg_member_t *e, int state)
{
    wbuf_t w = *w0;
    {
        w_bytes(&w, e->id, MSG_ID_LEN);
        w_str(&w, e->addr, MSG_ADDR_MAX);
        w_u(&w, (uint16_t)e->stage, 2);
        w_u(&w, (uint64_t)state, 1);
        w_u(&w, e->heartbeat, 8);
        w_u(&w, (uint64_t)e->step, 8);
        w_u(&w, (uint64_t)e->serving_from, 8);
        w_f32(&w, e->throughput);
        w_f32(&w, e->loss);
        w_u(&w, e->served, 8);
        w_u(&w, e->bytes_in, 8);
        w_u(&w, e->bytes_out, 8);
        w_u(&w, e->retries, 8);
        w_u(&w, e->rejected, 8);
        w_u(&w, e->uptime_s, 4);
        for (int c = 0; c < MSG_CKPT_MAX; c++) w_u(&w, (uint64_t)e->ckpt[c], 8);
    }
    *w0 = w;
}

int msg_members_encode(const msg_member_t *v, int n, uint8_t *buf, size_t cap, size_t *len,
                       char *err)
{
    if (n < 0 || n > MSG_MEMBERS_MAX)
        return status_set(err, STATUS_EINVAL, "member table of %d entries", n);
    wbuf_t w = {.p = buf, .cap = cap};
    w_u(&w, (uint32_t)n, 4);
    for (int i = 0; i < n; i++) {
        w_entry(&w, &v[i], v[i].state);
        w_bytes(&w, v[i].sig, MSG_SIG_LEN);
    }
    if (w.overflow) return status_set(err, STATUS_EINVAL, "member table does not fit");
    *len = w.n;
    return 0;
}

int msg_members_decode(const uint8_t *buf, size_t len, msg_member_t *v, int max, int *n, char *err)
{
    rbuf_t r = {.p = buf, .len = len};
    uint32_t count = (uint32_t)r_u(&r, 4);
    if (r.bad || count > MSG_MEMBERS_MAX || (int)count > max ||
        (size_t)count * (MEMBER_FIXED) > len - 4)
        goto malformed;
    for (uint32_t i = 0; i < count; i++) {
        msg_member_t *e = &v[i];
        memset(e, 0, sizeof *e);
        r_bytes(&r, e->id, MSG_ID_LEN);
        r_str(&r, e->addr, MSG_ADDR_MAX);
        e->stage = (int16_t)r_u(&r, 2);
        e->state = (uint8_t)r_u(&r, 1);
        e->heartbeat = r_u(&r, 8);
        e->step = (int64_t)r_u(&r, 8);
        e->serving_from = (int64_t)r_u(&r, 8);
        e->throughput = r_f32(&r);
        e->loss = r_f32(&r);
        e->served = r_u(&r, 8);
        e->bytes_in = r_u(&r, 8);
        e->bytes_out = r_u(&r, 8);
        e->retries = r_u(&r, 8);
        e->rejected = r_u(&r, 8);
        e->uptime_s = (uint32_t)r_u(&r, 4);
        for (int c = 0; c < MSG_CKPT_MAX; c++) {
            e->ckpt[c] = (int64_t)r_u(&r, 8);
            if (e->ckpt[c] < 0) goto malformed;
        }
        r_bytes(&r, e->sig, MSG_SIG_LEN);
        if (r.bad || e->stage < 0 || e->stage >= MSG_ROUTE_MAX || e->state > MEMBER_SUSPECT ||
            !isfinite(e->throughput) || e->throughput < 0 || e->step < 0 || !addr_ok(e->addr))
            goto malformed;
    }
    if (r.n != len) goto malformed;
    *n = (int)count;
    return 0;
malformed:
    return status_set(err, STATUS_EMALFORMED, "malformed member table (%zu bytes)", len);
}

/* ---- signatures ------------------------------------------------------------------- */

int msg_signed(int type)
{
    return type == MSG_HELLO || type == MSG_LEAVE;
}

void msg_sign(uint8_t *hdr, size_t len, const uint8_t sk[64])
{
    if (len < 56 + MSG_SIG_LEN) return;
    crypto_sign_detached(hdr + len - MSG_SIG_LEN, NULL, hdr, len - MSG_SIG_LEN, sk);
}

int msg_verify(const uint8_t *hdr, size_t len)
{
    if (len < 56 + MSG_SIG_LEN) return 0;
    return crypto_sign_verify_detached(hdr + len - MSG_SIG_LEN, hdr, len - MSG_SIG_LEN, hdr + 16) ==
           0;
}

/* "SWTM", version, the entry without its signature; returns the length. */
static size_t member_sign_input(const msg_member_t *e, int state, uint8_t *buf, size_t cap)
{
    wbuf_t w = {.p = buf, .cap = cap};
    w_bytes(&w, "SWTM", 4);
    w_u(&w, MSG_VERSION, 1);
    w_entry(&w, e, state);
    return w.overflow ? 0 : w.n;
}

/* Entry signatures, remembered. One version of an entry is signed on every message that
 * carries it (a member's own entry opens each table and PROBE) and reaches a member many
 * times (a table on join, then news and probes); an Ed25519 signature costs ~20 us and a
 * check ~50 us, where a BLAKE2b-256 digest of what they cover costs ~0.3 us. Ed25519 is
 * deterministic, so a signature is remembered by the digest of (public key, input), and
 * a check that passed by the digest of (key, input, signature); a hit needs all 32 octets
 * equal. Shared by the threads (a mutex) and, in the simulator, by every simulated member:
 * a memo of pure functions, nothing taken on trust that was not checked. */
#define SIGNED_SLOTS (1u << 12)
#define VERIFIED_SLOTS (1u << 15)

static struct {
    uint8_t d[32], sig[MSG_SIG_LEN];
} signed_memo[SIGNED_SLOTS];
static uint8_t verified_memo[VERIFIED_SLOTS][32];
static pthread_mutex_t memo_mu = PTHREAD_MUTEX_INITIALIZER;

static void memo_digest(uint8_t d[32], const uint8_t key[32], const uint8_t *in, size_t n,
                        const uint8_t *sig)
{
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, 32);
    crypto_generichash_update(&h, key, 32);
    crypto_generichash_update(&h, in, n);
    if (sig) crypto_generichash_update(&h, sig, MSG_SIG_LEN);
    crypto_generichash_final(&h, d, 32);
}

void msg_member_sign(msg_member_t *e, const uint8_t sk[64])
{
    uint8_t buf[4 + 1 + MEMBER_FIXED + MSG_ADDR_MAX], d[32];
    size_t n = member_sign_input(e, e->state, buf, sizeof buf);
    memo_digest(d, sk + 32, buf, n, NULL); /* an Ed25519 secret key ends with its public key */
    uint32_t slot = le_get_u32(d) & (SIGNED_SLOTS - 1);
    pthread_mutex_lock(&memo_mu);
    int hit = memcmp(signed_memo[slot].d, d, 32) == 0;
    if (hit) memcpy(e->sig, signed_memo[slot].sig, MSG_SIG_LEN);
    pthread_mutex_unlock(&memo_mu);
    if (hit) return;
    crypto_sign_detached(e->sig, NULL, buf, n, sk);
    pthread_mutex_lock(&memo_mu);
    memcpy(signed_memo[slot].d, d, 32);
    memcpy(signed_memo[slot].sig, e->sig, MSG_SIG_LEN);
    pthread_mutex_unlock(&memo_mu);
}

int msg_member_verify(const msg_member_t *e, int state)
{
    uint8_t buf[4 + 1 + MEMBER_FIXED + MSG_ADDR_MAX], d[32];
    size_t n = member_sign_input(e, state, buf, sizeof buf);
    if (!n) return 0;
    memo_digest(d, e->id, buf, n, e->sig);
    uint8_t *slot = verified_memo[le_get_u32(d) & (VERIFIED_SLOTS - 1)];
    pthread_mutex_lock(&memo_mu);
    int hit = memcmp(slot, d, 32) == 0;
    pthread_mutex_unlock(&memo_mu);
    if (hit) return 1;
    if (crypto_sign_verify_detached(e->sig, buf, n, e->id) != 0) return 0;
    pthread_mutex_lock(&memo_mu);
    memcpy(slot, d, 32);
    pthread_mutex_unlock(&memo_mu);
    return 1;
}
