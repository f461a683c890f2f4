/* sim.h — the simulated network: many nodes in one process, one thread, on a virtual
 * clock, with every delay, loss, duplicate, crash, restart, join, partition and slow
 * node drawn from one seed (FoundationDB's simulation, TigerBeetle's VOPR). The same
 * seed replays the same schedule exactly: no wall clock, no rand(), no addresses in
 * decisions; events are ordered by (virtual time, sequence number).
 *
 * Each node is what one peer process is: a transport (transport.h) and a membership
 * layer (members.h) that gossips every heartbeat_s as real GOSSIP messages over the
 * same faulty network, declares members dead after timeout_s of silence, answers HELLO
 * with WELCOME (payloads: run text, member table, as net.c does), says LEAVE on a clean
 * stop, and hands the node's program NET_EV_VIEW whenever its live table changes and
 * at every tick. The program itself — a peer — is not in swarm/: the caller drives it
 * through sim_app_t callbacks (tools/cmd_sim.c drives real peers; tests/test_sim.c a
 * stand-in). A node's endpoint is "sim://K", K its index; indexes are never reused.
 *
 * Compute: a program's step reports the virtual time its work took; the node is busy
 * that long times its slow factor. While busy, its membership layer keeps gossiping
 * and merging (a network thread), but messages for the program wait in its inbox.
 *
 * The fault model (all knobs in sim_config_t; sim_config_faults gives named levels):
 * - delay: every message takes delay_min_s..delay_max_s (uniform), plus, with
 *   probability tail_p, an extra 0..tail_max_s (a long tail);
 * - order: a connection (one per ordered pair of nodes, as a ZeroMQ DEALER over TCP)
 *   delivers in order; with probability reorder_p a message ignores that order
 *   (independent delays: harsher than TCP);
 * - duplicates: with probability dup_p a message is delivered twice (harsher than TCP);
 * - drops ("connection reset"): TCP does not lose single messages, it loses a
 *   connection. With probability reset_p per message sent, its connection resets at a
 *   random moment before the message would arrive: every message then in flight on that
 *   connection is lost, silently (ZeroMQ reconnects on its own), later ones go through;
 * - crashes (SIGKILL) at random moments between any two events, at crash_rate per
 *   virtual second over the swarm: the program is thrown away (app->crash), messages it
 *   sent in its last crash_window_s may or may not have left (a suffix of each
 *   connection is lost, drawn per crash), messages to it vanish, and the others notice
 *   only by timeout. With probability restart_p a crash is followed, after
 *   restart_min_s..restart_max_s, by a restart: a new node, new id, joining through a
 *   random live node;
 * - joins of new nodes (join_rate) and clean stops with LEAVE (leave_rate);
 * - partitions: at partition_rate, a random cut into two non-empty sides for
 *   partition_min_s..partition_max_s. Like TCP through a broken path that times out,
 *   every connection across the cut resets when it starts (messages in flight across
 *   it are lost) and messages sent across it while it lasts are lost; at the heal
 *   connections work again. Gossip keeps probing members that died of silence for
 *   forget_s (members.h), so that the two sides find each other again;
 * - slow nodes: with probability slow_p a node's compute takes 1..slow_max times as long;
 * - pauses: at pause_rate a random node is frozen (SIGSTOP) for pause_min_s..pause_max_s:
 *   its program and its network side do nothing (no gossip, no tick), messages to it wait
 *   in its socket buffers and arrive when it wakes, in order; then its clock has jumped;
 * - dead connections: at dead_link_rate a connection from one live node to another (one
 *   way) dies with nothing to say so: what is sent on it is lost, silently, until its
 *   sender opens it anew (the transport's reconnect: docs/protocol.md 11.3, 10.7 rule 13),
 *   as over a connection a NAT or a middlebox dropped;
 * - corruption: with probability corrupt_p a message arrives with one frame cut short, or
 *   its header with a bit flipped where any decoder must notice (magic, version; anywhere
 *   in a signed header). It must be refused, by the dispatch core or by the program
 *   (sim_app_t.rejected goes up while the program handles it); one that is taken fails
 *   the schedule.
 *
 * Every message is bytes: each node runs the dispatch core a real peer's network thread
 * runs (dispatch.h), which encodes, signs, decodes and checks every header and counts the
 * bytes by kind (sim_node_wire). Node ids are Ed25519 keys drawn from the seed.
 * Faults start at faults_from; no new fault starts after faults_until, and once the
 * last partition heals the network is healed for good.
 *
 * Not for: what programs do with messages (peer/), real sockets (net.c).
 */
#ifndef SWARMTRAIN_SIM_H
#define SWARMTRAIN_SIM_H

#include "swarm/msg.h"
#include "swarm/transport.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct sim sim_t;

typedef struct {
    uint64_t seed;
    double heartbeat_s;  /* gossip period (0.25) */
    double timeout_s;    /* silence that makes a member dead (3) */
    double forget_s;     /* members dead of silence are probed this long (60) */
    int gossip_fanout;   /* 0: every live member each tick (as net.c); else this many */
    int swim_every;      /* > 0: SWIM membership, a probe every this many ticks (dispatch.h) */
    int swim_k, swim_fanout; /* SWIM: members asked to ping; news pushed to (0: 3, 3) */
    double delay_min_s;  /* one-way delay of every message, uniform in [min, max] */
    double delay_max_s;
    double tail_p;       /* probability of an extra delay of up to tail_max_s */
    double tail_max_s;
    double reorder_p;    /* probability a message ignores its connection's order */
    double dup_p;        /* probability a message is delivered twice */
    double reset_p;      /* probability a message's connection resets before it arrives */
    double corrupt_p;    /* probability a message arrives corrupted (must be refused) */
    double crash_rate;   /* crashes per virtual second, swarm-wide */
    double crash_window_s; /* a crashed node's messages this recent may be lost (5 ms) */
    double restart_p;    /* probability a crash is followed by a restart */
    double restart_min_s, restart_max_s;
    double join_rate;    /* new nodes per virtual second */
    double leave_rate;   /* clean stops per virtual second */
    double partition_rate; /* partitions per virtual second (one at a time) */
    double partition_min_s, partition_max_s;
    double pause_rate;   /* pauses per virtual second, swarm-wide (SIGSTOP ... SIGCONT) */
    double pause_min_s, pause_max_s;
    double dead_link_rate; /* connections that die silently per virtual second (one way) */
    double slow_p;       /* probability a node is slow */
    double slow_max;     /* a slow node's compute multiplier, uniform in [1, slow_max] */
    double faults_from;  /* virtual time before which no fault starts (the swarm forms) */
    double faults_until; /* virtual time after which no fault starts */
    int max_nodes;       /* nodes ever created, restarts and joins included (64) */
    uint64_t max_events; /* a schedule stops with STATUS_ETIMEOUT past this many (livelock) */
    FILE *trace;         /* every event as one line as it happens, or NULL */
} sim_config_t;

/* Named fault levels: "none" (delays only, FIFO: must always pass), "mild" (long tails,
 * rare resets, a few crashes with restarts, joins, short partitions, slow nodes),
 * "heavy" (all of it, more often, with reordering and duplicates), "corrupt" (mild, and
 * 1% of messages corrupted), "pause" (mild, and nodes paused for 1-20 s at 0.02 per
 * virtual second), "deadlink" (mild, and a connection dying silently at 0.05 per virtual
 * second). Fills *c (seed and trace untouched). 0, or STATUS_EINVAL
 * for an unknown name. */
int sim_config_faults(sim_config_t *c, const char *level, char *err);

/* Sets one knob by name ("dup_p", "reset_p", "crash_rate", ... any double field above,
 * and the ints "gossip_fanout", "swim_every", "swim_k", "swim_fanout") from text. 0, or STATUS_EINVAL naming the knobs. */
int sim_config_set(sim_config_t *c, const char *key, const char *value, char *err);

/* Defaults: heartbeat 0.25 s, timeout 3 s, delays 0.1-5 ms, no faults. */
sim_config_t sim_config_defaults(void);

/* The node's program, driven by the simulator. Every callback gets the node's index.
 * A callback returns 0, 1 (only event and step: the program finished the run and exits
 * cleanly; the node says LEAVE, "the run is over", and stops), 2 (the same, but it did not
 * finish the run: a plain LEAVE), or a negative status with err filled, which fails the
 * schedule. The transport may be used from any callback of its node. */
typedef struct {
    void *ctx;
    /* A node starts: the founder (join NULL) or a joiner (join: "sim://K", a live node
     * that knows the run). restart_of: the crashed node this one replaces, or -1. The
     * transport stays valid until the node stops or crashes. */
    int (*start)(void *ctx, int node, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                 const char *join, int restart_of, double now, char *err);
    /* An event for the node's program (NET_EV_MSG, NET_EV_VIEW, NET_EV_UNDELIV). */
    int (*event)(void *ctx, int node, const net_ev_t *ev, double now, char *err);
    /* One unit of the program's work. *wake_at: when it wants to run again without an
     * event (<= now: at once); *work_s: virtual compute time it used (0: none). */
    int (*step)(void *ctx, int node, double now, double *wake_at, double *work_s, char *err);
    /* The node crashed, or a fault stopped it (the node says LEAVE afterwards): throw its
     * program away; nothing it sends from here on goes anywhere. */
    void (*crash)(void *ctx, int node, double now);
    /* Whether node may crash or stop now (NULL: always). */
    int (*may_fail)(void *ctx, int node);
    /* After every event: the invariants. Non-zero fails the schedule. */
    int (*check)(void *ctx, double now, char *err);
    /* 1 when the schedule's goal is reached (sim_run returns 0). NULL: never. */
    int (*done)(void *ctx);
    /* Messages the node's program has refused so far (malformed payloads). NULL: a
     * corrupted message that reaches the program cannot be judged (and fails). */
    uint64_t (*rejected)(void *ctx, int node);
    /* Node's member table took member id in (up) or declared it dead (down; why as the
     * members.h hooks say). NULL: not told. */
    void (*member_up)(void *ctx, int node, const uint8_t id[MSG_ID_LEN], double now);
    void (*member_down)(void *ctx, int node, const uint8_t id[MSG_ID_LEN], const char *why,
                        double now);
    /* 1: no NET_EV_VIEW events (a program that reads membership through the hooks above:
     * a 1,000-node table copied at every tick of every node is most of a schedule) */
    int no_views;
} sim_app_t;

/* A simulator with no nodes; app is copied. NULL + err on bad config or no memory. */
sim_t *sim_new(const sim_config_t *cfg, const sim_app_t *app, char *err);

/* Destroys the simulator and every queued event; programs still alive are the caller's
 * (app->crash is not called). NULL-safe. */
void sim_destroy(sim_t **s);

/* Schedules a node to start at virtual time `at`: the first node ever added founds the
 * swarm, every other joins through a random live node that knows the run (waiting for
 * one). Returns its index, or a negative status (max_nodes reached). */
int sim_add_node(sim_t *s, double at, char *err);

/* Schedules a node that replaces the crashed node restart_of (a new node, new id, as a
 * fault's restart) at `at`. found != 0: it founds a swarm anew instead of joining (a
 * whole swarm restarting from its stores: nobody is left to join through; the nodes
 * added after it join through it). Returns its index, or a negative status. */
int sim_add_restart(sim_t *s, double at, int restart_of, int found, char *err);

/* No fault starts (crash, join, stop, partition, connection reset, duplicate, reordering)
 * before virtual time `until` (INFINITY: until called again; now: from now on again);
 * faults already under way (a partition, a restart due) run their course. Delays and
 * their tails stay. For a driver's own calm window. */
void sim_hold_faults(sim_t *s, double until);

/* Runs events until app->done (0), virtual time `until` (1), or a failure (a negative
 * status; err says what, the trace tells the rest). */
int sim_run(sim_t *s, double until, char *err);

/* Crashes a node now (as a fault would), or stops it cleanly with LEAVE. For tests and
 * drivers; not from inside a callback of that same node. */
void sim_crash(sim_t *s, int node);
/* sim_crash without the fault model's restart (restart_p): the driver restarts it. */
void sim_kill(sim_t *s, int node);
void sim_stop(sim_t *s, int node);
/* Cuts the network in two (side[i] in {0,1} per node; nodes added later: side 0) for
 * `duration` virtual seconds. */
void sim_partition(sim_t *s, const uint8_t *side, int n, double duration);

double sim_now(const sim_t *s);
int sim_nodes(const sim_t *s);
/* 1 while node runs a program (started, neither crashed nor stopped). */
int sim_node_alive(const sim_t *s, int node);
const uint8_t *sim_node_id(const sim_t *s, int node);
double sim_node_slow(const sim_t *s, int node);
/* Bytes the node's network side sent and received by kind over its life so far (until it
 * went down), and the virtual seconds it was up. Zeros for a node not started. */
void sim_node_wire(const sim_t *s, int node, wire_count_t *wire, double *up_s);
/* Messages a fault corrupted so far, and (refused) how many of them were refused. */
uint64_t sim_corrupted(const sim_t *s, uint64_t *refused);
/* The node's live member table (self first) into out (max entries); returns the count,
 * or 0 for a node that is not alive. */
int sim_node_view(const sim_t *s, int node, msg_member_t *out, int max);

/* The virtual time of the last fault that disturbs progress (crash, stop, restart,
 * join, connection reset, partition start or heal); 0 if none yet. */
double sim_last_fault(const sim_t *s);
/* 1 while a partition lasts. */
int sim_partitioned(const sim_t *s);
/* When the node's last pause (faults "pause") ends or ended; 0 if it was never paused. */
double sim_node_paused_until(const sim_t *s, int node);
/* When a connection from the node last died silently (faults "deadlink"); 0: never. */
double sim_node_link_died_at(const sim_t *s, int node);

/* Events run so far, and the hash of the whole trace (equal for equal schedules). */
uint64_t sim_events(const sim_t *s);
uint64_t sim_trace_hash(const sim_t *s);
/* Adds a line to the trace (drivers: invariant results, peer milestones). */
void sim_note(sim_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints the last (up to) n trace lines, oldest first. */
void sim_dump_trace(const sim_t *s, FILE *f, int n);

#endif
