/* bench_cost.c — see bench_cost.h. */
#include "tools/bench_cost.h"

#include "tools/numbers.h"

#include <math.h>
#include <string.h>

/* The part a over b into out[*n], if both rows are in the table and share a seed; the
 * per-seed costs into x[] either way (NAN where there is none). */
static void part(const bench_cost_in_t *in, const char *name, const double *a, const double *b,
                 double *x, bench_cost_t *out, int *n)
{
    for (int s = 0; s < in->seeds; s++) x[s] = a && b ? a[s] / b[s] - 1 : NAN;
    if (!a || !b) return;
    bench_cost_t c = {.part = name};
    c.seeds = numbers_stats(x, in->seeds, &c.mean, &c.min, &c.max);
    if (c.seeds) out[(*n)++] = c;
}

int bench_costs(const bench_cost_in_t *in, bench_cost_t out[BENCH_COST_MAX])
{
    enum { S = 64 };
    double x[S], together[S], sum_seed[S], rest_seed[S];
    int n = 0, nmech = in->nmech < BENCH_COST_MAX_MECH ? in->nmech : BENCH_COST_MAX_MECH;
    if (in->seeds < 1 || in->seeds > S) return 0;
    part(in, "optimizer", in->demo_train, in->adamw, x, out, &n);
    part(in, "swarm", in->full, in->demo_train, x, out, &n);
    part(in, "execution", in->swarm_demo, in->demo_train, x, out, &n);
    /* each mechanism over swarm-demo; summed: their means added, and per seed where every
     * mechanism in the table has that seed */
    double summed = 0;
    int mechs = 0;
    for (int s = 0; s < in->seeds; s++) sum_seed[s] = 0;
    for (int i = 0; i < nmech; i++) {
        if (!in->mech[i] || !in->swarm_demo) continue;
        int had = n;
        part(in, in->mech_name[i], in->mech[i], in->swarm_demo, x, out, &n);
        if (n == had) { /* no seed: the sum cannot be had at any seed either */
            for (int s = 0; s < in->seeds; s++) sum_seed[s] = NAN;
            continue;
        }
        out[n - 1].mech = 1;
        summed += out[n - 1].mean, mechs++;
        for (int s = 0; s < in->seeds; s++) sum_seed[s] += x[s];
    }
    int had = n;
    part(in, "together", in->full, in->swarm_demo, together, out, &n);
    if (n == had || !mechs) return n;
    double all = out[n - 1].mean;
    for (int s = 0; s < in->seeds; s++) rest_seed[s] = together[s] - sum_seed[s];
    bench_cost_t c = {.part = "summed", .mean = summed};
    c.seeds = numbers_stats(sum_seed, in->seeds, &x[0], &c.min, &c.max);
    out[n++] = c;
    c = (bench_cost_t){.part = "rest", .mean = all - summed};
    c.seeds = numbers_stats(rest_seed, in->seeds, &x[0], &c.min, &c.max);
    out[n++] = c;
    return n;
}

const bench_cost_t *bench_cost_find(const bench_cost_t *out, int n, const char *part)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(out[i].part, part)) return &out[i];
    return NULL;
}
