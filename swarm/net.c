/* net.c — the network thread: ROUTER + one DEALER per member, gossip, failure
 * detection, status replies, and the inproc link to the compute thread.
 *
 * inproc frames, compute -> network:
 *   "S" dest(32) header payload...   send to a member
 *   "H" endpoint stage(i16)           HELLO to a bootstrap endpoint
 *   "M" msg_member_t                  this peer's own entry
 *   "R" swarm(u64) nstages(i32) run   the run, once known
 *   "Q"                               leave and stop
 * network -> compute:
 *   "m" header payload...             a data message
 *   "v" rejected(u64) wire_count_t msg_member_t...   the live member table and counters
 *   "u" dest(32) header               a send that could not be made
 *
 * What arrives and what the membership does with it is the dispatch core's (dispatch.c,
 * the same code the simulator runs); here are the sockets: a member's entry carries its
 * DEALER (entry->user), opened when it comes up, closed when it goes down.
 *
 * Unreachable members (docs/protocol.md 3.4): a member whose address is a relay address
 * gets no DEALER; what goes to it leaves through the ROUTER, addressed by its id, on the
 * connection its own DEALER opened to this peer. A peer that does not listen (net_config_t
 * bind NULL) is such a member: it binds nothing and hears everything on its DEALERs (and,
 * until the WELCOME, on its HELLO sockets), each of which names the member it connects to. */
#include "swarm/net.h"
#include "swarm/auth.h"
#include "swarm/dispatch.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status.h"

#include <math.h>
#include <pthread.h>
#include <sodium.h>
#include <sys/time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

/* The last refusals kept for status. */
#define NET_REFUSALS 8
/* With an allowlist, a HELLO goes to the bootstrap once per listed key, this many at a time. */
#define NET_HELLO_TRIES 128

struct net {
    void *ctx;
    pthread_t thread;
    int started;
    void *pair_c, *pair_n; /* compute side, network side */
    char endpoint_inproc[64];
    /* network thread state */
    void *router;
    dispatch_t *core; /* checks, membership, counts; its table's entry->user: a DEALER */
    uint64_t ticks;
    int nstages;
    double heartbeat_s, timeout_s;
    uint8_t id[MSG_ID_LEN];
    double t0;
    int quit;
    int leave_code; /* the LEAVE at the end: 0, or MSG_LEAVE_RUN_OVER (net_halt_finished) */
    /* security: CURVE and the ZAP handler (auth.h); signing is the core's */
    const auth_t *auth;
    void *zap, *mon; /* ZAP handler; the ROUTER's monitor (failed handshakes, swarm key) */
    uint64_t refused;
    uint64_t reconnects; /* member connections opened anew (net_reconnect, the core's hook) */
    int hello_round;
    /* an unreachable peer (not listening): its HELLO sockets, kept for the WELCOME that
     * comes back on one of them, which then becomes the welcomer's DEALER (adopt) */
    int listening;
    void *hello[NET_HELLO_TRIES];
    int nhello;
    void *adopt;
    uint8_t adopt_id[MSG_ID_LEN];
    char addr_seen[MSG_ADDR_MAX + 1]; /* its own address as last logged (the relay named) */
    zmq_pollitem_t *items; /* the poll set, and for each outbound socket its member's id */
    uint8_t (*item_id)[MSG_ID_LEN];
    int items_cap;
    struct {
        char key[65], addr[64];
    } refusals[NET_REFUSALS];
    int nrefusals;
    /* compute thread state: it encodes and signs its own headers */
    int signing;
    uint8_t sk[64];
    uint64_t c_swarm, c_seq, c_ctl_seq;
    zmq_msg_t frames[6];
    int nframes_held;
    msg_member_t *view;
    int64_t *heard; /* 2 view_cap: members_view_heard */
    int view_cap;
    uint64_t view_rejected;
    wire_count_t view_wire;
    int halted; /* net_halt: the thread is gone */
    /* network thread: the snapshot whose chunks it answers itself (net_serve_state) */
    xfer_shared_t *served;
    double served_at; /* when it came */
    double join_state_s, join_s; /* net_set_join; < 0: not a joiner of a running pool */
};

/* ---- helpers ------------------------------------------------------------------------ */

static int send_frames(void *sock, int n, const void *const *data, const size_t *len, int flags)
{
    for (int i = 0; i < n; i++)
        if (zmq_send(sock, data[i], len[i], flags | (i < n - 1 ? ZMQ_SNDMORE : 0)) < 0) return -1;
    return 0;
}

/* Receives a whole multipart message into msgs (at most max parts; extra parts are
 * drained and make the count max+1). Returns the part count or -1. */
static int recv_parts(void *sock, zmq_msg_t *msgs, int max)
{
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t tmp, *m = n < max ? &msgs[n] : &tmp;
        zmq_msg_init(m);
        if (zmq_msg_recv(m, sock, 0) < 0) {
            zmq_msg_close(m);
            for (int i = 0; i < n && i < max; i++) zmq_msg_close(&msgs[i]);
            return -1;
        }
        more = zmq_msg_more(m);
        if (n >= max) zmq_msg_close(m);
        n++;
    }
    return n;
}

static void close_parts(zmq_msg_t *msgs, int n, int max)
{
    for (int i = 0; i < n && i < max; i++) zmq_msg_close(&msgs[i]);
}

static msg_member_t *me(struct net *n)
{
    return &members_at(dispatch_members(n->core), 0)->m;
}

/* Microseconds of the wall clock: signed control counters outlive the process. */
static uint64_t wall_us(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
}

/* A DEALER to addr, whose peer id is server (the CURVE server key with an allowlist).
 * side: a side connection, for one message (a probe, a listening peer's HELLO): its routing
 * id is this peer's id and MSG_SIDE_TAG (docs/protocol.md 3.1). Under the member's own id
 * it would take the member connection over at the receiving ROUTER (ROUTER_HANDOVER), and
 * libzmq leaves the connection it takes over open with no pipe behind it: whatever this
 * peer sent on its member DEALER then vanished there, for good, with nothing on either
 * side to say so (a probe in flight when the member came back, a HELLO retried while the
 * WELCOME was under way). */
static void *new_dealer(struct net *n, const char *addr, const uint8_t server[MSG_ID_LEN],
                        int side)
{
    void *d = zmq_socket(n->ctx, ZMQ_DEALER);
    int zero = 0, hwm = 10000;
    uint8_t rid[MSG_ID_LEN + 1];
    memcpy(rid, n->id, MSG_ID_LEN);
    rid[MSG_ID_LEN] = MSG_SIDE_TAG;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, rid, side ? sizeof rid : MSG_ID_LEN);
    if (n->auth && auth_client(n->auth, d, server)) {
        log_warn("net: cannot set up CURVE for %s", addr);
        zmq_close(d);
        return NULL;
    }
    if (zmq_connect(d, addr) < 0) {
        log_warn("net: cannot connect to %s: %s", addr, zmq_strerror(zmq_errno()));
        zmq_close(d);
        return NULL;
    }
    return d;
}

/* Closes the HELLO sockets still open (a peer that does not listen keeps them). */
static void close_hellos(struct net *n)
{
    for (int i = 0; i < n->nhello; i++) zmq_close(n->hello[i]);
    n->nhello = 0;
}

/* members.c hooks: a member's DEALER lives exactly as long as the member is alive. An
 * unreachable member has none: it connects to this peer. */
static void member_up(void *ctx, members_entry_t *e)
{
    struct net *n = ctx;
    if (e->user) zmq_close(e->user);
    e->user = NULL;
    if (msg_addr_relay(e->m.addr, NULL)) return;
    if (n->adopt && !memcmp(n->adopt_id, e->m.id, MSG_ID_LEN)) {
        /* the WELCOME came on this HELLO socket: a second DEALER under the same routing id
         * would take the welcomer's connection over from it, and back (ROUTER_HANDOVER) */
        for (int i = 0; i < n->nhello; i++)
            if (n->hello[i] == n->adopt) n->hello[i] = n->hello[--n->nhello];
        e->user = n->adopt;
        n->adopt = NULL;
        return;
    }
    e->user = new_dealer(n, e->m.addr, e->m.id, 0);
}

/* The core's reconnect hook (net_reconnect reaches it through dispatch_mend): a live
 * member's DEALER closed and opened again; why, for the log. */
static void io_reconnect(void *ctx, members_entry_t *e, const char *why)
{
    struct net *n = ctx;
    if (!e->alive || !e->user || msg_addr_relay(e->m.addr, NULL)) return;
    char hex[9];
    zmq_close(e->user);
    e->user = new_dealer(n, e->m.addr, e->m.id, 0);
    n->reconnects++;
    log_info("net: connection to peer %s (%s) opened anew: %s", msg_id_short(e->m.id, hex),
             e->m.addr, why);
}

static void member_down(void *ctx, members_entry_t *e, const char *why)
{
    (void)ctx;
    char hex[9];
    if (e->user) zmq_close(e->user);
    e->user = NULL;
    log_info("net: peer %s (%s, stage %d) is gone: %s", msg_id_short(e->m.id, hex), e->m.addr,
             e->m.stage, why);
}

/* ---- the core's io -------------------------------------------------------------------- */

static int io_reply(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                    const void *const *data, const size_t *len);

/* To a member's DEALER; to an unreachable one through the ROUTER, on the connection it
 * opened to this peer (none: undeliverable, as ROUTER_MANDATORY says). */
static int io_send(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                   const size_t *len)
{
    if (e->user) return send_frames(e->user, nframes, data, len, ZMQ_DONTWAIT);
    if (!msg_addr_relay(e->m.addr, NULL)) return -1;
    return io_reply(ctx, e->m.id, MSG_ID_LEN, nframes, data, len);
}

/* A probe goes through a DEALER of its own that lingers until the message is out (an
 * unreachable member: through the ROUTER, in case its connection to this peer still
 * stands). */
static int io_probe(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                    const size_t *len)
{
    struct net *n = ctx;
    if (msg_addr_relay(e->m.addr, NULL)) return io_reply(ctx, e->m.id, MSG_ID_LEN, nframes, data, len);
    void *d = new_dealer(n, e->m.addr, e->m.id, 1);
    if (!d) return -1;
    int linger = 200;
    zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
    int rc = send_frames(d, nframes, data, len, ZMQ_DONTWAIT);
    zmq_close(d);
    return rc;
}

static int io_reply(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                    const void *const *data, const size_t *len)
{
    struct net *n = ctx;
    if (zmq_send(n->router, conn, conn_len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0) return -1;
    return send_frames(n->router, nframes, data, len, ZMQ_DONTWAIT);
}

/* A data message (or WELCOME): to the compute thread, header and payloads as they came. */
/* A chunk request for the step of the snapshot this thread holds is answered here, at
 * once, whatever the compute thread is doing (1), and so is a fresh request (step -1)
 * that the snapshot may answer (xfer_shared_t: the member, by its gossiped step, at most
 * fresh_steps past it, and fresh_s after it came); anything else goes to the peer (0),
 * which answers it between two passes. */
static int serve_chunk(struct net *n, const msg_t *m)
{
    xfer_shared_t *s = n->served;
    if (m->type != MSG_STATE_REQ || !s || m->stage != s->stage) return 0;
    int64_t at = members_at(dispatch_members(n->core), 0)->m.step;
    int fresh = m->step < 0 && s->fresh_steps > 0 && xfer_shared_fresh(s, at, clock_now() - n->served_at);
    if (!fresh && m->step != s->snap.step) return 0;
    msg_t rep;
    const uint8_t *chunk;
    size_t clen, hlen;
    char err[STATUS_ERR_LEN];
    if (xfer_serve(&s->snap, m, &rep, &chunk, &clen, err)) return 0;
    xfer_shared_served(s, clock_now());
    rep.flags |= s->flags;
    uint8_t hdr[MSG_HEADER_MAX];
    if (!(hlen = dispatch_header(n->core, &rep, wall_us(), hdr, sizeof hdr, err))) return 0;
    const void *fr[2] = {hdr, chunk};
    size_t frl[2] = {hlen, clen};
    dispatch_send(n->core, m->sender, 2, fr, frl); /* one not known yet: on its connection */
    return 1;
}

static void io_deliver(void *ctx, const msg_t *m, int nframes, const void *const *data,
                       const size_t *len)
{
    struct net *n = ctx;
    if (serve_chunk(n, m)) return;
    const void *out[6] = {"m"};
    size_t olen[6] = {1};
    for (int i = 0; i < nframes && i < 5; i++) out[i + 1] = data[i], olen[i + 1] = len[i];
    log_debug("net: %s from %02x%02x%02x%02x (%d frames)", msg_type_name(m->type), m->sender[0],
              m->sender[1], m->sender[2], m->sender[3], nframes);
    send_frames(n->pair_n, nframes + 1, out, olen, 0);
}

static void io_refused(void *ctx, const char *why, int warn)
{
    (void)ctx;
    if (warn)
        log_warn("net: rejected: %s", why);
    else
        log_debug("net: rejected: %s", why);
}

/* What a view carries besides the table: the pauses the network thread noticed, and the
 * last one a member vouched for (dispatch_vouched). */
typedef struct {
    uint64_t pauses, vouched;
    double last_pause_s;
} view_health_t;

static void push_view(struct net *n)
{
    members_t *mem = dispatch_members(n->core);
    uint64_t rejected = dispatch_rejected(n->core);
    view_health_t h = {.pauses = dispatch_pauses(n->core, NULL),
                       .vouched = dispatch_vouched(n->core),
                       .last_pause_s = dispatch_last_pause(n->core)};
    zmq_send(n->pair_n, "v", 1, ZMQ_SNDMORE);
    zmq_send(n->pair_n, &rejected, sizeof rejected, ZMQ_SNDMORE);
    zmq_send(n->pair_n, &h, sizeof h, ZMQ_SNDMORE);
    zmq_send(n->pair_n, dispatch_wire(n->core), sizeof(wire_count_t), ZMQ_SNDMORE);
    msg_member_t *v = malloc((size_t)members_count(mem) * sizeof *v);
    int64_t *heard = malloc((size_t)members_count(mem) * 2 * sizeof *heard);
    int k = v && heard ? members_view(mem, v) : 0;
    if (k) members_view_heard(mem, heard);
    zmq_send(n->pair_n, v, (size_t)k * sizeof *v, ZMQ_SNDMORE);
    zmq_send(n->pair_n, heard, (size_t)k * 2 * sizeof *heard, 0);
    free(v);
    free(heard);
}

static void io_view(void *ctx)
{
    push_view(ctx);
}

/* Members dead of silence are probed this long (members.h). */
#define NET_FORGET_S 60.0

/* ---- status ---------------------------------------------------------------------------- */

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static char *status_json(void *ctx, size_t *len)
{
    struct net *n = ctx;
    members_t *mem = dispatch_members(n->core);
    const wire_count_t *wire = dispatch_wire(n->core);
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    static const char *states[] = {"joining", "serving", "leaving", "dead"};
    fprintf(f, "{\"swarm\":\"%016llx\",\"stages\":%d,\"peers\":[", (unsigned long long)dispatch_swarm(n->core),
            n->nstages);
    int first = 1, maxstage = n->nstages - 1;
    for (int i = 0; i < members_count(mem); i++) {
        const msg_member_t *m = &members_at(mem, i)->m;
        if (!members_at(mem, i)->alive) continue;
        if (m->stage > maxstage) maxstage = m->stage;
        fprintf(f, "%s{\"id\":\"", first ? "" : ",");
        for (int j = 0; j < MSG_ID_LEN; j++) fprintf(f, "%02x", m->id[j]);
        fprintf(f, "\",\"addr\":");
        json_str(f, m->addr);
        fprintf(f,
                ",\"stage\":%d,\"state\":\"%s\",\"uptime_s\":%u,\"step\":%lld,\"throughput\":%.3f,"
                "\"loss\":",
                m->stage, states[m->state <= MEMBER_DEAD ? m->state : MEMBER_DEAD], m->uptime_s,
                (long long)m->step, (double)m->throughput);
        if (isfinite(m->loss))
            fprintf(f, "%.5f", (double)m->loss);
        else
            fprintf(f, "null");
        members_entry_t *me_i = members_at(mem, i);
        if (i > 0 && me_i->rtt.n)
            fprintf(f, ",\"rtt_ms\":%.1f,\"rto_ms\":%.1f", 1e3 * me_i->rtt.srtt,
                    1e3 * members_rto(mem, i));
        fprintf(f,
                ",\"served\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,\"retries\":%llu,"
                "\"rejected\":%llu}",
                (unsigned long long)m->served, (unsigned long long)m->bytes_in,
                (unsigned long long)m->bytes_out, (unsigned long long)m->retries,
                (unsigned long long)m->rejected);
        first = 0;
    }
    fprintf(f, "],\"pools\":[");
    int spare = 0; /* pools with a member to spare: more than one serving */
    for (int s = 0; s <= maxstage; s++) {
        int k = 0;
        for (int i = 0; i < members_count(mem); i++)
            k += members_at(mem, i)->alive && members_at(mem, i)->m.stage == s &&
                 members_at(mem, i)->m.state == MEMBER_SERVING;
        spare += k >= 2;
    }
    for (int s = 0; s <= maxstage; s++) {
        int peers = 0;
        double tp = 0;
        long long step = -1;
        double loss = NAN;
        for (int i = 0; i < members_count(mem); i++) {
            const msg_member_t *m = &members_at(mem, i)->m;
            if (!members_at(mem, i)->alive || m->stage != s) continue;
            peers++;
            tp += m->throughput;
            if (m->step > step) step = m->step;
            if (isfinite(m->loss)) loss = m->loss;
        }
        /* a stage with no peer that no pool can spare one for (recover.c moves a member of
         * a pool of two or more): it waits for a joiner */
        int orphan = !peers && !spare;
        fprintf(f,
                "%s{\"stage\":%d,\"peers\":%d,\"orphan\":%s,\"throughput\":%.3f,\"step\":%lld,"
                "\"loss\":",
                s ? "," : "", s, peers, orphan ? "true" : "false", tp, step < 0 ? 0 : step);
        if (isfinite(loss))
            fprintf(f, "%.5f}", loss);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "]");
    if (n->join_s >= 0)
        fprintf(f, ",\"join\":{\"state_s\":%.3f,\"contrib_s\":%.3f}", n->join_state_s, n->join_s);
    fprintf(f, ",\"wire\":[");
    for (int k = 0; k < WIRE_KINDS; k++)
        fprintf(f, "%s{\"kind\":\"%s\",\"in\":%llu,\"out\":%llu}", k ? "," : "",
                transport_wire_name(k), (unsigned long long)wire->in[k],
                (unsigned long long)wire->out[k]);
    uint64_t dropped, relayed = dispatch_relayed(n->core, &dropped);
    fprintf(f, "],\"relayed\":%llu,\"relay_dropped\":%llu,\"reconnects\":%llu",
            (unsigned long long)relayed, (unsigned long long)dropped,
            (unsigned long long)n->reconnects);
    fprintf(f, ",\"security\":\"%s\",\"refused\":%llu,\"forged\":%llu,\"refusals\":[",
            !n->auth                               ? "none"
            : auth_mode(n->auth) == AUTH_SWARM_KEY ? "swarm-key"
                                                   : "allowlist",
            (unsigned long long)n->refused, (unsigned long long)members_forged(mem));
    for (int i = 0; i < n->nrefusals && i < NET_REFUSALS; i++) {
        fprintf(f, "%s{\"key\":\"%s\",\"addr\":", i ? "," : "", n->refusals[i].key);
        json_str(f, n->refusals[i].addr);
        fprintf(f, "}");
    }
    fprintf(f, "]}");
    fclose(f);
    return buf;
}

/* A CURVE handshake that failed before ZAP could judge it: with a swarm key, a client
 * without the key cannot even address the server (CurveZMQ reveals a client's long-term
 * key only after the server proved itself), so this is the only trace of it: counted,
 * without a key or an address. (With an allowlist these are not counted: joiners and the
 * status tool try every listed key, and all but one fail here by design.) */
static void on_monitor(struct net *n)
{
    zmq_msg_t parts[2];
    int np = recv_parts(n->mon, parts, 2);
    if (np < 0) return;
    if (np >= 1 && zmq_msg_size(&parts[0]) >= 6 && auth_mode(n->auth) == AUTH_SWARM_KEY) {
        uint16_t ev;
        memcpy(&ev, zmq_msg_data(&parts[0]), 2);
        if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
            ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
            n->refused++;
            int slot = n->nrefusals++ % NET_REFUSALS;
            snprintf(n->refusals[slot].key, sizeof n->refusals[slot].key, "unknown");
            snprintf(n->refusals[slot].addr, sizeof n->refusals[slot].addr, "unknown");
            if (n->refused <= 20 || n->refused % 100 == 0)
                log_warn("net: refused a connection: its CURVE handshake failed (no swarm key; "
                         "%llu refused)",
                         (unsigned long long)n->refused);
        }
    }
    close_parts(parts, np, 2);
}

/* ---- ZAP (RFC 27): the handshake's admission, answered from the network thread --------- */

static void on_zap(struct net *n)
{
    zmq_msg_t parts[8];
    int np = recv_parts(n->zap, parts, 8);
    if (np < 0) return;
    const char *code = "400", *text = "not a member";
    char uid[65] = "";
    if (np >= 7 && np <= 8 && zmq_msg_size(&parts[5]) == 5 &&
        !memcmp(zmq_msg_data(&parts[5]), "CURVE", 5) && zmq_msg_size(&parts[6]) == 32) {
        uint8_t id[MSG_ID_LEN];
        if (auth_admit(n->auth, zmq_msg_data(&parts[6]), id)) {
            code = "200", text = "OK";
            if (auth_mode(n->auth) == AUTH_ALLOW)
                auth_hex(id, uid);
            else
                snprintf(uid, sizeof uid, "swarm");
        } else {
            char key[65], addr[64];
            size_t al = zmq_msg_size(&parts[3]);
            if (al >= sizeof addr) al = sizeof addr - 1;
            memcpy(addr, zmq_msg_data(&parts[3]), al);
            addr[al] = 0;
            auth_hex(zmq_msg_data(&parts[6]), key);
            n->refused++;
            int slot = n->nrefusals++ % NET_REFUSALS;
            snprintf(n->refusals[slot].key, sizeof n->refusals[slot].key, "%s", key);
            snprintf(n->refusals[slot].addr, sizeof n->refusals[slot].addr, "%s", addr);
            if (n->refused <= 20 || n->refused % 100 == 0)
                log_warn("net: refused a connection from %s: CURVE key %s is not %s (%llu refused)",
                         addr, key,
                         auth_mode(n->auth) == AUTH_ALLOW ? "on the allowlist" : "the swarm's",
                         (unsigned long long)n->refused);
        }
    }
    if (np >= 2 && np <= 8) {
        const void *data[6] = {"1.0", zmq_msg_data(&parts[1]), code, text, uid, ""};
        size_t len[6] = {3, zmq_msg_size(&parts[1]), 3, strlen(text), strlen(uid), 0};
        send_frames(n->zap, 6, data, len, 0);
    } else {
        /* a REP socket must answer something; a malformed request gets a refusal */
        const void *data[6] = {"1.0", "", "400", "malformed", "", ""};
        size_t len[6] = {3, 0, 3, 9, 0, 0};
        send_frames(n->zap, 6, data, len, 0);
    }
    close_parts(parts, np, 8);
}

/* ---- the thread ---------------------------------------------------------------------- */

static void on_router(struct net *n)
{
    zmq_msg_t parts[7];
    int np = recv_parts(n->router, parts, 7);
    if (np < 0) return;
    char err[STATUS_ERR_LEN];
    const void *data[6];
    size_t len[6];
    int nf = np > 7 ? 7 : np;
    for (int i = 1; i < nf; i++) data[i - 1] = zmq_msg_data(&parts[i]), len[i - 1] = zmq_msg_size(&parts[i]);
    /* With an allowlist the connection's CURVE key names the sender (the ZAP user id). */
    int allow = n->auth && auth_mode(n->auth) == AUTH_ALLOW;
    const char *uid = allow && np >= 2 ? zmq_msg_gets(&parts[1], "User-Id") : NULL;
    dispatch_on_frames(n->core, zmq_msg_data(&parts[0]), zmq_msg_size(&parts[0]), allow, uid,
                       np > 6 ? 6 : np - 1, data, len, clock_now(), err);
    close_parts(parts, np, 7);
}

/* What came in on a connection this peer opened (a peer that does not listen hears the
 * members there): id names the member at its other end. On a HELLO socket (id NULL) it is
 * the WELCOME: its header names the welcomer, whose DEALER the socket becomes (member_up),
 * and the other HELLO sockets are closed. Nothing: a socket closed and opened again
 * meanwhile, whose readiness the poll reported for the old one. */
static void on_outbound(struct net *n, void *sock, const uint8_t *id)
{
    int events = 0;
    size_t elen = sizeof events;
    if (zmq_getsockopt(sock, ZMQ_EVENTS, &events, &elen) || !(events & ZMQ_POLLIN)) return;
    zmq_msg_t parts[7];
    int np = recv_parts(sock, parts, 7); /* whole messages only: it does not block */
    if (np < 0) return;
    char err[STATUS_ERR_LEN];
    const void *data[7];
    size_t len[7];
    int nf = np > 7 ? 7 : np;
    for (int i = 0; i < nf; i++) data[i] = zmq_msg_data(&parts[i]), len[i] = zmq_msg_size(&parts[i]);
    uint8_t sender[MSG_ID_LEN] = {0};
    if (!id) {
        if (len[0] >= 48 && !memcmp(data[0], "SWT", 3))
            memcpy(sender, (const uint8_t *)data[0] + 16, MSG_ID_LEN);
        n->adopt = sock;
        memcpy(n->adopt_id, sender, MSG_ID_LEN);
    }
    dispatch_on_frames(n->core, id ? id : sender, MSG_ID_LEN, 0, NULL, nf, data, len,
                       clock_now(), err);
    close_parts(parts, np, 7);
    if (!id) { /* adopted (member_up took it off the list) or not, one answer ends the HELLO */
        n->adopt = NULL;
        close_hellos(n);
    }
}

static void on_compute(struct net *n)
{
    zmq_msg_t parts[6];
    int np = recv_parts(n->pair_n, parts, 6);
    if (np < 1 || np > 6) goto done;
    const char *cmd = zmq_msg_data(&parts[0]);
    switch (cmd[0]) {
    case 'S': {
        if (np < 3 || zmq_msg_size(&parts[1]) != MSG_ID_LEN) break;
        const void *fr[5];
        size_t frl[5];
        for (int i = 2; i < np; i++)
            fr[i - 2] = zmq_msg_data(&parts[i]), frl[i - 2] = zmq_msg_size(&parts[i]);
        if (dispatch_send(n->core, zmq_msg_data(&parts[1]), np - 2, fr, frl)) {
            const void *data[3] = {"u", zmq_msg_data(&parts[1]), zmq_msg_data(&parts[2])};
            size_t len[3] = {1, MSG_ID_LEN, zmq_msg_size(&parts[2])};
            send_frames(n->pair_n, 3, data, len, 0);
        }
        break;
    }
    case 'H': {
        if (np != 3) break;
        char ep[MSG_ADDR_MAX + 1];
        size_t l = zmq_msg_size(&parts[1]);
        if (l > MSG_ADDR_MAX) break;
        memcpy(ep, zmq_msg_data(&parts[1]), l);
        ep[l] = 0;
        int16_t stage;
        memcpy(&stage, zmq_msg_data(&parts[2]), sizeof stage);
        uint8_t hdr[MSG_HEADER_MAX];
        msg_t m = {.type = MSG_HELLO, .stage = stage};
        snprintf(m.addr, sizeof m.addr, "%s", me(n)->addr);
        char err[STATUS_ERR_LEN];
        size_t hlen = dispatch_header(n->core, &m, wall_us(), hdr, sizeof hdr, err);
        if (!hlen) break;
        /* With an allowlist the bootstrap's key is one of the listed: one HELLO per
         * candidate, of which only the right one completes a CURVE handshake. */
        const uint8_t(*cand)[MSG_ID_LEN] = NULL;
        static const uint8_t none[1][MSG_ID_LEN];
        int nc = n->auth ? auth_candidates(n->auth, &cand) : 1;
        if (!n->auth) cand = none;
        /* at most NET_HELLO_TRIES sockets per HELLO; a long list is walked over retries */
        int first = nc > NET_HELLO_TRIES ? (n->hello_round++ * NET_HELLO_TRIES) % nc : 0;
        /* a peer that does not listen hears the WELCOME on the socket its HELLO left by
         * (the last round's, unanswered, make way: one connection per routing id) */
        if (!n->listening) close_hellos(n);
        for (int t = 0; t < nc && t < NET_HELLO_TRIES; t++) {
            int c = (first + t) % nc;
            if (n->auth && auth_mode(n->auth) == AUTH_ALLOW && !memcmp(cand[c], n->id, MSG_ID_LEN))
                continue;
            void *d = new_dealer(n, ep, cand[c], n->listening);
            if (!d) continue;
            const void *fr[1] = {hdr};
            if (zmq_send(d, hdr, hlen, 0) >= 0) dispatch_count_out(n->core, 1, fr, &hlen);
            if (!n->listening) {
                n->hello[n->nhello++] = d;
                continue;
            }
            int linger = 2000;
            zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
            zmq_close(d); /* lingers until the HELLO is out */
        }
        break;
    }
    case 'M':
        if (np == 2 && zmq_msg_size(&parts[1]) == sizeof(msg_member_t)) {
            const msg_member_t *self = me(n);
            msg_member_t s;
            memcpy(&s, zmq_msg_data(&parts[1]), sizeof s);
            /* The network thread owns id, address, heartbeat (members_set_self keeps
             * those) and its own counters. */
            s.bytes_in = self->bytes_in;
            s.bytes_out = self->bytes_out;
            s.rejected += dispatch_rejected(n->core); /* the compute thread's plus ours */
            s.uptime_s = self->uptime_s;
            dispatch_set_self(n->core, &s, clock_now());
        }
        break;
    case 'R':
        if (np == 4 && zmq_msg_size(&parts[1]) == 8 && zmq_msg_size(&parts[2]) == 4) {
            uint64_t swarm;
            memcpy(&swarm, zmq_msg_data(&parts[1]), 8);
            memcpy(&n->nstages, zmq_msg_data(&parts[2]), 4);
            char *run = strndup(zmq_msg_data(&parts[3]), zmq_msg_size(&parts[3]));
            if (run) dispatch_set_run(n->core, swarm, run);
            free(run);
        }
        break;
    case 'P': /* the snapshot to serve from (net_serve_state): a reference moves here */
        if (np == 2 && zmq_msg_size(&parts[1]) == sizeof(xfer_shared_t *)) {
            xfer_shared_t *s;
            memcpy(&s, zmq_msg_data(&parts[1]), sizeof s);
            xfer_shared_unref(&n->served);
            n->served = s;
            n->served_at = clock_now();
        }
        break;
    case 'J': /* net_set_join */
        if (np == 2 && zmq_msg_size(&parts[1]) == 2 * sizeof(double)) {
            double t[2];
            memcpy(t, zmq_msg_data(&parts[1]), sizeof t);
            n->join_state_s = t[0], n->join_s = t[1];
        }
        break;
    case 'C': /* net_reconnect */
        if (np == 2 && zmq_msg_size(&parts[1]) == MSG_ID_LEN)
            dispatch_mend(n->core, zmq_msg_data(&parts[1]));
        break;
    case 'Q':
        n->quit = 1;
        if (np == 2 && zmq_msg_size(&parts[1]) == sizeof(int))
            memcpy(&n->leave_code, zmq_msg_data(&parts[1]), sizeof(int));
        break;
    default:
        break;
    }
done:
    if (np > 0) close_parts(parts, np, 6);
}

static void tick(struct net *n)
{
    dispatch_tick(n->core, clock_now(), ++n->ticks * 0x9e3779b97f4a7c15ULL);
    if (strcmp(me(n)->addr, n->addr_seen)) { /* an unreachable peer named another relay */
        snprintf(n->addr_seen, sizeof n->addr_seen, "%s", me(n)->addr);
        log_info("net: unreachable; others reach it through %s", n->addr_seen);
    }
    push_view(n);
}

/* The poll set: the ROUTER, the compute side, ZAP and the monitor (with CURVE); and when
 * this peer does not listen, every DEALER and HELLO socket it opened (their ids in
 * item_id; HELLO sockets' all zero). The count, or -1 when out of memory. */
static int poll_set(struct net *n)
{
    members_t *mem = dispatch_members(n->core);
    int want = 4 + (n->listening ? 0 : members_count(mem) + n->nhello);
    if (want > n->items_cap) {
        zmq_pollitem_t *it = realloc(n->items, (size_t)want * sizeof *it);
        if (it) n->items = it;
        uint8_t(*ids)[MSG_ID_LEN] = realloc(n->item_id, (size_t)want * sizeof *ids);
        if (ids) n->item_id = ids;
        if (!it || !ids) return -1;
        n->items_cap = want;
    }
    int k = 0;
    void *base[4] = {n->router, n->pair_n, n->zap, n->mon};
    for (int i = 0; i < (n->zap ? 4 : 2); i++) n->items[k++] = (zmq_pollitem_t){base[i], 0, ZMQ_POLLIN, 0};
    if (n->listening) return k;
    for (int i = 1; i < members_count(mem); i++) {
        members_entry_t *e = members_at(mem, i);
        if (!e->alive || !e->user) continue;
        memcpy(n->item_id[k], e->m.id, MSG_ID_LEN);
        n->items[k++] = (zmq_pollitem_t){e->user, 0, ZMQ_POLLIN, 0};
    }
    for (int i = 0; i < n->nhello; i++) {
        memset(n->item_id[k], 0, MSG_ID_LEN);
        n->items[k++] = (zmq_pollitem_t){n->hello[i], 0, ZMQ_POLLIN, 0};
    }
    return k;
}

/* Outbound socket item k of the poll set has a message: if it is still the DEALER of that
 * member, or still a HELLO socket (handling an earlier item may have closed it). */
static void on_outbound_item(struct net *n, int k)
{
    void *sock = n->items[k].socket;
    static const uint8_t zero[MSG_ID_LEN];
    if (memcmp(n->item_id[k], zero, MSG_ID_LEN)) {
        members_t *mem = dispatch_members(n->core);
        members_entry_t *e = members_at(mem, members_find(mem, n->item_id[k]));
        if (e && e->alive && e->user == sock) on_outbound(n, sock, n->item_id[k]);
        return;
    }
    for (int i = 0; i < n->nhello; i++)
        if (n->hello[i] == sock) {
            on_outbound(n, sock, NULL);
            return;
        }
}

static void *net_thread(void *arg)
{
    struct net *n = arg;
    double next = clock_now();
    while (!n->quit) {
        int ni = poll_set(n), nb = n->zap ? 4 : 2;
        if (ni < 0) break;
        zmq_pollitem_t *items = n->items;
        long wait = (long)((next - clock_now()) * 1000);
        if (wait < 0) wait = 0;
        if (zmq_poll(items, ni, wait) < 0 && zmq_errno() != EINTR) break;
        if (n->zap && (items[2].revents & ZMQ_POLLIN)) on_zap(n);
        if (n->zap && (items[3].revents & ZMQ_POLLIN)) on_monitor(n);
        if (items[0].revents & ZMQ_POLLIN) on_router(n);
        if (items[1].revents & ZMQ_POLLIN) on_compute(n);
        for (int k = nb; k < ni; k++)
            if (n->items[k].revents & ZMQ_POLLIN) on_outbound_item(n, k);
        if (clock_now() >= next) {
            tick(n);
            next = clock_now() + n->heartbeat_s;
        }
    }
    /* Leaving: say so to everyone (the DEALERs linger until it is out), then close. */
    members_t *mem = dispatch_members(n->core);
    for (int i = 1; i < members_count(mem); i++) {
        members_entry_t *e = members_at(mem, i);
        int linger = 500;
        if (e->alive && e->user) zmq_setsockopt(e->user, ZMQ_LINGER, &linger, sizeof linger);
    }
    dispatch_leave(n->core, n->leave_code, n->leave_code ? "the run is over" : "leaving",
                   wall_us());
    for (int i = 1; i < members_count(mem); i++) {
        members_entry_t *e = members_at(mem, i);
        if (e->user) zmq_close(e->user);
        e->user = NULL;
    }
    close_hellos(n);
    if (n->mon) {
        zmq_socket_monitor(n->router, NULL, 0);
        zmq_close(n->mon);
    }
    zmq_close(n->router);
    zmq_close(n->pair_n);
    if (n->zap) zmq_close(n->zap);
    return NULL;
}

net_t *net_start(const net_config_t *cfg, char *endpoint, char *err)
{
    struct net *n = calloc(1, sizeof *n);
    if (!n) {
        status_set(err, STATUS_ENOMEM, "net: out of memory");
        return NULL;
    }
    n->ctx = zmq_ctx_new();
    n->heartbeat_s = cfg->heartbeat_s > 0 ? cfg->heartbeat_s : 0.25;
    n->timeout_s = cfg->timeout_s > 0 ? cfg->timeout_s : 3.0;
    n->c_swarm = cfg->swarm;
    n->join_state_s = n->join_s = -1;
    memcpy(n->id, cfg->id, MSG_ID_LEN);
    n->t0 = clock_now();
    int zero = 0, one = 1;
    if (cfg->sk) {
        memcpy(n->sk, cfg->sk, sizeof n->sk);
        n->signing = 1;
    }
    n->auth = cfg->auth;
    n->listening = cfg->bind != NULL;
    if (!n->listening && cfg->advertise) {
        status_set(err, STATUS_EINVAL, "a peer that does not listen advertises no endpoint");
        goto fail;
    }
    if (n->auth) {
        /* The ZAP handler must be bound before any CURVE server socket of the context. */
        n->zap = zmq_socket(n->ctx, ZMQ_REP);
        zmq_setsockopt(n->zap, ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_bind(n->zap, "inproc://zeromq.zap.01") < 0) {
            status_set(err, STATUS_ENET, "net: ZAP handler: %s", zmq_strerror(zmq_errno()));
            goto fail;
        }
    }
    n->router = zmq_socket(n->ctx, ZMQ_ROUTER);
    if (n->auth && auth_server(n->auth, n->router)) {
        status_set(err, STATUS_ENET, "net: CURVE server: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (n->auth) {
        char mon[64];
        snprintf(mon, sizeof mon, "inproc://net-mon-%p", (void *)n);
        n->mon = zmq_socket(n->ctx, ZMQ_PAIR);
        zmq_setsockopt(n->mon, ZMQ_LINGER, &zero, sizeof zero);
        if (zmq_socket_monitor(n->router, mon,
                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                   ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) ||
            zmq_connect(n->mon, mon)) {
            status_set(err, STATUS_ENET, "net: monitor: %s", zmq_strerror(zmq_errno()));
            goto fail;
        }
    }
    zmq_setsockopt(n->router, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n->router, ZMQ_ROUTER_MANDATORY, &one, sizeof one);
    /* A peer that reconnects (its HELLO socket, then its member socket; or a restart)
     * takes over its routing id. */
    zmq_setsockopt(n->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    /* No frame of ours comes near this; a peer that sends one is cut off. */
    int64_t maxmsg = (int64_t)1 << 30;
    zmq_setsockopt(n->router, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg);
    /* what goes to unreachable members leaves here: as much queue as a DEALER's */
    int hwm = 10000;
    zmq_setsockopt(n->router, ZMQ_SNDHWM, &hwm, sizeof hwm);
    char bound[256];
    size_t blen = sizeof bound;
    if (!n->listening) { /* unreachable: the address says so, and names a relay later */
        msg_addr_set_relay(bound, NULL);
    } else if (zmq_bind(n->router, cfg->bind) < 0) {
        status_set(err, STATUS_ENET, "cannot listen on %s: %s", cfg->bind,
                   zmq_strerror(zmq_errno()));
        goto fail;
    } else {
        zmq_getsockopt(n->router, ZMQ_LAST_ENDPOINT, bound, &blen);
    }
    if (endpoint) snprintf(endpoint, 256, "%s", bound);
    msg_member_t self = cfg->self;
    memcpy(self.id, cfg->id, MSG_ID_LEN);
    snprintf(self.addr, sizeof self.addr, "%s", cfg->advertise ? cfg->advertise : bound);
    snprintf(n->addr_seen, sizeof n->addr_seen, "%s", self.addr);
    /* The heartbeat starts at the wall clock's milliseconds: a restarted peer's entries win
     * over those of its previous life, and a recorded (signed) entry of that life cannot
     * be replayed over the new one. */
    dispatch_config_t dc = {.self = self,
                            .heartbeat = wall_us() / 1000u,
                            .sk = cfg->sk,
                            .swarm = cfg->swarm,
                            .run_text = cfg->run_text,
                            .timeout_s = n->timeout_s,
                            .forget_s = NET_FORGET_S,
                            .tick_s = n->heartbeat_s,
                            .wall_offset = clock_wall() - clock_now()};
    dispatch_io_t io = {.ctx = n,
                        .send = io_send,
                        .probe = io_probe,
                        .reply = io_reply,
                        .deliver = io_deliver,
                        .view = io_view,
                        .status = status_json,
                        .up = member_up,
                        .down = member_down,
                        .refused = io_refused,
                        .reconnect = io_reconnect};
    n->core = dispatch_new(&dc, &io, clock_now(), err);
    if (!n->core) goto fail;
    snprintf(n->endpoint_inproc, sizeof n->endpoint_inproc, "inproc://net-%p", (void *)n);
    n->pair_n = zmq_socket(n->ctx, ZMQ_PAIR);
    n->pair_c = zmq_socket(n->ctx, ZMQ_PAIR);
    zmq_setsockopt(n->pair_c, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(n->pair_n, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(n->pair_n, n->endpoint_inproc) || zmq_connect(n->pair_c, n->endpoint_inproc)) {
        status_set(err, STATUS_ENET, "net: inproc: %s", zmq_strerror(zmq_errno()));
        goto fail;
    }
    if (pthread_create(&n->thread, NULL, net_thread, n)) goto nomem;
    n->started = 1;
    return n;
nomem:
    status_set(err, STATUS_ENOMEM, "net: out of memory");
fail:
    if (n->mon) zmq_close(n->mon);
    if (n->zap) zmq_close(n->zap);
    n->zap = n->mon = NULL;
    if (n->router) zmq_close(n->router);
    if (n->pair_n) zmq_close(n->pair_n);
    if (n->pair_c) zmq_close(n->pair_c);
    n->router = n->pair_n = n->pair_c = NULL;
    zmq_ctx_term(n->ctx);
    dispatch_destroy(&n->core);
    free(n);
    return NULL;
}

static void release_frames(struct net *n)
{
    for (int i = 0; i < n->nframes_held; i++) zmq_msg_close(&n->frames[i]);
    n->nframes_held = 0;
}

static void halt(net_t *n, int code, wire_count_t *wire)
{
    if (!n) return;
    if (n->started && !n->halted) {
        zmq_send(n->pair_c, "Q", 1, ZMQ_SNDMORE);
        zmq_send(n->pair_c, &code, sizeof code, 0);
        pthread_join(n->thread, NULL);
    }
    n->halted = 1;
    if (wire && n->core) *wire = *dispatch_wire(n->core); /* the thread is gone: ours */
}

void net_halt(net_t *n, wire_count_t *wire)
{
    halt(n, 0, wire);
}

void net_halt_finished(net_t *n, wire_count_t *wire)
{
    halt(n, MSG_LEAVE_RUN_OVER, wire);
}

void net_stop(net_t **np)
{
    if (!np || !*np) return;
    struct net *n = *np;
    net_halt(n, NULL);
    release_frames(n);
    zmq_close(n->pair_c);
    zmq_ctx_term(n->ctx);
    dispatch_destroy(&n->core);
    xfer_shared_unref(&n->served);
    free(n->view);
    free(n->heard);
    free(n->items);
    free(n->item_id);
    sodium_memzero(n->sk, sizeof n->sk);
    free(n);
    *np = NULL;
}

int net_send(net_t *n, const uint8_t dest[MSG_ID_LEN], msg_t *m, int nframes,
             const void *const *frames, const size_t *lens, char *err)
{
    uint8_t hdr[MSG_HEADER_MAX];
    size_t hlen;
    if (nframes > 3) return status_set(err, STATUS_EINVAL, "net_send: too many payloads");
    /* The network thread numbers its own messages; the compute side numbers its own from
     * a separate range (high bit set), which keeps seq unique per sender. */
    m->seq = (1ULL << 63) | ++n->c_seq;
    m->swarm = n->c_swarm;
    memcpy(m->sender, n->id, MSG_ID_LEN);
    if (msg_signed(m->type)) { /* a signed control message from the peer: its own counter */
        uint64_t us = wall_us();
        n->c_ctl_seq = us > n->c_ctl_seq ? us : n->c_ctl_seq + 1;
        m->seq = n->c_ctl_seq;
    }
    int rc = msg_encode(m, hdr, sizeof hdr, &hlen, err);
    if (rc) return rc;
    if (msg_signed(m->type) && n->signing) msg_sign(hdr, hlen, n->sk); /* sk: read-only */
    const void *data[6] = {"S", dest, hdr};
    size_t len[6] = {1, MSG_ID_LEN, hlen};
    for (int i = 0; i < nframes; i++) data[3 + i] = frames[i], len[3 + i] = lens[i];
    if (send_frames(n->pair_c, 3 + nframes, data, len, 0))
        return status_set(err, STATUS_ENET, "net_send: %s", zmq_strerror(zmq_errno()));
    return 0;
}

int net_hello(net_t *n, const char *endpoint, int stage, char *err)
{
    int16_t s = (int16_t)stage;
    const void *data[3] = {"H", endpoint, &s};
    size_t len[3] = {1, strlen(endpoint), sizeof s};
    if (len[1] > MSG_ADDR_MAX) return status_set(err, STATUS_EINVAL, "endpoint too long");
    return send_frames(n->pair_c, 3, data, len, 0)
               ? status_set(err, STATUS_ENET, "net_hello failed")
               : 0;
}

void net_set_self(net_t *n, const msg_member_t *self)
{
    const void *data[2] = {"M", self};
    size_t len[2] = {1, sizeof *self};
    send_frames(n->pair_c, 2, data, len, 0);
}

void net_set_run(net_t *n, uint64_t swarm, const char *run_text)
{
    /* The compute side keeps its own copy of the swarm id for headers it encodes. */
    n->c_swarm = swarm;
    int32_t stages = 0;
    const char *p = strstr(run_text, "stages=");
    if (p) stages = atoi(p + 7);
    const void *data[4] = {"R", &swarm, &stages, run_text};
    size_t len[4] = {1, 8, 4, strlen(run_text)};
    send_frames(n->pair_c, 4, data, len, 0);
}

int net_recv(net_t *n, int timeout_ms, net_ev_t *ev)
{
    release_frames(n);
    memset(ev, 0, sizeof *ev);
    zmq_pollitem_t it = {n->pair_c, 0, ZMQ_POLLIN, 0};
    int rc = zmq_poll(&it, 1, timeout_ms);
    if (rc < 0) return zmq_errno() == EINTR ? 1 : -1;
    if (rc == 0) return 1;
    int np = recv_parts(n->pair_c, n->frames, 6);
    if (np < 1) return -1;
    n->nframes_held = np > 6 ? 6 : np;
    if (np > 6) return 1;
    const char *kind = zmq_msg_data(&n->frames[0]);
    char err[STATUS_ERR_LEN];
    if (kind[0] == 'm' && np >= 2) {
        if (msg_decode(zmq_msg_data(&n->frames[1]), zmq_msg_size(&n->frames[1]), &ev->msg, err))
            return 1;
        ev->type = NET_EV_MSG;
        ev->nframes = np - 2;
        for (int i = 2; i < np; i++) {
            ev->frame[i - 2] = zmq_msg_data(&n->frames[i]);
            ev->frame_len[i - 2] = zmq_msg_size(&n->frames[i]);
        }
    } else if (kind[0] == 'v' && np == 6 && zmq_msg_size(&n->frames[2]) == sizeof(view_health_t) &&
               zmq_msg_size(&n->frames[3]) == sizeof n->view_wire &&
               zmq_msg_size(&n->frames[5]) ==
                   zmq_msg_size(&n->frames[4]) / sizeof(msg_member_t) * 2 * sizeof(int64_t)) {
        size_t bytes = zmq_msg_size(&n->frames[4]);
        int k = (int)(bytes / sizeof(msg_member_t));
        if (k > n->view_cap) {
            msg_member_t *p = realloc(n->view, (size_t)k * sizeof *p);
            if (!p) return -1;
            n->view = p;
            int64_t *h = realloc(n->heard, (size_t)k * 2 * sizeof *h);
            if (!h) return -1;
            n->heard = h;
            n->view_cap = k;
        }
        memcpy(n->view, zmq_msg_data(&n->frames[4]), (size_t)k * sizeof *n->view);
        memcpy(n->heard, zmq_msg_data(&n->frames[5]), (size_t)k * 2 * sizeof *n->heard);
        ev->heard = n->heard;
        memcpy(&n->view_rejected, zmq_msg_data(&n->frames[1]), sizeof n->view_rejected);
        view_health_t h;
        memcpy(&h, zmq_msg_data(&n->frames[2]), sizeof h);
        memcpy(&n->view_wire, zmq_msg_data(&n->frames[3]), sizeof n->view_wire);
        ev->type = NET_EV_VIEW;
        ev->rejected = n->view_rejected;
        ev->pauses = h.pauses;
        ev->vouched = h.vouched;
        ev->last_pause_s = h.last_pause_s;
        ev->wire = n->view_wire;
        ev->members = n->view;
        ev->nmembers = k;
    } else if (kind[0] == 'u' && np == 3) {
        ev->type = NET_EV_UNDELIV;
        memcpy(ev->dest, zmq_msg_data(&n->frames[1]), MSG_ID_LEN);
        if (msg_decode(zmq_msg_data(&n->frames[2]), zmq_msg_size(&n->frames[2]), &ev->msg, err))
            return 1;
    } else {
        return 1;
    }
    return 0;
}

void net_serve_state(net_t *n, xfer_shared_t *s)
{
    if (n->halted) return;
    xfer_shared_t *ref = s ? xfer_shared_ref(s) : NULL;
    const void *data[2] = {"P", &ref};
    size_t len[2] = {1, sizeof ref};
    if (send_frames(n->pair_c, 2, data, len, 0)) xfer_shared_unref(&ref);
}

uint64_t net_rejected(const net_t *n)
{
    return n->view_rejected;
}

/* ---- the transport seam ------------------------------------------------------------- */

static int tp_send(void *ctx, const uint8_t dest[MSG_ID_LEN], msg_t *m, int nframes,
                   const void *const *frames, const size_t *lens, char *err)
{
    return net_send(ctx, dest, m, nframes, frames, lens, err);
}

static int tp_hello(void *ctx, const char *endpoint, int stage, char *err)
{
    return net_hello(ctx, endpoint, stage, err);
}

static void tp_set_self(void *ctx, const msg_member_t *self)
{
    net_set_self(ctx, self);
}

static void tp_set_run(void *ctx, uint64_t swarm, const char *run_text)
{
    net_set_run(ctx, swarm, run_text);
}

static void tp_serve_state(void *ctx, xfer_shared_t *s)
{
    net_serve_state(ctx, s);
}

void net_set_join(net_t *n, double state_s, double contrib_s)
{
    double t[2] = {state_s, contrib_s};
    const void *data[2] = {"J", t};
    size_t len[2] = {1, sizeof t};
    send_frames(n->pair_c, 2, data, len, 0);
}

static void tp_set_join(void *ctx, double state_s, double contrib_s)
{
    net_set_join(ctx, state_s, contrib_s);
}

void net_reconnect(net_t *n, const uint8_t dest[MSG_ID_LEN])
{
    if (n->halted) return;
    const void *data[2] = {"C", dest};
    size_t len[2] = {1, MSG_ID_LEN};
    send_frames(n->pair_c, 2, data, len, 0);
}

static void tp_reconnect(void *ctx, const uint8_t dest[MSG_ID_LEN])
{
    net_reconnect(ctx, dest);
}

transport_t net_transport(net_t *n)
{
    return (transport_t){.ctx = n,
                         .send = tp_send,
                         .hello = tp_hello,
                         .set_self = tp_set_self,
                         .set_run = tp_set_run,
                         .serve_state = tp_serve_state,
                         .set_join = tp_set_join,
                         .reconnect = tp_reconnect};
}
