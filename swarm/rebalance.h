/* rebalance.h — live rebalancing as a pure function of the member table (SWARM, Petals):
 * which serving peer, if any, should move to which stage so that the swarm's slowest
 * stage gets faster. Every peer runs the same function on its own gossiped table; the one
 * it names moves, the others do nothing. No clock, no sockets, no state: the caller (peer/
 * rebal.c) runs it from a timer and adds the time rules (a cooldown after any change of
 * placement, the same answer on several ticks in a row).
 *
 * Rules (docs/design-notes.md, "Rebalancing"):
 * - a stage's throughput is the sum of its serving members' gossiped throughputs
 *   (samples/s of compute, a bias-corrected EMA each peer measures on itself);
 * - nothing moves while the table is settling: a member of a stage is joining
 *   (downloading: a joiner or a mover on its way), following its pool (serving_from >
 *   step: it arrived lately), or has not measured its throughput yet; so at most one
 *   peer is on the move across the swarm;
 * - nothing moves while a stage has no serving member (that is recovery, not balance);
 * - a member may leave its stage only if at least one other serving member stays;
 * - a move is taken only if it raises the minimum stage throughput to at least
 *   (1 + margin) times what it is (hysteresis: default 20%; moving back the last move
 *   seen needs reverse_margin, 60%). The mover's throughput in its new stage is its speed
 *   relative to its stage's mean times the new stage's mean per member (stages differ in
 *   cost: the embedding, the LM head; a peer's relative speed is taken to carry over);
 * - among the moves that do, the best new minimum wins; moves within `tie` (5%) of the
 *   best count as equal and the lowest member id among them wins, so that tables that
 *   differ by a little gossip lag still name the same mover.
 * Not for: executing a move (peer/move.c) or timing it (peer/rebal.c). */
#ifndef SWARMTRAIN_REBALANCE_H
#define SWARMTRAIN_REBALANCE_H

#include "swarm/msg.h"

#include <stdint.h>

#define REBALANCE_MAX_STAGES 256

typedef struct {
    double margin; /* a move must raise the minimum stage throughput by this fraction (0.2) */
    double tie;    /* moves whose new minimum is within this fraction of the best are equal (0.05) */
    /* the last move the caller saw (from -> to; -1: none): moving back, to -> from, must
     * gain reverse_margin (0.6) instead of margin, so that noise in the estimates does
     * not send peers back and forth */
    int last_from, last_to;
    double reverse_margin;
} rebalance_config_t;

typedef enum {
    REBALANCE_MOVE = 0,     /* `who` moves from `from` to `to` */
    REBALANCE_BALANCED = 1, /* no move raises the minimum by the margin */
    REBALANCE_SETTLING = 2, /* a member is joining, following or unmeasured: wait */
    REBALANCE_EMPTY = 3,    /* a stage has no serving member (recovery's business) */
    REBALANCE_NONE = 4,     /* nothing to balance (one stage, bad input) */
} rebalance_verdict_t;

typedef struct {
    int verdict; /* rebalance_verdict_t */
    uint8_t who[MSG_ID_LEN];
    int from, to;
    double min_before, min_after; /* the minimum stage throughput now, and after the move */
    int bottleneck;               /* the stage with the minimum now (-1: none) */
    char why[200];                /* one line: what the move gains, or why none */
} rebalance_decision_t;

rebalance_config_t rebalance_defaults(void);

/* Per stage of S (S <= REBALANCE_MAX_STAGES): the summed throughput of its serving
 * members into tp[S] and their number into count[S] (either may be NULL). Members of
 * stages outside [0, S) and members not serving are not counted. */
void rebalance_totals(const msg_member_t *m, int n, int S, double *tp, int *count);

/* The decision for the table m[0, n) of a swarm of S stages. Never fails: bad input
 * reads as REBALANCE_NONE. Returns d->verdict. */
int rebalance_decide(const msg_member_t *m, int n, int S, const rebalance_config_t *c,
                     rebalance_decision_t *d);

/* A fingerprint of the placement: which member serves or joins which stage. Equal
 * tables give equal values whatever their order. */
uint64_t rebalance_placement(const msg_member_t *m, int n);

#endif
