/* test_parts.c — the member's parts driven alone, without a swarm and without a peer:
 * each rule on the part's own state (peer/guard.h, peer/rebal.h), and the timeout type
 * the parts keep their timers in (common/timeout.h). */
#include "common/status.h"
#include "common/timeout.h"
#include "peer/custody.h"
#include "peer/follow.h"
#include "peer/guard.h"
#include "peer/join.h"
#include "peer/rebal.h"
#include "peer/recover.h"
#include "peer/run_def.h"
#include "peer/source.h"
#include "peer/val.h"
#include "swarm/pool.h"
#include "swarm/view.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

static void id_of(uint8_t id[MSG_ID_LEN], int k)
{
    memset(id, 0, MSG_ID_LEN);
    id[0] = (uint8_t)k;
}

/* The norm bound's scale: after a restart a member's first update is near-empty; a bound
 * on the median of two would refuse the honest one (sim: resumed swarms). */
static void test_guard_norm_scale(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    assert_true(guard_norm_ok(&g, 1e29)); /* nothing known: no bound */
    guard_norm_note(&g, 1e-10, 0);         /* counted nothing: no scale */
    guard_norm_note(&g, 0.0, 3);           /* zero: no scale */
    assert_int_equal(g.nnorms, 0);
    guard_norm_note(&g, 1e-10, 1);
    guard_norm_note(&g, 9e-4, 2);
    assert_true(guard_norm_ok(&g, 9e-4));  /* the largest while fewer than 3 are known */
    assert_true(guard_norm_ok(&g, 100.0)); /* within 1e6 x the largest */
    assert_false(guard_norm_ok(&g, 1e29));
    /* from 3 norms on, the median: one odd large norm does not widen the bound */
    guard_norm_note(&g, 1e-3, 2);
    guard_norm_note(&g, 1e4, 2);
    assert_true(guard_norm_ok(&g, 9e-4 * GUARD_NORM_FACTOR)); /* the median of 4: the 2nd */
    assert_false(guard_norm_ok(&g, 1e4 * GUARD_NORM_FACTOR));
    /* the ring keeps the last GUARD_NORMS: old small norms leave the median */
    for (int i = 0; i < GUARD_NORMS; i++) guard_norm_note(&g, 1.0, 1);
    assert_true(guard_norm_ok(&g, 0.9 * GUARD_NORM_FACTOR));
    assert_false(guard_norm_ok(&g, 1.1 * GUARD_NORM_FACTOR));
    /* a new stage held: its scale is learnt anew */
    guard_forget_norms(&g);
    assert_true(guard_norm_ok(&g, 1e29));
}

/* Expulsion (12.4): refusals of a member's own messages at GUARD_EXPEL_AFTER distinct
 * steps expel it; a relayed copy, or a second refusal at the same step, does not count
 * (every member receiving the same messages expels at the same step). */
static void test_guard_expulsion(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    uint8_t a[MSG_ID_LEN], b[MSG_ID_LEN];
    id_of(a, 1), id_of(b, 2);
    assert_false(guard_any(&g));
    assert_int_equal(guard_refused(&g, a, 5, 0), 0); /* relayed: not against it */
    assert_false(guard_any(&g));
    assert_int_equal(guard_refused(&g, a, 5, 1), 0);
    assert_int_equal(guard_refused(&g, a, 5, 1), 0); /* the same step again */
    assert_false(guard_expelled(&g, a));
    assert_int_equal(guard_refused(&g, a, 4, 1), 0); /* an older step: not counted */
    assert_int_equal(guard_refused(&g, a, 6, 1), 1); /* the second step: expelled */
    assert_true(guard_expelled(&g, a));
    assert_int_equal(guard_refusals(&g, a), GUARD_EXPEL_AFTER);
    assert_int_equal(guard_refused(&g, a, 7, 1), 0); /* once */
    assert_false(guard_expelled(&g, b));
    /* the view without it */
    msg_member_t in[3], out[3];
    memset(in, 0, sizeof in);
    id_of(in[0].id, 9), id_of(in[1].id, 1), id_of(in[2].id, 2);
    assert_int_equal(guard_view(&g, in, 3, out), 2);
    assert_int_equal(out[0].id[0], 9);
    assert_int_equal(out[1].id[0], 2);
    /* a new stage keeps it out */
    guard_forget_norms(&g);
    assert_true(guard_expelled(&g, a));
}

/* A full table: members beyond it are refused, never expelled, and nothing overflows. */
static void test_guard_table_full(void **state)
{
    (void)state;
    guard_t g;
    guard_init(&g);
    uint8_t id[MSG_ID_LEN];
    for (int k = 0; k < GUARD_BAD_MAX + 10; k++) {
        id_of(id, 0);
        memcpy(id + 1, &k, sizeof k);
        guard_refused(&g, id, 1, 1);
        assert_int_equal(guard_refused(&g, id, 2, 1), k < GUARD_BAD_MAX);
    }
    assert_int_equal(g.nbad, GUARD_BAD_MAX);
}


/* A timeout: stopped until started, fires at its deadline, backs off up to its ceiling. */
static void test_timeout(void **state)
{
    (void)state;
    timeout_t t = timeout_make("test.wait", 2.0);
    assert_false(timeout_running(&t));
    assert_false(timeout_fired(&t, 1e9));
    assert_true(timeout_earliest(5.0, &t) == 5.0);
    timeout_start(&t, 10.0);
    assert_false(timeout_fired(&t, 11.9));
    assert_true(timeout_fired(&t, 12.0));
    assert_true(timeout_earliest(50.0, &t) == 12.0);
    t.backoff = 2.0, t.max_s = 5.0;
    timeout_retry(&t, 12.0); /* 4 s */
    assert_int_equal(t.attempts, 1);
    assert_false(timeout_fired(&t, 15.9));
    assert_true(timeout_fired(&t, 16.0));
    timeout_retry(&t, 16.0); /* 8 s, capped at 5 */
    assert_true(fabs(t.deadline - 21.0) < 1e-9);
    timeout_ensure(&t, 17.0); /* running: keeps its deadline */
    assert_true(fabs(t.deadline - 21.0) < 1e-9);
    timeout_stop(&t);
    assert_false(timeout_fired(&t, 100.0));
    timeout_ensure(&t, 30.0); /* stopped: starts afresh */
    assert_int_equal(t.attempts, 0);
    assert_true(fabs(t.deadline - 32.0) < 1e-9);
}

static msg_member_t serving(int tag, int stage, double tp)
{
    msg_member_t m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < MSG_ID_LEN; i++) m.id[i] = (uint8_t)(tag * 16 + i);
    m.stage = (int16_t)stage;
    m.state = MEMBER_SERVING;
    m.step = 10;
    m.throughput = (float)tp;
    m.loss = NAN;
    return m;
}

/* Rebalancing: four peers on stage 0 and one on stage 1; the decision names peer 0. It
 * moves only after REBAL_STREAK decisions a second apart with the placement stable for
 * the cooldown, never in the run's last steps, and a change of placement calls a decided
 * move off. */
static void test_rebal_streak_and_cooldown(void **state)
{
    (void)state;
    msg_member_t v[5] = {serving(0, 0, 10), serving(1, 0, 10), serving(2, 0, 10),
                         serving(3, 0, 10), serving(4, 1, 10)};
    rebal_t r;
    rebal_init(&r);
    rebal_in_t in = {.view = v, .n = 5, .S = 2, .self = v[0].id, .stage = 0, .step = 10,
                     .steps = 100, .cooldown_s = 3.0};
    double t = 100.0;
    int decided_at = -1;
    for (int i = 0; i < 10 && decided_at < 0; i++, t += 0.5)
        if (rebal_decide(&r, &in, t)) decided_at = i;
    /* ticks every 0.5 s from t = 100 make decisions at 100, 101, ... (one a second); the
     * placement is stable from 100, so the cooldown of 3 s passes at 103, and the third
     * naming in a row is at 105: none up to 104.5 */
    assert_int_equal(decided_at, -1);
    assert_int_equal(rebal_decide(&r, &in, t), 1); /* t = 105 */
    assert_int_equal(r.to, 1);
    assert_true(rebal_stands(&r, v, 5));
    /* a peer moves elsewhere meanwhile: the decided move is off */
    v[3].stage = 1;
    assert_false(rebal_stands(&r, v, 5));
    assert_int_equal(r.to, -1);
    /* another peer: the decision names peer 0, never this one */
    rebal_t o;
    rebal_init(&o);
    v[3].stage = 0;
    rebal_in_t in1 = in;
    in1.self = v[1].id;
    for (double u = 200; u < 220; u += 1.0) assert_int_equal(rebal_decide(&o, &in1, u), 0);
    /* the run's last steps: no move */
    rebal_t e;
    rebal_init(&e);
    rebal_in_t in2 = in;
    in2.step = 98;
    for (double u = 300; u < 320; u += 1.0) assert_int_equal(rebal_decide(&e, &in2, u), 0);
    /* --no-rebalance */
    rebal_t f;
    rebal_init(&f);
    rebal_in_t in3 = in;
    in3.off = 1;
    for (double u = 400; u < 420; u += 1.0) assert_int_equal(rebal_decide(&f, &in3, u), 0);
    /* asked to (the simulator): decided at once; taken, it is counted */
    rebal_ask(&f, 1, v, 5, "asked");
    assert_true(rebal_stands(&f, v, 5));
    assert_int_equal(rebal_take(&f), 1);
    assert_int_equal(f.moves, 1);
    assert_int_equal(f.to, -1);
}

/* The last move seen in the table is remembered for REBAL_REVERSE_S: a member that came
 * or went ends that memory. */
static void test_rebal_reverse_memory(void **state)
{
    (void)state;
    msg_member_t v[5] = {serving(0, 0, 10), serving(1, 0, 10), serving(2, 0, 10),
                         serving(3, 0, 10), serving(4, 1, 10)};
    rebal_t r;
    rebal_init(&r);
    rebal_in_t in = {.view = v, .n = 5, .S = 2, .self = v[4].id, .stage = 1, .step = 10,
                     .steps = 100, .cooldown_s = 1e9};
    rebal_decide(&r, &in, 0.5);
    v[0].stage = 1; /* 0 -> 1 seen */
    rebal_decide(&r, &in, 1.5);
    assert_int_equal(r.last_from, 0);
    assert_int_equal(r.last_to, 1);
    assert_true(timeout_running(&r.reverse));
    assert_false(timeout_fired(&r.reverse, 1.5 + REBAL_REVERSE_S - 1));
    assert_true(timeout_fired(&r.reverse, 1.5 + REBAL_REVERSE_S));
    in.n = 4; /* a member went: a new situation */
    rebal_decide(&r, &in, 2.5);
    assert_int_equal(r.last_from, -1);
    assert_false(timeout_running(&r.reverse));
    /* the stages event: due at once, then every REBAL_RECORD_S */
    assert_true(rebal_record_due(&r, 10.0));
    assert_false(rebal_record_due(&r, 10.0 + REBAL_RECORD_S - 1));
    assert_true(rebal_record_due(&r, 10.0 + REBAL_RECORD_S));
}

/* Validation rounds: batches handed out once each, a loss taken once per batch and only
 * for the round's step, the two halves' means (whole model, without the val_skip stages),
 * and a reset that drops the rounds but keeps the run's loss and the last round's step. */
static void test_val_rounds(void **state)
{
    (void)state;
    val_t v;
    val_init(&v);
    assert_false(val_round_running(&v.during));
    assert_int_equal(val_round_next(&v.during), -1);
    assert_int_equal(val_round_add(&v.during, 0, 0, 1.0f), 0); /* none runs */
    assert_int_equal(val_round_begin(&v.end, 100, 4, 2), 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(val_round_next(&v.end), i);
        val_round_sent(&v.end);
    }
    assert_int_equal(val_round_next(&v.end), -1);
    assert_int_equal(val_round_add(&v.end, 99, 0, 1.0f), 0);   /* another step's */
    assert_int_equal(val_round_add(&v.end, 100, 4, 1.0f), 0);  /* out of range */
    assert_int_equal(val_round_add(&v.end, 100, 0, NAN), 0);   /* not finite */
    assert_int_equal(val_round_add(&v.end, 100, 0, 2.0f), 1);
    assert_int_equal(val_round_add(&v.end, 100, 0, 9.0f), 0);  /* twice */
    assert_int_equal(val_round_add(&v.end, 100, 1, 4.0f), 1);
    assert_int_equal(val_round_add(&v.end, 100, 2, 5.0f), 1);  /* without the skipped stages */
    assert_false(val_round_complete(&v.end));
    assert_int_equal(val_round_add(&v.end, 100, 3, 7.0f), 1);
    assert_true(val_round_complete(&v.end));
    assert_true(fabs(val_round_mean(&v.end) - 3.0) < 1e-9);
    assert_true(fabs(val_round_mean_skip(&v.end) - 6.0) < 1e-9);
    /* a round during the run, no second half */
    assert_int_equal(val_round_begin(&v.during, 10, 2, 2), 0);
    assert_true(isnan(val_round_mean_skip(&v.during)));
    val_round_end(&v.during);
    assert_false(val_round_running(&v.during));
    v.loss = 3.0, v.last = 10;
    val_reset(&v);
    assert_false(val_round_running(&v.end));
    assert_int_equal(v.end.done, 0);
    assert_true(v.loss == 3.0 && v.last == 10);
    val_free(&v);
}

/* The steps in [from, to) at which val_round_due says a round is due (beginning each one:
 * last = its step), leading or following, into due; how many. */
static int val_due_steps(val_t *v, int64_t from, int64_t to, int every, int leading, int64_t *due,
                         int max)
{
    int n = 0;
    for (int64_t s = from; s < to; s++)
        if (val_round_due(v, s, every, leading)) {
            v->last = s;
            if (n < max) due[n] = s;
            n++;
        }
    return n;
}

/* When rounds during the run begin: at each multiple of every at a leader that leads
 * from the start; at a follower that takes over the lead, where its leader left off (no
 * second round in an interval its leader began one in, but the round its leader did not
 * reach); at the next multiple, not at once, at a member new to the lead (the off-grid
 * round at step 961 of the `small` swarm at seed 1338: every 416, its leader moved away)
 * or a resumed swarm. */
static void test_val_round_due(void **state)
{
    (void)state;
    int64_t due[8];
    val_t a, b, c;
    val_init(&a);
    assert_int_equal(val_due_steps(&a, 0, 46, 10, 1, due, 8), 4);
    for (int i = 0; i < 4; i++) assert_int_equal(due[i], 10 * (i + 1));
    assert_int_equal(val_round_due(&a, 50, 0, 1), 0); /* none: every 0 */
    /* b follows while a leads, a dies at 33 after its round at 30: b begins none at 34 */
    val_init(&b);
    assert_int_equal(val_due_steps(&b, 0, 34, 10, 0, due, 8), 0);
    assert_int_equal(val_due_steps(&b, 34, 46, 10, 1, due, 8), 1);
    assert_int_equal(due[0], 40);
    /* a dies at 39, before its round at 40: b, leading from 40, begins it */
    val_init(&b);
    assert_int_equal(val_due_steps(&b, 0, 40, 10, 0, due, 8), 0);
    assert_int_equal(val_due_steps(&b, 40, 41, 10, 1, due, 8), 1);
    assert_int_equal(due[0], 40);
    /* the lead flaps: b leads at 35, a again from 36 to 41 (its round at 40), b from 42 */
    val_init(&b);
    assert_int_equal(val_due_steps(&b, 0, 35, 10, 0, due, 8), 0);
    assert_int_equal(val_due_steps(&b, 35, 36, 10, 1, due, 8), 0);
    assert_int_equal(val_due_steps(&b, 36, 42, 10, 0, due, 8), 0);
    assert_int_equal(val_due_steps(&b, 42, 50, 10, 1, due, 8), 0);
    /* new to the lead at 961 (never in stage 0 before): the first round at 1248 */
    val_init(&c);
    assert_int_equal(val_due_steps(&c, 961, 1248, 416, 1, due, 8), 0);
    assert_int_equal(val_due_steps(&c, 1248, 1249, 416, 1, due, 8), 1);
    /* the same member back in stage 0 after 500 steps elsewhere: none at once either */
    assert_int_equal(val_due_steps(&c, 1749, 2080, 416, 1, due, 8), 0);
    assert_int_equal(val_due_steps(&c, 2080, 2081, 416, 1, due, 8), 1);
    /* a swarm resumed at 1000 (its store knows no round): the next at 1248 */
    val_init(&c);
    assert_int_equal(val_due_steps(&c, 1000, 1249, 416, 1, due, 8), 1);
    assert_int_equal(due[0], 1248);
    val_free(&a);
    val_free(&b);
    val_free(&c);
}

/* The join margin (sim, rebal_no-thrash): a follower names its first contributing step
 * head + gossip_s + 1 s of pool steps (here 3 s), from the median of its paces timed at the pool's head (one
 * step timed at ~0 s after a stall does not make the margin 1000 steps), after 4 steps
 * followed (3 with a mover's pace) and 3 paces; named again further on when the pool ran
 * faster than the pace and the naming is younger than gossip_s. */
/* A follower at a pool that steps every pace[k] seconds (the pace changes at step
 * change_at): from step 10, at the head. Returns the step it contributes from; *t_first
 * and *t_take: when it first named a step and when it reached the one it took. Checks on
 * the way that the named step never moves earlier. */
/* echo: every mate echoes each naming a step after it is made (follow_heard's result, as
 * on_view would set it); else none does (a transport that does not say) */
static int64_t follow_pool_echo(follow_t *f, const double *pace, int64_t change_at, int echo,
                                double *t_first, double *t_take)
{
    int64_t step = 10, from = step + 1000, was = from;
    double now = 100.0;
    int named, nnamed = 0;
    *t_first = 0;
    for (int i = 0; i < 2000; i++) {
        double dt = pace[step >= change_at];
        now += dt;
        follow_pace(f, dt, from > step, 1);
        if (echo && nnamed) f->heard = from;
        step++;
        from = follow_name(f, step, from, step, now, &named);
        nnamed += named;
        if (named) *t_first = now;
        if (nnamed && !named) assert_true(from >= was); /* never earlier */
        was = from;
        if (from == step) {
            *t_take = now;
            assert_int_equal(nnamed, 1); /* named once; later moves are not namings */
            return step;
        }
    }
    fail();
    return -1;
}

static int64_t follow_pool(follow_t *f, const double *pace, int64_t change_at, double *t_first,
                           double *t_take)
{
    return follow_pool_echo(f, pace, change_at, 0, t_first, t_take);
}

/* A follower with gossip_s, 5 steps followed, whose first step was at t0 with the pool's
 * head at head0. */
static void follower_at(follow_t *f, double gossip_s, double t0, int64_t head0)
{
    follow_init(f, gossip_s);
    follow_begin(f, 0.0);
    f->followed = 5;
    f->t0 = t0, f->head0 = head0;
}

static void test_follow_join_margin(void **state)
{
    (void)state;
    follow_t f;
    follow_init(&f, 2.0);
    /* a steady pool, 0.1 s a step: named once its head moved 3 steps and half a second
     * passed since its first step (100.1), taken gossip_s after that naming at the earliest
     * and soon after */
    double t_first, t_take, steady[2] = {0.1, 0.1};
    follow_begin(&f, 0.0);
    int64_t from = follow_pool(&f, steady, 1 << 30, &t_first, &t_take);
    assert_true(t_first > 100.6 - 1e-9 && t_first < 100.7 + 1e-9); /* sums of 0.1 s */
    assert_true(t_take - t_first >= f.gossip_s);
    assert_true(t_take - t_first <= f.gossip_s + FOLLOW_SLACK_S + 0.2);
    assert_true(from > 12);
    /* a pool that speeds up after the naming (0.1 -> 0.02 s a step): the named step moves
     * on, still taken gossip_s after the naming */
    double faster[2] = {0.1, 0.02};
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    follow_pool(&f, faster, 14, &t_first, &t_take);
    assert_true(t_take - t_first >= f.gossip_s);
    assert_true(t_take - t_first <= f.gossip_s + FOLLOW_SLACK_S + 0.2);
    /* ... and one that slows down (0.1 -> 0.4 s): taken later than needed, never sooner */
    double slower[2] = {0.1, 0.4};
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    follow_pool(&f, slower, 14, &t_first, &t_take);
    assert_true(t_take - t_first >= f.gossip_s);
    /* a slow pool, 1.2 s a step: at least 2 steps named ahead */
    double slow[2] = {1.2, 1.2};
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    from = follow_pool(&f, slow, 1 << 30, &t_first, &t_take);
    assert_true(t_take - t_first >= f.gossip_s);
    assert_true(t_take - t_first <= f.gossip_s + FOLLOW_SLACK_S + 1.2);
    /* the pool's head ahead of the follower: counted from the head */
    int named;
    follow_t g;
    follower_at(&g, 2.0, 19.0, 15); /* 0.1 s a step */
    assert_int_equal(follow_name(&g, 20, 2000, 25, 20.0, &named), 25 + 5); /* 0.5 s */
    assert_true(named);
    /* the head seen in gossip jumps 3 steps a moment after the first step: no pace yet */
    follow_t jp;
    follower_at(&jp, 2.0, 19.9, 22);
    assert_int_equal(follow_name(&jp, 20, 2000, 25, 20.0, &named), 2000);
    assert_false(named);
    /* the step taken without a naming (its placeholder reached): counted from now */
    follow_t k;
    follow_init(&k, 2.0);
    follow_begin(&k, 0.0);
    k.followed = 3;
    follow_pace(&k, 0.1, 1, 1);
    assert_int_equal(follow_name(&k, 40, 40, 40, 30.0, &named), 40 + 25);
    assert_false(named);
    /* the named step reached before any mate's echo (a thin link, a head that lagged):
     * named again at once, past it by FOLLOW_CONFIRM_S and the wait so far, not gossip_s
     * on; once echoed, it stands */
    follow_t u;
    follower_at(&u, 3.0, 19.0, 15); /* 0.2 s a step */
    assert_int_equal(follow_name(&u, 18, 2000, 20, 20.0, &named), 20 + 3); /* 0.5 s */
    assert_true(named);
    assert_int_equal(follow_name(&u, 23, 23, 21, 20.15, &named), 23 + 4); /* 0.65 s at 0.19 */
    assert_false(named);
    u.heard = 27;
    assert_int_equal(follow_name(&u, 27, 27, 26, 20.9, &named), 27);
    /* ... and 1 s after the first naming (2 x FOLLOW_CONFIRM_S) still unheard: gossip_s */
    u.heard = -1;
    int64_t due = 27 + (int64_t)((20.0 + 3.0 - 21.1) / 0.2);
    assert_true(follow_name(&u, 27, 27, 26, 21.1, &named) >= due);
    /* a contributor's pace is an EMA of its own steps */
    follow_t c;
    follow_init(&c, 2.0);
    follow_pace(&c, 1.0, 0, 1);
    follow_pace(&c, 2.0, 0, 1);
    assert_true(fabs(c.pace - 1.2) < 1e-9);
    /* a mover keeps its pace (one sample known); the pool's, from its head, names */
    follow_moving(&c, 1);
    follow_downloaded(&c);
    follow_begin(&c, 50.0);
    assert_true(c.pace_known);
    assert_int_equal(c.pace_n, 1);
    int64_t cf = 1100;
    follow_pace(&c, 1.2, 1, 1);
    cf = follow_name(&c, 101, cf, 101, 51.0, &named);
    assert_false(named);
    follow_pace(&c, 1.2, 1, 1);
    cf = follow_name(&c, 102, cf, 102, 52.0, &named);
    assert_true(named);
    assert_int_equal(cf, 102 + 1); /* 0.5 s at 1.2 s a step: 1 step at least */
}

/* The pool's pace timed on the messages a downloader held (follow_watch): named at its
 * second step followed, from the head the watch began with. */
static void test_follow_watch(void **state)
{
    (void)state;
    int named;
    follow_t f;
    follow_init(&f, 2.0);
    follow_watch(&f, 10, 1.0); /* it held step 9's message at 1.0 s */
    follow_watch(&f, 11, 1.85); /* later ones do not move the clock's start */
    follow_begin(&f, 5.0);      /* its state in place at 5.0 s, at step 8 */
    assert_int_equal(follow_name(&f, 8, 1008, 14, 5.05, &named), 1008); /* one step followed */
    assert_false(named);
    /* second step: 4.15 s for 4 steps of head, 1.04 s a step: a step of margin */
    assert_int_equal(follow_name(&f, 9, 1008, 14, 5.15, &named), 15);
    assert_true(named);
    assert_true(f.named_sps > 1.03 && f.named_sps < 1.05);
    /* without the watch (a download that began again forgets it): no pace yet */
    follow_t g;
    follow_init(&g, 2.0);
    follow_watch(&g, 10, 1.0);
    follow_unwatch(&g);
    follow_begin(&g, 5.0);
    assert_int_equal(follow_name(&g, 8, 1008, 14, 5.05, &named), 1008);
    assert_int_equal(follow_name(&g, 9, 1008, 14, 5.15, &named), 1008);
    assert_false(named);
}

/* Confirmed naming (docs/protocol.md 9.5): a follower contributes from the step it named
 * as soon as every pool mate echoed that step in its gossip, each while short of it; a
 * mate that did not, or echoed it too late, leaves the gossip_s rule. */
static void test_follow_heard(void **state)
{
    (void)state;
    follow_t f;
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    msg_member_t m[5];
    memset(m, 0, sizeof m);
    for (int i = 0; i < 5; i++) m[i].id[0] = (uint8_t)(i + 1), m[i].state = MEMBER_SERVING;
    m[3].stage = 1;                  /* another stage's member: not a mate */
    m[4].state = MEMBER_JOINING;     /* downloading: not a mate yet */
    const uint8_t *self = m[0].id;
    int64_t h[10] = {-1, -1, 30, 27, 30, 28, -1, -1, -1, -1};
    follow_heard(&f, m, h, 5, 0, self);
    assert_int_equal(f.heard, 30);
    h[5] = 30; /* one mate heard it at that step: its compute side may have started it */
    follow_heard(&f, m, h, 5, 0, self);
    assert_int_equal(f.heard, -1);
    h[5] = 28, h[4] = 31; /* the mates hold different namings */
    follow_heard(&f, m, h, 5, 0, self);
    assert_int_equal(f.heard, -1);
    h[4] = -1; /* one holds none */
    follow_heard(&f, m, h, 5, 0, self);
    assert_int_equal(f.heard, -1);
    follow_heard(&f, m, NULL, 5, 0, self); /* the transport does not say */
    assert_int_equal(f.heard, -1);
    follow_heard(&f, m + 3, h + 6, 2, 0, m[3].id); /* no mate to tell */
    assert_true(f.heard == FOLLOW_HEARD_ALL);
    /* a steady pool, 0.1 s a step, every mate echoing: contributes from the step named
     * first, FOLLOW_CONFIRM_S after the naming (the pace timed from sums of 0.1 s may
     * round up a step), before gossip_s */
    double t_first = 0, t_take = 0, steady[2] = {0.1, 0.1};
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    follow_pool_echo(&f, steady, 1 << 30, 1, &t_first, &t_take);
    assert_true(t_take - t_first > 0.5 - 1e-9 && t_take - t_first < 0.6 + 1e-9);
    assert_true(t_take - t_first < f.gossip_s);
    assert_true(f.margin == 5 || f.margin == 6);
    /* unheard: from 2 x FOLLOW_CONFIRM_S on the gossip_s rule */
    follow_init(&f, 2.0);
    follow_begin(&f, 0.0);
    follow_pool_echo(&f, steady, 1 << 30, 0, &t_first, &t_take);
    assert_true(t_take - t_first >= f.gossip_s);
    /* echoed too late: a mate was 3 steps past the step named when it heard it (the head
     * the naming counted from lagged the pool): named again at once, the margin at the
     * pace (5 steps at 0.1 s, 6 with rounding) past that mate; echoed in time, taken there */
    for (int late_after_gossip = 0; late_after_gossip < 2; late_after_gossip++) {
        follow_init(&f, 2.0);
        follow_begin(&f, 0.0);
        int64_t step = 10, from = step + 1000;
        double now = 100.0;
        int named = 0;
        while (!named) {
            now += 0.1, step++;
            follow_pace(&f, 0.1, 1, 1);
            from = follow_name(&f, step, from, step, now, &named);
        }
        int64_t first = from, seen[6] = {-1, -1, first, first + 3, first, step};
        follow_heard(&f, m, seen, 3, 0, self);
        assert_int_equal(f.heard, -1);
        assert_int_equal(f.late_from, first);
        assert_int_equal(f.late_at, first + 3);
        now += late_after_gossip ? f.gossip_s : 0.1, step++;
        from = follow_name(&f, step, from, step, now, &named);
        assert_false(named);
        if (late_after_gossip) { /* from gossip_s after the first naming, a naming stands */
            assert_int_equal(from, first);
            continue;
        }
        assert_true(from == first + 3 + 5 || from == first + 3 + 6);
        int64_t timely[6] = {-1, -1, from, step, from, step};
        follow_heard(&f, m, timely, 3, 0, self);
        assert_int_equal(f.heard, from);
        assert_int_equal(f.late_from, -1);
        int64_t again = from;
        while (step < again) {
            now += 0.1, step++;
            from = follow_name(&f, step, from, step, now, &named);
            assert_int_equal(from, again);
        }
    }
}

/* Followers alone (sim 3x2 mild swap seed 9720): after timeout_s with no contributor they
 * gather every message of the step, twice at most a second apart; after 2 x timeout_s the
 * first (lowest id at the highest step) takes over, one behind a mate re-syncs, and the
 * others wait. A contributor reappearing ends it. */
static void test_follow_gather(void **state)
{
    (void)state;
    follow_t f;
    follow_init(&f, 2.0);
    double T = 3.0;
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 100.0), 0); /* alone from now */
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 102.9), 0);
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 103.1), FOLLOW_GATHER);
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 103.5), 0); /* a second apart */
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 104.1), FOLLOW_GATHER);
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 105.5), 0); /* twice at most */
    assert_int_equal(follow_alone(&f, 0, 7, 7, 1, T, 106.1), FOLLOW_TAKE_OVER);
    /* not the first: waits; behind a mate: re-syncs */
    follow_t g;
    follow_init(&g, 2.0);
    follow_alone(&g, 0, 7, 7, 0, T, 0.0);
    for (double t = 3.5; t < 20; t += 1.0)
        assert_false(follow_alone(&g, 0, 7, 7, 0, T, t) & (FOLLOW_TAKE_OVER | FOLLOW_RESYNC));
    assert_true(follow_alone(&g, 0, 7, 9, 0, T, 20.0) & FOLLOW_RESYNC);
    /* a contributor again: nothing, and the wait starts anew */
    follow_t h;
    follow_init(&h, 2.0);
    follow_alone(&h, 0, 7, 7, 1, T, 0.0);
    assert_int_equal(follow_alone(&h, 1, 7, 7, 1, T, 5.0), 0);
    assert_int_equal(follow_alone(&h, 0, 7, 7, 1, T, 6.5), 0);
    assert_true(follow_alone(&h, 0, 7, 7, 1, T, 6.5 + 2 * T + 0.1) & FOLLOW_TAKE_OVER);
}

/* Too far behind: a follower beyond the kept messages re-syncs at once; one 2+ behind
 * with no step for FOLLOW_STALL_S too; a contributor 2+ behind after FOLLOW_STALL_S. */
static void test_follow_behind(void **state)
{
    (void)state;
    follow_t f;
    follow_init(&f, 2.0);
    assert_int_equal(follow_behind(&f, 0, 5, 7, 8, 0.0), 1); /* 7 > 8 - 2 */
    assert_int_equal(follow_behind(&f, 0, 6, 3, 8, 1.0), 0);
    assert_int_equal(follow_behind(&f, 0, 6, 3, 8, 1.0 + FOLLOW_STALL_S + 0.1), 1);
    assert_int_equal(follow_behind(&f, 0, 6, 1, 8, 30.0), 0); /* one behind: fine */
    follow_t c;
    follow_init(&c, 2.0);
    assert_int_equal(follow_behind(&c, 1, 9, 2, 8, 0.0), 0);
    assert_int_equal(follow_behind(&c, 1, 9, 2, 8, FOLLOW_STALL_S + 0.1), 1);
    assert_int_equal(follow_behind(&c, 1, 10, 2, 8, FOLLOW_STALL_S + 0.2), 0); /* moved on */
}

/* A new swarm's start (issue 24: a peer SIGKILLed while the swarm starts stopped the whole
 * run): wait_peers serving members start it at once; short of them, a table unchanged for
 * JOIN_START_S with every stage served and nobody joining starts it; any change, or a
 * member joining, waits anew; a stage with no serving member never starts. */
static void test_join_start(void **state)
{
    (void)state;
    join_state_t j;
    join_state_init(&j);
    j.wait_peers = 4;
    assert_int_equal(join_may_start(&j, 4, 0, 2, 2, 0.0), 1);
    assert_int_equal(join_may_start(&j, 4, 1, 2, 2, 0.0), 0); /* someone half-way in */
    /* one of four died before it served */
    assert_int_equal(join_may_start(&j, 3, 0, 2, 2, 10.0), 0);
    assert_int_equal(join_may_start(&j, 3, 0, 2, 2, 10.0 + JOIN_START_S - 0.1), 0);
    assert_int_equal(join_may_start(&j, 2, 0, 2, 2, 10.0 + JOIN_START_S - 0.05), 0); /* changed */
    assert_int_equal(join_may_start(&j, 2, 0, 2, 2, 10.0 + JOIN_START_S + 1.0), 0);
    assert_int_equal(join_may_start(&j, 2, 0, 2, 2, 10.0 + 2 * JOIN_START_S), 1);
    /* decided: gossip settles JOIN_SETTLE_S, again from any change of the serving count
     * (a joiner that began serving meanwhile: sim heavy 4x2 seed 32011613) */
    join_state_t g;
    join_state_init(&g);
    assert_int_equal(join_settled(&g, 4, 20.0), 0);
    assert_int_equal(join_settled(&g, 4, 20.0 + JOIN_SETTLE_S - 0.1), 0);
    assert_int_equal(join_settled(&g, 5, 20.0 + JOIN_SETTLE_S + 0.1), 0); /* one more */
    assert_false(g.go);
    assert_int_equal(join_settled(&g, 5, 20.0 + 2 * JOIN_SETTLE_S), 0);
    assert_int_equal(join_settled(&g, 5, 20.0 + 2 * JOIN_SETTLE_S + 0.2), 1);
    assert_true(g.go);
    /* a stage with nobody serving: never */
    join_state_t k;
    join_state_init(&k);
    k.wait_peers = 4;
    assert_int_equal(join_may_start(&k, 2, 0, 1, 2, 0.0), 0);
    assert_int_equal(join_may_start(&k, 2, 0, 1, 2, 100.0), 0);
}

/* Stage 0's sourcing (sim heavy 4x2 seed 20081): an owner that stops with LEAVE mid-step
 * may have forwards still being served downstream; its microbatches wait `settle` after
 * it left the view before a live owner starts them again, and then move only to the owner
 * rendezvous hashing gives them. One that comes back is forgotten at once. */
static void test_source_gone_owner(void **state)
{
    (void)state;
    msg_member_t m[3] = {0};
    for (int i = 0; i < 3; i++) {
        id_of(m[i].id, i + 1);
        m[i].stage = 0;
        m[i].state = MEMBER_SERVING;
    }
    source_t s;
    source_init(&s);
    /* which keys member 2 (index 1) owns among all three */
    int owned_by_gone = -1;
    for (uint64_t k = 0; k < 64 && owned_by_gone < 0; k++)
        if (view_rendezvous(m, 3, k) == 1) owned_by_gone = (int)k;
    assert_true(owned_by_gone >= 0);
    uint64_t key = (uint64_t)owned_by_gone;
    msg_member_t live[2] = {m[0], m[2]};
    int heir = view_rendezvous(live, 2, key);
    source_on_view(&s, m, 3, live, 2, 5, 10.0); /* member 2 leaves at t=10, step 5 */
    assert_int_equal(s.n, 1);
    assert_int_equal(source_owner(&s, live, 2, heir, key, 5, 10.5, 2.0), SOURCE_WAIT);
    assert_int_equal(source_owner(&s, live, 2, 1 - heir, key, 5, 10.5, 2.0), SOURCE_WAIT);
    /* keys it did not own are not held up */
    for (uint64_t k = 0; k < 64; k++)
        if (view_rendezvous(m, 3, k) != 1)
            assert_int_equal(source_owner(&s, live, 2, 0, k, 5, 10.5, 2.0),
                             view_rendezvous(live, 2, k) == 0 ? SOURCE_MINE : SOURCE_OTHER);
    /* a step it never contributed to is not held up */
    s.gone[0].from = 9;
    assert_int_equal(source_owner(&s, live, 2, heir, key, 5, 10.5, 2.0), SOURCE_MINE);
    s.gone[0].from = 0;
    /* settled: the heir starts it, as a re-send (the gone owner may have started it: sim
     * heavy 4x2 seed 30000435); the other does not */
    assert_int_equal(source_owner(&s, live, 2, heir, key, 5, 12.0, 2.0), SOURCE_MINE_AGAIN);
    assert_int_equal(source_owner(&s, live, 2, 1 - heir, key, 5, 12.0, 2.0), SOURCE_OTHER);
    /* ... at the next step too (it may have applied first), not after: then forgotten */
    assert_int_equal(source_owner(&s, live, 2, heir, key, 6, 12.0, 2.0), SOURCE_MINE_AGAIN);
    assert_int_equal(s.n, 1);
    assert_int_equal(source_owner(&s, live, 2, heir, key, 7, 12.0, 2.0), SOURCE_MINE);
    assert_int_equal(s.n, 0);
    /* back in the view before settling, as the owner it was: forgotten */
    source_on_view(&s, m, 3, live, 2, 8, 20.0);
    source_on_view(&s, live, 2, m, 3, 8, 20.1);
    assert_int_equal(s.n, 0);
    /* ... but not back as a new run of its id (a restart: joining, or serving from a later
     * step): its previous run's forwards may be counted downstream, so its microbatches
     * still go as re-sends (sim heavy 3x2 seed 950165) */
    source_on_view(&s, m, 3, live, 2, 8, 30.0);
    msg_member_t back[3] = {m[0], m[1], m[2]};
    back[1].state = MEMBER_JOINING;
    source_on_view(&s, live, 2, back, 3, 8, 30.1);
    assert_int_equal(s.n, 1);
    back[1].state = MEMBER_SERVING, back[1].serving_from = 9;
    source_on_view(&s, back, 3, back, 3, 8, 30.2);
    assert_int_equal(s.n, 1);
    assert_int_equal(source_owner(&s, live, 2, heir, key, 8, 33.0, 2.0), SOURCE_MINE_AGAIN);
    back[1].serving_from = 0; /* the owner it was: a false death, healed */
    source_on_view(&s, back, 3, back, 3, 8, 33.1);
    assert_int_equal(s.n, 0);
    /* members of other stages never noted */
    m[1].stage = 1;
    source_on_view(&s, m, 3, live, 2, 8, 21.0);
    assert_int_equal(s.n, 0);
}

/* Custody's wait (sim mild 3x2 seed 1140): the hop nearest a loss re-sends first, so two
 * hops never re-send one loss at once; the wait adapts to the forwards' round trips but
 * never undercuts the fixed time, and one very late gradient does not raise it past
 * CUSTODY_RTO_CAP times that. */
static void test_custody_wait(void **state)
{
    (void)state;
    /* 3 stages: stage 0 waits for both later hops, stage 1 for one */
    assert_true(fabs(custody_wait(60, 2, 2, NULL) - 60) < 1e-9);
    assert_true(fabs(custody_wait(60, 1, 2, NULL) - 30) < 1e-9);
    assert_true(custody_wait(60, 1, 2, NULL) < custody_wait(60, 2, 2, NULL));
    rtt_t r;
    memset(&r, 0, sizeof r);
    rtt_note(&r, 0.5); /* fast round trips: the fixed time is the floor */
    assert_true(fabs(custody_wait(10, 1, 1, &r) - 10) < 1e-9);
    for (int i = 0; i < 8; i++) rtt_note(&r, 20.0); /* slow ones: the wait follows ... */
    double w = custody_wait(10, 1, 1, &r);
    assert_true(w > 10 && w <= 30 + 1e-9);
    rtt_note(&r, 1000.0); /* ... up to the cap */
    assert_true(fabs(custody_wait(10, 1, 1, &r) - CUSTODY_RTO_CAP * 10) < 1e-9);
}

/* How long a gone stage-0 owner's microbatches wait (source.h): two failure timeouts
 * before any round trip is known, 1.5 x the round trips' rto after, never past custody_s;
 * and a stall's one long round trip, which lifts rttvar far more than srtt, does not set
 * it: at most 3 x srtt (or the unknown case's wait, when longer). */
static void test_custody_settle(void **state)
{
    (void)state;
    rtt_t r;
    memset(&r, 0, sizeof r);
    assert_true(fabs(custody_settle(&r, 3, 60) - 6) < 1e-9); /* none known: 2 x 3 s */
    assert_true(fabs(custody_settle(&r, 3, 5) - 5) < 1e-9);  /* ... at most custody_s */
    for (int i = 0; i < 16; i++) rtt_note(&r, 2.0); /* a steady pace: 1.5 x rto */
    double steady = 1.5 * rtt_rto(&r);
    assert_true(fabs(custody_settle(&r, 0.5, 60) - steady) < 1e-9);
    for (int i = 0; i < 16; i++) rtt_note(&r, 0.1); /* fast again */
    rtt_note(&r, 18.0); /* one round trip across a stall */
    double capped = custody_settle(&r, 3, 60);
    assert_true(1.5 * rtt_rto(&r) > 20);           /* the rto alone: half a minute */
    assert_true(fabs(capped - fmax(6, SETTLE_SRTTS * r.srtt)) < 1e-9);
    assert_true(capped < 10);
    assert_true(fabs(custody_settle(&r, 0.1, 60) - SETTLE_SRTTS * r.srtt) < 1e-9); /* short timeout */
}

/* Custody's re-route rules: a forward whose next peer is gone (or moved to another
 * stage), re-syncing, refused, or silent past its wait is sent elsewhere; a revisit,
 * which only its first visit's peer may take, is dropped when that peer refuses it (not
 * when it is busy), and neither its stage nor its state is asked (its entry may lag). */
static void test_custody_reroute(void **state)
{
    (void)state;
    msg_member_t nx = {.stage = 1, .state = MEMBER_SERVING};
    custody_case_t c = {.sent = 1, .sent_at = 100, .wait_s = 5, .next = &nx, .next_stage = 1};
    const char *why;
    assert_int_equal(custody_act(&c, 104.9, &why), CUSTODY_KEEP);
    assert_int_equal(custody_act(&c, 105.0, &why), CUSTODY_REROUTE);
    assert_string_equal(why, "no gradient back in time");
    c.next = NULL;
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_REROUTE);
    assert_string_equal(why, "its next peer is gone");
    nx.stage = 2; /* moved away */
    c.next = &nx;
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_REROUTE);
    nx.stage = 1, nx.state = MEMBER_JOINING;
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_REROUTE);
    assert_string_equal(why, "its next peer is re-syncing");
    c.revisit = 1; /* a revisit: its first visit's peer, whatever its entry says */
    nx.stage = 0;
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_KEEP);
    c.nack = "refused (not serving)";
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_DROP);
    c.nack = "busy";
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_REROUTE);
    c.revisit = 0, c.nack = "refused (stale step)";
    nx.stage = 1, nx.state = MEMBER_SERVING;
    assert_int_equal(custody_act(&c, 101, &why), CUSTODY_REROUTE);
    c.sent = 0; /* not sent yet: nothing to decide here */
    assert_int_equal(custody_act(&c, 1e9, &why), CUSTODY_KEEP);
    /* the tick's time rule alone: the next peer's entry is not its business */
    custody_case_t t = {.sent = 1, .sent_at = 100, .wait_s = 5, .next = NULL, .next_stage = 1};
    assert_int_equal(custody_overdue(&t, 104.9, &why), CUSTODY_KEEP);
    assert_null(why);
    assert_int_equal(custody_overdue(&t, 105.0, &why), CUSTODY_REROUTE);
    assert_string_equal(why, "no gradient back in time");
    t.sent = 0;
    assert_int_equal(custody_overdue(&t, 1e9, &why), CUSTODY_KEEP);
}

/* The run's definition (docs/protocol.md 7.6): a founder's text carries the training
 * options and swarm.wait_peers; a joiner reads back the same; the swarm id follows the
 * text and the founder; a malformed swarm line and an unknown key are refused. */
static void test_run_def(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    uint8_t founder[32] = {7}, other[32] = {8};
    train_options_t t = train_defaults();
    t.steps = 123;
    run_def_t a, b, c;
    assert_int_equal(run_def_found(&a, &t, 3, founder, err), 0);
    assert_non_null(strstr(a.text, "swarm.wait_peers=3\n"));
    assert_int_equal(run_def_read(&b, (const uint8_t *)a.text, strlen(a.text), a.swarm, err), 0);
    assert_int_equal(b.wait_peers, 3);
    assert_int_equal(b.train.steps, 123);
    assert_true(b.swarm == a.swarm);
    assert_int_equal(run_def_found(&c, &t, 3, other, err), 0);
    assert_true(c.swarm != a.swarm); /* another founder: another swarm */
    char bad[RUN_DEF_TEXT_MAX];
    snprintf(bad, sizeof bad, "%.*sswarm.wait_peers=-1\n",
             (int)(strstr(a.text, "swarm.") - a.text), a.text);
    assert_int_equal(run_def_read(&b, (const uint8_t *)bad, strlen(bad), 1, err), STATUS_EMALFORMED);
    snprintf(bad, sizeof bad, "no_such_key=1\n%s", a.text);
    assert_int_equal(run_def_read(&b, (const uint8_t *)bad, strlen(bad), 1, err), STATUS_EMALFORMED);
    /* a text cut short anywhere is refused (a cut WELCOME frame; sim corrupt seed 303) */
    size_t full = strlen(a.text);
    for (size_t cut = 0; cut < full; cut++)
        assert_int_equal(run_def_read(&b, (const uint8_t *)a.text, cut, 1, err), STATUS_EMALFORMED);
    assert_int_equal(run_def_read(&b, (const uint8_t *)a.text, full, 1, err), 0);
}

/* The pool's choice among a step's messages when two count the same microbatch (a share
 * run again while the first message was on the way): the origin that counts more enters
 * whole, the other is left out whole; a refused message never enters; equals: the
 * smaller id. msgs are in the order the member sorts them (origin, then part). */
static pool_msg_t pick_msg(int origin, int part, unsigned bits, uint8_t *store)
{
    pool_msg_t m = {.part = part, .counted = store};
    id_of(m.origin, origin);
    store[0] = (uint8_t)bits;
    return m;
}

static void test_pool_pick(void **state)
{
    (void)state;
    uint8_t s[4][1];
    int take[4], out[4] = {0};
    /* A counts {0,3}, B {1,2,3}: B (3) enters, A (2) is left out whole (was: A first by id,
     * 2 of 4 counted; sim heavy seed 6101891) */
    pool_msg_t a = pick_msg(1, 0, 0x9, s[0]), b = pick_msg(2, 0, 0xE, s[1]);
    const pool_msg_t *m1[] = {&a, &b};
    assert_int_equal(pool_pick(m1, 2, out, 4, take), 0);
    assert_int_equal(take[0], 0);
    assert_int_equal(take[1], 1);
    /* A's share in two parts, {0} then the re-run {3}: part 0 and B enter, A's part 1 not */
    pool_msg_t a0 = pick_msg(1, 0, 0x1, s[0]), a1 = pick_msg(1, 1, 0x8, s[2]);
    const pool_msg_t *m2[] = {&a0, &a1, &b};
    assert_int_equal(pool_pick(m2, 3, out, 4, take), 0);
    assert_true(take[0] && !take[1] && take[2]);
    /* weighed by part 0 alone: C's part 0 {3} and part 1 {0,1,2} (4 in all) against D's
     * part 0 {0,1,2}: D first, as on a member that has not seen C's part 1 (sim pause seed
     * 60069: the two weighed differently and applied different updates) */
    uint8_t s2[3][1];
    pool_msg_t c0 = pick_msg(1, 0, 0x8, s2[0]), c1 = pick_msg(1, 1, 0x7, s2[1]),
               d0 = pick_msg(2, 0, 0x7, s2[2]);
    const pool_msg_t *m5[] = {&c0, &c1, &d0}, *m6[] = {&c0, &d0};
    assert_int_equal(pool_pick(m5, 3, out, 4, take), 0);
    assert_true(take[0] && !take[1] && take[2]);
    assert_int_equal(pool_pick(m6, 2, out, 4, take), 0);
    assert_true(take[0] && take[1]);
    /* every part 0 before any supplement: E's part 0 {0,1,3} and its re-run {2} in part 1,
     * F's part 0 {2}: E's and F's part 0 enter, E's part 1 not, as on a member that has not
     * seen E's part 1 yet (sim corrupt 6x3 seed 15: the two took different bodies) */
    uint8_t s3[3][1];
    pool_msg_t e0 = pick_msg(1, 0, 0xB, s3[0]), e1 = pick_msg(1, 1, 0x4, s3[1]),
               f0 = pick_msg(2, 0, 0x4, s3[2]);
    const pool_msg_t *m7[] = {&e0, &e1, &f0}, *m8[] = {&e0, &f0};
    assert_int_equal(pool_pick(m7, 3, out, 4, take), 0);
    assert_true(take[0] && !take[1] && take[2]);
    assert_int_equal(pool_pick(m8, 2, out, 4, take), 0);
    assert_true(take[0] && take[1]);
    /* supplements heaviest first: G {0} + the re-send {1} in a part of its own, H {2} + a
     * supplement {1,3} (its first run of 1, and 3): H's supplement enters, G's re-send not,
     * all 4 counted (in id order G's re-send came first and pushed out 3: sim pause 8x4
     * seed 7065) */
    uint8_t s4[4][1];
    pool_msg_t g0 = pick_msg(1, 0, 0x1, s4[0]), g1 = pick_msg(1, 1, 0x2, s4[1]),
               h0 = pick_msg(2, 0, 0x4, s4[2]), h1 = pick_msg(2, 1, 0xA, s4[3]);
    const pool_msg_t *m9[] = {&g0, &g1, &h0, &h1};
    int take4[4];
    assert_int_equal(pool_pick(m9, 4, out, 4, take4), 0);
    assert_true(take4[0] && !take4[1] && take4[2] && take4[3]);
    /* B refused (the guard): A enters whole although B counts more */
    int out2[3] = {0, 0, 1};
    assert_int_equal(pool_pick(m2, 3, out2, 4, take), 0);
    assert_true(take[0] && take[1] && !take[2]);
    /* equal weights: the smaller id enters; disjoint messages all enter */
    pool_msg_t c = pick_msg(3, 0, 0x6, s[3]), d = pick_msg(1, 0, 0x3, s[0]);
    const pool_msg_t *m3[] = {&d, &c};
    assert_int_equal(pool_pick(m3, 2, out, 4, take), 0);
    assert_true(take[0] && !take[1]);
    pool_msg_t e = pick_msg(1, 0, 0x3, s[0]), f = pick_msg(3, 0, 0xC, s[3]);
    const pool_msg_t *m4[] = {&e, &f};
    assert_int_equal(pool_pick(m4, 2, out, 4, take), 0);
    assert_true(take[0] && take[1]);
}

/* A table entry: member k of stage s, serving, contributing unless `following`. */
static msg_member_t entry(int k, int s, int following)
{
    msg_member_t m = {.stage = (int16_t)s, .state = MEMBER_SERVING, .step = 10};
    id_of(m.id, k);
    m.serving_from = following ? 1010 : 3;
    return m;
}

/* Who moves to rebuild a lost stage: every member computes the same from the same table,
 * and exactly one candidate moves (sim stage faults found each rule). */
/* Asks every member of t[0, n) where it moves for the lost stage: -1 when nobody does,
 * else the one member that does (its index), which must move to `to`. */
static int the_mover(const msg_member_t *t, int n, int lost, int to)
{
    int who = -1;
    for (int i = 0; i < n; i++) {
        int at = recover_mover_target(t, n, t[i].id, 4, 0x5ca1ab1e, lost);
        if (at < 0) continue;
        assert_int_equal(at, to);
        assert_int_equal(who, -1); /* one mover per table */
        who = i;
    }
    return who;
}

static void test_recover_mover(void **state)
{
    (void)state;
    /* 4 stages; middle stage 2 lost; stage 1 has two (spare), stage 3 one, stage 0 three:
     * a neighbour's spare pool first, not stage 0's */
    msg_member_t t1[] = {entry(1, 0, 0), entry(2, 0, 0), entry(3, 0, 0), entry(4, 1, 0),
                         entry(5, 1, 0), entry(6, 3, 0)};
    int w = the_mover(t1, 6, 2, 2);
    assert_true(w >= 0 && t1[w].stage == 1);
    /* both neighbours spare: the pool before the lost stage, which keeps a copy of its
     * blocks, over the one after it (for every key: the mover is always of stage 1) */
    for (int k = 0; k < 8; k++) {
        msg_member_t tk[] = {entry(1 + 8 * k, 0, 0), entry(2 + 8 * k, 1, 0), entry(3 + 8 * k, 1, 0),
                             entry(4 + 8 * k, 3, 0), entry(5 + 8 * k, 3, 0), entry(6 + 8 * k, 3, 0)};
        w = the_mover(tk, 6, 2, 2);
        assert_true(w >= 0 && tk[w].stage == 1);
    }
    /* ... a contributor of it: when its spare members only follow (no copy yet), any
     * member of a spare neighbouring pool, not stage 0's */
    msg_member_t tf[] = {entry(1, 0, 0), entry(9, 0, 0), entry(2, 1, 1), entry(3, 1, 1),
                         entry(4, 3, 0), entry(5, 3, 0)};
    w = the_mover(tf, 6, 2, 2);
    assert_true(w >= 0 && (tf[w].stage == 1 || tf[w].stage == 3));
    /* no spare neighbour: any spare pool (stage 0) */
    msg_member_t t2[] = {entry(1, 0, 0), entry(2, 0, 0), entry(4, 1, 0), entry(6, 3, 0)};
    w = the_mover(t2, 4, 2, 2);
    assert_true(w >= 0 && t2[w].stage == 0);
    /* the last stage lost: its neighbour's spare pool, a contributor rather than a
     * follower (a follower has no copy of the head yet) */
    msg_member_t t3[] = {entry(1, 0, 0), entry(4, 2, 1), entry(5, 2, 0), entry(7, 1, 0)};
    w = the_mover(t3, 4, 3, 3);
    assert_true(w >= 0 && t3[w].id[0] == 5);
    /* ... its neighbour has one member: a member of another spare pool moves into the
     * neighbour's pool first (the cascade) */
    msg_member_t t4[] = {entry(1, 0, 0), entry(2, 0, 0), entry(5, 2, 0), entry(7, 1, 0)};
    w = the_mover(t4, 4, 3, 2);
    assert_true(w >= 0 && t4[w].stage == 0);
    /* ... unless one is on its way there (two members listed at stage 2, one joining) */
    msg_member_t t5[] = {entry(1, 0, 0), entry(2, 0, 0), entry(5, 2, 0), entry(8, 2, 0),
                         entry(7, 1, 0)};
    t5[3].state = MEMBER_JOINING;
    assert_int_equal(the_mover(t5, 5, 3, -2), -1);
    /* nobody to spare: nobody moves */
    msg_member_t t6[] = {entry(1, 0, 0), entry(4, 1, 0), entry(6, 3, 0)};
    assert_int_equal(the_mover(t6, 3, 2, -2), -1);
}

/* CheckFree's average: the neighbour whose gradients are smaller weighs more. */
static void test_recover_blend(void **state)
{
    (void)state;
    float wa[2] = {1.0f, 2.0f}, wb[2] = {3.0f, 6.0f}, out[2];
    recover_blend(out, wa, 1.0f, wb, 1.0f, 2); /* equal norms: the mean */
    assert_float_equal(out[0], 2.0f, 1e-5);
    assert_float_equal(out[1], 4.0f, 1e-5);
    recover_blend(out, wa, 3.0f, wb, 1.0f, 2); /* a's gradients 3x b's: b weighs 3x */
    assert_float_equal(out[0], (1.0001 * 3.0 + 3.0001 * 1.0) / 4.0002, 1e-5);
    assert_true(out[0] < 2.0f);
    recover_blend(out, wa, 0.0f, wb, 0.0f, 2); /* no norms known: the mean, not NaN */
    assert_float_equal(out[1], 4.0f, 1e-5);
}

/* CheckFree+'s copies within their budget of the wire. */
static void test_recover_copy_due(void **state)
{
    (void)state;
    assert_true(recover_copy_due(0, 0, 0, 25, 0, 1000, 0.05, 0)); /* the first at once */
    assert_false(recover_copy_due(1, 20, 0, 25, 1000, 1000, 0.05, 1000000)); /* too soon */
    assert_true(recover_copy_due(1, 25, 0, 25, 1000, 1000, 0.05, 1000000));  /* 2000 <= 50000 */
    assert_false(recover_copy_due(1, 25, 0, 25, 49500, 1000, 0.05, 1000000)); /* over budget */
    assert_false(recover_copy_due(1, 100, 0, 25, 1000, 1000, 0.0, 1000000)); /* budget 0 */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_norm_scale),
        cmocka_unit_test(test_guard_expulsion),
        cmocka_unit_test(test_guard_table_full),
        cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_rebal_streak_and_cooldown),
        cmocka_unit_test(test_rebal_reverse_memory),
        cmocka_unit_test(test_val_rounds),
        cmocka_unit_test(test_val_round_due),
        cmocka_unit_test(test_follow_join_margin),
        cmocka_unit_test(test_follow_watch),
        cmocka_unit_test(test_follow_heard),
        cmocka_unit_test(test_follow_gather),
        cmocka_unit_test(test_follow_behind),
        cmocka_unit_test(test_join_start),
        cmocka_unit_test(test_source_gone_owner),
        cmocka_unit_test(test_custody_wait),
        cmocka_unit_test(test_custody_settle),
        cmocka_unit_test(test_custody_reroute),
        cmocka_unit_test(test_run_def),
        cmocka_unit_test(test_pool_pick),
        cmocka_unit_test(test_recover_mover),
        cmocka_unit_test(test_recover_blend),
        cmocka_unit_test(test_recover_copy_due),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
