/* outer.h — a stage replica's local steps between its pool's exchanges (DiLoCo-style
 * outer steps; docs/protocol.md 12.14, docs/design-notes.md issue 27). A round is H steps
 * (the run text's demo_local): at each inner step the replica takes an AdamW step on its
 * own gradient with its own moments and sends no update; at the round's last step its
 * change since the round began, delta = p_sync - p, is its DeMo "gradient" (the outer
 * schedule: lr x outer_lr, no decay, no clip; with DeMo's linear update outer_lr itself,
 * SparseLoCo's outer step), and every replica restarts from p_sync and applies the pool's
 * messages, which gives the next p_sync, identical on all.
 *
 * p_sync is the replica's shared state: what it hashes for the pool's vote, serves to a
 * joiner and checkpoints. The local parameters and moments are its own: a replica that
 * takes a state (download, checkpoint, rebuilt stage) starts its round from p_sync with
 * zero moments. Off (H 0, or AdamW's dense exchange) every call below but
 * outer_shared is a no-op and outer_shared gives the parameters.
 *
 * Not for: who exchanges when (peer/step.c); the single-process trainer's own local steps
 * (model/train.c, step_local). */
#ifndef SWARMTRAIN_OUTER_H
#define SWARMTRAIN_OUTER_H

#include "kernels/kernels.h"
#include "model/demo_opt.h"
#include "model/optim.h"
#include "model/stage.h"
#include "model/update.h"

#include <stdint.h>

typedef struct {
    int H;                 /* steps per round; 0: off */
    float outer_lr;        /* the outer step's rate, a multiple of the inner lr(t); with the
                            * linear update a constant (SparseLoCo's) */
    int64_t steps;         /* the run's steps (its last step ends a round) */
    stage_t *st;
    kern_t *k;
    float *psync;          /* the round's start (backend memory) */
    float *m, *v;          /* the local AdamW moments */
    int64_t t;             /* local AdamW steps taken */
    optim_config_t opt;    /* the outer schedule (outer_rule's), refreshed by outer_rule */
    model_update_t update; /* DeMo's rule on opt */
} outer_t;

/* Local steps for stage st with DeMo optimizer dopt: H steps per round (1: a local step
 * and an outer step every step, as train's --demo-local 1), rate outer_lr x lr(t), over a
 * run of `steps` steps. H 0 or dopt NULL: off (0). 0, STATUS_ENOMEM or
 * STATUS_EINVAL, with the reason in err. */
int outer_open(outer_t *o, int H, float outer_lr, int64_t steps, stage_t *st, kern_t *k,
               demo_opt_t *dopt, char *err);
void outer_close(outer_t *o);

static inline int outer_on(const outer_t *o)
{
    return o->H >= 1;
}

/* Whether `step` ends a round (every step does when off). */
static inline int outer_boundary(const outer_t *o, int64_t step)
{
    return !outer_on(o) || (step + 1) % o->H == 0 || step + 1 >= o->steps;
}

/* Whether `step` is an inner step: local, no update sent. */
static inline int outer_inner(const outer_t *o, int64_t step)
{
    return !outer_boundary(o, step);
}

/* The state is in place (downloaded, restored, rebuilt, initial): p_sync = p, the local
 * moments zero. */
void outer_begin(outer_t *o);

/* One local AdamW step on the stage's gradient, the sum of `count` microbatches, schedule
 * oc; the pre-clip norm of their mean into *gnorm. With none counted the step is taken on
 * a zero gradient (the moments carry it on, as train's replicas; measured in a 2 x 2
 * swarm, 60 steps: 2.98-3.01 against 3.01-3.09 with no step, train 2.95). */
void outer_local_step(outer_t *o, const optim_config_t *oc, int64_t step, uint32_t count,
                      float *gnorm);

/* The round's change into the stage's gradient: g = p_sync - p. */
void outer_delta(outer_t *o);

/* p = p_sync (before the pool's outer update, on every replica). */
void outer_restore(outer_t *o);

/* The round ends: p_sync = p (after the outer update). */
void outer_end_round(outer_t *o);

/* The shared parameters: p_sync when on, else the stage's own. */
const float *outer_shared(const outer_t *o, stage_t *st);

/* The outer schedule from the inner one: its rate times outer_lr, no weight decay, no clip;
 * with the linear update (linear: 1) outer_lr itself, constant, no warm-up (SparseLoCo's
 * outer rate). train's local steps take it too. */
optim_config_t outer_opt(const optim_config_t *inner, float outer_lr, int linear);

/* outer_opt of the inner schedule kept in o->opt; and the rule that applies the pool's
 * outer update with it. */
const optim_config_t *outer_schedule(outer_t *o, const optim_config_t *inner);
const model_update_t *outer_rule(outer_t *o, const optim_config_t *inner);

#endif
