/* transfer.h — the stage state in transit (state.c): the snapshot this member serves to
 * joiners and movers, and its own download of its stage's state from the pool. Lifetime:
 * the stage held (move.c drops both). */
#ifndef SWARMTRAIN_TRANSFER_H
#define SWARMTRAIN_TRANSFER_H

#include "common/timeout.h"
#include "swarm/xfer.h"

#include <stdint.h>

typedef struct {
    xfer_t *xfer;        /* its download, while one runs */
    xfer_shared_t *snap; /* the snapshot it serves (NULL: none), shared with the transport */
    double snap_at;      /* when that was taken */
    int downloaded;      /* the state came from the pool */
    double dl_at, dl_s;  /* its last download: its first request, and seconds from there to
                          * the state in place (0: none yet) */
    int64_t dl_step;     /* ... and the step of the state it brought */
    int donor_started;   /* a donor said training had begun (STATE_REP flag 1) */
    int64_t unbegun_at;  /* downloaded while training had not begun, it contributes at once
                          * from this step (state.c); -1: not so */
    const char *download_why; /* why it downloads (a re-sync's reason), for the log */
    double ahead_at;     /* when it last asked, downloading, for the messages after the
                          * snapshot's step (step_ask_after_snapshot) */
    timeout_t nobody;    /* download.nobody: from its start, no donor in a started swarm */
    timeout_t another;   /* download.another: ... a joiner waiting for another to take it */
} transfer_t;

#endif
