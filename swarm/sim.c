/* sim.c — the simulated network (sim.h): an event heap keyed by (virtual time,
 * sequence), nodes with the dispatch core a real peer's network thread runs (dispatch.c:
 * every message is bytes, encoded, signed, decoded and checked as on a socket) and an
 * inbox for their program, connections with FIFO order and resets, and the fault
 * schedule, all drawn from one rng_t. Not for: the programs themselves (the caller's
 * sim_app_t). */
#include "swarm/sim.h"
#include "common/rng.h"
#include "common/status.h"
#include "swarm/dispatch.h"

#include <sodium.h>

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_RING 256
#define TRACE_LINE 200

enum { EV_START, EV_DELIVER, EV_TICK, EV_APP, EV_FAULT, EV_HEAL, EV_RESET, EV_RESTART };
enum { NODE_PENDING, NODE_UP, NODE_CRASHED, NODE_STOPPED };
enum { ITEM_MSG, ITEM_VIEW, ITEM_UNDELIV };

#define SMSG_FRAMES 5 /* a header and at most 4 payloads */

/* A message: in flight, its frames as bytes (the header encoded first); in a node's inbox,
 * its header decoded (hdr) and the payloads. */
typedef struct {
    msg_t hdr; /* decoded: for the trace in flight, for the program in the inbox */
    int nframes;
    uint8_t *frame[SMSG_FRAMES];
    size_t len[SMSG_FRAMES];
    int src, dst;
    uint32_t epoch; /* its connection's epoch when sent; a reset bumps the epoch */
    double sent_at;
    char corrupt[48]; /* what a corrupting fault did to it ("" when intact) */
} smsg_t;

typedef struct {
    double t;
    uint64_t seq;
    int kind, node, a;
    uint64_t gen;
    smsg_t *m;
} ev_t;

typedef struct item {
    struct item *next;
    int kind;
    smsg_t *m; /* ITEM_MSG, ITEM_UNDELIV (header only) */
    uint8_t dest[MSG_ID_LEN];
} item_t;

typedef struct node {
    struct sim *s;
    int index, state, restart_of, side;
    int found; /* founds a swarm anew (sim_add_restart): joins nobody */
    uint8_t id[MSG_ID_LEN], sk[64]; /* an Ed25519 key pair drawn from the seed */
    char addr[32];
    dispatch_t *core; /* what a real peer's network thread runs; NULL when not up */
    const char *delivering; /* the corruption of the message being dispatched, or NULL */
    wire_count_t wire;      /* bytes by kind over its life, once it is down */
    double up_s;            /* virtual seconds it was up, once it is down */
    double slow, busy_until, app_at, cut_at, started_at;
    double paused_until; /* frozen (a pause fault) until then */
    double link_died_at; /* a connection from it last died silently (dead_link_rate) */
    int finished;        /* its program finished the run (it leaves saying so) */
    uint64_t app_gen;
    int app_scheduled, in_app, view_pending;
    item_t *in_head, *in_tail;
    transport_t tp;
} node_t;

typedef struct {
    uint32_t epoch;
    double last_at; /* latest delivery time scheduled on it (FIFO) */
    int dead;       /* it died silently (dead_link_rate): its sender must open it anew */
} link_t;

struct sim {
    sim_config_t cfg;
    sim_app_t app;
    rng_t rng;
    double now, last_fault;
    uint64_t seq, events, hash;
    ev_t *heap;
    size_t nheap, capheap;
    node_t **nodes;
    int nnodes;
    link_t *links; /* max_nodes x max_nodes, [src * max + dst] */
    int founded, partitioned;
    double hold_until; /* no fault starts before (sim_hold_faults) */
    char ring[TRACE_RING][TRACE_LINE];
    uint64_t nlines;
    int failed;
    char fail_err[STATUS_ERR_LEN];
    uint64_t corrupted, corrupt_refused; /* messages a fault corrupted; refused of them */
};

/* ---- configuration ------------------------------------------------------------------ */

/* The wall clock of virtual time 0, in seconds since the Unix epoch (2023-11-14): what a
 * node's first heartbeat counts from. */
#define SIM_WALL_EPOCH_S 1700000000.0

sim_config_t sim_config_defaults(void)
{
    sim_config_t c;
    memset(&c, 0, sizeof c);
    c.seed = 1;
    c.heartbeat_s = 0.25;
    c.timeout_s = 3.0;
    c.forget_s = 60.0;
    c.delay_min_s = 0.0001;
    c.delay_max_s = 0.005;
    c.crash_window_s = 0.005;
    c.restart_min_s = 0.5;
    c.restart_max_s = 5.0;
    c.partition_min_s = 0.5;
    c.partition_max_s = 10.0;
    c.slow_max = 1.0;
    c.faults_until = INFINITY;
    c.max_nodes = 64;
    c.max_events = 20000000;
    return c;
}

int sim_config_faults(sim_config_t *c, const char *level, char *err)
{
    sim_config_t d = sim_config_defaults();
    d.seed = c->seed;
    d.trace = c->trace;
    d.max_nodes = c->max_nodes;
    d.faults_until = c->faults_until;
    d.faults_from = c->faults_from;
    d.gossip_fanout = c->gossip_fanout;
    if (!strcmp(level, "none")) {
        /* delays only */
    } else if (!strcmp(level, "mild") || !strcmp(level, "corrupt") || !strcmp(level, "pause") ||
               !strcmp(level, "deadlink")) {
        d.corrupt_p = !strcmp(level, "corrupt") ? 0.01 : 0; /* mild, and corrupted frames */
        if (!strcmp(level, "deadlink")) d.dead_link_rate = 0.05; /* mild, and dead links */
        if (!strcmp(level, "pause")) { /* mild, and paused nodes */
            d.pause_rate = 0.02;
            d.pause_min_s = 1.0;
            d.pause_max_s = 20.0;
        }
        d.tail_p = 0.01;
        d.tail_max_s = 0.2;
        d.reset_p = 0.0005;
        d.crash_rate = 0.02;
        d.restart_p = 0.7;
        d.join_rate = 0.01;
        d.partition_rate = 0.01;
        d.partition_min_s = 0.2;
        d.partition_max_s = 5.0;
        d.slow_p = 0.2;
        d.slow_max = 5.0;
    } else if (!strcmp(level, "heavy")) {
        d.tail_p = 0.05;
        d.tail_max_s = 1.0;
        d.reorder_p = 0.02;
        d.dup_p = 0.01;
        d.reset_p = 0.002;
        d.crash_rate = 0.1;
        d.restart_p = 0.8;
        d.join_rate = 0.05;
        d.leave_rate = 0.01;
        d.partition_rate = 0.03;
        d.partition_min_s = 0.2;
        d.partition_max_s = 15.0;
        d.slow_p = 0.3;
        d.slow_max = 20.0;
    } else {
        return status_set(err, STATUS_EINVAL, "unknown fault level '%s' (none, mild, heavy, corrupt, pause, deadlink)",
                          level);
    }
    *c = d;
    return 0;
}

int sim_config_set(sim_config_t *c, const char *key, const char *value, char *err)
{
    static const struct {
        const char *name;
        size_t off;
    } knobs[] = {
#define K(f) {#f, offsetof(sim_config_t, f)}
        K(heartbeat_s),    K(timeout_s),       K(forget_s),        K(delay_min_s),
        K(delay_max_s),    K(tail_p),          K(tail_max_s),      K(reorder_p),
        K(dup_p),          K(reset_p),         K(corrupt_p),       K(crash_rate),
        K(crash_window_s),
        K(restart_p),      K(restart_min_s),   K(restart_max_s),   K(join_rate),
        K(leave_rate),     K(partition_rate),  K(partition_min_s), K(partition_max_s),
        K(slow_p),         K(slow_max),        K(faults_from),     K(faults_until),
        K(pause_rate),     K(pause_min_s),     K(pause_max_s),     K(dead_link_rate),
#undef K
    };
    char *end;
    double v = strtod(value, &end);
    if (!*value || *end || !(v >= 0))
        return status_set(err, STATUS_EINVAL, "sim: %s: '%s' is not a number >= 0", key, value);
    static const struct {
        const char *name;
        size_t off;
    } ints[] = {{"gossip_fanout", offsetof(sim_config_t, gossip_fanout)},
                {"swim_every", offsetof(sim_config_t, swim_every)},
                {"swim_k", offsetof(sim_config_t, swim_k)},
                {"swim_fanout", offsetof(sim_config_t, swim_fanout)}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i].name)) {
            if (v > 1000) return status_set(err, STATUS_EINVAL, "sim: %s: at most 1000", key);
            int iv = (int)v;
            memcpy((char *)c + ints[i].off, &iv, sizeof iv);
            return 0;
        }
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0]; i++)
        if (!strcmp(key, knobs[i].name)) {
            memcpy((char *)c + knobs[i].off, &v, sizeof v);
            return 0;
        }
    char names[600];
    int w = snprintf(names, sizeof names, "gossip_fanout swim_every swim_k swim_fanout");
    for (size_t i = 0; i < sizeof knobs / sizeof knobs[0] && w < (int)sizeof names; i++)
        w += snprintf(names + w, sizeof names - (size_t)w, " %s", knobs[i].name);
    return status_set(err, STATUS_EINVAL, "sim: no knob '%s' (%s)", key, names);
}

/* ---- trace ---------------------------------------------------------------------------- */

static void vnote(sim_t *s, const char *fmt, va_list ap)
{
    char *line = s->ring[s->nlines % TRACE_RING];
    int w = snprintf(line, TRACE_LINE, "%12.6f ", s->now);
    if (w < 0 || w >= TRACE_LINE) w = 0;
    vsnprintf(line + w, TRACE_LINE - (size_t)w, fmt, ap);
    for (const char *p = line; *p; p++) s->hash = (s->hash ^ (uint8_t)*p) * 0x100000001b3ULL;
    s->hash = (s->hash ^ '\n') * 0x100000001b3ULL;
    s->nlines++;
    if (s->cfg.trace) fprintf(s->cfg.trace, "%s\n", line);
}

void sim_note(sim_t *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vnote(s, fmt, ap);
    va_end(ap);
}

void sim_dump_trace(const sim_t *s, FILE *f, int n)
{
    if (n > TRACE_RING) n = TRACE_RING;
    uint64_t first = s->nlines > (uint64_t)n ? s->nlines - (uint64_t)n : 0;
    for (uint64_t i = first; i < s->nlines; i++) fprintf(f, "  %s\n", s->ring[i % TRACE_RING]);
}

static const char *msg_brief(const msg_t *m, char *buf, size_t n)
{
    switch (m->type) {
    case MSG_FWD:
    case MSG_BWD:
    case MSG_NACK:
        snprintf(buf, n, "%s step %lld mb %u.%u stage %d", msg_type_name(m->type),
                 (long long)m->mb.step, m->mb.index, m->mb.attempt, m->stage);
        break;
    case MSG_EXCH:
    case MSG_EXCH_REQ: {
        char o[9];
        snprintf(buf, n, "%s step %lld stage %d origin %s part %u count %u",
                 msg_type_name(m->type), (long long)m->step, m->stage, msg_id_short(m->origin, o),
                 m->flags, m->count);
        break;
    }
    case MSG_PROGRESS:
    case MSG_STEP_DONE:
    case MSG_REDO:
        snprintf(buf, n, "%s step %lld stage %d", msg_type_name(m->type), (long long)m->step,
                 m->stage);
        break;
    case MSG_STATE_REQ:
    case MSG_STATE_REP:
        snprintf(buf, n, "%s stage %d step %lld off %llu", msg_type_name(m->type), m->stage,
                 (long long)m->step, (unsigned long long)m->offset);
        break;
    default:
        snprintf(buf, n, "%s", msg_type_name(m->type));
    }
    return buf;
}

/* ---- the event heap ------------------------------------------------------------------- */

static int ev_less(const ev_t *a, const ev_t *b)
{
    return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static int push(sim_t *s, double t, int kind, int node, int a, uint64_t gen, smsg_t *m)
{
    if (s->nheap == s->capheap) {
        size_t cap = s->capheap ? 2 * s->capheap : 1024;
        ev_t *h = realloc(s->heap, cap * sizeof *h);
        if (!h) return STATUS_ENOMEM;
        s->heap = h;
        s->capheap = cap;
    }
    ev_t e = {.t = t < s->now ? s->now : t, .seq = s->seq++, .kind = kind, .node = node,
              .a = a, .gen = gen, .m = m};
    size_t i = s->nheap++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!ev_less(&e, &s->heap[p])) break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = e;
    return 0;
}

static ev_t pop(sim_t *s)
{
    ev_t top = s->heap[0], last = s->heap[--s->nheap];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const ev_t *mv = &last;
        if (l < s->nheap && ev_less(&s->heap[l], mv)) m = l, mv = &s->heap[l];
        if (r < s->nheap && ev_less(&s->heap[r], mv)) m = r;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap) s->heap[i] = last;
    return top;
}

/* ---- messages --------------------------------------------------------------------------- */

static void smsg_free(smsg_t *m)
{
    if (!m) return;
    for (int i = 0; i < m->nframes; i++) free(m->frame[i]);
    free(m);
}

/* A message of hdr (for the trace and the program) with nframes frames copied. */
static smsg_t *smsg_new(const msg_t *hdr, int nframes, const void *const *frames,
                        const size_t *lens)
{
    smsg_t *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->hdr = *hdr;
    for (int i = 0; i < nframes && i < SMSG_FRAMES; i++) {
        m->frame[i] = malloc(lens[i] ? lens[i] : 1);
        if (!m->frame[i]) {
            smsg_free(m);
            return NULL;
        }
        if (lens[i]) memcpy(m->frame[i], frames[i], lens[i]);
        m->len[i] = lens[i];
        m->nframes = i + 1;
    }
    return m;
}

static smsg_t *smsg_clone(const smsg_t *o)
{
    const void *f[SMSG_FRAMES];
    for (int i = 0; i < o->nframes; i++) f[i] = o->frame[i];
    smsg_t *m = smsg_new(&o->hdr, o->nframes, f, o->len);
    if (!m) return NULL;
    m->src = o->src, m->dst = o->dst, m->epoch = o->epoch, m->sent_at = o->sent_at;
    return m;
}

static double uni(sim_t *s, double a, double b)
{
    return a + (b - a) * rng_uniform(&s->rng);
}

static link_t *link_of(sim_t *s, int src, int dst)
{
    return &s->links[(size_t)src * (size_t)s->cfg.max_nodes + (size_t)dst];
}

/* A corrupting fault: one frame truncated, or (the header) a bit flipped where every
 * decoder must notice: the magic and version octets, or anywhere in a signed header. The
 * frames cut are the header's and the membership payloads (tables, run text), which the
 * dispatch core must refuse on arrival; data payloads are not cut (sim.h says why). */
static void corrupt(sim_t *s, smsg_t *m)
{
    int t = m->hdr.type;
    int membership = t == MSG_GOSSIP || t == MSG_WELCOME;
    int f = membership ? (int)rng_below(&s->rng, (uint64_t)m->nframes) : 0;
    int sig = msg_signed(m->hdr.type);
    if (f == 0 && m->len[0] >= 4 && rng_below(&s->rng, 2)) {
        size_t at = (size_t)rng_below(&s->rng, sig ? (uint64_t)m->len[0] : 4);
        m->frame[0][at] ^= (uint8_t)(1u << rng_below(&s->rng, 8));
        snprintf(m->corrupt, sizeof m->corrupt, "bit flipped at octet %zu", at);
    } else if (m->len[f] > 0) {
        size_t to = (size_t)rng_below(&s->rng, (uint64_t)m->len[f]);
        snprintf(m->corrupt, sizeof m->corrupt, "frame %d cut from %zu to %zu", f, m->len[f], to);
        m->len[f] = to;
    }
}

/* Puts a message (frames, header first; hdr decoded, for the trace) on the connection
 * src -> dst, with the fault model's delay, order, duplicate, reset and corruption. Lost
 * at once if a partition separates them. */
static int net_put(sim_t *s, node_t *src, int dst, const msg_t *hdr, int nframes,
                   const void *const *frames, const size_t *lens, int side)
{
    char b[96];
    node_t *d = s->nodes[dst];
    if (s->partitioned && src->side != d->side) {
        sim_note(s, "cut   %d->%d %s", src->index, dst, msg_brief(hdr, b, sizeof b));
        return 0;
    }
    link_t *l = link_of(s, src->index, dst);
    if (l->dead && !side) { /* a side connection (a probe, a HELLO) is a new one */
        sim_note(s, "dead  %d->%d %s", src->index, dst, msg_brief(hdr, b, sizeof b));
        return 0;
    }
    /* resets, duplicates and reordering are faults: only within [faults_from, faults_until] */
    int faulty = s->now >= s->cfg.faults_from && s->now <= s->cfg.faults_until &&
                 s->now >= s->hold_until;
    double t = s->now + uni(s, s->cfg.delay_min_s, s->cfg.delay_max_s);
    if (s->cfg.tail_p > 0 && rng_uniform(&s->rng) < s->cfg.tail_p)
        t += uni(s, 0, s->cfg.tail_max_s);
    if (!(faulty && s->cfg.reorder_p > 0 && rng_uniform(&s->rng) < s->cfg.reorder_p)) {
        if (t <= l->last_at) t = l->last_at + 1e-9;
        l->last_at = t;
    }
    smsg_t *m = smsg_new(hdr, nframes, frames, lens);
    if (!m) return STATUS_ENOMEM;
    m->src = src->index, m->dst = dst, m->epoch = l->epoch, m->sent_at = s->now;
    if (faulty && s->cfg.dup_p > 0 && rng_uniform(&s->rng) < s->cfg.dup_p) {
        smsg_t *c = smsg_clone(m);
        if (!c || push(s, t + uni(s, 0, s->cfg.delay_max_s), EV_DELIVER, dst, 0, 0, c)) {
            smsg_free(c);
            smsg_free(m);
            return STATUS_ENOMEM;
        }
        sim_note(s, "dup   %d->%d %s", src->index, dst, msg_brief(hdr, b, sizeof b));
    }
    if (faulty && s->cfg.corrupt_p > 0 && rng_uniform(&s->rng) < s->cfg.corrupt_p) {
        corrupt(s, m);
        sim_note(s, "bad   %d->%d %s: %s", src->index, dst, msg_brief(hdr, b, sizeof b),
                 m->corrupt);
    }
    if (faulty && s->cfg.reset_p > 0 && rng_uniform(&s->rng) < s->cfg.reset_p) {
        if (push(s, uni(s, s->now, t), EV_RESET, src->index, dst, 0, NULL)) {
            smsg_free(m);
            return STATUS_ENOMEM;
        }
    }
    if (push(s, t, EV_DELIVER, dst, 0, 0, m)) {
        smsg_free(m);
        return STATUS_ENOMEM;
    }
    return 0;
}

/* The node's clock for signed control counters: virtual microseconds. */
static uint64_t node_us(const sim_t *s)
{
    return (uint64_t)(s->now * 1e6);
}

/* Puts encoded frames on the connection to the node at addr; -1 if there is none. */
static int parse_node(const sim_t *s, const char *addr);
static int put_frames(node_t *n, const char *addr, int nframes, const void *const *data,
                      const size_t *len, int side)
{
    sim_t *s = n->s;
    int dst = parse_node(s, addr);
    if (dst < 0) return -1;
    msg_t h;
    char err[STATUS_ERR_LEN];
    if (msg_decode(data[0], len[0], &h, err)) memset(&h, 0, sizeof h);
    return net_put(s, n, dst, &h, nframes, data, len, side) ? -1 : 0;
}

/* ---- the node's program: inbox and scheduling ------------------------------------------- */

static void schedule_app(sim_t *s, node_t *n, double t)
{
    if (n->state != NODE_UP || n->in_app) return;
    if (t < n->busy_until) t = n->busy_until;
    if (t < n->paused_until) t = n->paused_until;
    if (n->app_scheduled && n->app_at <= t) return;
    n->app_gen++;
    n->app_at = t;
    n->app_scheduled = 1;
    if (push(s, t, EV_APP, n->index, 0, n->app_gen, NULL)) {
        s->failed = 1;
        snprintf(s->fail_err, sizeof s->fail_err, "sim: out of memory");
    }
}

static void inbox_add(sim_t *s, node_t *n, int kind, smsg_t *m, const uint8_t *dest)
{
    if (kind == ITEM_VIEW) {
        if (n->view_pending) return; /* one pending view is as good as many: it is read late */
        n->view_pending = 1;
    }
    item_t *it = calloc(1, sizeof *it);
    if (!it) {
        smsg_free(m);
        s->failed = 1;
        snprintf(s->fail_err, sizeof s->fail_err, "sim: out of memory");
        return;
    }
    it->kind = kind;
    it->m = m;
    if (dest) memcpy(it->dest, dest, MSG_ID_LEN);
    if (n->in_tail)
        n->in_tail->next = it;
    else
        n->in_head = it;
    n->in_tail = it;
    schedule_app(s, n, s->now);
}

static void inbox_clear(node_t *n)
{
    while (n->in_head) {
        item_t *it = n->in_head;
        n->in_head = it->next;
        smsg_free(it->m);
        free(it);
    }
    n->in_tail = NULL;
    n->view_pending = 0;
}

/* ---- transport callbacks ------------------------------------------------------------------ */

static int parse_node(const sim_t *s, const char *addr)
{
    if (strncmp(addr, "sim://", 6)) return -1;
    char *end;
    long k = strtol(addr + 6, &end, 10);
    if (end == addr + 6 || *end || k < 0 || k >= s->nnodes) return -1;
    return (int)k;
}

static int tp_send(void *ctx, const uint8_t dest[MSG_ID_LEN], msg_t *m, int nframes,
                   const void *const *frames, const size_t *lens, char *err)
{
    node_t *n = ctx;
    sim_t *s = n->s;
    if (n->state != NODE_UP) return status_set(err, STATUS_ENET, "sim: node %d is down", n->index);
    if (nframes < 0 || nframes > 3)
        return status_set(err, STATUS_EINVAL, "sim: send: %d payloads", nframes);
    uint8_t hdr[MSG_HEADER_MAX];
    size_t hlen = dispatch_header(n->core, m, node_us(s), hdr, sizeof hdr, err);
    if (!hlen) return STATUS_EINVAL;
    const void *data[SMSG_FRAMES] = {hdr};
    size_t len[SMSG_FRAMES] = {hlen};
    for (int i = 0; i < nframes; i++) data[i + 1] = frames[i], len[i + 1] = lens[i];
    if (dispatch_send(n->core, dest, nframes + 1, data, len)) {
        char b[96];
        sim_note(s, "undel %d %s", n->index, msg_brief(m, b, sizeof b));
        smsg_t *u = smsg_new(m, 0, NULL, NULL);
        if (!u) return status_set(err, STATUS_ENOMEM, "sim: out of memory");
        inbox_add(s, n, ITEM_UNDELIV, u, dest);
    }
    return 0;
}

static int tp_hello(void *ctx, const char *endpoint, int stage, char *err)
{
    node_t *n = ctx;
    sim_t *s = n->s;
    if (n->state != NODE_UP) return status_set(err, STATUS_ENET, "sim: node %d is down", n->index);
    if (parse_node(s, endpoint) < 0)
        return status_set(err, STATUS_EINVAL, "sim: no such endpoint '%s'", endpoint);
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_HELLO;
    m.stage = (int16_t)stage;
    snprintf(m.addr, sizeof m.addr, "%s", n->addr);
    uint8_t hdr[MSG_HEADER_MAX];
    size_t hlen = dispatch_header(n->core, &m, node_us(s), hdr, sizeof hdr, err);
    if (!hlen) return STATUS_EINVAL;
    const void *data[1] = {hdr};
    if (put_frames(n, endpoint, 1, data, &hlen, 1))
        return status_set(err, STATUS_ENOMEM, "sim: out of memory");
    dispatch_count_out(n->core, 1, data, &hlen);
    return 0;
}

static void tp_set_self(void *ctx, const msg_member_t *self)
{
    node_t *n = ctx;
    if (n->state == NODE_UP) dispatch_set_self(n->core, self, n->s->now);
}

/* The connection from n to member e's node opened anew (the dispatch core's reconnect
 * hook, as net.c's): a dead one works again; what was in flight on it is lost. */
static void io_reconnect(void *ctx, members_entry_t *e, const char *why)
{
    node_t *n = ctx;
    int dst = parse_node(n->s, e->m.addr);
    if (dst < 0 || !e->alive) return;
    link_t *l = link_of(n->s, n->index, dst);
    sim_note(n->s, "mend  %d->%d%s: %s", n->index, dst, l->dead ? " (dead)" : "", why);
    l->dead = 0;
    l->epoch++;
}

/* transport.h reconnect: as net_reconnect, the connection anew and a MEND over it. */
static void tp_reconnect(void *ctx, const uint8_t dest[MSG_ID_LEN])
{
    node_t *n = ctx;
    if (n->state == NODE_UP) dispatch_mend(n->core, dest);
}

static void tp_set_run(void *ctx, uint64_t swarm, const char *run_text)
{
    node_t *n = ctx;
    if (n->state == NODE_UP) dispatch_set_run(n->core, swarm, run_text);
}

/* ---- the dispatch core's io --------------------------------------------------------------- */

static int io_send(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                   const size_t *len)
{
    return put_frames(ctx, e->m.addr, nframes, data, len, 0);
}

/* A probe leaves on a connection of its own (net.c: a side DEALER, docs/protocol.md 3.1):
 * a dead member connection does not hold it up. */
static int io_probe(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                    const size_t *len)
{
    return put_frames(ctx, e->m.addr, nframes, data, len, 1);
}

/* On the connection a node opened to n, whose routing id is its id (docs/protocol.md
 * 3.1: an answer to a peer n does not know yet): to the up node of that id, the latest life
 * (a restarted node takes its id over, as ZMQ_ROUTER_HANDOVER does). The status tool is no
 * node of the simulator: nothing answers it. */
static int io_reply(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                    const void *const *data, const size_t *len)
{
    node_t *n = ctx;
    if (conn_len != MSG_ID_LEN) return -1;
    for (int i = n->s->nnodes - 1; i >= 0; i--) {
        node_t *d = n->s->nodes[i];
        if (d != n && d->state == NODE_UP && !memcmp(d->id, conn, MSG_ID_LEN))
            return put_frames(n, d->addr, nframes, data, len, 0);
    }
    return -1;
}

static void io_deliver(void *ctx, const msg_t *m, int nframes, const void *const *data,
                       const size_t *len)
{
    node_t *n = ctx;
    smsg_t *c = smsg_new(m, nframes - 1, data + 1, len + 1);
    if (!c) {
        n->s->failed = 1;
        snprintf(n->s->fail_err, sizeof n->s->fail_err, "sim: out of memory");
        return;
    }
    if (n->delivering) snprintf(c->corrupt, sizeof c->corrupt, "%s", n->delivering);
    inbox_add(n->s, n, ITEM_MSG, c, NULL);
}

static void push_view(sim_t *s, node_t *n);
static void io_view(void *ctx)
{
    node_t *n = ctx;
    push_view(n->s, n);
}

static void io_up(void *ctx, members_entry_t *e)
{
    node_t *n = ctx;
    sim_note(n->s, "up    %d sees %s", n->index, e->m.addr);
    /* net.c opens a new DEALER to a member that comes up: a dead connection is gone */
    int dst = parse_node(n->s, e->m.addr);
    if (dst >= 0) link_of(n->s, n->index, dst)->dead = 0;
    if (n->s->app.member_up) n->s->app.member_up(n->s->app.ctx, n->index, e->m.id, n->s->now);
}

static void io_down(void *ctx, members_entry_t *e, const char *why)
{
    node_t *n = ctx;
    sim_note(n->s, "down  %d sees %s: %s", n->index, e->m.addr, why);
    if (n->s->app.member_down) n->s->app.member_down(n->s->app.ctx, n->index, e->m.id, why, n->s->now);
}

static void io_refused(void *ctx, const char *why, int warn)
{
    node_t *n = ctx;
    (void)warn;
    sim_note(n->s, "rej   %d: %s", n->index, why);
}

/* ---- nodes ---------------------------------------------------------------------------------- */

sim_t *sim_new(const sim_config_t *cfg, const sim_app_t *app, char *err)
{
    if (cfg->max_nodes < 1 || cfg->max_nodes > 4096 || cfg->heartbeat_s <= 0 ||
        cfg->timeout_s <= 0 || cfg->delay_min_s < 0 || cfg->delay_max_s < cfg->delay_min_s) {
        status_set(err, STATUS_EINVAL, "sim: bad configuration");
        return NULL;
    }
    sim_t *s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->cfg = *cfg;
    s->app = *app;
    rng_seed(&s->rng, rng_mix(cfg->seed, 0x53494d));
    s->hash = 0xcbf29ce484222325ULL;
    s->nodes = calloc((size_t)cfg->max_nodes, sizeof *s->nodes);
    s->links = calloc((size_t)cfg->max_nodes * (size_t)cfg->max_nodes, sizeof *s->links);
    if (!s->nodes || !s->links) goto nomem;
    double total = cfg->crash_rate + cfg->join_rate + cfg->leave_rate + cfg->partition_rate +
                   cfg->pause_rate + cfg->dead_link_rate;
    if (total > 0 && push(s, cfg->faults_from - log(1 - rng_uniform(&s->rng)) / total, EV_FAULT,
                          -1, 0, 0, NULL))
        goto nomem;
    return s;
nomem:
    sim_destroy(&s);
    status_set(err, STATUS_ENOMEM, "sim: out of memory");
    return NULL;
}

static void node_free(node_t *n)
{
    if (!n) return;
    inbox_clear(n);
    dispatch_destroy(&n->core);
    sodium_memzero(n->sk, sizeof n->sk);
    free(n);
}

void sim_destroy(sim_t **sp)
{
    if (!sp || !*sp) return;
    sim_t *s = *sp;
    for (size_t i = 0; i < s->nheap; i++) smsg_free(s->heap[i].m);
    free(s->heap);
    for (int i = 0; s->nodes && i < s->nnodes; i++) node_free(s->nodes[i]);
    free(s->nodes);
    free(s->links);
    free(s);
    *sp = NULL;
}

static int new_node(sim_t *s, double at, int restart_of, char *err)
{
    if (s->nnodes >= s->cfg.max_nodes)
        return status_set(err, STATUS_EFULL, "sim: %d nodes already", s->cfg.max_nodes);
    node_t *n = calloc(1, sizeof *n);
    if (!n) return status_set(err, STATUS_ENOMEM, "sim: out of memory");
    n->s = s;
    n->index = s->nnodes;
    n->state = NODE_PENDING;
    n->restart_of = restart_of;
    uint8_t seed[32]; /* its key pair from the seed: ids are keys, signatures real */
    for (int i = 0; i < 32; i += 8) {
        uint64_t r = rng_next(&s->rng);
        memcpy(seed + i, &r, 8);
    }
    crypto_sign_seed_keypair(n->id, n->sk, seed);
    if (restart_of >= 0 && restart_of < s->nnodes) {
        /* a restarted peer keeps its identity (a real one keeps its key in its store) and
         * gets a new address, as a real one listens on a new port */
        memcpy(n->id, s->nodes[restart_of]->id, sizeof n->id);
        memcpy(n->sk, s->nodes[restart_of]->sk, sizeof n->sk);
    }
    snprintf(n->addr, sizeof n->addr, "sim://%d", n->index);
    n->slow = 1.0;
    if (s->cfg.slow_p > 0 && rng_uniform(&s->rng) < s->cfg.slow_p)
        n->slow = uni(s, 1.0, s->cfg.slow_max);
    n->side = s->partitioned ? (int)rng_below(&s->rng, 2) : 0;
    n->tp = (transport_t){
        .ctx = n, .send = tp_send, .hello = tp_hello, .set_self = tp_set_self, .set_run = tp_set_run,
        .reconnect = tp_reconnect};
    s->nodes[s->nnodes++] = n;
    if (push(s, at, EV_START, n->index, 0, 0, NULL))
        return status_set(err, STATUS_ENOMEM, "sim: out of memory");
    return n->index;
}

int sim_add_node(sim_t *s, double at, char *err)
{
    return new_node(s, at, -1, err);
}

int sim_add_restart(sim_t *s, double at, int restart_of, int found, char *err)
{
    int k = new_node(s, at, restart_of, err);
    if (k >= 0) s->nodes[k]->found = found != 0;
    return k;
}

void sim_hold_faults(sim_t *s, double until)
{
    s->hold_until = until;
}

static int fail(sim_t *s, int rc, const char *err)
{
    if (!s->failed) {
        s->failed = 1;
        snprintf(s->fail_err, sizeof s->fail_err, "%s", err);
    }
    return rc;
}

/* A random live node that knows the run (can WELCOME), other than `not`; -1 if none. */
static int knows_run(const node_t *n)
{
    return n->state == NODE_UP && dispatch_run_text(n->core) && dispatch_swarm(n->core);
}

static int pick_welcomer(sim_t *s, int not)
{
    int c = 0;
    for (int i = 0; i < s->nnodes; i++) c += i != not && knows_run(s->nodes[i]);
    if (!c) return -1;
    int k = (int)rng_below(&s->rng, (uint64_t)c);
    for (int i = 0; i < s->nnodes; i++)
        if (i != not && knows_run(s->nodes[i]) && k-- == 0) return i;
    return -1;
}

static void on_start(sim_t *s, node_t *n)
{
    char err[STATUS_ERR_LEN] = "", join[32];
    const char *jp = NULL;
    if (n->state != NODE_PENDING) return;
    if (s->founded && !n->found) {
        int k = pick_welcomer(s, n->index);
        if (k < 0) { /* nobody to join through yet: wait */
            push(s, s->now + 0.1, EV_START, n->index, 0, 0, NULL);
            return;
        }
        snprintf(join, sizeof join, "sim://%d", k);
        jp = join;
    }
    s->founded = 1;
    msg_member_t self;
    memset(&self, 0, sizeof self);
    memcpy(self.id, n->id, MSG_ID_LEN);
    snprintf(self.addr, sizeof self.addr, "%s", n->addr);
    self.state = MEMBER_JOINING;
    self.loss = NAN;
    /* its first heartbeat from the wall clock, as swarm/net.c gives a real peer's: a
     * restarted peer's entries win over its previous life's (virtual seconds from an
     * epoch, in milliseconds) */
    dispatch_config_t dc = {.self = self,
                            .heartbeat = (uint64_t)((SIM_WALL_EPOCH_S + s->now) * 1000.0),
                            .sk = n->sk,
                            .timeout_s = s->cfg.timeout_s,
                            .forget_s = s->cfg.forget_s,
                            .gossip_fanout = s->cfg.gossip_fanout,
                            .swim_every = s->cfg.swim_every,
                            .swim_k = s->cfg.swim_k,
                            .swim_fanout = s->cfg.swim_fanout,
                            .tick_s = s->cfg.heartbeat_s};
    dispatch_io_t io = {.ctx = n,
                        .send = io_send,
                        .probe = io_probe,
                        .reply = io_reply,
                        .deliver = io_deliver,
                        .view = io_view,
                        .up = io_up,
                        .down = io_down,
                        .refused = io_refused,
                        .reconnect = io_reconnect};
    n->core = dispatch_new(&dc, &io, s->now, err);
    if (!n->core) {
        fail(s, STATUS_ENOMEM, err);
        return;
    }
    n->state = NODE_UP;
    n->started_at = s->now;
    if (s->now > 0) s->last_fault = s->now;
    char hex[9];
    sim_note(s, "start %d id %s%s%s%s slow %.2f", n->index, msg_id_short(n->id, hex),
             jp ? " join " : " founder", jp ? jp : "", n->restart_of >= 0 ? " (restart)" : "",
             n->slow);
    push(s, s->now + s->cfg.heartbeat_s * rng_uniform(&s->rng), EV_TICK, n->index, 0, 0, NULL);
    int rc = s->app.start ? s->app.start(s->app.ctx, n->index, &n->tp, n->id, jp, n->restart_of,
                                         s->now, err)
                          : 0;
    if (rc < 0) {
        fail(s, rc, err);
        return;
    }
    schedule_app(s, n, s->now);
}

/* Takes a node down: crashed (its recent messages may be lost) or stopped with LEAVE. */
static void node_down(sim_t *s, node_t *n, int crashed, int tell_app, int may_restart)
{
    if (n->state != NODE_UP) return;
    s->last_fault = s->now;
    if (tell_app && s->app.crash) s->app.crash(s->app.ctx, n->index, s->now);
    if (crashed) {
        n->cut_at = s->now - uni(s, 0, s->cfg.crash_window_s);
        sim_note(s, "crash %d (messages after %.6f lost)", n->index, n->cut_at);
    } else {
        sim_note(s, "stop  %d (LEAVE)", n->index);
        dispatch_leave(n->core, n->finished ? MSG_LEAVE_RUN_OVER : 0,
                       n->finished ? "the run is over" : "leaving", node_us(s));
        n->cut_at = INFINITY;
    }
    n->state = crashed ? NODE_CRASHED : NODE_STOPPED;
    inbox_clear(n);
    n->wire = *dispatch_wire(n->core);
    n->up_s = s->now - n->started_at;
    dispatch_destroy(&n->core);
    if (crashed && may_restart && s->cfg.restart_p > 0 && rng_uniform(&s->rng) < s->cfg.restart_p)
        push(s, s->now + uni(s, s->cfg.restart_min_s, s->cfg.restart_max_s), EV_RESTART, n->index,
             0, 0, NULL);
}

void sim_crash(sim_t *s, int node)
{
    if (node >= 0 && node < s->nnodes) node_down(s, s->nodes[node], 1, 1, 1);
}

void sim_kill(sim_t *s, int node)
{
    if (node >= 0 && node < s->nnodes) node_down(s, s->nodes[node], 1, 1, 0);
}

void sim_stop(sim_t *s, int node)
{
    if (node >= 0 && node < s->nnodes) node_down(s, s->nodes[node], 0, 1, 1);
}

static void cut_links(sim_t *s)
{
    for (int i = 0; i < s->nnodes; i++)
        for (int j = 0; j < s->nnodes; j++)
            if (s->nodes[i]->side != s->nodes[j]->side) link_of(s, i, j)->epoch++;
}

void sim_partition(sim_t *s, const uint8_t *side, int n, double duration)
{
    if (s->partitioned) return;
    for (int i = 0; i < s->nnodes; i++) s->nodes[i]->side = i < n ? side[i] & 1 : 0;
    s->partitioned = 1;
    s->last_fault = s->now;
    char sides[128];
    int w = 0;
    for (int i = 0; i < s->nnodes && w < (int)sizeof sides - 2; i++)
        if (s->nodes[i]->state == NODE_UP) sides[w++] = (char)('0' + s->nodes[i]->side);
    sides[w] = 0;
    sim_note(s, "cut   partition for %.3f s, sides of live nodes %s", duration, sides);
    cut_links(s);
    push(s, s->now + duration, EV_HEAL, -1, 0, 0, NULL);
}

/* ---- events --------------------------------------------------------------------------------- */

static void push_view(sim_t *s, node_t *n)
{
    if (!s->app.no_views) inbox_add(s, n, ITEM_VIEW, NULL, NULL);
}

static void on_tick(sim_t *s, node_t *n)
{
    if (n->state != NODE_UP) return;
    if (s->now < n->paused_until) { /* frozen: the tick comes when it wakes, late */
        push(s, n->paused_until, EV_TICK, n->index, 0, 0, NULL);
        return;
    }
    dispatch_tick(n->core, s->now, rng_next(&s->rng));
    push_view(s, n);
    push(s, s->now + s->cfg.heartbeat_s, EV_TICK, n->index, 0, 0, NULL);
}

/* Node n's network side takes a message's bytes: the dispatch core checks and decodes
 * them as a real peer's network thread does, answers membership itself and puts data
 * messages into the program's inbox. A corrupted message must be refused here or by the
 * program (on_app). The message is consumed. */
static void on_deliver(sim_t *s, smsg_t *m)
{
    char b[96], err[STATUS_ERR_LEN];
    node_t *n = s->nodes[m->dst], *src = s->nodes[m->src];
    const char *lost = NULL;
    if (n->state != NODE_UP)
        lost = n->state == NODE_PENDING ? "not started" : "receiver down";
    else if (link_of(s, m->src, m->dst)->epoch != m->epoch)
        lost = "connection reset";
    else if (src->state == NODE_CRASHED && m->sent_at > src->cut_at)
        lost = "sender crashed before it left";
    if (lost) {
        sim_note(s, "lost  %d->%d %s: %s", m->src, m->dst, msg_brief(&m->hdr, b, sizeof b), lost);
        smsg_free(m);
        return;
    }
    if (s->now < n->paused_until) { /* frozen: it waits in the socket buffer, in order */
        if (push(s, n->paused_until, EV_DELIVER, m->dst, 0, 0, m)) smsg_free(m);
        return;
    }
    if (m->hdr.type != MSG_GOSSIP && m->hdr.type != MSG_PROBE)
        sim_note(s, "recv  %d->%d %s", m->src, m->dst, msg_brief(&m->hdr, b, sizeof b));
    const void *data[SMSG_FRAMES];
    for (int i = 0; i < m->nframes; i++) data[i] = m->frame[i];
    n->delivering = m->corrupt[0] ? m->corrupt : NULL;
    int nin = 0; /* a corrupted message: the inbox's length, to see whether it was queued */
    for (const item_t *it = n->delivering ? n->in_head : NULL; it; it = it->next) nin++;
    int rc = dispatch_on_frames(n->core, src->id, MSG_ID_LEN, 0, NULL, m->nframes, data, m->len,
                                s->now, err);
    n->delivering = NULL;
    if (m->corrupt[0]) {
        s->corrupted++;
        int queued = 0;
        for (const item_t *it = n->in_head; it; it = it->next) queued++;
        if (rc)
            s->corrupt_refused++;
        else if (queued <= nin) { /* taken by the membership layer: it must have refused it */
            snprintf(err, sizeof err, "node %d took a corrupted %s (%s)", n->index,
                     msg_brief(&m->hdr, b, sizeof b), m->corrupt);
            fail(s, STATUS_EINVAL, err);
        }
    }
    smsg_free(m);
}

/* Delivers the node's inbox to its program, then lets it do one unit of work. */
static int on_app(sim_t *s, node_t *n, char *err)
{
    int rc = 0;
    n->app_scheduled = 0;
    n->in_app = 1;
    while (n->in_head && n->state == NODE_UP) {
        item_t *it = n->in_head;
        n->in_head = it->next;
        if (!n->in_head) n->in_tail = NULL;
        net_ev_t ev;
        memset(&ev, 0, sizeof ev);
        msg_member_t *view = NULL;
        int64_t *heard = NULL;
        if (it->kind == ITEM_MSG) {
            ev.type = NET_EV_MSG;
            ev.msg = it->m->hdr;
            ev.nframes = it->m->nframes;
            for (int i = 0; i < it->m->nframes; i++)
                ev.frame[i] = it->m->frame[i], ev.frame_len[i] = it->m->len[i];
        } else if (it->kind == ITEM_VIEW) {
            n->view_pending = 0;
            view = malloc((size_t)members_count(dispatch_members(n->core)) * sizeof *view);
            heard = malloc((size_t)members_count(dispatch_members(n->core)) * 2 * sizeof *heard);
            if (!view || !heard) {
                rc = status_set(err, STATUS_ENOMEM, "sim: out of memory");
            } else {
                ev.type = NET_EV_VIEW;
                ev.members = view;
                ev.nmembers = members_view(dispatch_members(n->core), view);
                members_view_heard(dispatch_members(n->core), heard);
                ev.heard = heard;
                ev.rejected = dispatch_rejected(n->core);
                ev.wire = *dispatch_wire(n->core);
                ev.pauses = dispatch_pauses(n->core, NULL);
                ev.last_pause_s = dispatch_last_pause(n->core);
                ev.vouched = dispatch_vouched(n->core);
            }
        } else {
            ev.type = NET_EV_UNDELIV;
            ev.msg = it->m->hdr;
            memcpy(ev.dest, it->dest, MSG_ID_LEN);
        }
        uint64_t refused = s->app.rejected ? s->app.rejected(s->app.ctx, n->index) : 0;
        if (!rc && s->app.event) rc = s->app.event(s->app.ctx, n->index, &ev, s->now, err);
        if (!rc && it->kind == ITEM_MSG && it->m->corrupt[0] && n->state == NODE_UP) {
            /* a corrupted message the core passed on: the program must refuse it */
            if (s->app.rejected && s->app.rejected(s->app.ctx, n->index) > refused) {
                s->corrupt_refused++;
            } else {
                char b[96];
                rc = status_set(err, STATUS_EINVAL, "node %d took a corrupted %s (%s)",
                                n->index, msg_brief(&it->m->hdr, b, sizeof b), it->m->corrupt);
            }
        }
        free(view);
        free(heard);
        smsg_free(it->m);
        free(it);
        if (rc) break;
        if (s->app.check && (rc = s->app.check(s->app.ctx, s->now, err))) break;
    }
    double wake = INFINITY, work = 0;
    if (!rc && n->state == NODE_UP && s->app.step) {
        rc = s->app.step(s->app.ctx, n->index, s->now, &wake, &work, err);
        if (work > 0) n->busy_until = s->now + work * n->slow;
    }
    n->in_app = 0;
    if (rc == 1 || rc == 2) { /* the program is done and gone: LEAVE (1: it finished) */
        n->finished = rc == 1;
        node_down(s, n, 0, 0, 1);
        return 0;
    }
    if (rc || n->state != NODE_UP) return rc;
    double next = n->in_head ? s->now : wake;
    if (next <= s->now) next = s->now + (work > 0 ? 0 : 1e-6);
    if (next < INFINITY) schedule_app(s, n, next);
    return 0;
}

static int pick_victim(sim_t *s)
{
    int c = 0, *v = malloc((size_t)s->nnodes * sizeof *v);
    if (!v) return -1;
    for (int i = 0; i < s->nnodes; i++)
        if (s->nodes[i]->state == NODE_UP && (!s->app.may_fail || s->app.may_fail(s->app.ctx, i)))
            v[c++] = i;
    int r = c ? v[rng_below(&s->rng, (uint64_t)c)] : -1;
    free(v);
    return r;
}

/* dead_link_rate: the connection from one live node to another dies silently. */
static void kill_link(sim_t *s)
{
    int a = pick_victim(s), up = 0;
    if (a < 0) return;
    for (int i = 0; i < s->nnodes; i++) up += i != a && s->nodes[i]->state == NODE_UP;
    if (!up) return;
    int k = (int)rng_below(&s->rng, (uint64_t)up), b = -1;
    for (int i = 0; i < s->nnodes && b < 0; i++)
        if (i != a && s->nodes[i]->state == NODE_UP && k-- == 0) b = i;
    link_of(s, a, b)->dead = 1;
    s->nodes[a]->link_died_at = s->now;
    sim_note(s, "deadlink %d->%d", a, b);
}

static void on_fault(sim_t *s)
{
    const sim_config_t *c = &s->cfg;
    double total = c->crash_rate + c->join_rate + c->leave_rate + c->partition_rate +
                   c->pause_rate + c->dead_link_rate;
    if (s->now > c->faults_until || total <= 0) return;
    if (s->now < s->hold_until) { /* held: this one does not happen */
        push(s, s->now - log(1 - rng_uniform(&s->rng)) / total, EV_FAULT, -1, 0, 0, NULL);
        return;
    }
    double r = rng_uniform(&s->rng) * total;
    char err[STATUS_ERR_LEN];
    if ((r -= c->crash_rate) < 0) {
        int v = pick_victim(s);
        if (v >= 0) node_down(s, s->nodes[v], 1, 1, 1);
    } else if ((r -= c->join_rate) < 0) {
        if (new_node(s, s->now, -1, err) >= 0) sim_note(s, "join  node %d", s->nnodes - 1);
    } else if ((r -= c->leave_rate) < 0) {
        int v = pick_victim(s);
        if (v >= 0) node_down(s, s->nodes[v], 0, 1, 1);
    } else if ((r -= c->partition_rate) < 0) {
        if (!s->partitioned) {
            uint8_t side[4096];
            int up = 0, ones = 0;
            for (int i = 0; i < s->nnodes; i++) {
                side[i] = (uint8_t)rng_below(&s->rng, 2);
                if (s->nodes[i]->state == NODE_UP) up++, ones += side[i];
            }
            if (up >= 2 && ones > 0 && ones < up)
                sim_partition(s, side, s->nnodes, uni(s, c->partition_min_s, c->partition_max_s));
        }
    } else if ((r -= c->pause_rate) < 0 || c->dead_link_rate <= 0) {
        int v = pick_victim(s);
        if (v >= 0 && s->now >= s->nodes[v]->paused_until) {
            node_t *n = s->nodes[v];
            n->paused_until = s->now + uni(s, c->pause_min_s, c->pause_max_s);
            s->last_fault = n->paused_until; /* progress is disturbed until it wakes */
            sim_note(s, "pause %d until %.3f", v, n->paused_until);
        }
    } else { /* drawn last: without dead links the draws are what they were */
        kill_link(s);
    }
    push(s, s->now - log(1 - rng_uniform(&s->rng)) / total, EV_FAULT, -1, 0, 0, NULL);
}

int sim_run(sim_t *s, double until, char *err)
{
    while (!s->failed) {
        if (s->app.done && s->app.done(s->app.ctx)) return 0;
        if (!s->nheap || s->heap[0].t > until) {
            if (until > s->now) s->now = until;
            return 1;
        }
        if (s->events >= s->cfg.max_events)
            return status_set(err, STATUS_ETIMEOUT, "sim: %llu events: livelock?",
                              (unsigned long long)s->events);
        ev_t e = pop(s);
        s->now = e.t;
        s->events++;
        int rc = 0;
        node_t *n = e.node >= 0 && e.node < s->nnodes ? s->nodes[e.node] : NULL;
        switch (e.kind) {
        case EV_START:
            on_start(s, n);
            break;
        case EV_DELIVER:
            on_deliver(s, e.m);
            break;
        case EV_TICK:
            on_tick(s, n);
            break;
        case EV_APP:
            if (n->state == NODE_UP && n->app_scheduled && e.gen == n->app_gen) {
                if (s->now < n->paused_until) { /* frozen: it runs when it wakes */
                    n->app_scheduled = 0;
                    schedule_app(s, n, n->paused_until);
                } else {
                    rc = on_app(s, n, err);
                }
            }
            break;
        case EV_FAULT:
            on_fault(s);
            break;
        case EV_HEAL:
            s->partitioned = 0;
            s->last_fault = s->now;
            sim_note(s, "heal");
            break;
        case EV_RESET:
            link_of(s, e.node, e.a)->epoch++;
            s->last_fault = s->now;
            sim_note(s, "reset %d->%d", e.node, e.a);
            break;
        case EV_RESTART: {
            char e2[STATUS_ERR_LEN];
            int k = new_node(s, s->now, e.node, e2);
            if (k >= 0) sim_note(s, "restart of %d as %d", e.node, k);
            break;
        }
        default:
            break;
        }
        if (rc) {
            fail(s, rc, err);
            return rc;
        }
        if (s->failed) break;
        if (s->app.check && (rc = s->app.check(s->app.ctx, s->now, err))) {
            fail(s, rc, err);
            return rc;
        }
    }
    snprintf(err, STATUS_ERR_LEN, "%s", s->fail_err);
    return STATUS_EINVAL;
}

/* ---- queries ------------------------------------------------------------------------------ */

double sim_now(const sim_t *s)
{
    return s->now;
}

int sim_nodes(const sim_t *s)
{
    return s->nnodes;
}

int sim_node_alive(const sim_t *s, int node)
{
    return node >= 0 && node < s->nnodes && s->nodes[node]->state == NODE_UP;
}

const uint8_t *sim_node_id(const sim_t *s, int node)
{
    return node >= 0 && node < s->nnodes ? s->nodes[node]->id : NULL;
}

double sim_node_slow(const sim_t *s, int node)
{
    return node >= 0 && node < s->nnodes ? s->nodes[node]->slow : 1.0;
}

int sim_node_view(const sim_t *s, int node, msg_member_t *out, int max)
{
    if (!sim_node_alive(s, node)) return 0;
    members_t *t = dispatch_members(s->nodes[node]->core);
    int k = 0;
    for (int i = 0; i < members_count(t) && k < max; i++) {
        members_entry_t *e = members_at(t, i);
        if (e->alive) out[k++] = e->m;
    }
    return k;
}

void sim_node_wire(const sim_t *s, int node, wire_count_t *wire, double *up_s)
{
    memset(wire, 0, sizeof *wire);
    *up_s = 0;
    if (node < 0 || node >= s->nnodes) return;
    const node_t *n = s->nodes[node];
    if (n->state == NODE_UP) {
        *wire = *dispatch_wire(n->core);
        *up_s = s->now - n->started_at;
    } else if (n->state != NODE_PENDING) {
        *wire = n->wire;
        *up_s = n->up_s;
    }
}

uint64_t sim_corrupted(const sim_t *s, uint64_t *refused)
{
    if (refused) *refused = s->corrupt_refused;
    return s->corrupted;
}

double sim_last_fault(const sim_t *s)
{
    return s->last_fault;
}

double sim_node_paused_until(const sim_t *s, int node)
{
    return node >= 0 && node < s->nnodes ? s->nodes[node]->paused_until : 0;
}

double sim_node_link_died_at(const sim_t *s, int node)
{
    return node >= 0 && node < s->nnodes ? s->nodes[node]->link_died_at : 0;
}

int sim_partitioned(const sim_t *s)
{
    return s->partitioned;
}

uint64_t sim_events(const sim_t *s)
{
    return s->events;
}

uint64_t sim_trace_hash(const sim_t *s)
{
    return s->hash;
}
