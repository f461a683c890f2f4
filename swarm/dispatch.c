/* dispatch.c — the membership and dispatch core (dispatch.h): header checks, HELLO,
 * GOSSIP, WELCOME, LEAVE, STATUS_REQ, gossip ticks and the byte counts, on bytes given by
 * the owner (net.c, sim.c). Not for: sockets or delays. */
#include "swarm/dispatch.h"
#include "common/status.h"

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* SWIM's probing state (docs/protocol.md 10.7). */
#define SWIM_NEWS_MAX 4  /* news entries piggybacked on a PING, ACK or REQ at most */
#define SWIM_PUSH_MAX 32 /* fresh news a pushed NEWS carries at most (a burst of joins
                          * clears in a tick or two, not a minute of 4 at a time) */
#define SWIM_FWD_MAX 8  /* pings asked of this peer by others, under way at once */
#define SWIM_DOUBT_PERIODS 1 /* a ping unanswered makes this peer doubt itself this long */
#define SWIM_HOLD_MAX 8      /* failed probes held back in a run at most: a cut of
                              * seconds is ridden out, a lasting one is not */
#define SWIM_MISS_DOUBT 1    /* a MISS's flags: its helper doubts itself (10.7 rule 12) */
#define SWIM_SYNC_DEAD 1     /* a SYNC's and its TABLE's flags: the recent deaths only (rule 8) */
#define SWIM_DOUBT_MAX 4     /* targets whose unanswered pings it doubts itself for, kept */
#define DISPATCH_MEND_S 5.0 /* a MEND sent to, or taken from, a member at most this often */
#define SWIM_DIRECT_LOST 2      /* pings a live member answered none of itself, for ... */
#define SWIM_DIRECT_DEAD_S 30.0 /* ... this long: its connection is opened anew (10.7
                                 * rule 13) */
typedef struct {
    int every, k, fanout;
    uint64_t ticks, probe_no;
    /* the probe under way: target, its probe number, the tick it was sent at; helpers
     * asked to ping it, those that said it did not answer them (MISS) */
    uint8_t target[MSG_ID_LEN];
    uint64_t probe, at_tick;
    int probing, asked, acked, helpers, misses;
    double sent_at;
    /* local health (10.7 rule 12): the tick until which this peer doubts itself (it saw a
     * ping go unanswered lately: a helper silent or in doubt, or one it was asked for);
     * failed probes held back in the run under way (of any target; the tick of its last),
     * whether the next period pings the target again, and whether the probe under way
     * does */
    struct {
        uint8_t target[MSG_ID_LEN];
        uint64_t until;
    } doubt[SWIM_DOUBT_MAX];
    int held, retry, retried;
    uint64_t holds, held_tick;
    /* the probe ring (10.7 rule 2): live members and this peer by id, kept by the up and
     * down hooks (ring_dirty: to be built anew); seconds per tick; what to add to the
     * clock the core is given to read the wall clock */
    int *ring, nring, ring_dirty;
    double tick_s, wall_offset;
    /* pool detail: the heartbeat of the own entry last sent to the pool */
    uint64_t pool_hb;
    /* pings asked of this peer (REQ): whom for, their probe number, ours */
    struct {
        uint8_t from[MSG_ID_LEN], target[MSG_ID_LEN];
        uint64_t theirs, ours, until_tick, miss_tick;
        int used, missed;
    } fwd[SWIM_FWD_MAX];
    uint64_t pings, acks, reqs, suspected, syncs;
    /* anti-entropy: the window's start, PROBEs in it that counted more live members than
     * this table and those that did not, the one that counted the most; the last SYNC */
    double differ_since, last_sync, sync_every;
    uint64_t higher, not_higher;
    int behind; /* windows in a row in which most PROBEs counted more */
    uint32_t best_count;
    uint8_t best[MSG_ID_LEN];
    /* ... and the other way (rule 8): whether each of the last SWIM_AHEAD_OF PROBEs counted
     * fewer live members than this table (bit 0 the last); the last SYNC for deaths */
    unsigned fewer;
    double ahead_last;
    /* a joiner: when its WELCOME came (0: none since the last SYNC it made for it) */
    double welcomed_at;
} swim_t;

#define SWIM_SYNC_AFTER_S 5.0  /* the window over which PROBEs' counts are compared */
#define SWIM_SYNC_EVERY_S 10.0 /* at most one SYNC this often; twice as long after each
                                * that taught nothing, up to SWIM_SYNC_MAX_S */
#define SWIM_SYNC_MAX_S 160.0
#define SWIM_AHEAD_OF 8       /* when SWIM_AHEAD_MIN of the last SWIM_AHEAD_OF PROBEs counted */
#define SWIM_AHEAD_MIN 6      /* fewer live members, this table holds the dead alive: a SYNC */
#define SWIM_AHEAD_EVERY_S 2.0 /* for the deaths at most this often (its answer is small) */

/* Asking after a pause (docs/protocol.md 10.8): a peer woken from a pause longer than the
 * member timeout asks the members it knew whether it is still in the run. */
#define ASK_MAX 16          /* members asked at most: its own stage's first, then others */
#define ASK_EVERY_S 1.0     /* a member not yet vouching is asked again this often */
#define ASK_TIMEOUTS 4      /* asking stops after this many member timeouts (the peer's
                             * END_WOKE_TIMEOUTS: by then it was left behind) */
#define ANSWER_DOUBT 2      /* an ANSWER's flags: its sender cannot vouch (10.8) */
#define ASK_MATES_S 2.0     /* once vouched for, the stage's mates asked have this long to
                             * answer before the question is settled: their answers bring
                             * their entries, and the peer decides on them whether its pool
                             * went on (sim pause 6x3 seed 700549 under SWIM: vouched by a
                             * member of another stage, its view still showing its mates at
                             * its own step, it applied that step after its pool had) */
typedef struct {
    uint64_t pause;     /* the pause asked about (its number, dispatch.pauses); 0: none */
    int doubt;          /* asking, or gave up asking unsettled: it cannot vouch for others
                         * (a sleeper that gave up is left behind; until it is gone, its
                         * answers must not settle another sleeper's question) */
    double since, last; /* when the asking began; the last round of ASKs */
    double gap;         /* the pause's length */
    int n;
    uint8_t id[ASK_MAX][MSG_ID_LEN];
    uint8_t answer[ASK_MAX]; /* 0: none yet; 1: answered */
    uint8_t mate[ASK_MAX];   /* 1: a member of its own stage */
    double vouch_at;    /* when an answer first vouched (0: none yet) */
    uint64_t vouched;   /* the last pause vouched for (0: none) */
} ask_t;

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
    double now;         /* the clock of the call under way (on_frames, tick) */
    uint64_t pauses;    /* ticks that came late by more than DISPATCH_JUMP_S */
    double paused_s, last_pause_s;
    wire_count_t wire;
    msg_member_t *scratch; /* decoded tables, MSG_MEMBERS_MAX entries */
    /* an unreachable peer (its own address a relay address, docs/protocol.md 3.4): the
     * member it sends through to other unreachable members */
    uint8_t relay[MSG_ID_LEN];
    int has_relay;
    uint64_t relayed, relay_dropped; /* RELAYs this peer forwarded as a relay; could not */
    uint64_t mends; /* MENDs taken (on_mend) */
    swim_t sw; /* SWIM membership (every > 0) */
    ask_t ask; /* after a pause: am I still in the run? (both memberships) */
    uint64_t hb0; /* the first heartbeat it was given: the wall clock's milliseconds (0: none) */
};

static void ring_put(dispatch_t *d, int i, int in);
static void swim_pool(dispatch_t *d);

/* SWIM from now on (docs/protocol.md 10.7 rule 1): the own entry is news, and its first
 * incarnation is the wall clock's seconds at the start (the first heartbeat, in
 * milliseconds, when it was given one). A peer back under its old id, restarted with its
 * store, is then a later incarnation than the one its mates declared dead, and revives at
 * the first entry of it they see: in the same incarnation they kept it dead, and its
 * refutation never came, for they answered it at the address of its previous life (local
 * --stage-failures 1:3, a stage's only peer back with its store on a new port: stage 1
 * never learned of it, and the rebuilt stage never got stage 1's state). */
static void swim_begin(dispatch_t *d)
{
    members_entry_t *me = members_at(d->mem, 0);
    uint64_t inc = d->hb0 / 1000;
    if (inc > 0xffffffffULL) inc = 0xffffffffULL;
    if (inc > me->m.heartbeat >> 32) me->m.heartbeat = inc << 32 | 1;
    members_make_news(d->mem, 0);
}

static void hook_up(void *ctx, members_entry_t *e)
{
    dispatch_t *d = ctx;
    e->up_at = d->now;
    e->direct_first = 0; /* its direct path is judged afresh (10.7 rule 13) */
    ring_put(d, (int)(e - members_at(d->mem, 0)), 1);
    if (d->io.up) d->io.up(d->io.ctx, e);
}

static void hook_down(void *ctx, members_entry_t *e, const char *why)
{
    dispatch_t *d = ctx;
    ring_put(d, (int)(e - members_at(d->mem, 0)), 0);
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
    d->sw.every = cfg->swim_every;
    d->sw.k = cfg->swim_k > 0 ? cfg->swim_k : 3;
    d->sw.fanout = cfg->swim_fanout > 0 ? cfg->swim_fanout : 3;
    d->sw.tick_s = cfg->tick_s > 0 ? cfg->tick_s : 0.25;
    d->sw.wall_offset = cfg->wall_offset;
    d->sw.ring_dirty = 1;
    d->t0 = now;
    if (cfg->run_text && !(d->run_text = strdup(cfg->run_text))) goto nomem;
    d->scratch = malloc(MSG_MEMBERS_MAX * sizeof *d->scratch);
    if (!d->scratch) goto nomem;
    members_hooks_t hooks = {.ctx = d, .up = hook_up, .down = hook_down};
    d->mem = members_new(&cfg->self, now, &hooks, err);
    if (!d->mem) goto fail;
    if (cfg->heartbeat) members_at(d->mem, 0)->m.heartbeat = cfg->heartbeat;
    d->hb0 = cfg->heartbeat;
    if (cfg->sk) {
        memcpy(d->sk, cfg->sk, sizeof d->sk);
        d->signing = 1;
        members_set_signing(d->mem, d->sk);
    }
    if (d->sw.every > 0) swim_begin(d); /* a joiner's entry: pushed at once */
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
    free(d->sw.ring);
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
    /* the run names its membership (a line "swim_every=N", model/train.c): a joiner learns
     * it from WELCOME and switches before it sends anything but HELLO */
    const char *k = t ? strstr(t, "swim_every=") : NULL;
    if (k && (k == t || k[-1] == '\n') && d->sw.every <= 0) {
        long n = strtol(k + strlen("swim_every="), NULL, 10);
        if (n > 0 && n <= 64) {
            d->sw.every = (int)n;
            swim_begin(d);
        }
    }
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

uint64_t dispatch_mends(const dispatch_t *d)
{
    return d->mends;
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
    if (j > 0) return send_entry(d, members_at(d->mem, j), nframes, data, len);
    if (j == 0 || !d->io.reply || d->io.reply(d->io.ctx, id, MSG_ID_LEN, nframes, data, len))
        return -1;
    dispatch_count_out(d, nframes, data, len);
    return 0;
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
static int on_probe(dispatch_t *d, const msg_t *m, const uint8_t *tab, size_t tlen, double now,
                    char *err);

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
    uint64_t refute = 0;
    int ch = d->sw.every > 0 ? members_swim_merge(d->mem, d->scratch, k, now, 0, &refute)
                             : members_merge(d->mem, d->scratch, k, now);
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
 * with an allowlist the connection's CURVE key (user) names the sender. A side connection
 * (the id and MSG_SIDE_TAG, docs/protocol.md 3.1) carries only HELLO, GOSSIP and PROBE.
 * 0, or a refusal. */
static int check_conn(dispatch_t *d, const msg_t *m, const uint8_t *conn, size_t conn_len,
                      int check_user, const char *user, char *err)
{
    int rc;
    int side = conn_len == MSG_ID_LEN + 1 && conn[MSG_ID_LEN] == MSG_SIDE_TAG &&
               (m->type == MSG_HELLO || m->type == MSG_GOSSIP || m->type == MSG_PROBE);
    if ((conn_len != MSG_ID_LEN && !side) || memcmp(conn, m->sender, MSG_ID_LEN)) {
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
    d->now = now;
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
    case MSG_PROBE:
        if ((rc = on_probe(d, &m, data[1], len[1], now, err))) return refuse(d, 0, rc, err);
        return 0;
    case MSG_WELCOME:
        if ((rc = on_table(d, &m, data[2], len[2], now, err))) return refuse(d, 0, rc, err);
        d->sw.welcomed_at = now; /* under SWIM: a SYNC a little later (10.7 rule 7) */
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
static void choose_relay(dispatch_t *d, uint64_t r, double now)
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
    if (!strcmp(addr, me->m.addr)) return;
    members_set_addr(d->mem, addr);
    if (d->sw.every > 0) { /* SWIM: a new address is a new version, and news */
        members_beat(d->mem, now);
        members_make_news(d->mem, 0);
    }
}

void dispatch_set_self(dispatch_t *d, const msg_member_t *self, double now)
{
    const msg_member_t *me = &members_at(d->mem, 0)->m;
    int64_t from = me->serving_from;
    if (d->sw.every > 0) {
        /* SWIM: a heartbeat rises only when the entry changes (it orders versions, and a
         * refutation must beat a suspicion of the last one); what every member must learn
         * is news, pushed next tick */
        int news = members_swim_newsworthy(me, self);
        /* a new version for what the pool protocol reads (and news): the step, the first
         * step, state, stage, checkpoints; counters and rates ride along with those */
        int bump = news || me->step != self->step || memcmp(me->ckpt, self->ckpt, sizeof me->ckpt);
        members_set_self(d->mem, self);
        if (bump) members_beat(d->mem, now);
        if (news) members_make_news(d->mem, 0);
        /* a new first step named (9.5): to the pool at once, as gossip sends it, so that
         * its echo comes back before the pool reaches it, not a tick later */
        if (self->serving_from != from) swim_pool(d);
        return;
    }
    members_set_self(d->mem, self);
    if (self->serving_from == from) return;
    /* a new first step named (9.5): every member hears it now, its echo comes back at once */
    members_beat(d->mem, now);
    gossip_send(d, NULL, now, 0, 0);
}

/* ---- SWIM (docs/protocol.md 10.7) ------------------------------------------------------- */

static uint64_t lcg(uint64_t *x)
{
    *x = *x * 6364136223846793005ULL + 1442695040888963407ULL;
    return *x >> 33;
}

/* What a PROBE's table holds after the sender's own entry. */
enum { ROWS_ONLY, ROWS_AND_NEWS, WHOLE_TABLE, RECENT_DEAD };

/* A PROBE of `kind` to e: this peer's own entry first, then rows[0, nrows) and, with
 * ROWS_AND_NEWS, up to SWIM_NEWS_MAX news (members_news); with RECENT_DEAD, up to
 * SWIM_PUSH_MAX recent deaths (members_recent_dead); WHOLE_TABLE: every live entry.
 * via_probe: e may be dead to this table (a probe candidate), sent over a connection of
 * its own. 0 sent, -1 not. */
static int probe_send_flags(dispatch_t *d, members_entry_t *e, int kind, int flags,
                            uint64_t probe, const uint8_t *target, const msg_member_t *rows,
                            int nrows, int what, int via_probe)
{
    char err[STATUS_ERR_LEN];
    uint8_t hdr[MSG_HEADER_MAX], *tab = NULL;
    size_t tlen = 0;
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_PROBE;
    m.probe_kind = (uint8_t)kind;
    m.flags = (uint8_t)flags;
    m.probe = probe;
    m.count = (uint32_t)(members_live_others(d->mem) + 1);
    if (target) memcpy(m.dest, target, MSG_ID_LEN);
    size_t hlen = dispatch_header(d, &m, 0, hdr, sizeof hdr, err);
    if (!hlen) return -1;
    if (what == WHOLE_TABLE) {
        if (members_encode(d->mem, &tab, &tlen, err)) return -1;
    } else {
        msg_member_t v[1 + SWIM_PUSH_MAX + SWIM_NEWS_MAX];
        int k = 0;
        if (nrows > SWIM_PUSH_MAX) nrows = SWIM_PUSH_MAX;
        if (kind == PROBE_ANSWER) /* its uptime says whether it lived through the pause */
            members_self_entry_now(d->mem, &v[k++]);
        else
            members_self_entry(d->mem, &v[k++]);
        for (int i = 0; i < nrows; i++) v[k++] = rows[i];
        if (what == ROWS_AND_NEWS) k += members_news(d->mem, v + k, SWIM_NEWS_MAX, 0);
        if (what == RECENT_DEAD)
            k += members_recent_dead(d->mem, d->now, d->forget_s, v + k, SWIM_PUSH_MAX);
        size_t cap = msg_members_size(v, k);
        if (!(tab = malloc(cap)) || msg_members_encode(v, k, tab, cap, &tlen, err)) {
            free(tab);
            return -1;
        }
    }
    const void *data[2] = {hdr, tab};
    size_t len[2] = {hlen, tlen};
    int rc;
    if (via_probe) {
        rc = d->io.probe ? d->io.probe(d->io.ctx, e, 2, data, len) : -1;
        if (!rc) dispatch_count_out(d, 2, data, len);
    } else {
        rc = send_entry(d, e, 2, data, len);
    }
    free(tab);
    return rc;
}

static int probe_send(dispatch_t *d, members_entry_t *e, int kind, uint64_t probe,
                      const uint8_t *target, const msg_member_t *rows, int nrows, int what,
                      int via_probe)
{
    return probe_send_flags(d, e, kind, 0, probe, target, rows, nrows, what, via_probe);
}

/* ---- asking after a pause (docs/protocol.md 10.8) ------------------------------------- */

/* A round of ASKs: every member asked (none has vouched yet, or the asking would be over),
 * over a connection of its own when this table holds it dead. */
static void ask_round(dispatch_t *d, double now)
{
    ask_t *a = &d->ask;
    a->last = now;
    for (int i = 0; i < a->n; i++) {
        int j = members_find(d->mem, a->id[i]);
        if (j <= 0) continue;
        members_entry_t *e = members_at(d->mem, j);
        probe_send(d, e, PROBE_ASK, a->pause, NULL, NULL, 0, ROWS_ONLY, !e->alive);
    }
}

/* A pause longer than the member timeout just ended: up to ASK_MAX members live before
 * it (up by `before`, the last tick before it: not one that came up through the messages
 * that waited in its sockets, a newcomer or a member back from the dead, which cannot say
 * whether the run it knew went on) are asked whether this peer is still in the run, its
 * own stage's first, then others from a place drawn with r. With nobody to ask, nobody can
 * say otherwise: vouched at once. */
static void ask_begin(dispatch_t *d, double now, double before, uint64_t r)
{
    ask_t *a = &d->ask;
    members_t *t = d->mem;
    int cnt = members_count(t), stage = members_at(t, 0)->m.stage;
    int off = cnt > 1 ? (int)(r % (uint64_t)(cnt - 1)) : 0;
    a->pause = d->pauses;
    a->gap = now - before;
    a->doubt = 1;
    a->since = now;
    a->vouch_at = 0;
    a->n = 0;
    memset(a->answer, 0, sizeof a->answer);
    for (int mates = 1; mates >= 0; mates--)
        for (int k = 0; k < cnt - 1 && a->n < ASK_MAX; k++) {
            const members_entry_t *e = members_at(t, 1 + (off + k) % (cnt - 1));
            if (e->alive && e->up_at <= before && (e->m.stage == stage) == mates) {
                a->mate[a->n] = (uint8_t)mates;
                memcpy(a->id[a->n++], e->m.id, MSG_ID_LEN);
            }
        }
    if (!a->n) {
        a->vouched = a->pause;
        a->pause = 0;
        a->doubt = 0;
        return;
    }
    ask_round(d, now);
}

/* Vouched for: settled once every stage mate asked answered, or ASK_MATES_S later. */
static void ask_settle(dispatch_t *d, double now)
{
    ask_t *a = &d->ask;
    if (!a->pause || a->vouch_at <= 0) return;
    int mates_in = 1;
    for (int k = 0; k < a->n; k++)
        if (a->mate[k] && !a->answer[k]) mates_in = 0;
    if (!mates_in && now - a->vouch_at < ASK_MATES_S) return;
    a->vouched = a->pause;
    a->pause = 0;
    a->doubt = 0;
    view_changed(d);
}

/* Every tick: the members not vouching yet are asked again each ASK_EVERY_S, until
 * ASK_TIMEOUTS member timeouts have passed (nobody vouched: the peer was left behind, and
 * stays in doubt: sim pause 6x3 seed 710745 under SWIM, a sleeper that gave up vouched for
 * another sleeper, and that one validated a fork with a newcomer). */
static void ask_tick(dispatch_t *d, double now)
{
    ask_t *a = &d->ask;
    if (!a->pause) return;
    ask_settle(d, now);
    if (!a->pause) return;
    if (now - a->since > ASK_TIMEOUTS * d->timeout_s)
        a->pause = 0;
    else if (now - a->last >= ASK_EVERY_S)
        ask_round(d, now);
}

/* An ASK (its sender's entry merged): the answer is this peer's own entry, in doubt while
 * this peer is asking too, or has just woken itself (its tick is late: the ASK waited in
 * its sockets through its own pause, which the tick will notice): a sleeper like the asker
 * cannot vouch for the run (sim pause 6x3 seed 100571: two peers paused past the run's end
 * took each other for the run and trained a fork with a newcomer). */
static void on_ask(dispatch_t *d, const msg_t *m, double now)
{
    int j = members_find(d->mem, m->sender);
    if (j <= 0) return;
    members_entry_t *e = members_at(d->mem, j);
    int doubt = d->ask.doubt || (d->last_tick > 0 && now - d->last_tick > DISPATCH_JUMP_S);
    probe_send_flags(d, e, PROBE_ANSWER, doubt ? ANSWER_DOUBT : 0, m->probe, NULL, NULL, 0,
                     ROWS_ONLY, !e->alive);
}

/* An ANSWER to this peer's ASK, its sender's entry `who`: one not in doubt vouches; so do
 * all of them together (the whole swarm was paused: every member asked is back and
 * answers). Only from a member up since before the pause (its uptime covers the pause and
 * the asking since): one that restarted meanwhile under the same id cannot say whether the
 * run went on (sim pause 6x3 seed 730199: three sleepers past the run's end, one crashed
 * and came back through another, and vouched for the third, which validated a fork). */
static void on_answer(dispatch_t *d, const msg_t *m, const msg_member_t *who, double now)
{
    ask_t *a = &d->ask;
    int i = 0, all = 1;
    if (!a->pause || m->probe != a->pause) return;
    if ((double)who->uptime_s + 1.0 < now - a->since + a->gap) return;
    while (i < a->n && memcmp(a->id[i], m->sender, MSG_ID_LEN)) i++;
    if (i == a->n) return;
    a->answer[i] = 1;
    for (int k = 0; k < a->n; k++) all &= a->answer[k];
    if (a->vouch_at <= 0 && (!(m->flags & ANSWER_DOUBT) || all)) a->vouch_at = now;
    ask_settle(d, now);
}

/* A pause's PROBE, ASK or ANSWER (any other kind: nothing), its sender's entry merged. */
static void on_pause_probe(dispatch_t *d, const msg_t *m, double now)
{
    if (m->probe_kind == PROBE_ASK)
        on_ask(d, m, now);
    else if (m->probe_kind == PROBE_ANSWER)
        on_answer(d, m, &d->scratch[0], now);
}

uint64_t dispatch_vouched(const dispatch_t *d)
{
    return d->ask.vouched;
}

/* Whether this peer doubts itself when it speaks of `target` (10.7 rule 12): a ping of
 * its own or one asked of it, of a member other than target, went unanswered within the
 * last SWIM_DOUBT_PERIODS periods, or its probe under way of another member is unanswered
 * past its first tick. Such a peer's MISS says more about it, or a partition around it,
 * than about the target. Pings of the target itself say nothing more than the MISS does:
 * counted, the helpers of a small swarm, each asked about a crashed member period after
 * period and probing it themselves, all doubted themselves because of it, and its every
 * probe was held (sim pause 6x3 seed 740253 with swim_every=4: detected after 12.8 s). */
static int swim_in_doubt(const swim_t *w, const uint8_t *target)
{
    for (int i = 0; i < SWIM_DOUBT_MAX; i++)
        if (w->ticks < w->doubt[i].until && memcmp(w->doubt[i].target, target, MSG_ID_LEN)) return 1;
    return w->probing && w->asked && !w->acked && memcmp(w->target, target, MSG_ID_LEN);
}

/* A ping of this peer's of `target` went unanswered: it doubts itself for a while, when it
 * speaks of others. */
static void swim_doubt(swim_t *w, const uint8_t *target)
{
    int at = 0;
    for (int i = 0; i < SWIM_DOUBT_MAX; i++) {
        if (!memcmp(w->doubt[i].target, target, MSG_ID_LEN)) { /* the same target: renewed */
            at = i;
            break;
        }
        if (w->doubt[i].until < w->doubt[at].until) at = i; /* else the oldest goes */
    }
    memcpy(w->doubt[at].target, target, MSG_ID_LEN);
    w->doubt[at].until = w->ticks + (uint64_t)(SWIM_DOUBT_PERIODS * w->every);
}

/* Up to n distinct live members other than self and `not`, drawn with x, into idx; how
 * many. Draws entries at random and skips dead ones (a table is mostly live), so a tick
 * of a 1,000-member table does not scan it. */
static int swim_draw(dispatch_t *d, uint64_t *x, int n, const uint8_t *not, int *idx)
{
    members_t *t = d->mem;
    int cnt = members_count(t), k = 0;
    for (int tries = 0; cnt > 1 && k < n && tries < 8 * n + 16; tries++) {
        int j = 1 + (int)(lcg(x) % (uint64_t)(cnt - 1)), dup = 0;
        members_entry_t *e = members_at(t, j);
        if (!e->alive || (not && !memcmp(e->m.id, not, MSG_ID_LEN))) continue;
        for (int q = 0; q < k; q++) dup |= idx[q] == j;
        if (!dup) idx[k++] = j;
    }
    return k;
}

/* Where member i goes in the probe ring (sorted by id): the first place whose id is not
 * below i's. */
static int ring_place(const dispatch_t *d, int i)
{
    const uint8_t *id = members_at(d->mem, i)->m.id;
    int lo = 0, hi = d->sw.nring;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (memcmp(members_at(d->mem, d->sw.ring[mid])->m.id, id, MSG_ID_LEN) < 0) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Member i into the probe ring (in) or out of it; a failed allocation marks the ring for
 * a rebuild. */
static void ring_put(dispatch_t *d, int i, int in)
{
    swim_t *w = &d->sw;
    if (w->ring_dirty || i <= 0) return;
    int at = ring_place(d, i), there = at < w->nring && w->ring[at] == i;
    if (in && !there) {
        int *r = realloc(w->ring, (size_t)(w->nring + 1) * sizeof *r);
        if (!r) {
            w->ring_dirty = 1;
            return;
        }
        w->ring = r;
        memmove(r + at + 1, r + at, (size_t)(w->nring - at) * sizeof *r);
        r[at] = i;
        w->nring++;
    } else if (!in && there) {
        memmove(w->ring + at, w->ring + at + 1, (size_t)(w->nring - at - 1) * sizeof *w->ring);
        w->nring--;
    }
}

/* The member to ping this period (10.7 rule 2): this peer and its live members on a ring
 * ordered by id; in period p (the wall clock over the period) the member 1 + p mod (n - 1)
 * places after this peer. Every member takes the same step p, so with clocks in step and
 * tables alike the members ping a shift of the ring, and each is pinged once a period:
 * a crashed member is pinged within about a period. (Each member on a random
 * round-robin of its own, the pings a member got came as a Poisson stream of one a
 * period, and one crash in a thousand went unpinged for 7 periods: 200 nodes under mild,
 * seed 1, detected after 11.58 s.) Clocks that disagree give each member a phase of its
 * own: the random round-robin again, never worse. -1: no live member. */
static int swim_next(dispatch_t *d, double now)
{
    swim_t *w = &d->sw;
    members_t *t = d->mem;
    if (w->ring_dirty || w->nring != members_live_others(t) + 1) { /* built anew: self, */
        int *r = realloc(w->ring, sizeof *r);                          /* then the others */
        if (!r) return -1;
        (w->ring = r)[0] = 0;
        w->nring = 1;
        w->ring_dirty = 0;
        for (int i = 1; i < members_count(t) && !w->ring_dirty; i++)
            if (members_at(t, i)->alive) ring_put(d, i, 1);
        if (w->ring_dirty) return -1;
    }
    if (w->nring < 2) return -1;
    double p = floor((now + w->wall_offset) / (w->tick_s * w->every));
    int dist = 1 + (int)fmod(p < 0 ? -p : p, (double)(w->nring - 1));
    return w->ring[(ring_place(d, 0) + dist) % w->nring];
}

/* Pool detail (10.7 rule 11): this peer's own entry to every live member of its stage's
 * pool whenever it changed (step, serving_from, state, counters: what the pool protocol
 * reads of its mates), at most once a tick. Nothing when it did not change: liveness is
 * the probes' business. */
static void swim_pool(dispatch_t *d)
{
    swim_t *w = &d->sw;
    members_t *t = d->mem;
    const msg_member_t *me = &members_at(t, 0)->m;
    if (me->heartbeat == w->pool_hb) return;
    w->pool_hb = me->heartbeat;
    for (int i = 1; i < members_count(t); i++) {
        members_entry_t *e = members_at(t, i);
        if (e->alive && e->m.stage == me->stage)
            probe_send(d, e, PROBE_NEWS, 0, NULL, NULL, 0, ROWS_ONLY, 0);
    }
}

/* After a pause: the whole table of one live member (a SYNC), for what changed meanwhile. */
static void swim_sync(dispatch_t *d, uint64_t r)
{
    int j;
    uint64_t x = r ^ 0x53594e43ULL;
    if (swim_draw(d, &x, 1, NULL, &j) == 1)
        probe_send(d, members_at(d->mem, j), PROBE_SYNC, 0, NULL, NULL, 0, ROWS_ONLY, 0);
}

/* ---- mending a dead connection (docs/protocol.md 11.3) -------------------------------- */

int dispatch_mend(dispatch_t *d, const uint8_t id[MSG_ID_LEN])
{
    int j = members_find(d->mem, id);
    members_entry_t *e = j > 0 ? members_at(d->mem, j) : NULL;
    if (!e || !e->alive) return -1;
    if (e->mend_sent_at > 0 && d->now - e->mend_sent_at < DISPATCH_MEND_S)
        return 0; /* done a moment ago: several answers fall overdue together */
    e->mend_sent_at = d->now;
    if (d->io.reconnect) d->io.reconnect(d->io.ctx, e, "an answer from it is overdue");
    return probe_send(d, e, PROBE_MEND, 0, NULL, NULL, 0, ROWS_ONLY, 0);
}

/* A MEND from a live member: this peer's connection to it opened anew, at most once per
 * DISPATCH_MEND_S for that member (a MEND costs the receiver what its connection held). */
static void on_mend(dispatch_t *d, const msg_t *m, double now)
{
    int j = members_find(d->mem, m->sender);
    members_entry_t *e = j > 0 ? members_at(d->mem, j) : NULL;
    if (!e || !e->alive || (e->mend_at > 0 && now - e->mend_at < DISPATCH_MEND_S)) return;
    e->mend_at = now;
    d->mends++;
    if (d->io.reconnect)
        d->io.reconnect(d->io.ctx, e, "it said what this peer sends it goes missing");
}

/* A ping of live member e with probe number `probe` (10.7 rule 13). When it has answered
 * none of this peer's pings itself (late or not) for SWIM_DIRECT_DEAD_S, over
 * SWIM_DIRECT_LOST pings or more, while it stays live (others vouch for it, or it would be
 * suspected), a connection between the two is dead with nothing to say so: this peer
 * opens its own anew (and the member, whose pings of this peer go unanswered the same way
 * if its own is the dead one, its own). A slow link, a ping queued behind megabytes, is
 * not taken for dead: its late answer clears the count; and a connection opened anew drops
 * what was queued on it, so the wait is long. */
static void direct_ping(dispatch_t *d, members_entry_t *e, uint64_t probe, double now)
{
    if (!e->direct_first) {
        e->direct_first = probe;
        e->direct_since = now;
        e->direct_lost = 0;
    } else if (++e->direct_lost >= SWIM_DIRECT_LOST && now - e->direct_since >= SWIM_DIRECT_DEAD_S) {
        e->direct_first = probe; /* a new connection: its count starts afresh */
        e->direct_since = now;
        e->direct_lost = 0;
        if (d->io.reconnect)
            d->io.reconnect(d->io.ctx, e, "its own answers to this peer's pings stopped coming");
    }
}

/* One tick: suspicions that ran out; the probe under way (ask others after a tick
 * unanswered, suspect at the period's end); a new probe each period, and one to a member
 * that died of silence (after a partition heals the sides find each other so); fresh news
 * pushed to fanout members. */
static void swim_tick(dispatch_t *d, double now, uint64_t r)
{
    swim_t *w = &d->sw;
    members_t *t = d->mem;
    uint64_t x = r;
    int ch = members_swim_expire(t, now, d->timeout_s) > 0;
    w->ticks++;
    int j = w->probing ? members_find(t, w->target) : -1;
    if (w->probing && (j <= 0 || !members_at(t, j)->alive || w->acked)) w->probing = 0;
    if (w->probing && w->ticks >= w->at_tick + (uint64_t)w->every) {
        /* no answer, directly or through others, within a period. A helper that said
         * nothing, or whose MISS said it doubts itself, points at this peer or a partition
         * rather than the target: the probe is held back and the target pinged again next
         * period, SWIM_HOLD_MAX times in a run at most. The run is this peer's, not the
         * target's: a cut that outlasted it outlasted it for every member across, and
         * each is suspected at its first failed probe (held per target, a side of 2
         * declared the 4 across dead one after another, 9 periods each: the last 25 s
         * into the cut, and in CI not within 36 s). It ends when a held target answers,
         * when the helpers vouch, or after SWIM_HOLD_MAX periods with no held failure.
         * Else (every helper vouched that the target did not answer it) it is suspected,
         * and hears so itself at once (to refute it if alive). */
        w->probing = 0;
        int missing = w->asked && w->misses < w->helpers;
        if (w->held && w->ticks - w->held_tick > (uint64_t)(SWIM_HOLD_MAX * w->every)) w->held = 0;
        if (missing) {
            swim_doubt(w, w->target);
            w->held_tick = w->ticks;
        }
        if (missing && w->held < SWIM_HOLD_MAX) {
            w->held++;
            w->holds++;
            w->retry = 1;
        } else {
            if (!missing) w->held = 0; /* its helpers answered: it is not cut off */
            if (members_suspect(t, j, now)) {
                w->suspected++;
                ch = 1;
                probe_send(d, members_at(t, j), PROBE_NEWS, 0, NULL, NULL, 0, ROWS_AND_NEWS, 0);
            }
        }
    } else if (w->probing && !w->asked && w->ticks >= w->at_tick + 1) {
        int idx[16], n = swim_draw(d, &x, w->k < 16 ? w->k : 16, w->target, idx);
        for (int i = 0; i < n; i++)
            probe_send(d, members_at(t, idx[i]), PROBE_REQ, w->probe, w->target, NULL, 0,
                       ROWS_AND_NEWS, 0);
        w->asked = 1;
        w->helpers = n;
        w->reqs += (uint64_t)n;
    }
    for (int i = 0; i < SWIM_FWD_MAX; i++) {
        if (!w->fwd[i].used) continue;
        if (!w->fwd[i].missed && w->ticks >= w->fwd[i].miss_tick) {
            /* no ACK from the target so far: the asker hears that this helper is alive,
             * and whether it doubts itself (as it stood before this miss); a ping of its
             * own unanswered, it doubts itself from now (rule 12) */
            int flags = swim_in_doubt(w, w->fwd[i].target) ? SWIM_MISS_DOUBT : 0;
            swim_doubt(w, w->fwd[i].target);
            int rj = members_find(t, w->fwd[i].from);
            if (rj > 0 && members_at(t, rj)->alive)
                probe_send_flags(d, members_at(t, rj), PROBE_MISS, flags, w->fwd[i].theirs,
                                 w->fwd[i].target, NULL, 0, ROWS_AND_NEWS, 0);
            w->fwd[i].missed = 1;
        }
        if (w->ticks > w->fwd[i].until_tick) w->fwd[i].used = 0;
    }
    if (w->ticks % (uint64_t)w->every == 0) {
        int next = -1;
        w->retried = 0;
        if (w->retry) { /* a held probe: the same target again, while it is a live member */
            next = members_find(t, w->target);
            if (next > 0 && !members_at(t, next)->alive) next = -1;
            w->retried = next > 0;
            w->retry = 0;
        }
        if (next <= 0) next = swim_next(d, now);
        if (next > 0 && !w->probing) {
            members_entry_t *e = members_at(t, next);
            memcpy(w->target, e->m.id, MSG_ID_LEN);
            w->probe = ++w->probe_no;
            w->at_tick = w->ticks;
            w->sent_at = now;
            w->probing = 1;
            w->asked = w->acked = w->helpers = w->misses = 0;
            w->pings++;
            direct_ping(d, e, w->probe, now);
            probe_send(d, e, PROBE_PING, w->probe, e->m.id, NULL, 0, ROWS_AND_NEWS, 0);
        }
        int p = members_probe(t, now, d->forget_s, lcg(&x));
        if (p > 0)
            probe_send(d, members_at(t, p), PROBE_PING, ++w->probe_no, members_at(t, p)->m.id,
                       NULL, 0, ROWS_AND_NEWS, 1);
    }
    swim_pool(d);
    if (members_has_fresh(t)) { /* the fresh news, taken once, to fanout members */
        msg_member_t v[SWIM_PUSH_MAX];
        int idx[16], n = swim_draw(d, &x, w->fanout < 16 ? w->fanout : 16, NULL, idx);
        int k = n ? members_news(t, v, SWIM_PUSH_MAX, 1) : 0; /* alone: they wait */
        for (int i = 0; i < n; i++)
            probe_send(d, members_at(t, idx[i]), PROBE_NEWS, 0, NULL, v, k, ROWS_ONLY, 0);
    }
    if (ch) view_changed(d);
}

/* A PROBE: its table merged under SWIM's rules, then answered as its kind asks. */
static int on_probe(dispatch_t *d, const msg_t *m, const uint8_t *tab, size_t tlen, double now,
                    char *err)
{
    swim_t *w = &d->sw;
    members_t *t = d->mem;
    int k = 0, rc = msg_members_decode(tab, tlen, d->scratch, MSG_MEMBERS_MAX, &k, err);
    if (rc) return rc;
    if (k < 1 || memcmp(d->scratch[0].id, m->sender, MSG_ID_LEN))
        return status_set(err, STATUS_EMALFORMED, "PROBE whose table does not start with its "
                          "sender");
    if (w->every <= 0) { /* whole-table gossip: only a pause's ASK and ANSWER (10.8), MEND */
        if (m->probe_kind != PROBE_ASK && m->probe_kind != PROBE_ANSWER &&
            m->probe_kind != PROBE_MEND)
            return 0;
        int ch = members_merge(t, d->scratch, 1, now);
        if (ch < 0) return status_set(err, STATUS_ENOMEM, "members: out of memory");
        if (m->probe_kind == PROBE_MEND) on_mend(d, m, now);
        on_pause_probe(d, m, now);
        if (ch > 0) view_changed(d);
        return 0;
    }
    uint64_t refute = 0;
    int before = members_count(t);
    /* what the sender holds of this peer (9.5's echo), and whether it named another first
     * step: as on_table does for GOSSIP */
    int heard = members_echo(t, m->sender, d->scratch, k, now);
    int64_t named_from = serving_from_of(d, m->sender);
    int ch = members_swim_merge(t, d->scratch, k, now, m->probe_kind != PROBE_TABLE, &refute);
    int named = named_from != INT64_MIN && serving_from_of(d, m->sender) != named_from;
    if ((heard || named) && !ch) ch = 1;
    if (m->probe_kind == PROBE_TABLE && !(m->flags & SWIM_SYNC_DEAD))
        /* a SYNC that taught nothing: ask less often */
        w->sync_every = members_count(t) > before ? SWIM_SYNC_EVERY_S
                        : w->sync_every < SWIM_SYNC_MAX_S ? 2 * w->sync_every : SWIM_SYNC_MAX_S;
    if (ch < 0) return status_set(err, STATUS_ENOMEM, "members: out of memory");
    if (refute) members_refute(t, now, refute);
    int j = members_find(t, m->sender);
    members_entry_t *from = j > 0 && members_at(t, j)->alive ? members_at(t, j) : NULL;
    if (named && from) { /* its echo: its entry as held here, back at once */
        msg_member_t held = from->m;
        probe_send(d, from, PROBE_NEWS, 0, NULL, &held, 1, ROWS_ONLY, 0);
    }
    if (j > 0 && !from) {
        /* a member this table holds dead speaks (a healed partition, a false verdict): it
         * hears so, refutes, and its higher heartbeat revives it here and everywhere */
        msg_member_t dead = members_at(t, j)->m;
        dead.state = MEMBER_DEAD;
        probe_send(d, members_at(t, j), PROBE_NEWS, 0, NULL, &dead, 1, ROWS_ONLY, 1);
    }
    switch (m->probe_kind) {
    case PROBE_PING:
        if (from) probe_send(d, from, PROBE_ACK, m->probe, m->dest, NULL, 0, ROWS_AND_NEWS, 0);
        break;
    case PROBE_ACK:
        if (w->probing && m->probe == w->probe && !memcmp(m->dest, w->target, MSG_ID_LEN)) {
            w->acked = 1;
            w->acks++;
            if (w->retried) w->held = 0; /* a held target answers: the cut healed */
            int tj = members_find(t, w->target);
            if (tj > 0 && !memcmp(m->sender, w->target, MSG_ID_LEN) && !w->asked)
                rtt_note(&members_at(t, tj)->rtt, now - w->sent_at);
        }
        if (from && from->direct_first && m->probe >= from->direct_first &&
            !memcmp(m->dest, m->sender, MSG_ID_LEN))
            from->direct_first = 0; /* its own answer to one of them, late or not */
        for (int i = 0; i < SWIM_FWD_MAX; i++) { /* a ping asked of this peer: pass it on */
            if (!w->fwd[i].used || w->fwd[i].ours != m->probe ||
                memcmp(w->fwd[i].target, m->sender, MSG_ID_LEN))
                continue;
            int rj = members_find(t, w->fwd[i].from);
            if (rj > 0 && members_at(t, rj)->alive)
                probe_send(d, members_at(t, rj), PROBE_ACK, w->fwd[i].theirs, m->sender,
                           &d->scratch[0], 1, ROWS_AND_NEWS, 0);
            w->fwd[i].used = 0;
        }
        break;
    case PROBE_MISS: /* one that doubts itself counts as silent (rule 12) */
        if (w->probing && m->probe == w->probe && !memcmp(m->dest, w->target, MSG_ID_LEN) &&
            w->misses < w->helpers && !(m->flags & SWIM_MISS_DOUBT))
            w->misses++;
        break;
    case PROBE_REQ: {
        int tj = members_find(t, m->dest), slot = -1;
        if (!from) break;
        for (int i = 0; i < SWIM_FWD_MAX && slot < 0; i++)
            if (!w->fwd[i].used) slot = i;
        if (tj <= 0 || slot < 0) { /* a target it does not know, or busy (it pings nothing:
                                    * no word on the target), says so now */
            probe_send_flags(d, from, PROBE_MISS, slot < 0 ? SWIM_MISS_DOUBT : 0, m->probe,
                             m->dest, NULL, 0, ROWS_AND_NEWS, 0);
            break;
        }
        members_entry_t *e = members_at(t, tj);
        memcpy(w->fwd[slot].from, m->sender, MSG_ID_LEN);
        memcpy(w->fwd[slot].target, m->dest, MSG_ID_LEN);
        w->fwd[slot].theirs = m->probe;
        w->fwd[slot].ours = ++w->probe_no;
        w->fwd[slot].until_tick = w->ticks + (uint64_t)w->every;
        w->fwd[slot].miss_tick = w->ticks + (uint64_t)(w->every > 2 ? w->every / 2 : 1);
        w->fwd[slot].missed = 0;
        w->fwd[slot].used = 1;
        probe_send(d, e, PROBE_PING, w->fwd[slot].ours, e->m.id, NULL, 0, ROWS_AND_NEWS,
                   !e->alive);
        break;
    }
    case PROBE_SYNC: /* the whole live table, or the recent deaths only */
        if (from && (m->flags & SWIM_SYNC_DEAD))
            probe_send_flags(d, from, PROBE_TABLE, SWIM_SYNC_DEAD, 0, NULL, NULL, 0,
                             RECENT_DEAD, 0);
        else if (from)
            probe_send(d, from, PROBE_TABLE, 0, NULL, NULL, 0, WHOLE_TABLE, 0);
        break;
    case PROBE_MEND:
        on_mend(d, m, now);
        break;
    default: /* NEWS, TABLE: merged above; ASK, ANSWER: a pause's question */
        on_pause_probe(d, m, now);
        break;
    }
    /* Anti-entropy: news can miss a member (a push reaches most, not all; a joiner's
     * WELCOME may lack what its welcomer missed). When in two windows of SWIM_SYNC_AFTER_S
     * in a row most PROBEs counted more live members than this table, it asks the one
     * that counted the most for its whole table (at most every sync_every). */
    uint32_t mine = (uint32_t)(members_live_others(t) + 1);
    if (m->probe_kind != PROBE_TABLE) {
        /* The other way: most members count fewer. This table holds alive a member the
         * others hold dead (its death's news missed it, or a stale table gave it) and that
         * nobody will speak of again: it asks this sender, which counts fewer, for its
         * recent deaths (a few entries), at once rather than over windows: a crash is to
         * be known everywhere within seconds. */
        w->fewer = ((w->fewer << 1) | (m->count < mine)) & ((1u << SWIM_AHEAD_OF) - 1);
        int nf = 0;
        for (unsigned b = w->fewer; b; b >>= 1) nf += (int)(b & 1);
        if (m->count < mine && from && nf >= SWIM_AHEAD_MIN &&
            (w->ahead_last <= 0 || now - w->ahead_last >= SWIM_AHEAD_EVERY_S)) {
            w->ahead_last = now;
            w->fewer = 0;
            probe_send_flags(d, from, PROBE_SYNC, SWIM_SYNC_DEAD, 0, NULL, NULL, 0, ROWS_ONLY,
                             0);
        }
        if (m->count > mine) {
            w->higher++;
            if (m->count > w->best_count && from) {
                w->best_count = m->count;
                memcpy(w->best, m->sender, MSG_ID_LEN);
            }
        } else {
            w->not_higher++;
        }
    }
    if (w->differ_since <= 0) w->differ_since = now;
    if (now - w->differ_since >= SWIM_SYNC_AFTER_S) {
        /* two windows in a row: counts differ for a few seconds after every death */
        int bj = w->best_count > mine ? members_find(t, w->best) : -1;
        w->behind = w->higher > w->not_higher ? w->behind + 1 : 0;
        if (w->sync_every <= 0) w->sync_every = SWIM_SYNC_EVERY_S;
        if (w->behind >= 2 && bj > 0 && members_at(t, bj)->alive &&
            (w->last_sync <= 0 || now - w->last_sync >= w->sync_every)) {
            w->last_sync = now;
            w->syncs++;
            w->behind = 0;
            probe_send(d, members_at(t, bj), PROBE_SYNC, 0, NULL, NULL, 0, ROWS_ONLY, 0);
        }
        w->differ_since = now;
        w->higher = w->not_higher = 0;
        w->best_count = 0;
    }
    if (ch > 0) view_changed(d);
    return 0;
}

void dispatch_tick(dispatch_t *d, double now, uint64_t r)
{
    d->now = now;
    members_at(d->mem, 0)->m.uptime_s = (uint32_t)(now - d->t0);
    /* a tick far later than the last: this process was paused (SIGSTOP, a suspended
     * laptop, a VM migrated) or starved; the members' silence across it is ours */
    double gap = d->last_tick > 0 ? now - d->last_tick : 0;
    if (gap > DISPATCH_JUMP_S) {
        d->pauses++;
        d->paused_s += gap;
        d->last_pause_s = gap;
        members_resume(d->mem, now, gap);
        if (gap > d->timeout_s) ask_begin(d, now, d->last_tick, r); /* its mates took it
                                                                      * for dead */
    } else {
        ask_tick(d, now);
    }
    d->last_tick = now;
    if (d->sw.every > 0) {
        if (gap > DISPATCH_JUMP_S) swim_sync(d, r); /* what changed while it slept */
        if (d->sw.welcomed_at > 0 && now - d->sw.welcomed_at >= SWIM_SYNC_AFTER_S) {
            /* the joins that went round as news while nobody knew of this joiner */
            d->sw.welcomed_at = 0;
            swim_sync(d, r);
        }
        swim_tick(d, now, r);
        choose_relay(d, r, now);
        return;
    }
    members_tick(d->mem, now, d->timeout_s, NULL, 0);
    choose_relay(d, r, now);
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
