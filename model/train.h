/* train.h — single-process training: the baseline every swarm result is compared with.
 * Prints one line per step ("step N loss X lr X gnorm X tok/s X") and a last line
 * "val_loss X" to the log stream for people, and with --events the same as JSON lines
 * for programs (docs/events.md).
 * Not for: argument parsing (tools/cmd_train.c). */
#ifndef SWARMTRAIN_TRAIN_H
#define SWARMTRAIN_TRAIN_H

#define TRAIN_SWIM_EVERY 4 /* --membership swim: a probe a second (4 ticks of 0.25 s) */

#include "compress/demo.h"
#include "model/config.h"
#include "model/optim.h"

#include <stdint.h>
#include <stdio.h>

typedef enum { TRAIN_ADAMW = 0, TRAIN_DEMO = 1 } train_optimizer_t;

typedef struct {
    model_config_t cfg;
    optim_config_t opt;
    const char *data_path; /* NULL: the default corpus */
    const char *init; /* safetensors file (hf_model.h layout) to start from; NULL: seed */
    /* Where the corpus came from when it was fetched (--data URL, swarm/http.h), and the
     * SHA-256 (64 hex digits) of its bytes. Both part of the run: the first peer of a swarm
     * fills them, every joiner fetches the URL and must read bytes with that checksum.
     * Empty strings: a local file, not checked (and absent from the run text). */
    char data_url[1024];
    char data_sha256[65];
    const char *device; /* "cpu", "ref", "cuda", "auto" */
    int threads;        /* <= 0: all cores */
    int steps;
    int accum; /* microbatches per optimizer step */
    uint64_t seed;
    int val_batches; /* microbatches of the held-out tail for val_loss */
    int val_every;   /* also print "step N val_loss X" every this many steps; 0 = end only */
    int swim_every;  /* a swarm's membership: 0 whole-table gossip, else SWIM with a probe
                      * every this many ticks (docs/protocol.md 10.7; --membership swim) */
    int log_every;   /* print every this many steps (the last step always) */
    double val_frac; /* held-out fraction, 0.05 */
    FILE *log;       /* NULL: stdout */
    struct events *events; /* --events: the run's record as JSON lines (common/events.h);
                            * NULL: none. Not owned; not part of the run. */
    /* data parallelism in one process */
    int optimizer;   /* train_optimizer_t */
    int replicas;    /* R data-parallel replicas, each its own data stream */
    demo_cfg_t demo; /* DeMo chunk, k, value format, beta */
    /* DiLoCo-style local steps (DeMo only; docs/design-notes.md, issue 17): 0 = DeMo every
     * step. H >= 1: every replica takes H steps of local AdamW (opt, its own moments) with
     * no exchange, then one outer step: its change since the last sync, delta = p_sync - p,
     * goes through DeMo (D = demo.beta D + lr_out delta, the sent part extracted), and every
     * replica sets p = p_sync - outer_lr * lr(t) * Q / rms(Q) per tensor (Nesterov momentum
     * outer_mom on that step when > 0), identical on all. The last step always syncs; a
     * --val-every validation between syncs sees replica 0's local parameters. In a swarm
     * the pools' rounds (docs/protocol.md 12.14, model/outer.h; the update is the run's
     * DeMo rule, no outer momentum). */
    int demo_local;
    float outer_lr;  /* the outer step's per-tensor rms, as a multiple of lr(t) */
    float outer_mom; /* outer Nesterov momentum, [0, 1) */
    /* the wire between stages, simulated in process */
    int codec;            /* compress/codec.h id; < 0: exact f32 hand-over */
    uint32_t codec_block; /* int8/int4 block, lowrank rank; 0: default */
    /* durability */
    const char *db;           /* SQLite store path; NULL: none */
    int checkpoint_every;     /* steps between background checkpoints; 0: none. A due checkpoint is
                               * skipped while the writer is busy or resting (its CPU budget);
                               * the last step's is always written. */
    double checkpoint_budget; /* share of one CPU the writer may use (store_set_writer_budget) */
    int keep;                 /* checkpoints kept */
    int resume;               /* continue from the newest good checkpoint in db */
    int stop_after;           /* stop (as if killed) after this many steps of this process; 0: no */
    /* SkipPipe (swarm/path.h): the share of middle-stage visits each step's microbatches
     * skip (part of the run; 0: every microbatch runs every stage), and the stages an
     * extra validation at the end runs without (a mask; 0: none; in the run text only
     * when set, so that every peer of a swarm validates the same way). */
    double skip;
    /* The share of the run's steps that skip (0: all of them): from step round(skip_until x
     * steps) on every microbatch runs every stage. Skipping late costs the most: `tiny`,
     * sign DeMo, 600 steps, 2 seeds: --skip 0.25 the whole run +2.5% over no skipping,
     * --skip 0.5 --skip-until 0.5 (as many visits left out) +1.4% (docs/design-notes.md). */
    double skip_until;
    uint64_t val_skip;
    /* CheckFree+ (swarm/path.h): the share of each step's microbatches that swap the
     * blocks of stage 0 with stage 1's, or of stage S-1 with S-2's (part of the run; 0:
     * none), so that the neighbours learn to stand in for a lost first or last stage */
    double swap;
    /* The exchange overlapped with the next step (docs/thin-links.md; part of the run,
     * in its text only when set). In a swarm, stage 0 may source step N+1 while its pool
     * exchanges N: their stage-0 forward runs on the parameters of N, their backward
     * after N is applied, on a forward recomputed with the new parameters (the later
     * stages see N+1's). train runs every microbatch so, the worst case. */
    int overlap;
    /* train only, a measurement: every step's gradient is computed on the parameters of
     * the step before (the whole model one step stale, PipeDream's bound) */
    int grad_delay;
} train_options_t;

typedef struct {
    int steps_done;
    float last_loss; /* mean loss of the last step */
    float val_loss;
    float val_loss_skip;         /* with val_skip set: validation without those stages */
    double tokens_per_s;         /* over all steps after the first */
    int64_t start_step;          /* 0, or the step a resumed run continued from */
    double demo_bytes_per_param; /* bytes one replica sends per parameter per step (local
                                  * steps: one exchange's bytes / H) */
    double wire_bytes_per_elem;  /* encoded stage-boundary bytes per element */
    int checkpoints_failed;      /* background writes that failed (training went on) */
    int checkpoints_saved;       /* background writes that committed */
    int checkpoints_replaced;    /* snapshots dropped for a newer one while the writer was busy */
    int checkpoints_skipped;     /* due checkpoints not snapshotted: the writer was not ready */
    double checkpoint_cpu_s;     /* CPU seconds the writer spent */
} train_result_t;

/* Defaults: tiny config, AdamW, lr 3e-3, 300 steps, accum 1, one replica, seed 1337,
 * 20 val batches, no codec, no store. */
train_options_t train_defaults(void);

/* The run's settings that every process training the same run must share (model
 * shape, batch, stages, optimizer and its schedule, DeMo, codec, seed, steps; data_url and
 * data_sha256 when the corpus has a checksum), as "key=value\n" text — not the device,
 * threads, local data path, store or log. Returns the length (truncated to n-1). */
size_t train_options_to_text(const train_options_t *o, char *buf, size_t n);

/* Reads text from train_options_to_text into o (other fields untouched); unknown keys
 * and bad values are refused with STATUS_EMALFORMED. */
int train_options_from_text(train_options_t *o, const char *text, char *err);

/* Runs training; 0, or a status with the reason in err. */
int train_run(const train_options_t *o, train_result_t *res, char *err);

/* The share of middle-stage visits step `step` skips: skip before train_skip_end, the
 * step round(skip_until x steps) (INT64_MAX without skip_until), 0 from there; every
 * process of a run draws the same paths. */
int64_t train_skip_end(const train_options_t *o);
double train_skip_at(const train_options_t *o, int64_t step);

#endif
