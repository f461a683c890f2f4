/* val.h — the validation part of a stage-0 leader: rounds of held-out batches sent
 * through the pipeline and the mean of the losses that come back. Two kinds of round: the
 * run's own validation at its end (once; with the run's val_skip, a second half of as many
 * batches runs without those stages), and the rounds every val_every steps during the run
 * (one at a time; a round not complete when the next is due, or when the run's own
 * begins, is given up).
 *
 * Pure bookkeeping on its own state: which batch to send next, which losses are in, the
 * means. The caller (serve.c) starts the microbatches, drops their records, logs and
 * records the results.
 *
 * Lifetime: val_init per process; val_reset when the stage held ends (the rounds are
 * dropped; the step of the last round started during the run and the run's loss stay). */
#ifndef SWARMTRAIN_VAL_H
#define SWARMTRAIN_VAL_H

#include <stdint.h>

typedef struct {
    int64_t step;       /* the round's step; -1: none running */
    int total;          /* batches in it */
    int whole;          /* indices below this run through the whole model; the others
                         * without the run's val_skip stages */
    int next, done;     /* batches sent, losses in */
    double sum, sum_skip; /* the losses of the two halves */
    uint8_t *got;       /* a bit per batch whose loss is in */
} val_round_t;

typedef struct {
    val_round_t end;    /* the run's validation at its end: started once */
    val_round_t during; /* the current round every val_every steps */
    int64_t last;       /* the step of the last round started during the run */
    int64_t seen;       /* the step at which this member last led or followed the rounds */
    double loss;        /* the run's held-out loss once measured; NaN before */
} val_t;

void val_init(val_t *v);
void val_reset(val_t *v);
/* Frees what the rounds hold (val_reset does too). */
void val_free(val_t *v);

/* Starts r for step with total batches (whole of them through the whole model). 0, or
 * STATUS_ENOMEM. */
int val_round_begin(val_round_t *r, int64_t step, int total, int whole);
int val_round_running(const val_round_t *r);
/* The next batch to send, or -1 when all were sent (or none runs). */
int val_round_next(const val_round_t *r);
void val_round_sent(val_round_t *r);
/* A loss back for (step, index): 1 when taken; 0 when not this round's, out of range,
 * not finite or already in. */
int val_round_add(val_round_t *r, int64_t step, uint32_t index, float loss);
int val_round_complete(const val_round_t *r);
/* The means over the whole-model batches, and over the others (NaN when none). */
double val_round_mean(const val_round_t *r);
double val_round_mean_skip(const val_round_t *r);
/* Ends a running round (given up, or done): step -1. */
void val_round_end(val_round_t *r);

/* Whether a round during the run is due at step (one every `every` steps, 0: none) at a
 * stage-0 member that leads them (leading 1: the pool's first) or follows (0: another
 * owner of the step). A follower keeps `last` at its own step, so that when it takes the
 * lead (its leader gone) it begins no round in an interval where its leader may have
 * begun one; a member that neither led nor followed for more than `every` steps (it moved
 * into stage 0 or joined it, the swarm resumed, it re-synced past rounds) begins its first
 * at the next multiple of `every`, not at once. The caller begins the round and sets
 * `last` to its step. */
int val_round_due(val_t *v, int64_t step, int every, int leading);

#endif
