/* contrib.h — a member's side of its pool's step (step.c): what it counted and sourced
 * this step, which parts of its exchange message went out and to whom, the re-runs asked
 * of it, and the step's timers (the waits of docs/protocol.md 12.4). Its state is made
 * and reset here, in one place: contrib_init per process, contrib_alloc/contrib_free
 * with the stage held, contrib_reset_step at each new step, contrib_begin_serving each
 * time serving begins.
 *
 * Not for: the pool's bookkeeping (swarm/pool.h), applying the update (step.c). */
#ifndef SWARMTRAIN_CONTRIB_H
#define SWARMTRAIN_CONTRIB_H

#include "common/timeout.h"
#include "swarm/msg.h"

#include <stddef.h>
#include <stdint.h>

#define CONTRIB_PROGRESS_S 0.5  /* step.progress: PROGRESS again, also with nothing counted */
#define CONTRIB_STALL_S    10.0 /* step.stall: a step that has not moved is reported */
#define CONTRIB_ASK_S      1.0  /* step.exch_req, step.gone_ask: EXCH_REQ at most this often */
#define CONTRIB_FIRST_ASK_S 0.25 /* step.exch_req's first round, after the step is complete */
#define CONTRIB_RELAY_S    1.0  /* step.relay: a named member's message asked of every mate */
#define CONTRIB_DEADLINE_S 30.0 /* step.deadline: contributors step without missing messages */
#define CONTRIB_SUSPECT_S  1.0  /* step.redo_suspect: a missing microbatch before it is lost */
#define CONTRIB_REDO_S     2.0  /* step.redo_ask: REDO again while still missing */
#define CONTRIB_GONE_MAX   16   /* owners of the step gone from the view, kept per step */
#define CONTRIB_ECHO_S     0.5  /* a re-send counted: a mate's PROGRESS this much later has
                                 * heard of it (step.c resent_unheard) */

typedef struct {
    size_t nb;          /* octets of a microbatch bitmap */
    uint8_t *ubuf;      /* scratch: the pool's union */
    uint8_t *redo_for;  /* stage 0: indices of `redo_step` re-run on request */
    double *redo_at;    /* ... when each was last started (M entries; 0: not this step) */
    int64_t redo_step;
    double loss_sum;    /* stage 0: losses of the microbatches it sourced this step */
    int loss_n;
    int exch_sent;      /* parts of this member's message sent this step (once complete) */
    int exch_early;     /* parts that went out before the step was complete (stage 0's part
                         * 0, re-runs' supplements), 0: none */
    int nearly_to;      /* ... to these mates (-1: more than fit) */
    uint8_t early_to[64][MSG_ID_LEN];
    uint8_t *sent_bits; /* microbatches those parts counted */
    uint8_t *resent_bits; /* microbatches it counted from a re-sent FWD (attempt above 0):
                           * each goes out in a part alone (step_before_resent) */
    double resent_at;   /* when it last counted one (0: none this step) */
    int64_t exch_req_step; /* the step of the last EXCH_REQ round (a follower catching up) */
    uint64_t my_hash;   /* parameter hash at the start of this step */
    float stage_gnorm;  /* the stage's gradient norm, the same on every replica (in the
                         * state served; recover.c weighs neighbours by it) */
    double step_t0;     /* when this step began here */
    int64_t mended_step; /* the last step whose missing mates' connections it opened anew */
    /* where the step's time went (the "step" event; docs/events.md), 0: not yet: */
    double first_at;    /* its first microbatch of the step started (stage 0) or served */
    double share_at;    /* stage 0: its own share counted, its part 0 sent early */
    double complete_at; /* the step complete here (all M counted) */
    float *grad_save;   /* a redo's backward leaves the counted gradient as it was */
    float *ahead;       /* overlap, stage 0: 2 x the stage's parameters, backend memory
                         * (step.c): the lookahead of ahead_step (step_lookahead), scratch */
    int64_t ahead_step; /* the step whose part 0 made it; -1: none */
    int gone_asked;     /* mates gone mid-step it knew of at its last ask for their messages */
    int named_asked;    /* origins a held message names, gone from the pool, not held, that it
                         * asked for at once this step (step.c missing_messages) */
    uint8_t gone_owners[CONTRIB_GONE_MAX][MSG_ID_LEN]; /* mates that owned this step (serving,
                         * serving_from at or below it) and left the view during it: their
                         * messages may be held by a mate though nothing of theirs reached
                         * this member (step.c ask_for_gone) */
    int ngone_owners;
    /* timers (docs/protocol.md 12.11) */
    timeout_t progress;  /* step.progress: the next PROGRESS re-send */
    timeout_t stall;     /* step.stall: the next report of a step that has not moved */
    timeout_t exch_req;  /* step.exch_req: the next round of EXCH_REQ for missing messages */
    timeout_t gone_ask;  /* step.gone_ask: the next ask for the messages of mates gone */
    timeout_t relay;     /* step.relay: from the step's waits beginning (12.4) */
    timeout_t unknown;   /* step.unknown: ... a member named but unknown here is waited for */
    timeout_t deadline;  /* step.deadline: ... a contributor steps without what is missing */
    timeout_t suspect;   /* step.redo_suspect: a microbatch missing since (started_at) */
    timeout_t redo_ask;  /* step.redo_ask: the next REDO */
} contrib_t;

/* peer_timeout_s: the member timeout (step.unknown waits twice that). */
void contrib_init(contrib_t *c, double peer_timeout_s);
/* The stage's buffers for M microbatches; 0 or STATUS_ENOMEM. */
int contrib_alloc(contrib_t *c, int M);
/* The stage is left: its buffers freed, its re-runs and losses forgotten. */
void contrib_free(contrib_t *c);
/* A new step: nothing counted, sent or waited for. */
void contrib_reset_step(contrib_t *c);
/* A mate that owned this step left the view (kept while there is room). */
void contrib_gone_owner(contrib_t *c, const uint8_t id[MSG_ID_LEN]);
/* Serving begins at now with parameters whose hash is my_hash. */
void contrib_begin_serving(contrib_t *c, double now, uint64_t my_hash);
/* The waits of a step's exchange begin now (restart: again, from now). */
void contrib_waits(contrib_t *c, double now, int restart);
/* A microbatch of the step was started or served at now (the first one is noted). */
void contrib_note_first(contrib_t *c, double now);
/* Stage 0: a microbatch it sourced counted, with its loss. */
void contrib_note_loss(contrib_t *c, double loss);
/* The host scratch of n floats a backward that does not count keeps its gradient in;
 * NULL when out of memory. */
float *contrib_grad_save(contrib_t *c, size_t n);
/* A REDO for `step` asks for the indices in bits (nb octets); later steps replace earlier
 * asks, earlier ones are ignored; indices >= M are cleared. */
/* A REDO for `step` at `now`: its indices are re-run, but one started less than half of
 * CONTRIB_REDO_S ago (the asker repeats a REDO only that much later: a nearer one is the
 * same REDO, duplicated on the way) */
/* With `earliest` (the overlap, docs/protocol.md 12.13) an earlier step's REDO replaces a
 * later step's set, and a later step's waits while the set has indices not started yet:
 * a pool behind another (rebuilt at an older step) must pass its step before the later
 * step's re-runs can reach the pool that asked for them (sim stage 8x4 seed 2240). */
void contrib_redo_ask(contrib_t *c, int64_t step, const uint8_t *bits, int M, double now,
                      int earliest);
/* Re-run i of redo_step has started at now. */
void contrib_redo_started(contrib_t *c, int i, double now);

#endif
