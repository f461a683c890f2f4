/* test_nat.c — unreachable members (docs/protocol.md 3.4) on real network threads over
 * loopback: peers that listen nowhere (net_config_t bind NULL) join through a reachable
 * founder, hear it on the connections they opened, reach each other through a relay, and
 * name another relay when theirs leaves. Each message is checked where it arrives: its
 * type, sender and payload, as the peer would be handed it. And side connections (3.1):
 * what a peer sends for one moment never comes under its member connection's routing id.
 * Not for: a whole swarm behind a firewall (tests/nat.sh), the octets (test_msg.c). */
#include "common/clock.h"
#include "common/status.h"
#include "swarm/msg.h"
#include "swarm/net.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <math.h>
#include <zmq.h>

#define SWARM_ID 0x5e77e

typedef struct {
    net_t *net;
    uint8_t id[MSG_ID_LEN];
    char ep[256];
    msg_member_t self; /* its own entry as its last view gave it */
} node_t;

/* k: the id's first octet; listening 0: an unreachable member. */
static void node_start(node_t *n, int k, int founding, int listening)
{
    char err[STATUS_ERR_LEN];
    memset(n, 0, sizeof *n);
    n->id[0] = (uint8_t)k;
    net_config_t nc = {.bind = listening ? "tcp://127.0.0.1:0" : NULL,
                       .heartbeat_s = 0.1,
                       .timeout_s = 30,
                       .swarm = founding ? SWARM_ID : 0,
                       .run_text = founding ? "stages=1\n" : NULL};
    memcpy(nc.id, n->id, MSG_ID_LEN);
    nc.self.state = MEMBER_SERVING;
    nc.self.loss = NAN;
    n->net = net_start(&nc, n->ep, err);
    if (!n->net) fail_msg("net_start: %s", err);
}

/* Handles one event of n (a WELCOME: takes the swarm, as a joiner's peer does; a view:
 * notes its own entry). Returns the event's type (NET_EV_NONE on timeout); *ev valid until
 * the next call. */
static int pump(node_t *n, int ms, net_ev_t *ev)
{
    if (net_recv(n->net, ms, ev)) return NET_EV_NONE;
    if (ev->type == NET_EV_MSG && ev->msg.type == MSG_WELCOME)
        net_set_run(n->net, ev->msg.swarm, "stages=1\n");
    for (int i = 0; ev->type == NET_EV_VIEW && i < ev->nmembers; i++)
        if (!memcmp(ev->members[i].id, n->id, MSG_ID_LEN)) n->self = ev->members[i];
    return ev->type;
}

/* Whether b's view lists a (live); pumps b for up to 10 s. */
static int sees(node_t *b, const node_t *a)
{
    double end = clock_now() + 10;
    net_ev_t ev;
    while (clock_now() < end) {
        if (pump(b, 50, &ev) != NET_EV_VIEW) continue;
        for (int i = 0; i < ev.nmembers; i++)
            if (!memcmp(ev.members[i].id, a->id, MSG_ID_LEN)) return 1;
    }
    return 0;
}

/* Pumps every node for s seconds (their views settle, messages flow). */
static void settle(node_t *const *nodes, int n, double s)
{
    double end = clock_now() + s;
    net_ev_t ev;
    while (clock_now() < end)
        for (int i = 0; i < n; i++) pump(nodes[i], 5, &ev);
}

/* Sends a PROGRESS whose one-octet bitmap is `tag` from a to b until b is handed it (up to
 * `secs`; sends before b's connections stand may be undeliverable: they are sent again),
 * pumping `others` meanwhile. 1 when b got it with a as sender. */
static int deliver_within(node_t *a, node_t *b, uint8_t tag, node_t *const *others,
                          int nothers, double secs)
{
    char err[STATUS_ERR_LEN];
    double end = clock_now() + secs, next = 0;
    net_ev_t ev;
    while (clock_now() < end) {
        if (clock_now() >= next) {
            msg_t m = {.type = MSG_PROGRESS, .stage = 0, .step = tag, .count = 8};
            const void *pl[1] = {&tag};
            size_t pll[1] = {1};
            assert_int_equal(net_send(a->net, b->id, &m, 1, pl, pll, err), 0);
            next = clock_now() + 0.5;
        }
        pump(a, 1, &ev);
        for (int i = 0; i < nothers; i++) pump(others[i], 1, &ev);
        if (pump(b, 5, &ev) == NET_EV_MSG && ev.msg.type == MSG_PROGRESS && ev.msg.step == tag &&
            ev.nframes == 1 && ev.frame_len[0] == 1 && ev.frame[0][0] == tag)
            return !memcmp(ev.msg.sender, a->id, MSG_ID_LEN);
    }
    return 0;
}

static int deliver(node_t *a, node_t *b, uint8_t tag, node_t *const *others, int nothers)
{
    return deliver_within(a, b, tag, others, nothers, 10);
}

/* The relay an unreachable node's own entry names (0: none, or it is not unreachable). */
static int relay_of(const node_t *n, uint8_t relay[MSG_ID_LEN])
{
    static const uint8_t zero[MSG_ID_LEN];
    return msg_addr_relay(n->self.addr, relay) && memcmp(relay, zero, MSG_ID_LEN);
}

static void test_unreachable_members(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    node_t a, b, n1, n2;
    node_start(&a, 1, 1, 1);
    node_start(&n1, 2, 0, 0);
    node_start(&n2, 3, 0, 0);
    assert_string_equal(n1.ep, MSG_RELAY_SCHEME); /* it names no relay yet */

    /* joining: the WELCOME comes back on the HELLO's connection */
    assert_int_equal(net_hello(n1.net, a.ep, 0, err), 0);
    assert_true(sees(&n1, &a));
    assert_int_equal(net_hello(n2.net, a.ep, 0, err), 0);
    assert_true(sees(&n2, &a));
    node_t *all[] = {&a, &n1, &n2};
    settle(all, 3, 0.5);
    uint8_t relay[MSG_ID_LEN];
    assert_true(relay_of(&n1, relay));
    assert_memory_equal(relay, a.id, MSG_ID_LEN); /* the only reachable member */
    assert_true(relay_of(&n2, relay));

    /* reachable to unreachable (the ROUTER) and back (its DEALER) */
    assert_true(deliver(&a, &n1, 11, (node_t *[]){&n2}, 1));
    assert_true(deliver(&n1, &a, 12, (node_t *[]){&n2}, 1));
    /* unreachable to unreachable, both ways: through the relay */
    assert_true(deliver(&n1, &n2, 13, (node_t *[]){&a}, 1));
    assert_true(deliver(&n2, &n1, 14, (node_t *[]){&a}, 1));

    /* another reachable member comes; the relay leaves; both name the newcomer */
    node_start(&b, 4, 0, 1);
    assert_int_equal(net_hello(b.net, a.ep, 0, err), 0);
    assert_true(sees(&b, &n1));
    node_t *four[] = {&a, &b, &n1, &n2};
    settle(four, 4, 0.5);
    net_stop(&a.net);
    node_t *three[] = {&b, &n1, &n2};
    settle(three, 3, 1.0);
    assert_true(relay_of(&n1, relay));
    assert_memory_equal(relay, b.id, MSG_ID_LEN);
    assert_true(relay_of(&n2, relay));
    assert_memory_equal(relay, b.id, MSG_ID_LEN);
    assert_true(deliver(&n1, &n2, 15, (node_t *[]){&b}, 1));
    assert_true(deliver(&n2, &n1, 16, (node_t *[]){&b}, 1));
    assert_true(deliver(&b, &n2, 17, (node_t *[]){&n1}, 1));

    net_stop(&n2.net);
    net_stop(&n1.net);
    net_stop(&b.net);
}

/* ---- side connections (docs/protocol.md 3.1) ------------------------------------------
 * Member X is played here by a bare ROUTER with ROUTER_HANDOVER on, as a peer's own is:
 * what reaches it shows under which routing id each of A's messages came. */

typedef struct {
    void *ctx, *router, *dealer; /* X's ROUTER, and X's DEALER to A (routing id X) */
    uint8_t id[MSG_ID_LEN];
    char ep[256];
    uint64_t heartbeat;
} raw_member_t;

static void raw_start(raw_member_t *x, const node_t *a)
{
    memset(x, 0, sizeof *x);
    x->id[0] = 0x58;
    x->ctx = zmq_ctx_new();
    x->router = zmq_socket(x->ctx, ZMQ_ROUTER);
    int one = 1, zero = 0;
    zmq_setsockopt(x->router, ZMQ_ROUTER_HANDOVER, &one, sizeof one);
    zmq_setsockopt(x->router, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_bind(x->router, "tcp://127.0.0.1:*"), 0);
    size_t l = sizeof x->ep;
    zmq_getsockopt(x->router, ZMQ_LAST_ENDPOINT, x->ep, &l);
    x->dealer = zmq_socket(x->ctx, ZMQ_DEALER);
    zmq_setsockopt(x->dealer, ZMQ_ROUTING_ID, x->id, MSG_ID_LEN);
    zmq_setsockopt(x->dealer, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(x->dealer, a->ep), 0);
}

static void raw_stop(raw_member_t *x)
{
    zmq_close(x->dealer);
    zmq_close(x->router);
    zmq_ctx_term(x->ctx);
}

/* X's GOSSIP to A: its own entry, with a heartbeat higher than the last. */
static void raw_gossip(raw_member_t *x)
{
    char err[STATUS_ERR_LEN];
    msg_t m = {.type = MSG_GOSSIP, .swarm = SWARM_ID};
    memcpy(m.sender, x->id, MSG_ID_LEN);
    msg_member_t e = {.stage = 0, .state = MEMBER_SERVING, .heartbeat = ++x->heartbeat};
    memcpy(e.id, x->id, MSG_ID_LEN);
    snprintf(e.addr, sizeof e.addr, "%s", x->ep);
    e.loss = NAN;
    uint8_t hdr[MSG_HEADER_MAX], tab[1024];
    size_t hl = 0, tl = 0;
    assert_int_equal(msg_encode(&m, hdr, sizeof hdr, &hl, err), 0);
    assert_int_equal(msg_members_encode(&e, 1, tab, sizeof tab, &tl, err), 0);
    zmq_send(x->dealer, hdr, hl, ZMQ_SNDMORE);
    zmq_send(x->dealer, tab, tl, 0);
}

/* What reached X from `from` within ms (X gossiping every 50 ms meanwhile when `beat`):
 * the count of messages of `type` under the member routing id (from's id) and under the
 * side one (from's id and MSG_SIDE_TAG); anything else is a failure. */
static void raw_heard(raw_member_t *x, const node_t *from, int type, int ms, int beat,
                      int *member, int *side)
{
    *member = *side = 0;
    double end = clock_now() + ms / 1000.0, next = 0;
    zmq_pollitem_t it = {x->router, 0, ZMQ_POLLIN, 0};
    while (clock_now() < end) {
        if (beat && clock_now() >= next) {
            raw_gossip(x);
            next = clock_now() + 0.05;
        }
        if (zmq_poll(&it, 1, 10) <= 0) continue;
        uint8_t rid[256], hdr[MSG_HEADER_MAX];
        int rl = zmq_recv(x->router, rid, sizeof rid, 0), more = 1, hl = -1;
        size_t ml = sizeof more;
        for (int f = 0; more; f++) { /* the header, then payloads (not read) */
            uint8_t junk[1];
            int n = f == 0 ? zmq_recv(x->router, hdr, sizeof hdr, 0)
                           : zmq_recv(x->router, junk, sizeof junk, 0);
            if (f == 0) hl = n;
            zmq_getsockopt(x->router, ZMQ_RCVMORE, &more, &ml);
        }
        msg_t m;
        char err[STATUS_ERR_LEN];
        assert_true(hl > 0 && hl <= (int)sizeof hdr);
        assert_int_equal(msg_decode(hdr, (size_t)hl, &m, err), 0);
        assert_true(rl >= MSG_ID_LEN && !memcmp(rid, from->id, MSG_ID_LEN));
        if (m.type != type) continue;
        if (rl == MSG_ID_LEN)
            ++*member;
        else if (rl == MSG_ID_LEN + 1 && rid[MSG_ID_LEN] == MSG_SIDE_TAG)
            ++*side;
        else
            fail_msg("a routing id of %d octets", rl);
    }
}

/* A message for one moment (a listening peer's HELLO, a probe of a member held dead) goes
 * on a connection of its own, under a routing id that is not the member connection's: at
 * the receiver's ROUTER it cannot take the member connection over (ROUTER_HANDOVER), which
 * libzmq leaves open with nothing behind it. A member that comes back is gossiped to on
 * its member connection again, and only there. */
static void test_side_connections(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    node_t a;
    memset(&a, 0, sizeof a);
    a.id[0] = 1;
    net_config_t nc = {.bind = "tcp://127.0.0.1:0", .heartbeat_s = 0.05, .timeout_s = 0.5,
                       .swarm = SWARM_ID, .run_text = "stages=1\n"};
    memcpy(nc.id, a.id, MSG_ID_LEN);
    nc.self.state = MEMBER_SERVING;
    nc.self.loss = NAN;
    a.net = net_start(&nc, a.ep, err);
    assert_non_null(a.net);
    raw_member_t x;
    raw_start(&x, &a);
    int member, side;

    /* a HELLO (nothing answers it) */
    assert_int_equal(net_hello(a.net, x.ep, 0, err), 0);
    raw_heard(&x, &a, MSG_HELLO, 300, 0, &member, &side);
    assert_int_equal(member, 0);
    assert_int_equal(side, 1);

    /* X gossips: A gossips back on the member connection */
    raw_gossip(&x);
    assert_true(sees(&a, &(node_t){.id = {0x58}}));
    raw_heard(&x, &a, MSG_GOSSIP, 500, 1, &member, &side);
    assert_true(member >= 3);
    assert_int_equal(side, 0);

    /* X falls silent past A's timeout: it is probed, on side connections only */
    raw_heard(&x, &a, MSG_GOSSIP, 1500, 0, &member, &side);
    assert_true(side >= 3);

    /* X gossips again: revived, it hears A on the member connection, every period on */
    raw_heard(&x, &a, MSG_GOSSIP, 500, 1, &member, &side); /* the revival */
    raw_heard(&x, &a, MSG_GOSSIP, 1000, 1, &member, &side);
    assert_true(member >= 10);
    assert_int_equal(side, 0);

    net_stop(&a.net);
    raw_stop(&x);
}

/* A member connection that died with nothing to say so is opened anew by net_reconnect.
 * The death is libzmq 4.3's: a second connection under A's routing id reaches B's ROUTER
 * (ROUTER_HANDOVER) and takes the id over, and the connection of A's DEALER stays open at
 * B with nothing behind it; what A sends there vanishes. */
static void test_reconnect(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN];
    node_t a, b;
    node_start(&a, 1, 1, 1);
    node_start(&b, 2, 0, 1);
    assert_int_equal(net_hello(b.net, a.ep, 0, err), 0);
    assert_true(sees(&b, &a));
    assert_true(sees(&a, &b));
    assert_true(deliver(&a, &b, 21, NULL, 0));

    void *ctx = zmq_ctx_new(), *d = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(d, ZMQ_ROUTING_ID, a.id, MSG_ID_LEN);
    zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(d, b.ep), 0);
    zmq_send(d, "x", 1, 0); /* refused by B as malformed; the handshake is what counts */
    settle((node_t *[]){&a, &b}, 2, 0.5);
    zmq_close(d);
    zmq_ctx_term(ctx);
    assert_false(deliver_within(&a, &b, 22, NULL, 0, 2.0)); /* the connection is dead */
    assert_true(deliver(&b, &a, 23, NULL, 0));              /* the other way is not */

    net_reconnect(a.net, b.id);
    assert_true(deliver(&a, &b, 24, NULL, 0));
    net_stop(&b.net);
    net_stop(&a.net);
}

/* A peer that listens nowhere advertises nothing either. */
static void test_no_listen_no_advertise(void **state)
{
    (void)state;
    char err[STATUS_ERR_LEN], ep[256];
    net_config_t nc = {.advertise = "tcp://10.0.0.1:7000", .heartbeat_s = 0.1, .timeout_s = 3};
    nc.id[0] = 9;
    net_t *n = net_start(&nc, ep, err);
    assert_null(n);
    assert_non_null(strstr(err, "advertises no endpoint"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_listen_no_advertise),
        cmocka_unit_test(test_unreachable_members),
        cmocka_unit_test(test_side_connections),
        cmocka_unit_test(test_reconnect),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
