/* local.h — the parts of `swarmtrain local` (cmd_local.c), shared by its files:
 *   local_opts.c    its options, and which words are its own rather than the peers';
 *   local_launch.c  the run directory, starting peer processes, stopping them;
 *   local_watch.c   watching the swarm: exits, progress lines, the run's end, a stage
 *                   nobody can rebuild;
 *   local_fault.c   the faults it injects (kills, a pause, lost stages, churn), the peers
 *                   it starts again or adds, and the recovery times (MTTR);
 *   local_summary.c the summary on stdout and in DIR/summary.json, built from the
 *                   peers' events files (DIR/peerN.events.jsonl, docs/events.md).
 * One local_t holds the run: one owner (the watch loop), no threads.
 * Not for: anything a peer does (peer/), or code outside tools/local*.c. */
#ifndef SWARMTRAIN_LOCAL_H
#define SWARMTRAIN_LOCAL_H

#include "common/rng.h"
#include "model/train.h"
#include "tools/run_opts.h"

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#define LOCAL_MAX_STAGES   64   /* stages shown in the progress line */
#define LOCAL_MAX_PEERS    1024 /* peer processes over a run, restarts included */
#define LOCAL_MAX_CHURN_AT RUN_OPTS_CHURN_AT_MAX /* --churn-at kills */

struct auth;

typedef struct {
    int peers, in_flight, quiet;
    const char *dir;
    int kill_peer, kill_step;  /* peer kill_peer dies on a microbatch of step >= kill_step */
    int join_step, join_stage, joiners; /* add joiners peers at join_step */
    int revive;                /* ... which is the killed peer again, with its store */
    int kill_random;           /* --kill random: one outside SIGKILL at a random moment */
    int kill_start;            /* --kill start: one outside SIGKILL while the swarm starts */
    int pause_peer;            /* --pause PEER:S (-1: none; -2: random) */
    int dead_link;             /* --dead-link: 0 none, 1 random, 2 forward, 3 back, 4 pool */
    const char *custody_timeout; /* --custody-timeout, for the peers */
    double pause_s;            /* ... frozen (SIGSTOP) this long, then SIGCONT */
    double churn_rate;         /* --churn: SIGKILLs per peer per minute, from outside */
    double churn_restart_s;    /* ... and a new peer after this long; < 0: none */
    int churn_kills;           /* at most this many kills (0: no limit) */
    int churn_at;              /* --churn-at N[:S]: N kills at steps drawn over the whole run */
    uint64_t fault_seed;
    int kill_stage, kill_stage_step; /* --kill-stage: every peer of a stage, from outside */
    int resume;                      /* --resume DIR: the swarm in DIR restarts from its stores */
    const char *peer_timeout;
    int secure;             /* --secure: CURVE with a swarm key made in the run directory */
    char swarm_key[600];    /* ... its path */
    int poison_peer;        /* tests only: this peer sends poisoned DeMo messages */
    char poison_kind[16];   /* ... of this kind (peer --poison) */
    int stage_failures;     /* --stage-failures K: K whole stages lost at drawn steps */
    double stage_restart_s; /* ... their peers back (with their stores) after this; <0 never */
    /* rebalancing (issue 12) */
    int placement[64], nplacement;      /* --placement: peers per stage */
    char slowdown[LOCAL_MAX_PEERS][16]; /* --slowdown: per peer ("" = as fast as it is) */
} local_opts_t;

/* One peer process local started (restarts are new ones). */
typedef struct {
    pid_t pid;
    int port, stage, exited, status, killed;
    int store;        /* its store is DIR/peer<store>.db: its own index, or a killed peer's */
    int stopped_late; /* told to stop: it missed the run's end */
    char log[600];    /* DIR/peer<i>.log: its words for people */
    char events[600]; /* DIR/peer<i>.events.jsonl: its record for programs */
} local_child_t;

/* The swarm as one live peer's status answer shows it. */
typedef struct {
    int pools, peers_per[LOCAL_MAX_STAGES], live, serving;
    long long step_per[LOCAL_MAX_STAGES];
    long long step0;
    double loss;
    double bytes_out;
    long long retries;
    int nports, port[LOCAL_MAX_PEERS], port_stage[LOCAL_MAX_PEERS]; /* where each is (moves) */
} local_view_t;

/* --kill start: the victim, its delay after it was started, and when it dies (-1: not
 * started yet). */
typedef struct {
    int peer;
    double delay, at;
    int done, killed; /* its moment passed; it was killed then */
} local_start_kill_t;

/* A fault local injected, for the summary: a SIGKILL or a SIGSTOP of one peer, or a dead
 * connection from one peer to another (`other`; -1 for the others). cause: "drill"
 * (--kill PEER:STEP), "drill_late", "random", "start", "stage" (--kill-stage),
 * "stage_failure", "churn", "pause", "dead_link". */
typedef struct {
    int peer, stage, other;
    long long step; /* stage 0's step then (-1: not known) */
    double t;       /* wall clock (events' "t") */
    const char *cause;
    long long drawn; /* --churn-at: the step drawn for it (-1: none) */
} local_fault_t;

/* What the faults need between ticks (local_fault.c). */
typedef struct {
    local_start_kill_t sk;
    int rk_peer; /* --kill random: who, at which step, then a drawn moment */
    long long rk_step;
    double rk_delay, rk_at;
    int pz_peer; /* --pause: who, at which step, the moment, frozen until when */
    long long pz_step;
    double pz_delay, pz_at, pz_until;
    int pz_state;           /* 0 not yet, 1 frozen, 2 woken */
    double ks_delay, ks_at; /* --kill-stage: the moment after its step */
    /* --dead-link: its step, then a drawn moment; the draws that pick the pair and (random)
     * the way; the impersonating socket, closed a second after (dl_close) */
    long long dl_step;
    double dl_delay, dl_at, dl_pick[4], dl_close;
    int dl_done;
    void *dl_ctx, *dl_sock;
    int ks_done;
    int sf_step[64], sf_stage[64], sf_next; /* --stage-failures, in step order */
    double back_at[LOCAL_MAX_PEERS];        /* ... their peers due back, with their stores */
    int back_idx[LOCAL_MAX_PEERS], nback;
    double restart_due[LOCAL_MAX_PEERS]; /* churn: new peers due, for these stages */
    int restart_stage[LOCAL_MAX_PEERS], nrestart;
    double last_churn;
    long long ca_step[LOCAL_MAX_CHURN_AT]; /* --churn-at: the steps, in order, and moments */
    double ca_delay[LOCAL_MAX_CHURN_AT], ca_at;
    int ca_next, ca_none; /* the next one; how many found no peer to kill */
    int joined; /* --join-at: started */
    int kills, restarts;
    double kill_wall; /* wall clock of the last kill re-routes are timed from; < 0 none */
    double mttr[LOCAL_MAX_PEERS]; /* kill to the pool's next step, seconds */
    int nmttr;
    struct {
        int stage;
        long long step;
        double at;
    } pending[LOCAL_MAX_PEERS]; /* kills whose pool has not stepped since */
    int npm;
    local_fault_t log[LOCAL_MAX_PEERS];
    int nlog;
} local_faults_t;

typedef struct {
    local_opts_t lo;
    train_options_t run;
    int argc; /* the words (defaults, saved, the user's), which the peers get too */
    char **argv;
    int user0; /* where the user's own words begin in argv */
    int S, threads;
    double tokens_per_step;
    struct auth *auth; /* --secure: the swarm key, for local's own status requests */
    char dirbuf[64];   /* the run directory when local made it */
    local_child_t *ch;
    int n;
    double t0, t0_wall; /* when the peers started: monotonic, and the wall clock */
    rng_t frng;         /* the faults' draws, from --fault-seed */
    local_faults_t f;
    /* the watch (local_watch.c) */
    local_view_t last_view; /* the last view while it trained with every stage held */
    int have_last_view;
    long long last_step;
    double last_t, last_bytes, tps;
    double done_seen;    /* when a peer first exited 0 on its own: the run is over */
    double orphan_since; /* a stage nobody can rebuild, since */
    int poison_stopped;
} local_t;

/* Ctrl-C or SIGTERM to local (cmd_local.c's handler sets it). */
extern volatile sig_atomic_t local_interrupted;

/* local_opts.c: reads argv into L->lo and L->run and checks them together. 0; 1 when
 * --help was printed; 2 after printing an error. */
int local_opts_parse(local_t *L);
/* Whether word a is one of local's own options (not given to the peers); *takes_arg:
 * whether the next word goes with it. */
int local_opts_own(const char *a, int *takes_arg);

/* local_launch.c */
/* The run directory (made, or a new /tmp one), its local.args, its swarm key. 0, or 1
 * after printing why. */
int local_launch_dir(local_t *L);
/* Starts every peer: the first, then one at a time as the swarm serves. 0, or 1 after
 * saying it could not (every started peer killed). */
int local_launch_all(local_t *L);
/* Starts L->ch[idx] (its log and events files DIR/peer<idx>.*) with the store
 * DIR/peer<db_idx>.db, joining through join_port (< 0: it starts the swarm). 0 or -1. */
int local_launch_spawn(local_t *L, int idx, int db_idx, int join_port);
/* A new peer L->ch[L->n] of `stage` with the store of db_idx, joining through a live
 * peer: 0 (L->n grows), 1 when no peer is live to join through, -1 when it could not
 * be started. */
int local_launch_one(local_t *L, int stage, int db_idx);
/* After a failed start: says so, SIGKILLs every peer started; returns local's exit 1. */
int local_launch_failed(local_t *L);
/* The port of a live peer to join through (0: none). */
int local_launch_live_port(const local_t *L);
/* How many of the first n peers have exited (their status is left for waitpid). */
int local_launch_exited(const local_t *L, int n);
/* SIGTERM to every running peer (they leave cleanly); SIGKILL to any still running 10 s on. */
void local_launch_stop_all(local_t *L);

/* local_watch.c */
/* Whether an exited peer died otherwise than planned: not killed by local (or by its own
 * --kill drill), and not a clean exit. */
int local_watch_died_unplanned(const local_child_t *c);
/* Fills v from the first live peer's status answer. 0, or -1 when none answered. */
int local_watch_view(const local_t *L, local_view_t *v);
/* Watches the run until every peer has exited: 0 then, else local's exit status (Ctrl-C,
 * a swarm that cannot start or finish, a peer that could not be started). */
int local_watch(local_t *L);

/* local_fault.c */
/* Draws --kill start's victim and moment (before the others start). */
void local_fault_plan_start(local_t *L);
/* Draws the other faults' victims, steps and moments, once the peers have started. */
void local_fault_plan(local_t *L);
/* SIGKILLs --kill start's victim once its moment has come. */
void local_fault_start_tick(local_t *L);
/* A peer exited (status st): the --kill drill's victim is recorded as killed. */
void local_fault_on_exit(local_t *L, int i, int st);
/* Whether a peer is frozen now (--pause); SIGCONT once its time is up. */
int local_fault_pause_tick(local_t *L);
/* Whether local will start a peer later (a churn restart, --join-at). */
int local_fault_joiner_due(const local_t *L);
/* The faults due at this view: kills, the pause, joins, recovery times. 0, or -1 when a
 * peer could not be started. */
int local_fault_tick(local_t *L, const local_view_t *v, double now);
/* Peers due back (--stage-failures) or new (churn). 0, or -1 when one could not start. */
int local_fault_restart_tick(local_t *L, double now);

/* local_summary.c */
/* The stage peer i serves now by its events of this run (its last move), else the one
 * it was started on or last seen at. */
int local_summary_stage(const local_t *L, int i);
/* Peer i's id (its `serving` event's, 64 hex) into hex; 0 when it has none yet. */
int local_summary_peer_id(const local_t *L, int i, char hex[65]);
/* The wall-clock moment peer i's "fault" event gives (the --kill drill); now when none. */
double local_summary_fault_time(const local_t *L, int i);
/* The summary of the finished run on stdout and in DIR/summary.json; local's exit status
 * (0: a held-out loss and nothing lost). */
int local_summary(local_t *L);
/* DIR/summary.json of a run stopped for a stage nobody can rebuild. */
void local_summary_orphan(const local_t *L, int stage, long long step);

#endif
