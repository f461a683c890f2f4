/* peer.h — one swarm peer: it joins (or starts) a swarm, takes a stage, downloads the
 * stage's state from its pool, then serves microbatches forward and backward, keeps
 * custody of what it sent downstream, and steps with its pool (DESIGN.md sections 2, 5;
 * docs/protocol.md). The network thread (swarm/net.h) keeps it alive to the others
 * whatever the compute does.
 *
 * Weight versions: a microbatch carries the step it belongs to; a stage works on a
 * microbatch of step N only while its pool is at step N, so the forward and backward of
 * every microbatch see the same weights and every gradient is applied to the step it
 * was counted for (a GPipe flush per pool: staleness 0). Stage-0 peers start step N+1
 * only after their pool stepped N.
 *
 * Not for: launching many peers (tools/cmd_local.c) or watching them (cmd_status.c).
 */
#ifndef SWARMTRAIN_PEER_H
#define SWARMTRAIN_PEER_H

#include "peer/train.h"

#include <stdio.h>

typedef struct {
    train_options_t run;      /* the run, when starting a new swarm (--new) */
    int is_new;               /* start a new swarm instead of joining */
    const char *join;         /* bootstrap endpoint of any live peer */
    const char *listen;       /* endpoint to bind (default tcp://127.0.0.1:0) */
    const char *advertise;    /* endpoint others should use (default: the bound one) */
    int stage;                /* stage to take; -1: the pool with the least throughput */
    int in_flight;            /* microbatches a stage-0 peer keeps in flight (default 2) */
    int slots;                /* activation slots of the stage (default 2 x in_flight + 2) */
    double peer_timeout_s;    /* silence after which a peer is dead (default 3) */
    double custody_s;         /* re-send a forward with no gradient back after this (default 60) */
    int wait_peers;           /* a new swarm starts its first step once this many peers serve */
    int exit_when_done;       /* leave once the run's steps and validation are done (default 1) */
    const char *data_path;    /* stage 0's corpus; NULL: the default corpus */
    const char *db;           /* store: identity, metrics, events, checkpoints (peer_store.h) */
    int checkpoint_every;     /* checkpoint the stage every N steps into db; 0: never */
    double checkpoint_budget; /* the writer's share of one CPU; 0: the store's default */
    const char *device;
    int threads;
    int log_every;
    FILE *log; /* NULL: stdout */
} peer_options_t;

peer_options_t peer_defaults(void);

/* Runs the peer until the run is done (exit_when_done), peer_stop is called, or a fatal
 * error. Returns 0, or a status with the reason in err. */
int peer_run(const peer_options_t *po, char *err);

/* Asks a running peer to leave cleanly: finish the microbatch in hand, say LEAVE, exit.
 * Async-signal-safe. */
void peer_stop(void);

#endif
