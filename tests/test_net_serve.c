/* test_net_serve.c — a donor's network thread answers chunk requests for the snapshot it
 * was handed (net_serve_state) by itself, while its compute thread is busy: two real
 * network threads on loopback; the donor's compute side (this test) reads nothing while
 * the joiner downloads the whole snapshot. Requests it does not hold (a fresh one, another
 * step, or any once it serves none) still reach the compute side. */
#include "common/clock.h"
#include "common/status.h"
#include "swarm/msg.h"
#include "swarm/net.h"
#include "swarm/xfer.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>

#define SNAP_BYTES ((size_t)24 << 20) /* 24 chunks */
#define SNAP_STEP  7

typedef struct {
    net_t *net;
    uint8_t id[MSG_ID_LEN];
    char ep[256];
} node_t;

static void node_start(node_t *n, int k, int founding)
{
    char err[STATUS_ERR_LEN];
    memset(n, 0, sizeof *n);
    n->id[0] = (uint8_t)k;
    net_config_t nc = {.bind = "tcp://127.0.0.1:0",
                       .heartbeat_s = 0.1,
                       .timeout_s = 30,
                       .swarm = founding ? 0x5e77e : 0,
                       .run_text = founding ? "stages=1\n" : NULL};
    memcpy(nc.id, n->id, MSG_ID_LEN);
    nc.self.state = MEMBER_SERVING;
    nc.self.loss = NAN;
    n->net = net_start(&nc, n->ep, err);
    if (!n->net) fail_msg("net_start: %s", err);
}

/* Waits until b was welcomed (it takes the swarm id, as a joiner's peer does) and its
 * view lists a. */
static void wait_member(node_t *b, const node_t *a)
{
    double end = clock_now() + 10;
    int welcomed = 0;
    net_ev_t ev;
    while (clock_now() < end) {
        if (net_recv(b->net, 100, &ev)) continue;
        if (ev.type == NET_EV_MSG && ev.msg.type == MSG_WELCOME) {
            net_set_run(b->net, ev.msg.swarm, "stages=1\n");
            welcomed = 1;
        }
        for (int i = 0; welcomed && ev.type == NET_EV_VIEW && i < ev.nmembers; i++)
            if (!memcmp(ev.members[i].id, a->id, MSG_ID_LEN)) return;
    }
    fail_msg("the joiner never saw the donor in its view");
}

static void ask(node_t *b, const node_t *a, int64_t step, uint64_t off)
{
    char err[STATUS_ERR_LEN];
    msg_t q = {.type = MSG_STATE_REQ, .stage = 0, .step = step, .offset = off, .length = XFER_CHUNK};
    assert_int_equal(net_send(b->net, a->id, &q, 0, NULL, NULL, err), 0);
}

/* How many STATE_REQ the compute side of a has been handed (it reads them all now). */
static int requests_seen(node_t *a, double wait_s)
{
    int k = 0;
    net_ev_t ev;
    double end = clock_now() + wait_s;
    while (clock_now() < end)
        if (!net_recv(a->net, 50, &ev) && ev.type == NET_EV_MSG && ev.msg.type == MSG_STATE_REQ) k++;
    return k;
}

static void test_served_while_busy(void **state)
{
    (void)state;
    node_t a, b;
    node_start(&a, 1, 1);
    node_start(&b, 2, 0);
    char err[STATUS_ERR_LEN];
    assert_int_equal(net_hello(b.net, a.ep, 0, err), 0);
    wait_member(&b, &a);

    xfer_shared_t *s = xfer_shared_new(0, SNAP_BYTES);
    assert_non_null(s);
    for (size_t i = 0; i < SNAP_BYTES; i++) s->snap.buf[i] = (uint8_t)(i * 2654435761u >> 13);
    xfer_snap_seal(&s->snap, SNAP_STEP);
    s->flags = 1;
    net_serve_state(a.net, s);

    /* The joiner downloads as a peer does (xfer.h: 2 chunks in flight, a chunk asked
     * again after 1 s unanswered). The donor's compute side answers the fresh request
     * (step -1: which snapshot is offered) as the peer does; no chunk request may reach it. */
    xfer_t *x = xfer_new(0, SNAP_BYTES);
    assert_non_null(x);
    msg_member_t donor = {.stage = 0, .state = MEMBER_SERVING, .step = SNAP_STEP};
    memcpy(donor.id, a.id, MSG_ID_LEN);
    int fresh = 0, chunks_at_compute = 0;
    double t0 = clock_now(), end = t0 + 60;
    net_ev_t ev;
    while (xfer_done(x) != 1 && clock_now() < end) {
        xfer_req_t req[8];
        int nr = xfer_next_requests(x, clock_now(), &donor, 1, 1.0, req, 8);
        for (int i = 0; i < nr; i++)
            assert_int_equal(net_send(b.net, req[i].to, &req[i].req, 0, NULL, NULL, err), 0);
        if (!net_recv(b.net, 5, &ev) && ev.type == NET_EV_MSG && ev.msg.type == MSG_STATE_REP &&
            ev.nframes == 1) {
            assert_memory_equal(ev.msg.state_hash, s->snap.hash, 32);
            assert_int_equal(ev.msg.flags & 1, 1);
            xfer_on_reply(x, &ev.msg, ev.frame[0], ev.frame_len[0], clock_now());
        }
        if (!net_recv(a.net, 0, &ev) && ev.type == NET_EV_MSG && ev.msg.type == MSG_STATE_REQ) {
            if (ev.msg.step >= 0) {
                chunks_at_compute++;
                continue;
            }
            msg_t rep;
            const uint8_t *data;
            size_t len;
            assert_int_equal(xfer_serve(&s->snap, &ev.msg, &rep, &data, &len, err), 0);
            rep.flags |= 1;
            const void *pl[1] = {data};
            assert_int_equal(net_send(a.net, ev.msg.sender, &rep, 1, pl, &len, err), 0);
            fresh++;
        }
    }
    double dt = clock_now() - t0;
    assert_int_equal(xfer_done(x), 1);
    assert_int_equal(xfer_step(x), SNAP_STEP);
    assert_memory_equal(xfer_data(x), s->snap.buf, SNAP_BYTES);
    assert_true(fresh >= 1);
    assert_int_equal(chunks_at_compute, 0);
    printf("net_serve: %zu MiB in %.3f s (%.0f MB/s); the donor's compute side answered %d "
           "fresh request(s) and saw no chunk request\n",
           SNAP_BYTES >> 20, dt, SNAP_BYTES / dt / 1e6, fresh);
    xfer_destroy(&x);
    assert_int_equal(requests_seen(&a, 0.2), 0);

    /* a fresh request and another step's go to the compute side */
    ask(&b, &a, -1, 0);
    ask(&b, &a, SNAP_STEP + 1, 0);
    assert_int_equal(requests_seen(&a, 1.0), 2);
    /* serving none: every request goes there (the network thread takes the NULL from its
     * command queue, the request from the joiner's connection: in either order at first) */
    net_serve_state(a.net, NULL);
    int reached = 0;
    for (int i = 0; i < 20 && !reached; i++) {
        ask(&b, &a, SNAP_STEP, 0);
        reached = requests_seen(&a, 0.5);
    }
    assert_true(reached >= 1);

    xfer_shared_unref(&s); /* the network thread let go of its reference already */
    net_stop(&b.net);
    net_stop(&a.net);
}

/* The last holder frees: the network thread may hold a snapshot after the peer let go. */
static void test_shared_refs(void **state)
{
    (void)state;
    xfer_shared_t *s = xfer_shared_new(3, 100), *t = xfer_shared_ref(s);
    assert_non_null(s);
    assert_int_equal(s->stage, 3);
    assert_int_equal(s->snap.step, -1);
    xfer_snap_seal(&s->snap, 2);
    xfer_shared_unref(&s);
    assert_null(s);
    assert_int_equal(t->snap.step, 2); /* still whole (ASan: not freed) */
    xfer_shared_unref(&t);
    xfer_shared_unref(&t); /* NULL-safe */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shared_refs),
        cmocka_unit_test(test_served_while_busy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
