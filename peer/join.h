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
#include "swarm/msg.h"

#define JOIN_START_S  15.0 /* a stable table this long starts the swarm short of wait_peers */
#define JOIN_HELLO_S  3.0  /* join.hello: a HELLO unanswered this long is sent again ... */
#define JOIN_HELLOS   40   /* ... this many times in all (2 min), then the peer gives up: 10
                            * (30 s) ended a joiner that two partitions in a row cut off
                            * from its welcomer (sim heavy 4x2 seed 38215025) */
#define JOIN_SETTLE_S 1.0  /* join.settle: the start decided, gossip settles this long (4 rounds) */

typedef struct {
    int wait_peers;  /* the run's swarm.wait_peers: stage 0 starts once this many serve */
    timeout_t hello; /* join.hello: the next HELLO (attempts: those sent but the first) */
    int go;          /* stage 0: the first step may start (again after a move: 0) */
    timeout_t settle; /* join.settle: from the decision to start to the first step */
    int settle_serving; /* serving members when join.settle last started */
    timeout_t start; /* join.start: the table unchanged this long starts the swarm */
    int seen_serving, seen_joining, seen_stages; /* the table as join.start last saw it */
    int bad_welcomes; /* WELCOMEs refused as malformed (a frame cut or flipped on the way) */
    uint8_t welcomer[MSG_ID_LEN]; /* who welcomed it: a member that knows it from the start */
} join_state_t;

/* Malformed WELCOMEs refused before the joiner gives up: a corrupted frame is answered
 * again at the next HELLO; a text this peer cannot take (another version) every time. */
#define JOIN_BAD_WELCOMES 3

void join_state_init(join_state_t *j);

/* Whether stage 0 may start a new swarm's first step now: serving and joining members
 * in its view, and how many of the run's stages have a serving member. Said at every
 * tick while it waits. Returns 1 to start (after the gossip settles: the caller's). */
int join_may_start(join_state_t *j, int serving, int joining, int stages_served, int stages,
                   double now);
/* Once join_may_start said so, with `serving` members in the view: whether gossip has
 * settled (join.settle, started at the first call and again whenever the number of
 * serving members changed: a member that began serving after the decision - a joiner
 * that downloaded before training began, which contributes from step 0 - must be in
 * every stage-0 member's view before any starts step 0; one that missed it began step 0
 * without it while it counted itself in: sim heavy 4x2 seed 32011613); then the first
 * step may start (j->go). */
int join_settled(join_state_t *j, int serving, double now);

/* The member leaves its stage: a first step is decided afresh where it goes. */
void join_left_stage(join_state_t *j);

enum { JOIN_HELLO_WAIT = 0, JOIN_HELLO_SEND = 1, JOIN_HELLO_GIVE_UP = -1 };
/* The HELLO part: send one now (the first at once), wait, or give up (JOIN_HELLOS sent
 * and the last unanswered for JOIN_HELLO_S). */
int join_hello_due(join_state_t *j, double now);

#endif
