/* bench_swap.c — `swarmtrain bench swap`: what CheckFree+'s swaps buy. For each swap
 * share (0 is the baseline, in the same run), trains `tiny` with 6 layers in 3 stages in
 * one process (AdamW, the run's defaults; the share's microbatches swapped as a swarm
 * swaps them, swarm/path.h), then measures the held-out loss of the trained model whole
 * and with one stage replaced as a swarm rebuilds a lost one (peer/recover.c):
 *   first: stage 0's blocks := stage 1's (its embedding kept: CheckFree+),
 *   last:  stage 2's blocks := stage 1's (its final norm and head kept: CheckFree+),
 *   middle: stage 1's blocks := the mean of stage 0's and stage 2's (CheckFree with equal
 *          weights),
 * and prints each as a ratio to the whole model's loss. The swaps are meant to lower the
 * first two ratios; what they cost shows in the whole model's loss.
 * Not for: the swarm's wall-clock under failures (tools/bench_checkfree.sh). */
#include "common/status.h"
#include "model/data.h"
#include "model/model.h"
#include "model/train.h"
#include "swarm/path.h"
#include "tools/cmd.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { S = 3, VAL_BATCHES = 16 };

/* Mean held-out loss over VAL_BATCHES batches. */
static double val_loss(model_t *m, const data_t *d, const model_config_t *c, int32_t *tok,
                       int32_t *tgt, char *err)
{
    double sum = 0;
    for (int b = 0; b < VAL_BATCHES; b++) {
        float loss;
        data_val_batch(d, b, VAL_BATCHES, c->batch, tok, tgt);
        if (model_eval_micro(m, tok, tgt, &loss, err)) return -1;
        sum += loss;
    }
    return sum / VAL_BATCHES;
}

/* The blocks of stage s (host memory: the cpu backend). */
static float *blocks(model_t *m, int s, size_t *n)
{
    size_t off;
    stage_part_params(model_stage(m, s), STAGE_PART_BLOCKS, &off, n);
    return stage_params(model_stage(m, s)) + off;
}

/* The loss with stage `to`'s blocks replaced by a*stage a_from's + b*stage b_from's;
 * the blocks are put back after. */
static double replaced(model_t *m, int to, int a_from, float a, int b_from, float b,
                       const data_t *d, const model_config_t *c, int32_t *tok, int32_t *tgt,
                       char *err)
{
    size_t n, na, nb;
    float *dst = blocks(m, to, &n), *x = blocks(m, a_from, &na), *y = blocks(m, b_from, &nb);
    float *keep = malloc(n * sizeof(float));
    if (!keep || na != n || nb != n) {
        free(keep);
        return -1;
    }
    memcpy(keep, dst, n * sizeof(float));
    for (size_t i = 0; i < n; i++) dst[i] = a * x[i] + b * y[i];
    double v = val_loss(m, d, c, tok, tgt, err);
    memcpy(dst, keep, n * sizeof(float));
    free(keep);
    return v;
}

int bench_swap(int argc, char **argv)
{
    int steps = 300, accum = 4;
    const char *shares = "0,0.25,0.5", *data_path = NULL;
    uint64_t seed = 7;
    static const struct option longs[] = {{"steps", required_argument, 0, 's'},
                                           {"shares", required_argument, 0, 'h'},
                                           {"accum", required_argument, 0, 'a'},
                                           {"seed", required_argument, 0, 'e'},
                                           {"data", required_argument, 0, 'd'},
                                           {0, 0, 0, 0}};
    int o;
    optind = 1;
    while ((o = getopt_long(argc, argv, "", longs, NULL)) != -1) {
        switch (o) {
        case 's': steps = atoi(optarg); break;
        case 'h': shares = optarg; break;
        case 'a': accum = atoi(optarg); break;
        case 'e': seed = strtoull(optarg, NULL, 10); break;
        case 'd': data_path = optarg; break;
        default:
            fprintf(stderr, "usage: swarmtrain bench swap [--steps N] [--shares 0,0.25,0.5] "
                            "[--accum N] [--seed N] [--data FILE]\n");
            return 2;
        }
    }
    if (steps < 1 || accum < 1) {
        fprintf(stderr, "swarmtrain bench swap: --steps and --accum must be positive\n");
        return 2;
    }
    char err[STATUS_ERR_LEN];
    train_options_t t = train_defaults();
    model_config_t c;
    config_preset(&c, "tiny", NULL);
    c.n_layers = 6;
    c.stages = S;
    optim_config_t oc = t.opt;
    oc.total_steps = steps;
    kern_t *k = kern_new("cpu", 1, err);
    data_t *d = k ? data_open(data_path ? data_path : data_default_path(), c.seq, t.val_frac, err)
                  : NULL;
    int32_t *tok = malloc((size_t)c.batch * c.seq * sizeof *tok);
    int32_t *tgt = malloc((size_t)c.batch * c.seq * sizeof *tgt);
    if (!k || !d || !tok || !tgt) {
        fprintf(stderr, "swarmtrain bench swap: %s\n", err);
        return 1;
    }
    printf("bench swap: tiny, %d layers in %d stages, AdamW, %d steps of %d microbatches, seed "
           "%llu; held-out loss over %d batches\n",
           c.n_layers, S, steps, accum, (unsigned long long)seed, VAL_BATCHES);
    printf("%-6s %8s %15s %15s %15s\n", "share", "whole", "first=copy(1)", "last=copy(1)",
           "middle=avg(0,2)");
    int rc = 0;
    for (const char *p = shares; p && *p && !rc; p = strchr(p, ','), p = p ? p + 1 : NULL) {
        double share = atof(p);
        model_t *m = model_new(&c, k, seed, err);
        if (!m) {
            rc = 1;
            break;
        }
        for (int64_t step = 0; step < steps && !rc; step++) {
            model_zero_grads(m);
            for (int a = 0; a < accum && !rc; a++) {
                float loss;
                data_train_batch(d, seed, 0, step * accum + a, c.batch, tok, tgt);
                rc = model_set_swap(m, path_swap(seed, step, (uint32_t)a, accum, S, share, 0), err) ||
                     model_train_micro(m, tok, tgt, &loss, err);
            }
            model_set_swap(m, PATH_SWAP_NONE, err);
            model_adamw_step(m, &oc, step, 1.0f / (float)accum, NULL);
        }
        double whole = rc ? -1 : val_loss(m, d, &c, tok, tgt, err);
        double first = replaced(m, 0, 1, 1, 1, 0, d, &c, tok, tgt, err);
        double last = replaced(m, 2, 1, 1, 1, 0, d, &c, tok, tgt, err);
        double mid = replaced(m, 1, 0, 0.5f, 2, 0.5f, d, &c, tok, tgt, err);
        if (whole < 0 || first < 0 || last < 0 || mid < 0) {
            fprintf(stderr, "swarmtrain bench swap: %s\n", err);
            rc = 1;
        } else {
            printf("%-6.2f %8.4f %8.4f x%5.3f %8.4f x%5.3f %8.4f x%5.3f\n", share, whole, first,
                   first / whole, last, last / whole, mid, mid / whole);
            fflush(stdout);
        }
        model_destroy(&m);
    }
    free(tok);
    free(tgt);
    data_destroy(&d);
    kern_destroy(&k);
    return rc;
}
