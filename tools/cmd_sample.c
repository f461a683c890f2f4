/* cmd_sample.c — `swarmtrain sample`: text from a trained model, exported
 * (model.safetensors + config.json) or assembled from stores' stage checkpoints.
 * Greedy with --temperature 0, else softmax sampling (top-k) from a seeded generator.
 * Every new token runs the model's ordinary forward pass (model_logits) over the last
 * `seq` tokens: no cache, so the result is exactly what the training forward computes.
 * Not for: a live swarm's stages (not yet). */
#include "common/rng.h"
#include "common/status.h"
#include "kernels/kernels.h"
#include "model/assemble.h"
#include "model/hf_model.h"
#include "swarm/path.h"
#include "tools/cmd.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DBS 64

static void usage(FILE *f)
{
    fprintf(f,
            "usage: swarmtrain sample (--model DIR | --db PATH [--db PATH ...]) [--prompt TEXT]\n"
            "                         [--tokens N] [--temperature T] [--top-k K] [--seed S]\n"
            "                         [--ids] [--logits FILE] [--device D] [--threads N]\n"
            "                         [--stages S] [--skip-stages LIST]\n\n"
            "Generates N bytes after the prompt and prints prompt and continuation.\n\n"
            "  --model DIR      an export (DIR/config.json, DIR/model.safetensors)\n"
            "  --db PATH        stores to assemble the model from, as `export` does\n"
            "  --prompt TEXT    the start (default \"The \"); bytes are the tokens\n"
            "  --tokens N       bytes to generate (default 64)\n"
            "  --temperature T  0 is greedy (the most likely byte, the lowest on ties);\n"
            "                   default 0.8\n"
            "  --top-k K        sample among the K most likely only (0: all; default 0)\n"
            "  --seed S         sampling seed (default 1)\n"
            "  --ids            print the generated token ids instead of text\n"
            "  --logits FILE    write the logits of the prompt's positions (prompt length x\n"
            "                   vocab float32, little-endian) to FILE, for comparisons\n"
            "  --device D       cpu (default), ref, cuda, auto\n"
            "  --threads N      cpu threads (default 1)\n"
            "  --stages S       with --model: cut the blocks into S stages (default 1); with\n"
            "                   --db the run's stages are used\n"
            "  --skip-stages L  run the model without these middle stages (SkipPipe), e.g.\n"
            "                   1,2 or 1-2\n");
}

/* The next token from one row of logits. */
static int pick(const float *l, int V, double temp, int top_k, rng_t *r, double *prob)
{
    int best = 0;
    for (int i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    if (temp <= 0) return best;
    /* the top-k threshold: the k-th largest value */
    float thresh = -INFINITY;
    if (top_k > 0 && top_k < V) {
        float *s = malloc((size_t)V * sizeof *s);
        if (s) {
            memcpy(s, l, (size_t)V * sizeof *s);
            for (int i = 0; i < top_k; i++) { /* partial selection sort: k is small */
                int m = i;
                for (int j = i + 1; j < V; j++)
                    if (s[j] > s[m]) m = j;
                float t = s[i];
                s[i] = s[m];
                s[m] = t;
            }
            thresh = s[top_k - 1];
            free(s);
        }
    }
    double sum = 0;
    for (int i = 0; i < V; i++)
        if (l[i] >= thresh) sum += exp((l[i] - l[best]) / temp);
    double u = rng_uniform(r) * sum, acc = 0;
    int last = best;
    for (int i = 0; i < V; i++) {
        if (l[i] < thresh) continue;
        acc += exp((l[i] - l[best]) / temp);
        last = i;
        if (u < acc) break;
    }
    if (prob) *prob = exp((l[last] - l[best]) / temp) / sum;
    return last;
}

int cmd_sample(int argc, char **argv)
{
    static const struct option opts[] = {{"model", required_argument, 0, 'm'},
                                         {"db", required_argument, 0, 'd'},
                                         {"prompt", required_argument, 0, 'p'},
                                         {"tokens", required_argument, 0, 'n'},
                                         {"temperature", required_argument, 0, 't'},
                                         {"top-k", required_argument, 0, 'k'},
                                         {"seed", required_argument, 0, 's'},
                                         {"ids", no_argument, 0, 'i'},
                                         {"logits", required_argument, 0, 'l'},
                                         {"device", required_argument, 0, 'D'},
                                         {"threads", required_argument, 0, 'T'},
                                         {"stages", required_argument, 0, 'S'},
                                         {"skip-stages", required_argument, 0, 'K'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *dbs[MAX_DBS], *dir = NULL, *prompt = "The ", *logits_path = NULL, *device = "cpu";
    const char *skip_list = NULL;
    int ndb = 0, ntok = 64, top_k = 0, ids = 0, threads = 1, stages = 0, c;
    double temp = 0.8;
    unsigned long long seed = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        char *end = NULL;
        errno = 0;
        switch (c) {
        case 'm':
            dir = optarg;
            break;
        case 'd':
            if (ndb == MAX_DBS) {
                fprintf(stderr, "swarmtrain sample: at most %d --db\n", MAX_DBS);
                return 2;
            }
            dbs[ndb++] = optarg;
            break;
        case 'p':
            prompt = optarg;
            break;
        case 'n':
            ntok = (int)strtol(optarg, &end, 10);
            if (*end || ntok < 0 || ntok > 1000000) goto bad;
            break;
        case 't':
            temp = strtod(optarg, &end);
            if (*end || !(temp >= 0 && temp < 1e6)) goto bad;
            break;
        case 'k':
            top_k = (int)strtol(optarg, &end, 10);
            if (*end || top_k < 0) goto bad;
            break;
        case 's':
            seed = strtoull(optarg, &end, 10);
            if (*end || errno) goto bad;
            break;
        case 'i':
            ids = 1;
            break;
        case 'l':
            logits_path = optarg;
            break;
        case 'D':
            device = optarg;
            break;
        case 'T':
            threads = (int)strtol(optarg, &end, 10);
            if (*end || threads < 1) goto bad;
            break;
        case 'S':
            stages = (int)strtol(optarg, &end, 10);
            if (*end || stages < 1 || stages > PATH_STAGES_MAX) goto bad;
            break;
        case 'K':
            skip_list = optarg;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
        continue;
    bad:
        fprintf(stderr, "swarmtrain sample: bad value '%s'\n", optarg);
        return 2;
    }
    if ((!dir) == (!ndb) || optind < argc || !*prompt) {
        fprintf(stderr, "swarmtrain sample: give --model DIR or --db PATH (not both) and a "
                        "non-empty --prompt\n");
        usage(stderr);
        return 2;
    }

    char err[STATUS_ERR_LEN];
    int rc = 1;
    model_t *m = NULL;
    int32_t *tok = NULL, *hist = NULL;
    float *logits = NULL;
    FILE *lf = NULL;
    kern_t *k = kern_new(device, threads, err);
    if (!k) goto fail;
    model_config_t cfg;
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, HF_MODEL_WEIGHTS);
        if (hf_model_read_config(dir, &cfg, err)) goto fail;
        if (stages) cfg.stages = stages;
        if (!(m = model_new(&cfg, k, 0, err)) || hf_model_load(m, path, err)) goto fail;
    } else {
        assemble_info_t info;
        if (!(m = assemble_from_stores(dbs, ndb, k, 1, &info, err))) goto fail;
        cfg = info.cfg;
    }
    if (skip_list) {
        uint64_t mask;
        char list[256];
        if (path_parse_stages(skip_list, cfg.stages, &mask, err) || model_set_skip(m, mask, err))
            goto fail;
        fprintf(stderr, "sample: running %d of %d stages (left out: %s)\n",
                cfg.stages - __builtin_popcountll(mask), cfg.stages,
                path_format(mask, list, sizeof list));
    }
    int T = cfg.seq, V = cfg.vocab;
    size_t plen = strlen(prompt), total = plen + (size_t)ntok;
    tok = calloc((size_t)T, sizeof *tok);
    hist = malloc(total * sizeof *hist);
    logits = malloc((size_t)T * V * sizeof *logits);
    if (!tok || !hist || !logits) {
        status_set(err, STATUS_ENOMEM, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < plen; i++) hist[i] = (unsigned char)prompt[i];
    rng_t r;
    rng_seed(&r, seed);
    size_t len = plen;
    for (int g = 0; g <= ntok; g++) {
        if (g == ntok && !(logits_path && g == 0)) break;
        /* the last T tokens; positions after them are padding the causal mask never lets
         * an earlier position see */
        size_t n = len < (size_t)T ? len : (size_t)T, from = len - n;
        memset(tok, 0, (size_t)T * sizeof *tok);
        for (size_t i = 0; i < n; i++) tok[i] = hist[from + i];
        if (model_logits(m, tok, logits, err)) goto fail;
        if (g == 0 && logits_path) {
            if (!(lf = fopen(logits_path, "wb"))) {
                status_set(err, STATUS_EIO, "%s: cannot create: %s", logits_path, strerror(errno));
                goto fail;
            }
            size_t cnt = n * (size_t)V;
            if (fwrite(logits, sizeof(float), cnt, lf) != cnt || fclose(lf)) {
                lf = NULL;
                status_set(err, STATUS_EIO, "%s: write failed", logits_path);
                goto fail;
            }
            lf = NULL;
        }
        if (g == ntok) break;
        hist[len++] = pick(logits + (n - 1) * (size_t)V, V, temp, top_k, &r, NULL);
    }
    if (ids) {
        for (size_t i = plen; i < len; i++) printf("%s%d", i > plen ? " " : "", hist[i]);
        printf("\n");
    } else {
        for (size_t i = 0; i < len; i++) putchar(hist[i] < 256 ? hist[i] : '?');
        printf("\n");
    }
    rc = 0;
fail:
    if (rc) fprintf(stderr, "swarmtrain sample: %s\n", err);
    if (lf) fclose(lf);
    free(tok);
    free(hist);
    free(logits);
    model_destroy(&m);
    kern_destroy(&k);
    return rc;
}
