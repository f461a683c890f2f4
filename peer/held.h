/* held.h — the stage a member holds, the model side: its parameters and activations
 * (stage.h), its optimizer (DeMo's, or AdamW inside the stage), stage 0's corpus, the
 * stochastic wiring to the next stage, the activation slots and codec, and its scratch.
 * Lifetime: the stage held (join.c builds it, move.c and peer_destroy drop it). */
#ifndef SWARMTRAIN_HELD_H
#define SWARMTRAIN_HELD_H

#include "model/data.h"
#include "model/demo_opt.h"
#include "model/outer.h"
#include "model/stage.h"
#include "model/update.h"
#include "swarm/wiring.h"

#include <stdint.h>

typedef struct {
    stage_t *st;       /* parameters, gradients, optimizer state, activation slots */
    demo_opt_t *dopt;  /* DeMo's optimizer (NULL: AdamW) */
    model_update_t update; /* the update rule the pool's step applies (model/update.h) */
    outer_t outer;     /* local steps between the pool's exchanges (model/outer.h; off: H 0) */
    data_t *data;      /* stage 0: the corpus */
    wiring_t *wiring;  /* the next stage's peers, weighted by throughput */
    int nslots;        /* activation slots */
    int wire_codec;    /* the codec of what it sends on */
    float last_loss;   /* the last stage: the last training loss it computed */
    int32_t *host_tok; /* stage 0: a microbatch's tokens on the host */
    int keep;          /* steps of the pool's exchange messages kept (step_keep) */
} stage_held_t;

#endif
