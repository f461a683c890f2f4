/* source.h — stage 0's sourcing part: which member starts which microbatch of a step.
 * Microbatch i of step s belongs to one stage-0 owner (rendezvous hashing over the
 * owners of the step, swarm/view.h); when an owner is gone only its microbatches pass on.
 *
 * An owner that is gone may have sent forwards that are still on their way, or being
 * served, downstream: the next pool counts them there, and a copy started again at once
 * would reach another member of that pool before the first one's PROGRESS does; both
 * count it, and the exchange then leaves one message out whole (every microbatch in it
 * lost; sim heavy 4x2 seed 20081, a stage-0 member stopping with LEAVE mid-step). So a
 * gone owner's microbatches wait `settle` seconds after it left the view: time for the
 * forwards it sent to be served and counted, and for that count to reach the pool (the
 * caller passes the round trips its own forwards took, custody.c). A crash is noticed
 * only after the failure timeout; a LEAVE at once: this wait is what makes them alike.
 *
 * Pure rules on its own state (no peer, no network, no clock). Lifetime: per process
 * (source_init in peer_new); entries expire by themselves.
 *
 * Not for: starting a microbatch (serve.c), the pool's count (swarm/pool.h). */
#ifndef SWARMTRAIN_SOURCE_H
#define SWARMTRAIN_SOURCE_H

#include "swarm/msg.h"

#include <stdint.h>

#define SOURCE_GONE_MAX 16 /* owners gone recently that are remembered (the oldest go first) */

typedef struct {
    uint8_t id[MSG_ID_LEN];
    int64_t from;  /* the step it contributed from (an owner of steps >= from) */
    int64_t until; /* the last step it may have started microbatches of (a step ahead of
                    * this member's when it left: it may have applied first) */
    double at;     /* when it left this member's view */
} source_gone_t;

typedef struct {
    source_gone_t gone[SOURCE_GONE_MAX];
    int n;
} source_t;

void source_init(source_t *s);

/* The view changes from old[0, nold) to now[0, nnow) at time t, this member at `step`:
 * stage-0 serving members of the old table missing from the new one are remembered as
 * gone; one back in the table serving stage 0 from the step it served from before is
 * forgotten (not a restart under its id, which is a new run: joining, or serving from a
 * later step). */
void source_on_view(source_t *s, const msg_member_t *old, int nold, const msg_member_t *now,
                    int nnow, int64_t step, double t);

enum { SOURCE_MINE_AGAIN = 2, SOURCE_MINE = 1, SOURCE_OTHER = 0, SOURCE_WAIT = -1 };

/* Who starts microbatch `key` of `step`, own[0, n) being the step's live owners and `me`
 * self's index among them: SOURCE_MINE, SOURCE_OTHER (a live owner's), SOURCE_WAIT (an
 * owner that left less than `settle` seconds before `now` had it), or SOURCE_MINE_AGAIN:
 * this member's now, but a gone owner had it and may have started it: its first run may
 * have been counted downstream (by a mate whose message is late), so this one goes as a
 * re-send (attempt 1), which pools count in a part of its own (sim heavy 4x2 seed
 * 30000435: a stage-0 member's LEAVE, its microbatch started again, counted twice in two
 * mates' first parts at stage 1: 3 of 4). Entries are forgotten once `step` passes
 * their `until`. */
int source_owner(source_t *s, const msg_member_t *own, int n, int me, uint64_t key,
                 int64_t step, double now, double settle);

#endif
