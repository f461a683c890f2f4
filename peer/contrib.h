/* contrib.h — a member's side of its pool's step (step.c): what it counted and sourced
 * this step, which parts of its exchange message went out and to whom, when it last
 * sent PROGRESS, asked for a redo or for missing messages, and the scratch the pool's
 * union and a redo's backward need. Lifetime: the stage held (join.c allocates the
 * buffers with the stage, move.c frees them); the per-step fields are reset by
 * step_reset at each new step. */
#ifndef SWARMTRAIN_CONTRIB_H
#define SWARMTRAIN_CONTRIB_H

#include "swarm/msg.h"

#include <stdint.h>

typedef struct {
    uint8_t *ubuf;      /* scratch: the pool's union */
    uint8_t *redo_for;  /* stage 0: indices of `redo_step` re-run on request */
    int64_t redo_step;
    double loss_sum;    /* stage 0: losses of the microbatches it sourced this step */
    int loss_n;
    int exch_sent;      /* parts of this member's message sent this step (once complete) */
    int exch_early;     /* stage 0: its part 0 went out before the step was complete */
    int nearly_to;      /* ... to these mates (-1: more than fit) */
    uint8_t early_to[64][MSG_ID_LEN];
    uint8_t *sent_bits; /* microbatches those parts counted */
    double exch_wait_since, progress_at, redo_asked_at, redo_suspect_at, exch_req_at;
    int64_t exch_req_step; /* the step of the last EXCH_REQ round (a follower catching up) */
    uint64_t my_hash;   /* parameter hash at the start of this step */
    double step_t0;     /* when this step began here */
    double stall_logged_at;
    float *grad_save;   /* a redo's backward leaves the counted gradient as it was */
    double gone_req_at; /* its last ask for the messages of mates gone mid-step */
    int gone_asked;     /* how many such mates it knew of then */
} contrib_t;

#endif
