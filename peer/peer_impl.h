/* peer_impl.h — the inside of a swarm peer, shared by the files that make it up:
 *   peer.c    composition: lifecycle (join, serve, leave), event dispatch, timers;
 *   join.c    entering a swarm: the run, the stage, building it;
 *   state.c   the stage state: the snapshot served, the download, where state comes from;
 *   run.c     peer_run, the ZeroMQ driver;
 *   custody.c microbatch records: slots, custody of what was sent on, re-routes;
 *   serve.c   forward and backward serving, stage-0 data sourcing, validation;
 *   step.c    this peer's side of its pool's step: progress, exchange, apply, redo;
 *   move.c    changing stage (rebalancing, recovery of a lost stage).
 * The pool's bookkeeping itself is swarm/pool.c, the state transfer swarm/xfer.c.
 * Not for: anyone outside peer/ (peer.h is the interface). */
#ifndef SWARMTRAIN_PEER_IMPL_H
#define SWARMTRAIN_PEER_IMPL_H

#include "common/rtt.h"
#include "common/status.h"
#include "model/data.h"
#include "peer/contrib.h"
#include "peer/custody.h"
#include "model/demo_opt.h"
#include "peer/follow.h"
#include "peer/guard.h"
#include "peer/held.h"
#include "peer/join.h"
#include "peer/move.h"
#include "peer/peer.h"
#include "peer/peer_store.h"
#include "peer/queue.h"
#include "peer/rebal.h"
#include "peer/recover.h"
#include "peer/stats.h"
#include "peer/transfer.h"
#include "peer/resume.h"
#include "peer/run_def.h"
#include "peer/source.h"
#include "peer/val.h"
#include "model/stage.h"
#include "swarm/path.h"
#include "swarm/pool.h"
#include "swarm/view.h"
#include "swarm/wiring.h"
#include "swarm/xfer.h"

#include <stdint.h>
#include <stdio.h>





#define PEER_PUSH_S 0.25 /* member.push: a serving member's entry is pushed this often */
#define PEER_WOKE_S 0.5  /* member.woke: from waking from a pause to taking the pool's state again */
#define PEER_IDLE_S 0.1  /* the longest a member sleeps without an event or a timer due */

/* The member's own entry in the table (its id is the peer's), as others read it in
 * gossip; written by the composition (peer.c) only, per process. */
typedef struct {
    msg_member_t entry;
    timeout_t push; /* member.push: the entry to the transport again */
} member_self_t;

/* The run's shape as the member uses it, set when it takes its first stage (join.c). */
typedef struct {
    int S;  /* pipeline stages */
    int M;  /* microbatches per step (replicas x accumulation) */
    int BT; /* tokens per microbatch (batch x sequence) */
    int C;  /* model width */
} run_dims_t;

enum {
    PHASE_HELLO,    /* asked a bootstrap peer for the swarm; waiting for WELCOME */
    PHASE_VIEW,     /* welcomed; waiting for the member table */
    PHASE_DOWNLOAD, /* has a stage; downloading its state from the pool */
    PHASE_SERVING,
    PHASE_DONE, /* the run is over for this peer */
};

struct peer {
    peer_options_t po;
    run_def_t def;     /* the run every member shares, its text and the swarm id (run_def.h) */
    transport_t tp;
    FILE *log;
    char err[STATUS_ERR_LEN];
    int phase;
    join_state_t join; /* HELLO retries, the phase's start, stage 0's start (join.h) */
    double now;       /* the time of the event or step being handled */
    kern_t *k;
    stage_held_t held; /* the stage it holds: model, optimizer, corpus, wiring (held.h) */
    peer_store_t *ps; /* the peer's store; NULL without --db */
    run_dims_t dims;  /* the run's shape: stages, microbatches, tokens, width */
    int stage;
    view_t view;
    serve_queue_t queue; /* FWD and BWD waiting for compute (queue.h) */
    source_t source;     /* stage 0: who starts which microbatch; owners gone (source.h) */
    custody_t cust; /* the microbatch records it holds, custody of what it sent (custody.h) */
    /* the pool's step */
    contrib_t contrib; /* this member's side of it (contrib.h) */
    pool_t *pool;
    int64_t step;      /* this pool's step: microbatches of this step are counted */
    transfer_t trans; /* the snapshot served, the download (transfer.h) */
    val_t val; /* validation rounds (val.h): the leader of stage 0 */
    peer_stats_t stats; /* its counts and times (stats.h) */
    member_self_t me; /* its own member entry, as gossiped, and when to push it again */
    follow_t follow; /* following the pool, its pace, the join margin (follow.h) */
    recover_state_t rec; /* a lost stage: copies, neighbours, candidates (recover.h) */
    resume_state_t resume; /* resume.h: the agreement on the step to resume from */
    guard_t guard; /* bounded updates (guard.h): norms, refusals, expulsions */
    rebal_t rebal;             /* rebalancing (rebal.h): when this peer moves */
    move_state_t moved;        /* the pool it left (move.h) */
    end_state_t ending;        /* the run's end as seen here (move.h) */
};

/* peer.c: the composition's own state, written here only */
void peer_enter(peer_t *p, int phase); /* PHASE_* */
/* The compute device, opened at the first stage taken (kept across moves); NULL and
 * p->err on failure. */
kern_t *peer_kernels(peer_t *p);
/* Opens the run's corpus (this peer's --data or the run's URL, checked) into *out. */
int peer_open_corpus(peer_t *p, data_t **out);
/* run.c: the peer's store (opened before the peer, for its identity); closed by
 * peer_destroy. */
void peer_attach_store(peer_t *p, peer_store_t *ps);
/* The stage taken (and the member entry's). */
void peer_take_stage(peer_t *p, int stage);
/* The member entry's fields others read in gossip (pushed with peer_push_self). */
void peer_self_state(peer_t *p, int state); /* MEMBER_* */
void peer_self_serving_from(peer_t *p, int64_t step);
void peer_self_loss(peer_t *p, float loss);
void peer_self_throughput(peer_t *p, float tp);
/* The run is over for this peer (its validation said, or it heard so). */
void peer_run_over(peer_t *p);
int peer_send(peer_t *p, const uint8_t *dest, msg_t *m, int n, const void *const *pl,
              const size_t *len);
int peer_is_self(const peer_t *p, const uint8_t *id);
int peer_swarm_started(const peer_t *p);
const char *peer_idhex(const uint8_t *id, char buf[9]);
uint64_t peer_param_hash(peer_t *p);
/* Refuses microbatch mb (for `stage`) back to `to`, which re-routes it. */
/* NACK of a FWD: echoes its mb, stage and route (nroute, the hop it was for). */
void peer_send_nack(peer_t *p, const uint8_t *to, const msg_t *fwd, const char *why);
void peer_push_self(peer_t *p);

/* join.c */
int join_setup_stage(peer_t *p);
int join_on_welcome(peer_t *p, const net_ev_t *ev);
int join_hello_tick(peer_t *p);

/* move.c: leaves this stage and joins `stage` (its state from the pool, else as
 * state.c decides for a stage nobody holds) */
int peer_move(peer_t *p, int stage, const char *why);
/* Frees what belongs to the peer's stage (peer_move, peer_destroy). */
void peer_drop_stage(peer_t *p);
/* join.c: frees the stage held (held.h) that join_setup_stage built. */
void join_free_held(peer_t *p);

/* recover.c: a stage with no live peer */
#define RECOVER_TAIL 8 /* state blob tail: last clipped gradient norm, lr scale (f32 each) */
/* A stage's state blob (docs/protocol.md 9.4): params | m | v | adam step (8) | the tail,
 * m only when the run's update reads it (AdamW, DeMo's adam update): under sign DeMo's
 * rmsprop update and the others it stays zero on every replica, and a third of the bytes
 * a joiner waits for were zeros (`small`: 77.5 MB, 51.7 MB without). */
int recover_state_moments(const train_options_t *t); /* 2 (m and v) or 1 (v) */
size_t recover_state_bytes(const train_options_t *t, int stage);
/* A stage is set up: the learning rate unscaled, nothing seen lost yet. */
void recover_stage_setup(peer_t *p);
/* The stage's learning-rate scale (from a downloaded state, or a rebuild's fresh
 * optimizer); an implausible one (not in (0, 16)) keeps the current scale. */
void recover_set_lr_scale(peer_t *p, float scale);
/* The stage's state is in place: a mover rebuilding a stage is done. */
void recover_mover_done(peer_t *p);
/* The stage is left: a fetch for its neighbourhood is dropped. */
void recover_drop_stage(peer_t *p);
/* peer_destroy: the copies kept for CheckFree+ and the rest. */
void recover_free(peer_t *p);

/* The lost-stage watch: *move_to >= 0 (and why) when this peer must move to rebuild a
 * stage (or to free a neighbour that rebuilds it); the composition moves it. */
int recover_tick(peer_t *p, int *move_to, char *why, size_t whylen);
int recover_possible(const peer_t *p);
int recover_download_tick(peer_t *p);
void recover_abort(peer_t *p);
void recover_on_state_rep(peer_t *p, const net_ev_t *ev);
void recover_on_refusal(peer_t *p, const uint8_t *from);

/* resume.c: a whole swarm restarts from its stores */
int resume_stage(peer_t *p); /* the stage of the store's newest checkpoint, or -1 */
/* 1 restored (nothing downloaded), 2 start afresh, 3 agreed on a step this peer has no
 * checkpoint of (its state comes from a mate: the wait for one starts now), 0 wait; <0
 * error */
int resume_tick(peer_t *p);
/* A resuming peer that finds mates serving its stage from step s, all at s, and holds
 * its own checkpoint of s restores that instead of downloading theirs: a state download
 * carries no DeMo residual (a joiner's starts at zero), and a zeroed residual is another
 * run than the one that was stopped (resumed runs ended 0.5-2.3% below uninterrupted
 * ones when one peer per stage downloaded). 1 restored (po.resume cleared), else 0. */
int resume_with_mates(peer_t *p, int64_t s);
/* A resuming peer that downloaded its stage's state from a mate has resumed at that step
 * (po.resume cleared, resume.agreed set). */
void resume_downloaded(peer_t *p);
/* Whether training has begun as this peer knows it (a newcomer then follows first;
 * STATE_REP flag 1). In a swarm resumed at step s nothing of s is done until this peer
 * has served a microbatch or its pool passed s: a member that takes its state from a mate
 * then joins the exchange of s, as members joining before step 0 do. Else
 * peer_swarm_started. */
int resume_begun(const peer_t *p);
/* move.c: an EXCH_REQ for the stage it left: answered from the pool it kept */
void move_on_exch_req(peer_t *p, const msg_t *m);
/* peer_destroy: the pool of the stage it left. */
void move_free(peer_t *p);

/* move.c: the rebalancing part's tick (rebal.h decides): records each stage's peers and
 * throughput now and then, and makes a decided move at a clean moment (peer_move) */
int move_rebal_tick(peer_t *p);

/* state.c */
void state_init(peer_t *p);
/* The stage is left: its download and snapshot go. */
void state_drop(peer_t *p);
int peer_start_download(peer_t *p, const char *why);
void state_on_request(peer_t *p, const msg_t *m);
/* A member joining this stage is in the view: takes a snapshot now unless the held one
 * serves a fresh request, so that the socket thread answers the joiner's first request
 * at once instead of at this member's next pass (9.4). */
void state_offer(peer_t *p);
int state_download_tick(peer_t *p);

/* custody.c */
/* n records for the stage held; 0 or STATUS_ENOMEM. custody_free drops them all. */
int custody_alloc(peer_t *p, int n);
void custody_free(peer_t *p);
mbrec_t *custody_find(peer_t *p, const msg_mb_t *mb, int hop);
/* The hops of a held microbatch's path (swarm/path.h) into h[PATH_HOPS_MAX]; how many. */
int custody_hops(const peer_t *p, const mbrec_t *r, path_hop_t *h);
mbrec_t *custody_new(peer_t *p);
int custody_free_slot(const peer_t *p);
void custody_drop(mbrec_t *r);
int custody_in_flight(const peer_t *p, int kind);
/* Training microbatches it sourced or holds of steps up to `step` (overlap: those of the
 * next step, started early, do not hold up this step's). */
int custody_in_flight_upto(const peer_t *p, int64_t step);
int custody_forward(peer_t *p, mbrec_t *r, const uint8_t *avoid);
void custody_reroute(peer_t *p, mbrec_t *r, const char *why);
void custody_on_view(peer_t *p);
void custody_on_nack(peer_t *p, const msg_t *m);
/* NACKs the FWD a held record came with, to the peer it came from (it re-routes). */
void custody_nack_back(peer_t *p, const mbrec_t *r, const char *why);
void custody_tick(peer_t *p);
/* An answer from live member id is overdue (a forward's gradient; a mate's exchange
 * message 15 s into the step): the connection to it may be dead with nothing to say so
 * (docs/protocol.md 11.3). The transport opens it anew and sends the member a MEND, at
 * most once per 5 s per member (dispatch_mend: several answers fall overdue together). */
void custody_mend(peer_t *p, const uint8_t id[MSG_ID_LEN]);
/* A BWD arrived (at p->now): the round trip of the forward it answers, when this peer
 * holds its custody, is a sample for the custody timeout. */
void custody_on_gradient(peer_t *p, const msg_t *m);
/* How long a forward waits for its gradient (custody_s, adapted to measured round trips). */
double custody_time(const peer_t *p, const mbrec_t *r);
/* The earliest moment a forward it holds custody of is due to be re-sent (INFINITY: none). */
double custody_next_deadline(const peer_t *p);
/* custody_settle (custody.h) for this peer's forwards, timeout and custody_s. */
double custody_settle_time(const peer_t *p);

/* serve.c */
int serve_one(peer_t *p, int *did);
int serve_source(peer_t *p);
int serve_enqueue(peer_t *p, const net_ev_t *ev);
void serve_dequeue(peer_t *p, int i);
/* peer_destroy: the queue's storage. */
void serve_free(peer_t *p);
void serve_note_throughput(peer_t *p, double seconds);

/* step.c */
/* The pool's step this member is at (a restore, a download, a rebuild, an update). */
void step_set(peer_t *p, int64_t step);
/* The stage's gradient norm in its state (the same on every replica; recover.c weighs
 * neighbours by it): from a downloaded state (an applied update sets it here). */
void step_set_stage_gnorm(peer_t *p, float gnorm);
#define STEP_KEEP 8 /* steps of exchange messages kept at least, for relays and followers */
#define STEP_MEND_S 15.0 /* a live mate's message missing this long into the step: the
                          * connections with it opened anew (step.c, 12.4) */
#define STEP_KEEP_MAX 64 /* ... and at most, while one member's messages of that many steps
                          * fit STEP_KEEP_BYTES */
#define STEP_KEEP_BYTES (16u << 20)
/* The steps of exchange messages a member of this stage keeps (held.keep): STEP_KEEP, or
 * more while a member's messages of that many steps fit STEP_KEEP_BYTES (sign DeMo on
 * `small`, 28 KB a step: STEP_KEEP_MAX; AdamW's dense 25.8 MB: STEP_KEEP). Every member
 * of a pool computes the same from the run and the stage: a follower that downloaded a
 * state some steps old catches up through them, and a download on a thin link spans
 * more than 8 of the pool's steps (docs/protocol.md 9.5). */
int step_keep(const peer_t *p);
void step_seen(peer_t *p);
void step_count(peer_t *p, const msg_mb_t *mb);
int step_counts(peer_t *p, const msg_mb_t *mb, uint8_t flags);
/* Before counting mb: when this member counted others at this step not sent yet, and mb
 * is a re-send (attempt > 0) or one of those was, what it counted goes out first (its
 * part 0, or the next supplement), so that each re-send is alone in its part (12.4). */
int step_before_resent(peer_t *p, const msg_mb_t *mb);
/* Whether this member's pool has counted training microbatch mb (its union, or a step
 * already applied). */
int step_counted(peer_t *p, const msg_mb_t *mb);
/* Overlap (docs/protocol.md 12.8): stage 0's lookahead for the forwards of the next step it
 * starts while its pool exchanges this one: the parameters its own part 0 would give alone
 * (update_predict), backend memory; *save a scratch of as many floats. NULL when it has
 * none for this step (its part 0 not made yet, or out of memory). */
float *step_lookahead(peer_t *p, float **save);
int step_tick(peer_t *p);
/* The pool step of the stage taken: the contributor's buffers, the pool's bookkeeping;
 * 0 or STATUS_ENOMEM. step_close frees them but the pool, which it returns (a member that
 * moved still answers for its messages). */
int step_open(peer_t *p);
pool_t *step_close(peer_t *p);
void step_reset(peer_t *p);
int step_on_exch(peer_t *p, const net_ev_t *ev);
/* A follower not yet named that applied a step names now (docs/protocol.md 9.5), at the
 * start of the pass after its update, before anything is served or sourced. */
void step_name_due(peer_t *p);
/* Downloading its stage's state: the snapshot's step once the first answer fixed it, else
 * -1. Exchange messages of that step and the 4 after are taken while it downloads. */
int64_t step_snapshot_step(const peer_t *p);
/* Downloading, with the snapshot's step s known and a step's messages small (K >= 16):
 * once a second, asks the mate furthest ahead for the messages of s .. s + 3 it holds
 * none of, so that it holds them when the state is in place (a mate answers between its
 * own steps: asked after the download, the first followed step waited up to a pool step). */
void step_ask_after_snapshot(peer_t *p);
void step_on_exch_req(peer_t *p, const msg_t *m);
/* Answers an EXCH_REQ from `pool`, the pool of `stage` (this peer's, or the one it left). */
void step_answer_exch_req(peer_t *p, pool_t *pool, int stage, const msg_t *m);
void step_on_progress(peer_t *p, const net_ev_t *ev);
void step_on_redo(peer_t *p, const net_ev_t *ev);

#endif
