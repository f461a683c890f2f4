/* simrun.h — one fault schedule of real peers on the simulated network (swarm/sim.h):
 * it creates peers (peer.h) on the sim's nodes, hands them their events, steps them on
 * the virtual clock, and checks the swarm's promises (DESIGN.md section 7) after every
 * event. A schedule is a pure function of its options: the same seed replays it exactly.
 *
 * The model is tiny (dim 16, 2 heads, ffn 32, seq 8, batch 2, one block per stage,
 * bytes as tokens) so that thousands of schedules run in minutes; the stage code and the
 * optimizer (AdamW or DeMo, drawn from the seed) run for real on the CPU, one thread.
 * Each peer_step that did work costs 2 ms of virtual time times the node's slow factor.
 * The first `peers` peers take the stages in turn (as `local` starts them), or as
 * `placement` says; peers that join later or restart after a crash choose their stage
 * themselves (stage -1). A node's slow factor is its peer's --slowdown (its measured
 * throughput), so peers rebalance as they would (rebal.c); with moves_rate the driver
 * also asks random serving peers to move (peer_request_move), never the last serving
 * peer of a stage under "none" and "mild", so that crashes also hit peers mid-move.
 *
 * Invariants, checked after every event:
 * - counted: every applied update counts each of its M microbatches exactly once
 *   (counted_twice == 0 and all M bits), unless the missing ones were reported lost
 *   through hooks.lost while a whole stage was gone or within REPAIR_S (20 virtual s) of
 *   a partition;
 * - hash: every live member of a pool that applied step N holds the same parameter hash
 *   after it (the reference is what a live member holds: one that applied and died takes
 *   its version with it), until a stage is wiped out. Within REPAIR_S of a partition both
 *   sides go on and may differ (noted, not failed; a hash set then is no reference);
 * - end: the replicas of a stage that held their state before the first peer finished
 *   end the run with one hash (the hash vote repaired any divergence), unless a partition
 *   was within REPAIR_S of the end;
 * - nothing lost (hooks.lost never called) while each stage keeps a live serving peer and
 *   no partition was within REPAIR_S;
 * - liveness: while every stage has a live serving peer and the network is healed (no
 *   partition, crash or reset for a while), the swarm applies its next step within
 *   live_s virtual seconds; and the schedule ends, within budget_s, with every peer done
 *   (held-out loss measured) and gone, unless a whole stage was lost (a peer that only
 *   arrived as the run ended and never held its stage is counted as stranded instead);
 * - no peer fails with a fatal status, except a joiner whose bootstrap node died.
 *
 * Faults "restart" (issue 11): every peer keeps a real store (peer_store.h, synchronous,
 * one file per "disk" under store_dir; a peer a fault restarts takes its predecessor's
 * disk), a checkpoint every 1-3 steps (drawn). At a drawn step every peer crashes (some up
 * to 0.5 s later, sometimes one 1-6 s later); faults are held from then on. After a drawn
 * pause every disk comes back a little apart with a peer started with po.resume (the
 * first founds the swarm anew), after one drawn store fault: none (2 in 10), one disk
 * lost (2), the newest checkpoint of one stage torn off all its disks (2), every disk of
 * one stage lost (3: CheckFree rebuilds it), every disk lost (1: it starts afresh). As
 * `local --resume` restarts its peers, each comes back with the stage it was first given
 * (in half the schedules; in the others with none, as `peer --resume` alone; its store's
 * newest checkpoint overrides either) and the new founder's swarm.wait_peers is the
 * number of disks coming back. Then, besides the invariants above:
 * - agreed: every peer that decides (resume.c) agrees on the step the driver computes
 *   from the files: the newest step s > 0 such that every stage some restarted store
 *   holds a checkpoint of has one holding s (0: none);
 * - from it: no update of a step below it is applied after the restart, and each pool's
 *   first update after it is of exactly that step;
 * - the counted, hash and nothing-lost invariants hold across the restart (the steps
 *   from the agreed one are a new history), and the run finishes (liveness).
 * Faults are held from the first crash until every stage serves again (restart_wild:
 * not held; "mild" still crashes no peer of a stage nobody serves, so while the swarm
 * decides only partitions, resets, joins and restarts of earlier crashes go on).
 *
 * Not for: the network model (swarm/sim.c) or the command line (tools/cmd_sim.c).
 */
#ifndef SWARMTRAIN_SIMRUN_H
#define SWARMTRAIN_SIMRUN_H

#include "swarm/transport.h"

#include <stddef.h>
#include <stdint.h>

#include <stdio.h>

typedef struct {
    uint64_t seed;
    int peers;             /* peers at the start */
    int stages;            /* pipeline stages (1 block each) */
    int steps;             /* optimizer steps of the run */
    int microbatches;      /* M per step (replicas x accum; even) */
    const char *faults;    /* "none", "mild", "heavy" (sim_config_faults); "stage": mild
                            * and one whole stage crashes at once (recover.c rebuilds it) */
    const char *knobs;     /* then "key=value,..." (sim_config_set), or NULL */
    int optimizer;         /* -1: drawn from the seed; else train_optimizer_t */
    int plant_bug;         /* a pool steps one microbatch short at step 1 (a fault hook, peer_faults_t): the checker must catch it */
    double skip;           /* SkipPipe skip ratio of the run (train_options_t.skip); 0: none */
    double skip_until;     /* its share of the steps that skip (train_options_t); 0: all */
    double swap;           /* CheckFree+ swap share of the run (train_options_t.swap); 0: none */
    double copy_budget;    /* the peers' copy budget (peer_options_t.copy_budget); 0: theirs */
    const char *data_path; /* the corpus (simrun_corpus) */
    double budget_s;       /* virtual seconds for the whole run (0: 600) */
    double live_s;         /* liveness bound: calm virtual seconds without a step (0: 60) */
    FILE *trace;           /* every event and peer log line, or NULL */
    FILE *report;          /* a failure: the seed, the invariant, the last events (stderr) */
    int trace_lines;       /* events printed with a failure (200) */
    /* rebalancing (issue 12) */
    const char *placement; /* "N0,N1,...": the first peers, stage by stage (NULL: in turn) */
    double moves_rate;     /* moves asked of random serving peers per virtual second */
    double rebalance_cooldown_s; /* the peers' cooldown (0: the peer default) */
    int early_exchange;          /* every peer's early exchange (default 1; --no-early-exchange) */
    int overlap;                 /* the run's overlap (train_options_t.overlap; --overlap) */
    int outer;                   /* local steps: rounds of this many steps, DeMo
                                  * (train_options_t.demo_local; --outer); 0: every step */
    /* whole-swarm restart (faults "restart", issue 11) */
    const char *store_dir; /* the peers' stores live here, one file per disk, removed at
                            * the end of the schedule (needed by faults "restart") */
    int restart_wild;      /* faults go on while the swarm restarts (default: held from the
                            * first crash until every stage serves again) */
    int plant_tear;        /* checker self-test: after computing the agreed step the driver
                            * tears the newest checkpoint of one stage off all its disks,
                            * so the peers agree on an older step: it must be caught */
} simrun_options_t;

typedef struct {
    int failed;
    char why[512];          /* the violated invariant */
    double virtual_s;       /* virtual time at the end */
    uint64_t events;        /* simulator events */
    uint64_t trace_hash;    /* the hash of the whole event trace */
    int nodes, crashes;     /* nodes ever started, crashes among them */
    int64_t steps_applied;  /* the highest step any peer applied */
    int stage_lost;         /* a whole stage was gone at some point */
    int stranded;           /* peers that arrived as the run ended and were still waiting */
    double val_loss;        /* the held-out loss measured at the end (NaN if none) */
    /* bytes each peer sent per virtual second of its life, by kind (transport.h): the mean
     * over the peers up at least a second, and the largest */
    double sent_mean[WIRE_KINDS], sent_max[WIRE_KINDS];
    int sent_peers;         /* the peers in that mean */
    uint64_t corrupted, corrupt_refused; /* messages a fault corrupted; refused of them */
    /* faults "restart" */
    int restarted;          /* the whole swarm crashed and restarted */
    int64_t resume_step;    /* the step its stores said it must resume from (0: afresh) */
    int resume_kind;        /* the store fault drawn (simrun.c RS_STORE_*) */
    int replay_same, replay_diff; /* steps applied again after the restart whose hash
                            * equals / differs from the one applied before the crash */
} simrun_result_t;

simrun_options_t simrun_defaults(void);

/* Writes a small deterministic corpus into dir (created if missing) and returns its path
 * in path (cap bytes). 0, or a status with err. */
int simrun_corpus(const char *dir, char *path, size_t cap, char *err);

/* Runs one schedule. Returns 0 when it ran (res->failed says whether an invariant
 * failed; the report went to o->report), or a status for a setup error. */
int simrun_one(const simrun_options_t *o, simrun_result_t *res, char *err);

#endif
