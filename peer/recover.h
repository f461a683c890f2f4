/* recover.h — what the recovery part (recover.c) keeps: the gradient norms a rebuild
 * weighs neighbours by and the learning-rate scale of a rebuilt stage (both travel in the
 * stage's state), when each stage was first seen with no peer, the copies of the end
 * stages kept ahead of time (CheckFree+, within the wire budget), and a rebuild under
 * way: the neighbours' states, the candidates and how it went. Lifetime: the norms and
 * the scale, the stage held; the copies and a rebuild, the stage held (move.c drops
 * them); the empty-stage timers, the process. */
#ifndef SWARMTRAIN_RECOVER_H
#define SWARMTRAIN_RECOVER_H

#include "common/timeout.h"
#include "swarm/xfer.h"

#include <stdint.h>

typedef struct {
    float last_gnorm;   /* this replica's last gradient norm (DeMo: before clipping) */
    float lr_scale;     /* this stage's learning rate over the run's (x1.1 once rebuilt) */
    float base_lr;      /* the run's */
    timeout_t *empty;   /* [S] recover.empty: a stage seen with no peer, since (stopped: has one) */
    uint64_t orphan_said; /* bit s: said that stage s waits for a joiner (nobody can move) */
    xfer_t *aux;        /* a fetch of another stage's state: neighbours, copies */
    int aux_stage;
    timeout_t aux_wait; /* recover.copy: a fetch of a copy, dropped (retried) after this */
    uint8_t *copy[2];   /* stage 1 / S-2: the state of stage 0 / S-1, kept ahead of time */
    int64_t copy_step[2];
    int mover;      /* moved to rebuild a lost stage: no wait for donors */
    int active;
    timeout_t judge;    /* recover.judge: from the rebuild's start; the states it judges with */
    uint8_t *nb[2]; /* the neighbours' states */
    int64_t nb_step[2];
    int gone[2];       /* a neighbour with no live peer: rebuilt without it */
    timeout_t nb_wait[2]; /* recover.neighbour: since a neighbour last had a live peer */
    /* the candidates (--stage-recovery auto): CheckFree's parameters and, when this peer
     * has a checkpoint of the stage, the checkpoint's (loaded into the stage meanwhile);
     * judged by their held-out loss with the other stages' parameters (all) */
    float *cf, *ck;
    int64_t ck_step;
    uint8_t **all; /* [S]: the states of the stages that are neither this nor a neighbour */
    char how[384];
} recover_state_t;

/* Its timers named; nothing fetched or kept (peer_new). */
void recover_init(recover_state_t *r, double peer_timeout_s);

#endif
