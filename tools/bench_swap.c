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
 * first two ratios; what they cost shows in the whole model's loss. A swarm's neighbour
 * keeps the embedding (head) it rebuilds from as a copy refreshed within a byte budget
 * (peer/recover.c), so the copy may be old: with --copy-step K the first and last rows
 * are measured again with the embedding (final norm and head) as they were before step K
 * (0: the copy a keeper fetches first, the oldest a budget can leave).
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

/* The parameters of `part` of stage s (host memory: the cpu backend). */
static float *part_params(model_t *m, int s, int part, size_t *n)
{
    size_t off;
    stage_part_params(model_stage(m, s), part, &off, n);
    return stage_params(model_stage(m, s)) + off;
}

/* A copy of an end stage's part (embedding or final norm and head), as a keeper holds it. */
typedef struct {
    int stage, part;
    float *v;
    size_t n;
} kept_t;

static int keep_part(kept_t *k, model_t *m)
{
    const float *src = part_params(m, k->stage, k->part, &k->n);
    if (!(k->v = malloc(k->n * sizeof(float)))) return -1;
    memcpy(k->v, src, k->n * sizeof(float));
    return 0;
}

/* The loss with stage `to`'s blocks replaced by a*stage a_from's + b*stage b_from's;
 * the blocks are put back after. */
static double replaced(model_t *m, int to, int a_from, float a, int b_from, float b,
                       const kept_t *copy, const data_t *d, const model_config_t *c, int32_t *tok,
                       int32_t *tgt, char *err)
{
    size_t n, na, nb, np = 0;
    float *dst = part_params(m, to, STAGE_PART_BLOCKS, &n),
          *x = part_params(m, a_from, STAGE_PART_BLOCKS, &na),
          *y = part_params(m, b_from, STAGE_PART_BLOCKS, &nb);
    float *part = copy ? part_params(m, copy->stage, copy->part, &np) : NULL;
    float *keep = malloc(n * sizeof(float)), *keep_part = malloc((np ? np : 1) * sizeof(float));
    if (!keep || !keep_part || na != n || nb != n || (copy && np != copy->n)) {
        free(keep);
        free(keep_part);
        return -1;
    }
    memcpy(keep, dst, n * sizeof(float));
    for (size_t i = 0; i < n; i++) dst[i] = a * x[i] + b * y[i];
    if (copy) {
        memcpy(keep_part, part, np * sizeof(float));
        memcpy(part, copy->v, np * sizeof(float));
    }
    double v = val_loss(m, d, c, tok, tgt, err);
    memcpy(dst, keep, n * sizeof(float));
    if (copy) memcpy(part, keep_part, np * sizeof(float));
    free(keep);
    free(keep_part);
    return v;
}

int bench_swap(int argc, char **argv)
{
    int steps = 300, accum = 4, copy_step = -1;
    const char *shares = "0,0.25,0.5", *data_path = NULL;
    uint64_t seed = 7;
    static const struct option longs[] = {{"steps", required_argument, 0, 's'},
                                           {"shares", required_argument, 0, 'h'},
                                           {"accum", required_argument, 0, 'a'},
                                           {"seed", required_argument, 0, 'e'},
                                           {"data", required_argument, 0, 'd'},
                                           {"copy-step", required_argument, 0, 'c'},
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
        case 'c': copy_step = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: swarmtrain bench swap [--steps N] [--shares 0,0.25,0.5] "
                            "[--accum N] [--seed N] [--data FILE] [--copy-step K]\n");
            return 2;
        }
    }
    if (steps < 1 || accum < 1) {
        fprintf(stderr, "swarmtrain bench swap: --steps and --accum must be positive\n");
        return 2;
    }
    if (copy_step >= steps) {
        fprintf(stderr, "swarmtrain bench swap: --copy-step %d is not a step of the %d run\n",
                copy_step, steps);
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
    printf("%-6s %8s %15s %15s %15s", "share", "whole", "first=copy(1)", "last=copy(1)",
           "middle=avg(0,2)");
    if (copy_step >= 0) printf(" %15s %15s", "first,emb@K", "last,head@K");
    printf("\n");
    int rc = 0;
    for (const char *p = shares; p && *p && !rc; p = strchr(p, ','), p = p ? p + 1 : NULL) {
        double share = atof(p);
        model_t *m = model_new(&c, k, seed, err);
        if (!m) {
            rc = 1;
            break;
        }
        kept_t emb = {.stage = 0, .part = STAGE_PART_EMBED},
               head = {.stage = S - 1, .part = STAGE_PART_HEAD};
        for (int64_t step = 0; step < steps && !rc; step++) {
            if (step == copy_step && (keep_part(&emb, m) || keep_part(&head, m))) {
                snprintf(err, sizeof err, "out of memory");
                rc = 1;
            }
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
        double first = replaced(m, 0, 1, 1, 1, 0, NULL, d, &c, tok, tgt, err);
        double last = replaced(m, 2, 1, 1, 1, 0, NULL, d, &c, tok, tgt, err);
        double mid = replaced(m, 1, 0, 0.5f, 2, 0.5f, NULL, d, &c, tok, tgt, err);
        double first_k = copy_step < 0 ? 0 : replaced(m, 0, 1, 1, 1, 0, &emb, d, &c, tok, tgt, err);
        double last_k = copy_step < 0 ? 0 : replaced(m, 2, 1, 1, 1, 0, &head, d, &c, tok, tgt, err);
        if (whole < 0 || first < 0 || last < 0 || mid < 0 || first_k < 0 || last_k < 0) {
            fprintf(stderr, "swarmtrain bench swap: %s\n", err);
            rc = 1;
        } else {
            printf("%-6.2f %8.4f %8.4f x%5.3f %8.4f x%5.3f %8.4f x%5.3f", share, whole, first,
                   first / whole, last, last / whole, mid, mid / whole);
            if (copy_step >= 0)
                printf(" %8.4f x%5.3f %8.4f x%5.3f", first_k, first_k / whole, last_k,
                       last_k / whole);
            printf("\n");
            fflush(stdout);
        }
        free(emb.v);
        free(head.v);
        model_destroy(&m);
    }
    free(tok);
    free(tgt);
    data_destroy(&d);
    kern_destroy(&k);
    return rc;
}
