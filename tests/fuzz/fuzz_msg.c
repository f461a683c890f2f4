/* fuzz_msg.c — fuzz target: wire message headers and member tables (swarm/msg.c), and
 * what a peer does with a received table (members_merge, swarm/members.c).
 *
 * Every input is tried as a header frame (msg_decode) and as a GOSSIP/WELCOME payload
 * (msg_members_decode). Invariants: an accepted header or table re-encodes to exactly the
 * input (the format has one encoding per value); a table merged into a member table
 * leaves a table whose own gossip encoding decodes again.
 *
 * Not for: the sockets (net.c) or the peer's handlers (peer/). */
#include "fuzz.h"

#include "common/status.h"
#include "swarm/members.h"
#include "swarm/msg.h"

#include <string.h>

static void check_header(const uint8_t *data, size_t size)
{
    static msg_t m;
    static uint8_t out[MSG_HEADER_MAX];
    char err[STATUS_ERR_LEN];
    if (msg_decode(data, size, &m, err)) return;
    fuzz_accepted++;
    FUZZ_CHECK(m.type >= 1 && m.type <= MSG_TYPE_MAX);
    FUZZ_CHECK(m.nroute <= MSG_ROUTE_MAX);
    FUZZ_CHECK(strlen(m.addr) <= MSG_ADDR_MAX && strlen(m.text) <= MSG_TEXT_MAX);
    size_t len = 0;
    FUZZ_CHECK(msg_encode(&m, out, sizeof out, &len, err) == 0);
    FUZZ_CHECK(len == size && !memcmp(out, data, size));
}

static void check_table(const uint8_t *data, size_t size)
{
    static msg_member_t v[MSG_MEMBERS_MAX], w[MSG_MEMBERS_MAX];
    char err[STATUS_ERR_LEN];
    int n = 0;
    if (msg_members_decode(data, size, v, MSG_MEMBERS_MAX, &n, err)) return;
    fuzz_accepted++;
    FUZZ_CHECK(n >= 0 && n <= MSG_MEMBERS_MAX);
    FUZZ_CHECK(msg_members_size(v, n) == size);
    uint8_t *out = malloc(size);
    size_t len = 0;
    FUZZ_CHECK(out && msg_members_encode(v, n, out, size, &len, err) == 0);
    FUZZ_CHECK(len == size && !memcmp(out, data, size));
    free(out);

    /* merge into a table that knows itself and one other member, as a peer would */
    msg_member_t self = {.stage = 0, .state = MEMBER_SERVING};
    memset(self.id, 0xAA, MSG_ID_LEN);
    strcpy(self.addr, "tcp://127.0.0.1:5555");
    members_t *t = members_new(&self, 1.0, NULL, err);
    FUZZ_CHECK(t);
    msg_member_t other = self;
    memset(other.id, 0xBB, MSG_ID_LEN);
    other.heartbeat = 5;
    FUZZ_CHECK(members_merge(t, &other, 1, 1.0) >= 0);
    FUZZ_CHECK(members_merge(t, v, n, 2.0) >= 0);
    members_tick(t, 3.0, 10.0, NULL, 0);
    FUZZ_CHECK(members_merge(t, v, n, 4.0) >= 0); /* the same table again changes nothing new */
    int c = members_count(t);
    FUZZ_CHECK(c >= 1 && c <= n + 2);
    for (int i = 0; i < c; i++)
        for (int j = i + 1; j < c; j++) /* one entry per id */
            FUZZ_CHECK(memcmp(members_at(t, i)->m.id, members_at(t, j)->m.id, MSG_ID_LEN));
    uint8_t *g = NULL;
    size_t glen = 0;
    if (members_encode_gossip(t, 5.0, 60.0, &g, &glen, err) == 0) {
        int k = 0;
        FUZZ_CHECK(msg_members_decode(g, glen, w, MSG_MEMBERS_MAX, &k, err) == 0);
        FUZZ_CHECK(k >= 1 && !memcmp(w[0].id, self.id, MSG_ID_LEN));
    } else {
        FUZZ_CHECK(c > MSG_MEMBERS_MAX); /* only a table too long to send may fail */
    }
    free(g);
    members_destroy(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    check_header(data, size);
    check_table(data, size);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

static void emit_header(fuzz_emit_fn emit, void *ctx, const msg_t *m, const char *name)
{
    uint8_t buf[MSG_HEADER_MAX];
    size_t len = 0;
    char err[STATUS_ERR_LEN];
    if (msg_encode(m, buf, sizeof buf, &len, err) == 0) emit(ctx, name, buf, len);
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    msg_t m;
    for (int type = 1; type <= MSG_TYPE_MAX; type++) {
        memset(&m, 0, sizeof m);
        m.type = (uint8_t)type;
        m.swarm = 0x1122334455667788ull;
        memset(m.sender, 0x11 * type, MSG_ID_LEN);
        m.seq = (uint64_t)type * 1000;
        strcpy(m.addr, "tcp://10.0.0.1:4000");
        m.stage = (int16_t)(type % 3);
        m.mb = (msg_mb_t){.step = 7, .index = 3, .attempt = 1, .kind = (uint8_t)(type & 1)};
        m.nroute = (uint8_t)(type % 4);
        for (int i = 0; i < m.nroute; i++) memset(m.route[i], i + 1, MSG_ID_LEN);
        m.loss = 2.5f;
        m.step = 42;
        m.count = 16;
        m.hash = 0xdeadbeefcafef00dull;
        m.since = 3;
        memset(m.origin, 0x77, MSG_ID_LEN);
        m.offset = 0;
        m.total = 4096;
        m.length = 1024;
        memset(m.state_hash, 0x5a, 32);
        m.code = -4;
        strcpy(m.text, "a reason");
        char name[64];
        snprintf(name, sizeof name, "header-%s", msg_type_name(type));
        emit_header(emit, ctx, &m, name);
    }
    msg_member_t v[3];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 3; i++) {
        memset(v[i].id, 0x30 + i, MSG_ID_LEN);
        snprintf(v[i].addr, sizeof v[i].addr, "tcp://10.0.0.%d:%d", i + 1, 5000 + i);
        v[i].stage = (int16_t)i;
        v[i].state = (uint8_t)(i == 2 ? MEMBER_DEAD : MEMBER_SERVING);
        v[i].heartbeat = 10 + (uint64_t)i;
        v[i].step = 5;
        v[i].throughput = 12.5f;
        v[i].loss = 3.25f;
        v[i].served = 100;
        v[i].uptime_s = 60;
    }
    uint8_t buf[1024];
    size_t len = 0;
    char err[STATUS_ERR_LEN];
    for (int n = 0; n <= 3; n++) {
        char name[64];
        snprintf(name, sizeof name, "members-%d", n);
        if (msg_members_encode(v, n, buf, sizeof buf, &len, err) == 0) emit(ctx, name, buf, len);
    }
}
