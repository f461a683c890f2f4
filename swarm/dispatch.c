/* dispatch.c — the membership and dispatch core (dispatch.h): header checks, HELLO,
 * GOSSIP, WELCOME, LEAVE, STATUS_REQ, gossip ticks and the byte counts, on bytes given by
 * the owner (net.c, sim.c). Not for: sockets or delays. */
#include "swarm/dispatch.h"
#include "common/status.h"

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


struct dispatch {
    dispatch_io_t io;
    members_t *mem;
    uint64_t swarm, seq, ctl_seq, rejected, forged_seen;
    char *run_text;
    int signing;
    uint8_t sk[64];
    double timeout_s, forget_s, t0;
    int fanout;
    double last_tick;   /* the last dispatch_tick (0: none yet) */
    uint64_t pauses;    /* ticks that came late by more than DISPATCH_JUMP_S */
    double paused_s, last_pause_s;
    wire_count_t wire;
    msg_member_t *scratch; /* decoded tables, MSG_MEMBERS_MAX entries */
    /* an unreachable peer (its own address a relay address, docs/protocol.md 3.4): the
     * member it sends through to other unreachable members */
    uint8_t relay[MSG_ID_LEN];
    int has_relay;
    uint64_t relayed, relay_dropped; /* RELAYs this peer forwarded as a relay; could not */
};

static void hook_up(void *ctx, members_entry_t *e)
{
    dispatch_t *d = ctx;
    if (d->io.up) d->io.up(d->io.ctx, e);
}

static void hook_down(void *ctx, members_entry_t *e, const char *why)
{
    dispatch_t *d = ctx;
    if (d->io.down) d->io.down(d->io.ctx, e, why);
}

dispatch_t *dispatch_new(const dispatch_config_t *cfg, const dispatch_io_t *io, double now,
                         char *err)
{
    dispatch_t *d = calloc(1, sizeof *d);
    if (!d) goto nomem;
    d->io = *io;
    d->swarm = cfg->swarm;
    d->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 3.0;
    d->forget_s = cfg->forget_s > 0 ? cfg->forget_s : 60.0;
    d->fanout = cfg->gossip_fanout;
    d->t0 = now;
    if (cfg->run_text && !(d->run_text = strdup(cfg->run_text))) goto nomem;
    d->scratch = malloc(MSG_MEMBERS_MAX * sizeof *d->scratch);
    if (!d->scratch) goto nomem;
    members_hooks_t hooks = {.ctx = d, .up = hook_up, .down = hook_down};
    d->mem = members_new(&cfg->self, now, &hooks, err);
    if (!d->mem) goto fail;
    if (cfg->heartbeat) members_at(d->mem, 0)->m.heartbeat = cfg->heartbeat;
    if (cfg->sk) {
        memcpy(d->sk, cfg->sk, sizeof d->sk);
        d->signing = 1;
        members_set_signing(d->mem, d->sk);
    }
    return d;
nomem:
    status_set(err, STATUS_ENOMEM, "dispatch: out of memory");
fail:
    dispatch_destroy(&d);
    return NULL;
}

void dispatch_destroy(dispatch_t **dp)
{
    if (!dp || !*dp) return;
    dispatch_t *d = *dp;
    members_destroy(&d->mem);
    free(d->run_text);
    free(d->scratch);
    sodium_memzero(d->sk, sizeof d->sk);
    free(d);
    *dp = NULL;
}

members_t *dispatch_members(dispatch_t *d)
{
    return d->mem;
}

void dispatch_set_run(dispatch_t *d, uint64_t swarm, const char *run_text)
{
    char *t = run_text ? strdup(run_text) : NULL;
    if (run_text && !t) return; /* out of memory: keep the old run; WELCOME waits */
    d->swarm = swarm;
    free(d->run_text);
    d->run_text = t;
}

uint64_t dispatch_swarm(const dispatch_t *d)
{
    return d->swarm;
}

const char *dispatch_run_text(const dispatch_t *d)
{
    return d->run_text;
}

const wire_count_t *dispatch_wire(const dispatch_t *d)
{
    return &d->wire;
}

uint64_t dispatch_rejected(const dispatch_t *d)
{
    return d->rejected;
}

void dispatch_add_rejected(dispatch_t *d, uint64_t n)
{
    d->rejected += n;
    members_at(d->mem, 0)->m.rejected += n;
}

/* ---- out ------------------------------------------------------------------------------ */

static size_t frames_total(int nframes, const size_t *len)
{
    size_t t = 0;
    for (int i = 0; i < nframes; i++) t += len[i];
    return t;
}

/* The kind of a message whose header frame is hdr: its type octet names it; anything too
 * short to have one is control. */
static int frames_kind(int nframes, const void *const *data, const size_t *len)
{
    const uint8_t *h = nframes > 0 ? data[0] : NULL;
    /* a RELAY counts as what it carries */
    if (h && len[0] > 4 && h[4] == MSG_RELAY && nframes > 1)
        return frames_kind(nframes - 1, data + 1, len + 1);
    return transport_wire_kind(h && len[0] > 4 ? h[4] : 0);
}

void dispatch_count_out(dispatch_t *d, int nframes, const void *const *data, const size_t *len)
{
    size_t total = frames_total(nframes, len);
    d->wire.out[frames_kind(nframes, data, len)] += total;
    members_at(d->mem, 0)->m.bytes_out += total;
}

size_t dispatch_header(dispatch_t *d, msg_t *m, uint64_t clock_us, uint8_t *buf, size_t cap,
                       char *err)
{
    size_t len = 0;
    m->swarm = d->swarm;
    memcpy(m->sender, members_at(d->mem, 0)->m.id, MSG_ID_LEN);
    m->seq = ++d->seq;
    if (msg_signed(m->type)) {
        /* The control counter outlives the process: a clock in microseconds, strictly
         * increasing, so a restarted peer's HELLO is not taken for a replay. */
        d->ctl_seq = clock_us > d->ctl_seq ? clock_us : d->ctl_seq + 1;
        m->seq = d->ctl_seq;
    }
    if (msg_encode(m, buf, cap, &len, err)) return 0;
    if (msg_signed(m->type) && d->signing) msg_sign(buf, len, d->sk);
    return len;
}

static int unreachable(const msg_member_t *m)
{
    return msg_addr_relay(m->addr, NULL);
}

/* The index of this peer's relay while it is a live, reachable member; else -1. */
static int relay_index(dispatch_t *d)
{
    int j = d->has_relay ? members_find(d->mem, d->relay) : -1;
    members_entry_t *e = members_at(d->mem, j);
    return j > 0 && e->alive && !unreachable(&e->m) ? j : -1;
}

/* An unreachable peer reaches another unreachable member through its relay: the message
 * whole, as the payloads of a RELAY to the relay, which passes the frames on unchanged. */
static int send_relayed(dispatch_t *d, members_entry_t *e, int nframes, const void *const *data,
                        const size_t *len)
{
    char err[STATUS_ERR_LEN];
    int j = relay_index(d);
    if (j < 0 || nframes > MSG_RELAY_FRAMES) return -1;
    uint8_t hdr[MSG_HEADER_MAX];
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_RELAY;
    memcpy(m.dest, e->m.id, MSG_ID_LEN);
    size_t hlen = dispatch_header(d, &m, 0, hdr, sizeof hdr, err);
    if (!hlen) return -1;
    const void *fr[1 + MSG_RELAY_FRAMES] = {hdr};
    size_t fl[1 + MSG_RELAY_FRAMES] = {hlen};
    for (int i = 0; i < nframes; i++) fr[1 + i] = data[i], fl[1 + i] = len[i];
    if (d->io.send(d->io.ctx, members_at(d->mem, j), nframes + 1, fr, fl)) return -1;
    dispatch_count_out(d, nframes + 1, fr, fl);
    return 0;
}

static int send_entry(dispatch_t *d, members_entry_t *e, int nframes, const void *const *data,
                      const size_t *len)
{
    if (!e || !e->alive || !d->io.send) return -1;
    if (unreachable(&e->m) && unreachable(&members_at(d->mem, 0)->m))
        return send_relayed(d, e, nframes, data, len);
    if (d->io.send(d->io.ctx, e, nframes, data, len)) return -1;
    dispatch_count_out(d, nframes, data, len);
    return 0;
}

int dispatch_send(dispatch_t *d, const uint8_t id[MSG_ID_LEN], int nframes,
                  const void *const *data, const size_t *len)
{
    int j = members_find(d->mem, id);
    return j > 0 ? send_entry(d, members_at(d->mem, j), nframes, data, len) : -1;
}

/* ---- in ------------------------------------------------------------------------------- */

static int refuse(dispatch_t *d, int warn, int rc, char *err)
{
    d->rejected++;
    members_at(d->mem, 0)->m.rejected++;
    if (d->io.refused) d->io.refused(d->io.ctx, err, warn);
    return rc;
}

static void view_changed(dispatch_t *d)
{
    if (d->io.view) d->io.view(d->io.ctx);
}

static void on_hello(dispatch_t *d, const msg_t *m, double now)
{
    char err[STATUS_ERR_LEN];
    if (!d->run_text || !d->swarm) return; /* not ready to welcome anyone */
    int j = members_hello(d->mem, m, now);
    if (j < 0) return;
    uint8_t hdr[MSG_HEADER_MAX], *table = NULL;
    size_t tlen = 0;
    msg_t w;
    memset(&w, 0, sizeof w);
    w.type = MSG_WELCOME;
    snprintf(w.addr, sizeof w.addr, "%s", members_at(d->mem, 0)->m.addr);
    size_t hlen = dispatch_header(d, &w, 0, hdr, sizeof hdr, err);
    if (hlen && !members_encode(d->mem, &table, &tlen, err)) {
        const void *data[3] = {hdr, d->run_text, table};
        size_t len[3] = {hlen, strlen(d->run_text), tlen};
        send_entry(d, members_at(d->mem, j), 3, data, len);
    }
    free(table);
    view_changed(d);
}

static void gossip_send(dispatch_t *d, members_entry_t *only, double now, uint64_t r,
                        int probe);

/* The serving_from member id's entry holds here (INT64_MIN: none). */
static int64_t serving_from_of(dispatch_t *d, const uint8_t id[MSG_ID_LEN])
{
    int j = members_find(d->mem, id);
    return j > 0 ? members_at(d->mem, j)->m.serving_from : INT64_MIN;
}

/* GOSSIP or WELCOME: the table in frame pi merged. 0, or a refusal's status. */
static int on_table(dispatch_t *d, const msg_t *m, const uint8_t *tab, size_t tlen, double now,
                    char *err)
{
    int k = 0, rc = msg_members_decode(tab, tlen, d->scratch, MSG_MEMBERS_MAX, &k, err);
    if (rc) return rc;
    /* what the sender holds of this member changed: the program hears it now, not at the
     * next tick (a newcomer waits for every mate's echo of its naming, 9.5) */
    int heard = m->type == MSG_GOSSIP && members_echo(d->mem, m->sender, d->scratch, k, now);
    int64_t from = serving_from_of(d, m->sender);
    int ch = members_merge(d->mem, d->scratch, k, now);
    /* the sender named another first step (9.5): the program takes it in, then the sender
     * gets this table back at once, its echo; in that order, so that the echo never says
     * more than the program was handed */
    int named = m->type == MSG_GOSSIP && from != INT64_MIN && serving_from_of(d, m->sender) != from;
    uint64_t forged = members_forged(d->mem);
    if (forged > d->forged_seen) { /* entries not signed by the member they describe */
        char hex[9];
        uint64_t nf = forged - d->forged_seen;
        d->forged_seen = forged;
        d->rejected += nf;
        members_at(d->mem, 0)->m.rejected += nf;
        snprintf(err, STATUS_ERR_LEN, "ignored %llu member entr%s in a %s from %s: not signed by "
                 "the member", (unsigned long long)nf, nf == 1 ? "y" : "ies",
                 msg_type_name(m->type), msg_id_short(m->sender, hex));
        if (d->io.refused) d->io.refused(d->io.ctx, err, 1);
    }
    if (ch > 0 || heard || named) view_changed(d);
    if (named) {
        int j = members_find(d->mem, m->sender);
        if (j > 0) gossip_send(d, members_at(d->mem, j), now, 0, 0);
    }
    return 0;
}

/* A member's connection carries its peer id as routing id: no header claims another; and
 * with an allowlist the connection's CURVE key (user) names the sender. 0, or a refusal. */
static int check_conn(dispatch_t *d, const msg_t *m, const uint8_t *conn, size_t conn_len,
                      int check_user, const char *user, char *err)
{
    int rc;
    if (conn_len != MSG_ID_LEN || memcmp(conn, m->sender, MSG_ID_LEN)) {
        rc = status_set(err, STATUS_EMALFORMED, "%s whose sender id does not match its connection",
                        msg_type_name(m->type));
        return refuse(d, 0, rc, err);
    }
    if (check_user) {
        char hex[2 * MSG_ID_LEN + 1];
        sodium_bin2hex(hex, sizeof hex, m->sender, MSG_ID_LEN);
        if (!user || strcmp(user, hex)) {
            rc = status_set(err, STATUS_EMALFORMED, "%s whose sender is not the key of its "
                            "connection", msg_type_name(m->type));
            return refuse(d, 0, rc, err);
        }
    }
    return 0;
}

static int take(dispatch_t *d, const uint8_t *conn, size_t conn_len, int check_user,
                const char *user, int relayed, int nframes, const void *const *data,
                const size_t *len, double now, char *err);

/* A RELAY (docs/protocol.md 3.4). For another member: this peer is the relay; the sender
 * hands it over on its own connection, and it goes on, every frame unchanged, to the
 * member it names. For this peer: it comes from a relay, a live member, on the relay's
 * connection; the message it carries is the sender's own and is taken as if it came
 * straight from the sender. */
static int on_relay(dispatch_t *d, const msg_t *m, const uint8_t *conn, size_t conn_len,
                    int check_user, const char *user, int nframes, const void *const *data,
                    const size_t *len, double now, char *err)
{
    int rc;
    const uint8_t *inner = data[1];
    if (len[1] < 48 || memcmp(inner + 16, m->sender, MSG_ID_LEN)) {
        rc = status_set(err, STATUS_EMALFORMED, "RELAY whose message is not its sender's");
        return refuse(d, 0, rc, err);
    }
    if (memcmp(m->dest, members_at(d->mem, 0)->m.id, MSG_ID_LEN)) {
        if ((rc = check_conn(d, m, conn, conn_len, check_user, user, err))) return rc;
        if (unreachable(&members_at(d->mem, 0)->m)) {
            rc = status_set(err, STATUS_EMALFORMED, "RELAY to a peer that is no relay");
            return refuse(d, 0, rc, err);
        }
        int j = members_find(d->mem, m->dest);
        members_entry_t *e = members_at(d->mem, j);
        if (j <= 0 || !e->alive || !d->io.send || d->io.send(d->io.ctx, e, nframes, data, len)) {
            d->relay_dropped++; /* as a connection lost: the sender's custody covers it */
            return 0;
        }
        dispatch_count_out(d, nframes, data, len);
        d->relayed++;
        return 0;
    }
    int j = conn_len == MSG_ID_LEN ? members_find(d->mem, conn) : -1;
    if (j <= 0 || !members_at(d->mem, j)->alive) {
        rc = status_set(err, STATUS_EMALFORMED, "RELAY from a connection of no live member");
        return refuse(d, 0, rc, err);
    }
    msg_t via = *m; /* the relay's connection names the relay */
    memcpy(via.sender, conn, MSG_ID_LEN);
    if ((rc = check_conn(d, &via, conn, conn_len, check_user, user, err))) return rc;
    return take(d, m->sender, MSG_ID_LEN, 0, NULL, 1, nframes - 1, data + 1, len + 1, now, err);
}

int dispatch_on_frames(dispatch_t *d, const uint8_t *conn, size_t conn_len, int check_user,
                       const char *user, int nframes, const void *const *data,
                       const size_t *len, double now, char *err)
{
    size_t total = frames_total(nframes, len);
    members_at(d->mem, 0)->m.bytes_in += total;
    if (nframes >= 1) d->wire.in[frames_kind(nframes, data, len)] += total;
    if (nframes < 1 || nframes > 1 + MSG_RELAY_FRAMES) {
        int rc = status_set(err, STATUS_EMALFORMED, "a message of %d frames", nframes);
        return refuse(d, 0, rc, err);
    }
    return take(d, conn, conn_len, check_user, user, 0, nframes, data, len, now, err);
}

/* A message whose frames were counted: checked, then answered, merged or delivered.
 * relayed: it came inside a RELAY, whose connection was checked; conn is its sender. */
static int take(dispatch_t *d, const uint8_t *conn, size_t conn_len, int check_user,
                const char *user, int relayed, int nframes, const void *const *data,
                const size_t *len, double now, char *err)
{
    msg_t m;
    int rc;
    if ((rc = msg_decode(data[0], len[0], &m, err))) return refuse(d, 0, rc, err);
    if (m.type == MSG_RELAY ? nframes < 2 : nframes - 1 != msg_payloads(m.type)) {
        rc = status_set(err, STATUS_EMALFORMED, "%s with %d payload frames, expected %d",
                        msg_type_name(m.type), nframes - 1, msg_payloads(m.type));
        return refuse(d, 0, rc, err);
    }
    /* a RELAY carries a member's message: not another RELAY, nor the status tool's */
    if (relayed &&
        (m.type == MSG_RELAY || m.type == MSG_STATUS_REQ || m.type == MSG_STATUS_REP)) {
        rc = status_set(err, STATUS_EMALFORMED, "%s inside a RELAY", msg_type_name(m.type));
        return refuse(d, 0, rc, err);
    }
    if (m.type == MSG_STATUS_REQ) {
        size_t jlen = 0;
        char *json = d->io.status ? d->io.status(d->io.ctx, &jlen) : NULL;
        uint8_t hdr[MSG_HEADER_MAX];
        msg_t r;
        memset(&r, 0, sizeof r);
        r.type = MSG_STATUS_REP;
        size_t hlen = dispatch_header(d, &r, 0, hdr, sizeof hdr, err);
        const void *out[2] = {hdr, json ? json : ""};
        size_t olen[2] = {hlen, json ? jlen : 0};
        if (hlen && d->io.reply && !d->io.reply(d->io.ctx, conn, conn_len, 2, out, olen))
            dispatch_count_out(d, 2, out, olen);
        free(json);
        return 0;
    }
    /* Everything else must come from our swarm (a joiner's HELLO may not know it yet). */
    if (m.type != MSG_HELLO && d->swarm && m.swarm != d->swarm) {
        rc = status_set(err, STATUS_EMALFORMED, "%s from another swarm (%016llx)",
                        msg_type_name(m.type), (unsigned long long)m.swarm);
        return refuse(d, 0, rc, err);
    }
    if (m.type == MSG_RELAY)
        return on_relay(d, &m, conn, conn_len, check_user, user, nframes, data, len, now, err);
    if (!relayed && (rc = check_conn(d, &m, conn, conn_len, check_user, user, err))) return rc;
    /* Signed control: a forged or replayed HELLO or LEAVE is refused. */
    if (msg_signed(m.type) && d->signing) {
        if (!msg_verify(data[0], len[0])) {
            rc = status_set(err, STATUS_EMALFORMED, "%s with a bad signature",
                            msg_type_name(m.type));
            return refuse(d, 1, rc, err);
        }
        if (!members_control(d->mem, m.sender, m.seq)) {
            rc = status_set(err, STATUS_EMALFORMED, "%s replayed (counter %llu)",
                            msg_type_name(m.type), (unsigned long long)m.seq);
            return refuse(d, 1, rc, err);
        }
    }
    switch (m.type) {
    case MSG_HELLO:
        on_hello(d, &m, now);
        return 0;
    case MSG_GOSSIP:
        if ((rc = on_table(d, &m, data[1], len[1], now, err))) return refuse(d, 0, rc, err);
        return 0;
    case MSG_WELCOME:
        if ((rc = on_table(d, &m, data[2], len[2], now, err))) return refuse(d, 0, rc, err);
        break; /* and to the program: the run text */
    case MSG_LEAVE:
        if (members_leave(d->mem, m.sender, m.text)) view_changed(d);
        if (m.code != MSG_LEAVE_RUN_OVER) return 0;
        break; /* and to the program: the run is over */
    default:
        break;
    }
    if (d->io.deliver) d->io.deliver(d->io.ctx, &m, nframes, data, len);
    return 0;
}

/* ---- ticks ---------------------------------------------------------------------------- */

/* An unreachable peer names a relay (docs/protocol.md 3.4): the one it named while that
 * stays a live, reachable member, else one drawn with r among those (none: it names
 * none). Its own address says which, from its next heartbeat on. */
static void choose_relay(dispatch_t *d, uint64_t r)
{
    members_entry_t *me = members_at(d->mem, 0);
    if (!unreachable(&me->m) || relay_index(d) > 0) return;
    int k = 0, cnt = members_count(d->mem);
    for (int i = 1; i < cnt; i++)
        k += members_at(d->mem, i)->alive && !unreachable(&members_at(d->mem, i)->m);
    d->has_relay = 0;
    for (int i = 1, pick = k ? (int)((r >> 17) % (uint64_t)k) : -1; i < cnt && pick >= 0; i++) {
        members_entry_t *e = members_at(d->mem, i);
        if (e->alive && !unreachable(&e->m) && pick-- == 0) {
            memcpy(d->relay, e->m.id, MSG_ID_LEN);
            d->has_relay = 1;
        }
    }
    char addr[MSG_ADDR_MAX + 1];
    msg_addr_set_relay(addr, d->has_relay ? d->relay : NULL);
    if (strcmp(addr, me->m.addr)) members_set_addr(d->mem, addr);
}

void dispatch_set_self(dispatch_t *d, const msg_member_t *self, double now)
{
    int64_t from = members_at(d->mem, 0)->m.serving_from;
    members_set_self(d->mem, self);
    if (self->serving_from == from) return;
    /* a new first step named (9.5): every member hears it now, its echo comes back at once */
    members_beat(d->mem, now);
    gossip_send(d, NULL, now, 0, 0);
}

void dispatch_tick(dispatch_t *d, double now, uint64_t r)
{
    members_at(d->mem, 0)->m.uptime_s = (uint32_t)(now - d->t0);
    /* a tick far later than the last: this process was paused (SIGSTOP, a suspended
     * laptop, a VM migrated) or starved; the members' silence across it is ours */
    double gap = d->last_tick > 0 ? now - d->last_tick : 0;
    if (gap > DISPATCH_JUMP_S) {
        d->pauses++;
        d->paused_s += gap;
        d->last_pause_s = gap;
        members_resume(d->mem, now, gap);
    }
    d->last_tick = now;
    members_tick(d->mem, now, d->timeout_s, NULL, 0);
    choose_relay(d, r);
    gossip_send(d, NULL, now, r, 1);
}

/* GOSSIP to `only`, or (NULL) to the live members (all, or gossip_fanout of them drawn
 * with r) and, with `probe`, to one probe candidate (drawn with r). */
static void gossip_send(dispatch_t *d, members_entry_t *only, double now, uint64_t r,
                        int probe)
{
    char err[STATUS_ERR_LEN];
    uint8_t hdr[MSG_HEADER_MAX], *table = NULL;
    size_t tlen = 0;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_GOSSIP;
    size_t hlen = dispatch_header(d, &m, 0, hdr, sizeof hdr, err);
    if (!hlen || members_encode_gossip(d->mem, now, d->forget_s, &table, &tlen, err)) return;
    const void *data[2] = {hdr, table};
    size_t len[2] = {hlen, tlen};
    if (only) {
        send_entry(d, only, 2, data, len);
        free(table);
        return;
    }
    int cnt = members_count(d->mem), live = 0;
    int *idx = malloc((size_t)cnt * sizeof *idx);
    if (!idx) goto done;
    for (int i = 1; i < cnt; i++)
        if (members_at(d->mem, i)->alive) idx[live++] = i;
    int k = d->fanout > 0 && d->fanout < live ? d->fanout : live;
    uint64_t x = r;
    for (int i = 0; i < k; i++) {
        if (k < live) { /* partial Fisher-Yates: k random live members */
            x = x * 6364136223846793005ULL + 1442695040888963407ULL;
            int j = i + (int)((x >> 33) % (uint64_t)(live - i));
            int t = idx[i];
            idx[i] = idx[j], idx[j] = t;
        }
        send_entry(d, members_at(d->mem, idx[i]), 2, data, len);
    }
    /* One member that died of silence: after a partition heals the two sides find each
     * other this way (members.h). */
    int p = probe ? members_probe(d->mem, now, d->forget_s, r) : -1;
    if (p > 0 && d->io.probe && !d->io.probe(d->io.ctx, members_at(d->mem, p), 2, data, len))
        dispatch_count_out(d, 2, data, len);
    free(idx);
done:
    free(table);
}

double dispatch_last_pause(const dispatch_t *d)
{
    return d->last_pause_s;
}

uint64_t dispatch_pauses(const dispatch_t *d, double *paused_s)
{
    if (paused_s) *paused_s = d->paused_s;
    return d->pauses;
}

void dispatch_leave(dispatch_t *d, int code, const char *why, uint64_t clock_us)
{
    char err[STATUS_ERR_LEN];
    uint8_t hdr[MSG_HEADER_MAX];
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_LEAVE;
    m.code = (int16_t)code;
    snprintf(m.text, sizeof m.text, "%s", why);
    members_at(d->mem, 0)->m.state = MEMBER_LEAVING;
    size_t hlen = dispatch_header(d, &m, clock_us, hdr, sizeof hdr, err);
    if (!hlen) return;
    const void *data[1] = {hdr};
    for (int i = 1; i < members_count(d->mem); i++)
        send_entry(d, members_at(d->mem, i), 1, data, &hlen);
}

uint64_t dispatch_relayed(const dispatch_t *d, uint64_t *dropped)
{
    if (dropped) *dropped = d->relay_dropped;
    return d->relayed;
}
