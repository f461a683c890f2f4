/* test_xfer.c — unit tests of swarm/xfer's downloads driven against real snapshots: a
 * whole state (several chunks, hash checked), a range of it (CheckFree+'s copies: an
 * unaligned start, a part of a chunk, a range over a chunk boundary), a range whose
 * donor moves to a newer snapshot midway, and the ranges xfer_new_range refuses.
 * Not for: the wire layout of STATE_REQ/REP (test_msg.c) or peers (test_swarm.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "swarm/xfer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Answers every request from snap (or the refusal) until the download is done; returns
 * the rounds it took. */
static int run_download(xfer_t *x, xfer_snap_t *snap, int newer_at)
{
    msg_member_t donor;
    memset(&donor, 0, sizeof donor);
    donor.id[0] = 7;
    donor.state = MEMBER_SERVING;
    double now = 1.0;
    for (int round = 0; round < 100; round++, now += 0.1) {
        if (xfer_done(x) == 1) return round;
        if (round == newer_at) { /* the donor moves on: a new snapshot, other bytes */
            for (size_t i = 0; i < snap->total; i++) snap->buf[i] ^= 0x5a;
            xfer_snap_seal(snap, snap->step + 1);
        }
        xfer_req_t req[8];
        int n = xfer_next_requests(x, now, &donor, 1, 5.0, req, 8);
        for (int i = 0; i < n; i++) {
            assert_true(req[i].req.offset >= xfer_offset(x));
            assert_true(req[i].req.offset + req[i].req.length <= xfer_offset(x) + xfer_length(x));
            msg_t rep;
            const uint8_t *d;
            size_t len;
            char err[256];
            if (xfer_serve(snap, &req[i].req, &rep, &d, &len, err)) {
                xfer_on_refusal(x, donor.id);
                continue;
            }
            memcpy(rep.sender, donor.id, MSG_ID_LEN);
            xfer_on_reply(x, &rep, d, len, now);
        }
    }
    return -1;
}

static void fill(xfer_snap_t *s, size_t total, int64_t step)
{
    assert_int_equal(xfer_snap_reserve(s, total), 0);
    for (size_t i = 0; i < total; i++) s->buf[i] = (uint8_t)(i * 131 + (i >> 9));
    xfer_snap_seal(s, step);
}

static void test_whole_and_ranges(void **state)
{
    (void)state;
    const size_t total = 2 * XFER_CHUNK + 12345;
    xfer_snap_t snap = {.step = -1};
    fill(&snap, total, 4);
    const struct {
        size_t off, len;
    } cases[] = {{0, total},                 /* whole: the hash is checked */
                 {0, 65536},                 /* stage 0's embedding: a chunk's start */
                 {total - 66000, 66000},     /* the last stage's head: unaligned */
                 {XFER_CHUNK - 100, 300},    /* over a chunk boundary */
                 {1000, XFER_CHUNK + 5000}}; /* more than a chunk from an odd start */
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        xfer_t *x = xfer_new_range(3, total, cases[k].off, cases[k].len);
        assert_non_null(x);
        assert_int_equal(xfer_offset(x), cases[k].off);
        assert_int_equal(xfer_length(x), cases[k].len);
        assert_true(run_download(x, &snap, -1) >= 0);
        assert_int_equal(xfer_step(x), 4);
        assert_memory_equal(xfer_data(x), snap.buf + cases[k].off, cases[k].len);
        xfer_destroy(&x);
    }
    xfer_snap_free(&snap);
}

/* A donor that takes a newer snapshot midway: the range starts over and ends with
 * bytes of one snapshot only. */
static void test_range_restarts(void **state)
{
    (void)state;
    const size_t total = 3 * XFER_CHUNK;
    xfer_snap_t snap = {.step = -1};
    fill(&snap, total, 10);
    xfer_t *x = xfer_new_range(1, total, 500, 2 * XFER_CHUNK);
    assert_true(run_download(x, &snap, 1) >= 0); /* after the first chunk came */
    assert_int_equal(xfer_step(x), 11);
    assert_true(xfer_restarts(x) >= 1);
    assert_memory_equal(xfer_data(x), snap.buf + 500, 2 * XFER_CHUNK);
    xfer_destroy(&x);
    xfer_snap_free(&snap);
}

static void test_bad_ranges(void **state)
{
    (void)state;
    assert_null(xfer_new_range(0, 100, 101, 0));
    assert_null(xfer_new_range(0, 100, 50, 51));
    assert_null(xfer_new_range(0, 100, 10, 0));
    assert_null(xfer_new_range(0, 100, 0, SIZE_MAX));
    xfer_t *x = xfer_new_range(0, 100, 99, 1);
    assert_non_null(x);
    xfer_destroy(&x);
    xfer_destroy(&x); /* NULL-safe */
}

/* A donor that refused (its snapshot gone, or not serving) is left out for XFER_SHUN_S,
 * then asked again; with no other donor the download waits for it (sim stage seeds
 * 5000561, 5001587, 5002314: asked again at once, 50 times in 0.25 s). */
static void test_refusal_shun(void **state)
{
    (void)state;
    xfer_t *x = xfer_new(0, 4 * XFER_CHUNK);
    assert_non_null(x);
    msg_member_t d[2] = {{.stage = 0, .state = MEMBER_SERVING}, {.stage = 0, .state = MEMBER_SERVING}};
    d[0].id[0] = 1, d[1].id[0] = 2;
    xfer_req_t req[8];
    int k = xfer_next_requests(x, 10.0, d, 2, 5.0, req, 8); /* the first, fresh request */
    assert_int_equal(k, 1);
    int first = req[0].to[0];
    xfer_on_refusal(x, req[0].to);
    /* within the second: only the other donor is asked, however often */
    for (double t = 10.0; t < 10.9; t += 0.1) {
        k = xfer_next_requests(x, t, d, 2, 5.0, req, 8);
        for (int i = 0; i < k; i++) assert_int_not_equal(req[i].to[0], first);
    }
    /* the only donor refused: nothing is asked of it within the second */
    xfer_t *y = xfer_new(0, XFER_CHUNK);
    assert_non_null(y);
    assert_int_equal(xfer_next_requests(y, 20.0, d, 1, 5.0, req, 8), 1);
    xfer_on_refusal(y, d[0].id);
    assert_int_equal(xfer_next_requests(y, 20.5, d, 1, 5.0, req, 8), 0);
    assert_int_equal(xfer_next_requests(y, 21.1, d, 1, 5.0, req, 8), 1); /* then again */
    assert_int_equal(req[0].to[0], 1);
    xfer_destroy(&y);
    xfer_destroy(&x);
}

/* A snapshot is in use while its chunks are being served: for XFER_IN_USE_S after the
 * last one, whichever side served it; never before the first. Its member keeps it then
 * (peer/state.c), so that a download slower than a snapshot stays fresh ends. */
static void test_shared_in_use(void **state)
{
    (void)state;
    xfer_shared_t *s = xfer_shared_new(0, 16);
    assert_non_null(s);
    assert_false(xfer_shared_in_use(s, 100.0)); /* nobody asked yet */
    xfer_shared_served(s, 100.0);
    assert_true(xfer_shared_in_use(s, 100.0));
    assert_true(xfer_shared_in_use(s, 100.0 + XFER_IN_USE_S - 0.01));
    assert_false(xfer_shared_in_use(s, 100.0 + XFER_IN_USE_S + 0.01));
    xfer_shared_served(s, 104.0); /* the next chunk: in use again */
    assert_true(xfer_shared_in_use(s, 105.0));
    xfer_shared_unref(&s);
    assert_null(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_and_ranges),
        cmocka_unit_test(test_range_restarts),
        cmocka_unit_test(test_bad_ranges),
        cmocka_unit_test(test_refusal_shun),
        cmocka_unit_test(test_shared_in_use),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
