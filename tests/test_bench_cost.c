/* test_bench_cost.c — what `bench learn`'s total is made of (tools/bench_cost.c): each part
 * one row's final validation loss over another's less one, as a mean over the seeds both
 * rows have with their range; the mechanisms summed and the rest (all together less the
 * sum) from the parts' means, their range over the seeds every part has; a part whose rows
 * are not in the table, or share no seed, left out.
 * Not for: the rows' runs or the printed line (tests/test_bench_learn.c reads the JSON). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "tools/bench_cost.h"

#include <math.h>

#define EPS 1e-12

/* Two seeds of every row. The expectations are computed as the code does (a / b - 1), so
 * they agree to EPS. */
static const double adamw[2] = {1.00, 2.00}, demo_train[2] = {1.10, 1.90},
                    swarm_demo[2] = {1.21, 2.09}, full[2] = {1.50, 2.50}, codec[2] = {1.331, 2.09},
                    skip[2] = {1.089, 2.299};

static bench_cost_in_t whole(void)
{
    return (bench_cost_in_t){.seeds = 2,
                             .adamw = adamw,
                             .full = full,
                             .demo_train = demo_train,
                             .swarm_demo = swarm_demo,
                             .nmech = 2,
                             .mech = {codec, skip},
                             .mech_name = {"codec", "skip"},
                             .full_mechs = 2};
}

static void assert_near(double x, double want)
{
    assert_true(fabs(x - want) < EPS);
}

/* The part named `name` in c[0, n): there, with this mean, range and seed count. */
static void assert_part(const bench_cost_t *c, int n, const char *name, double mean, double lo,
                        double hi, int seeds)
{
    const bench_cost_t *p = bench_cost_find(c, n, name);
    assert_non_null(p);
    assert_near(p->mean, mean);
    assert_int_equal(p->seeds, seeds);
    if (seeds) {
        assert_near(p->min, lo);
        assert_near(p->max, hi);
    } else {
        assert_true(isnan(p->min) && isnan(p->max));
    }
}

static void test_whole_table(void **state)
{
    (void)state;
    bench_cost_in_t in = whole();
    bench_cost_t c[BENCH_COST_MAX];
    int n = bench_costs(&in, c);
    assert_int_equal(n, 8);
    const char *order[] = {"optimizer", "swarm",    "execution", "codec",
                           "skip",      "together", "summed",    "rest"};
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order[i]);
    for (int i = 0; i < n; i++) assert_int_equal(c[i].mech, i == 3 || i == 4);

    double opt[2] = {1.10 / 1.00 - 1, 1.90 / 2.00 - 1};
    assert_part(c, n, "optimizer", (opt[0] + opt[1]) / 2, fmin(opt[0], opt[1]),
                fmax(opt[0], opt[1]), 2);
    double sw[2] = {1.50 / 1.10 - 1, 2.50 / 1.90 - 1};
    assert_part(c, n, "swarm", (sw[0] + sw[1]) / 2, fmin(sw[0], sw[1]), fmax(sw[0], sw[1]), 2);
    double ex[2] = {1.21 / 1.10 - 1, 2.09 / 1.90 - 1};
    assert_part(c, n, "execution", (ex[0] + ex[1]) / 2, fmin(ex[0], ex[1]), fmax(ex[0], ex[1]), 2);
    double cd[2] = {1.331 / 1.21 - 1, 2.09 / 2.09 - 1},
           sk[2] = {1.089 / 1.21 - 1, 2.299 / 2.09 - 1};
    assert_part(c, n, "codec", (cd[0] + cd[1]) / 2, fmin(cd[0], cd[1]), fmax(cd[0], cd[1]), 2);
    assert_part(c, n, "skip", (sk[0] + sk[1]) / 2, fmin(sk[0], sk[1]), fmax(sk[0], sk[1]), 2);
    double tg[2] = {1.50 / 1.21 - 1, 2.50 / 2.09 - 1};
    assert_part(c, n, "together", (tg[0] + tg[1]) / 2, fmin(tg[0], tg[1]), fmax(tg[0], tg[1]), 2);
    /* summed: the means added; per seed, each seed's costs added */
    double sum[2] = {cd[0] + sk[0], cd[1] + sk[1]};
    double summed = (cd[0] + cd[1]) / 2 + (sk[0] + sk[1]) / 2;
    assert_part(c, n, "summed", summed, fmin(sum[0], sum[1]), fmax(sum[0], sum[1]), 2);
    double rest[2] = {tg[0] - sum[0], tg[1] - sum[1]};
    assert_part(c, n, "rest", (tg[0] + tg[1]) / 2 - summed, fmin(rest[0], rest[1]),
                fmax(rest[0], rest[1]), 2);
    /* the rest is not nothing here: the parts do not add up to the whole */
    assert_true(bench_cost_find(c, n, "rest")->mean > 0.05);
}

/* A mechanism row one seed of which is missing: its part is over the other seed, the sum's
 * mean takes that part's mean, the sum's and the rest's range only the seed every part
 * has. A mechanism row with no seed at all is left out, and with it the sum and the rest:
 * the others' sum would be a piece of the total, and the rest would hold its cost. */
static void test_missing_seeds(void **state)
{
    (void)state;
    bench_cost_in_t in = whole();
    const double codec1[2] = {NAN, 2.299};
    in.mech[0] = codec1;
    bench_cost_t c[BENCH_COST_MAX];
    int n = bench_costs(&in, c);
    assert_int_equal(n, 8);
    double cd = 2.299 / 2.09 - 1, sk[2] = {1.089 / 1.21 - 1, 2.299 / 2.09 - 1};
    assert_part(c, n, "codec", cd, cd, cd, 1);
    double tg[2] = {1.50 / 1.21 - 1, 2.50 / 2.09 - 1};
    double summed = cd + (sk[0] + sk[1]) / 2;
    assert_part(c, n, "summed", summed, cd + sk[1], cd + sk[1], 1);
    double rest1 = tg[1] - (cd + sk[1]);
    assert_part(c, n, "rest", (tg[0] + tg[1]) / 2 - summed, rest1, rest1, 1);

    const double none[2] = {NAN, NAN};
    in.mech[0] = none;
    n = bench_costs(&in, c);
    const char *order[] = {"optimizer", "swarm", "execution", "skip", "together"};
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order[i]);
}

/* Rows not in the table: without demo-train no part over it; without swarm-demo no
 * mechanism, no together, no sum (the quick form: AdamW, the full swarm, demo-train). */
static void test_rows_left_out(void **state)
{
    (void)state;
    bench_cost_in_t in = whole();
    in.demo_train = NULL;
    bench_cost_t c[BENCH_COST_MAX];
    int n = bench_costs(&in, c);
    const char *order[] = {"codec", "skip", "together", "summed", "rest"};
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order[i]);

    in = whole();
    in.swarm_demo = NULL;
    n = bench_costs(&in, c);
    assert_int_equal(n, 2);
    assert_string_equal(c[0].part, "optimizer");
    assert_string_equal(c[1].part, "swarm");

    in = whole();
    in.nmech = 0; /* swarm-demo and the full swarm, no mechanism row: no sum, no rest */
    n = bench_costs(&in, c);
    assert_int_equal(n, 4);
    assert_string_equal(c[3].part, "together");

    in.nmech = 1; /* one of the full swarm's two mechanisms: its part, still no sum */
    n = bench_costs(&in, c);
    const char *order1[] = {"optimizer", "swarm", "execution", "codec", "together"};
    assert_int_equal(n, 5);
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order1[i]);

    in = whole();
    in.seeds = 0;
    assert_int_equal(bench_costs(&in, c), 0);
}

/* The full swarm without one mechanism each (--leave-one-out): each mechanism's cost among
 * the others is the full swarm over the row without it, after the one-at-a-time parts;
 * their sum and the rest (together less it) after them. Without swarm-demo there is no
 * together: the parts among the others stay, their sum and rest go. */
static void test_leave_one_out(void **state)
{
    (void)state;
    static const double no_codec[2] = {1.25, 2.40}, no_skip[2] = {1.45, 2.20};
    bench_cost_in_t in = whole();
    in.nwithout = 2;
    in.without[0] = no_codec, in.without[1] = no_skip;
    in.without_name[0] = "codec", in.without_name[1] = "skip";
    bench_cost_t c[BENCH_COST_MAX];
    int n = bench_costs(&in, c);
    assert_int_equal(n, 12);
    const char *order[] = {"optimizer",    "swarm",       "execution",     "codec",
                           "skip",         "together",    "summed",        "rest",
                           "codec in all", "skip in all", "summed in all", "rest in all"};
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order[i]);
    for (int i = 0; i < n; i++)
        assert_int_equal(c[i].mech, i == 3 || i == 4 ? 1 : i == 8 || i == 9 ? 2 : 0);
    /* the mechanism's own name rides with its parts, alone and in all; the others have none */
    const char *name[] = {NULL, NULL, NULL,    "codec", "skip", NULL,
                          NULL, NULL, "codec", "skip",  NULL,   NULL};
    for (int i = 0; i < n; i++)
        if (name[i])
            assert_string_equal(c[i].name, name[i]);
        else
            assert_null(c[i].name);

    double cd[2] = {1.50 / 1.25 - 1, 2.50 / 2.40 - 1}, sk[2] = {1.50 / 1.45 - 1, 2.50 / 2.20 - 1};
    assert_part(c, n, "codec in all", (cd[0] + cd[1]) / 2, fmin(cd[0], cd[1]), fmax(cd[0], cd[1]),
                2);
    assert_part(c, n, "skip in all", (sk[0] + sk[1]) / 2, fmin(sk[0], sk[1]), fmax(sk[0], sk[1]),
                2);
    double sum[2] = {cd[0] + sk[0], cd[1] + sk[1]};
    double summed = (cd[0] + cd[1]) / 2 + (sk[0] + sk[1]) / 2;
    assert_part(c, n, "summed in all", summed, fmin(sum[0], sum[1]), fmax(sum[0], sum[1]), 2);
    double tg[2] = {1.50 / 1.21 - 1, 2.50 / 2.09 - 1};
    double rest[2] = {tg[0] - sum[0], tg[1] - sum[1]};
    assert_part(c, n, "rest in all", (tg[0] + tg[1]) / 2 - summed, fmin(rest[0], rest[1]),
                fmax(rest[0], rest[1]), 2);
    /* the one-at-a-time sum is what it was without these rows */
    double cd1[2] = {1.331 / 1.21 - 1, 2.09 / 2.09 - 1},
           sk1[2] = {1.089 / 1.21 - 1, 2.299 / 2.09 - 1};
    assert_near(bench_cost_find(c, n, "summed")->mean,
                (cd1[0] + cd1[1]) / 2 + (sk1[0] + sk1[1]) / 2);

    /* one row without a mechanism of the two: its part in all, no sum in all, no rest */
    in.nwithout = 1;
    n = bench_costs(&in, c);
    assert_int_equal(n, 9);
    assert_string_equal(c[8].part, "codec in all");
    assert_string_equal(c[7].part, "rest");

    in.nwithout = 2;
    in.swarm_demo = NULL;
    n = bench_costs(&in, c);
    const char *order2[] = {"optimizer", "swarm", "codec in all", "skip in all"};
    assert_int_equal(n, 4);
    for (int i = 0; i < n; i++) assert_string_equal(c[i].part, order2[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_table),
        cmocka_unit_test(test_missing_seeds),
        cmocka_unit_test(test_rows_left_out),
        cmocka_unit_test(test_leave_one_out),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
