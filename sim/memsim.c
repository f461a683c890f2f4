/* memsim.c — membership alone on the simulated network (memsim.h): nodes that only join
 * and serve a stage, a driver that kills some from outside, and the counts of bytes,
 * detection times and false deaths. */
#include "sim/memsim.h"
#include "common/rng.h"
#include "common/status.h"
#include "swarm/sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MEMSIM_SWARM 0x6d656d73696d0001ULL
#define MEMSIM_RUN "membership only"
#define PARTITION_GRACE_S 10.0 /* verdicts this soon after a partition are not false */
#define SLICE_S 0.25           /* the driver looks at the swarm this often */

typedef struct {
    int up, welcomed, hellos, stage;
    double next_hello;
    char join[32];
    const transport_t *tp;
    int known;                    /* live members its table holds, self excluded */
    uint8_t holds[MEMSIM_CRASH_MAX]; /* it holds killed node c alive */
} mnode_t;

typedef struct {
    const memsim_options_t *o;
    sim_t *sim;
    mnode_t *n;
    int max;
    /* the nodes to kill: index, moment, when killed (-1: not yet), detected when */
    int victim[MEMSIM_CRASH_MAX], nvictims;
    double kill_at[MEMSIM_CRASH_MAX], killed_at[MEMSIM_CRASH_MAX], found_at[MEMSIM_CRASH_MAX];
    int holders[MEMSIM_CRASH_MAX];
    double last_partition; /* the last moment a partition was seen under way */
    /* seconds the swarm spent cut in two so far, and that count at each kill: a node on
     * the far side of a cut cannot hear of a crash before the heal */
    double cut_total, cut_at_kill[MEMSIM_CRASH_MAX], cut_s[MEMSIM_CRASH_MAX];
    int false_deaths, deaths;
    char first_false[160];
} world_t;

memsim_options_t memsim_defaults(void)
{
    memsim_options_t o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.nodes = 100;
    o.stages = 5;
    o.faults = "none";
    o.crashes = 3;
    return o;
}

/* Which killed node has this id (a slot), or -1. */
static int victim_slot(world_t *w, const uint8_t id[MSG_ID_LEN])
{
    for (int c = 0; c < w->nvictims; c++)
        if (!memcmp(sim_node_id(w->sim, w->victim[c]), id, MSG_ID_LEN)) return c;
    return -1;
}

static void found(world_t *w, int c, double now)
{
    if (w->killed_at[c] >= 0 && w->holders[c] == 0 && w->found_at[c] < 0) {
        w->found_at[c] = now;
        w->cut_s[c] = w->cut_total - w->cut_at_kill[c];
    }
}

static void serve(mnode_t *p, const uint8_t id[MSG_ID_LEN]);

static int m_start(void *ctx, int node, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                   const char *join, int restart_of, double now, char *err)
{
    (void)restart_of;
    world_t *w = ctx;
    if (node >= w->max) return status_set(err, STATUS_EFULL, "memsim: node %d", node);
    mnode_t *p = &w->n[node];
    memset(p, 0, sizeof *p);
    p->up = 1;
    p->tp = tp;
    p->stage = node % w->o->stages;
    if (!join) {
        tp->set_run(tp->ctx, MEMSIM_SWARM, MEMSIM_RUN);
        p->welcomed = 1;
        serve(p, id);
    } else {
        snprintf(p->join, sizeof p->join, "%s", join);
        p->next_hello = now;
    }
    return 0;
}

/* Serving its stage, as a peer's entry says once it holds its state. */
static void serve(mnode_t *p, const uint8_t id[MSG_ID_LEN])
{
    msg_member_t self;
    memset(&self, 0, sizeof self);
    memcpy(self.id, id, MSG_ID_LEN);
    self.stage = (int16_t)p->stage;
    self.state = MEMBER_SERVING;
    self.loss = NAN;
    p->tp->set_self(p->tp->ctx, &self);
}

static int m_event(void *ctx, int node, const net_ev_t *ev, double now, char *err)
{
    (void)now, (void)err;
    world_t *w = ctx;
    mnode_t *p = &w->n[node];
    if (ev->type == NET_EV_MSG && ev->msg.type == MSG_WELCOME && !p->welcomed) {
        p->tp->set_run(p->tp->ctx, ev->msg.swarm, MEMSIM_RUN);
        p->welcomed = 1;
        serve(p, sim_node_id(w->sim, node));
    }
    return 0;
}

static int m_step(void *ctx, int node, double now, double *wake_at, double *work_s, char *err)
{
    world_t *w = ctx;
    mnode_t *p = &w->n[node];
    *work_s = 0;
    if (p->welcomed) {
        *wake_at = INFINITY;
        return 0;
    }
    if (now >= p->next_hello) {
        if (p->hellos++ == 40) return 2; /* its bootstrap node is gone: it gives up */
        int rc = p->tp->hello(p->tp->ctx, p->join, p->stage, err);
        if (rc) return rc;
        p->next_hello = now + 3.0; /* HELLO or WELCOME may be lost: again */
    }
    *wake_at = p->next_hello;
    return 0;
}

static void gone(world_t *w, int node, double now)
{
    mnode_t *p = &w->n[node];
    p->up = 0;
    for (int c = 0; c < w->nvictims; c++)
        if (p->holds[c]) {
            p->holds[c] = 0;
            w->holders[c]--;
            found(w, c, now);
        }
}

static void m_crash(void *ctx, int node, double now)
{
    gone(ctx, node, now);
}

static void m_up(void *ctx, int node, const uint8_t id[MSG_ID_LEN], double now)
{
    (void)now;
    world_t *w = ctx;
    mnode_t *p = &w->n[node];
    p->known++;
    int c = victim_slot(w, id);
    if (c >= 0 && !p->holds[c]) {
        p->holds[c] = 1;
        w->holders[c]++;
        if (w->killed_at[c] >= 0) w->found_at[c] = -1; /* taken in again, from a stale table */
    }
}

static void m_down(void *ctx, int node, const uint8_t id[MSG_ID_LEN], const char *why,
                   double now)
{
    world_t *w = ctx;
    mnode_t *p = &w->n[node];
    p->known--;
    int c = victim_slot(w, id);
    if (c >= 0 && p->holds[c]) {
        p->holds[c] = 0;
        w->holders[c]--;
        found(w, c, now);
    }
    if (!strcmp(why, "it left") || !w->n[node].up) return;
    w->deaths++;
    /* the member it declared dead: is it up? */
    for (int j = 0; j < sim_nodes(w->sim); j++) {
        if (memcmp(sim_node_id(w->sim, j), id, MSG_ID_LEN)) continue;
        int paused = sim_node_paused_until(w->sim, j) > 0 || sim_node_paused_until(w->sim, node) > 0;
        int cut = sim_partitioned(w->sim) ||
                  (w->last_partition > 0 && now - w->last_partition < PARTITION_GRACE_S);
        if (sim_node_alive(w->sim, j) && !paused && !cut) {
            if (!w->false_deaths++)
                snprintf(w->first_false, sizeof w->first_false,
                         "node %d declared live node %d dead at %.3f s (%s)", node, j, now, why);
        }
        break;
    }
}

/* Whether every live node's table holds every other live node. */
static int formed(world_t *w)
{
    int live = 0;
    for (int i = 0; i < sim_nodes(w->sim); i++) live += sim_node_alive(w->sim, i) && w->n[i].up;
    for (int i = 0; i < sim_nodes(w->sim); i++)
        if (sim_node_alive(w->sim, i) && w->n[i].up && (!w->n[i].welcomed || w->n[i].known < live - 1))
            return 0;
    return live > 0;
}

/* Runs to `until` in slices, noting partitions. 0, or the simulator's status. */
static int run_to(world_t *w, double until, char *err)
{
    while (sim_now(w->sim) < until) {
        double from = sim_now(w->sim), t = from + SLICE_S;
        int rc = sim_run(w->sim, t < until ? t : until, err);
        if (rc < 0) return rc;
        if (sim_partitioned(w->sim)) {
            w->last_partition = sim_now(w->sim);
            w->cut_total += sim_now(w->sim) - from; /* to a slice: the driver's grain */
        }
    }
    return 0;
}

int memsim_one(const memsim_options_t *o, memsim_result_t *r, char *err)
{
    memset(r, 0, sizeof *r);
    r->formed_at = -1;
    if (o->nodes < 1 || o->nodes > 4000 || o->stages < 1 || o->crashes < 0 ||
        o->crashes > MEMSIM_CRASH_MAX || o->crashes >= o->nodes)
        return status_set(err, STATUS_EINVAL, "memsim: bad options (nodes %d, stages %d, crashes %d)",
                          o->nodes, o->stages, o->crashes);
    sim_config_t c = sim_config_defaults();
    int rc = sim_config_faults(&c, o->faults, err);
    if (rc) return rc;
    if (o->knobs && *o->knobs) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", o->knobs);
        for (char *save = NULL, *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq) return status_set(err, STATUS_EINVAL, "memsim: knob '%s' is not key=value", kv);
            *eq = 0;
            if ((rc = sim_config_set(&c, kv, eq + 1, err))) return rc;
        }
    }
    double join_s = o->join_s > 0 ? o->join_s : o->nodes / 50.0;
    double run_s = o->run_s > 0 ? o->run_s : 40.0;
    double form_s = o->form_s > 0 ? o->form_s : join_s + 120.0;
    c.seed = o->seed;
    c.trace = o->trace;
    c.faults_from = join_s; /* the swarm forms first, as a real one starts */
    c.max_nodes = o->nodes + 64;
    c.max_events = UINT64_MAX;
    world_t w;
    memset(&w, 0, sizeof w);
    w.o = o;
    w.max = c.max_nodes;
    w.n = calloc((size_t)w.max, sizeof *w.n);
    if (!w.n) return status_set(err, STATUS_ENOMEM, "memsim: out of memory");
    sim_app_t app = {.ctx = &w,
                     .start = m_start,
                     .event = m_event,
                     .step = m_step,
                     .crash = m_crash,
                     .member_up = m_up,
                     .member_down = m_down,
                     .no_views = 1};
    w.sim = sim_new(&c, &app, err);
    if (!w.sim) {
        free(w.n);
        return STATUS_EINVAL;
    }
    rng_t g;
    rng_seed(&g, rng_mix(o->seed, 0x6d656d));
    for (int i = 0; i < o->nodes && !rc; i++) {
        rc = sim_add_node(w.sim, i ? join_s * rng_uniform(&g) : 0, err);
        rc = rc < 0 ? rc : 0;
    }
    /* the victims: distinct nodes other than the founder, killed over run_s / 2 */
    w.nvictims = o->crashes;
    for (int v = 0; v < w.nvictims; v++) {
        int again;
        do {
            w.victim[v] = 1 + (int)rng_below(&g, (uint64_t)(o->nodes - 1));
            again = 0;
            for (int q = 0; q < v; q++) again |= w.victim[q] == w.victim[v];
        } while (again);
        w.kill_at[v] = rng_uniform(&g) * run_s / 2;
        w.killed_at[v] = w.found_at[v] = -1;
    }
    while (!rc && sim_now(w.sim) < form_s) {
        if ((rc = run_to(&w, sim_now(w.sim) + 1.0, err))) break;
        if (sim_now(w.sim) >= join_s && formed(&w)) {
            r->formed_at = sim_now(w.sim);
            break;
        }
    }
    wire_count_t *base = calloc((size_t)w.max, sizeof *base);
    double *base_up = calloc((size_t)w.max, sizeof *base_up);
    if (!base || !base_up) rc = status_set(err, STATUS_ENOMEM, "memsim: out of memory");
    if (!rc && r->formed_at < 0) {
        int live = 0, short_of = 0, fewest = -1, lacking = -1, lacked = -1;
        for (int i = 0; i < sim_nodes(w.sim); i++) live += sim_node_alive(w.sim, i) && w.n[i].up;
        for (int i = 0; i < sim_nodes(w.sim); i++) {
            if (!sim_node_alive(w.sim, i) || !w.n[i].up || w.n[i].known >= live - 1) continue;
            short_of++;
            if (fewest < 0 || w.n[i].known < fewest) fewest = w.n[i].known;
            if (lacking < 0) { /* the first such node: which live node it lacks */
                msg_member_t *v = malloc((size_t)w.max * sizeof *v);
                int k = v ? sim_node_view(w.sim, i, v, w.max) : 0;
                for (int j = 0; j < sim_nodes(w.sim) && lacked < 0; j++) {
                    int has = j == i || !sim_node_alive(w.sim, j);
                    for (int q = 0; q < k && !has; q++)
                        has = !memcmp(v[q].id, sim_node_id(w.sim, j), MSG_ID_LEN);
                    if (!has) lacked = j;
                }
                free(v);
                lacking = i;
            }
        }
        r->failed = 1;
        snprintf(r->why, sizeof r->why, "the swarm did not form within %.0f virtual s: %d of %d "
                 "live nodes hold fewer members than that (the fewest %d; node %d lacks node %d)", form_s,
                 short_of, live, fewest, lacking, lacked);
    }
    if (!rc && !r->failed) {
        int at0 = sim_nodes(w.sim);
        for (int i = 0; i < at0; i++)
            if (sim_node_alive(w.sim, i)) sim_node_wire(w.sim, i, &base[i], &base_up[i]);
        double t0 = r->formed_at;
        for (int done = 0; !rc && done < w.nvictims;) { /* the kills, in time order */
            int next = -1;
            for (int v = 0; v < w.nvictims; v++)
                if (w.killed_at[v] < 0 && (next < 0 || w.kill_at[v] < w.kill_at[next])) next = v;
            if ((rc = run_to(&w, t0 + w.kill_at[next], err))) break;
            if (sim_node_alive(w.sim, w.victim[next])) {
                sim_kill(w.sim, w.victim[next]);
                gone(&w, w.victim[next], sim_now(w.sim));
                w.killed_at[next] = sim_now(w.sim);
                w.cut_at_kill[next] = w.cut_total;
                r->crashes++;
                found(&w, next, sim_now(w.sim));
            } else {
                w.killed_at[next] = -2; /* a fault took it first: not ours to time */
            }
            done++;
        }
        if (!rc) rc = run_to(&w, t0 + run_s, err);
        if (!rc) {
            double span = sim_now(w.sim) - t0;
            for (int i = 0; i < at0; i++) {
                wire_count_t now_w;
                double up;
                if (!sim_node_alive(w.sim, i)) continue;
                sim_node_wire(w.sim, i, &now_w, &up);
                r->measured++;
                for (int k = 0; k < WIRE_KINDS; k++) {
                    double b = (double)(now_w.out[k] - base[i].out[k]) / span;
                    r->sent_mean[k] += b;
                    if (b > r->sent_max[k]) r->sent_max[k] = b;
                }
            }
            for (int k = 0; k < WIRE_KINDS && r->measured; k++) r->sent_mean[k] /= r->measured;
            for (int v = 0; v < w.nvictims; v++) {
                if (w.killed_at[v] < 0) {
                    r->detect_s[v] = -1;
                    continue;
                }
                r->detect_s[v] = w.found_at[v] >= 0 ? w.found_at[v] - w.killed_at[v] : -1;
                r->cut_s[v] = w.found_at[v] >= 0 ? w.cut_s[v] : 0;
                if (w.found_at[v] >= 0) r->detected++;
                else if (!r->failed) {
                    r->failed = 1;
                    snprintf(r->why, sizeof r->why, "node %d, killed at %.3f s, still held alive "
                             "by %d nodes at the end", w.victim[v], w.killed_at[v], w.holders[v]);
                }
            }
            r->false_deaths = w.false_deaths;
            snprintf(r->false_why, sizeof r->false_why, "%s", w.first_false);
            r->deaths_seen = w.deaths;
        }
    }
    r->virtual_s = sim_now(w.sim);
    r->events = sim_events(w.sim);
    r->nodes = sim_nodes(w.sim);
    free(base);
    free(base_up);
    sim_destroy(&w.sim);
    free(w.n);
    return rc;
}
