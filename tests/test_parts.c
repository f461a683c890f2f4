/* test_parts.c — the member's parts driven alone, without a swarm and without a peer:
 * each rule the simulator found, on the part's own state (peer/guard.h, ...). */
#include "peer/guard.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_norm_scale),
        cmocka_unit_test(test_guard_expulsion),
        cmocka_unit_test(test_guard_table_full),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
