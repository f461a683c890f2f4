/* test_rebalance.c — unit tests of swarm/rebalance (the rebalancing decision as a pure
 * function of the member table): the bottleneck stage gets a peer from the stage with the
 * most to spare; nothing moves below the margin, while a member joins, follows or is
 * unmeasured, or when a stage is empty; a stage is never emptied; the choice is the same
 * in tables that differ by order or by a little gossip noise; and a run of decisions with
 * the moves applied settles at once and never moves back (no thrashing). And the wiring
 * share those throughputs give (swarm/wiring.c): equal peers split evenly even when one
 * was picked before anyone had measured itself, a 4x slower peer gets a fifth. And the
 * clock an emulated device (--slowdown) is timed on: a thread's CPU seconds, which a sleep
 * does not advance and work does.
 * Not for: executing moves (the simulator and the local-swarm tests). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/clock.h"
#include "swarm/rebalance.h"
#include "swarm/wiring.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static msg_member_t member(int tag, int stage, double tp)
{
    msg_member_t m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < MSG_ID_LEN; i++) m.id[i] = (uint8_t)(tag * 16 + i);
    m.stage = (int16_t)stage;
    m.state = MEMBER_SERVING;
    m.step = 10;
    m.serving_from = 0;
    m.throughput = (float)tp;
    m.loss = NAN;
    return m;
}

static int tag_of(const uint8_t *id)
{
    return id[0] / 16;
}

static void test_four_to_one_moves_one(void **state)
{
    (void)state;
    msg_member_t m[5] = {member(0, 0, 10), member(1, 0, 10), member(2, 0, 10), member(3, 0, 10),
                         member(4, 1, 10)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_MOVE);
    assert_int_equal(d.from, 0);
    assert_int_equal(d.to, 1);
    assert_int_equal(tag_of(d.who), 0); /* equal peers: the lowest id */
    assert_true(fabs(d.min_before - 10) < 1e-6);
    assert_true(fabs(d.min_after - 20) < 1e-6);
    assert_int_equal(d.bottleneck, 1);
    assert_non_null(strstr(d.why, "stage 1"));
    /* after the move: 3,2 -> 30/20; moving again gives 20/30: no gain, balanced */
    m[0].stage = 1;
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_BALANCED);
}

static void test_margin_is_hysteresis(void **state)
{
    (void)state;
    /* 3 peers of 10 in stage 0, one of 25 in stage 1: min 25; moving a 10 gives min(20, 35)
     * = 20, worse */
    msg_member_t m[4] = {member(0, 0, 10), member(1, 0, 10), member(2, 0, 10), member(3, 1, 25)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    assert_int_equal(rebalance_decide(m, 4, 2, &c, &d), REBALANCE_BALANCED);
    /* stage 1 at 22, stage 0 at 30 (three of 10): moving one gives min(20, 32) = 20: no */
    m[3].throughput = 22;
    assert_int_equal(rebalance_decide(m, 4, 2, &c, &d), REBALANCE_BALANCED);
    /* a gain below the margin: 2 x 12 vs 1 x 10 -> moving a 12 gives min(12, 22) = 12: +20%
     * exactly passes with 0.2, fails with 0.25 */
    msg_member_t k[3] = {member(0, 0, 12), member(1, 0, 12), member(2, 1, 10)};
    assert_int_equal(rebalance_decide(k, 3, 2, &c, &d), REBALANCE_MOVE);
    c.margin = 0.25;
    assert_int_equal(rebalance_decide(k, 3, 2, &c, &d), REBALANCE_BALANCED);
}

static void test_settling_and_empty(void **state)
{
    (void)state;
    msg_member_t m[5] = {member(0, 0, 10), member(1, 0, 10), member(2, 0, 10), member(3, 0, 10),
                         member(4, 1, 10)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    m[2].state = MEMBER_JOINING; /* a mover on its way: one at a time */
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_SETTLING);
    m[2].state = MEMBER_SERVING;
    m[4].serving_from = 100; /* follows its pool: arrived lately */
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_SETTLING);
    m[4].serving_from = 0;
    m[1].throughput = 0; /* not measured yet */
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_SETTLING);
    m[1].throughput = 10;
    m[4].stage = 0; /* stage 1 empty: recovery, not balance */
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_EMPTY);
    /* a peer outside the run's stages and a leaving one are not counted */
    m[4].stage = 1;
    msg_member_t x[6];
    memcpy(x, m, sizeof m);
    x[5] = member(5, 1, 100);
    x[5].state = MEMBER_LEAVING;
    assert_int_equal(rebalance_decide(x, 6, 2, &c, &d), REBALANCE_MOVE);
    assert_true(fabs(d.min_before - 10) < 1e-6);
    /* bad input */
    assert_int_equal(rebalance_decide(m, 5, 1, &c, &d), REBALANCE_NONE);
    assert_int_equal(rebalance_decide(NULL, 0, 2, &c, &d), REBALANCE_NONE);
    c.margin = NAN;
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_NONE);
}

static void test_never_empties_a_stage(void **state)
{
    (void)state;
    /* stage 1 has one very fast peer, stage 0 one slow one: moving either empties its stage */
    msg_member_t m[2] = {member(0, 0, 1), member(1, 1, 100)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    assert_int_equal(rebalance_decide(m, 2, 2, &c, &d), REBALANCE_BALANCED);
    /* three stages: 1 | 1 | 3 peers; only stage 2 may give */
    msg_member_t k[5] = {member(0, 0, 10), member(1, 1, 10), member(2, 2, 10), member(3, 2, 10),
                         member(4, 2, 10)};
    assert_int_equal(rebalance_decide(k, 5, 3, &c, &d), REBALANCE_BALANCED); /* min stays 10 */
    k[0].throughput = 30; /* stage 1 alone is slowest: one of stage 2 joins it */
    assert_int_equal(rebalance_decide(k, 5, 3, &c, &d), REBALANCE_MOVE);
    assert_int_equal(d.from, 2);
    assert_int_equal(d.to, 1);
}

static void test_heterogeneous_picks_best(void **state)
{
    (void)state;
    /* stage 0: a 40 and three 5s (55, mean 13.75); stage 1: one 10. The 40 counts as
     * 40 / 13.75 x 10 = 29.1 in stage 1: moving it gives min(15, 39.1) = 15; a 5 gives
     * min(50, 13.6) = 13.6: the 40 */
    msg_member_t m[5] = {member(3, 0, 40), member(1, 0, 5), member(2, 0, 5), member(4, 0, 5),
                         member(0, 1, 10)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    assert_int_equal(rebalance_decide(m, 5, 2, &c, &d), REBALANCE_MOVE);
    assert_int_equal(tag_of(d.who), 3);
    assert_true(fabs(d.min_after - 15) < 1e-4);
    /* stage 0: 30, 30, 2 (mean 20.67); stage 1: a 5. A 30 counts 7.26 in stage 1: min(32,
     * 12.26); the 2 only 0.48 (+10%: below the margin): the 30 with the lowest id */
    msg_member_t k[4] = {member(5, 0, 30), member(6, 0, 30), member(1, 0, 2), member(0, 1, 5)};
    assert_int_equal(rebalance_decide(k, 4, 2, &c, &d), REBALANCE_MOVE);
    assert_int_equal(tag_of(d.who), 5);
    assert_true(fabs(d.min_after - (5 + 30 / (62 / 3.0) * 5)) < 1e-3);
}

/* Stage costs differ (the LM head): equal peers do 10 samples/s on stage 0 and 5 on
 * stage 1. 4,1 -> moving one gives stage 1 two peers of 5: min(30, 10) = 10 (+100%);
 * then 3,2 -> 2,3 gives min(20, 15) = 15 (+50%) ; then no more. */
static void test_stage_costs(void **state)
{
    (void)state;
    msg_member_t m[5] = {member(0, 0, 10), member(1, 0, 10), member(2, 0, 10), member(3, 0, 10),
                         member(4, 1, 5)};
    rebalance_config_t c = rebalance_defaults();
    rebalance_decision_t d;
    int moves = 0;
    while (rebalance_decide(m, 5, 2, &c, &d) == REBALANCE_MOVE) {
        int i = tag_of(d.who);
        m[i].stage = (int16_t)d.to;
        m[i].throughput = d.to == 0 ? 10 : 5;
        c.last_from = d.from, c.last_to = d.to;
        assert_true(++moves <= 3);
    }
    int cnt[2];
    rebalance_totals(m, 5, 2, NULL, cnt);
    assert_int_equal(cnt[0], 2);
    assert_int_equal(cnt[1], 3);
    assert_int_equal(moves, 2);
    /* moving back the last move needs the reverse margin: 3,2 with stage 1 at 2 x 7.5 = 15
     * and stage 0 at 3 x 6 = 18: moving a stage-0 peer to stage 1 gives min(12, 22.5) = 12,
     * no; set up a +40% gain back and check it is refused, then allowed at 30% */
    msg_member_t k[4] = {member(0, 0, 10), member(1, 0, 10), member(2, 1, 7), member(3, 1, 7)};
    /* 2,2: 20 vs 14: moving a stage-0 peer: min(10, 21) = 10, worse; a stage-1 peer to 0:
     * min(30, 7) worse. Make stage 1 three of 7 and stage 0 one of 10: 10 vs 21: moving a
     * 7 (counts 10 in stage 0) gives min(20, 14) = 14 (+40%) */
    k[1].stage = 1;
    k[1].throughput = 7;
    c = rebalance_defaults();
    assert_int_equal(rebalance_decide(k, 4, 2, &c, &d), REBALANCE_MOVE);
    assert_int_equal(d.from, 1);
    c.last_from = 0, c.last_to = 1; /* the last move was 0 -> 1: this one goes back */
    assert_int_equal(rebalance_decide(k, 4, 2, &c, &d), REBALANCE_BALANCED);
    c.reverse_margin = 0.3;
    assert_int_equal(rebalance_decide(k, 4, 2, &c, &d), REBALANCE_MOVE);
}

/* Tables in another order and with up to 2% noise on every throughput name the same mover. */
static void test_same_answer_under_noise(void **state)
{
    (void)state;
    rebalance_config_t c = rebalance_defaults();
    srand(7);
    for (int trial = 0; trial < 200; trial++) {
        msg_member_t m[6] = {member(0, 0, 10), member(1, 0, 10), member(2, 0, 10),
                             member(3, 0, 10), member(4, 1, 10), member(5, 1, 3)};
        rebalance_decision_t d0, d1;
        assert_int_equal(rebalance_decide(m, 6, 2, &c, &d0), REBALANCE_MOVE);
        for (int i = 0; i < 6; i++) m[i].throughput *= (float)(1 + 0.02 * (rand() / (double)RAND_MAX - 0.5));
        for (int i = 5; i > 0; i--) { /* shuffle */
            int j = rand() % (i + 1);
            msg_member_t t = m[i];
            m[i] = m[j];
            m[j] = t;
        }
        assert_int_equal(rebalance_decide(m, 6, 2, &c, &d1), REBALANCE_MOVE);
        assert_memory_equal(d0.who, d1.who, MSG_ID_LEN);
        assert_int_equal(d0.to, d1.to);
    }
    msg_member_t a[3] = {member(0, 0, 1), member(1, 1, 2), member(2, 0, 3)};
    msg_member_t b[3] = {a[2], a[0], a[1]};
    assert_true(rebalance_placement(a, 3) == rebalance_placement(b, 3));
    b[0].stage = 1;
    assert_true(rebalance_placement(a, 3) != rebalance_placement(b, 3));
}

/* Decide, apply, repeat, over random swarms whose peers have a speed each and whose
 * stages have a cost each (throughput = speed / cost, what the estimate assumes): each
 * run settles within n moves, the slowest stage gains the margin at every move, a stage
 * is never emptied and no peer goes straight back. */
static void test_no_thrash(void **state)
{
    (void)state;
    srand(11);
    for (int trial = 0; trial < 500; trial++) {
        rebalance_config_t c = rebalance_defaults();
        int S = 2 + rand() % 3, n = S + rand() % 8;
        double cost[4], speed = 1 + rand() % 40;
        msg_member_t m[16];
        int from[16];
        for (int s = 0; s < S; s++) cost[s] = 1 + (rand() % 100) / 100.0;
        for (int i = 0; i < n; i++) {
            int s = i < S ? i : rand() % S;
            m[i] = member(i, s, speed / cost[s]);
            from[i] = -1;
        }
        int moves = 0;
        rebalance_decision_t d;
        double last = 0;
        while (rebalance_decide(m, n, S, &c, &d) == REBALANCE_MOVE) {
            int i = tag_of(d.who);
            assert_true(d.min_after >= d.min_before * 1.2 - 1e-9);
            assert_true(d.min_before >= last - 1e-6); /* the estimate was right */
            last = d.min_after;
            assert_int_not_equal(d.to, from[i]); /* never straight back */
            from[i] = m[i].stage;
            m[i].stage = (int16_t)d.to;
            m[i].throughput = (float)(speed / cost[d.to]);
            c.last_from = d.from, c.last_to = d.to;
            assert_true(++moves <= n);
        }
        int cnt[16];
        rebalance_totals(m, n, S, NULL, cnt);
        for (int s = 0; s < S; s++) assert_true(cnt[s] >= 1);
    }
}

/* Picks `rounds` times among c[0, n) and counts who got what. */
static void pick_many(wiring_t *w, msg_member_t *c, int n, int rounds, int *got)
{
    for (int r = 0; r < rounds; r++) {
        int i = wiring_pick(w, c, n, NULL, 1.0);
        assert_true(i >= 0 && i < n);
        got[i]++;
    }
}

static void test_wiring_shares(void **state)
{
    (void)state;
    /* the first picks before anyone measured (throughput 0), then ~1000 samples/s each:
     * charging the unmeasured as 1 sample/s starved the first-picked for 1000 picks */
    wiring_t *w = wiring_new(5);
    msg_member_t c[2] = {member(0, 1, 0), member(1, 1, 0)};
    int got[2] = {0, 0};
    pick_many(w, c, 2, 1, got);
    c[0].throughput = 1000, c[1].throughput = 1010;
    int later[2] = {0, 0};
    pick_many(w, c, 2, 400, later);
    assert_true(abs(later[0] - later[1]) <= 40); /* within 10% of each other */
    wiring_destroy(&w);
    /* a peer 4x slower gets a fifth */
    w = wiring_new(6);
    c[0].throughput = 1000, c[1].throughput = 250;
    int g2[2] = {0, 0};
    pick_many(w, c, 2, 1000, g2);
    assert_true(g2[1] >= 180 && g2[1] <= 220);
    /* a peer out of the candidates for a while (following) banks no credit: back, it is
     * not flooded */
    msg_member_t one[1] = {c[0]};
    int g3[2] = {0, 0};
    pick_many(w, one, 1, 500, g3);
    c[1].throughput = 1000;
    int g4[2] = {0, 0};
    pick_many(w, c, 2, 100, g4);
    assert_true(g4[1] <= 60);
    wiring_destroy(&w);
}

/* peer_run's --slowdown: the device's busy time is X times the CPU seconds of the work
 * (clock_thread_cpu), and the wait for it is a sleep that leaves the cores to others. */
static void test_emulated_device_clock(void **state)
{
    (void)state;
    double c0 = clock_thread_cpu(), t0 = clock_now();
    clock_sleep(0.1);
    double wall = clock_now() - t0, cpu = clock_thread_cpu() - c0;
    assert_true(wall >= 0.09);
    assert_true(cpu < 0.02); /* a sleep is not compute */
    /* work advances it (on a loaded machine more slowly than the wall clock) */
    volatile double x = 0;
    c0 = clock_thread_cpu(), t0 = clock_now();
    while (clock_thread_cpu() - c0 < 0.02 && clock_now() - t0 < 10) x += 1;
    cpu = clock_thread_cpu() - c0;
    assert_true(cpu >= 0.02);
    assert_true(cpu <= clock_now() - t0 + 0.005);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_four_to_one_moves_one),
        cmocka_unit_test(test_margin_is_hysteresis),
        cmocka_unit_test(test_settling_and_empty),
        cmocka_unit_test(test_never_empties_a_stage),
        cmocka_unit_test(test_heterogeneous_picks_best),
        cmocka_unit_test(test_stage_costs),
        cmocka_unit_test(test_same_answer_under_noise),
        cmocka_unit_test(test_no_thrash),
        cmocka_unit_test(test_wiring_shares),
        cmocka_unit_test(test_emulated_device_clock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
