/* wiring.h — SWARM's stochastic wiring: which peer of a stage gets the next microbatch.
 * Each candidate has a virtual load; the least loaded wins (random tie-break) and its
 * load grows by cost / relative throughput, so work spreads in proportion to measured
 * speed. A
 * peer seen for the first time enters at the current minimum load, and one that was not a
 * candidate of the last pick comes back at the least load of those that were, so neither
 * a newcomer nor a returning peer is flooded. Peers that are not offered as candidates (dead, erroring) simply stop
 * being picked. With a handful of peers per stage a linear scan beats a heap.
 * Not for: measuring throughput (peers gossip their own). */
#ifndef SWARMTRAIN_WIRING_H
#define SWARMTRAIN_WIRING_H

#include "swarm/msg.h"

typedef struct wiring wiring_t;

wiring_t *wiring_new(uint64_t seed);
void wiring_destroy(wiring_t **w);

/* Picks one of cand[0..n) (skipping the one whose id is `exclude`, if not NULL) and
 * charges it cost x mean throughput / its throughput (a peer with no throughput yet counts as the mean of the others; the
 * mean is over the candidates that have one). Returns its index, or -1 when there is no
 * candidate. */
int wiring_pick(wiring_t *w, const msg_member_t *cand, int n, const uint8_t *exclude, double cost);

#endif
