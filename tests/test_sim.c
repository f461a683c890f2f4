/* test_sim.c — tests of swarm/sim (the simulated network) with a stand-in program in
 * place of a peer: it founds or joins (HELLO, retried until WELCOME), then pings a
 * random member of its view every 0.1 s. Checked: one seed gives one trace (and another
 * seed another), gossip converges, a crashed node is declared dead by every other within
 * the timeout (and not before), LEAVE is seen at once, partitions cut and heal, pools of
 * 70 nodes converge, and under the heavy fault level every schedule ends with every live
 * node seeing exactly the live nodes once faults stop.
 * Not for: real peers (swarmtrain sim, tools/cmd_sim.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/status.h"
#include "swarm/sim.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 128
#define SWARM 0x5157ULL

typedef struct {
    int up, welcomed;
    const transport_t *tp;
    char join[32];
    double next_ping, next_hello;
    int hellos;
    double alone_since; /* its view held only itself since then (0: not alone) */
    int nview;
    uint8_t view[MAXN][MSG_ID_LEN];
    uint64_t pings_in, undeliv;
} standin_t;

typedef struct {
    sim_t *sim;
    standin_t n[MAXN];
    uint64_t pings_in;
} world_t;

static int w_start(void *ctx, int node, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                   const char *join, int restart_of, double now, char *err)
{
    (void)id, (void)restart_of, (void)err;
    world_t *w = ctx;
    standin_t *p = &w->n[node];
    memset(p, 0, sizeof *p);
    p->up = 1;
    p->tp = tp;
    p->next_ping = now + 0.1;
    if (!join) {
        tp->set_run(tp->ctx, SWARM, "stand-in run");
        p->welcomed = 1;
    } else {
        snprintf(p->join, sizeof p->join, "%s", join);
        p->next_hello = now;
    }
    return 0;
}

static int w_event(void *ctx, int node, const net_ev_t *ev, double now, char *err)
{
    (void)err;
    world_t *w = ctx;
    standin_t *p = &w->n[node];
    assert_true(p->up);
    if (ev->type == NET_EV_MSG && ev->msg.type == MSG_WELCOME) {
        assert_int_equal(ev->nframes, 2);
        assert_int_equal(ev->frame_len[0], strlen("stand-in run"));
        assert_memory_equal(ev->frame[0], "stand-in run", ev->frame_len[0]);
        if (!p->welcomed) p->tp->set_run(p->tp->ctx, ev->msg.swarm, "stand-in run");
        p->welcomed = 1;
    } else if (ev->type == NET_EV_MSG && ev->msg.type == MSG_PROGRESS) {
        assert_int_equal(ev->nframes, 1);
        assert_int_equal(ev->frame_len[0], 8);
        p->pings_in++;
        w->pings_in++;
    } else if (ev->type == NET_EV_VIEW) {
        assert_true(ev->nmembers >= 1 && ev->nmembers <= MAXN);
        p->nview = ev->nmembers;
        if (ev->nmembers > 1)
            p->alone_since = 0;
        else if (!p->alone_since)
            p->alone_since = now;
        for (int i = 0; i < ev->nmembers; i++) memcpy(p->view[i], ev->members[i].id, MSG_ID_LEN);
    } else if (ev->type == NET_EV_UNDELIV) {
        p->undeliv++;
    }
    return 0;
}

static int w_step(void *ctx, int node, double now, double *wake_at, double *work_s, char *err)
{
    world_t *w = ctx;
    standin_t *p = &w->n[node];
    *work_s = 0;
    if (!p->welcomed) {
        if (now >= p->next_hello) {
            if (p->hellos++ == 5) return 1; /* its bootstrap node is gone: give up, exit */
            int rc = p->tp->hello(p->tp->ctx, p->join, -1, err);
            if (rc) return rc;
            p->next_hello = now + 1.0; /* HELLO or WELCOME may be lost: ask again */
        }
        *wake_at = p->next_hello;
        return 0;
    }
    /* Alone for 10 s: everyone it knew is dead (its bootstrap died before the first
     * gossip reached it). A real peer would have to start over through another
     * endpoint; the stand-in exits. */
    if (p->alone_since && now - p->alone_since > 10.0) return 1;
    if (now >= p->next_ping && p->nview > 1) {
        msg_t m;
        memset(&m, 0, sizeof m);
        m.type = MSG_PROGRESS;
        uint64_t x = (uint64_t)(now * 1e6);
        const void *f[1] = {&x};
        size_t l[1] = {8};
        /* a member other than self, chosen without a random source of our own */
        int k = 1 + (int)(x % (uint64_t)(p->nview - 1));
        int rc = p->tp->send(p->tp->ctx, p->view[k], &m, 1, f, l, err);
        if (rc) return rc;
        *work_s = 0.001;
        p->next_ping = now + 0.1;
    } else if (now >= p->next_ping) {
        p->next_ping = now + 0.1; /* alone: nobody to ping yet */
    }
    *wake_at = p->next_ping;
    return 0;
}

static void w_crash(void *ctx, int node, double now)
{
    (void)now;
    world_t *w = ctx;
    w->n[node].up = 0;
}

static sim_t *world_until(world_t *w, const char *faults, uint64_t seed, int max_nodes,
                          double faults_until)
{
    memset(w, 0, sizeof *w);
    sim_config_t c = sim_config_defaults();
    c.seed = seed;
    c.max_nodes = max_nodes;
    c.faults_until = faults_until;
    /* Faults from 2 s: a swarm whose every bootstrap dies before anyone gossiped splits
     * into groups that never heard of each other (no seed list); not what this tests. */
    c.faults_from = isinf(faults_until) ? 0 : 2.0;
    c.trace = getenv("SIM_TRACE") ? stderr : NULL; /* every event, for a replay */
    char err[STATUS_ERR_LEN];
    assert_int_equal(sim_config_faults(&c, faults, err), 0);
    sim_app_t app = {.ctx = w, .start = w_start, .event = w_event, .step = w_step, .crash = w_crash};
    w->sim = sim_new(&c, &app, err);
    assert_non_null(w->sim);
    return w->sim;
}

static sim_t *world(world_t *w, const char *faults, uint64_t seed, int max_nodes, FILE *trace)
{
    (void)trace;
    return world_until(w, faults, seed, max_nodes, INFINITY);
}

static void add_nodes(sim_t *s, int n)
{
    char err[STATUS_ERR_LEN];
    for (int i = 0; i < n; i++) assert_true(sim_add_node(s, 0.01 * i, err) >= 0);
}

/* Every live node sees exactly the live nodes (its own table, not its program's view). */
static int converged(world_t *w)
{
    sim_t *s = w->sim;
    int live = 0;
    for (int i = 0; i < sim_nodes(s); i++) live += sim_node_alive(s, i);
    msg_member_t *v = malloc(MAXN * sizeof *v);
    int ok = 1;
    for (int i = 0; ok && i < sim_nodes(s); i++) {
        if (!sim_node_alive(s, i)) continue;
        int k = sim_node_view(s, i, v, MAXN);
        if (k != live) ok = 0;
        for (int j = 0; ok && j < k; j++) {
            int found = 0;
            for (int q = 0; q < sim_nodes(s); q++)
                if (sim_node_alive(s, q) && !memcmp(sim_node_id(s, q), v[j].id, MSG_ID_LEN))
                    found = 1;
            ok = found;
        }
    }
    free(v);
    return ok;
}

static uint64_t run_hash(const char *faults, uint64_t seed, double until)
{
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, faults, seed, 64, NULL);
    char err[STATUS_ERR_LEN];
    add_nodes(s, 6);
    assert_int_equal(sim_run(s, until, err), 1);
    uint64_t h = sim_trace_hash(s) ^ sim_events(s);
    sim_destroy(&s);
    free(w);
    return h;
}

static void test_determinism(void **state)
{
    (void)state;
    uint64_t a = run_hash("heavy", 7, 40), b = run_hash("heavy", 7, 40);
    assert_true(a == b);
    assert_true(run_hash("heavy", 8, 40) != a);
    assert_true(run_hash("none", 7, 10) == run_hash("none", 7, 10));
    assert_true(run_hash("none", 7, 10) != run_hash("none", 9, 10));
}

static void test_gossip_converges(void **state)
{
    (void)state;
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, "none", 3, 64, NULL);
    char err[STATUS_ERR_LEN];
    add_nodes(s, 10);
    assert_int_equal(sim_run(s, 3.0, err), 1);
    assert_true(converged(w));
    for (int i = 0; i < 10; i++) assert_int_equal(w->n[i].nview, 10); /* the program's view */
    assert_int_equal(sim_run(s, 10.0, err), 1);
    assert_true(w->pings_in > 500);
    for (int i = 0; i < 10; i++) assert_int_equal(w->n[i].undeliv, 0);
    sim_destroy(&s);
    free(w);
}

static void test_crash_detected(void **state)
{
    (void)state;
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, "none", 4, 64, NULL);
    char err[STATUS_ERR_LEN];
    msg_member_t v[MAXN];
    add_nodes(s, 6);
    assert_int_equal(sim_run(s, 5.0, err), 1);
    assert_true(converged(w));
    sim_crash(s, 3);
    assert_false(w->n[3].up);
    assert_false(sim_node_alive(s, 3));
    assert_int_equal(sim_run(s, 5.0 + 3.0 - 0.3, err), 1); /* not dead anywhere yet */
    for (int i = 0; i < 6; i++)
        if (i != 3) assert_int_equal(sim_node_view(s, i, v, MAXN), 6);
    assert_int_equal(sim_run(s, 5.0 + 3.0 + 0.3, err), 1); /* timeout + one tick: dead everywhere */
    assert_true(converged(w));
    for (int i = 0; i < 6; i++)
        if (i != 3) assert_int_equal(sim_node_view(s, i, v, MAXN), 5);
    /* sends to it now come back undelivered once the program's view has caught up */
    assert_int_equal(sim_run(s, 12.0, err), 1);
    for (int i = 0; i < 6; i++)
        if (i != 3) assert_int_equal(w->n[i].nview, 5);
    sim_destroy(&s);
    free(w);
}

static void test_leave_seen_at_once(void **state)
{
    (void)state;
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, "none", 5, 64, NULL);
    char err[STATUS_ERR_LEN];
    msg_member_t v[MAXN];
    add_nodes(s, 5);
    assert_int_equal(sim_run(s, 4.0, err), 1);
    sim_stop(s, 2);
    assert_int_equal(sim_run(s, 4.1, err), 1); /* delays are at most 5 ms */
    for (int i = 0; i < 5; i++)
        if (i != 2) assert_int_equal(sim_node_view(s, i, v, MAXN), 4);
    sim_destroy(&s);
    free(w);
}

static void test_partition_heals(void **state)
{
    (void)state;
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, "none", 6, 64, NULL);
    char err[STATUS_ERR_LEN];
    msg_member_t v[MAXN];
    add_nodes(s, 8);
    assert_int_equal(sim_run(s, 3.0, err), 1);
    assert_true(converged(w));
    uint8_t side[8] = {0, 1, 0, 1, 1, 0, 0, 1};
    sim_partition(s, side, 8, 10.0);
    assert_true(sim_partitioned(s));
    assert_int_equal(sim_run(s, 9.0, err), 1);
    for (int i = 0; i < 8; i++) assert_int_equal(sim_node_view(s, i, v, MAXN), 4);
    assert_int_equal(sim_run(s, 13.5, err), 1);
    assert_false(sim_partitioned(s));
    assert_true(sim_last_fault(s) == 13.0);
    assert_int_equal(sim_run(s, 16.0, err), 1);
    assert_true(converged(w));
    sim_destroy(&s);
    free(w);
}

static void test_seventy_nodes(void **state)
{
    (void)state;
    world_t *w = malloc(sizeof *w);
    sim_t *s = world(w, "none", 11, 80, NULL);
    char err[STATUS_ERR_LEN];
    add_nodes(s, 70);
    assert_int_equal(sim_run(s, 4.0, err), 1);
    assert_true(converged(w));
    for (int i = 0; i < 70; i++) assert_int_equal(w->n[i].nview, 70);
    sim_destroy(&s);
    free(w);
}

/* Heavy faults for 30 s, then 15 s of calm: membership must agree with reality. */
static void test_heavy_membership_settles(void **state)
{
    (void)state;
    int seeds = getenv("SIM_SEEDS") ? atoi(getenv("SIM_SEEDS")) : 60;
    world_t *w = malloc(sizeof *w);
    int crashes = 0, restarts = 0;
    int first = getenv("SIM_FIRST") ? atoi(getenv("SIM_FIRST")) : 1;
    for (int seed = first; seed <= seeds; seed++) {
        sim_t *s = world_until(w, "heavy", (uint64_t)seed, 64, 30.0);
        char err[STATUS_ERR_LEN];
        add_nodes(s, 6);
        int rc = sim_run(s, 30.0 + 15.0 + 0.01, err); /* the longest partition */
        if (rc != 1) fprintf(stderr, "seed %d: %s\n", seed, err);
        assert_int_equal(rc, 1);
        assert_false(sim_partitioned(s));
        double calm = sim_last_fault(s);
        assert_int_equal(sim_run(s, calm + 3.0 + 4.0 + 1.0, err), 1);
        if (!converged(w)) {
            fprintf(stderr, "seed %d: membership did not settle\n", seed);
            msg_member_t v[MAXN];
            for (int i = 0; i < sim_nodes(s); i++)
                if (sim_node_alive(s, i)) {
                    int k = sim_node_view(s, i, v, MAXN);
                    fprintf(stderr, "  node %d sees", i);
                    for (int j = 0; j < k; j++) fprintf(stderr, " %s", v[j].addr);
                    fprintf(stderr, "\n");
                }
            sim_dump_trace(s, stderr, 60);
            fail();
        }
        for (int i = 0; i < sim_nodes(s); i++) crashes += !sim_node_alive(s, i);
        restarts += sim_nodes(s) - 6;
        sim_destroy(&s);
    }
    if (first == 1) {
        assert_true(crashes > seeds); /* the faults did happen */
        assert_true(restarts > seeds / 2);
    }
    free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_determinism),        cmocka_unit_test(test_gossip_converges),
        cmocka_unit_test(test_crash_detected),     cmocka_unit_test(test_leave_seen_at_once),
        cmocka_unit_test(test_partition_heals),    cmocka_unit_test(test_seventy_nodes),
        cmocka_unit_test(test_heavy_membership_settles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
