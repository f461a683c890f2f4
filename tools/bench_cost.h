/* bench_cost.h — what `bench learn`'s total is made of (issue 27): each part the final
 * validation loss of one row over another's, less one, over the seeds both rows have:
 *   optimizer   sign DeMo in one process (demo-train) over AdamW;
 *   swarm       the full swarm over demo-train;
 *   execution   the swarm with DeMo alone (swarm-demo) over demo-train;
 *   <mechanism> each one-mechanism row over swarm-demo;
 *   together    the full swarm over swarm-demo;
 *   summed      the mechanisms' costs added up;
 *   rest        together less summed: what the mechanisms do to one another, which no
 *               row measures one at a time;
 * and, with the rows of the full swarm without one mechanism (--leave-one-out):
 *   <mechanism> in all   the full swarm over it without that mechanism: its cost in the
 *               others' company;
 *   summed in all        those costs added up;
 *   rest in all          together less them: what is left when each is charged its cost
 *               among the others (below zero where pairs cost more than their parts).
 * Not for: running or reading the runs (bench_learn.c). */
#ifndef SWARMTRAIN_TOOLS_BENCH_COST_H
#define SWARMTRAIN_TOOLS_BENCH_COST_H

#define BENCH_COST_MAX_MECH 8
#define BENCH_COST_MAX      (2 * BENCH_COST_MAX_MECH + 8)

/* The rows' final validation losses, [seeds] each (NAN: that seed has none; NULL: the
 * row is not in the table). */
typedef struct {
    int seeds;
    const double *adamw, *full, *demo_train, *swarm_demo;
    int nmech;
    const double *mech[BENCH_COST_MAX_MECH];
    const char *mech_name[BENCH_COST_MAX_MECH]; /* "codec", ...: the part's name */
    int nwithout;                               /* the full swarm without one mechanism each */
    const double *without[BENCH_COST_MAX_MECH];
    const char *without_name[BENCH_COST_MAX_MECH]; /* "codec", ...: its part "codec in all" */
    /* How many mechanisms the full swarm runs. A sum and its rest need a part for each: of
     * fewer, the sum would be a piece of the total and the rest the others' costs too. */
    int full_mechs;
} bench_cost_in_t;

/* One part. mean, min and max are fractions (0.016: +1.6%) over `seeds` seeds. summed's
 * and rest's mean come from the parts' means (each over the seeds its rows have); their
 * min and max are taken seed by seed, over the seeds every mechanism row in the table has
 * (rest's: and the full swarm too; NAN, seeds 0, where none has). */
typedef struct {
    char part[32]; /* "optimizer", ..., "codec", "codec in all", ... */
    double mean, min, max;
    int seeds;
    int mech; /* 1: a one-mechanism row's part; 2: a mechanism's cost in all (--leave-one-out) */
    const char *name; /* those two: the mechanism's name (bench_cost_in_t's); else NULL */
} bench_cost_t;

/* Fills out[] with the parts the rows allow, in the order above (a part whose rows are
 * not both in the table, or share no seed, is left out; summed and rest need together
 * and a part alone for every mechanism (full_mechs of them), summed in all and rest in
 * all together and a part in all for every one). Returns how many. */
int bench_costs(const bench_cost_in_t *in, bench_cost_t out[BENCH_COST_MAX]);

/* The part named `part` in out[0, n), or NULL. */
const bench_cost_t *bench_cost_find(const bench_cost_t *out, int n, const char *part);

#endif
