/* move.h — a member that changed stage (move.c) keeps the pool it left, to answer its old
 * mates' requests for the exchange messages of the step it left at; and the run's end as
 * this member sees it (peer.c: past the last step, a stage gone from the view). Lifetime:
 * the process. */
#ifndef SWARMTRAIN_MOVE_H
#define SWARMTRAIN_MOVE_H

#include "common/timeout.h"
#include "swarm/pool.h"

#include <stdint.h>

typedef struct {
    pool_t *pool; /* the pool it left last (NULL: none) */
    int stage;    /* its stage */
} move_state_t;

/* end.gone, in member timeouts: a stage seen at the run's last step that has left the
 * view this long has finished (its LEAVE "run over" lost on the way). Long enough for a
 * partition to heal first: at 2 timeouts both sides of a 13.5 s partition at the last
 * step took the other stage for finished and ended the run unvalidated (sim heavy 4x2
 * seed 2000928). */
#define END_GONE_TIMEOUTS 8
/* After waking from a pause, the members it knew have this many member timeouts to vouch
 * for it or show they are alive (their heartbeat moves), else it was left behind
 * (woke_tick). */
#define END_WOKE_TIMEOUTS 4

typedef struct {
    int over;      /* the run is over for this peer (its validation said, or it heard so) */
    int left_behind; /* ... because it was left behind (a pause): it did not finish the run */
    timeout_t gone; /* end.gone: at the last step, a stage seen there gone from the view, since */
    uint64_t seen; /* bit s: a member of stage s was seen at the run's last step */
    uint64_t pauses;     /* the transport's pauses seen so far (net_ev_t.pauses) */
    uint64_t woke_pause; /* the pause it last woke from (longer than the member timeout) */
    uint64_t vouched;    /* the last pause a member vouched for (net_ev_t.vouched): a member
                          * it asked answered that it is still in the run */
    double last_step_at; /* the loop's last turn (peer_step) */
    int suspect;         /* the loop did not turn for longer than the member timeout: a
                          * pause, or a long pass; nothing is trained until the next view
                          * says which (the transport's own pause count) */
    timeout_t woke;      /* member.woke: after waking from a pause, the next look at which
                          * members it knew are alive */
    double woke_at;      /* when it last woke from a pause longer than the member timeout
                          * (SIGSTOP, a suspended laptop): 0, never */
    msg_member_t *knew;  /* the members it knew before the pause (peer.c frees), with their
                          * heartbeat a moment after waking: one whose heartbeat moves on
                          * from there is alive */
    int nknew;
    int knew_set;        /* those heartbeats are taken (the first member.woke) */
} end_state_t;

#endif
