/* run_opts.h — shared command-line options of train, peer and local.
 * Not for: library code. */
#ifndef SWARMTRAIN_RUN_OPTS_H
#define SWARMTRAIN_RUN_OPTS_H

#include "model/train.h"

#include <getopt.h>
#include <stdio.h>

/* Subcommand-specific long options use vals from RUN_OPTS_EXTRA up. */
#define RUN_OPTS_EXTRA 1000

typedef struct {
    const struct option *opts; /* extra long options */
    int n;
    int (*handle)(void *ctx, int c, const char *arg); /* 0, or -1 after printing why */
    void *ctx;
    const char *intro; /* what the command does */
    const char *usage; /* lines for the extra options, printed before the common ones */
} run_opts_extra_t;

/* Parses argv into *o (which holds the defaults on entry). Returns 0; 1 when --help was
 * printed; 2 after printing an error. */
int run_opts_parse(const char *cmd, int argc, char **argv, train_options_t *o,
                   const run_opts_extra_t *x);
void run_opts_usage(FILE *f, const char *cmd, const run_opts_extra_t *x);

/* --data URL (run_opts_parse calls it): fetches the corpus into the cache (cache_dir, NULL:
 * the default) with swarm/http.h, verified against o->data_sha256 when that is set, and
 * points o->data_path at the local file; fills o->data_url and o->data_sha256. 0, or -1
 * after printing why. */
int run_opts_fetch_data(const char *cmd, train_options_t *o, const char *cache_dir);

/* Number parsing with a message naming the option; 0 or -1. */
int run_opts_int(const char *opt, const char *v, int min, int *out);
int run_opts_float(const char *opt, const char *v, float *out);
/* --checkpoint-budget P: a percent in (0, 100] of one CPU, as the share *out in (0, 1]. */
int run_opts_budget(const char *v, double *out);
/* --copy-budget P (peer, local, sim): a percent in [0, 100] of the activation/gradient
 * bytes a keeper sent, as peer_options_t.copy_budget: the share, or -1 for 0 (the first
 * copy of an end stage's part only). */
int run_opts_copy_budget(const char *v, double *out);
/* --churn-at N[:RESTART_S] (local; bench learn passes it on): N kills, 1 to
 * RUN_OPTS_CHURN_AT_MAX, each peer replaced RESTART_S >= 0 seconds later (default 3). */
#define RUN_OPTS_CHURN_AT_MAX 64
int run_opts_churn_at(const char *v, int *n, double *restart_s);

#endif
