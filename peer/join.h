/* join.h — entering a swarm and starting it (join.c, serve.c): the HELLO retries, when
 * the phase began, and the start of a new swarm's first step at stage 0.
 *
 * A new swarm starts when the run's wait_peers members serve and nobody is half-way in
 * (joining). wait_peers is a minimum with a timeout: a peer that dies while the swarm
 * starts never serves, so once every stage has a serving member, nobody is joining, and
 * the table has not changed for JOIN_START_S (join.start), the swarm starts with the
 * members it has (the late ones join it running).
 *
 * Lifetime: the process. Pure rules on its own state; no peer, no clock. */
#ifndef SWARMTRAIN_JOIN_H
#define SWARMTRAIN_JOIN_H

#include "common/timeout.h"

#define JOIN_START_S 15.0 /* a stable table this long starts the swarm short of wait_peers */

typedef struct {
    int wait_peers;  /* the run's swarm.wait_peers: stage 0 starts once this many serve */
    double phase_at; /* when the phase began */
    double hello_at; /* last HELLO */
    int hello_tries;
    int go;          /* stage 0: the first step may start */
    double go_at;
    timeout_t start; /* join.start: the table unchanged this long starts the swarm */
    int seen_serving, seen_joining, seen_stages; /* the table as join.start last saw it */
} join_state_t;

void join_state_init(join_state_t *j);

/* Whether stage 0 may start a new swarm's first step now: serving and joining members
 * in its view, and how many of the run's stages have a serving member. Said at every
 * tick while it waits. Returns 1 to start (after the gossip settles: the caller's). */
int join_may_start(join_state_t *j, int serving, int joining, int stages_served, int stages,
                   double now);

#endif
