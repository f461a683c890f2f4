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
 * Membership rules live in members.c (shared with the simulator); here a member's
 * entry carries its DEALER (entry->user), opened when it comes up, closed when it
 * goes down. */
#include "swarm/net.h"
#include "swarm/auth.h"
#include "swarm/members.h"
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
    members_t *mem; /* [0] is this peer; entry->user: its DEALER */
    uint64_t swarm, seq, rejected;
    wire_count_t wire; /* every byte this thread sent or received, by kind (transport.h) */
    int nstages;
    char *run_text;
    double heartbeat_s, timeout_s;
    uint8_t id[MSG_ID_LEN];
    double t0;
    int quit;
    /* security: signing key, CURVE and the ZAP handler (auth.h) */
    int signing;
    uint8_t sk[64];
    const auth_t *auth;
    void *zap, *mon; /* ZAP handler; the ROUTER's monitor (failed handshakes, swarm key) */
    uint64_t ctl_seq, refused, forged_seen;
    int hello_round;
    struct {
        char key[65], addr[64];
    } refusals[NET_REFUSALS];
    int nrefusals;
    /* compute thread state */
    uint64_t c_swarm, c_seq, c_ctl_seq;
    zmq_msg_t frames[6];
    int nframes_held;
    msg_member_t *view;
    int view_cap;
    uint64_t view_rejected;
    wire_count_t view_wire;
    int halted; /* net_halt: the thread is gone */
};

/* ---- helpers ------------------------------------------------------------------------ */

/* Counts a message of `total` octets whose header frame is hdr (hlen octets): the type
 * octet names the kind; anything too short to have one is control. */
static void count_wire(struct net *n, int out, const uint8_t *hdr, size_t hlen, size_t total)
{
    int kind = transport_wire_kind(hlen > 4 ? hdr[4] : 0);
    if (out)
        n->wire.out[kind] += total;
    else
        n->wire.in[kind] += total;
}

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

static members_entry_t *find(struct net *n, const uint8_t id[MSG_ID_LEN])
{
    return members_at(n->mem, members_find(n->mem, id));
}

static msg_member_t *me(struct net *n)
{
    return &members_at(n->mem, 0)->m;
}

/* A DEALER to addr, whose peer id is server (the CURVE server key with an allowlist). */
static void *new_dealer(struct net *n, const char *addr, const uint8_t server[MSG_ID_LEN])
{
    void *d = zmq_socket(n->ctx, ZMQ_DEALER);
    int zero = 0, hwm = 10000;
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(d, ZMQ_SNDHWM, &hwm, sizeof hwm);
    zmq_setsockopt(d, ZMQ_ROUTING_ID, n->id, MSG_ID_LEN);
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

/* members.c hooks: a member's DEALER lives exactly as long as the member is alive. */
static void member_up(void *ctx, members_entry_t *e)
{
    struct net *n = ctx;
    if (e->user) zmq_close(e->user);
    e->user = new_dealer(n, e->m.addr, e->m.id);
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

static size_t fill_header(struct net *n, msg_t *m, uint8_t *buf, size_t cap)
{
    char err[STATUS_ERR_LEN];
    size_t len = 0;
    m->swarm = n->swarm;
    memcpy(m->sender, n->id, MSG_ID_LEN);
    m->seq = ++n->seq;
    if (msg_signed(m->type)) {
        /* The control counter outlives the process: microseconds of the wall clock,
         * strictly increasing, so a restarted peer's HELLO is not taken for a replay. */
        struct timeval tv;
        gettimeofday(&tv, NULL);
        uint64_t us = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
        n->ctl_seq = us > n->ctl_seq ? us : n->ctl_seq + 1;
        m->seq = n->ctl_seq;
    }
    if (msg_encode(m, buf, cap, &len, err)) {
        log_error("net: %s", err);
        return 0;
    }
    if (msg_signed(m->type) && n->signing) msg_sign(buf, len, n->sk);
    return len;
}

/* Sends header + payloads through a member's DEALER; counts bytes out. */
static int send_to(struct net *n, members_entry_t *e, const uint8_t *hdr, size_t hlen, int np,
                   const void *const *pl, const size_t *plen)
{
    if (!e || !e->alive || !e->user) return -1;
    const void *data[6] = {hdr};
    size_t len[6] = {hlen};
    size_t total = hlen;
    for (int i = 0; i < np && i < 5; i++)
        data[i + 1] = pl[i], len[i + 1] = plen[i], total += plen[i];
    if (send_frames(e->user, 1 + np, data, len, ZMQ_DONTWAIT) < 0) return -1;
    me(n)->bytes_out += total;
    count_wire(n, 1, hdr, hlen, total);
    return 0;
}

static size_t table_bytes(struct net *n, uint8_t **out)
{
    size_t len = 0;
    char err[STATUS_ERR_LEN];
    if (members_encode(n->mem, out, &len, err)) {
        log_error("net: %s", err);
        *out = NULL;
        return 0;
    }
    return len;
}

static void push_view(struct net *n)
{
    zmq_send(n->pair_n, "v", 1, ZMQ_SNDMORE);
    zmq_send(n->pair_n, &n->rejected, sizeof n->rejected, ZMQ_SNDMORE);
    zmq_send(n->pair_n, &n->wire, sizeof n->wire, ZMQ_SNDMORE);
    msg_member_t *v = malloc((size_t)members_count(n->mem) * sizeof *v);
    int k = v ? members_view(n->mem, v) : 0;
    zmq_send(n->pair_n, v, (size_t)k * sizeof *v, 0);
    free(v);
}

/* Members dead of silence are probed this long (members.h). */
#define NET_FORGET_S 60.0

/* GOSSIP to every live member, and to one member that died of silence (a probe, through
 * a DEALER of its own that lingers until the message is out): after a partition heals,
 * the two sides find each other this way (members.h). */
static void gossip(struct net *n, double now)
{
    uint8_t hdr[MSG_HEADER_MAX], *table = NULL;
    msg_t m = {.type = MSG_GOSSIP};
    char err[STATUS_ERR_LEN];
    size_t hlen = fill_header(n, &m, hdr, sizeof hdr), tlen = 0;
    if (members_encode_gossip(n->mem, now, NET_FORGET_S, &table, &tlen, err))
        log_error("net: %s", err);
    if (hlen && table) {
        const void *pl[1] = {table};
        for (int i = 1; i < members_count(n->mem); i++)
            if (members_at(n->mem, i)->alive)
                send_to(n, members_at(n->mem, i), hdr, hlen, 1, pl, &tlen);
        int pi = members_probe(n->mem, now, NET_FORGET_S, n->seq * 0x9e3779b97f4a7c15ULL);
        void *d = pi > 0
                      ? new_dealer(n, members_at(n->mem, pi)->m.addr, members_at(n->mem, pi)->m.id)
                      : NULL;
        if (d) {
            const void *data[2] = {hdr, table};
            size_t len[2] = {hlen, tlen};
            int linger = 200;
            zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
            if (!send_frames(d, 2, data, len, ZMQ_DONTWAIT)) count_wire(n, 1, hdr, hlen, hlen + tlen);
            zmq_close(d);
        }
    }
    free(table);
}

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

static char *status_json(struct net *n, size_t *len)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f) return NULL;
    static const char *states[] = {"joining", "serving", "leaving", "dead"};
    fprintf(f, "{\"swarm\":\"%016llx\",\"stages\":%d,\"peers\":[", (unsigned long long)n->swarm,
            n->nstages);
    int first = 1, maxstage = n->nstages - 1;
    for (int i = 0; i < members_count(n->mem); i++) {
        const msg_member_t *m = &members_at(n->mem, i)->m;
        if (!members_at(n->mem, i)->alive) continue;
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
        members_entry_t *me_i = members_at(n->mem, i);
        if (i > 0 && me_i->rtt.n)
            fprintf(f, ",\"rtt_ms\":%.1f,\"rto_ms\":%.1f", 1e3 * me_i->rtt.srtt,
                    1e3 * members_rto(n->mem, i));
        fprintf(f,
                ",\"served\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,\"retries\":%llu,"
                "\"rejected\":%llu}",
                (unsigned long long)m->served, (unsigned long long)m->bytes_in,
                (unsigned long long)m->bytes_out, (unsigned long long)m->retries,
                (unsigned long long)m->rejected);
        first = 0;
    }
    fprintf(f, "],\"pools\":[");
    for (int s = 0; s <= maxstage; s++) {
        int peers = 0;
        double tp = 0;
        long long step = -1;
        double loss = NAN;
        for (int i = 0; i < members_count(n->mem); i++) {
            const msg_member_t *m = &members_at(n->mem, i)->m;
            if (!members_at(n->mem, i)->alive || m->stage != s) continue;
            peers++;
            tp += m->throughput;
            if (m->step > step) step = m->step;
            if (isfinite(m->loss)) loss = m->loss;
        }
        fprintf(f, "%s{\"stage\":%d,\"peers\":%d,\"throughput\":%.3f,\"step\":%lld,\"loss\":",
                s ? "," : "", s, peers, tp, step < 0 ? 0 : step);
        if (isfinite(loss))
            fprintf(f, "%.5f}", loss);
        else
            fprintf(f, "null}");
    }
    fprintf(f, "],\"wire\":[");
    for (int k = 0; k < WIRE_KINDS; k++)
        fprintf(f, "%s{\"kind\":\"%s\",\"in\":%llu,\"out\":%llu}", k ? "," : "",
                transport_wire_name(k), (unsigned long long)n->wire.in[k],
                (unsigned long long)n->wire.out[k]);
    fprintf(f, "],\"security\":\"%s\",\"refused\":%llu,\"forged\":%llu,\"refusals\":[",
            !n->auth                               ? "none"
            : auth_mode(n->auth) == AUTH_SWARM_KEY ? "swarm-key"
                                                   : "allowlist",
            (unsigned long long)n->refused, (unsigned long long)members_forged(n->mem));
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
    zmq_msg_t parts[6];
    int np = recv_parts(n->router, parts, 6);
    if (np < 0) return;
    char err[STATUS_ERR_LEN];
    msg_t m;
    size_t total = 0;
    for (int i = 1; i < np && i < 6; i++) total += zmq_msg_size(&parts[i]);
    me(n)->bytes_in += total;
    if (np >= 2)
        count_wire(n, 0, zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), total);
    if (np < 2 || np > 6) goto reject;
    if (msg_decode(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]), &m, err)) goto reject_err;
    if (np - 2 != msg_payloads(m.type)) {
        snprintf(err, sizeof err, "%s with %d payload frames, expected %d", msg_type_name(m.type),
                 np - 2, msg_payloads(m.type));
        goto reject_err;
    }
    log_debug("net: %s from %02x%02x%02x%02x (%d frames)", msg_type_name(m.type), m.sender[0],
              m.sender[1], m.sender[2], m.sender[3], np - 1);
    if (m.type == MSG_STATUS_REQ) {
        size_t jlen = 0, hlen;
        char *json = status_json(n, &jlen);
        uint8_t hdr[MSG_HEADER_MAX];
        msg_t r = {.type = MSG_STATUS_REP};
        hlen = fill_header(n, &r, hdr, sizeof hdr);
        const void *data[3] = {zmq_msg_data(&parts[0]), hdr, json ? json : ""};
        size_t len[3] = {zmq_msg_size(&parts[0]), hlen, json ? jlen : 0};
        if (!send_frames(n->router, 3, data, len, ZMQ_DONTWAIT))
            count_wire(n, 1, hdr, hlen, len[1] + len[2]);
        free(json);
        goto done;
    }
    /* Everything else must come from our swarm (a joiner's HELLO may not know it yet). */
    if (m.type != MSG_HELLO && n->swarm && m.swarm != n->swarm) {
        snprintf(err, sizeof err, "%s from another swarm (%016llx)", msg_type_name(m.type),
                 (unsigned long long)m.swarm);
        goto reject_err;
    }
    /* A member's DEALER carries its peer id as routing id: the header cannot claim another. */
    if (zmq_msg_size(&parts[0]) != MSG_ID_LEN ||
        memcmp(zmq_msg_data(&parts[0]), m.sender, MSG_ID_LEN)) {
        snprintf(err, sizeof err, "%s whose sender id does not match its connection",
                 msg_type_name(m.type));
        goto reject_err;
    }
    /* With an allowlist the connection's CURVE key names the sender (the ZAP user id). */
    if (n->auth && auth_mode(n->auth) == AUTH_ALLOW) {
        const char *uid = zmq_msg_gets(&parts[1], "User-Id");
        char hex[65];
        if (!uid || strcmp(uid, auth_hex(m.sender, hex))) {
            snprintf(err, sizeof err, "%s whose sender is not the key of its connection",
                     msg_type_name(m.type));
            goto reject_err;
        }
    }
    /* Signed control: HELLO and LEAVE carry the sender's signature and a counter that only
     * goes up; a forged or replayed one is refused. */
    if (msg_signed(m.type) && n->signing) {
        if (!msg_verify(zmq_msg_data(&parts[1]), zmq_msg_size(&parts[1]))) {
            snprintf(err, sizeof err, "%s with a bad signature", msg_type_name(m.type));
            goto reject_warn;
        }
        if (!members_control(n->mem, m.sender, m.seq)) {
            snprintf(err, sizeof err, "%s replayed (counter %llu)", msg_type_name(m.type),
                     (unsigned long long)m.seq);
            goto reject_warn;
        }
    }
    if (m.type == MSG_HELLO) {
        if (!n->run_text || !n->swarm) goto done; /* not ready to welcome anyone */
        members_entry_t *e = members_at(n->mem, members_hello(n->mem, &m, clock_now()));
        uint8_t hdr[MSG_HEADER_MAX], *table = NULL;
        msg_t w = {.type = MSG_WELCOME};
        snprintf(w.addr, sizeof w.addr, "%s", me(n)->addr);
        size_t hlen = fill_header(n, &w, hdr, sizeof hdr), tlen = table_bytes(n, &table);
        const void *pl[2] = {n->run_text, table};
        size_t plen[2] = {strlen(n->run_text), tlen};
        if (hlen && table) send_to(n, e, hdr, hlen, 2, pl, plen);
        free(table);
        push_view(n);
        goto done;
    }
    if (m.type == MSG_GOSSIP || m.type == MSG_WELCOME) {
        msg_member_t *v = malloc(MSG_MEMBERS_MAX * sizeof *v);
        int k = 0;
        int pi = m.type == MSG_GOSSIP ? 2 : 3;
        int rc = v ? msg_members_decode(zmq_msg_data(&parts[pi]), zmq_msg_size(&parts[pi]), v,
                                        MSG_MEMBERS_MAX, &k, err)
                   : -1;
        if (rc) {
            free(v);
            goto reject_err;
        }
        double now = clock_now();
        if (m.type == MSG_GOSSIP) members_echo(n->mem, m.sender, v, k, now); /* round trips */
        members_merge(n->mem, v, k, now);
        free(v);
        uint64_t forged = members_forged(n->mem);
        if (forged > n->forged_seen) { /* entries not signed by the member they describe */
            char hex[9];
            n->rejected += forged - n->forged_seen;
            me(n)->rejected += forged - n->forged_seen;
            log_warn("net: ignored %llu member entr%s in a %s from %s: not signed by the member",
                     (unsigned long long)(forged - n->forged_seen),
                     forged - n->forged_seen == 1 ? "y" : "ies", msg_type_name(m.type),
                     msg_id_short(m.sender, hex));
            n->forged_seen = forged;
        }
        if (m.type == MSG_GOSSIP) goto done;
    }
    if (m.type == MSG_LEAVE) {
        members_leave(n->mem, m.sender, m.text);
        push_view(n);
        goto done;
    }
    /* A data message (or WELCOME): to the compute thread, header and payloads as they came. */
    {
        const void *data[6] = {"m"};
        size_t len[6] = {1};
        for (int i = 1; i < np; i++)
            data[i] = zmq_msg_data(&parts[i]), len[i] = zmq_msg_size(&parts[i]);
        send_frames(n->pair_n, np, data, len, 0);
    }
    goto done;
reject:
    snprintf(err, sizeof err, "a message of %d frames", np);
    goto reject_err;
reject_warn:
    log_warn("net: rejected: %s", err);
reject_err:
    n->rejected++;
    me(n)->rejected++;
    log_debug("net: rejected: %s", err);
done:
    close_parts(parts, np, 6);
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
        members_entry_t *e = find(n, zmq_msg_data(&parts[1]));
        const void *pl[4];
        size_t plen[4];
        for (int i = 3; i < np; i++)
            pl[i - 3] = zmq_msg_data(&parts[i]), plen[i - 3] = zmq_msg_size(&parts[i]);
        if (send_to(n, e, zmq_msg_data(&parts[2]), zmq_msg_size(&parts[2]), np - 3, pl, plen)) {
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
        size_t hlen = fill_header(n, &m, hdr, sizeof hdr);
        /* With an allowlist the bootstrap's key is one of the listed: one HELLO per
         * candidate, of which only the right one completes a CURVE handshake. */
        const uint8_t(*cand)[MSG_ID_LEN] = NULL;
        static const uint8_t none[1][MSG_ID_LEN];
        int nc = n->auth ? auth_candidates(n->auth, &cand) : 1;
        if (!n->auth) cand = none;
        /* at most NET_HELLO_TRIES sockets per HELLO; a long list is walked over retries */
        int first = nc > NET_HELLO_TRIES ? (n->hello_round++ * NET_HELLO_TRIES) % nc : 0;
        for (int t = 0; t < nc && t < NET_HELLO_TRIES; t++) {
            int c = (first + t) % nc;
            if (n->auth && auth_mode(n->auth) == AUTH_ALLOW && !memcmp(cand[c], n->id, MSG_ID_LEN))
                continue;
            void *d = new_dealer(n, ep, cand[c]);
            if (!d) continue;
            int linger = 2000;
            zmq_setsockopt(d, ZMQ_LINGER, &linger, sizeof linger);
            if (zmq_send(d, hdr, hlen, 0) >= 0) count_wire(n, 1, hdr, hlen, hlen);
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
            s.rejected += n->rejected; /* the compute thread's count plus ours */
            s.uptime_s = self->uptime_s;
            members_set_self(n->mem, &s);
        }
        break;
    case 'R':
        if (np == 4 && zmq_msg_size(&parts[1]) == 8 && zmq_msg_size(&parts[2]) == 4) {
            memcpy(&n->swarm, zmq_msg_data(&parts[1]), 8);
            memcpy(&n->nstages, zmq_msg_data(&parts[2]), 4);
            free(n->run_text);
            n->run_text = strndup(zmq_msg_data(&parts[3]), zmq_msg_size(&parts[3]));
        }
        break;
    case 'Q':
        n->quit = 1;
        break;
    default:
        break;
    }
done:
    if (np > 0) close_parts(parts, np, 6);
}

static void tick(struct net *n)
{
    double now = clock_now();
    me(n)->uptime_s = (uint32_t)(now - n->t0);
    members_tick(n->mem, now, n->timeout_s, NULL, 0); /* heartbeat + 1, timeouts */
    gossip(n, now);
    push_view(n);
}

static void *net_thread(void *arg)
{
    struct net *n = arg;
    double next = clock_now();
    while (!n->quit) {
        zmq_pollitem_t items[4] = {{n->router, 0, ZMQ_POLLIN, 0},
                                   {n->pair_n, 0, ZMQ_POLLIN, 0},
                                   {n->zap, 0, ZMQ_POLLIN, 0},
                                   {n->mon, 0, ZMQ_POLLIN, 0}};
        long wait = (long)((next - clock_now()) * 1000);
        if (wait < 0) wait = 0;
        if (zmq_poll(items, n->zap ? 4 : 2, wait) < 0 && zmq_errno() != EINTR) break;
        if (n->zap && (items[2].revents & ZMQ_POLLIN)) on_zap(n);
        if (n->zap && (items[3].revents & ZMQ_POLLIN)) on_monitor(n);
        if (items[0].revents & ZMQ_POLLIN) on_router(n);
        if (items[1].revents & ZMQ_POLLIN) on_compute(n);
        if (clock_now() >= next) {
            tick(n);
            next = clock_now() + n->heartbeat_s;
        }
    }
    /* Leaving: say so to everyone, then close. */
    uint8_t hdr[MSG_HEADER_MAX];
    msg_t m = {.type = MSG_LEAVE};
    snprintf(m.text, sizeof m.text, "leaving");
    me(n)->state = MEMBER_LEAVING;
    size_t hlen = fill_header(n, &m, hdr, sizeof hdr);
    for (int i = 1; i < members_count(n->mem); i++) {
        members_entry_t *e = members_at(n->mem, i);
        if (!e->alive || !e->user) continue;
        int linger = 500;
        zmq_setsockopt(e->user, ZMQ_LINGER, &linger, sizeof linger);
        send_to(n, e, hdr, hlen, 0, NULL, NULL);
    }
    for (int i = 1; i < members_count(n->mem); i++) {
        members_entry_t *e = members_at(n->mem, i);
        if (e->user) zmq_close(e->user);
        e->user = NULL;
    }
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
    n->swarm = n->c_swarm = cfg->swarm;
    n->run_text = cfg->run_text ? strdup(cfg->run_text) : NULL;
    memcpy(n->id, cfg->id, MSG_ID_LEN);
    n->t0 = clock_now();
    int zero = 0, one = 1;
    if (cfg->sk) {
        memcpy(n->sk, cfg->sk, sizeof n->sk);
        n->signing = 1;
    }
    n->auth = cfg->auth;
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
    if (zmq_bind(n->router, cfg->bind) < 0) {
        status_set(err, STATUS_ENET, "cannot listen on %s: %s", cfg->bind,
                   zmq_strerror(zmq_errno()));
        goto fail;
    }
    char bound[256];
    size_t blen = sizeof bound;
    zmq_getsockopt(n->router, ZMQ_LAST_ENDPOINT, bound, &blen);
    if (endpoint) snprintf(endpoint, 256, "%s", bound);
    msg_member_t self = cfg->self;
    memcpy(self.id, cfg->id, MSG_ID_LEN);
    snprintf(self.addr, sizeof self.addr, "%s", cfg->advertise ? cfg->advertise : bound);
    members_hooks_t hooks = {.ctx = n, .up = member_up, .down = member_down};
    n->mem = members_new(&self, clock_now(), &hooks, err);
    if (!n->mem) goto fail;
    /* The heartbeat starts at the wall clock's milliseconds: a restarted peer's entries win
     * over those of its previous life, and a recorded (signed) entry of that life cannot
     * be replayed over the new one. */
    {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        members_at(n->mem, 0)->m.heartbeat =
            (uint64_t)tv.tv_sec * 1000u + (uint64_t)tv.tv_usec / 1000u;
    }
    if (n->signing) members_set_signing(n->mem, n->sk);
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
    members_destroy(&n->mem);
    free(n->run_text);
    free(n);
    return NULL;
}

static void release_frames(struct net *n)
{
    for (int i = 0; i < n->nframes_held; i++) zmq_msg_close(&n->frames[i]);
    n->nframes_held = 0;
}

void net_halt(net_t *n, wire_count_t *wire)
{
    if (!n) return;
    if (n->started && !n->halted) {
        zmq_send(n->pair_c, "Q", 1, 0);
        pthread_join(n->thread, NULL);
    }
    n->halted = 1;
    if (wire) *wire = n->wire; /* the thread is gone: its counters are ours to read */
}

void net_stop(net_t **np)
{
    if (!np || !*np) return;
    struct net *n = *np;
    net_halt(n, NULL);
    release_frames(n);
    zmq_close(n->pair_c);
    zmq_ctx_term(n->ctx);
    members_destroy(&n->mem);
    free(n->run_text);
    free(n->view);
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
        struct timeval tv;
        gettimeofday(&tv, NULL);
        uint64_t us = (uint64_t)tv.tv_sec * 1000000u + (uint64_t)tv.tv_usec;
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
    } else if (kind[0] == 'v' && np == 4 && zmq_msg_size(&n->frames[2]) == sizeof n->view_wire) {
        size_t bytes = zmq_msg_size(&n->frames[3]);
        int k = (int)(bytes / sizeof(msg_member_t));
        if (k > n->view_cap) {
            msg_member_t *p = realloc(n->view, (size_t)k * sizeof *p);
            if (!p) return -1;
            n->view = p;
            n->view_cap = k;
        }
        memcpy(n->view, zmq_msg_data(&n->frames[3]), (size_t)k * sizeof *n->view);
        memcpy(&n->view_rejected, zmq_msg_data(&n->frames[1]), sizeof n->view_rejected);
        memcpy(&n->view_wire, zmq_msg_data(&n->frames[2]), sizeof n->view_wire);
        ev->type = NET_EV_VIEW;
        ev->rejected = n->view_rejected;
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

transport_t net_transport(net_t *n)
{
    return (transport_t){
        .ctx = n, .send = tp_send, .hello = tp_hello, .set_self = tp_set_self, .set_run = tp_set_run};
}
