/* bench_cost.c — see bench_cost.h. */
#include "tools/bench_cost.h"

#include "tools/numbers.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* The part a over b, named `name` and `suffix`, into out[*n], if both rows are in the table
 * and share a seed; the per-seed costs into x[] either way (NAN where there is none). */
static void part(const bench_cost_in_t *in, const char *name, const char *suffix, const double *a,
                 const double *b, double *x, bench_cost_t *out, int *n)
{
    for (int s = 0; s < in->seeds; s++) x[s] = a && b ? a[s] / b[s] - 1 : NAN;
    if (!a || !b) return;
    bench_cost_t c = {0};
    snprintf(c.part, sizeof c.part, "%s%s", name, suffix);
    c.seeds = numbers_stats(x, in->seeds, &c.mean, &c.min, &c.max);
    if (c.seeds) out[(*n)++] = c;
}

enum { COST_SEEDS = 64 };

/* The mechanisms' parts (.mech = kind), each of rows[i] and `fixed` (a pair not both in the
 * table is skipped): kind 1, the row alone over `fixed` (swarm-demo); kind 2, `fixed` (the
 * full swarm) over the row without that mechanism, the part "<name> in all". Into out[*n],
 * their means added into *summed and their per-seed costs into sum_seed[] (NAN at every
 * seed once a mechanism has none). Returns how many. */
static int mech_parts(const bench_cost_in_t *in, int nm, const double *const *rows,
                      const double *fixed, const char *const *names, int kind, double *summed,
                      double *sum_seed, bench_cost_t *out, int *n)
{
    double x[COST_SEEDS];
    int mechs = 0;
    *summed = 0;
    for (int s = 0; s < in->seeds; s++) sum_seed[s] = 0;
    for (int i = 0; i < nm; i++) {
        if (!rows[i] || !fixed) continue;
        int had = *n;
        if (kind == 1)
            part(in, names[i], "", rows[i], fixed, x, out, n);
        else
            part(in, names[i], " in all", fixed, rows[i], x, out, n);
        if (*n == had) { /* no seed: the sum cannot be had at any seed either */
            for (int s = 0; s < in->seeds; s++) sum_seed[s] = NAN;
            continue;
        }
        out[*n - 1].mech = kind, out[*n - 1].name = names[i];
        *summed += out[*n - 1].mean, mechs++;
        for (int s = 0; s < in->seeds; s++) sum_seed[s] += x[s];
    }
    return mechs;
}

/* `sum_name` (summed, its seeds' range from sum_seed[]) and `rest_name` (together less
 * it: all the mean of together[], the per-seed costs) into out[*n]. */
static void sum_rest(const bench_cost_in_t *in, const char *sum_name, const char *rest_name,
                     double summed, const double *sum_seed, double all, const double *together,
                     bench_cost_t *out, int *n)
{
    double rest_seed[COST_SEEDS], mean;
    for (int s = 0; s < in->seeds; s++) rest_seed[s] = together[s] - sum_seed[s];
    bench_cost_t c = {.mean = summed};
    snprintf(c.part, sizeof c.part, "%s", sum_name);
    c.seeds = numbers_stats(sum_seed, in->seeds, &mean, &c.min, &c.max);
    out[(*n)++] = c;
    c = (bench_cost_t){.mean = all - summed};
    snprintf(c.part, sizeof c.part, "%s", rest_name);
    c.seeds = numbers_stats(rest_seed, in->seeds, &mean, &c.min, &c.max);
    out[(*n)++] = c;
}

int bench_costs(const bench_cost_in_t *in, bench_cost_t out[BENCH_COST_MAX])
{
    double x[COST_SEEDS], together[COST_SEEDS], sum_seed[COST_SEEDS], summed;
    int n = 0, nmech = in->nmech < BENCH_COST_MAX_MECH ? in->nmech : BENCH_COST_MAX_MECH;
    int nwo = in->nwithout < BENCH_COST_MAX_MECH ? in->nwithout : BENCH_COST_MAX_MECH;
    if (in->seeds < 1 || in->seeds > COST_SEEDS) return 0;
    part(in, "optimizer", "", in->demo_train, in->adamw, x, out, &n);
    part(in, "swarm", "", in->full, in->demo_train, x, out, &n);
    part(in, "execution", "", in->swarm_demo, in->demo_train, x, out, &n);
    /* each mechanism alone over swarm-demo; summed, once every mechanism has its part:
     * their means added, and per seed where every one has that seed */
    int mechs = mech_parts(in, nmech, in->mech, in->swarm_demo, in->mech_name, 1, &summed, sum_seed,
                           out, &n);
    int had = n;
    part(in, "together", "", in->full, in->swarm_demo, together, out, &n);
    int have_all = n > had;
    double all = have_all ? out[n - 1].mean : NAN;
    int can_sum = in->full_mechs > 0 && have_all;
    if (can_sum && mechs == in->full_mechs)
        sum_rest(in, "summed", "rest", summed, sum_seed, all, together, out, &n);
    /* each mechanism among the others: the full swarm over it without that one */
    mechs =
        mech_parts(in, nwo, in->without, in->full, in->without_name, 2, &summed, sum_seed, out, &n);
    if (can_sum && mechs == in->full_mechs)
        sum_rest(in, "summed in all", "rest in all", summed, sum_seed, all, together, out, &n);
    return n;
}

const bench_cost_t *bench_cost_find(const bench_cost_t *out, int n, const char *part)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(out[i].part, part)) return &out[i];
    return NULL;
}
