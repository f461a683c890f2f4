/* test_path.c — SkipPipe paths (swarm/path.h): the schedule is balanced per stage and per
 * microbatch, never skips the first or last stage, is a pure function of its inputs,
 * spreads each stage's visits over the step (no bursts), and the next/prev/hop helpers,
 * the pool's expected set and the stage-list parser agree with it; CheckFree+'s swap
 * schedule and the hops of a swapped path; a run that skips only in its first part
 * (skip_until) draws no skip from there, in train and in the pool alike. */
#include "common/status.h"
#include "model/train.h"
#include "swarm/path.h"
#include "swarm/pool.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

static int popcount(uint64_t x)
{
    int n = 0;
    for (; x; x &= x - 1) n++;
    return n;
}

/* Every (S, M, ratio, step): each middle stage is skipped floor or ceil of T/(S-2) times,
 * each microbatch skips floor or ceil of T/M stages, T = round(ratio (S-2) M). */
static void test_balanced(void **state)
{
    (void)state;
    static const double ratios[] = {0, 0.1, 0.25, 0.5, 0.75, 1};
    for (int S = 1; S <= 9; S++)
        for (int M = 1; M <= 33; M += 4)
            for (size_t ri = 0; ri < sizeof ratios / sizeof *ratios; ri++)
                for (int64_t step = 0; step < 5; step++) {
                    double ratio = ratios[ri];
                    int m = S > 2 ? S - 2 : 0;
                    long T = S > 2 ? lround(ratio * m * M) : 0;
                    int skipped[PATH_STAGES_MAX] = {0};
                    for (int i = 0; i < M; i++) {
                        uint64_t k = path_skip(7, step, (uint32_t)i, M, S, ratio);
                        assert_true(path_valid(k, S));
                        assert_true(path_on(k, 0) && path_on(k, S - 1));
                        int n = popcount(k);
                        assert_true(n >= T / M && n <= (T + M - 1) / M);
                        for (int s = 0; s < S; s++) skipped[s] += !path_on(k, s);
                        /* pure: the same inputs give the same mask */
                        assert_true(k == path_skip(7, step, (uint32_t)i, M, S, ratio));
                    }
                    for (int s = 1; s < S - 1; s++)
                        assert_true(skipped[s] >= T / m && skipped[s] <= (T + m - 1) / m);
                }
}

/* Collision-aware: in any window of w consecutive microbatch indices, a middle stage's
 * visits stay within 2 of the window's even share (no stage gets a burst of what is in
 * flight together). */
static void test_no_bursts(void **state)
{
    (void)state;
    enum { S = 6, M = 32 };
    for (int64_t step = 0; step < 20; step++) {
        uint64_t k[M];
        for (int i = 0; i < M; i++) k[i] = path_skip(99, step, (uint32_t)i, M, S, 0.5);
        for (int w = 2; w <= 8; w++)
            for (int a = 0; a + w <= M; a++)
                for (int s = 1; s < S - 1; s++) {
                    int v = 0;
                    for (int i = a; i < a + w; i++) v += path_on(k[i], s);
                    double share = w * 0.5;
                    assert_true(v >= share - 2 && v <= share + 2);
                }
    }
}

/* Different steps and seeds draw different paths (the schedule is not fixed). */
static void test_varies(void **state)
{
    (void)state;
    int differ = 0;
    for (int64_t step = 1; step < 20; step++)
        for (uint32_t i = 0; i < 8; i++)
            differ += path_skip(1, step, i, 8, 6, 0.5) != path_skip(1, 0, i, 8, 6, 0.5);
    assert_true(differ > 20);
    differ = 0;
    for (uint32_t i = 0; i < 8; i++)
        differ += path_skip(1, 3, i, 8, 6, 0.5) != path_skip(2, 3, i, 8, 6, 0.5);
    assert_true(differ > 0);
    /* out-of-range input is no skip, never a crash */
    assert_true(path_skip(1, 0, 8, 8, 6, 0.5) == 0);
    assert_true(path_skip(1, 0, 0, 0, 6, 0.5) == 0);
    assert_true(path_skip(1, 0, 0, 8, 2, 0.5) == 0);
    assert_true(path_skip(1, 0, 0, 8, 6, -1) == 0);
}

static void test_walk(void **state)
{
    (void)state;
    uint64_t k = (1u << 2) | (1u << 3); /* S = 6: path 0 1 4 5 */
    assert_int_equal(path_next(k, 0, 6), 1);
    assert_int_equal(path_next(k, 1, 6), 4);
    assert_int_equal(path_next(k, 4, 6), 5);
    assert_int_equal(path_next(k, 5, 6), 6);
    /* the hops: each stage's hop number (the route a FWD to it carries) and the stage
     * before it */
    path_hop_t h[PATH_HOPS_MAX];
    assert_int_equal(path_hops(k, PATH_SWAP_NONE, 6, h), 4);
    assert_int_equal(h[0].stage, 0);
    assert_int_equal(h[1].stage, 1);
    assert_int_equal(h[2].stage, 4);
    assert_int_equal(h[3].stage, 5);
    assert_int_equal(path_hops(0, PATH_SWAP_NONE, 6, h), 6);
    assert_int_equal(h[5].stage, 5);
    assert_true(path_valid(k, 6));
    assert_false(path_valid(1, 6));
    assert_false(path_valid(1u << 5, 6));
    assert_false(path_valid(1u << 9, 6));
}

/* A pool with a path expects exactly the microbatches whose path visits its stage, and
 * is complete when those are counted. */
static void test_pool_expects_path(void **state)
{
    (void)state;
    enum { M = 12, S = 4 };
    pool_t *p = pool_new(M);
    assert_non_null(p);
    for (int stage = 0; stage < S; stage++) {
        pool_set_path(p, 5, S, 0.5, INT64_MAX, stage);
        for (int64_t step = 0; step < 4; step++) {
            pool_begin(p, step, 2);
            uint8_t want[2], bits[2] = {0};
            uint32_t n = path_expected(5, step, M, S, 0.5, stage, want);
            assert_memory_equal(pool_expected(p), want, 2);
            assert_int_equal(n, stage == 0 || stage == S - 1 ? M : M / 2);
            assert_false(pool_all(p, bits));
            for (int i = 0; i < M; i++)
                if (pool_bit(want, i)) pool_set_bit(bits, i);
            assert_true(pool_all(p, bits));
            for (int i = 0; i < M; i++)
                if (pool_bit(want, i)) {
                    bits[i >> 3] &= (uint8_t) ~(1u << (i & 7));
                    break;
                }
            assert_false(pool_all(p, bits));
        }
    }
    pool_destroy(&p);
}

/* skip_until: the first step that skips nothing is round(skip_until x steps); 0 and 1 mean
 * the whole run; the run text carries it only when it ends skipping early; the pool
 * expects every microbatch from that step on. */
static void test_skip_until(void **state)
{
    (void)state;
    train_options_t o = train_defaults();
    o.skip = 0.5, o.steps = 10;
    assert_true(train_skip_end(&o) == INT64_MAX);
    assert_true(train_skip_at(&o, 9) == 0.5);
    char text[4096], err[STATUS_ERR_LEN];
    train_options_to_text(&o, text, sizeof text);
    assert_null(strstr(text, "skip_until"));
    o.skip_until = 1;
    assert_true(train_skip_end(&o) == INT64_MAX);
    o.skip_until = 0.45; /* 4.5 steps: round half up */
    assert_int_equal(train_skip_end(&o), 5);
    assert_true(train_skip_at(&o, 4) == 0.5);
    assert_true(train_skip_at(&o, 5) == 0);
    train_options_to_text(&o, text, sizeof text);
    assert_non_null(strstr(text, "skip_until=0.45\n"));
    train_options_t back = train_defaults();
    assert_int_equal(train_options_from_text(&back, text, err), 0);
    assert_true(back.skip_until == o.skip_until && train_skip_end(&back) == 5);
    strcat(text, "skip_until=2\n"); /* out of range */
    assert_int_not_equal(train_options_from_text(&back, text, err), 0);

    enum { M = 12, S = 4 };
    pool_t *p = pool_new(M);
    assert_non_null(p);
    pool_set_path(p, 5, S, 0.5, 2, 1);
    for (int64_t step = 0; step < 4; step++) {
        pool_begin(p, step, 2);
        uint8_t want[2];
        uint32_t n = path_expected(5, step, M, S, step < 2 ? 0.5 : 0, 1, want);
        if (step >= 2) memset(want, 0, 2), n = M;
        for (int i = 0; step >= 2 && i < M; i++) pool_set_bit(want, i);
        assert_memory_equal(pool_expected(p), want, 2);
        assert_int_equal(n, step < 2 ? M / 2 : M);
    }
    pool_destroy(&p);
}

static void test_parse(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], buf[64];
    uint64_t k;
    assert_int_equal(path_parse_stages("1,2", 4, &k, err), 0);
    assert_true(k == 6);
    assert_string_equal(path_format(k, buf, sizeof buf), "1,2");
    assert_int_equal(path_parse_stages("1-3,5", 8, &k, err), 0);
    assert_true(k == 0x2e);
    assert_int_equal(path_parse_stages("", 8, &k, err), 0);
    assert_true(k == 0);
    assert_string_equal(path_format(0, buf, sizeof buf), "none");
    static const char *bad[] = {"0", "3", "1,", ",1", "x", "1-", "2-1", "1;2", "99", "-1"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        assert_int_equal(path_parse_stages(bad[i], 4, &k, err), -1);
}

/* CheckFree+ swaps: of any run of n microbatches (step by step) floor or ceil of share n
 * swap, FRONT and END in turn (S >= 3; only FRONT with S = 2); none without a share or
 * when the neighbour is skipped; a pure function. */
static void test_swap_schedule(void **state)
{
    (void)state;
    const double shares[] = {0.1, 0.25, 0.5, 0.9};
    for (int S = 2; S <= 6; S++)
        for (int M = 1; M <= 12; M++)
            for (size_t q = 0; q < sizeof shares / sizeof *shares; q++) {
                double sh = shares[q];
                int n[3] = {0, 0, 0}, g = 0;
                for (int64_t step = 0; step < 20; step++) {
                    int per = 0;
                    for (int i = 0; i < M; i++, g++) {
                        int w = path_swap(7, step, (uint32_t)i, M, S, sh, 0);
                        assert_true(w >= 0 && w <= 2);
                        assert_int_equal(w, path_swap(7, step, (uint32_t)i, M, S, sh, 0));
                        n[w]++;
                        per += w != 0;
                        assert_int_equal(path_swap(7, step, (uint32_t)i, M, S, 0, 0), 0);
                        assert_int_equal(path_swap(7, step, (uint32_t)i, M, S, 1, 0) != 0, 1);
                    }
                    assert_true(per >= (int)floor(sh * M) && per <= (int)ceil(sh * M));
                    assert_true(fabs(n[1] + n[2] - sh * g) < 1.0 + 1e-9);
                }
                if (S == 2) assert_int_equal(n[2], 0);
                else assert_true(abs(n[1] - n[2]) <= 1);
            }
    assert_int_equal(path_swap(7, 0, 0, 8, 1, 1, 0), PATH_SWAP_NONE);
    assert_int_equal(path_swap(7, 0, 0, 8, PATH_STAGES_MAX - 1, 1, 0), PATH_SWAP_NONE);
    /* a skipped neighbour: stage 1 (FRONT) or S-2 (END) off the path, no swap */
    for (uint32_t i = 0; i < 8; i++) {
        int w = path_swap(7, 3, i, 8, 5, 1, 0);
        uint64_t skip = w == PATH_SWAP_FRONT ? 1u << 1 : 1u << 3;
        assert_int_equal(path_swap(7, 3, i, 8, 5, 1, skip), PATH_SWAP_NONE);
    }
}

static void expect_hops(uint64_t skip, int swap, int S, const char *want)
{
    path_hop_t h[PATH_HOPS_MAX];
    int n = path_hops(skip, swap, S, h);
    char got[256] = "";
    static const char part[] = "aebh"; /* all, embedding, blocks, head */
    for (int i = 0; i < n; i++) {
        size_t w = strlen(got);
        snprintf(got + w, sizeof got - w, "%s%d%c", i ? " " : "", h[i].stage, part[h[i].part]);
    }
    assert_string_equal(got, want);
}

/* The hops of every kind of path, and which earlier visit a revisit goes back to. */
static void test_swap_hops(void **state)
{
    (void)state;
    expect_hops(0, PATH_SWAP_NONE, 3, "0a 1a 2a");
    expect_hops(0, PATH_SWAP_FRONT, 3, "0e 1a 0b 2a");
    expect_hops(0, PATH_SWAP_END, 3, "0a 2b 1a 2h");
    expect_hops(0, PATH_SWAP_FRONT, 2, "0e 1b 0b 1h");
    expect_hops(0, PATH_SWAP_FRONT, 1, "0a");
    expect_hops(1u << 2, PATH_SWAP_FRONT, 4, "0e 1a 0b 3a");
    expect_hops(1u << 1, PATH_SWAP_END, 4, "0a 3b 2a 3h");
    expect_hops(1u << 2, PATH_SWAP_END, 4, "0a 1a 3a"); /* S-2 skipped: no swap */
    expect_hops(1u << 1, PATH_SWAP_FRONT, 4, "0a 2a 3a");
    path_hop_t h[PATH_HOPS_MAX];
    int n = path_hops(0, PATH_SWAP_FRONT, 2, h);
    int first[4] = {0, 1, 0, 1};
    for (int i = 0; i < n; i++) assert_int_equal(path_first_visit(h, i), first[i]);
    n = path_hops(0, PATH_SWAP_END, 5, h);
    assert_int_equal(n, 6);
    assert_int_equal(path_first_visit(h, 5), 3);
    assert_int_equal(path_first_visit(h, 4), 4);
}

int main(void)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test(test_balanced),
        cmocka_unit_test(test_no_bursts),
        cmocka_unit_test(test_varies),
        cmocka_unit_test(test_walk),
        cmocka_unit_test(test_pool_expects_path),
        cmocka_unit_test(test_skip_until),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_swap_schedule),
        cmocka_unit_test(test_swap_hops),
    };
    return cmocka_run_group_tests(all, NULL, NULL);
}
