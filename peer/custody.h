/* custody.h — the microbatch records a member holds: the activations of each in a stage
 * slot and, once it sent the microbatch on, custody of what it sent until the gradient
 * comes back (a dead or slow next hop costs one hop, never the microbatch: custody.c
 * re-sends elsewhere); plus the round trips of its forwards (the custody timeout) and
 * the FWDs delivered lately (a FWD delivered twice is dropped, serve.c).
 *
 * Lifetime: the records, the stage held (custody_alloc with the stage's slots,
 * custody_free when it is left); the round trips and the FWDs seen, the process. Its
 * rules (the wait, what to do with a record sent on) are pure functions below, which
 * custody.c applies to its records. */
#ifndef SWARMTRAIN_CUSTODY_H
#define SWARMTRAIN_CUSTODY_H

#include "common/rtt.h"
#include "swarm/msg.h"

#include <stddef.h>
#include <stdint.h>

/* A microbatch this peer holds: its activations in a stage slot, and (when it sent the
 * microbatch on) custody of what it sent. */
typedef struct {
    int used;
    msg_mb_t mb;          /* step, index, kind */
    uint8_t flags;        /* MSG_FLAG_REDO */
    uint64_t skip;        /* the stages its path leaves out (swarm/path.h) */
    int swap;             /* its CheckFree+ swap (PATH_SWAP_*), from the run's schedule */
    int hop;              /* which hop of its path this record serves (= the FWD's nroute) */
    int first;            /* the first hop of the path on this stage: < hop for a revisit,
                           * which runs in the first visit's slot (stage.h) */
    int part;             /* STAGE_PART_* of this stage that hop runs */
    float *gdelta;        /* a first visit's: the parameter gradient its revisit's backward
                           * left (host floats over the revisit part's parameters), added
                           * when this visit counts the microbatch */
    size_t gdelta_off, gdelta_n; /* where in the stage's buffers, how many */
    uint16_t in_attempt;  /* the upstream's attempt number, echoed in our gradient */
    uint16_t out_attempt; /* our attempt number for what we sent downstream */
    int slot;
    uint8_t prev[MSG_ID_LEN]; /* upstream peer; the source itself on stage 0 */
    int nroute;
    uint8_t route[MSG_ROUTE_MAX][MSG_ID_LEN];
    int sent; /* custody: forwarded downstream, waiting for the gradient */
    uint8_t next[MSG_ID_LEN];
    double sent_at;
    double parked_at; /* overlap: last seen held at the next peer by rule (custody.c) */
    double fwd_s; /* compute seconds of its forward pass here (the throughput estimate) */
    int64_t fwd_step; /* stage 0: the pool step its forward ran at here (overlap: the step
                       * before its own; its backward recomputes the forward, serve.c) */
    uint8_t *act; /* encoded activation as sent, kept for a re-send */
    size_t act_len;
    int32_t *targets;
} mbrec_t;

/* A FWD lately delivered, by sender and seq (serve.c drops one delivered twice). */
#define FWD_SEEN   256
#define FWD_SEEN_S 5.0
typedef struct {
    uint8_t sender[MSG_ID_LEN];
    uint64_t seq;
    double at;
} fwd_seen_t;

/* The records and what custody keeps besides. */
typedef struct {
    mbrec_t *mbs;  /* records, in use or free (used) */
    int nmbs;
    rtt_t fb_rtt;  /* round trips of its forwards (FWD sent to its gradient back), TCP-style */
    fwd_seen_t fwd_seen[FWD_SEEN]; /* FWDs delivered lately (serve.c: duplicates dropped) */
    unsigned fwd_seen_next;
} custody_t;

/* ---- custody's rules, pure (custody_rules.c; tests/test_parts.c drives them alone) ---- */

/* How long a forward waits for its gradient: custody_s on the first stage, less on each
 * later stage in proportion to the hops still to come (`later` of `span`), so that the
 * hop nearest a loss re-sends first (two hops re-sending one loss at once made two
 * members count it: sim mild 3x2 seed 1140). Adapted to the round trips the forwards took
 * (srtt + 4 rttvar, as TCP's RTO): never below that fixed time, at most
 * CUSTODY_RTO_CAP times it. */
#define CUSTODY_RTO_CAP 3.0
double custody_wait(double custody_s, int later, int span, const rtt_t *fb_rtt);

/* How long what a member sent downstream may take to be served and counted there, its
 * count to reach the pool (source.h: a gone owner's microbatches wait this long): 1.5 x
 * the round trips its forwards took (srtt + 4 rttvar), at most SETTLE_SRTTS x srtt and
 * at most custody_s. Before any is known (an owner that died while the swarm started):
 * CUSTODY_SETTLE_UNKNOWN x the failure timeout, at most custody_s. A crash is noticed a
 * timeout or more after the owner's last word, so its last forwards have had three
 * timeouts to be counted; a copy started sooner than that is counted in a part of its own
 * (protocol.md 12.4) and only that part is left out. custody_s there (60 s) stalled the
 * whole swarm for a minute (local --kill start --fault-seed 1, ASan). The SETTLE_SRTTS
 * cap (never below the unknown case's wait): one round trip that crossed a stall (a pool
 * re-running what a dead member counted) lifts rttvar, and 1.5 x the rto then held a dead
 * owner's microbatches for half a minute after the stall had passed (local --churn 2:3
 * --fault-seed 81, 8x4: 26 s, the whole swarm waiting). */
#define CUSTODY_SETTLE_UNKNOWN 2.0
#define SETTLE_SRTTS 3.0
double custody_settle(const rtt_t *fb_rtt, double timeout_s, double custody_s);

/* What to do with a record it sent on (custody_act): keep waiting, re-send it elsewhere,
 * or drop it (a revisit, which only its first visit's peer may take, refused by it). */
enum { CUSTODY_KEEP = 0, CUSTODY_REROUTE = 1, CUSTODY_DROP = 2 };
typedef struct {
    int sent;                  /* sent on and waiting for its gradient */
    double sent_at, wait_s;    /* when, and its custody time (custody_wait) */
    const msg_member_t *next;  /* the next peer's entry in the view; NULL: gone */
    int next_stage;            /* the stage its next hop is on */
    int revisit;               /* the next hop goes back to its first visit's peer */
    const char *nack;          /* a refusal from the next peer (its reason), or NULL */
} custody_case_t;
/* The rule for one record at `now`; *why says the reason (static text, or the NACK's). */
int custody_act(const custody_case_t *c, double now, const char **why);
/* Its time rule alone (the loop's tick; the view's and the NACK's rules run when the view
 * changes or a NACK comes): re-route a record sent on whose gradient is overdue. */
int custody_overdue(const custody_case_t *c, double now, const char **why);

#endif
