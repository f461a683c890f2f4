/* bench_demo.c — `swarmtrain bench demo`: what DeMo's wire settings cost in loss. Trains
 * the same model with AdamW (the exact gradient average, the baseline) and with each DeMo
 * setting, in this process and in this run, and prints per setting the bytes one replica
 * sends per parameter per step (measured: the size of the real stage messages, headers
 * included, over all stages), the validation loss, and its ratio to AdamW's.
 * Default: `tiny`, 4 replicas, 1,000 steps; `--small` adds `small` with 2 replicas at 300
 * steps, AdamW, the sign preset and the preset before rmsprop (slow: 10-25 minutes per run
 * on one core). Training logs
 * go to a file.
 * Not for: tests (it asserts nothing) or choosing settings (that is docs/design-notes.md). */
#include "tools/cmd.h"

#include "common/clock.h"
#include "common/status.h"
#include "compress/demo.h"
#include "model/train.h"
#include "tools/run_opts.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One row of the table: AdamW or a DeMo setting, with the schedule it was tuned with. */
typedef struct {
    const char *name;
    int optimizer; /* train_optimizer_t */
    demo_vfmt_t vfmt;
    int chunk, k;
    demo_imode_t imode;
    int update;   /* DEMO_UPDATE_* */
    float lr;     /* 0: the run default */
    int schedule; /* optim_schedule_t */
    int core;     /* in the default table (else only with --all) */
    int small;    /* also run on `small` with --small */
    int local;    /* DiLoCo-style local steps per exchange (train_options_t.demo_local); 0: none */
    float outer_lr, outer_mom;
    float beta; /* DeMo momentum decay; 0: DEMO_DEFAULT_BETA (the preset's: DEMO_SIGN_BETA) */
} bench_setting_t;

/* AdamW (constant lr: the reference of issue 17; cosine, to compare like with like), then
 * DeMo from the reference setting down to the sign preset (`--demo-values sign`) with the
 * schedule it was tuned with. The rows marked core run by default; --all adds the others
 * (what was tried on the way, docs/design-notes.md). lr 0: the run default (3e-3); the
 * preset rows use the preset's rate and beta (DEMO_SIGN_LR, DEMO_SIGN_BETA: issue 27). */
#define C   OPTIM_SCHEDULE_CONSTANT
#define COS OPTIM_SCHEDULE_COSINE
static const bench_setting_t settings[] = {
    /* name, optimizer, values, chunk, k, indices, update, lr, schedule, core, small,
     * local steps, outer lr, outer momentum, DeMo beta (0: DEMO_DEFAULT_BETA) */
    {"adamw", TRAIN_ADAMW, DEMO_VAL_F32, 0, 0, DEMO_IDX_TOPK, 0, 0, C, 1, 1, 0, 0, 0, 0},
    {"adamw cosine", TRAIN_ADAMW, DEMO_VAL_F32, 0, 0, DEMO_IDX_TOPK, 0, 0, COS, 1, 0, 0, 0, 0, 0},
    {"f32 c64 k32 topk sign-update", TRAIN_DEMO, DEMO_VAL_F32, 64, 32, DEMO_IDX_TOPK,
     DEMO_UPDATE_SIGN, 0, C, 1, 0, 0, 0, 0, 0},
    {"sign c16 k1 topk sign-update", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 1, DEMO_IDX_TOPK,
     DEMO_UPDATE_SIGN, 0, C, 1, 0, 0, 0, 0, 0},
    {"sign c16 k9 shared sign-update", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 9, DEMO_IDX_SHARED,
     DEMO_UPDATE_SIGN, 0, C, 0, 0, 0, 0, 0, 0},
    {"sign c16 k1 topk rms", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 1, DEMO_IDX_TOPK, DEMO_UPDATE_RMS, 0, C,
     0, 0, 0, 0, 0, 0},
    {"sign preset (rmsprop)", TRAIN_DEMO, DEMO_VAL_SIGN, DEMO_SIGN_CHUNK, DEMO_SIGN_K,
     DEMO_SIGN_INDEX, DEMO_SIGN_UPDATE, DEMO_SIGN_LR, C, 0, 0, 0, 0, 0, DEMO_SIGN_BETA},
    {"sign preset (rmsprop) cosine", TRAIN_DEMO, DEMO_VAL_SIGN, DEMO_SIGN_CHUNK, DEMO_SIGN_K,
     DEMO_SIGN_INDEX, DEMO_SIGN_UPDATE, DEMO_SIGN_LR, COS, 1, 1, 0, 0, 0, DEMO_SIGN_BETA},
    /* the preset before issue 27: beta 0.999, the run's rate (3e-3) */
    {"sign preset, beta .999 3e-3 cosine", TRAIN_DEMO, DEMO_VAL_SIGN, DEMO_SIGN_CHUNK, DEMO_SIGN_K,
     DEMO_SIGN_INDEX, DEMO_SIGN_UPDATE, 0, COS, 1, 0, 0, 0, 0, 0},
    {"sign c16 k9 shared rms cosine", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 9, DEMO_IDX_SHARED,
     DEMO_UPDATE_RMS, 0, COS, 1, 1, 0, 0, 0, 0}, /* the preset before rmsprop */
    {"sign c16 k3 shared rms cosine", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 3, DEMO_IDX_SHARED,
     DEMO_UPDATE_RMS, 0, COS, 1, 0, 0, 0, 0, 0},
    /* DiLoCo-style: 8 local AdamW steps, then one exchange of the change (k 80 of 256 per
     * tile: 8 x the bytes of one step at k 9, once per 8 steps) */
    {"local 8, sign c16 k80 shared rms", TRAIN_DEMO, DEMO_VAL_SIGN, 16, 80, DEMO_IDX_SHARED,
     DEMO_UPDATE_RMS, 0, COS, 1, 0, 8, 4, 0, 0},
};
#undef C
#undef COS
#define NSETTINGS ((int)(sizeof settings / sizeof settings[0]))

typedef struct {
    double bytes_per_param; /* 0 for AdamW */
    float val_loss;
    double seconds;
    int ok;
} bench_row_t;

static int bench_one(const bench_setting_t *s, const char *config, int replicas, int steps,
                     int threads, const char *data, FILE *log, bench_row_t *row)
{
    char err[STATUS_ERR_LEN];
    train_options_t o = train_defaults();
    if (config_preset(&o.cfg, config, err)) {
        fprintf(stderr, "bench demo: %s\n", err);
        return -1;
    }
    o.steps = steps;
    o.opt.total_steps = steps;
    o.replicas = replicas;
    o.threads = threads;
    o.data_path = data;
    o.log = log;
    o.log_every = 100;
    o.optimizer = s->optimizer;
    o.opt.schedule = s->schedule;
    if (s->lr > 0) o.opt.lr = s->lr;
    if (s->optimizer == TRAIN_DEMO) {
        o.demo.vfmt = s->vfmt;
        o.demo.chunk = s->chunk;
        o.demo.k = s->k;
        o.demo.imode = s->imode;
        o.demo.update = s->update;
        if (s->beta > 0) o.demo.beta = s->beta;
        o.demo_local = s->local;
        if (s->local) {
            o.outer_lr = s->outer_lr;
            o.outer_mom = s->outer_mom;
        }
    }
    fprintf(log, "=== %s: %s, %d replicas, %d steps\n", s->name, config, replicas, steps);
    train_result_t r;
    double t0 = clock_now();
    if (train_run(&o, &r, err)) {
        fprintf(stderr, "bench demo: %s: %s\n", s->name, err);
        fprintf(log, "failed: %s\n", err);
        row->ok = 0;
        return 0;
    }
    row->seconds = clock_now() - t0;
    row->ok = 1;
    row->val_loss = r.val_loss;
    row->bytes_per_param = s->optimizer == TRAIN_DEMO ? r.demo_bytes_per_param : 0;
    return 0;
}

/* "+1.2%" of x over base, or "-" without a base. */
static void ratio_text(char *out, size_t n, const bench_row_t *r, float base)
{
    if (r->ok && base > 0)
        snprintf(out, n, "%+.1f%%", 100.0 * (r->val_loss / base - 1.0));
    else
        snprintf(out, n, "-");
}

/* The table: bytes, val_loss, the ratio to AdamW with a constant lr (the reference) and to
 * AdamW with the row's own schedule (like with like), when those rows ran. */
static void print_table(const char *title, const bench_setting_t *const *set,
                        const bench_row_t *rows, int n)
{
    float base[2] = {0, 0}; /* by schedule: constant, cosine */
    for (int i = 0; i < n; i++)
        if (set[i]->optimizer == TRAIN_ADAMW && rows[i].ok)
            base[set[i]->schedule == OPTIM_SCHEDULE_COSINE] = rows[i].val_loss;
    printf("\n%s\n", title);
    printf("| %-34s | %12s | %8s | %9s | %15s | %7s |\n", "setting", "B/param/step", "val_loss",
           "vs AdamW", "vs AdamW, same", "seconds");
    printf("| %-34s | %12s | %8s | %9s | %15s | %7s |\n", "", "", "", "(const)", "schedule", "");
    printf("|%.36s|%.14s|%.10s|%.11s|%.17s|%.9s|\n", "------------------------------------",
           "--------------", "----------", "-----------", "-----------------", "---------");
    for (int i = 0; i < n; i++) {
        char b[32], v[32], r1[32], r2[32];
        if (set[i]->optimizer == TRAIN_DEMO)
            snprintf(b, sizeof b, "%.5f", rows[i].bytes_per_param);
        else
            snprintf(b, sizeof b, "(4, dense)");
        snprintf(v, sizeof v, rows[i].ok ? "%.4f" : "failed", (double)rows[i].val_loss);
        ratio_text(r1, sizeof r1, &rows[i], base[0]);
        ratio_text(r2, sizeof r2, &rows[i], base[set[i]->schedule == OPTIM_SCHEDULE_COSINE]);
        printf("| %-34s | %12s | %8s | %9s | %15s | %7.0f |\n", set[i]->name, b, v, r1, r2,
               rows[i].seconds);
    }
    fflush(stdout);
}

int bench_demo(int argc, char **argv)
{
    static const struct option opts[] = {{"steps", required_argument, NULL, 's'},
                                         {"replicas", required_argument, NULL, 'r'},
                                         {"config", required_argument, NULL, 'c'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"data", required_argument, NULL, 'd'},
                                         {"log", required_argument, NULL, 'l'},
                                         {"only", required_argument, NULL, 'o'},
                                         {"all", no_argument, NULL, 'a'},
                                         {"small", no_argument, NULL, 'S'},
                                         {"small-only", no_argument, NULL, 'O'},
                                         {"small-steps", required_argument, NULL, 'n'},
                                         {"small-replicas", required_argument, NULL, 'R'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    int steps = 1000, replicas = 4, threads = 1, small = 0, small_only = 0, all = 0;
    int small_steps = 300, small_replicas = 2, c;
    const char *config = "tiny", *data = NULL, *log_path = "bench-demo.log", *only = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case 's':
            bad = run_opts_int("--steps", optarg, 1, &steps);
            break;
        case 'r':
            bad = run_opts_int("--replicas", optarg, 1, &replicas);
            break;
        case 'c':
            config = optarg;
            break;
        case 't':
            bad = run_opts_int("--threads", optarg, 1, &threads);
            break;
        case 'd':
            data = optarg;
            break;
        case 'l':
            log_path = optarg;
            break;
        case 'o':
            only = optarg;
            break;
        case 'S':
            small = 1;
            break;
        case 'a':
            all = 1;
            break;
        case 'O':
            small = small_only = 1;
            break;
        case 'n':
            bad = run_opts_int("--small-steps", optarg, 1, &small_steps);
            break;
        case 'R':
            bad = run_opts_int("--small-replicas", optarg, 1, &small_replicas);
            break;
        case 'h':
            printf("usage: swarmtrain bench demo [options]\n\n"
                   "Trains AdamW and each DeMo setting on the same data in this run and prints\n"
                   "bytes/param/step (measured from the stage messages, headers included),\n"
                   "val_loss and the ratio to AdamW (constant lr, the run defaults).\n\n"
                   "  --config NAME      model (default tiny)\n"
                   "  --replicas R       replicas (default 4)\n"
                   "  --steps N          steps (default 1000)\n"
                   "  --all              also the settings tried on the way (11 rows, not 8)\n"
                   "  --only TEXT        only the settings whose name contains TEXT (and adamw)\n"
                   "  --small            then also `small`, AdamW and the rows marked for it\n"
                   "  --small-only       only that\n"
                   "  --small-steps N    (default 300)   --small-replicas R (default 2)\n"
                   "  --threads N        threads per run (default 1)\n"
                   "  --data FILE        corpus (default: the KJV cache)\n"
                   "  --log FILE         training logs (default bench-demo.log)\n");
            return 0;
        default:
            return 2;
        }
        if (bad) return 2;
    }
    FILE *log = fopen(log_path, "w");
    if (!log) {
        perror(log_path);
        return 1;
    }
    const bench_setting_t *set[NSETTINGS];
    bench_row_t rows[NSETTINGS];
    int n = 0, rc = 0;
    if (!small_only) {
        for (int i = 0; i < NSETTINGS; i++)
            if ((all || settings[i].core) &&
                (!only || !strcmp(settings[i].name, "adamw") || strstr(settings[i].name, only)))
                set[n++] = &settings[i];
        printf("bench demo: %s, %d replicas, %d steps, %d settings (logs in %s)\n", config,
               replicas, steps, n, log_path);
        for (int i = 0; i < n && !rc; i++) {
            memset(&rows[i], 0, sizeof rows[i]);
            rc = bench_one(set[i], config, replicas, steps, threads, data, log, &rows[i]);
            printf("  %-34s val_loss %.4f  %.0f s\n", set[i]->name, (double)rows[i].val_loss,
                   rows[i].seconds);
            fflush(stdout);
        }
        if (!rc) {
            char title[128];
            snprintf(title, sizeof title, "%s, %d replicas, %d steps:", config, replicas, steps);
            print_table(title, set, rows, n);
        }
    }
    if (small && !rc) {
        n = 0;
        for (int i = 0; i < NSETTINGS; i++)
            if (settings[i].small) set[n++] = &settings[i];
        printf("\nbench demo: small, %d replicas, %d steps, %d settings\n", small_replicas,
               small_steps, n);
        for (int i = 0; i < n && !rc; i++) {
            memset(&rows[i], 0, sizeof rows[i]);
            rc = bench_one(set[i], "small", small_replicas, small_steps, threads, data, log,
                           &rows[i]);
            printf("  %-34s val_loss %.4f  %.0f s\n", set[i]->name, (double)rows[i].val_loss,
                   rows[i].seconds);
            fflush(stdout);
        }
        if (!rc) {
            char title[128];
            snprintf(title, sizeof title, "small, %d replicas, %d steps:", small_replicas,
                     small_steps);
            print_table(title, set, rows, n);
        }
    }
    fclose(log);
    return rc ? 1 : 0;
}
