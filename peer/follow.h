/* follow.h — the following part of a pool member: a newcomer (or mover, or a member that
 * re-synced) first follows its pool, applying the pool's updates from the kept exchange
 * messages without counting microbatches, times the pool's pace, and names the step it
 * contributes from some steps ahead, so that gossip tells every mate in time (the join
 * margin). It also keeps the pace a contributor sees (its own steps), and decides when a
 * member is too far behind to catch up (download the state again) and what followers do
 * when no contributor is left (gather every message of the step, then the one at the
 * highest step with the lowest id takes over; one behind a mate downloads).
 *
 * Pure rules on its own state (no peer, no network, no clock); its timer, follow.gather,
 * is a named field. Lifetime: follow_init per process; follow_begin each time serving
 * begins (the state in place); the pace outlives a move (a mover's pace is its new
 * pool's).
 *
 * Not for: applying updates or the exchange (step.c), the download (state.c). */
#ifndef SWARMTRAIN_FOLLOW_H
#define SWARMTRAIN_FOLLOW_H

#include "common/timeout.h"
#include "swarm/msg.h"

#include <stdint.h>

#define FOLLOW_PACE_KEEP  8    /* a follower's timed steps at the pool's head kept */
#define FOLLOW_STALL_S    10.0 /* no update this long while the pool is ahead: re-sync */
#define FOLLOW_GATHER_MAX 2    /* asks for every message of a step, a second apart */
#define FOLLOW_SLACK_S    0.5  /* a naming's seconds beyond gossip_s, for the pace's error */
#define FOLLOW_RATE_STEPS 3    /* head steps (or a second) before the pool's pace is known */
#define FOLLOW_RATE_MIN_S 0.5  /* ... and seconds, two gossip periods: the head moves in jumps */
#define FOLLOW_CONFIRM_S  0.5  /* a naming's seconds for every mate to echo it (follow_heard) */
#define FOLLOW_HEARD_ALL  INT64_MAX /* follow_t.heard: no mate to tell */

typedef struct {
    double gossip_s;     /* a named first step is gossiped this long before it is taken: the
                          * failure timeout, by which every live mate has heard the member
                          * (a mate that has not takes it for dead). 1 s was too short: a
                          * link stalled 0.8 s, a mate sourced the step without it, and the
                          * two both started a microbatch (sim heavy 4x2 seed 20056) */
    double pace;         /* the pool's seconds per step as seen here: a contributor's EMA of
                          * its own steps, a follower's median of pace_s; 0: unknown */
    double pace_s[FOLLOW_PACE_KEEP]; /* a follower's last timed steps at the pool's head */
    int pace_n;
    double move_pace;    /* a mover: its old pool's pace, which the new pool shares */
    int pace_known;      /* this follower started with a mover's pace */
    int followed;        /* steps followed since serving began */
    int name_due;        /* a step was applied and its naming waits for the next pass
                          * (step_name_due): a follower not yet named names from what the
                          * events read in between say, not from before its update */
    int64_t margin;      /* the join margin its first contributing step was named with */
    double first_named_at; /* when its first contributing step was first named in this
                            * serving period (0: not yet) */
    int64_t first_named_step; /* the step it was at then */
    double named_at;     /* when the step it names now was named (0: not yet) */
    double t0;           /* its first step followed in this serving period (0: none yet),
                          * or its first watched head while downloading (follow_watch) */
    int64_t head0;       /* ... and the pool's head then, for the pool's pace */
    double watch_t0;     /* downloading: when it first held a message past its snapshot's
                          * step (0: none yet) ... */
    int64_t watch_head0; /* ... and that step + 1 */
    double named_sps;    /* the pool's seconds per step its first naming counted with */
    int named_logged, contrib_logged; /* said once per serving period */
    int64_t at_step;     /* its step ... */
    double at_since;     /* ... unchanged since */
    double alone_since;  /* a follower with no contributor to follow, since (0: has one) */
    timeout_t gather;    /* follow.gather: the next ask for every message of the step */
    int64_t gather_step; /* the step of those asks, and how many were made */
    int gather_n;
    int64_t heard;       /* the serving_from every pool mate holds of this member, each
                          * since short of it (follow_heard); -1: none */
    int64_t late_from, late_at; /* a serving_from some mate echoed from a step at or past it,
                                 * and the furthest such mate's step then; -1: none */
} follow_t;

void follow_init(follow_t *f, double gossip_s);
/* Serving begins at now (the state in place): a mover's pace counts as one sample. */
void follow_begin(follow_t *f, double now);
/* The member leaves its stage; contributed: it was contributing (its pace is the pool's). */
void follow_moving(follow_t *f, int contributed);
/* The state was downloaded: the pace known is a mover's, else none. */
void follow_downloaded(follow_t *f);
/* Downloading, it holds at now a message of the step head - 1, past its snapshot's: the
 * first such head starts the clock of the pool's pace, which serving goes on with
 * (follow_begin). unwatch: a download begins; what an earlier one saw is forgotten. */
void follow_watch(follow_t *f, int64_t head, double now);
void follow_unwatch(follow_t *f);

/* A step applied that took step_s (< 0: unknown); follower: it does not contribute yet;
 * at_head: the pool is at most a step ahead (a replayed step is no pace). */
void follow_pace(follow_t *f, double step_s, int follower, int at_head);
/* The view (members[0, n), and what each holds of this member: heard[2i] the serving_from
 * it gossiped back, heard[2i + 1] its own step then; NULL: the transport does not say):
 * sets f->heard to the serving_from that every pool mate (a serving member of `stage`,
 * self excluded) holds, each having heard it while short of it (its own entry in that
 * GOSSIP at an earlier step), else -1; FOLLOW_HEARD_ALL with no mate; and f->late_from,
 * f->late_at to a serving_from some mate echoed from a step at or past it (too late to
 * count) and the furthest such mate's step then (-1: none). A member's network
 * side sends its GOSSIP and hands its compute side the view it merged in the same tick,
 * and the compute side pushes its entry on every step and reads the view before its next
 * pass: a mate that echoed the naming at step s < N takes this member in before it starts
 * N. (Left open: its compute side applying a step and starting the next between its
 * network side's last read of the compute side and that tick, microseconds; the hash vote
 * would repair the mate.) */
void follow_heard(follow_t *f, const msg_member_t *members, const int64_t *heard, int n,
                  int stage, const uint8_t self[MSG_ID_LEN]);

/* After a step applied (step is the new one): the first step it contributes from, given
 * its current one (serving_from) and the pool's head. A follower that has followed 2 steps
 * and knows the pool's pace (its head moved FOLLOW_RATE_STEPS steps, or a second passed)
 * names head + the fewer of FOLLOW_CONFIRM_S of steps (1 at least) and half of gossip_s +
 * FOLLOW_SLACK_S of steps (2 at least), once per serving period (*named: 1). When every mate has
 * echoed it in time (f->heard) the naming stands. One a mate echoed too late (f->late_from)
 * is named again at once, a margin (2 steps at least) past that mate's step, until gossip_s
 * after the first naming. Else, from
 * 2 x FOLLOW_CONFIRM_S after the naming, or on reaching it, the named step only moves on:
 * whenever the pace the pool kept since the naming would reach it less than gossip_s after
 * the naming, it is named again further on (early, while the pool is still short of it;
 * on reaching it, by the shortfall). So it contributes once every mate has echoed the
 * step, or by gossip_s after the first naming, when every live mate has heard one at or
 * before the step it takes; none applies that step without its message, and a mate that
 * heard an earlier one waits for its message there until the newer one reaches it. */
int64_t follow_name(follow_t *f, int64_t step, int64_t serving_from, int64_t head, double now,
                    int *named);

enum {
    FOLLOW_GATHER = 1,    /* ask every mate for every message of the step */
    FOLLOW_TAKE_OVER = 2, /* contribute from the step it is at */
    FOLLOW_RESYNC = 4,    /* download the state again: a mate is ahead */
};

/* A follower with `others` contributors to follow (not itself): with none for more than
 * timeout_s it gathers (at most FOLLOW_GATHER_MAX times per step, follow.gather apart);
 * after 2 x timeout_s one behind a mate (top > step) re-syncs, and the first (lowest id at
 * the highest step: `first`) takes over. Returns the FOLLOW_* to do, in that order (0:
 * nothing). */
int follow_alone(follow_t *f, int others, int64_t step, int64_t top, int first,
                 double timeout_s, double now);
/* Whether a member `ahead` steps behind its pool's head must download the state again:
 * a contributor two or more behind with no step for FOLLOW_STALL_S; a follower further
 * behind than the kept messages reach (keep - 2), or 2+ behind with no step for
 * FOLLOW_STALL_S. Returns 1 to re-sync. */
int follow_behind(follow_t *f, int contributor, int64_t step, int64_t ahead, int keep,
                  double now);

#endif
