/* transfer.h — the stage state in transit (state.c): the snapshot this member serves to
 * joiners and movers, and its own download of its stage's state from the pool. Lifetime:
 * the stage held (move.c drops both). */
#ifndef SWARMTRAIN_TRANSFER_H
#define SWARMTRAIN_TRANSFER_H

#include "swarm/xfer.h"

typedef struct {
    xfer_t *xfer;        /* its download, while one runs */
    xfer_snap_t snap;    /* the snapshot it serves (step -1: none) */
    double snap_at;      /* when that was taken */
    int downloaded;      /* the state came from the pool */
    int donor_started;   /* a donor said training had begun (STATE_REP flag 1) */
    const char *download_why; /* why it downloads (a re-sync's reason), for the log */
    double xfer_t0;      /* when the download began */
} transfer_t;

#endif
