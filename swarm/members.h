/* members.h — membership as a pure state machine: the member table a peer's network
 * layer keeps (gossip merge, HELLO, LEAVE, failure detection by heartbeat timeout).
 * No sockets and no clock: every call that depends on time takes `now` (seconds, any
 * origin), so the ZeroMQ network thread (net.c) and the simulator (sim.c) run the very
 * same code.
 *
 * Rules (docs/protocol.md, "Membership"):
 * - entry [0] is this peer; its heartbeat goes up by one at every members_tick;
 * - on merge, a received entry replaces ours when its heartbeat is higher; an entry in
 *   state LEAVING makes the member dead ("it left"); a dead member comes back when its
 *   heartbeat rises above the one we last saw (and it is not LEAVING);
 * - unknown entries in state LEAVING or DEAD are not added;
 * - a member whose heartbeat has not risen for timeout_s is dead ("silent past the
 *   timeout") — the verdict is local to this table;
 * - members that died of silence (not those that left) are remembered as probe
 *   candidates for dead_s: gossip tables (members_encode_gossip) carry them in state
 *   DEAD, a receiver that never heard of such an entry keeps it as a dead candidate
 *   (never as live: DEAD from another table is hearsay and kills nothing), and the owner
 *   sends its gossip to one candidate per tick (members_probe). After a partition heals
 *   the sides find each other this way — even members that joined one side during the
 *   partition and never saw the other side alive.
 *
 * Whoever owns the table learns about members going up (added or revived) and down
 * (left, timed out) through optional hooks, called synchronously from the call that
 * caused them; net.c opens and closes a member's DEALER there, the simulator traces.
 * Each entry has a `user` pointer for the owner (net.c: the DEALER).
 *
 * Not for: sockets, message framing (msg.h), what members do (peer/).
 */
#ifndef SWARMTRAIN_MEMBERS_H
#define SWARMTRAIN_MEMBERS_H

#include "common/rtt.h"
#include "swarm/msg.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    msg_member_t m;
    double last_change; /* when its heartbeat last went up (or it was added) */
    int alive;          /* 0: dead to this table (timed out or left) */
    int left;           /* dead because it left on purpose (LEAVE, a LEAVING entry) */
    void *user;         /* the owner's per-member data (net.c: the DEALER) */
    uint64_t ctl_seq;   /* the last control counter accepted from it (members_control) */
    /* echo times of this peer's heartbeats through it (members_echo), TCP-style */
    rtt_t rtt;         /* no sample: the fixed timeout applies */
    uint64_t echo_hb;  /* the last own heartbeat it echoed */
    /* what it holds of this peer (members_echo): the serving_from of this peer's entry in
     * its newest GOSSIP (-1: none heard), and its own step in the GOSSIP where it first
     * held that value */
    int64_t heard_from, heard_at;
    uint64_t heard_hb;
    /* SWIM (members_swim_*): suspected since (0: not suspected); news: sends left to
     * piggyback it on (0: no news); fresh: news not yet pushed to the tick's fanout */
    double suspect_at;
    int news, fresh;
    double up_at; /* when it last came up, on the owner's clock (dispatch.c's up hook) */
    /* SWIM's direct path (dispatch.c, 10.7 rule 13): the probe number of the first ping
     * this peer sent it that it has not answered itself, late or not (0: none), when that
     * was sent, and how many pings since */
    uint64_t direct_first;
    double direct_since;
    int direct_lost;
    double mend_at;      /* when its MEND last had this peer reconnect to it (11.3) */
    double mend_sent_at; /* when this peer last reconnected to it and sent it a MEND */
} members_entry_t;

typedef struct {
    void *ctx;
    /* e was added or came back to life. */
    void (*up)(void *ctx, members_entry_t *e);
    /* e just became dead; why: "it left", "silent past the timeout", or LEAVE's text. */
    void (*down)(void *ctx, members_entry_t *e, const char *why);
} members_hooks_t;

typedef struct members members_t;

/* A table holding only this peer (self: id, addr, stage, state; its heartbeat starts
 * at 1). hooks may be NULL. NULL + err when out of memory. */
members_t *members_new(const msg_member_t *self, double now, const members_hooks_t *hooks,
                       char *err);

/* NULL-safe; does not call the down hook. */
void members_destroy(members_t **t);

/* Entries in the table, dead ones included (they are never removed: a dead member may
 * come back). */
int members_count(const members_t *t);

/* Entry i (0 = self), or NULL when out of range. Pointers stay valid until the next
 * call that may add an entry (merge, hello). */
members_entry_t *members_at(members_t *t, int i);

/* Index of the member with this id, or -1. */
int members_find(const members_t *t, const uint8_t id[MSG_ID_LEN]);

/* Replaces this peer's own entry, keeping its id, address and heartbeat (the table's). */
void members_set_self(members_t *t, const msg_member_t *self);
/* Changes this peer's own address (an unreachable peer names another relay); members
 * learn it with its next heartbeat. */
void members_set_addr(members_t *t, const char *addr);

/* Merges k received entries (a GOSSIP or WELCOME table). Returns 1 when the live set
 * or a member's state changed, else 0; -1 when out of memory (entries merged up to
 * there stay). */
int members_merge(members_t *t, const msg_member_t *v, int k, double now);

/* A HELLO from a joiner (m->sender, m->addr, m->stage; stage < 0 reads as 0): adds it as
 * JOINING, or brings a dead entry back as JOINING; a live entry is left as it is.
 * Returns the entry's index, or -1 when out of memory. */
int members_hello(members_t *t, const msg_t *m, double now);

/* A LEAVE from member id (why: its text, or NULL for "it left"). Returns 1 when it was
 * alive (the live set changed), else 0. */
int members_leave(members_t *t, const uint8_t id[MSG_ID_LEN], const char *why);

/* Self's heartbeat + 1 (remembered for members_echo's round trips). */
void members_beat(members_t *t, double now);

/* A gossip tick: self's heartbeat + 1, then every live member silent for more than its
 * timeout is declared dead: timeout_s, or twice the member's echo timeout
 * (members_rto) when that is longer (a member behind a slow or congested link is not
 * declared dead for being late; timeout_s is the floor). Returns how many just died;
 * their indexes go into dead (up to max of them; dead may be NULL). */
int members_tick(members_t *t, double now, double timeout_s, int *dead, int max);

/* A GOSSIP table v[0, k) received directly from member `sender` at `now`: when it
 * carries this peer's own entry with a heartbeat newer than the last that sender echoed,
 * the time since this peer's tick raised its heartbeat to that value is a round-trip
 * sample for the sender (the round trip plus up to one gossip period of the sender's),
 * folded in as TCP does (RFC 6298: srtt, rttvar). Heartbeats raised more than 64 ticks
 * ago are not remembered and give no sample. Whatever the heartbeat, the newest such
 * entry also says which serving_from of this peer the sender holds (heard_from, and the
 * sender's step when it first held it, heard_at): a newcomer learns that every mate has
 * heard the step it contributes from (docs/protocol.md 9.5). Returns 1 when heard_from
 * changed. */
int members_echo(members_t *t, const uint8_t sender[MSG_ID_LEN], const msg_member_t *v, int k,
                  double now);

/* Entry i's echo timeout, srtt + 4 rttvar in seconds; 0 when it has no sample. */
double members_rto(const members_t *t, int i);

/* Live entries (self first) into out, which holds members_count(t) entries; returns
 * how many. This is the table of NET_EV_VIEW and of GOSSIP and WELCOME payloads. */
int members_view(const members_t *t, msg_member_t *out);

/* What the live entries (in members_view's order) hold of this peer: heard[2i] their
 * heard_from, heard[2i + 1] their heard_at (self: -1, -1). heard holds 2 members_count(t)
 * values; returns how many entries. */
int members_view_heard(const members_t *t, int64_t *heard);

/* Encodes the live table (msg_members_encode) into a buffer the caller owns (free()).
 * 0, or a status with err. */
int members_encode(const members_t *t, uint8_t **buf, size_t *len, char *err);

/* The gossip table: the live entries plus, in state DEAD, those that died of silence
 * within the last dead_s (probe candidates). Caller frees *buf. 0, or a status. */
int members_encode_gossip(const members_t *t, double now, double dead_s, uint8_t **buf,
                          size_t *len, char *err);

/* A probe candidate (died of silence within dead_s, not left), chosen by r among them
 * (r: any random number from the caller's source); -1 when there is none. */
int members_probe(const members_t *t, double now, double dead_s, uint64_t r);

/* Signed membership (docs/protocol.md 10.2): with a secret key set, this table signs its
 * own entry whenever it encodes a table, leaves out entries nobody signed (those a HELLO
 * made), and merges a received entry only when its signature verifies against the id it
 * describes (an entry in state DEAD: as signed in state joining or serving); the others are
 * counted (members_forged) and ignored. Without (the simulator, whose ids are not keys),
 * nothing is signed or checked. sk: 64 octets, copied; NULL turns it off. */
void members_set_signing(members_t *t, const uint8_t *sk);
uint64_t members_forged(const members_t *t);

/* A signed control message (HELLO, LEAVE) from id with counter seq: 1 when seq is greater
 * than the last accepted from id (recorded), or id is unknown; 0 for a replay. */
int members_control(members_t *t, const uint8_t id[MSG_ID_LEN], uint64_t seq);

/* The owner of this table was paused (SIGSTOP, a laptop asleep, a VM migrated) for
 * paused_s: the silence it measured across the pause is its own, not the members'. Every
 * live member's silence timer moves forward by paused_s (to now at most), so that none is
 * declared dead for the owner's sleep; a member that is really gone dies a timeout later. */
void members_resume(members_t *t, double now, double paused_s);

/* How many live members besides self. */
int members_live_others(const members_t *t);

/* ---- SWIM membership (docs/protocol.md 10.4) ------------------------------------------
 * With membership=swim no member's liveness rests on its heartbeat reaching everyone:
 * a member is alive until it fails a probe (dispatch.c: a ping, then pings asked of
 * others), is suspected, and stays suspected past the suspicion timeout; then it is
 * dead. Changes travel as news: entries a message carries besides the sender's own,
 * each sent a bounded number of times (members_news), and pushed once, at the next tick,
 * to a few members by whoever learns them first. Heartbeats still rise every tick: they
 * order versions of an entry, and a fresh one refutes a suspicion. */

/* Whether entry b, a later version of a, is news under SWIM: its state, stage,
 * serving_from or address changed, or it served its first microbatch (whether the swarm
 * has begun, which recovery reads: sim restart 6x3 seed 620076 waited for good when only
 * the members that had served knew it). */
int members_swim_newsworthy(const msg_member_t *a, const msg_member_t *b);

/* Merges entries of a PROBE table or a WELCOME under SWIM's rules; news != 0: what
 * changed the table becomes news (not for a WELCOME, or a SYNC's whole table).
 * Heartbeats under SWIM: an incarnation (high 32 bits), raised only by a refutation, and a
 *   version (low 32), raised when the entry changes; suspicion, death and revival judge
 *   incarnations, which copy is newer the whole value.
 * - own entry: a SUSPECT or DEAD of this peer is refuted (*refute: the highest heartbeat
 *   such a claim named, 0 for none; the caller calls members_refute);
 * - unknown: JOINING, SERVING or SUSPECT added alive (SUSPECT: suspected now); DEAD kept
 *   as a probe candidate; LEAVING ignored;
 * - JOINING or SERVING with a higher heartbeat: replaces ours; a later incarnation clears a
 *   suspicion and revives a dead entry (the same incarnation does neither: a stale copy);
 *   news when its incarnation rose or members_swim_newsworthy;
 * - SUSPECT with an incarnation at least ours: a live entry not yet suspected is suspected
 *   from now;
 * - DEAD with an incarnation at least ours: a live entry dies ("declared dead by a
 *   member");
 * - LEAVING with a higher heartbeat: it left.
 * Returns 1 when the live set or a member's state changed, 0 if not, -1 out of memory. */
int members_swim_merge(members_t *t, const msg_member_t *v, int k, double now, int news,
                       uint64_t *refute);

/* Suspected past suspect_s: dead ("suspected past the timeout"), and news. Returns how
 * many died (no heartbeat timeout under SWIM: probes decide). */
int members_swim_expire(members_t *t, double now, double suspect_s);

/* This peer probed entry i and it did not answer, nor through others: suspected now,
 * news. Returns 1 when it was not suspected yet. */
int members_suspect(members_t *t, int i, double now);

/* Someone suspects or declared this peer dead, at heartbeat `claimed` (*refute of
 * members_swim_merge): its incarnation (the heartbeat's high 32 bits) goes above both its
 * own and the claimed one, and its own entry is fresh news, so that the refutation
 * spreads. */
void members_refute(members_t *t, double now, uint64_t claimed);

/* Entry i becomes fresh news: pushed at the next MEMBERS_PUSHES ticks, and piggybacked
 * on the next ceil(log2(live + 1)) messages that have room for it. */
void members_make_news(members_t *t, int i);

/* Up to max news entries for a message into out, as they go on the wire (a suspected
 * entry in state SUSPECT, one declared dead DEAD), those with the most sends left first;
 * each one's count goes down by one. fresh: only news not yet pushed, which then counts
 * as pushed. Self is never among them (a message carries it first anyway). Returns how
 * many. */
int members_news(members_t *t, msg_member_t *out, int max, int fresh);

/* This peer's own entry as it goes first in a PROBE's table: as it stood when first sent
 * at its present heartbeat, signed once then (when signing). A member takes an entry only
 * at a higher heartbeat, so what changes between heartbeats (counters, rates) would be
 * dropped by every member that holds the entry; a newcomer gets it as of that version. */
void members_self_entry(members_t *t, msg_member_t *out);
/* The same entry as it stands now (its uptime current), signed afresh: for a pause's
 * ANSWER (docs/protocol.md 10.8), whose asker reads the answerer's uptime. */
void members_self_entry_now(const members_t *t, msg_member_t *out);

/* Up to max of the members dead to this table within the last dead_s that did not leave
 * (declared dead, suspected past the timeout, silent: members_probe's candidates), the
 * most recently dead first, into out as news carries them (state DEAD, the owner's
 * signature kept). For a SYNC that asks for deaths (docs/protocol.md 10.7 rule 8): the
 * asker holds more live members than most members do. Returns how many. */
int members_recent_dead(const members_t *t, double now, double dead_s, msg_member_t *out,
                        int max);

/* Whether some news was not pushed yet. */
int members_has_fresh(const members_t *t);

#endif
