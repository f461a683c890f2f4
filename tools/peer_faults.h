/* peer_faults.h — the fault drills a `swarmtrain peer` process can run on itself, for
 * `local` and the tests: dying on purpose when a microbatch of a given step arrives
 * (SWARMTRAIN_FAULT_DIE_AT_STEP), and sending well-framed but poisoned DeMo messages
 * (--poison). They reach the peer through peer_options_t.faults (peer/peer.h), and the
 * member's code holds no test logic. Not for: the simulator's faults (swarm/sim.h). */
#ifndef SWARMTRAIN_PEER_FAULTS_H
#define SWARMTRAIN_PEER_FAULTS_H

#include "peer/peer.h"

#include <stdint.h>
#include <stdio.h>

/* Poisoned DeMo messages (--poison). */
enum {
    PEER_POISON_NONE,
    PEER_POISON_NAN,
    PEER_POISON_HUGE,
    PEER_POISON_INDEX,
    PEER_POISON_MIX /* NaN at even steps, values of 1e29 at odd ones */
};

typedef struct {
    int64_t die_at_step; /* < 0: never */
    int poison;          /* PEER_POISON_* */
    FILE *log;           /* where the drill says what it does (the peer's log) ... */
    struct events *events; /* ... and its record (a "fault" event; NULL: none) */
} peer_drills_t;

/* --poison's word (nan, huge, index, mix) as PEER_POISON_*, or -1. */
int peer_poison_kind(const char *word);
/* The drills d asks for, as the peer's fault hooks (d must outlive the peer). */
peer_faults_t peer_drills_hooks(peer_drills_t *d);

#endif
