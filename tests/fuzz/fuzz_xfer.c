/* fuzz_xfer.c — fuzz target: the receiving side of a state transfer (swarm/xfer.c): a
 * joiner's download fed STATE_REP frames (header through msg_decode, then the chunk) in
 * any order, from any donor, interleaved with its own requests and refusals.
 *
 * Input: stage u8, total u16 (+ 1 MiB when the stage octet's top bit is set: two chunks),
 * then records: kind u8 | header length u16 | header | payload length u16 | payload.
 * kind & 3 == 3 is a refusal from a donor instead of a reply; every record also advances
 * the clock by kind >> 2 seconds and asks for the next requests.
 * Invariants: requests name chunks inside the state, for this stage; a finished download
 * is exactly the bytes whose BLAKE2b-256 the donors announced, at their step.
 *
 * Not for: the serving side's snapshots (only seeds use xfer_serve). */
#include "fuzz.h"

#include "common/status.h"
#include "swarm/msg.h"
#include "swarm/xfer.h"

#include <sodium.h>
#include <string.h>

static msg_member_t donors[3];

static void setup(void)
{
    static int done;
    if (done) return;
    done = 1;
    FUZZ_CHECK(sodium_init() >= 0);
    for (int i = 0; i < 3; i++) {
        memset(donors[i].id, 0xd0 + i, MSG_ID_LEN);
        donors[i].state = MEMBER_SERVING;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    fuzz_in_t in = {data, size, 0};
    int sb = (int)fuzz_u(&in, 1);
    int stage = sb & 63;
    size_t total = (size_t)fuzz_u(&in, 2) + (sb & 128 ? XFER_CHUNK : 0);
    xfer_t *x = xfer_new(stage, total);
    if (!x) return 0;
    double now = 1.0;
    xfer_req_t reqs[8];
    static msg_t m;
    char err[STATUS_ERR_LEN];
    /* every (step, hash) a well-formed reply for this download announced */
    static uint8_t announced[64][32];
    static int64_t announced_step[64];
    int nann = 0;
    int records = 0;
    while (in.at < in.n && records++ < 64) {
        int kind = (int)fuzz_u(&in, 1);
        size_t hlen = (size_t)fuzz_u(&in, 2), rest;
        const uint8_t *h = fuzz_rest(&in, &rest);
        if (hlen > rest) hlen = rest;
        in.at += hlen;
        size_t plen = (size_t)fuzz_u(&in, 2);
        const uint8_t *p = fuzz_rest(&in, &rest);
        if (plen > rest) plen = rest;
        in.at += plen;
        now += kind >> 2;
        int n = xfer_next_requests(x, now, donors, 3, 5.0, reqs, 8);
        FUZZ_CHECK(n >= 0 && n <= 8);
        for (int i = 0; i < n; i++) {
            FUZZ_CHECK(reqs[i].req.type == MSG_STATE_REQ && reqs[i].req.stage == stage);
            FUZZ_CHECK(reqs[i].req.offset % XFER_CHUNK == 0);
            FUZZ_CHECK(reqs[i].req.offset == 0 || reqs[i].req.offset < total);
        }
        if ((kind & 3) == 3) {
            xfer_on_refusal(x, donors[kind % 3].id);
            continue;
        }
        if (msg_decode(h, hlen, &m, err) || m.type != MSG_STATE_REP) continue;
        fuzz_accepted++;
        uint8_t *copy = malloc(plen ? plen : 1); /* the payload frame, its own allocation */
        if (!copy) break;
        memcpy(copy, p, plen);
        xfer_on_reply(x, &m, copy, plen, now);
        free(copy);
        if (m.stage == stage && m.total == total && nann < 64) {
            memcpy(announced[nann], m.state_hash, 32);
            announced_step[nann++] = m.step;
        }
        int done = xfer_done(x);
        FUZZ_CHECK(done >= -1 && done <= 1);
        if (done == 1) {
            uint8_t hash[32];
            crypto_generichash(hash, 32, xfer_data(x), total, NULL, 0);
            int found = 0;
            for (int i = 0; i < nann; i++)
                found |= announced_step[i] == xfer_step(x) && !memcmp(announced[i], hash, 32);
            FUZZ_CHECK(found);
            FUZZ_CHECK(xfer_donors(x) >= 1);
            break;
        }
    }
    xfer_destroy(&x);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t *p;
    size_t n, cap;
} out_t;

static void put(out_t *o, const void *src, size_t n)
{
    if (o->n + n > o->cap) {
        o->cap = (o->n + n) * 2;
        o->p = realloc(o->p, o->cap);
    }
    memcpy(o->p + o->n, src, n);
    o->n += n;
}

static void put_u(out_t *o, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, (size_t)bytes);
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    setup();
    static const size_t totals[] = {0, 1, 300, 4000};
    for (size_t t = 0; t < sizeof totals / sizeof *totals; t++) {
        size_t total = totals[t];
        xfer_snap_t snap = {.step = -1};
        FUZZ_CHECK(xfer_snap_reserve(&snap, total) == 0);
        for (size_t i = 0; i < total; i++) snap.buf[i] = (uint8_t)(i * 31 + t);
        xfer_snap_seal(&snap, 9);
        out_t o = {0};
        put_u(&o, 2, 1); /* stage 2 */
        put_u(&o, total, 2);
        for (int r = 0; r < 2; r++) { /* the reply twice: the second is a duplicate */
            msg_t req = {.type = MSG_STATE_REQ, .stage = 2, .step = -1, .length = XFER_CHUNK};
            msg_t rep;
            const uint8_t *d;
            size_t dlen;
            char err[STATUS_ERR_LEN];
            if (xfer_serve(&snap, &req, &rep, &d, &dlen, err)) break;
            memset(rep.sender, 0xd0 + r, MSG_ID_LEN);
            uint8_t h[MSG_HEADER_MAX];
            size_t hlen;
            FUZZ_CHECK(msg_encode(&rep, h, sizeof h, &hlen, err) == 0);
            put_u(&o, 4 * (uint64_t)r, 1);
            put_u(&o, hlen, 2);
            put(&o, h, hlen);
            put_u(&o, dlen, 2);
            put(&o, d, dlen);
        }
        char name[64];
        snprintf(name, sizeof name, "state-%zu", total);
        if (o.n) emit(ctx, name, o.p, o.n);
        free(o.p);
        xfer_snap_free(&snap);
    }
}
