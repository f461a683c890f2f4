/* test_members.c — unit tests of swarm/members (membership as a pure state machine):
 * merge (higher heartbeat wins, LEAVING kills, the dead come back when their heartbeat
 * rises, unknown LEAVING/DEAD entries are not added, self is never overwritten), HELLO,
 * LEAVE, timeouts on an explicit clock, the hooks, the live view, the encoded table
 * (through msg_members_decode), and tables of more than 64 members; SWIM's local health
 * (docs/protocol.md 10.7 rule 12) on one dispatch core fed PROBEs by hand.
 * Not for: sockets (net.c) or the simulated network (test_sim.c). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "common/status.h"
#include "swarm/dispatch.h"
#include "swarm/members.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int ups, downs;
    char last_why[64];
} hook_count_t;

static void on_up(void *ctx, members_entry_t *e)
{
    (void)e;
    ((hook_count_t *)ctx)->ups++;
}

static void on_down(void *ctx, members_entry_t *e, const char *why)
{
    hook_count_t *h = ctx;
    assert_false(e->alive);
    assert_int_equal(e->m.state, MEMBER_DEAD);
    h->downs++;
    snprintf(h->last_why, sizeof h->last_why, "%s", why);
}

static msg_member_t member(int tag, int stage, uint64_t hb, int state)
{
    msg_member_t m;
    memset(&m, 0, sizeof m);
    for (int i = 0; i < MSG_ID_LEN; i++) m.id[i] = (uint8_t)(tag * 7 + i);
    snprintf(m.addr, sizeof m.addr, "sim://%d", tag);
    m.stage = (int16_t)stage;
    m.state = (uint8_t)state;
    m.heartbeat = hb;
    m.loss = NAN;
    return m;
}

static members_t *table(hook_count_t *h)
{
    msg_member_t self = member(0, 0, 99, MEMBER_SERVING);
    members_hooks_t hooks = {h, on_up, on_down};
    char err[STATUS_ERR_LEN];
    members_t *t = members_new(&self, 10.0, &hooks, err);
    assert_non_null(t);
    return t;
}

static void test_new_self(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    assert_int_equal(members_count(t), 1);
    members_entry_t *me = members_at(t, 0);
    assert_int_equal(me->m.heartbeat, 1); /* the table's, not the caller's */
    assert_true(me->alive);
    assert_null(members_at(t, 1));
    assert_int_equal(members_live_others(t), 0);
    members_destroy(&t);
    assert_null(t);
    members_destroy(&t); /* NULL-safe */
}

static void test_merge_rules(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    msg_member_t v[4] = {member(1, 0, 5, MEMBER_SERVING), member(2, 1, 3, MEMBER_JOINING),
                         member(3, 1, 9, MEMBER_LEAVING), member(4, 1, 9, MEMBER_DEAD)};
    assert_int_equal(members_merge(t, v, 4, 11.0), 1);
    assert_int_equal(members_count(t), 4); /* unknown LEAVING not added, DEAD as a candidate */
    assert_int_equal(h.ups, 2);
    assert_false(members_at(t, 3)->alive);
    assert_int_equal(members_live_others(t), 2);
    assert_int_equal(members_probe(t, 11.0, 60.0, 12345), 3);
    /* hearsay DEAD of a known member kills nothing, even with a higher heartbeat */
    msg_member_t hs = member(1, 0, 50, MEMBER_DEAD);
    assert_int_equal(members_merge(t, &hs, 1, 11.0), 0);
    assert_true(members_at(t, 1)->alive);
    assert_int_equal(members_at(t, 1)->m.heartbeat, 5);
    /* same heartbeat: nothing */
    assert_int_equal(members_merge(t, v, 2, 12.0), 0);
    assert_true(members_at(t, 1)->last_change == 11.0);
    /* lower heartbeat with another state: ignored */
    msg_member_t old = member(2, 1, 2, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &old, 1, 12.0), 0);
    assert_int_equal(members_at(t, 2)->m.state, MEMBER_JOINING);
    /* higher heartbeat, same state: taken, not a change of the live set */
    msg_member_t up1 = member(1, 0, 6, MEMBER_SERVING);
    up1.step = 42;
    assert_int_equal(members_merge(t, &up1, 1, 13.0), 0);
    assert_int_equal(members_at(t, 1)->m.step, 42);
    assert_true(members_at(t, 1)->last_change == 13.0);
    /* higher heartbeat, new state: a change */
    msg_member_t up2 = member(2, 1, 4, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &up2, 1, 13.0), 1);
    /* self is never overwritten */
    msg_member_t me = member(0, 3, 1000, MEMBER_LEAVING);
    assert_int_equal(members_merge(t, &me, 1, 13.0), 0);
    assert_int_equal(members_at(t, 0)->m.stage, 0);
    assert_int_equal(members_at(t, 0)->m.state, MEMBER_SERVING);
    /* LEAVING with a higher heartbeat kills */
    msg_member_t lv = member(1, 0, 7, MEMBER_LEAVING);
    assert_int_equal(members_merge(t, &lv, 1, 14.0), 1);
    assert_false(members_at(t, 1)->alive);
    assert_int_equal(h.downs, 1);
    assert_string_equal(h.last_why, "it left");
    /* a stale entry of the dead one does not revive it */
    msg_member_t stale = member(1, 0, 6, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &stale, 1, 15.0), 0);
    assert_false(members_at(t, 1)->alive);
    /* a higher heartbeat does */
    msg_member_t back = member(1, 0, 8, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &back, 1, 15.0), 1);
    assert_true(members_at(t, 1)->alive);
    assert_int_equal(h.ups, 3);
    members_destroy(&t);
}

static void test_tick_timeout(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    msg_member_t v[2] = {member(1, 0, 5, MEMBER_SERVING), member(2, 1, 5, MEMBER_SERVING)};
    assert_int_equal(members_merge(t, v, 2, 10.0), 1);
    int dead[4];
    assert_int_equal(members_tick(t, 12.0, 3.0, dead, 4), 0);
    assert_int_equal(members_at(t, 0)->m.heartbeat, 2);
    /* member 1 keeps beating, member 2 goes silent */
    v[0].heartbeat = 6;
    assert_int_equal(members_merge(t, &v[0], 1, 12.5), 0);
    assert_int_equal(members_tick(t, 13.0, 3.0, dead, 4), 0); /* exactly 3 s: not yet */
    assert_int_equal(members_tick(t, 13.01, 3.0, dead, 4), 1);
    assert_int_equal(dead[0], 2);
    assert_string_equal(h.last_why, "silent past the timeout");
    assert_int_equal(members_at(t, 0)->m.heartbeat, 4);
    assert_int_equal(members_tick(t, 20.0, 3.0, NULL, 0), 1); /* member 1 now */
    assert_int_equal(members_live_others(t), 0);
    assert_int_equal(h.downs, 2);
    members_destroy(&t);
}

/* Round trips from echoes of this peer's heartbeat in a member's gossip (members_echo):
 * a member behind a slow link (echoes of 2 s) is not declared dead after the fixed 3 s
 * of silence but after twice its echo timeout; one with fast echoes keeps 3 s (the floor);
 * a stale echo (the same heartbeat again) is no sample. */
static void test_echo_timeout(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    msg_member_t v[2] = {member(1, 0, 5, MEMBER_SERVING), member(2, 1, 5, MEMBER_SERVING)};
    assert_int_equal(members_merge(t, v, 2, 10.0), 1);
    assert_true(members_rto(t, 1) == 0);
    double now = 10.0;
    for (int i = 0; i < 8; i++) { /* self's heartbeat at 10.25, 10.5, ...; echoes */
        now += 0.25;
        members_tick(t, now, 3.0, NULL, 0);
        uint64_t hb = members_at(t, 0)->m.heartbeat;
        msg_member_t self = member(0, 0, hb, MEMBER_SERVING);
        v[0].heartbeat++, v[1].heartbeat++;
        msg_member_t g1[2] = {v[0], self}, g2[2] = {v[1], self};
        members_echo(t, v[0].id, g1, 2, now + 0.05); /* member 1: 50 ms */
        members_echo(t, v[1].id, g2, 2, now + 2.0);  /* member 2: 2 s */
        members_merge(t, v, 2, now + 0.05);
    }
    double r1 = members_rto(t, 1), r2 = members_rto(t, 2);
    assert_true(r1 > 0.04 && r1 < 0.1);
    assert_true(r2 > 1.9 && r2 < 3.0); /* srtt 2 s + 4 rttvar (decaying from 1 s) */
    /* a stale echo: heartbeat not newer than the last echoed one, however late */
    msg_member_t self_old = member(0, 0, members_at(t, 0)->m.heartbeat, MEMBER_SERVING);
    msg_member_t g[2] = {v[0], self_old};
    members_echo(t, v[0].id, g, 2, now + 30.0);
    assert_true(members_rto(t, 1) == r1);
    /* both go silent: member 1 dies at the 3 s floor, member 2 only after 2 x its rto */
    double last = now + 0.05;
    int dead[4];
    assert_int_equal(members_tick(t, last + 3.01, 3.0, dead, 4), 1);
    assert_int_equal(dead[0], 1);
    assert_int_equal(members_tick(t, last + 2 * r2 - 0.01, 3.0, dead, 4), 0);
    assert_int_equal(members_tick(t, last + 2 * r2 + 0.01, 3.0, dead, 4), 1);
    assert_int_equal(dead[0], 2);
    members_destroy(&t);
}

static void test_hello_leave(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    msg_t m;
    memset(&m, 0, sizeof m);
    msg_member_t j = member(5, 0, 0, MEMBER_JOINING);
    memcpy(m.sender, j.id, MSG_ID_LEN);
    snprintf(m.addr, sizeof m.addr, "sim://5");
    m.stage = -1;
    int i = members_hello(t, &m, 20.0);
    assert_int_equal(i, 1);
    members_entry_t *e = members_at(t, 1);
    assert_int_equal(e->m.state, MEMBER_JOINING);
    assert_int_equal(e->m.stage, 0);
    assert_string_equal(e->m.addr, "sim://5");
    assert_true(e->last_change == 20.0);
    /* a second HELLO of a live member changes nothing */
    e->m.state = MEMBER_SERVING;
    assert_int_equal(members_hello(t, &m, 21.0), 1);
    assert_int_equal(members_at(t, 1)->m.state, MEMBER_SERVING);
    /* LEAVE */
    assert_int_equal(members_leave(t, j.id, "bye"), 1);
    assert_string_equal(h.last_why, "bye");
    assert_int_equal(members_leave(t, j.id, NULL), 0);
    /* HELLO again brings it back, heartbeat reset so that its new life's gossip wins */
    assert_int_equal(members_hello(t, &m, 22.0), 1);
    assert_true(members_at(t, 1)->alive);
    assert_int_equal(members_at(t, 1)->m.heartbeat, 0);
    msg_member_t again = member(5, 0, 1, MEMBER_SERVING);
    assert_int_equal(members_merge(t, &again, 1, 22.5), 1);
    /* HELLO or LEAVE naming self: nothing */
    msg_t me;
    memset(&me, 0, sizeof me);
    memcpy(me.sender, members_at(t, 0)->m.id, MSG_ID_LEN);
    assert_int_equal(members_hello(t, &me, 23.0), 0);
    assert_int_equal(members_leave(t, me.sender, NULL), 0);
    assert_true(members_at(t, 0)->alive);
    members_destroy(&t);
}

static void test_set_self(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    members_tick(t, 11.0, 3.0, NULL, 0);
    msg_member_t s = member(9, 2, 555, MEMBER_JOINING);
    s.step = 7;
    members_set_self(t, &s);
    members_entry_t *me = members_at(t, 0);
    assert_int_equal(me->m.stage, 2);
    assert_int_equal(me->m.step, 7);
    assert_int_equal(me->m.heartbeat, 2);        /* kept */
    assert_string_equal(me->m.addr, "sim://0"); /* kept */
    assert_int_equal(me->m.id[1], 1);            /* kept: member(0) */
    members_destroy(&t);
}

/* Members dead of silence are gossiped (as DEAD) and probed for dead_s; those that
 * left are not. */
static void test_probe_candidates(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    msg_member_t v[3] = {member(1, 0, 5, MEMBER_SERVING), member(2, 1, 5, MEMBER_SERVING),
                         member(3, 1, 5, MEMBER_SERVING)};
    assert_int_equal(members_merge(t, v, 3, 10.0), 1);
    assert_int_equal(members_probe(t, 10.0, 60.0, 7), -1);
    assert_int_equal(members_leave(t, v[0].id, NULL), 1);
    assert_true(members_at(t, 1)->left);
    assert_int_equal(members_probe(t, 10.0, 60.0, 7), -1); /* left: not a candidate */
    v[1].heartbeat = 6;
    assert_int_equal(members_merge(t, &v[1], 1, 12.0), 0);
    assert_int_equal(members_tick(t, 14.0, 3.0, NULL, 0), 1); /* member 3 */
    for (uint64_t r = 0; r < 5; r++) assert_int_equal(members_probe(t, 14.0, 60.0, r), 3);
    assert_int_equal(members_probe(t, 74.5, 60.0, 0), -1); /* forgotten */
    uint8_t *buf;
    size_t len;
    char err[STATUS_ERR_LEN];
    msg_member_t out[8];
    int n = 0;
    assert_int_equal(members_encode_gossip(t, 14.0, 60.0, &buf, &len, err), 0);
    assert_int_equal(msg_members_decode(buf, len, out, 8, &n, err), 0);
    assert_int_equal(n, 3); /* self, 2 live, 3 as DEAD; 1 left: not sent */
    assert_int_equal(out[2].state, MEMBER_DEAD);
    assert_memory_equal(out[2].id, v[2].id, MSG_ID_LEN);
    free(buf);
    /* the view and WELCOME's table: live entries only */
    assert_int_equal(members_encode(t, &buf, &len, err), 0);
    assert_int_equal(msg_members_decode(buf, len, out, 8, &n, err), 0);
    assert_int_equal(n, 2);
    free(buf);
    /* a receiver keeps the DEAD entry as a candidate, and the member's own gossip
     * (a higher heartbeat) brings it to life there */
    hook_count_t h2 = {0};
    msg_member_t other = member(9, 1, 1, MEMBER_SERVING);
    members_hooks_t hooks = {&h2, on_up, on_down};
    members_t *t2 = members_new(&other, 0.0, &hooks, err);
    msg_member_t dead3 = member(3, 1, 5, MEMBER_DEAD);
    assert_int_equal(members_merge(t2, &dead3, 1, 15.0), 0);
    assert_int_equal(h2.ups, 0);
    assert_int_equal(members_probe(t2, 15.0, 60.0, 0), 1);
    msg_member_t alive3 = member(3, 1, 9, MEMBER_SERVING);
    assert_int_equal(members_merge(t2, &alive3, 1, 16.0), 1);
    assert_int_equal(h2.ups, 1);
    members_destroy(&t2);
    members_destroy(&t);
}

/* More than 64 members: the view, the encoded table, and a second table that learns
 * everyone from it. */
static void test_large_view_encode(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    enum { N = 150 };
    msg_member_t *v = calloc(N, sizeof *v);
    for (int i = 0; i < N; i++) v[i] = member(i + 1, i % 3, 3, MEMBER_SERVING);
    assert_int_equal(members_merge(t, v, N, 30.0), 1);
    assert_int_equal(members_count(t), N + 1);
    /* the id index (grown and rebuilt past 16, 32, 64, 128 entries; these ids share
     * first octets every 256/7 tags) finds each entry, and no id it does not hold */
    for (int i = 0; i < N; i++) {
        int j = members_find(t, v[i].id);
        assert_true(j > 0);
        assert_memory_equal(members_at(t, j)->m.id, v[i].id, MSG_ID_LEN);
    }
    msg_member_t stranger = member(N + 40, 0, 1, MEMBER_SERVING);
    assert_int_equal(members_find(t, stranger.id), -1);
    assert_int_equal(members_leave(t, v[10].id, NULL), 1);
    int live = 0; /* the live count follows every change */
    for (int i = 1; i < members_count(t); i++) live += members_at(t, i)->alive;
    assert_int_equal(live, N - 1);
    assert_int_equal(members_live_others(t), N - 1);
    msg_member_t *out = calloc(N + 1, sizeof *out);
    int k = members_view(t, out);
    assert_int_equal(k, N);
    assert_memory_equal(out[0].id, members_at(t, 0)->m.id, MSG_ID_LEN);
    uint8_t *buf;
    size_t len;
    char err[STATUS_ERR_LEN];
    assert_int_equal(members_encode(t, &buf, &len, err), 0);
    int n = 0;
    assert_int_equal(msg_members_decode(buf, len, out, N + 1, &n, err), 0);
    assert_int_equal(n, N);
    hook_count_t h2 = {0};
    msg_member_t other = member(N + 5, 1, 1, MEMBER_SERVING);
    members_hooks_t hooks = {&h2, on_up, on_down};
    members_t *t2 = members_new(&other, 0.0, &hooks, err);
    assert_int_equal(members_merge(t2, out, n, 1.0), 1);
    assert_int_equal(members_live_others(t2), N);
    assert_int_equal(h2.ups, N);
    free(buf);
    free(out);
    free(v);
    members_destroy(&t);
    members_destroy(&t2);
}

/* SWIM's merge (docs/protocol.md 10.7 rule 4), suspicion (5), refutation (6) and news (3),
 * with heartbeats of an incarnation (high 32 bits) and a version (low 32): a suspicion or
 * death needs an incarnation at least ours, only a later incarnation clears a suspicion or
 * revives (a newer version of the same one is a stale copy), a refutation rises above the
 * incarnation claimed, and what changed the table is news, handed out with the most sends
 * left first, each at most once per message. */
#define HB(inc, ver) (((uint64_t)(inc) << 32) | (uint64_t)(ver))
static void test_swim_rules(void **state)
{
    (void)state;
    hook_count_t h = {0};
    members_t *t = table(&h);
    uint64_t refute = 0;
    msg_member_t a = member(1, 0, HB(1, 5), MEMBER_SERVING), b = member(2, 1, 7, MEMBER_JOINING);
    msg_member_t in[2] = {a, b};
    assert_int_equal(members_swim_merge(t, in, 2, 11.0, 1, &refute), 1);
    assert_int_equal(h.ups, 2);
    assert_true(refute == 0);
    assert_true(members_has_fresh(t));
    /* both are news, each at most once per message, pushed at two ticks */
    msg_member_t out[8];
    assert_int_equal(members_news(t, out, 8, 1), 2);
    assert_int_equal(members_news(t, out, 8, 1), 2);
    assert_false(members_has_fresh(t));
    /* a suspicion of an older incarnation is ignored; of ours (an older version) suspects */
    int ia = members_find(t, a.id);
    msg_member_t s = a;
    s.state = MEMBER_SUSPECT;
    s.heartbeat = HB(0, 9);
    assert_int_equal(members_swim_merge(t, &s, 1, 12.0, 1, &refute), 0);
    assert_true(members_at(t, ia)->suspect_at == 0);
    s.heartbeat = HB(1, 3);
    members_swim_merge(t, &s, 1, 12.0, 1, &refute);
    assert_true(members_at(t, ia)->suspect_at == 12.0);
    assert_true(members_at(t, ia)->alive);
    /* as news it goes out in state SUSPECT */
    int n = members_news(t, out, 8, 1), seen = 0;
    for (int i = 0; i < n; i++)
        if (!memcmp(out[i].id, a.id, MSG_ID_LEN)) seen = 1, assert_int_equal(out[i].state, MEMBER_SUSPECT);
    assert_true(seen);
    /* a newer version of the same incarnation updates the entry but does not refute */
    msg_member_t r = a;
    r.heartbeat = HB(1, 6);
    r.step = 40;
    members_swim_merge(t, &r, 1, 12.5, 1, &refute);
    assert_true(members_at(t, ia)->suspect_at == 12.0);
    assert_int_equal(members_at(t, ia)->m.step, 40);
    /* a later incarnation does; the stale suspicion is ignored after it */
    r.heartbeat = HB(2, 1);
    members_swim_merge(t, &r, 1, 13.0, 1, &refute);
    assert_true(members_at(t, ia)->suspect_at == 0);
    members_swim_merge(t, &s, 1, 13.5, 1, &refute);
    assert_true(members_at(t, ia)->suspect_at == 0);
    /* suspected again, it dies after the suspicion timeout, not before */
    assert_int_equal(members_suspect(t, ia, 20.0), 1);
    assert_int_equal(members_suspect(t, ia, 20.5), 0);
    assert_int_equal(members_swim_expire(t, 22.9, 3.0), 0);
    assert_int_equal(members_swim_expire(t, 23.1, 3.0), 1);
    assert_false(members_at(t, ia)->alive);
    assert_string_equal(h.last_why, "suspected past the timeout");
    /* a newer version of the incarnation it died in does not revive it; a later one does */
    r.heartbeat = HB(2, 8);
    assert_int_equal(members_swim_merge(t, &r, 1, 24.0, 1, &refute), 0);
    assert_false(members_at(t, ia)->alive);
    r.heartbeat = HB(3, 1);
    assert_int_equal(members_swim_merge(t, &r, 1, 24.5, 1, &refute), 1);
    assert_true(members_at(t, ia)->alive);
    /* DEAD from another member kills when its incarnation is at least ours */
    int ib = members_find(t, b.id);
    msg_member_t db = b;
    db.state = MEMBER_DEAD;
    db.heartbeat = HB(0, 2); /* an older version of incarnation 0: still that incarnation */
    assert_int_equal(members_swim_merge(t, &db, 1, 25.0, 1, &refute), 1);
    assert_false(members_at(t, ib)->alive);
    assert_string_equal(h.last_why, "declared dead by a member");
    msg_member_t dc = member(3, 2, HB(2, 4), MEMBER_SERVING);
    members_swim_merge(t, &dc, 1, 25.5, 0, &refute);
    dc.state = MEMBER_DEAD;
    dc.heartbeat = HB(1, 9);
    assert_int_equal(members_swim_merge(t, &dc, 1, 25.6, 1, &refute), 0);
    assert_true(members_at(t, members_find(t, dc.id))->alive);
    /* a suspicion of self names the heartbeat to rise above; the refutation's incarnation
     * is above it */
    msg_member_t me = members_at(t, 0)->m;
    me.state = MEMBER_SUSPECT;
    me.heartbeat = HB(4, 0);
    members_swim_merge(t, &me, 1, 26.0, 1, &refute);
    assert_true(refute == HB(4, 0));
    members_refute(t, 26.0, refute);
    assert_true(members_at(t, 0)->m.heartbeat >> 32 == 5);
    assert_true(members_has_fresh(t));
    /* a WELCOME's table (news off) adds without making news */
    while (members_has_fresh(t)) members_news(t, out, 8, 1);
    msg_member_t c = member(4, 2, 4, MEMBER_SERVING);
    assert_int_equal(members_swim_merge(t, &c, 1, 27.0, 0, &refute), 1);
    assert_false(members_has_fresh(t));
    members_destroy(&t);
}


/* ---- SWIM's local health (docs/protocol.md 10.7 rule 12) on one core ------------------
 * P (tag 0) in a swarm of five (tags 1-4), fed PROBEs by hand: what it sends is caught
 * and decoded; members named in `down` answer nothing, the others ACK P's pings. */
#define SW_SWARM 0x5357494d54455354ULL
#define ANSWER_DOUBT_FLAG 2 /* an ANSWER's flags bit 1: its sender cannot vouch (10.8) */
typedef struct {
    int n;
    struct {
        uint8_t to[MSG_ID_LEN];
        msg_t m;
    } out[512];
    dispatch_t *peer[5]; /* [1..4]: cores used only to write their PROBEs' headers */
    int down[5];
    double born[5];      /* when each started, past 100 s (its entries' uptime) */
    int beat;            /* each PROBE a member sends raises its heartbeat (it gossips) */
    int reconnects[5];   /* P's reconnect hook, by member */
    uint8_t tab[4096];   /* the last message's member table, as sent */
    size_t tlen;
} sw_net_t;

static int sw_tag(const uint8_t id[MSG_ID_LEN]);

static void sw_reconnect(void *ctx, members_entry_t *e, const char *why)
{
    (void)why;
    sw_net_t *w = ctx;
    int t = sw_tag(e->m.id);
    if (t > 0) w->reconnects[t]++;
}

static int sw_send(void *ctx, members_entry_t *e, int nframes, const void *const *data,
                   const size_t *len)
{
    sw_net_t *w = ctx;
    char err[STATUS_ERR_LEN];
    if (w->n < 512 && !msg_decode(data[0], len[0], &w->out[w->n].m, err)) {
        memcpy(w->out[w->n].to, e->m.id, MSG_ID_LEN);
        w->n++;
        w->tlen = nframes > 1 && len[1] <= sizeof w->tab ? len[1] : 0;
        if (w->tlen) memcpy(w->tab, data[1], w->tlen);
    }
    return 0;
}

typedef int (*sw_reply_fn)(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                           const void *const *data, const size_t *len);

/* A core of member `tag`: SWIM (every 4 ticks a probe), or whole-table gossip (0); its
 * answers on a connection go to `reply` (NULL: none). */
static dispatch_t *sw_core_reply(int tag, sw_net_t *w, int every, sw_reply_fn reply)
{
    dispatch_config_t c;
    memset(&c, 0, sizeof c);
    c.self = member(tag, 0, 0, MEMBER_SERVING);
    c.swarm = SW_SWARM;
    c.run_text = every ? "test\nswim_every=4\n" : "test\n";
    c.timeout_s = 3.0;
    c.swim_every = every;
    c.swim_k = 3;
    c.tick_s = 0.25;
    dispatch_io_t io;
    memset(&io, 0, sizeof io);
    io.ctx = w;
    io.send = io.probe = sw_send;
    io.reconnect = sw_reconnect;
    io.reply = reply;
    char err[STATUS_ERR_LEN];
    dispatch_t *d = dispatch_new(&c, &io, 100.0, err);
    assert_non_null(d);
    return d;
}

static dispatch_t *sw_core_every(int tag, sw_net_t *w, int every)
{
    return sw_core_reply(tag, w, every, NULL);
}

static dispatch_t *sw_core(int tag, sw_net_t *w)
{
    return sw_core_every(tag, w, 4);
}

/* A PROBE of `kind` from member `tag` to p, whose sender counts `count` live members and
 * whose table is its own entry, then rows[0, nrows); on the connection whose routing id is
 * conn (NULL: the member connection). What dispatch_on_frames returned. */
static int sw_probe_frames(dispatch_t *p, sw_net_t *w, int tag, int kind, int flags,
                           uint64_t probe, const uint8_t *target, uint32_t count,
                           const msg_member_t *rows, int nrows, double now, const uint8_t *conn,
                           size_t conn_len)
{
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_PROBE;
    m.probe_kind = (uint8_t)kind;
    m.flags = (uint8_t)flags;
    m.probe = probe;
    m.count = count;
    if (target) memcpy(m.dest, target, MSG_ID_LEN);
    uint8_t hdr[MSG_HEADER_MAX], tab[2048];
    char err[STATUS_ERR_LEN];
    size_t hl = dispatch_header(w->peer[tag], &m, 0, hdr, sizeof hdr, err), tl = 0;
    assert_true(hl > 0);
    msg_member_t v[8];
    members_self_entry_now(dispatch_members(w->peer[tag]), &v[0]);
    for (int i = 0; i < nrows && i < 7; i++) v[1 + i] = rows[i];
    assert_int_equal(msg_members_encode(v, 1 + nrows, tab, sizeof tab, &tl, err), 0);
    const void *data[2] = {hdr, tab};
    size_t len[2] = {hl, tl};
    if (!conn) conn = v[0].id, conn_len = MSG_ID_LEN;
    return dispatch_on_frames(p, conn, conn_len, 0, NULL, 2, data, len, now, err);
}

/* A PROBE from member `tag` to p, counting as many live members as p, its table its own
 * entry (its uptime from w->born, its heartbeat raised when w->beat), on the connection
 * whose routing id is conn (NULL: the member connection); what dispatch_on_frames
 * returned. */
static int sw_probe_on(dispatch_t *p, sw_net_t *w, int tag, int kind, int flags,
                       uint64_t probe, const uint8_t *target, double now, const uint8_t *conn,
                       size_t conn_len)
{
    members_t *h = dispatch_members(w->peer[tag]);
    members_at(h, 0)->m.uptime_s = (uint32_t)(now - 100.0 - w->born[tag]);
    if (w->beat) members_at(h, 0)->m.heartbeat++;
    uint32_t count = (uint32_t)(members_live_others(dispatch_members(p)) + 1); /* as many as P */
    return sw_probe_frames(p, w, tag, kind, flags, probe, target, count, NULL, 0, now, conn,
                           conn_len);
}

static void sw_probe(dispatch_t *p, sw_net_t *w, int tag, int kind, int flags, uint64_t probe,
                     const uint8_t *target, double now)
{
    assert_int_equal(sw_probe_on(p, w, tag, kind, flags, probe, target, now, NULL, 0), 0);
}

static int sw_tag(const uint8_t id[MSG_ID_LEN])
{
    for (int t = 0; t < 5; t++)
        if (!memcmp(id, member(t, 0, 0, 0).id, MSG_ID_LEN)) return t;
    return -1;
}

/* One tick of p at `now`; its pings of members up are ACKed at once. The messages it sent
 * are left in w->out[from, w->n). */
static void sw_tick(dispatch_t *p, sw_net_t *w, double now, int *from)
{
    *from = w->n;
    dispatch_tick(p, now, 12345);
    for (int i = *from; i < w->n; i++) {
        const msg_t *m = &w->out[i].m;
        int to = sw_tag(w->out[i].to);
        if (m->type == MSG_PROBE && m->probe_kind == PROBE_PING && to > 0 && !w->down[to])
            sw_probe(p, w, to, PROBE_ACK, 0, m->probe, w->out[i].to, now + 0.01);
    }
}

static dispatch_t *sw_swarm(sw_net_t *w)
{
    memset(w, 0, sizeof *w);
    dispatch_t *p = sw_core(0, w);
    for (int t = 1; t < 5; t++) {
        w->peer[t] = sw_core(t, w);
        sw_probe(p, w, t, PROBE_NEWS, 0, 0, NULL, 100.0); /* P learns of it */
    }
    assert_int_equal(members_live_others(dispatch_members(p)), 4);
    return p;
}

static void sw_free(dispatch_t **p, sw_net_t *w)
{
    dispatch_destroy(p);
    for (int t = 1; t < 5; t++) dispatch_destroy(&w->peer[t]);
}

/* P's first probe of a member that went down: the REQs it sends are answered per
 * `miss_flags` (tag -> -1 silent, else the MISS's flags). Returns whether that member is
 * suspected at the period's end; *again: whether the next period pings it again. */
static int sw_failed_probe(const int miss_flags[5], int *again)
{
    sw_net_t *w = malloc(sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_swarm(w);
    members_t *t = dispatch_members(p);
    double now = 100.0;
    int from, target = -1;
    uint64_t probe = 0;
    for (int k = 0; k < 64 && target < 0; k++) { /* the first ping of tag 4 */
        w->down[4] = 1;
        sw_tick(p, w, now += 0.25, &from);
        for (int i = from; i < w->n; i++)
            if (w->out[i].m.probe_kind == PROBE_PING && sw_tag(w->out[i].to) == 4)
                target = 4, probe = w->out[i].m.probe;
    }
    assert_int_equal(target, 4);
    sw_tick(p, w, now += 0.25, &from); /* unanswered a tick: REQs */
    int reqs = 0;
    for (int i = from; i < w->n; i++) {
        const msg_t *m = &w->out[i].m;
        int to = sw_tag(w->out[i].to);
        if (m->probe_kind != PROBE_REQ) continue;
        assert_int_equal(m->probe, probe);
        assert_int_equal(sw_tag(m->dest), 4);
        reqs++;
        if (miss_flags[to] >= 0)
            sw_probe(p, w, to, PROBE_MISS, miss_flags[to], probe, m->dest, now + 0.3);
    }
    assert_int_equal(reqs, 3);
    sw_tick(p, w, now += 0.25, &from);
    sw_tick(p, w, now += 0.25, &from);
    sw_tick(p, w, now += 0.25, &from); /* the period's end (suspected, or held), and the
                                        * next period's ping */
    int j = members_find(t, member(4, 0, 0, 0).id), suspected = members_at(t, j)->suspect_at > 0;
    *again = 0;
    for (int i = from; i < w->n; i++)
        if (w->out[i].m.probe_kind == PROBE_PING && sw_tag(w->out[i].to) == 4) *again = 1;
    sw_free(&p, w);
    free(w);
    return suspected;
}

/* Every helper vouched (a MISS, not in doubt): suspected. One silent, or one whose MISS
 * says it doubts itself: held, and the same member pinged again next period. */
static void test_swim_local_health(void **state)
{
    (void)state;
    int again;
    int clean[5] = {0, 0, 0, 0, -1}, doubt[5] = {0, 0, 1, 0, -1}, silent[5] = {0, 0, -1, 0, -1};
    assert_true(sw_failed_probe(clean, &again));
    assert_false(again);
    assert_false(sw_failed_probe(doubt, &again));
    assert_true(again);
    assert_false(sw_failed_probe(silent, &again));
    assert_true(again);
}

/* A cut that lasts, seen from its small side (10.7 rule 12): P and tag 1 on one side,
 * tags 2-4 on the other. Every probe P makes across it fails with a helper silent (the far
 * side) and tag 1's MISS in doubt: held. The first far member is suspected after 8 held
 * probes; the cut has lasted that long for the others too, so each of them is suspected
 * at P's first failed probe of it, not after 8 held probes of its own in turn. P's
 * answered pings of tag 1 between them do not start the count afresh: a partition leaves
 * the near side answering. (Held per target, a side of 2 in a swarm of 6 declared the 4
 * across dead 21-36 s into a cut on the real network: tests/partition.sh seed 575022641.) */
static void test_swim_lasting_cut(void **state)
{
    (void)state;
    sw_net_t *w = malloc(sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_swarm(w);
    members_t *t = dispatch_members(p);
    for (int k = 2; k < 5; k++) w->down[k] = 1;
    double now = 100.0, suspected[5] = {0};
    int from, acked_near = 0;
    for (int tick = 0; tick < 4 * 40; tick++) {
        w->n = 0;
        sw_tick(p, w, now += 0.25, &from);
        for (int i = from; i < w->n; i++) {
            const msg_t *m = &w->out[i].m;
            int to = sw_tag(w->out[i].to);
            acked_near += m->probe_kind == PROBE_PING && to == 1;
            if (m->probe_kind == PROBE_REQ && to == 1) /* tag 1 cannot reach them either */
                sw_probe(p, w, 1, PROBE_MISS, 1, m->probe, m->dest, now + 0.01);
        }
        for (int k = 2; k < 5; k++) {
            members_entry_t *e = members_at(t, members_find(t, member(k, 0, 0, 0).id));
            if (!suspected[k] && (e->suspect_at > 0 || !e->alive)) suspected[k] = now - 100.0;
        }
    }
    assert_true(acked_near > 0);
    double first = 1e9, last = 0;
    for (int k = 2; k < 5; k++) {
        assert_true(suspected[k] > 0);
        if (suspected[k] < first) first = suspected[k];
        if (suspected[k] > last) last = suspected[k];
    }
    assert_true(first >= 8.0);       /* a cut of seconds is ridden out */
    assert_true(last - first <= 5.0); /* the rest within a turn of the ring: 4 periods */
    sw_free(&p, w);
    free(w);
}

/* As a helper: a ping asked of P that goes unanswered makes P doubt itself, and says so in
 * its next MISS about another member, but only for SWIM_DOUBT_PERIODS periods: a heal is
 * not held against the members for long (200 members under mild, seed 31: probes held for
 * 4 periods after a partition, a crash detected after 10.35 s net of it). Its own failed
 * pings of the target asked about say nothing more than the MISS itself: in a swarm of 6,
 * every helper asked about a crashed member had pinged it unanswered a period before, so
 * every MISS said "in doubt", and the crash was held for 8 periods (sim pause 6x3 seed
 * 740253 with swim_every=4: detected after 12.8 s, 4.7 s now). */
static void test_swim_doubt_passes(void **state)
{
    (void)state;
    sw_net_t *w = malloc(sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_swarm(w); /* P's own pings are all ACKed: only those asked of it
                                  * (sent as it takes a REQ, not at a tick) go unanswered */
    int target[4] = {4, 4, 3, 3}, quiet[4] = {1, 1, 12, 0};
    double now = 100.0;
    int from, flags[4];
    for (int round = 0; round < 4; round++) {
        /* a REQ from tag 1 to ping the target (never answered): P's MISS 2 ticks later */
        sw_probe(p, w, 1, PROBE_REQ, 0, 1000 + (uint64_t)round, member(target[round], 0, 0, 0).id, now);
        flags[round] = -1;
        for (int k = 0; k < 3 && flags[round] < 0; k++) {
            sw_tick(p, w, now += 0.25, &from);
            for (int i = from; i < w->n; i++)
                if (w->out[i].m.probe_kind == PROBE_MISS && sw_tag(w->out[i].to) == 1)
                    flags[round] = w->out[i].m.flags;
        }
        for (int k = 0; k < quiet[round]; k++) sw_tick(p, w, now += 0.25, &from);
    }
    assert_int_equal(flags[0], 0); /* no failure before: it vouches */
    assert_int_equal(flags[1], 0); /* its failure was of the same target: it vouches */
    assert_int_equal(flags[2], 1); /* just saw one of another member: in doubt */
    assert_int_equal(flags[3], 0); /* three quiet periods later: vouches again */
    sw_free(&p, w);
    free(w);
}

/* A joiner (10.7 rule 7) sends one SYNC SWIM_SYNC_AFTER_S (5 s) after its WELCOME, and no
 * more: the joins concurrent with its own went round as news while nobody knew of it
 * (1,000 nodes joining over 20 s formed after 55-58 s, waiting for anti-entropy). */
/* A member's first incarnation under SWIM is the wall clock's seconds at its start (its
 * first heartbeat, given in milliseconds; protocol.md 10.7 rule 1), from the start or from
 * the run text that switches it: a peer restarted under its old id is a later incarnation
 * than its previous life, so the death its mates recorded of that life does not hold it. */
static dispatch_t *inc_core(uint64_t hb_ms, const char *run, int every)
{
    dispatch_config_t c;
    memset(&c, 0, sizeof c);
    c.self = member(1, 0, 0, MEMBER_JOINING);
    c.heartbeat = hb_ms;
    c.swarm = SW_SWARM;
    c.run_text = run;
    c.swim_every = every;
    dispatch_io_t io;
    memset(&io, 0, sizeof io);
    char err[STATUS_ERR_LEN];
    dispatch_t *d = dispatch_new(&c, &io, 100.0, err);
    assert_non_null(d);
    return d;
}

static uint64_t own_hb(dispatch_t *d)
{
    return members_at(dispatch_members(d), 0)->m.heartbeat;
}

static void test_swim_first_incarnation(void **state)
{
    (void)state;
    dispatch_t *life1 = inc_core(1700000000123ULL, "test\nswim_every=4\n", 4);
    dispatch_t *life2 = inc_core(1700000005456ULL, "test\nswim_every=4\n", 4); /* 5 s later */
    assert_int_equal(own_hb(life1) >> 32, 1700000000ULL);
    assert_int_equal(own_hb(life1) & 0xffffffffULL, 1);
    assert_true(own_hb(life2) >> 32 > own_hb(life1) >> 32);
    /* a dead copy of life 1 at its incarnation does not outweigh life 2's entry */
    members_t *t = members_new(&(msg_member_t){.id = {9}}, 100.0, NULL, (char[STATUS_ERR_LEN]){0});
    assert_non_null(t);
    msg_member_t old = members_at(dispatch_members(life1), 0)->m, now;
    old.state = MEMBER_SERVING;
    uint64_t refute = 0;
    assert_int_equal(members_swim_merge(t, &old, 1, 100.0, 0, &refute), 1);
    old.state = MEMBER_DEAD;
    members_swim_merge(t, &old, 1, 101.0, 0, &refute);
    assert_int_equal(members_live_others(t), 0);
    now = members_at(dispatch_members(life2), 0)->m;
    now.state = MEMBER_SERVING;
    members_swim_merge(t, &now, 1, 102.0, 0, &refute);
    assert_int_equal(members_live_others(t), 1); /* revived by the later incarnation */
    /* a joiner learns SWIM from the run text: its incarnation is set then */
    dispatch_t *joiner = inc_core(1700000009000ULL, NULL, 0);
    assert_int_equal(own_hb(joiner) >> 32, 1700000009000ULL >> 32); /* gossip: milliseconds */
    dispatch_set_run(joiner, SW_SWARM, "test\nswim_every=4\n");
    assert_int_equal(own_hb(joiner) >> 32, 1700000009ULL);
    /* no heartbeat given (the members-only simulator): nothing to take it from */
    dispatch_t *plain = inc_core(0, "test\nswim_every=4\n", 4);
    assert_int_equal(own_hb(plain), 1);
    members_destroy(&t);
    dispatch_destroy(&life1);
    dispatch_destroy(&life2);
    dispatch_destroy(&joiner);
    dispatch_destroy(&plain);
}

/* The direct path (docs/protocol.md 10.7 rule 13): member 2 answers P's pings only through
 * the helpers P asks (its own ACKs are lost on the way: a dead connection), 5 s late
 * itself (a thin link), or at once. Only the first has P open its connection to it anew:
 * after 30 s, then every 30 s or so; never suspected in any. */
static void test_swim_direct_path(void **state)
{
    (void)state;
    uint8_t id2[MSG_ID_LEN];
    memcpy(id2, member(2, 0, 0, 0).id, MSG_ID_LEN);
    for (int mode = 0; mode < 3; mode++) {
        sw_net_t *w = calloc(1, sizeof *w);
        assert_non_null(w);
        dispatch_t *p = sw_swarm(w);
        w->down[2] = mode != 2; /* sw_tick does not have it answer */
        struct {
            uint64_t probe;
            double at;
        } late[64];
        int nlate = 0, from, pings = 0;
        double first = 0;
        for (double now = 100.25; now < 200.0; now += 0.25) {
            int before = w->reconnects[2];
            sw_tick(p, w, now, &from);
            for (int i = from; i < w->n; i++) {
                const msg_t *m = &w->out[i].m;
                int to = sw_tag(w->out[i].to);
                if (m->type != MSG_PROBE || memcmp(m->dest, id2, MSG_ID_LEN)) continue;
                if (m->probe_kind == PROBE_REQ && to > 0 && to != 2) /* the helper's ACK */
                    sw_probe(p, w, to, PROBE_ACK, 0, m->probe, id2, now + 0.02);
                if (m->probe_kind == PROBE_PING && to == 2) {
                    pings++;
                    if (mode == 1 && nlate < 64) late[nlate].probe = m->probe, late[nlate++].at = now + 5;
                }
            }
            for (int i = 0; i < nlate; i++)
                if (late[i].at <= now) {
                    sw_probe(p, w, 2, PROBE_ACK, 0, late[i].probe, id2, now);
                    late[i--] = late[--nlate];
                }
            if (w->reconnects[2] > before && !first) first = now;
            if (w->n > 400) w->n = 0; /* what was sent before is read already */
        }
        int j = members_find(dispatch_members(p), id2);
        assert_true(j > 0 && members_at(dispatch_members(p), j)->alive);
        assert_true(pings >= 10);
        if (mode == 0) {
            assert_true(first >= 130.0 && first < 150.0);
            assert_true(w->reconnects[2] >= 2 && w->reconnects[2] <= 3);
        } else {
            assert_int_equal(w->reconnects[2], 0);
        }
        for (int t = 1; t < 5; t++)
            if (t != 2) assert_int_equal(w->reconnects[t], 0);
        sw_free(&p, w);
        free(w);
    }
}

/* A MEND (docs/protocol.md 11.3) from a live member has P open its connection to that
 * member anew, at most once per 5 s per member. The same under whole-table gossip. P
 * sends one only to a live member. */
static void test_mend(void **state)
{
    (void)state;
    for (int every = 0; every <= 4; every += 4) {
        sw_net_t *w = calloc(1, sizeof *w);
        assert_non_null(w);
        dispatch_t *p = sw_core_every(0, w, every);
        for (int t = 1; t < 5; t++) w->peer[t] = sw_core_every(t, w, every);
        sw_probe(p, w, 1, PROBE_ASK, 0, 1, NULL, 100.0); /* P learns of 1 (either way) */
        assert_int_equal(members_live_others(dispatch_members(p)), 1);
        sw_probe(p, w, 1, PROBE_MEND, 0, 0, NULL, 100.1);
        assert_int_equal(w->reconnects[1], 1);
        sw_probe(p, w, 1, PROBE_MEND, 0, 0, NULL, 104.0); /* within 5 s: not again */
        assert_int_equal(w->reconnects[1], 1);
        sw_probe(p, w, 1, PROBE_MEND, 0, 0, NULL, 105.2);
        assert_int_equal(w->reconnects[1], 2);
        assert_int_equal(dispatch_mends(p), 2);
        /* sending one: to a live member (its own connection opened anew first), not to an
         * unknown one */
        int before = w->n;
        assert_int_equal(dispatch_mend(p, member(1, 0, 0, 0).id), 0);
        assert_int_equal(w->reconnects[1], 3);
        assert_int_equal(w->n, before + 1);
        assert_int_equal(w->out[before].m.type, MSG_PROBE);
        assert_int_equal(w->out[before].m.probe_kind, PROBE_MEND);
        /* at once again (several answers overdue together): nothing more within 5 s */
        assert_int_equal(dispatch_mend(p, member(1, 0, 0, 0).id), 0);
        assert_int_equal(w->reconnects[1], 3);
        assert_int_equal(w->n, before + 1);
        assert_int_equal(dispatch_mend(p, member(3, 0, 0, 0).id), -1);
        dispatch_destroy(&p);
        for (int t = 1; t < 5; t++) dispatch_destroy(&w->peer[t]);
        free(w);
    }
}

/* A side connection (docs/protocol.md 3.1: the sender's id and MSG_SIDE_TAG) carries
 * HELLO, GOSSIP and PROBE, and nothing else; another last octet is no side connection. */
/* An answer to a peer this one does not know yet (a joiner that heard of it first, from its
 * WELCOME) leaves on the connection that peer opened, whose routing id is its id
 * (docs/protocol.md 3.1); a member it knows gets it on its member connection as before.
 * Before, dispatch_send dropped it: a joiner's first state request in a burst of 20 went
 * unanswered for 10 s. */
static int ans_reply_n;
static uint8_t ans_reply_conn[MSG_ID_LEN + 1];
static size_t ans_reply_len;
static int ans_reply(void *ctx, const uint8_t *conn, size_t conn_len, int nframes,
                     const void *const *data, const size_t *len)
{
    (void)ctx, (void)nframes, (void)data, (void)len;
    ans_reply_n++;
    ans_reply_len = conn_len;
    memcpy(ans_reply_conn, conn, conn_len <= sizeof ans_reply_conn ? conn_len : 0);
    return 0;
}

static void test_answer_unknown(void **state)
{
    (void)state;
    sw_net_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_core_reply(0, w, 0, ans_reply);
    char err[STATUS_ERR_LEN];
    msg_t m = {.type = MSG_STATE_REP, .stage = 0, .step = 3};
    uint8_t hdr[MSG_HEADER_MAX];
    size_t hl = dispatch_header(p, &m, 0, hdr, sizeof hdr, err);
    assert_true(hl > 0);
    const void *fr[1] = {hdr};
    uint8_t newcomer[MSG_ID_LEN];
    memcpy(newcomer, member(3, 0, 0, 0).id, MSG_ID_LEN);
    ans_reply_n = 0;
    assert_int_equal(dispatch_send(p, newcomer, 1, fr, &hl), 0);
    assert_int_equal(ans_reply_n, 1);
    assert_int_equal(ans_reply_len, MSG_ID_LEN);
    assert_memory_equal(ans_reply_conn, newcomer, MSG_ID_LEN);
    assert_int_equal(w->n, 0); /* no member connection for it */
    /* itself: never */
    assert_int_equal(dispatch_send(p, member(0, 0, 0, 0).id, 1, fr, &hl), -1);
    assert_int_equal(ans_reply_n, 1);
    dispatch_destroy(&p);
    free(w);
}

static void test_side_connection(void **state)
{
    (void)state;
    sw_net_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_core(0, w);
    w->peer[1] = sw_core(1, w);
    uint8_t conn[MSG_ID_LEN + 1];
    memcpy(conn, member(1, 0, 0, 0).id, MSG_ID_LEN);
    conn[MSG_ID_LEN] = 0x02;
    assert_int_not_equal(sw_probe_on(p, w, 1, PROBE_NEWS, 0, 0, NULL, 100.0, conn, sizeof conn), 0);
    assert_int_equal(members_live_others(dispatch_members(p)), 0);
    assert_int_equal(dispatch_rejected(p), 1);
    conn[MSG_ID_LEN] = MSG_SIDE_TAG;
    assert_int_equal(sw_probe_on(p, w, 1, PROBE_NEWS, 0, 0, NULL, 100.0, conn, sizeof conn), 0);
    assert_int_equal(members_live_others(dispatch_members(p)), 1);
    /* a data message from that member: on its member connection, not on a side one */
    char err[STATUS_ERR_LEN];
    msg_t m = {.type = MSG_PROGRESS, .stage = 0, .step = 1, .count = 8};
    uint8_t hdr[MSG_HEADER_MAX], bits = 1;
    size_t hl = dispatch_header(w->peer[1], &m, 0, hdr, sizeof hdr, err);
    assert_true(hl > 0);
    const void *data[2] = {hdr, &bits};
    size_t len[2] = {hl, 1};
    assert_int_not_equal(dispatch_on_frames(p, conn, sizeof conn, 0, NULL, 2, data, len, 100.1,
                                            err), 0);
    assert_int_equal(dispatch_rejected(p), 2);
    assert_int_equal(dispatch_on_frames(p, conn, MSG_ID_LEN, 0, NULL, 2, data, len, 100.2, err),
                     0);
    assert_int_equal(dispatch_rejected(p), 2);
    dispatch_destroy(&p);
    dispatch_destroy(&w->peer[1]);
    free(w);
}

static void test_swim_join_sync(void **state)
{
    (void)state;
    sw_net_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_core(0, w);
    for (int t = 1; t < 3; t++) w->peer[t] = sw_core(t, w);
    msg_t m;
    memset(&m, 0, sizeof m);
    m.type = MSG_WELCOME;
    snprintf(m.addr, sizeof m.addr, "sim://1");
    uint8_t hdr[MSG_HEADER_MAX], tab[2048];
    char err[STATUS_ERR_LEN];
    size_t hl = dispatch_header(w->peer[1], &m, 0, hdr, sizeof hdr, err), tl = 0;
    assert_true(hl > 0);
    msg_member_t v[2];
    members_self_entry(dispatch_members(w->peer[1]), &v[0]);
    members_self_entry(dispatch_members(w->peer[2]), &v[1]);
    assert_int_equal(msg_members_encode(v, 2, tab, sizeof tab, &tl, err), 0);
    const char *run = "test\nswim_every=4\n";
    const void *data[3] = {hdr, run, tab};
    size_t len[3] = {hl, strlen(run), tl};
    assert_int_equal(
        dispatch_on_frames(p, v[0].id, MSG_ID_LEN, 0, NULL, 3, data, len, 100.0, err), 0);
    assert_int_equal(members_live_others(dispatch_members(p)), 2);
    int from, syncs_early = 0, syncs = 0;
    for (double now = 100.25; now < 130.0; now += 0.25) {
        sw_tick(p, w, now, &from);
        for (int i = from; i < w->n; i++)
            if (w->out[i].m.type == MSG_PROBE && w->out[i].m.probe_kind == PROBE_SYNC) {
                syncs++;
                syncs_early += now < 105.0;
            }
        if (w->n > 400) w->n = 0; /* what was sent before is read already */
    }
    assert_int_equal(syncs_early, 0);
    assert_int_equal(syncs, 1);
    dispatch_destroy(&p);
    for (int t = 1; t < 3; t++) dispatch_destroy(&w->peer[t]);
    free(w);
}

/* sw_probe_frames on the member connection, which must take it. */
static void sw_probe_rows(dispatch_t *p, sw_net_t *w, int tag, int kind, int flags,
                          uint32_t count, const msg_member_t *rows, int nrows, double now)
{
    assert_int_equal(
        sw_probe_frames(p, w, tag, kind, flags, 0, NULL, count, rows, nrows, now, NULL, 0), 0);
}

/* The SYNC for deaths (docs/protocol.md 10.7 rule 8): a member that holds alive one that
 * the others hold dead, and whose death's news it missed, hears of it from nobody (nobody
 * pings the dead). When 6 of the last 8 PROBEs count fewer live members than its table,
 * it asks the last sender for its recent deaths (not again within 2 s), gets them in a
 * TABLE and drops the dead member; a member asked answers with its own entry and the
 * members it holds dead, not its live table. */
static void test_swim_sync_dead(void **state)
{
    (void)state;
    sw_net_t *w = malloc(sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_swarm(w); /* P holds 1-4 alive: 5 counted */
    members_t *t = dispatch_members(p);
    double now = 101.0;
    int syncs = 0, to = -1, flags = -1;
    for (int k = 0; k < 8; k++) /* as many as P counts (not the PROBEs it learned them by) */
        sw_probe_rows(p, w, 1 + k % 4, PROBE_NEWS, 0, 5, NULL, 0, now += 0.1);
    for (int k = 0; k < 12; k++) { /* NEWS from 1-3, each counting 4 (4 is dead to them) */
        int from = w->n;
        sw_probe_rows(p, w, 1 + k % 3, PROBE_NEWS, 0, k == 1 ? 5 : 4, NULL, 0, now += 0.1);
        for (int i = from; i < w->n; i++)
            if (w->out[i].m.probe_kind == PROBE_SYNC) {
                syncs++;
                to = sw_tag(w->out[i].to);
                flags = w->out[i].m.flags;
                assert_int_equal(k, 6); /* the 7th: 6 of the last 8 counted fewer */
            }
    }
    assert_int_equal(syncs, 1); /* and not again within 2 s */
    assert_int_equal(to, 1 + 6 % 3);
    assert_int_equal(flags, 1);
    /* the answer: tag 4 dead, at the incarnation P holds */
    msg_member_t dead = members_at(t, members_find(t, member(4, 0, 0, 0).id))->m;
    dead.state = MEMBER_DEAD;
    sw_probe_rows(p, w, to, PROBE_TABLE, 1, 4, &dead, 1, now += 0.05);
    assert_int_equal(members_live_others(t), 3);
    assert_false(members_at(t, members_find(t, dead.id))->alive);
    /* 2 s later, fewer counts again: asked again */
    int from = w->n;
    for (int k = 0; k < 8; k++)
        sw_probe_rows(p, w, 1 + k % 3, PROBE_NEWS, 0, 3, NULL, 0, now += 0.3);
    syncs = 0;
    for (int i = from; i < w->n; i++) syncs += w->out[i].m.probe_kind == PROBE_SYNC;
    assert_int_equal(syncs, 1);
    /* asked: its own entry and the dead, not the live table */
    from = w->n;
    sw_probe_rows(p, w, 2, PROBE_SYNC, 1, 3, NULL, 0, now += 0.1);
    assert_int_equal(w->n, from + 1);
    assert_int_equal(w->out[from].m.probe_kind, PROBE_TABLE);
    assert_int_equal(w->out[from].m.flags, 1);
    msg_member_t got[8];
    int k = 0;
    char err[STATUS_ERR_LEN];
    assert_int_equal(msg_members_decode(w->tab, w->tlen, got, 8, &k, err), 0);
    assert_int_equal(k, 2);
    assert_int_equal(sw_tag(got[0].id), 0);
    assert_int_equal(sw_tag(got[1].id), 4);
    assert_int_equal(got[1].state, MEMBER_DEAD);
    /* a SYNC without the flag: the live table, as before */
    from = w->n;
    sw_probe_rows(p, w, 2, PROBE_SYNC, 0, 4, NULL, 0, now += 0.1);
    assert_int_equal(w->out[from].m.flags, 0);
    assert_int_equal(msg_members_decode(w->tab, w->tlen, got, 8, &k, err), 0);
    assert_int_equal(k, 4);
    sw_free(&p, w);
    free(w);
}

/* ---- a pause's question (docs/protocol.md 10.8) ----------------------------------------
 * The ASKs p sent in w->out[from, w->n): a bit per tag asked, all with pause number
 * `pause`; -1 if one is of another pause or to a member not of the swarm. */
static int sw_asked(const sw_net_t *w, int from, uint64_t pause)
{
    int tags = 0;
    for (int i = from; i < w->n; i++) {
        if (w->out[i].m.type != MSG_PROBE || w->out[i].m.probe_kind != PROBE_ASK) continue;
        int to = sw_tag(w->out[i].to);
        if (to < 1 || w->out[i].m.probe != pause) return -1;
        tags |= 1 << to;
    }
    return tags;
}

/* The flags of p's ANSWER to an ASK from `tag` (pause number 77); -1: none. */
static int sw_answer_flags(dispatch_t *p, sw_net_t *w, int tag, double now)
{
    int from = w->n, flags = -1;
    sw_probe(p, w, tag, PROBE_ASK, 0, 77, NULL, now);
    for (int i = from; i < w->n; i++)
        if (w->out[i].m.probe_kind == PROBE_ANSWER && sw_tag(w->out[i].to) == tag &&
            w->out[i].m.probe == 77)
            flags = w->out[i].m.flags;
    return flags;
}

/* Woken from a pause longer than the member timeout, a core asks the members live before
 * it (not one that came up through what waited in its sockets), again every second; an
 * ANSWER not in doubt settles it, so do answers from all (a whole swarm paused), nobody in
 * 4 timeouts leaves it unsettled; while asking, or with its own tick late, it answers
 * others in doubt. Under SWIM and under whole-table gossip alike. */
static void pause_ask(int every)
{
    sw_net_t *w = calloc(1, sizeof *w);
    assert_non_null(w);
    dispatch_t *p = sw_core_every(0, w, every);
    for (int t = 1; t < 5; t++) w->peer[t] = sw_core_every(t, w, every);
    w->beat = !every; /* under gossip a member that answers is alive: its heartbeat moves */
    /* P learns of tags 1-3 (an ASK of theirs merges the sender under either membership,
     * and is answered, not in doubt: P is not asking) */
    for (int t = 1; t < 4; t++) assert_int_equal(sw_answer_flags(p, w, t, 100.0), 0);
    assert_int_equal(members_live_others(dispatch_members(p)), 3);
    int from;
    double now = 100.0;
    for (int k = 0; k < 4; k++) sw_tick(p, w, now += 0.25, &from);
    assert_int_equal(dispatch_vouched(p), 0);
    /* a 10 s pause; tag 4 comes up through a message that waited meanwhile */
    now += 10.0;
    assert_int_equal(sw_answer_flags(p, w, 4, now), ANSWER_DOUBT_FLAG); /* its tick is late */
    sw_tick(p, w, now, &from);
    assert_int_equal(dispatch_pauses(p, NULL), 1);
    assert_int_equal(sw_asked(w, from, 1), 1 << 1 | 1 << 2 | 1 << 3);
    assert_int_equal(sw_answer_flags(p, w, 4, now + 0.1), ANSWER_DOUBT_FLAG); /* asking */
    sw_probe(p, w, 1, PROBE_ANSWER, ANSWER_DOUBT_FLAG, 1, NULL, now + 0.1); /* a sleeper */
    sw_probe(p, w, 2, PROBE_ANSWER, 0, 5, NULL, now + 0.1);                 /* another pause */
    sw_probe(p, w, 4, PROBE_ANSWER, 0, 1, NULL, now + 0.1);                 /* not asked */
    w->born[3] = 10.5; /* tag 3 restarted during the pause: it cannot say the run went on */
    sw_probe(p, w, 3, PROBE_ANSWER, 0, 1, NULL, now + 0.1);
    assert_int_equal(dispatch_vouched(p), 0);
    w->born[3] = 0;
    int rounds = 0;
    for (int k = 0; k < 4; k++) { /* asked again a second later, not every tick */
        sw_tick(p, w, now += 0.25, &from);
        rounds += sw_asked(w, from, 1) == (1 << 1 | 1 << 2 | 1 << 3);
    }
    assert_int_equal(rounds, 1);
    sw_probe(p, w, 3, PROBE_ANSWER, 0, 1, NULL, now); /* one not in doubt vouches ... */
    assert_int_equal(dispatch_vouched(p), 0); /* ... settled once its stage mates answered */
    sw_probe(p, w, 2, PROBE_ANSWER, ANSWER_DOUBT_FLAG, 1, NULL, now);
    assert_int_equal(dispatch_vouched(p), 1);
    assert_int_equal(sw_answer_flags(p, w, 4, now), 0);
    for (int k = 0; k < 3; k++) { /* (under gossip the silent die 3 s after the wake) */
        sw_tick(p, w, now += 0.25, &from);
        assert_int_equal(sw_asked(w, from, 1), 0);
    }
    /* a second pause: every member asked answers, each in doubt: the whole swarm slept */
    now += 10.0;
    sw_tick(p, w, now, &from);
    assert_int_equal(sw_asked(w, from, 2), 1 << 1 | 1 << 2 | 1 << 3 | 1 << 4);
    for (int t = 1; t < 5; t++) {
        assert_int_equal(dispatch_vouched(p), 1);
        sw_probe(p, w, t, PROBE_ANSWER, ANSWER_DOUBT_FLAG, 2, NULL, now + 0.1);
    }
    assert_int_equal(dispatch_vouched(p), 2);
    /* a third: one vouches, the other mates stay silent: settled 2 s later */
    now += 10.0;
    sw_tick(p, w, now, &from);
    assert_true(sw_asked(w, from, 3) > 0);
    sw_probe(p, w, 4, PROBE_ANSWER, 0, 3, NULL, now + 0.1);
    int ticks = 0;
    while (dispatch_vouched(p) != 3 && ticks < 20) sw_tick(p, w, now += 0.25, &from), ticks++;
    assert_in_range(ticks, 7, 9);
    /* a fourth: nobody answers; it asks about once a second for 4 timeouts (12 s) */
    now += 10.0;
    sw_tick(p, w, now, &from);
    rounds = sw_asked(w, from, 4) > 0;
    for (int k = 0; k < 80; k++) {
        sw_tick(p, w, now += 0.25, &from);
        rounds += sw_asked(w, from, 4) > 0;
        if (w->n > 400) w->n = 0;
    }
    assert_in_range(rounds, 12, 14);
    assert_int_equal(dispatch_vouched(p), 3);
    assert_int_equal(sw_answer_flags(p, w, 1, now), ANSWER_DOUBT_FLAG); /* gave up: still in
                                                                          * doubt */
    dispatch_destroy(&p);
    for (int t = 1; t < 5; t++) dispatch_destroy(&w->peer[t]);
    free(w);
}

static void test_pause_ask_swim(void **state)
{
    (void)state;
    pause_ask(4);
}

static void test_pause_ask_gossip(void **state)
{
    (void)state;
    pause_ask(0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_new_self),     cmocka_unit_test(test_merge_rules),
        cmocka_unit_test(test_tick_timeout), cmocka_unit_test(test_hello_leave),
        cmocka_unit_test(test_set_self),     cmocka_unit_test(test_large_view_encode),
        cmocka_unit_test(test_probe_candidates), cmocka_unit_test(test_echo_timeout),
        cmocka_unit_test(test_swim_rules), cmocka_unit_test(test_swim_local_health),
        cmocka_unit_test(test_swim_lasting_cut),
        cmocka_unit_test(test_swim_doubt_passes), cmocka_unit_test(test_swim_join_sync),
        cmocka_unit_test(test_swim_sync_dead),
        cmocka_unit_test(test_side_connection), cmocka_unit_test(test_answer_unknown),
        cmocka_unit_test(test_swim_direct_path),
        cmocka_unit_test(test_mend),
        cmocka_unit_test(test_swim_first_incarnation), cmocka_unit_test(test_pause_ask_swim),
        cmocka_unit_test(test_pause_ask_gossip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
