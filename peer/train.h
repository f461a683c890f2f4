/* train.h — single-process training: the baseline every swarm result is compared with.
 * Prints one line per step ("step N loss X lr X gnorm X tok/s X") and a last line
 * "val_loss X" to the log stream, so logs are easy to grep and plot.
 * Not for: argument parsing (tools/cmd_train.c). */
#ifndef SWARMTRAIN_TRAIN_H
#define SWARMTRAIN_TRAIN_H

#include "peer/config.h"
#include "peer/optim.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    model_config_t cfg;
    optim_config_t opt;
    const char *data_path; /* NULL: the default corpus */
    const char *device;    /* "cpu", "ref", "cuda", "auto" */
    int threads;           /* <= 0: all cores */
    int steps;
    int accum;             /* microbatches per optimizer step */
    uint64_t seed;
    int val_batches;       /* microbatches of the held-out tail for val_loss */
    int val_every;         /* also print "step N val_loss X" every this many steps; 0 = end only */
    int log_every;         /* print every this many steps (the last step always) */
    double val_frac;       /* held-out fraction, 0.05 */
    FILE *log;             /* NULL: stdout */
} train_options_t;

typedef struct {
    int steps_done;
    float last_loss;      /* mean loss of the last step */
    float val_loss;
    double tokens_per_s;  /* over all steps after the first */
} train_result_t;

/* Defaults: tiny config, lr 3e-3, 300 steps, accum 1, seed 1337, 20 val batches. */
train_options_t train_defaults(void);

/* Runs training; 0, or a status with the reason in err. */
int train_run(const train_options_t *o, train_result_t *res, char *err);

#endif
