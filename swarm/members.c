/* members.c — the member table as a pure state machine (members.h): merge, HELLO,
 * LEAVE, heartbeat timeouts. No sockets, no clock, no logging; the owner learns of
 * members going up and down through its hooks. */
#include "swarm/members.h"
#include "common/le.h"
#include "common/status.h"

#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct members {
    members_entry_t *e; /* [0] is this peer */
    int n, cap;
    members_hooks_t hooks;
    int signing;
    uint8_t sk[64];
    uint64_t forged;
    /* when members_tick raised self's heartbeat, the last MEMBERS_ECHO_RING times */
    uint64_t ring_hb[64];
    double ring_t[64];
    int ring_n;
    /* SWIM: entries with news to send (news > 0), how many of them are fresh, how many
     * live entries are suspected: so that a tick of a 1,000-member table costs little */
    int *news_idx, nnews, cap_news, nfresh, nsuspect;
    /* SWIM: this peer's entry as published at its heartbeat (members_self_entry; its
     * heartbeat 0 until the first: self's starts at 1) */
    msg_member_t pub;
    /* live entries other than self, and where each id is in e[] (open addressing on the
     * id's first octets: i + 1, 0 free): a 1,000-member table is read per message */
    int nlive;
    int *slot;
    unsigned nslot;
};

#define MEMBERS_ECHO_RING 64
#define MEMBERS_PUSHES 2 /* ticks a fresh news is pushed at (each to the fanout) */

/* Entry e of t becomes alive (1) or not (0); the live count follows. */
static void set_alive(members_t *t, members_entry_t *e, int alive)
{
    if (e != t->e) t->nlive += (alive != 0) - (e->alive != 0);
    e->alive = alive;
}

static unsigned id_slot(const members_t *t, const uint8_t id[MSG_ID_LEN])
{
    return le_get_u32(id) & (t->nslot - 1);
}

/* Entry i into the id index (which has a free slot). */
static void index_put(members_t *t, int i)
{
    unsigned h = id_slot(t, t->e[i].m.id);
    while (t->slot[h]) h = (h + 1) & (t->nslot - 1);
    t->slot[h] = i + 1;
}

/* Indexes every entry again into 4 slots per entry (at least 64); -1 out of memory. */
static int reindex(members_t *t)
{
    unsigned n = 64;
    while (n < 4u * (unsigned)t->cap) n *= 2;
    int *s = calloc(n, sizeof *s);
    if (!s) return -1;
    free(t->slot);
    t->slot = s;
    t->nslot = n;
    for (int i = 0; i < t->n; i++) index_put(t, i);
    return 0;
}

members_t *members_new(const msg_member_t *self, double now, const members_hooks_t *hooks,
                       char *err)
{
    members_t *t = calloc(1, sizeof *t);
    if (!t) goto nomem;
    t->cap = 16;
    t->e = calloc((size_t)t->cap, sizeof *t->e);
    if (!t->e) goto nomem;
    t->n = 1;
    t->e[0].m = *self;
    t->e[0].heard_from = t->e[0].heard_at = -1;
    t->e[0].m.heartbeat = 1;
    t->e[0].alive = 1;
    t->e[0].last_change = now;
    if (reindex(t)) goto nomem;
    if (hooks) t->hooks = *hooks;
    return t;
nomem:
    if (t) free(t->e);
    free(t);
    status_set(err, STATUS_ENOMEM, "members: out of memory");
    return NULL;
}

void members_destroy(members_t **tp)
{
    if (!tp || !*tp) return;
    sodium_memzero((*tp)->sk, sizeof(*tp)->sk);
    free((*tp)->news_idx);
    free((*tp)->slot);
    free((*tp)->e);
    free(*tp);
    *tp = NULL;
}

int members_count(const members_t *t)
{
    return t->n;
}

members_entry_t *members_at(members_t *t, int i)
{
    return i >= 0 && i < t->n ? &t->e[i] : NULL;
}

int members_find(const members_t *t, const uint8_t id[MSG_ID_LEN])
{
    for (unsigned h = id_slot(t, id); t->slot[h]; h = (h + 1) & (t->nslot - 1)) {
        int i = t->slot[h] - 1;
        if (!memcmp(t->e[i].m.id, id, MSG_ID_LEN)) return i;
    }
    return -1;
}

void members_set_self(members_t *t, const msg_member_t *self)
{
    msg_member_t *me = &t->e[0].m;
    msg_member_t s = *self;
    memcpy(s.id, me->id, MSG_ID_LEN);
    memcpy(s.addr, me->addr, sizeof s.addr);
    s.heartbeat = me->heartbeat;
    *me = s;
}

void members_set_addr(members_t *t, const char *addr)
{
    snprintf(t->e[0].m.addr, sizeof t->e[0].m.addr, "%s", addr);
}

static void up(members_t *t, members_entry_t *e)
{
    /* what it held of this peer in a former life says nothing of what it holds now */
    e->heard_from = e->heard_at = -1;
    e->heard_hb = 0;
    if (t->hooks.up) t->hooks.up(t->hooks.ctx, e);
}

static void down(members_t *t, members_entry_t *e, const char *why, int left)
{
    if (!e->alive) return;
    if (e->suspect_at > 0) t->nsuspect--;
    e->suspect_at = 0;
    set_alive(t, e, 0);
    e->left = left;
    e->m.state = MEMBER_DEAD;
    if (t->hooks.down) t->hooks.down(t->hooks.ctx, e, why);
}

/* Appends an entry; NULL when out of memory. Does not call the up hook. */
static members_entry_t *add(members_t *t, const msg_member_t *m, double now)
{
    if (t->n == t->cap) {
        int cap = 2 * t->cap;
        members_entry_t *p = realloc(t->e, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        t->e = p;
        t->cap = cap;
        if (reindex(t)) return NULL;
    }
    members_entry_t *e = &t->e[t->n++];
    memset(e, 0, sizeof *e);
    e->m = *m;
    set_alive(t, e, 1);
    e->last_change = now;
    index_put(t, t->n - 1);
    return e;
}

void members_set_signing(members_t *t, const uint8_t *sk)
{
    t->signing = sk != NULL;
    if (sk)
        memcpy(t->sk, sk, sizeof t->sk);
    else
        sodium_memzero(t->sk, sizeof t->sk);
}

uint64_t members_forged(const members_t *t)
{
    return t->forged;
}

int members_control(members_t *t, const uint8_t id[MSG_ID_LEN], uint64_t seq)
{
    int j = members_find(t, id);
    if (j < 0) return 1;
    if (seq <= t->e[j].ctl_seq) return 0;
    t->e[j].ctl_seq = seq;
    return 1;
}

/* Whether an entry that would change the table carries its owner's signature. */
static int signed_by_owner(members_t *t, const msg_member_t *m)
{
    if (!t->signing) return 1;
    int ok = m->state == MEMBER_DEAD
                 ? msg_member_verify(m, MEMBER_JOINING) || msg_member_verify(m, MEMBER_SERVING)
                 : msg_member_verify(m, m->state);
    if (!ok) t->forged++;
    return ok;
}

int members_merge(members_t *t, const msg_member_t *v, int k, double now)
{
    int changed = 0;
    for (int i = 0; i < k; i++) {
        int j = members_find(t, v[i].id);
        if (j == 0 || v[i].state == MEMBER_SUSPECT) continue; /* SWIM's news: not gossip's */
        if (j > 0 && (v[i].state == MEMBER_DEAD || v[i].heartbeat <= t->e[j].m.heartbeat))
            continue; /* ignored below anyway: spare the signature check */
        if (!(j < 0 && v[i].state == MEMBER_LEAVING) && !signed_by_owner(t, &v[i])) continue;
        if (j < 0) {
            if (v[i].state == MEMBER_LEAVING) continue;
            members_entry_t *e = add(t, &v[i], now);
            if (!e) return -1;
            if (v[i].state == MEMBER_DEAD) { /* hearsay: a probe candidate, not a member */
                set_alive(t, e, 0);
                continue;
            }
            up(t, e);
            changed = 1;
            continue;
        }
        members_entry_t *e = &t->e[j];
        if (v[i].state == MEMBER_DEAD || v[i].heartbeat <= e->m.heartbeat) continue;
        int was_state = e->m.state, was_alive = e->alive;
        e->m = v[i];
        e->last_change = now;
        if (!e->alive && v[i].state != MEMBER_LEAVING) {
            set_alive(t, e, 1);
            e->left = 0;
            up(t, e);
        }
        if (v[i].state == MEMBER_LEAVING) {
            if (e->alive)
                down(t, e, "it left", 1);
            else
                e->m.state = MEMBER_DEAD;
        }
        if (was_state != e->m.state || was_alive != e->alive) changed = 1;
    }
    return changed;
}

int members_hello(members_t *t, const msg_t *m, double now)
{
    msg_member_t nm;
    memset(&nm, 0, sizeof nm);
    memcpy(nm.id, m->sender, MSG_ID_LEN);
    memcpy(nm.addr, m->addr, sizeof nm.addr);
    nm.addr[MSG_ADDR_MAX] = 0;
    nm.stage = m->stage < 0 ? 0 : m->stage;
    nm.state = MEMBER_JOINING;
    nm.loss = NAN;
    int j = members_find(t, m->sender);
    if (j == 0) return 0;
    if (j < 0) {
        members_entry_t *e = add(t, &nm, now);
        if (!e) return -1;
        e->ctl_seq = m->seq;
        up(t, e);
        return t->n - 1;
    }
    if (m->seq > t->e[j].ctl_seq) t->e[j].ctl_seq = m->seq;
    members_entry_t *e = &t->e[j];
    if (!e->alive) {
        /* Heartbeat 0: a peer restarted with the same id counts from 1 again, and its
         * gossip must win over what we last saw of its previous life. */
        e->m = nm;
        set_alive(t, e, 1);
        e->left = 0;
        e->last_change = now;
        up(t, e);
    }
    return j;
}

int members_leave(members_t *t, const uint8_t id[MSG_ID_LEN], const char *why)
{
    int j = members_find(t, id);
    if (j <= 0 || !t->e[j].alive) return 0;
    down(t, &t->e[j], why && why[0] ? why : "it left", 1);
    return 1;
}

int members_echo(members_t *t, const uint8_t sender[MSG_ID_LEN], const msg_member_t *v, int k,
                 double now)
{
    int j = members_find(t, sender), heard = 0;
    if (j <= 0) return 0;
    members_entry_t *e = &t->e[j];
    for (int i = 0; i < k; i++) {
        if (memcmp(v[i].id, t->e[0].m.id, MSG_ID_LEN)) continue;
        uint64_t hb = v[i].heartbeat;
        if (hb > e->heard_hb) { /* not a table older than one taken (reordered) */
            e->heard_hb = hb;
            if (v[i].serving_from != e->heard_from) {
                heard = 1;
                e->heard_from = v[i].serving_from;
                e->heard_at = INT64_MAX; /* the sender's step, when its table has it */
                for (int s = 0; s < k; s++)
                    if (!memcmp(v[s].id, sender, MSG_ID_LEN)) e->heard_at = v[s].step;
            }
        }
        if (hb <= e->echo_hb) return heard; /* an echo already taken, or older */
        int n = t->ring_n < MEMBERS_ECHO_RING ? t->ring_n : MEMBERS_ECHO_RING;
        for (int r = 0; r < n; r++) {
            int at = (t->ring_n - 1 - r) % MEMBERS_ECHO_RING;
            if (t->ring_hb[at] != hb) continue;
            double rtt = now - t->ring_t[at];
            if (rtt < 0) break;
            e->echo_hb = hb;
            rtt_note(&e->rtt, rtt);
            break;
        }
        return heard;
    }
    return heard;
}

double members_rto(const members_t *t, int i)
{
    return i < 0 || i >= t->n ? 0 : rtt_rto(&t->e[i].rtt);
}

void members_beat(members_t *t, double now)
{
    t->e[0].m.heartbeat++;
    t->ring_hb[t->ring_n % MEMBERS_ECHO_RING] = t->e[0].m.heartbeat;
    t->ring_t[t->ring_n % MEMBERS_ECHO_RING] = now;
    t->ring_n++;
}

int members_tick(members_t *t, double now, double timeout_s, int *dead, int max)
{
    int k = 0;
    members_beat(t, now);
    for (int i = 1; i < t->n; i++) {
        double limit = 2 * members_rto(t, i);
        if (limit < timeout_s) limit = timeout_s;
        if (!t->e[i].alive || now - t->e[i].last_change <= limit) continue;
        down(t, &t->e[i], "silent past the timeout", 0);
        t->e[i].last_change = now; /* from now on: when it died */
        if (dead && k < max) dead[k] = i;
        k++;
    }
    return k;
}

void members_resume(members_t *t, double now, double paused_s)
{
    /* an echo of a heartbeat raised before the gap would time the gap as a round trip (a
     * 19 s pause made every member's silence limit 2 x rto, 43 s: sim pause 2x2 seed 124) */
    t->ring_n = 0;
    for (int i = 1; i < t->n; i++) {
        if (!t->e[i].alive) continue;
        double c = t->e[i].last_change + paused_s;
        t->e[i].last_change = c < now ? c : now;
        if (t->e[i].suspect_at > 0) { /* and a suspicion's time runs from the wake */
            c = t->e[i].suspect_at + paused_s;
            t->e[i].suspect_at = c < now ? c : now;
        }
    }
}

int members_view(const members_t *t, msg_member_t *out)
{
    int k = 0;
    for (int i = 0; i < t->n; i++)
        if (t->e[i].alive) out[k++] = t->e[i].m;
    return k;
}

int members_view_heard(const members_t *t, int64_t *heard)
{
    int k = 0;
    for (int i = 0; i < t->n; i++)
        if (t->e[i].alive) heard[2 * k] = t->e[i].heard_from, heard[2 * k + 1] = t->e[i].heard_at, k++;
    return k;
}

int members_live_others(const members_t *t)
{
    return t->nlive;
}

/* Encodes v[0, k) as a member table into a fresh *buf; takes v (frees it). */
static int encode_table(msg_member_t *v, int k, uint8_t **buf, size_t *len, char *err)
{
    size_t cap = msg_members_size(v, k);
    uint8_t *b = malloc(cap);
    int rc = b ? msg_members_encode(v, k, b, cap, len, err)
               : status_set(err, STATUS_ENOMEM, "members: out of memory");
    free(v);
    if (rc) {
        free(b);
        *len = 0;
        return rc;
    }
    *buf = b;
    return 0;
}

int members_encode(const members_t *t, uint8_t **buf, size_t *len, char *err)
{
    *buf = NULL;
    *len = 0;
    msg_member_t *v = malloc((size_t)t->n * sizeof *v);
    if (!v) return status_set(err, STATUS_ENOMEM, "members: out of memory");
    int k = 0;
    for (int i = 0; i < t->n; i++)
        if (t->e[i].alive && !(t->signing && i > 0 && !t->e[i].m.heartbeat)) v[k++] = t->e[i].m;
    if (t->signing) msg_member_sign(&v[0], t->sk);
    return encode_table(v, k, buf, len, err);
}

static int candidate(const members_entry_t *e, double now, double dead_s)
{
    return !e->alive && !e->left && now - e->last_change <= dead_s;
}

int members_encode_gossip(const members_t *t, double now, double dead_s, uint8_t **buf,
                          size_t *len, char *err)
{
    *buf = NULL;
    *len = 0;
    msg_member_t *v = malloc((size_t)t->n * sizeof *v);
    if (!v) return status_set(err, STATUS_ENOMEM, "members: out of memory");
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        if (t->signing && i > 0 && !t->e[i].m.heartbeat) continue; /* unsigned (HELLO) */
        if (t->e[i].alive) {
            v[k++] = t->e[i].m;
        } else if (candidate(&t->e[i], now, dead_s)) {
            v[k] = t->e[i].m;
            v[k++].state = MEMBER_DEAD;
        }
    }
    if (t->signing) msg_member_sign(&v[0], t->sk);
    return encode_table(v, k, buf, len, err);
}

int members_probe(const members_t *t, double now, double dead_s, uint64_t r)
{
    int c = 0;
    for (int i = 1; i < t->n; i++) c += candidate(&t->e[i], now, dead_s);
    if (!c) return -1;
    int k = (int)(r % (uint64_t)c);
    for (int i = 1; i < t->n; i++)
        if (candidate(&t->e[i], now, dead_s) && k-- == 0) return i;
    return -1;
}

/* ---- SWIM ----------------------------------------------------------------------------- */

void members_make_news(members_t *t, int i)
{
    if (i < 0 || i >= t->n) return;
    members_entry_t *e = &t->e[i];
    if (i > 0 && e->news <= 0) { /* onto the list of entries with news */
        if (t->nnews == t->cap_news) {
            int cap = t->cap_news ? 2 * t->cap_news : 16;
            int *p = realloc(t->news_idx, (size_t)cap * sizeof *p);
            if (!p) return; /* out of memory: this news travels only by probes */
            t->news_idx = p;
            t->cap_news = cap;
        }
        t->news_idx[t->nnews++] = i;
    }
    int sends = 0;
    while ((1 << sends) < t->n + 1) sends++; /* ceil(log2(entries + 1)) */
    e->news = sends ? sends : 1;
    if (!e->fresh) t->nfresh++;
    e->fresh = MEMBERS_PUSHES;
}

/* Entry i is suspected from now (0: no more). */
static void set_suspect(members_t *t, members_entry_t *e, double at)
{
    t->nsuspect += (at > 0) - (e->suspect_at > 0);
    e->suspect_at = at;
}

/* An entry suspected or declared dead by others verifies as its owner signed it. */
static int swim_signed(members_t *t, const msg_member_t *m)
{
    if (!t->signing) return 1;
    int ok = m->state == MEMBER_DEAD || m->state == MEMBER_SUSPECT
                 ? msg_member_verify(m, MEMBER_JOINING) || msg_member_verify(m, MEMBER_SERVING)
                 : msg_member_verify(m, m->state);
    if (!ok) t->forged++;
    return ok;
}

static int owner_state(int state)
{
    return state == MEMBER_JOINING || state == MEMBER_SERVING;
}

int members_swim_newsworthy(const msg_member_t *a, const msg_member_t *b)
{
    return a->state != b->state || a->stage != b->stage || a->serving_from != b->serving_from ||
           strcmp(a->addr, b->addr) || (a->served > 0) != (b->served > 0);
}

/* SWIM's heartbeat: an incarnation in the high 32 bits (raised only to refute a suspicion
 * or death), a version in the low 32 (raised when the entry changes). Suspicion, death and
 * revival judge incarnations; which copy of an entry is newer, the whole value. */
#define INC(hb) ((hb) >> 32)

int members_swim_merge(members_t *t, const msg_member_t *v, int k, double now, int news,
                       uint64_t *refute)
{
    int changed = 0;
    for (int i = 0; i < k; i++) {
        const msg_member_t *m = &v[i];
        int j = members_find(t, m->id);
        if (j == 0) {
            if ((m->state == MEMBER_SUSPECT || m->state == MEMBER_DEAD) && m->heartbeat >= *refute &&
                INC(m->heartbeat) >= INC(t->e[0].m.heartbeat))
                *refute = m->heartbeat ? m->heartbeat : 1;
            continue;
        }
        if (j < 0) {
            if (m->state == MEMBER_LEAVING || !swim_signed(t, m)) continue;
            members_entry_t *e = add(t, m, now);
            if (!e) return -1;
            if (m->state == MEMBER_DEAD) { /* a probe candidate, not a member */
                set_alive(t, e, 0);
                continue;
            }
            if (m->state == MEMBER_SUSPECT) {
                e->m.state = MEMBER_SERVING; /* its owner's state is not known yet */
                set_suspect(t, e, now);
            }
            up(t, e);
            if (news) members_make_news(t, (int)(e - t->e));
            changed = 1;
            continue;
        }
        members_entry_t *e = &t->e[j];
        if (owner_state(m->state)) {
            if (m->heartbeat <= e->m.heartbeat || !swim_signed(t, m)) continue;
            /* dead, or suspected, in an incarnation: only a later one refutes it (a newer
             * version of the same incarnation is a stale copy of a member since declared
             * dead, or a mere update of a suspected one) */
            int newer = INC(m->heartbeat) > INC(e->m.heartbeat);
            if (!e->alive && !newer) continue;
            int was_alive = e->alive,
                worth = !e->alive || newer || members_swim_newsworthy(&e->m, m);
            if (e->m.state != m->state || !was_alive) changed = 1;
            e->m = *m;
            e->last_change = now;
            if (newer) set_suspect(t, e, 0);
            if (!was_alive) {
                set_alive(t, e, 1);
                e->left = 0;
                up(t, e);
            }
            if (worth && news) members_make_news(t, j);
        } else if (m->state == MEMBER_SUSPECT) {
            if (!e->alive || e->suspect_at > 0 || INC(m->heartbeat) < INC(e->m.heartbeat) ||
                !swim_signed(t, m))
                continue;
            set_suspect(t, e, now);
            if (news) members_make_news(t, j);
        } else if (m->state == MEMBER_DEAD) {
            if (!e->alive || INC(m->heartbeat) < INC(e->m.heartbeat) || !swim_signed(t, m))
                continue;
            down(t, e, "declared dead by a member", 0);
            e->last_change = now;
            if (news) members_make_news(t, j);
            changed = 1;
        } else if (m->state == MEMBER_LEAVING) {
            if (!e->alive || m->heartbeat <= e->m.heartbeat) continue;
            down(t, e, "it left", 1);
            changed = 1;
        }
    }
    return changed;
}

int members_swim_expire(members_t *t, double now, double suspect_s)
{
    int k = 0;
    for (int i = 1; i < t->n && t->nsuspect > 0; i++) {
        members_entry_t *e = &t->e[i];
        if (!e->alive || e->suspect_at <= 0 || now - e->suspect_at <= suspect_s) continue;
        down(t, e, "suspected past the timeout", 0);
        e->last_change = now;
        members_make_news(t, i);
        k++;
    }
    return k;
}

int members_suspect(members_t *t, int i, double now)
{
    if (i <= 0 || i >= t->n || !t->e[i].alive || t->e[i].suspect_at > 0) return 0;
    set_suspect(t, &t->e[i], now);
    members_make_news(t, i);
    return 1;
}

void members_refute(members_t *t, double now, uint64_t claimed)
{
    uint64_t hb = t->e[0].m.heartbeat, inc = INC(hb) > INC(claimed) ? INC(hb) : INC(claimed);
    t->e[0].m.heartbeat = ((inc + 1) << 32) | (hb & 0xffffffffULL);
    members_beat(t, now); /* and a version: the echo ring notes when */
    members_make_news(t, 0);
}

/* How entry e goes on the wire as news. */
static void news_entry(const members_entry_t *e, msg_member_t *out)
{
    *out = e->m;
    if (!e->alive)
        out->state = MEMBER_DEAD;
    else if (e->suspect_at > 0)
        out->state = MEMBER_SUSPECT;
}

/* One fresh push of e taken (fresh: a push tick) or one piggyback send. */
static void news_sent(members_t *t, members_entry_t *e, int fresh)
{
    e->news--;
    int was = e->fresh > 0;
    if (fresh && e->fresh) e->fresh--;
    if (e->news <= 0) e->fresh = 0;
    if (was && !e->fresh) t->nfresh--;
}

int members_news(members_t *t, msg_member_t *out, int max, int fresh)
{
    enum { NEWS_MAX = 64 };
    int idx[NEWS_MAX], k = 0;
    if (max > NEWS_MAX) max = NEWS_MAX;
    if (fresh && t->e[0].fresh && !--t->e[0].fresh) t->nfresh--; /* self goes first anyway */
    /* the max entries with the most sends left, in that order (the earlier on the list
     * first among equals): one pass, an insertion into idx[0, k) kept in order */
    for (int q = 0; q < t->nnews && max > 0; q++) {
        int i = t->news_idx[q];
        members_entry_t *e = &t->e[i];
        if (e->news <= 0 || (fresh && !e->fresh)) continue;
        if (t->signing && !e->m.heartbeat) { /* unsigned (a HELLO's): not news */
            if (e->fresh) t->nfresh--;
            e->news = e->fresh = 0;
            continue;
        }
        int taken = 0;
        for (int p = 0; p < k && !taken; p++) taken = idx[p] == i;
        if (taken || (k == max && e->news <= t->e[idx[k - 1]].news)) continue;
        int at = k < max ? k++ : k - 1;
        for (; at > 0 && t->e[idx[at - 1]].news < e->news; at--) idx[at] = idx[at - 1];
        idx[at] = i;
    }
    for (int p = 0; p < k; p++) {
        news_entry(&t->e[idx[p]], &out[p]);
        news_sent(t, &t->e[idx[p]], fresh);
    }
    int w = 0; /* entries whose news ran out leave the list */
    for (int q = 0; q < t->nnews; q++)
        if (t->e[t->news_idx[q]].news > 0) t->news_idx[w++] = t->news_idx[q];
    t->nnews = w;
    return k;
}

int members_recent_dead(const members_t *t, double now, double dead_s, msg_member_t *out,
                        int max)
{
    enum { DEAD_MAX = 64 };
    int idx[DEAD_MAX], k = 0;
    if (max > DEAD_MAX) max = DEAD_MAX;
    /* the max latest deaths, latest first: an insertion into idx[0, k) kept in order */
    for (int i = 1; i < t->n && max > 0; i++) {
        const members_entry_t *e = &t->e[i];
        if (!candidate(e, now, dead_s) || (t->signing && !e->m.heartbeat)) continue;
        if (k == max && e->last_change <= t->e[idx[k - 1]].last_change) continue;
        int at = k < max ? k++ : k - 1;
        for (; at > 0 && t->e[idx[at - 1]].last_change < e->last_change; at--)
            idx[at] = idx[at - 1];
        idx[at] = i;
    }
    for (int p = 0; p < k; p++) {
        out[p] = t->e[idx[p]].m;
        out[p].state = MEMBER_DEAD;
    }
    return k;
}

int members_has_fresh(const members_t *t)
{
    return t->nfresh > 0;
}

void members_self_entry_now(const members_t *t, msg_member_t *out)
{
    *out = t->e[0].m;
    if (t->signing) msg_member_sign(out, t->sk);
}

void members_self_entry(members_t *t, msg_member_t *out)
{
    if (t->pub.heartbeat != t->e[0].m.heartbeat) {
        t->pub = t->e[0].m;
        if (t->signing) msg_member_sign(&t->pub, t->sk);
    }
    *out = t->pub;
}
