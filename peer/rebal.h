/* rebal.h — the rebalancing part of a member: when to run the swarm-wide decision
 * (swarm/rebalance.c) and when its answer becomes this peer's move. Once a second it runs
 * the decision on the member table; when that names this peer on REBAL_STREAK ticks in a
 * row, with the placement unchanged for the cooldown and not in the run's last steps, a
 * move is decided, which the peer makes at a clean moment (move.c: right after it sent
 * its pool its exchange message of the step); a change of placement meanwhile calls it
 * off. Every peer computes the same decision, so one moves and the others wait. For
 * REBAL_REVERSE_S after a move seen in the table, moving it back (to -> from) must gain
 * three times the margin: estimates are noisy, and peers that reload stages again and
 * again (Petals) help nobody. A member that arrives or dies makes a new situation: that
 * memory is dropped.
 *
 * Pure rules on its own state (no peer, no network, no clock); its timers are named
 * fields. Lifetime: the process (rebal_init); a decided move and its streak end with the
 * stage held (rebal_reset).
 *
 * Not for: the decision itself (swarm/rebalance.c), the move (move.c). */
#ifndef SWARMTRAIN_REBAL_H
#define SWARMTRAIN_REBAL_H

#include "common/timeout.h"
#include "swarm/msg.h"

#include <stdint.h>

#define REBAL_EVERY_S   1.0   /* decisions a second */
#define REBAL_STREAK    3     /* the same answer this many times before a move */
#define REBAL_RECORD_S  30.0  /* a "stages" event (each stage's peers, throughput) this often */
#define REBAL_REVERSE_S 600.0 /* moving the last move back needs 3x the margin this long */
#define REBAL_STAGES    64    /* stages whose member counts it follows */

typedef struct {
    timeout_t decide;   /* rebal.decide: the next decision */
    timeout_t record;   /* rebal.record: the next "stages" event in the store */
    timeout_t reverse;  /* rebal.reverse: while it runs, the last move seen may be moved
                         * back only for three times the margin */
    uint64_t placement; /* the placement of the last decision ... */
    double stable_since; /* ... unchanged since (0: not yet seen) */
    int streak;         /* decisions in a row that named this peer */
    int to;             /* a move decided (rebal_ask too), waiting for a clean moment; -1 */
    char why[200];
    int cnt[REBAL_STAGES], n; /* members per stage, and in all, at the last decision */
    int last_from, last_to;   /* the last move seen in the table (-1: none) */
    int moves;          /* moves this peer made */
} rebal_t;

/* What a decision reads: the view and this member's place in it. */
typedef struct {
    const msg_member_t *view;
    int n;
    int S;
    const uint8_t *self;    /* this peer's id */
    int stage;
    int64_t step, steps;    /* its pool's step and the run's last */
    double cooldown_s;      /* the placement must be stable this long */
    double margin;          /* the decision's margin (0: the default) */
    int off;                /* --no-rebalance */
} rebal_in_t;

void rebal_init(rebal_t *r);
/* The stage held ends: a decided move and its streak are dropped. */
void rebal_reset(rebal_t *r);

/* Whether the "stages" event is due at now (then it is due again REBAL_RECORD_S later). */
int rebal_record_due(rebal_t *r, double now);

/* One decision at now, when rebal.decide is due: 1 when it decides a move (r->to, r->why),
 * else 0. */
int rebal_decide(rebal_t *r, const rebal_in_t *in, double now);

/* A decided move (r->to >= 0) still stands given the view: 1; a change of placement calls
 * it off (r->to -1): 0. */
int rebal_stands(rebal_t *r, const msg_member_t *view, int n);

/* Asked to move to `stage` (the simulator, tests): decided now, with the view's placement. */
void rebal_ask(rebal_t *r, int stage, const msg_member_t *view, int n, const char *why);

/* The decided move is made: r->to cleared, counted. Returns the stage it goes to. */
int rebal_take(rebal_t *r);

#endif
