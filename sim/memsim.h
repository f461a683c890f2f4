/* memsim.h — membership alone on the simulated network (issue 24, item 3): every node
 * runs only what a peer's network thread runs for membership (the dispatch core over the
 * simulated wire: swarm/sim.h), no model and no program beyond joining, so that a swarm of
 * a thousand fits in one process. Either membership: whole-table gossip (today's peers) or
 * SWIM (knob swim_every > 0, dispatch.h).
 *
 * A schedule, every choice drawn from its seed: node 0 founds the swarm, the others start
 * over join_s virtual seconds and join through a live node, each taking stage i mod
 * stages and serving; the fault level's own faults run (crashes with restarts, joins,
 * partitions, resets, delays). Once the swarm has formed (every node's table holds every
 * live node), `crashes` nodes drawn from the seed are SIGKILLed from outside, at moments
 * drawn over the first half of run_s, and the schedule runs run_s virtual seconds more.
 *
 * What it measures:
 * - the bytes every node up over the whole steady window (formation to the end) sent per
 *   virtual second, by kind: mean and max;
 * - for each killed node: the time from its death until no live node holds it alive
 *   (detection by everyone; a node that joins meanwhile and takes it from a stale table
 *   has to drop it too). Undetected by the end: the schedule fails;
 * - false deaths: a node declared dead by another while it was up, unless a partition was
 *   under way or healed within partition_grace_s before (being unreachable is not a
 *   false verdict) or it had been paused (faults "pause").
 *
 * Not for: the peer program (sim/simrun.h runs real peers on the same network).
 */
#ifndef SWARMTRAIN_MEMSIM_H
#define SWARMTRAIN_MEMSIM_H

#include "swarm/transport.h"

#include <stdint.h>
#include <stdio.h>

typedef struct {
    uint64_t seed;
    int nodes;          /* nodes at the start */
    int stages;         /* stage = node index mod stages (pools of nodes / stages) */
    const char *faults; /* "none", "mild", "heavy", "pause" (sim_config_faults) */
    const char *knobs;  /* then "key=value,..." (sim_config_set), e.g. "swim_every=4" */
    double join_s;      /* the nodes start over this span (0: nodes / 50 s) */
    double run_s;       /* virtual seconds after formation (0: 40) */
    double form_s;      /* formation must happen within this (0: join_s + 120) */
    int crashes;        /* nodes SIGKILLed from outside after formation (at most 8) */
    FILE *trace;        /* every event, or NULL */
} memsim_options_t;

#define MEMSIM_CRASH_MAX 8

typedef struct {
    int failed;
    char why[256];
    double formed_at;                  /* virtual time the swarm formed (-1: never) */
    double virtual_s;
    uint64_t events;
    int nodes;                         /* nodes ever started */
    int measured;                      /* nodes up over the whole steady window */
    double sent_mean[WIRE_KINDS], sent_max[WIRE_KINDS]; /* B per node per virtual s */
    int crashes, detected;             /* killed from outside; detected by everyone */
    double detect_s[MEMSIM_CRASH_MAX]; /* each one's detection time (-1: not detected) */
    double cut_s[MEMSIM_CRASH_MAX];    /* of which the swarm was cut in two (a partition) */
    int false_deaths;                  /* verdicts on live nodes (see above) */
    char false_why[160];               /* the first of them */
    int deaths_seen;                   /* every verdict of any node on any other */
} memsim_result_t;

memsim_options_t memsim_defaults(void);

/* Runs one schedule. 0 (r says whether it failed and why), or a status when it could not
 * run (bad options, out of memory). */
int memsim_one(const memsim_options_t *o, memsim_result_t *r, char *err);

#endif
