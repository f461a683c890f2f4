/* peer.h — one swarm peer: it joins (or starts) a swarm, takes a stage, downloads the
 * stage's state from its pool, then serves microbatches forward and backward, keeps
 * custody of what it sent downstream, and steps with its pool (DESIGN.md sections 2, 5;
 * docs/protocol.md).
 *
 * A peer is a state machine. It reaches the network only through a transport
 * (swarm/transport.h) and is driven from outside: peer_on_event hands it what the
 * transport delivered, peer_step lets it do one unit of work and run its timers. Both
 * take the time as an argument; the peer never sleeps, blocks or reads a clock. peer_run
 * drives it with the ZeroMQ network thread; `swarmtrain sim` drives many peers at once
 * on a simulated network and a virtual clock.
 *
 * Weight versions: a microbatch carries the step it belongs to; a stage counts a
 * microbatch of step N only while its pool is at step N, so the forward and backward of
 * every counted microbatch see the same weights and every gradient is applied to the
 * step it was counted for (a GPipe flush per pool: staleness 0).
 *
 * Not for: launching many peers (tools/cmd_local.c) or watching them (cmd_status.c).
 */
#ifndef SWARMTRAIN_PEER_H
#define SWARMTRAIN_PEER_H

#include "model/train.h"
#include "swarm/transport.h"

#include "model/demo_opt.h"

#include <signal.h>

#include <stdio.h>

typedef struct peer peer_t;


/* What a peer tells its driver (the simulator checks its invariants with these). */
typedef struct {
    int stage;
    int64_t step;           /* the step whose update was applied */
    int M;                  /* microbatches per step */
    const uint8_t *counted; /* M bits: microbatches the applied update counted */
    const uint8_t *expected; /* M bits: those the pool expected (SkipPipe paths: the ones
                              * whose path visits the stage; else all M) */
    int counted_twice;      /* microbatches counted by more than one message */
    int following;          /* applied the pool's update without contributing */
    uint64_t hash_after;    /* parameter hash after the update */
} peer_applied_t;

/* Fault injection: the simulator, `local`'s drills and the tests install these; each is
 * NULL in production, where nothing of them runs (tools/peer_faults.c, sim/simrun.c). */
typedef struct {
    void *ctx;
    /* A FWD of microbatch (step, index) arrived at `now`: a drill may end the process
     * here (it dies holding work its sender must re-route). */
    void (*fwd_arrived)(void *ctx, int64_t step, uint32_t index, double now);
    /* Part 0 of this member's DeMo exchange message of `step` goes out in the format of o:
     * the bytes its mates get may be altered here (poisoned, yet well-framed); the member
     * itself applies its honest copy. */
    void (*exchange_out)(void *ctx, const demo_opt_t *o, int64_t step, uint8_t *msg,
                         size_t len);
    /* The pool's step lacks `missing` microbatches: 1 lets it complete anyway (a planted
     * bug the simulator's checker must catch). */
    int (*step_short_ok)(void *ctx, int64_t step, int missing);
} peer_faults_t;

typedef struct {
    void *ctx;
    void (*applied)(void *ctx, const peer_t *p, const peer_applied_t *a);
    void (*lost)(void *ctx, const peer_t *p, int64_t step, uint32_t index, const char *why);
} peer_hooks_t;

/* How a stage with no live peer comes back (--stage-recovery). */
enum {
    PEER_RECOVER_AUTO,       /* a joiner's own checkpoint of the stage, else CheckFree(+) */
    PEER_RECOVER_CHECKFREE,  /* CheckFree(+) only: checkpoints are not used */
    PEER_RECOVER_CHECKPOINT, /* no mover, no CheckFree: whoever comes back restores its own
                              * checkpoint (else initial parameters) */
};

typedef struct {
    train_options_t run;      /* the run, when starting a new swarm (--new) */
    int is_new;               /* start a new swarm instead of joining */
    int resume;               /* restart from the store with the others (resume.c) */
    int stage_recovery;       /* a stage nobody holds (recover.c): PEER_RECOVER_* */
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
    FILE *log;          /* NULL: stdout */
    struct events *events; /* --events: the record of what happened, JSON lines
                            * (peer_event.h); NULL: none. Not owned. */
    peer_hooks_t hooks; /* optional */
    peer_faults_t faults; /* fault injection (tests, drills, the simulator); none: zero */
    const char *key_file; /* identity from `swarmtrain keygen` (default: the store's) */
    const char *swarm_key;       /* CURVE with a shared swarm key (swarm/auth.h) */
    const char *allow;           /* CURVE, admitting only these public keys (swarm/auth.h) */
    volatile sig_atomic_t *stop; /* peer_run: leave cleanly once this becomes non-zero */
    double (*clock)(void);       /* times compute for the throughput estimate; NULL: 1 ms a pass */
    /* rebalancing (docs/design-notes.md, "Rebalancing"; peer/rebal.c) */
    int no_rebalance;            /* never move to another stage on its own */
    double rebalance_margin;     /* a move must raise the slowest stage by this (default 0.2) */
    double rebalance_cooldown_s; /* the placement must have held this long (default 10) */
    double slowdown;             /* tests, demos: >= 1: an emulated device this many times
                                  * slower; under peer_run compute is timed in CPU seconds
                                  * and takes that many times as long (0: wall time, as it is) */
    int early_exchange;          /* stage 0: send its exchange message once its own share of
                                  * the step is counted (docs/protocol.md 12.4; default 1) */
    double copy_budget;          /* CheckFree+ copies (recover.c): fresher copies only while
                                  * all the copies fetched stay within this share of the
                                  * activation/gradient bytes this peer sent; 0: the default
                                  * 0.05; < 0: the first copy only */
} peer_options_t;

typedef struct {
    int stage, state; /* state: member_state_t, or -1 before it has a stage */
    int64_t step;
    uint64_t hash, served, retries, lost;
    double val_loss; /* NaN until measured (the stage-0 leader, at the end) */
} peer_info_t;

peer_options_t peer_defaults(void);

/* A peer with identity `id` that reaches the network through tp (copied; tp->ctx must
 * outlive the peer). po is copied (its strings must outlive the peer). It starts joining
 * at its first peer_step. NULL + err on bad options or ENOMEM. */
peer_t *peer_new(const peer_options_t *po, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                 char *err);

/* Hands the peer an event of its transport. 0, or a fatal status (the peer is done). */
int peer_on_event(peer_t *p, const net_ev_t *ev, double now);

/* One unit of work (a forward or backward pass, a microbatch started, a step applied)
 * and the timers that are due. *wake_at: when it wants to run again without an event
 * (now when it has more work). 0, or a fatal status with the reason in peer_error. */
int peer_step(peer_t *p, double now, double *wake_at);

/* Whether the run is finished for this peer (held-out loss measured and announced). */
int peer_done(const peer_t *p);
/* It stopped because the run went on, or ended, without it (woken from a pause): it did not
 * finish the run, and its LEAVE must not say the run is over. */
int peer_left_behind(const peer_t *p);
void peer_info(const peer_t *p, peer_info_t *out);
const char *peer_error(const peer_t *p);

/* Asks a serving peer to move to `stage` (rebalancing does this on its own; the simulator
 * and tests ask): it moves at its next clean moment (right after sending its pool its
 * exchange message of a step), unless the placement changes first. 0, or STATUS_EINVAL
 * when it does not serve a stage or `stage` is not another of the run's. */
int peer_request_move(peer_t *p, int stage, const char *why);

/* Writes the peer's closing line (stage, step, hash, served, re-sent, lost, rejected) to
 * its log and records that it left in its store. */
void peer_finish(peer_t *p, const char *why);

/* NULL-safe; waits for a checkpoint being written. */
void peer_destroy(peer_t **p);

/* Runs a peer on the ZeroMQ network thread until the run is done (exit_when_done),
 * *po->stop becomes non-zero, or a fatal error. Returns 0, or a status with the reason
 * in err. */
int peer_run(const peer_options_t *po, char *err);

#endif
