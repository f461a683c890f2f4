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
#include "swarm/msg.h"
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
    /* kept ahead of time, within the wire budget: [0] stage 0's embedding (kept by stage 1),
     * [1] stage S-1's final norm and head (by stage S-2), [2] the blocks of the middle stage
     * after this one (by stage s for stage s + 1, 1 <= s + 1 <= S-2; copy_of says which) */
    uint8_t *copy[3];
    int64_t copy_step[3];
    int copy_of[3];
    int mover;      /* moved to rebuild a lost stage: no wait for donors */
    int active;
    timeout_t judge;    /* recover.judge: from the rebuild's start; the states it judges with */
    uint8_t *nb[2]; /* the neighbours' states */
    int64_t nb_step[2];
    int gone[2];       /* a neighbour with no live peer: rebuilt without it */
    timeout_t nb_wait[2]; /* recover.neighbour: since a neighbour last had a live peer */
    /* the candidates (--stage-recovery auto): CheckFree's parameters and, when this peer
     * has a checkpoint of the stage, the checkpoint's (loaded into the stage meanwhile), or
     * its copy of the stage's blocks when fresher (ck_copy: parameters only); judged by
     * their held-out loss with the other stages' parameters (all) */
    float *cf, *ck;
    int64_t ck_step;
    int ck_copy;
    uint8_t **all; /* [S]: the states of the stages that are neither this nor a neighbour */
    char how[384];
} recover_state_t;

/* Its timers named; nothing fetched or kept (peer_new). */
void recover_init(recover_state_t *r, double peer_timeout_s);

/* ---- the rules (recover_rules.c): pure, no peer, no network, no clock ---- */

/* The stage a member moves to because stage `lost` has no live peer, or -1 (not this
 * member, or nobody can): members[0, n) is the table every member holds (so every member
 * computes the same), self this member's id, S the stages, key the swarm id. A middle
 * stage takes a contributor of the stage before it when that pool has two or more serving
 * (it keeps a copy of the lost stage's blocks), else a member of a neighbouring pool of two
 * or more serving, else of any such pool. The first and last stage need their neighbour (it holds the copy of the embedding
 * or head), a contributing one when there is; when the neighbour's pool has none to spare,
 * a member of another spare pool moves into the neighbour's pool first (a cascade of two
 * moves), unless one is on its way there already. Among the candidates, the highest
 * rendezvous hash of (swarm, stage; id) moves. */
int recover_mover_target(const msg_member_t *members, int n, const uint8_t self[MSG_ID_LEN],
                         int S, uint64_t swarm, int lost);

/* CheckFree: a lost middle stage's blocks as the neighbours' average, each weighed by
 * the other's gradient norm: out = (a wb + b wa) / (a + b), a = gb + 1e-4, b = ga + 1e-4
 * (the neighbour that learns faster weighs less). n floats. */
void recover_blend(float *out, const float *wa, float ga, const float *wb, float gb, size_t n);

/* CheckFree+: whether a keeper fetches a copy now: the first at once; a fresher one once
 * `every` steps passed since the kept one, only while every copy fetched (spent bytes,
 * this one's len included) stays within `budget` of the activation/gradient bytes sent. */
int recover_copy_due(int have, int64_t step, int64_t copy_step, int every, uint64_t spent,
                     size_t len, double budget, uint64_t act_bytes);

#endif
