/* fuzz_pool.c — fuzz target: a stage pool fed what members send it (swarm/pool.c):
 * PROGRESS bitmaps and EXCH messages (header through msg_decode, then the stage message,
 * the counted bitmap and the claimed ids, with the length checks peer/step.c makes),
 * interleaved with this member's own steps and counts.
 *
 * Input: M u8 (1..256 microbatches per step), then records: kind u8 | header length u16
 * | header | three payload frames (length u16 | bytes). kind & 3: 0 a received message,
 * 1 pool_begin(header-less step = kind >> 2), 2 pool_count(kind >> 2), 3 the queries.
 * Invariants: a stored message is found again; a refused one had a wrong bitmap or claims
 * size; the union of all reports covers the union of the held messages; every held
 * message of the step is found by pool_find and its part is not "missing".
 *
 * Not for: the peer's decisions (when to step, whom to ask). */
#include "fuzz.h"

#include "common/status.h"
#include "swarm/msg.h"
#include "swarm/pool.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    int M = 1 + (int)fuzz_u(&in, 1);
    pool_t *p = pool_new(M);
    if (!p) return 0;
    size_t nb = pool_bitmap_bytes(p);
    FUZZ_CHECK(nb == ((size_t)M + 7) / 8);
    static msg_t m;
    static msg_member_t live[4];
    for (int i = 0; i < 4; i++) memset(live[i].id, 0x10 + i, MSG_ID_LEN);
    uint8_t *u = malloc(nb), *mu = malloc(nb);
    FUZZ_CHECK(u && mu);
    double now = 0;
    char err[STATUS_ERR_LEN];
    for (int records = 0; in.at < in.n && records < 64; records++) {
        int kind = (int)fuzz_u(&in, 1);
        now += 0.5;
        if ((kind & 3) == 1) {
            pool_begin(p, kind >> 2, 3);
            FUZZ_CHECK(pool_step(p) == kind >> 2 && pool_mine_count(p) == 0);
            continue;
        }
        if ((kind & 3) == 2) {
            pool_count(p, (uint32_t)(kind >> 2));
            FUZZ_CHECK(pool_mine_count(p) <= (uint32_t)M);
            continue;
        }
        if ((kind & 3) == 3) {
            pool_union(p, live, 4, u);
            pool_msg_union(p, mu);
            for (int i = 0; i < M; i++)
                if (pool_bit(mu, i)) FUZZ_CHECK(pool_bit(u, i));
            (void)pool_all(p, u);
            const pool_msg_t *msgs[64];
            int n = pool_messages(p, pool_step(p), msgs, 64);
            FUZZ_CHECK(n >= 0);
            for (int i = 0; i < n && i < 64; i++) {
                FUZZ_CHECK(msgs[i]->step == pool_step(p));
                FUZZ_CHECK(pool_first_missing(p, msgs[i]->origin, msgs[i]->step) >= 0);
                FUZZ_CHECK(pool_find(p, msgs[i]->origin, msgs[i]->step, msgs[i]->part) == msgs[i]);
            }
            if (n > 0) (void)pool_vote_lost(msgs, n < 64 ? n : 64, 7, 0, live[0].id);
            for (int i = 0; i < 4; i++) (void)pool_member_covered(p, live[i].id);
            uint8_t ids[8][MSG_ID_LEN];
            FUZZ_CHECK(pool_reporters(p, ids, 8) >= 0);
            continue;
        }
        size_t hlen = (size_t)fuzz_u(&in, 2), rest;
        const uint8_t *h = fuzz_rest(&in, &rest);
        if (hlen > rest) hlen = rest;
        in.at += hlen;
        const uint8_t *f[3];
        size_t fl[3];
        for (int i = 0; i < 3; i++) {
            fl[i] = (size_t)fuzz_u(&in, 2);
            f[i] = fuzz_rest(&in, &rest);
            if (fl[i] > rest) fl[i] = rest;
            in.at += fl[i];
        }
        if (msg_decode(h, hlen, &m, err)) continue;
        if (m.type == MSG_PROGRESS) {
            if (m.count != (uint32_t)M || fl[0] != nb) continue; /* step.c's checks */
            fuzz_accepted++;
            uint8_t *bits = malloc(nb);
            memcpy(bits, f[0], nb);
            pool_on_progress(p, m.sender, m.step, bits, now);
            free(bits);
        } else if (m.type == MSG_EXCH) {
            uint8_t *copy[3];
            for (int i = 0; i < 3; i++) {
                copy[i] = malloc(fl[i] ? fl[i] : 1);
                memcpy(copy[i], f[i], fl[i]);
            }
            int rc = pool_store(p, &m, copy[0], fl[0], copy[1], fl[1], copy[2], fl[2]);
            FUZZ_CHECK(rc == 0 || rc == STATUS_EMALFORMED);
            if (rc == 0) {
                fuzz_accepted++;
                const pool_msg_t *e = pool_find(p, m.origin, m.step, m.flags);
                FUZZ_CHECK(e && e->step == m.step && e->part == m.flags);
                FUZZ_CHECK(pool_first_missing(p, m.origin, m.step) != m.flags);
            } else {
                FUZZ_CHECK(fl[1] != nb || fl[2] % MSG_ID_LEN);
            }
            for (int i = 0; i < 3; i++) free(copy[i]);
        }
    }
    free(u);
    free(mu);
    pool_destroy(&p);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

typedef struct {
    uint8_t p[4096];
    size_t n;
} out_t;

static void put(out_t *o, const void *src, size_t n)
{
    if (n && o->n + n <= sizeof o->p) memcpy(o->p + o->n, src, n), o->n += n;
}

static void put_u(out_t *o, uint64_t v, int bytes)
{
    uint8_t b[8];
    for (int i = 0; i < bytes; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(o, b, (size_t)bytes);
}

static void put_msg(out_t *o, const msg_t *m, const uint8_t *f0, size_t l0, const uint8_t *f1,
                    size_t l1, const uint8_t *f2, size_t l2)
{
    uint8_t h[MSG_HEADER_MAX];
    size_t hl = 0;
    char err[STATUS_ERR_LEN];
    if (msg_encode(m, h, sizeof h, &hl, err)) return;
    put_u(o, 0, 1);
    put_u(o, hl, 2);
    put(o, h, hl);
    put_u(o, l0, 2);
    put(o, f0, l0);
    put_u(o, l1, 2);
    put(o, f1, l1);
    put_u(o, l2, 2);
    put(o, f2, l2);
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const int Ms[] = {8, 13};
    for (size_t s = 0; s < sizeof Ms / sizeof *Ms; s++) {
        int M = Ms[s];
        size_t nb = ((size_t)M + 7) / 8;
        out_t o = {.n = 0};
        put_u(&o, (uint64_t)M - 1, 1);
        put_u(&o, 1 | 2 << 2, 1); /* begin step 2 */
        put_u(&o, 2 | 3 << 2, 1); /* count microbatch 3 */
        uint8_t bits[2] = {0x35, 0x01};
        msg_t m = {.type = MSG_PROGRESS, .stage = 1, .step = 2, .count = (uint32_t)M};
        memset(m.sender, 0x10, MSG_ID_LEN);
        put_msg(&o, &m, bits, nb, NULL, 0, NULL, 0);
        uint8_t ids[2 * MSG_ID_LEN], body[5] = {1, 2, 3, 4, 5};
        memset(ids, 0x10, MSG_ID_LEN);
        memset(ids + MSG_ID_LEN, 0x11, MSG_ID_LEN);
        m = (msg_t){.type = MSG_EXCH, .stage = 1, .step = 2, .count = 3, .hash = 7, .since = 1};
        memset(m.sender, 0x11, MSG_ID_LEN);
        memset(m.origin, 0x11, MSG_ID_LEN);
        put_msg(&o, &m, body, sizeof body, bits, nb, ids, sizeof ids);
        m.flags = 1; /* a supplement */
        put_msg(&o, &m, NULL, 0, bits, nb, NULL, 0);
        put_u(&o, 3, 1); /* queries */
        char name[32];
        snprintf(name, sizeof name, "pool-%d", M);
        emit(ctx, name, o.p, o.n);
    }
}
