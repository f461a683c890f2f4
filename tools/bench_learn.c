/* bench_learn.c — `swarmtrain bench learn`: what the swarm's survival and wire-saving
 * mechanisms cost in learning, all at once and one at a time (issue 27). In one command it
 * runs, on the same tokens: the single-process AdamW baseline (`swarmtrain train`, the
 * exact gradient average over the same replicas; `adamw-constant`: at a constant lr, issue
 * 17's reference), sign DeMo in one process (`demo-train`: the optimizer's own cost), and a
 * local swarm (`swarmtrain local`) with every mechanism on: sign DeMo between a pool's
 * replicas, an activation codec, SkipPipe skipping, CheckFree+ swaps, churn (peers
 * SIGKILLed from outside and replaced) and a whole stage SIGKILLed and rebuilt; then, with
 * --ablations, the swarm with DeMo alone and with each mechanism alone on top of it, so
 * that the total cost is explained, and with --leave-one-out the full swarm without each
 * mechanism in turn: its cost among the others, where they act on one another.
 *
 * What it reads: the runs' own records, not their log wording. Validation losses during a
 * run are the "val_loss" events in the stores (train --db; every peer's --db); the final
 * validation loss of every run is measured here, the same way for all: the model is
 * assembled from the stores' last checkpoints (model/assemble.h) and run on the same
 * held-out batches in f32 (no codec, no skipping). Kills, joins and rebuilt stages are
 * counted from the stores (a peer store without a "left" event was killed; "recovered_stage"
 * events). Only the swarm's wire bytes by kind come from `local`'s summary line (no store
 * holds them; the peers SIGKILLed take their counts with them, so they are a lower bound).
 * tokens/s and CPU seconds are those of the whole command (start-up and validation
 * included), the CPU seconds from getrusage(RUSAGE_CHILDREN).
 *
 * Output: a table, a line with the word `ratio` (the full swarm's final validation loss over
 * AdamW's; with --seeds, the mean and the spread), the curves of both in one SVG (--svg),
 * and with --json FILE the same numbers as JSON (tests read that, never the table).
 * Not for: tests of the mechanisms (tests/) or tuning them (docs/design-notes.md). */
#include "tools/cmd.h"

#include "common/clock.h"
#include "common/status.h"
#include "kernels/kernels.h"
#include "model/assemble.h"
#include "model/config.h"
#include "model/data.h"
#include "model/model.h"
#include "store/store.h"
#include "swarm/transport.h"
#include "tools/bench_cost.h"
#include "tools/json.h"
#include "tools/numbers.h"
#include "tools/plot.h"
#include "tools/run_opts.h"

#include "st_version.h" /* the build a run was made by, in its done.txt */

#define LEARN_BUILD ST_VERSION " " ST_GIT_COMMIT /* swarmtrain --version's words */

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define LEARN_MAX_ARGS  160
#define LEARN_MAX_PTS   256 /* validation points per run */
#define LEARN_MAX_SEEDS 16
#define LEARN_MAX_EV    20000

/* The mechanisms, each a bit: the full swarm has them all, an ablation row one. */
enum {
    MECH_CODEC = 1 << 0,
    MECH_SKIP = 1 << 1,
    MECH_SWAP = 1 << 2,
    MECH_CHURN = 1 << 3,
    MECH_STAGE = 1 << 4,
    MECH_ALL = (1 << 5) - 1
};

/* One row of the table: the baseline, the full swarm, or the swarm with some mechanisms. */
typedef struct {
    const char *name;
    int swarm; /* 0: train (AdamW), 1: local */
    int mechs; /* MECH_* on (swarm only) */
    int ablation;
    const char *schedule; /* train rows: the lr schedule; NULL: --baseline-schedule */
    int demo;             /* train rows: sign DeMo between the replicas, the swarm's stages */
    int without;          /* the full swarm without one mechanism (--leave-one-out) */
} learn_row_t;

static const learn_row_t learn_rows[] = {
    {"adamw", 0, 0, 0, NULL, 0, 0},
    {"swarm-full", 1, MECH_ALL, 0, NULL, 0, 0},
    {"swarm-demo", 1, 0, 1, NULL, 0, 0},
    {"swarm+codec", 1, MECH_CODEC, 1, NULL, 0, 0},
    {"swarm+skip", 1, MECH_SKIP, 1, NULL, 0, 0},
    {"swarm+swap", 1, MECH_SWAP, 1, NULL, 0, 0},
    {"swarm+churn", 1, MECH_CHURN, 1, NULL, 0, 0},
    {"swarm+stage-lost", 1, MECH_STAGE, 1, NULL, 0, 0},
    /* each mechanism's cost among the others: the full swarm without it (--leave-one-out) */
    {"full-no-codec", 1, MECH_ALL & ~MECH_CODEC, 0, NULL, 0, 1},
    {"full-no-skip", 1, MECH_ALL & ~MECH_SKIP, 0, NULL, 0, 1},
    {"full-no-swap", 1, MECH_ALL & ~MECH_SWAP, 0, NULL, 0, 1},
    {"full-no-churn", 1, MECH_ALL & ~MECH_CHURN, 0, NULL, 0, 1},
    {"full-no-stage-lost", 1, MECH_ALL & ~MECH_STAGE, 0, NULL, 0, 1},
    /* the optimizer's own cost, apart from the swarm's: sign DeMo in one process, the
     * swarm's stages and replicas (its schedule: the preset's cosine) */
    {"demo-train", 0, 0, 0, NULL, 1, 0},
    /* issue 17's reference: AdamW at a constant lr (the sign preset runs cosine); last */
    {"adamw-constant", 0, 0, 0, "constant", 0, 0},
};
#define LEARN_NROWS ((int)(sizeof learn_rows / sizeof learn_rows[0]))

/* The mechanism a one-mechanism row adds, or a row without one leaves out: "codec", ...
 * (by its bit), its cost parts' name (bench_cost.h). */
static const char *mech_name(const learn_row_t *w)
{
    static const char *const name[] = {"codec", "skip", "swap", "churn", "stage-lost"};
    return name[__builtin_ctz(w->without ? MECH_ALL & ~w->mechs : w->mechs)];
}

/* When a row runs: 0 with the ratio's rows (AdamW, the full swarm), 1 with the rows that
 * explain it (DeMo in one process, the one-mechanism rows, the full swarm without one), 2
 * last. */
static int row_group(const learn_row_t *w)
{
    if (w->schedule) return 2;
    return w->ablation || w->demo || w->without ? 1 : 0;
}

/* What one run gave. */
typedef struct {
    int ran, rc;
    int resumed;    /* read from an earlier command's run (--resume), not run again */
    int measured;   /* resumed: its marker holds the measurement, the stores are not read */
    char build[64]; /* the build that ran it (--version's words; resumed: its marker's) */
    double wall_s, cpu_s;
    double val_final; /* measured here on the assembled model; NAN: none */
    int64_t final_step;
    int npts;
    double pt_step[LEARN_MAX_PTS], pt_loss[LEARN_MAX_PTS]; /* steps done, val loss */
    double pt_tokens[LEARN_MAX_PTS];
    /* swarm only */
    double wire_per_token[WIRE_KINDS], wire_total_per_token; /* from local's summary */
    int stores, kills, joins, rebuilt, moves;
    char dir[512];
    char err[800]; /* why a number is missing */
} learn_result_t;

typedef struct {
    const char *config, *data, *codec, *churn, *svg, *json, *baseline_schedule, *only;
    const char *churn_at; /* local --churn-at N:S (the default), unless --churn's rate */
    const char *demo_lr;  /* --lr of the DeMo runs (swarm and demo-train); NULL: the run's */
    int outer;            /* --outer H: the DeMo runs exchange once every H steps; 0: every step */
    const char *outer_k;  /* --outer-k: their DeMo k (coefficients of 256); NULL: the preset's */
    float demo_lr_run;    /* the rate the DeMo runs train at (--demo-lr, else as they parse) */
    int demo_k_run, demo_chunk_run; /* their DeMo k and chunk, as they parse */
    int steps, stages, peers, replicas, val_every, seeds, ablations, churn_kills;
    int kill_stage, val_batches, threads;
    /* --split K: each replica's batch of the config in K microbatches (the runs' --batch
     * B/K --accum K; val_batches counts microbatches of that size: K times the option's) */
    int split, split_batch;
    int resume;        /* --resume: a run whose directory says it finished is read, not rerun */
    int report;        /* --report: --resume, and the runs that did not finish are not run */
    int no_constant;   /* --no-constant: without issue 17's reference (AdamW at a constant lr) */
    int leave_one_out; /* --leave-one-out: also the full swarm without each mechanism */
    long long seed;
    double skip, skip_until, swap;
    char dir[400];
    int nextra;
    char **extra; /* words after "--": every run */
    /* from the run words, parsed as train/local would */
    train_options_t run;
    double tokens_per_step;
    size_t params;
} learn_opts_t;

/* ---- running a child ------------------------------------------------------------------ */

/* Runs `swarmtrain args...` with stdout and stderr into out_path; waits; fills wall and CPU
 * seconds (the child and every process it waited for: a local swarm's peers). Returns the
 * exit status (128 + signal when killed), or -1 when it could not start. */
static int learn_spawn(char **args, const char *out_path, double *wall_s, double *cpu_s)
{
    double t0 = clock_now();
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        /* the bench stopped (a closed session, a preempted machine's SIGTERM, SIGKILL)
         * takes its run along: one left training would race the run --resume starts over
         * in the same directory (local stops its peers on SIGTERM) */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127);
        int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
            close(fd);
        }
        execv("/proc/self/exe", args);
        _exit(127);
    }
    int st = 0;
    struct rusage r0, r1;
    getrusage(RUSAGE_CHILDREN, &r0); /* runs go one at a time: the difference is this one's */
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    *wall_s = clock_now() - t0;
    getrusage(RUSAGE_CHILDREN, &r1);
    *cpu_s = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec) +
             (r1.ru_utime.tv_usec - r0.ru_utime.tv_usec) / 1e6 +
             (double)(r1.ru_stime.tv_sec - r0.ru_stime.tv_sec) +
             (r1.ru_stime.tv_usec - r0.ru_stime.tv_usec) / 1e6;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

/* A growing argument list of strings this file owns. */
typedef struct {
    char *a[LEARN_MAX_ARGS + 1];
    int n;
} learn_args_t;

static void args_add(learn_args_t *v, const char *s)
{
    if (v->n < LEARN_MAX_ARGS) v->a[v->n++] = strdup(s);
    v->a[v->n] = NULL;
}

static void args_addf(learn_args_t *v, const char *fmt, double x)
{
    char b[64];
    snprintf(b, sizeof b, fmt, x);
    args_add(v, b);
}

static void args_free(learn_args_t *v)
{
    for (int i = 0; i < v->n; i++) free(v->a[i]);
    v->n = 0;
}

/* The words every run shares: model, steps, replicas, seed, validation. */
static void args_common(learn_args_t *v, const learn_opts_t *lo, long long seed)
{
    args_add(v, "--config"), args_add(v, lo->config);
    args_add(v, "--steps"), args_addf(v, "%.0f", lo->steps);
    args_add(v, "--replicas"), args_addf(v, "%.0f", lo->replicas);
    args_add(v, "--seed"), args_addf(v, "%.0f", (double)seed);
    args_add(v, "--val-batches"), args_addf(v, "%.0f", lo->val_batches);
    if (lo->split > 1) {
        args_add(v, "--batch"), args_addf(v, "%.0f", lo->split_batch);
        args_add(v, "--accum"), args_addf(v, "%.0f", lo->split);
    }
    if (lo->val_every > 0) args_add(v, "--val-every"), args_addf(v, "%.0f", lo->val_every);
    if (lo->data) args_add(v, "--data"), args_add(v, lo->data);
    for (int i = 0; i < lo->nextra; i++) args_add(v, lo->extra[i]);
}

/* Says why a number of r is missing (formatted apart: the arguments may be r's own). */
static void set_err(learn_result_t *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(learn_result_t *r, const char *fmt, ...)
{
    char msg[sizeof r->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    memcpy(r->err, msg, sizeof msg);
}

/* ---- reading the stores ---------------------------------------------------------------- */

/* Adds the "val_loss" events of the store at path to r (steps done: train records the
 * 0-based step, so +1 there), and counts what the swarm's stores say. Returns 1 when the
 * store holds a checkpoint (a peer killed before its first holds none), else 0. */
static int read_store(const char *path, int is_train, learn_result_t *r, store_event_t *ev)
{
    char err[STATUS_ERR_LEN];
    store_t *s = store_open(path, err);
    store_ckpt_info_t ck[1];
    int nev = 0, nck = 0;
    if (!s) return 0;
    if (store_event_last(s, LEARN_MAX_EV, ev, &nev, err)) nev = 0;
    if (store_ckpt_list(s, 0, ck, 1, &nck, err)) nck = 0;
    store_close(&s);
    int left = 0;
    for (int i = 0; i < nev; i++) {
        long long step;
        double v;
        if (!strcmp(ev[i].kind, "left")) left = 1;
        if (!strcmp(ev[i].kind, "recovered_stage")) r->rebuilt++;
        if (!strcmp(ev[i].kind, "moved")) r->moves++;
        if (strcmp(ev[i].kind, "val_loss") || !json_val_loss_detail(ev[i].detail, &step, &v))
            continue;
        if (is_train) step++;
        int dup = 0;
        for (int k = 0; k < r->npts && !dup; k++) dup = r->pt_step[k] == (double)step;
        if (!dup && r->npts < LEARN_MAX_PTS) {
            r->pt_step[r->npts] = (double)step;
            r->pt_loss[r->npts++] = v;
        }
    }
    r->stores++;
    if (!is_train && !left) r->kills++;
    return nck > 0;
}

/* The final validation loss of the model in the stores at paths[0..n), run here on the
 * held-out batches every run validates on. NAN with r->err on failure. */
static double eval_stores(const learn_opts_t *lo, const char *const *paths, int n,
                          learn_result_t *r)
{
    char err[STATUS_ERR_LEN] = "";
    const model_config_t *c = &lo->run.cfg;
    kern_t *k = kern_new("cpu", lo->threads, err);
    model_t *m = NULL;
    data_t *d = NULL;
    int32_t *tok = NULL, *tgt = NULL;
    double sum = 0, val = NAN;
    assemble_info_t info;
    if (!k) goto done;
    if (!(m = assemble_from_stores(paths, n, k, c->batch, &info, err))) goto done;
    r->final_step = info.step;
    const char *path = lo->run.data_path ? lo->run.data_path : data_default_path();
    if (!(d = data_open(path, c->seq, lo->run.val_frac, err))) goto done;
    size_t bt = (size_t)c->batch * (size_t)c->seq;
    tok = malloc(bt * sizeof *tok), tgt = malloc(bt * sizeof *tgt);
    if (!tok || !tgt) {
        snprintf(err, sizeof err, "out of memory");
        goto done;
    }
    for (int i = 0; i < lo->val_batches; i++) {
        float loss;
        data_val_batch(d, i, lo->val_batches, c->batch, tok, tgt);
        if (model_eval_micro(m, tok, tgt, &loss, err)) goto done;
        sum += loss;
    }
    val = sum / lo->val_batches;
done:
    if (!isfinite(val)) set_err(r, "final validation: %s", err);
    free(tok);
    free(tgt);
    data_destroy(&d);
    model_destroy(&m);
    kern_destroy(&k);
    return val;
}

/* local's summary line of wire bytes per token by kind (its only record of them). */
static void read_local_wire(const char *out_path, learn_result_t *r)
{
    FILE *f = fopen(out_path, "r");
    char line[2048];
    static const char head[] = "local: wire bytes per token";
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, head, sizeof head - 1)) continue;
        for (int k = 0; k < WIRE_KINDS; k++) {
            char key[40];
            snprintf(key, sizeof key, " %s ", transport_wire_name(k));
            const char *p = strstr(line, key);
            if (p) r->wire_per_token[k] = atof(p + strlen(key));
        }
        const char *p = strstr(line, " total ");
        if (p) r->wire_total_per_token = atof(p + 7);
    }
    if (f) fclose(f);
}

static int cmp_pts(const void *a, const void *b)
{
    const double *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* Sorts r's points by step (kept as pairs) and fills their token counts. */
static void sort_points(const learn_opts_t *lo, learn_result_t *r)
{
    double tmp[LEARN_MAX_PTS][2];
    for (int i = 0; i < r->npts; i++) tmp[i][0] = r->pt_step[i], tmp[i][1] = r->pt_loss[i];
    qsort(tmp, (size_t)r->npts, sizeof tmp[0], cmp_pts);
    for (int i = 0; i < r->npts; i++) {
        r->pt_step[i] = tmp[i][0], r->pt_loss[i] = tmp[i][1];
        r->pt_tokens[i] = tmp[i][0] * lo->tokens_per_step;
    }
}

/* ---- one run ----------------------------------------------------------------------------- */

/* The words every DeMo run (demo-train and the swarm's) shares: sign DeMo, and with --outer
 * its local steps (the sign preset's with them: SparseLoCo's shape, the linear outer
 * update, compress/demo.h) at --outer-k. */
static void args_demo(learn_args_t *v, const learn_opts_t *lo)
{
    args_add(v, "--optimizer"), args_add(v, "demo");
    args_add(v, "--demo-values"), args_add(v, "sign");
    if (lo->outer > 0) {
        args_add(v, "--demo-local"), args_addf(v, "%.0f", lo->outer);
        if (lo->outer_k) args_add(v, "--demo-k"), args_add(v, lo->outer_k);
    }
}

/* ---- a run's directory: started clean, marked when done (--resume) ---------------------- */

/* Removes the files an earlier command left in a run's directory (the directory is the
 * bench's own): a local swarm's peers would otherwise resume from the old stores. */
static void clear_run_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1024];
    while ((e = readdir(d))) {
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (!lstat(path, &st) && S_ISREG(st.st_mode)) unlink(path);
    }
    closedir(d);
}

/* The run's words on one line (the marker keeps them: a resumed run must be the same run),
 * the bench's --dir in them written "<dir>": a campaign's markers, kept apart from its
 * stores, resume in any directory (docs/bench/). */
static void args_line(const learn_args_t *v, const char *dir, char *out, size_t n)
{
    size_t k = 0, dl = strlen(dir);
    out[0] = 0;
    for (int i = 0; i < v->n && k + 1 < n; i++) {
        const char *a = v->a[i];
        int in_dir = dl && !strncmp(a, dir, dl) && a[dl] == '/';
        k += (size_t)snprintf(out + k, n - k, "%s%s%s", i ? " " : "", in_dir ? "<dir>" : "",
                              in_dir ? a + dl : a);
    }
}

/* The marker of a run that ended by itself, whatever its exit status (a failed run is a
 * result too; one killed by a signal is not, and runs again): "done.txt" in its directory,
 * written last (renamed into place), holding its words, the build that ran it, and what
 * the bench measured of it, since the wall and CPU seconds are nowhere else. Once the
 * stores are measured it is written again with the measurement ("measured" and what
 * follows): the marker alone then stands for the run, its stores no longer needed. */
static void mark_done(const char *dir, const char *line, const learn_result_t *r, int measured)
{
    char tmp[640], path[640];
    snprintf(tmp, sizeof tmp, "%s/done.txt.tmp", dir);
    snprintf(path, sizeof path, "%s/done.txt", dir);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "rc %d\nwall_s %.3f\ncpu_s %.3f\nbuild %s\nargs %s\n", r->rc, r->wall_s, r->cpu_s,
            r->build, line);
    if (measured) {
        fprintf(f, "measured %d\nval_final %.9g\nfinal_step %lld\n", r->npts, r->val_final,
                (long long)r->final_step);
        fprintf(f, "stores %d\nkills %d\njoins %d\nrebuilt %d\nmoves %d\n", r->stores, r->kills,
                r->joins, r->rebuilt, r->moves);
        for (int k = 0; k < WIRE_KINDS; k++) fprintf(f, "wire %d %.9g\n", k, r->wire_per_token[k]);
        fprintf(f, "wire_total %.9g\n", r->wire_total_per_token);
        for (int i = 0; i < r->npts; i++)
            fprintf(f, "point %.0f %.9g\n", r->pt_step[i], r->pt_loss[i]);
        if (r->err[0]) fprintf(f, "err %s\n", r->err);
    }
    if (fclose(f) == 0) rename(tmp, path);
}

/* Reads a run's marker. Returns 1 when there is one for these words (rc, wall and CPU
 * seconds, build filled; with its measurement, r->measured and the numbers too), 0 when
 * there is none, -1 when there is one for other words, -2 when it does not parse. */
static int read_done(const char *dir, const char *line, learn_result_t *r)
{
    char path[640];
    snprintf(path, sizeof path, "%s/done.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    static char buf[LEARN_MAX_ARGS * 64];
    int got = 0, same = 0, bad = 0, npts = -1;
    snprintf(r->build, sizeof r->build, "unknown"); /* a marker of before the line */
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = 0;
        long long ll;
        int k;
        double x, y;
        if (sscanf(buf, "rc %d", &r->rc) == 1 || sscanf(buf, "wall_s %lf", &r->wall_s) == 1 ||
            sscanf(buf, "cpu_s %lf", &r->cpu_s) == 1)
            got++;
        else if (!strncmp(buf, "build ", 6))
            snprintf(r->build, sizeof r->build, "%.63s", buf + 6);
        else if (!strncmp(buf, "args ", 5))
            same = !strcmp(buf + 5, line);
        else if (sscanf(buf, "measured %d", &npts) == 1)
            bad |= npts < 0 || npts > LEARN_MAX_PTS;
        else if (sscanf(buf, "val_final %lf", &r->val_final) == 1)
            ;
        else if (sscanf(buf, "final_step %lld", &ll) == 1)
            r->final_step = ll;
        else if (sscanf(buf, "stores %d", &r->stores) == 1 ||
                 sscanf(buf, "kills %d", &r->kills) == 1 ||
                 sscanf(buf, "joins %d", &r->joins) == 1 ||
                 sscanf(buf, "rebuilt %d", &r->rebuilt) == 1 ||
                 sscanf(buf, "moves %d", &r->moves) == 1)
            ;
        else if (sscanf(buf, "wire %d %lf", &k, &x) == 2 && k >= 0 && k < WIRE_KINDS)
            r->wire_per_token[k] = x;
        else if (sscanf(buf, "wire_total %lf", &x) == 1)
            r->wire_total_per_token = x;
        else if (sscanf(buf, "point %lf %lf", &x, &y) == 2 && r->npts < LEARN_MAX_PTS)
            r->pt_step[r->npts] = x, r->pt_loss[r->npts++] = y;
        else if (!strncmp(buf, "err ", 4))
            snprintf(r->err, sizeof r->err, "%.799s", buf + 4);
        else
            bad = 1;
    }
    fclose(f);
    if (npts >= 0 && r->npts != npts) bad = 1; /* cut short */
    r->measured = npts >= 0 && !bad;
    if (got != 3 || bad) return -2;
    return same ? 1 : -1;
}

/* Measures a run from its stores: train's one, or every peer's (validation points, kills,
 * joins, rebuilt stages, moves, the final validation loss of the assembled model), and its
 * wire from local's output. */
static void measure_run(const learn_opts_t *lo, const learn_row_t *row, learn_result_t *r,
                        const char *db, const char *out, store_event_t *ev)
{
    glob_t g;
    memset(&g, 0, sizeof g);
    if (!row->swarm) {
        read_store(db, 1, r, ev);
        const char *p = db;
        r->val_final = eval_stores(lo, &p, 1, r);
    } else {
        char pat[640];
        snprintf(pat, sizeof pat, "%s/peer*.db", r->dir);
        if (glob(pat, 0, NULL, &g) == 0) {
            int nck = 0; /* the stores with a checkpoint, first in gl_pathv */
            for (size_t i = 0; i < g.gl_pathc; i++) {
                int idx = -1;
                const char *b = strrchr(g.gl_pathv[i], '/');
                if (b && sscanf(b, "/peer%d.db", &idx) == 1 && idx >= lo->peers) r->joins++;
                if (read_store(g.gl_pathv[i], 0, r, ev)) {
                    char *t = g.gl_pathv[nck];
                    g.gl_pathv[nck++] = g.gl_pathv[i], g.gl_pathv[i] = t;
                }
            }
            r->val_final = eval_stores(lo, (const char *const *)g.gl_pathv, nck, r);
        } else {
            set_err(r, "no peer store in %s", r->dir);
        }
        read_local_wire(out, r);
    }
    globfree(&g);
    /* the final point of the curve: the model at its last step, measured here */
    if (isfinite(r->val_final) && r->npts < LEARN_MAX_PTS) {
        int k = 0;
        while (k < r->npts && r->pt_step[k] != (double)r->final_step) k++;
        if (k == r->npts) r->npts++;
        r->pt_step[k] = (double)r->final_step, r->pt_loss[k] = r->val_final;
    }
}

static int learn_run(const learn_opts_t *lo, const learn_row_t *row, int seed_i, learn_result_t *r,
                     store_event_t *ev)
{
    learn_args_t v = {.n = 0};
    long long seed = lo->seed + seed_i;
    char out[640], db[640];
    memset(r, 0, sizeof *r);
    r->val_final = NAN;
    snprintf(r->dir, sizeof r->dir, "%s/%s-s%lld", lo->dir, row->name, seed);
    if (!lo->report && mkdir(r->dir, 0755) && errno != EEXIST) {
        set_err(r, "cannot make %s: %s", r->dir, strerror(errno));
        return -1;
    }
    snprintf(out, sizeof out, "%s/out.txt", r->dir);
    args_add(&v, "swarmtrain");
    if (!row->swarm) {
        args_add(&v, "train");
        args_common(&v, lo, seed);
        if (row->demo) {
            args_demo(&v, lo);
            args_add(&v, "--stages"), args_addf(&v, "%.0f", lo->stages);
            if (lo->demo_lr) args_add(&v, "--lr"), args_add(&v, lo->demo_lr);
        } else {
            args_add(&v, "--optimizer"), args_add(&v, "adamw");
            args_add(&v, "--schedule");
            args_add(&v, row->schedule ? row->schedule : lo->baseline_schedule);
        }
        snprintf(db, sizeof db, "%s/train.db", r->dir);
        args_add(&v, "--db"), args_add(&v, db);
        args_add(&v, "--checkpoint-every"), args_addf(&v, "%.0f", lo->steps);
        args_add(&v, "--log-every"), args_add(&v, "100");
        if (lo->threads > 0) args_add(&v, "--threads"), args_addf(&v, "%.0f", lo->threads);
    } else {
        args_add(&v, "local");
        args_add(&v, "--stages"), args_addf(&v, "%.0f", lo->stages);
        args_add(&v, "--peers"), args_addf(&v, "%.0f", lo->peers);
        args_demo(&v, lo);
        args_add(&v, "--codec"), args_add(&v, row->mechs & MECH_CODEC ? lo->codec : "f32");
        if (row->mechs & MECH_SKIP) {
            args_add(&v, "--skip"), args_addf(&v, "%g", lo->skip);
            if (lo->skip_until < 1)
                args_add(&v, "--skip-until"), args_addf(&v, "%g", lo->skip_until);
        }
        if (row->mechs & MECH_SWAP) args_add(&v, "--swap"), args_addf(&v, "%g", lo->swap);
        if (row->mechs & MECH_CHURN) {
            if (lo->churn) {
                args_add(&v, "--churn"), args_add(&v, lo->churn);
                if (lo->churn_kills > 0)
                    args_add(&v, "--churn-kills"), args_addf(&v, "%.0f", lo->churn_kills);
            } else {
                args_add(&v, "--churn-at"), args_add(&v, lo->churn_at);
            }
        }
        if ((row->mechs & MECH_STAGE) && lo->kill_stage >= 0) {
            char ks[32];
            snprintf(ks, sizeof ks, "%d:random", lo->kill_stage);
            args_add(&v, "--kill-stage"), args_add(&v, ks);
        }
        args_add(&v, "--fault-seed"), args_addf(&v, "%.0f", (double)(1000 + seed));
        args_add(&v, "--quiet");
        args_add(&v, "--dir"), args_add(&v, r->dir);
        args_common(&v, lo, seed);
        if (lo->demo_lr) args_add(&v, "--lr"), args_add(&v, lo->demo_lr); /* later words win */
    }
    static char line[LEARN_MAX_ARGS * 64];
    args_line(&v, lo->dir, line, sizeof line);
    printf("  %-18s seed %lld ...", row->name, seed);
    fflush(stdout);
    int done = lo->resume ? read_done(r->dir, line, r) : 0;
    if (!done) snprintf(r->build, sizeof r->build, "%s", LEARN_BUILD);
    if (done < 0) {
        args_free(&v);
        if (done == -1)
            set_err(r,
                    "%s/done.txt is of a run with other options: --resume takes the same "
                    "options (or use another --dir)",
                    r->dir);
        else
            set_err(r, "%s/done.txt does not parse: remove it to run the run again", r->dir);
        printf(" not run\n");
        return -2;
    }
    if (!done && lo->report) { /* left out of the report: not run, nothing made */
        args_free(&v);
        printf(" not run (--report)\n");
        return 0;
    }
    if (done) {
        r->resumed = 1;
    } else {
        clear_run_dir(r->dir);
        r->rc = learn_spawn(v.a, out, &r->wall_s, &r->cpu_s);
    }
    args_free(&v);
    r->ran = 1;
    if (r->rc < 0) {
        set_err(r, "cannot start: %s", strerror(errno));
        printf(" failed to start\n");
        return -1;
    }
    int ended = r->rc < 128; /* by itself (a resumed run did); killed: rerun on --resume */
    if (!done && ended) mark_done(r->dir, line, r, 0);
    if (!r->measured) {
        measure_run(lo, row, r, db, out, ev);
        /* the marker stands for the run from now on; a failed measurement is tried again */
        if (ended && isfinite(r->val_final)) mark_done(r->dir, line, r, 1);
    }
    sort_points(lo, r);
    int other = r->resumed && strcmp(r->build, LEARN_BUILD);
    printf(" val_loss %.4f  %.0f s (exit %d%s%s%s)%s%s\n", r->val_final, r->wall_s, r->rc,
           !r->resumed   ? ""
           : r->measured ? "; run earlier, read from its marker"
                         : "; run earlier, read from its stores",
           other ? ", by build " : "", other ? r->build : "", r->err[0] ? ": " : "", r->err);
    fflush(stdout);
    return 0;
}

/* ---- report -------------------------------------------------------------------------------- */

/* The swarm's exchange bytes one replica sends per parameter per step: every peer's
 * exchange bytes over the run, per step, per replica, per parameter of the whole model
 * (each replica of each stage sends its stage's message once a step). */
static double exch_bytes_per_param_step(const learn_opts_t *lo, const learn_result_t *r)
{
    return r->wire_per_token[WIRE_EXCH] * lo->tokens_per_step / ((double)lo->params * lo->replicas);
}

static void print_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++)
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    fputc('"', f);
}

static void print_num(FILE *f, double x)
{
    if (isfinite(x))
        fprintf(f, "%.6g", x);
    else
        fprintf(f, "null");
}

/* The index of a run's validation point at `step` steps done; -1 where it has none. */
static int point_at(const learn_result_t *r, double step)
{
    for (int p = 0; p < r->npts; p++)
        if (r->pt_step[p] == step) return p;
    return -1;
}

/* A run's validation loss at `step` steps done; NAN where it has no point there. */
static double loss_at(const learn_result_t *r, double step)
{
    int p = point_at(r, step);
    return p < 0 ? NAN : r->pt_loss[p];
}

/* What the total is made of (bench_cost.h), from the rows in the table: from their final
 * losses over the seeds (step < 0), or from seed index `seed`'s losses at `step` done. */
static int learn_costs(const learn_opts_t *lo, learn_result_t (*res)[LEARN_MAX_SEEDS],
                       const int *on, int seed, double step, bench_cost_t *out)
{
    double v[LEARN_NROWS][LEARN_MAX_SEEDS];
    int seeds = step < 0 ? lo->seeds : 1;
    for (int i = 0; i < LEARN_NROWS; i++)
        for (int s = 0; s < seeds; s++)
            v[i][s] = step < 0 ? res[i][s].val_final : loss_at(&res[i][seed], step);
    const int dt = LEARN_NROWS - 2; /* demo-train */
    bench_cost_in_t in = {.seeds = seeds,
                          .adamw = on[0] ? v[0] : NULL,
                          .full = on[1] ? v[1] : NULL,
                          .swarm_demo = on[2] ? v[2] : NULL,
                          .demo_train = on[dt] ? v[dt] : NULL,
                          .full_mechs = __builtin_popcount(MECH_ALL)};
    for (int i = 0; i < LEARN_NROWS; i++) {
        const learn_row_t *w = &learn_rows[i];
        if (!on[i] || !w->swarm || !w->mechs || w->mechs == MECH_ALL) continue;
        if (!w->without && in.nmech < BENCH_COST_MAX_MECH)
            in.mech[in.nmech] = v[i], in.mech_name[in.nmech++] = mech_name(w);
        if (w->without && in.nwithout < BENCH_COST_MAX_MECH)
            in.without[in.nwithout] = v[i], in.without_name[in.nwithout++] = mech_name(w);
    }
    return bench_costs(&in, out);
}

/* The steps the cost parts are given at, seed index s: the validation points of the first
 * row in the table that has any (AdamW's, those of the loss table, unless it is left out). */
static int cost_steps(learn_result_t (*res)[LEARN_MAX_SEEDS], const int *on, int s,
                      const double **steps)
{
    for (int i = 0; i < LEARN_NROWS; i++)
        if (on[i] && res[i][s].npts > 0) {
            *steps = res[i][s].pt_step;
            return res[i][s].npts;
        }
    *steps = NULL;
    return 0;
}

/* One part of the cost line: `before`, its mean in percent, its seeds' range when it has
 * two or more. Returns whether the part is there (printed). */
static int print_cost(const bench_cost_t *c, int n, const char *part, const char *before)
{
    const bench_cost_t *p = bench_cost_find(c, n, part);
    if (!p) return 0;
    printf("%s%+.1f%%", before, 100 * p->mean);
    if (p->seeds > 1) printf(" (%+.1f..%+.1f)", 100 * p->min, 100 * p->max);
    return 1;
}

/* The cost line (bench_cost.h's parts, those the table has): means over the seeds, their
 * range in brackets. The parts in the line's order; the one-mechanism parts and summed go
 * where the entry without a part is. */
static void print_costs(const bench_cost_t *c, int n)
{
    static const struct {
        const char *part, *label;
        int mech; /* the entry of the mechanisms' parts of this kind (bench_cost_t.mech) */
    } line[] = {
        {"optimizer", "sign DeMo in one process over AdamW", 0},
        {"swarm", "the full swarm over demo-train", 0},
        {"execution", "the swarm with DeMo alone over demo-train", 0},
        {"summed", "each mechanism over the swarm with DeMo alone:", 1},
        {"together", "all of them together", 0},
        {"rest", "the rest (what they do to one another: no row measures it)", 0},
        {"summed in all",
         "each mechanism among all the others (the full swarm over it without "
         "that one):",
         2},
        {"rest in all", "the rest (together less those)", 0},
    };
    if (!n) return;
    const char *sep = "cost: ";
    char before[128];
    for (size_t k = 0; k < sizeof line / sizeof line[0]; k++) {
        if (!line[k].mech) {
            snprintf(before, sizeof before, "%s%s ", sep, line[k].label);
            if (print_cost(c, n, line[k].part, before)) sep = "; ";
            continue;
        }
        int mechs = 0;
        for (int i = 0; i < n; i++) {
            if (c[i].mech != line[k].mech) continue;
            if (mechs++)
                snprintf(before, sizeof before, ", %s ", c[i].name);
            else
                snprintf(before, sizeof before, "%s%s %s ", sep, line[k].label, c[i].name);
            print_cost(c, n, c[i].part, before);
        }
        if (mechs) print_cost(c, n, line[k].part, ", summed "), sep = "; ";
    }
    printf("\n");
}

/* The cost parts at each step of the loss table, for one seed: bench_cost.h's parts from
 * that seed's losses at steps[p] done (at[p], nat[p] of them). Computed once (learn_cost_points)
 * for the printed table and the JSON. */
typedef struct {
    int n;
    const double *steps;
    int nat[LEARN_MAX_PTS];
    bench_cost_t at[LEARN_MAX_PTS][BENCH_COST_MAX];
} learn_cost_points_t;

static void learn_cost_points(const learn_opts_t *lo, learn_result_t (*res)[LEARN_MAX_SEEDS],
                              const int *on, learn_cost_points_t *cp)
{
    for (int s = 0; s < lo->seeds; s++) {
        cp[s].n = cost_steps(res, on, s, &cp[s].steps);
        for (int p = 0; p < cp[s].n; p++)
            cp[s].nat[p] = learn_costs(lo, res, on, s, cp[s].steps[p], cp[s].at[p]);
    }
}

/* The cost parts by steps done, seed by seed: each part of the cost line (`costs`) at each
 * step where its rows have a point, "-" where they have none. */
static void print_cost_points(const learn_opts_t *lo, const learn_cost_points_t *cp,
                              const bench_cost_t *costs, int ncost)
{
    for (int s = 0; s < lo->seeds && ncost > 0; s++) {
        if (!cp[s].n) continue;
        printf("\ncost by steps done (seed %lld; percent, each part as in the cost line):\n",
               lo->seed + s);
        printf("  %-18s", "steps");
        for (int p = 0; p < cp[s].n; p++) printf(" %7.0f", cp[s].steps[p]);
        printf("\n");
        for (int c = 0; c < ncost; c++) {
            printf("  %-18s", costs[c].part);
            for (int p = 0; p < cp[s].n; p++) {
                const bench_cost_t *x = bench_cost_find(cp[s].at[p], cp[s].nat[p], costs[c].part);
                if (x && x->seeds)
                    printf(" %+7.2f", 100 * x->mean);
                else
                    printf(" %7s", "-");
            }
            printf("\n");
        }
    }
}

/* JSON: flat objects in top-level arrays (tools/json.h reads them): "runs" (one per row and
 * seed), "points" (every validation point of every run), "summary" (one object), "costs"
 * (bench_cost.h's parts: what the total is made of) and "cost_points" (the parts at each
 * step of the loss table, seed by seed). */
static int write_json(const learn_opts_t *lo, learn_result_t (*res)[LEARN_MAX_SEEDS], const int *on,
                      double ratio, double rlo, double rhi, const bench_cost_t *costs, int ncost,
                      const learn_cost_points_t *cp)
{
    FILE *f = !strcmp(lo->json, "-") ? stdout : fopen(lo->json, "w");
    if (!f) {
        fprintf(stderr, "bench learn: %s: %s\n", lo->json, strerror(errno));
        return -1;
    }
    fprintf(f, "{\"summary\":[{\"config\":");
    print_json_str(f, lo->config);
    fprintf(f,
            ",\"params\":%zu,\"steps\":%d,\"replicas\":%d,\"stages\":%d,\"peers\":%d,"
            "\"microbatches_per_step\":%d,\"microbatch_sequences\":%d,"
            "\"tokens_per_run\":%.0f,\"seeds\":%d,\"codec\":",
            lo->params, lo->steps, lo->replicas, lo->stages, lo->peers,
            lo->run.replicas * lo->run.accum, lo->run.cfg.batch, lo->tokens_per_step * lo->steps,
            lo->seeds);
    print_json_str(f, lo->codec);
    fprintf(f, ",\"skip\":%g,\"skip_until\":%g,\"swap\":%g,\"churn\":", lo->skip, lo->skip_until,
            lo->swap);
    print_json_str(f, lo->churn ? lo->churn : "");
    fprintf(f, ",\"churn_at\":");
    print_json_str(f, lo->churn ? "" : lo->churn_at);
    fprintf(f, ",\"kill_stage\":%d,\"baseline_schedule\":", lo->kill_stage);
    print_json_str(f, lo->baseline_schedule);
    fprintf(f, ",\"demo_lr\":");
    print_num(f, lo->demo_lr_run);
    fprintf(f, ",\"outer\":%d,\"demo_k\":%d,\"demo_chunk\":%d", lo->outer > 0 ? lo->outer : 1,
            lo->demo_k_run, lo->demo_chunk_run);
    fprintf(f, ",\"ratio\":");
    print_num(f, ratio);
    fprintf(f, ",\"ratio_min\":");
    print_num(f, rlo);
    fprintf(f, ",\"ratio_max\":");
    print_num(f, rhi);
    fprintf(f, "}],\"runs\":[");
    int first = 1;
    for (int i = 0; i < LEARN_NROWS; i++) {
        if (!on[i]) continue;
        for (int s = 0; s < lo->seeds; s++) {
            const learn_result_t *r = &res[i][s];
            double base = res[0][s].val_final;
            if (lo->report && !r->ran) continue; /* not run: left out */
            fprintf(f, "%s{\"name\":", first ? "" : ",");
            first = 0;
            print_json_str(f, learn_rows[i].name);
            fprintf(f, ",\"kind\":\"%s\",\"seed\":%lld,\"exit\":%d,\"val_loss\":",
                    learn_rows[i].swarm ? "swarm" : "train", lo->seed + s, r->rc);
            print_num(f, r->val_final);
            fprintf(f, ",\"final_step\":%lld,\"ratio\":", (long long)r->final_step);
            print_num(f, r->val_final / base);
            fprintf(f, ",\"tokens_per_s\":");
            print_num(f, r->wall_s > 0 ? lo->tokens_per_step * lo->steps / r->wall_s : NAN);
            fprintf(f, ",\"wall_s\":%.1f,\"cpu_s\":%.1f,\"npoints\":%d,\"resumed\":%s,\"build\":",
                    r->wall_s, r->cpu_s, r->npts, r->resumed ? "true" : "false");
            print_json_str(f, r->build);
            if (learn_rows[i].swarm) {
                fprintf(f, ",\"exchange_bytes_per_param_step\":");
                print_num(f, exch_bytes_per_param_step(lo, r));
                fprintf(f, ",\"wire_bytes_per_token\":");
                print_num(f, r->wire_total_per_token);
                for (int k = 0; k < WIRE_KINDS; k++) {
                    fprintf(f, ",\"wire_%s_per_token\":", transport_wire_name(k));
                    print_num(f, r->wire_per_token[k]);
                }
                fprintf(f,
                        ",\"stores\":%d,\"kills\":%d,\"joins\":%d,\"stages_rebuilt\":%d,"
                        "\"moves\":%d",
                        r->stores, r->kills, r->joins, r->rebuilt, r->moves);
            }
            fprintf(f, ",\"dir\":");
            print_json_str(f, r->dir);
            fprintf(f, ",\"error\":");
            print_json_str(f, r->err);
            fprintf(f, "}");
        }
    }
    fprintf(f, "],\"points\":[");
    first = 1;
    for (int i = 0; i < LEARN_NROWS; i++) {
        if (!on[i]) continue;
        for (int s = 0; s < lo->seeds; s++)
            for (int p = 0; p < res[i][s].npts; p++) {
                fprintf(f,
                        "%s{\"name\":\"%s\",\"seed\":%lld,\"step\":%.0f,\"tokens\":%.0f,"
                        "\"val_loss\":%.6g}",
                        first ? "" : ",", learn_rows[i].name, lo->seed + s, res[i][s].pt_step[p],
                        res[i][s].pt_tokens[p], res[i][s].pt_loss[p]);
                first = 0;
            }
    }
    fprintf(f, "],\"costs\":[");
    for (int i = 0; i < ncost; i++) {
        fprintf(f, "%s{\"part\":\"%s\",\"cost\":", i ? "," : "", costs[i].part);
        print_num(f, costs[i].mean);
        fprintf(f, ",\"min\":");
        print_num(f, costs[i].min);
        fprintf(f, ",\"max\":");
        print_num(f, costs[i].max);
        fprintf(f, ",\"seeds\":%d}", costs[i].seeds);
    }
    fprintf(f, "],\"cost_points\":[");
    first = 1;
    for (int s = 0; s < lo->seeds; s++)
        for (int p = 0; p < cp[s].n; p++) {
            const bench_cost_t *at = cp[s].at[p];
            for (int c = 0; c < cp[s].nat[p]; c++) {
                if (!at[c].seeds) continue;
                fprintf(f, "%s{\"seed\":%lld,\"step\":%.0f,\"part\":\"%s\",\"cost\":",
                        first ? "" : ",", lo->seed + s, cp[s].steps[p], at[c].part);
                print_num(f, at[c].mean);
                fprintf(f, "}");
                first = 0;
            }
        }
    fprintf(f, "]}\n");
    if (f != stdout) fclose(f);
    return 0;
}

static int write_svg(const learn_opts_t *lo, learn_result_t (*res)[LEARN_MAX_SEEDS], const int *on)
{
    plot_series_t main_s[2 * LEARN_MAX_SEEDS], abl[LEARN_NROWS];
    char labels[2 * LEARN_MAX_SEEDS + LEARN_NROWS][64];
    int nm = 0, na = 0, nl = 0;
    for (int i = 0; i < 2; i++)
        for (int s = 0; s < lo->seeds; s++) {
            snprintf(labels[nl], sizeof labels[nl], "%s%s, seed %lld",
                     i ? "swarm, every mechanism" : "AdamW (train)", "", lo->seed + s);
            main_s[nm++] = (plot_series_t){.label = labels[nl++],
                                           .x = res[i][s].pt_tokens,
                                           .y = res[i][s].pt_loss,
                                           .n = res[i][s].npts,
                                           .color = i * LEARN_MAX_SEEDS + s};
        }
    for (int i = 0; i < LEARN_NROWS; i++) {
        if (!on[i]) continue;
        snprintf(labels[nl], sizeof labels[nl], "%s", learn_rows[i].name);
        abl[na++] = (plot_series_t){.label = labels[nl++],
                                    .x = res[i][0].pt_tokens,
                                    .y = res[i][0].pt_loss,
                                    .n = res[i][0].npts,
                                    .color = i};
    }
    plot_panel_t panels[2] = {
        {"validation loss: AdamW and the full swarm, equal tokens", "loss (nats/token)", main_s, nm,
         NULL},
        {"one mechanism at a time (first seed)", "loss (nats/token)", abl, na,
         "no data: --no-ablations"},
    };
    char title[256], err[STATUS_ERR_LEN];
    snprintf(title, sizeof title, "swarmtrain bench learn: %s, %d steps, %d replicas, %d stages",
             lo->config, lo->steps, lo->replicas, lo->stages);
    if (plot_svg_write(lo->svg, title, "tokens", panels, na > 2 ? 2 : 1, err)) {
        fprintf(stderr, "bench learn: %s\n", err);
        return -1;
    }
    return 0;
}

static void print_table(const learn_opts_t *lo, learn_result_t (*res)[LEARN_MAX_SEEDS],
                        const int *on)
{
    printf("\n| %-18s | %9s | %17s | %8s | %8s | %7s | %7s | %13s | %10s | %9s | %s\n", "run",
           "val_loss", "(min..max)", "vs AdamW", "vs demo", "tok/s", "CPU s", "exch B/p/step",
           "wire B/tok", "act+grad", "kills/joins/rebuilt");
    printf("|%.20s|%.11s|%.19s|%.10s|%.10s|%.9s|%.9s|%.15s|%.12s|%.11s|%.22s\n",
           "--------------------", "-----------", "-------------------", "----------", "----------",
           "---------", "---------", "---------------", "------------", "-----------",
           "----------------------");
    for (int i = 0; i < LEARN_NROWS; i++) {
        if (!on[i]) continue;
        double v[LEARN_MAX_SEEDS], rb[LEARN_MAX_SEEDS], rd[LEARN_MAX_SEEDS], tps[LEARN_MAX_SEEDS],
            cpu[LEARN_MAX_SEEDS], ex[LEARN_MAX_SEEDS], wt[LEARN_MAX_SEEDS], ag[LEARN_MAX_SEEDS];
        int kills = 0, joins = 0, rebuilt = 0;
        for (int s = 0; s < lo->seeds; s++) {
            const learn_result_t *r = &res[i][s];
            if (lo->report && !r->ran) { /* not run: in no column's mean (its zeros were) */
                v[s] = rb[s] = rd[s] = tps[s] = cpu[s] = ex[s] = wt[s] = ag[s] = NAN;
                continue;
            }
            v[s] = r->val_final;
            rb[s] = r->val_final / res[0][s].val_final;
            rd[s] = on[2] ? r->val_final / res[2][s].val_final : NAN;
            tps[s] = r->wall_s > 0 ? lo->tokens_per_step * lo->steps / r->wall_s : NAN;
            cpu[s] = r->cpu_s;
            ex[s] = learn_rows[i].swarm ? exch_bytes_per_param_step(lo, r) : NAN;
            wt[s] = learn_rows[i].swarm ? r->wire_total_per_token : NAN;
            ag[s] = learn_rows[i].swarm ? r->wire_per_token[WIRE_ACT] + r->wire_per_token[WIRE_GRAD]
                                        : NAN;
            kills += r->kills, joins += r->joins, rebuilt += r->rebuilt;
        }
        double m, a, b, mb, md, mt, mc, me, mw, mg, x, y;
        numbers_stats(v, lo->seeds, &m, &a, &b);
        numbers_stats(rb, lo->seeds, &mb, &x, &y);
        numbers_stats(rd, lo->seeds, &md, &x, &y);
        numbers_stats(tps, lo->seeds, &mt, &x, &y);
        numbers_stats(cpu, lo->seeds, &mc, &x, &y);
        numbers_stats(ex, lo->seeds, &me, &x, &y);
        numbers_stats(wt, lo->seeds, &mw, &x, &y);
        numbers_stats(ag, lo->seeds, &mg, &x, &y);
        char range[40], rdemo[16], exs[16], wts[16], ags[16], fl[32];
        snprintf(range, sizeof range, lo->seeds > 1 ? "%.4f..%.4f" : "-", a, b);
        snprintf(rdemo, sizeof rdemo, isfinite(md) ? "%+.1f%%" : "-", 100 * (md - 1));
        /* *: peers were SIGKILLed and took their byte counts with them: a lower bound */
        const char *lb = kills ? "*" : "";
        snprintf(exs, sizeof exs, isfinite(me) ? "%.5f%s" : "(4, dense)", me, lb);
        snprintf(wts, sizeof wts, isfinite(mw) ? "%.1f%s" : "-", mw, lb);
        snprintf(ags, sizeof ags, isfinite(mg) ? "%.1f%s" : "-", mg, lb);
        snprintf(fl, sizeof fl, learn_rows[i].swarm ? "%d/%d/%d" : "-", kills, joins, rebuilt);
        printf("| %-18s | %9.4f | %17s | %+7.1f%% | %8s | %7.0f | %7.0f | %13s | %10s | %9s | %s\n",
               learn_rows[i].name, m, range, 100 * (mb - 1), rdemo, mt, mc, exs, wts, ags, fl);
    }
    printf("exch B/p/step: exchange bytes one replica sends per parameter per step (every "
           "peer's, over steps x replicas x parameters); wire B/tok: every kind, sent; * a lower "
           "bound (peers SIGKILLed take their counts with them: see the rows without kills)\n");
    printf("DeMo runs: an exchange every %d step(s)%s, k %d of each %dx%d chunk's %d "
           "entries, sign values\n",
           lo->outer > 0 ? lo->outer : 1,
           lo->outer > 0 ? " (local AdamW steps between; the outer step SparseLoCo's: top-k in "
                           "parameter space, the linear update)"
                         : " (after the DCT)",
           lo->demo_k_run, lo->demo_chunk_run, lo->demo_chunk_run,
           lo->demo_chunk_run * lo->demo_chunk_run);
    /* the curves, first seed: validation loss at each point, by steps done */
    printf("\nvalidation loss by steps done (seed %lld; the last column measured here on the "
           "assembled model):\n",
           lo->seed);
    const learn_result_t *ref = &res[0][0];
    printf("  %-18s", "steps");
    for (int p = 0; p < ref->npts; p++) printf(" %7.0f", ref->pt_step[p]);
    printf("\n");
    for (int i = 0; i < LEARN_NROWS; i++) {
        if (!on[i]) continue;
        const learn_result_t *r = &res[i][0];
        printf("  %-18s", learn_rows[i].name);
        for (int p = 0; p < ref->npts; p++) {
            int k = point_at(r, ref->pt_step[p]);
            if (k >= 0)
                printf(" %7.4f", r->pt_loss[k]);
            else
                printf(" %7s", "-");
        }
        printf("\n");
    }
}

/* ---- main ---------------------------------------------------------------------------------- */

int bench_learn(int argc, char **argv)
{
    enum {
        O_CONFIG = 1,
        O_STEPS,
        O_STAGES,
        O_PEERS,
        O_REPLICAS,
        O_VALEVERY,
        O_VALBATCHES,
        O_SEEDS,
        O_SEED,
        O_CODEC,
        O_SKIP,
        O_SKIPUNTIL,
        O_SWAP,
        O_CHURN,
        O_CHURNKILLS,
        O_CHURNAT,
        O_KILLSTAGE,
        O_NOABL,
        O_ABL,
        O_LEAVE1,
        O_JSON,
        O_SVG,
        O_DIR,
        O_DATA,
        O_THREADS,
        O_BSCHED,
        O_ONLY,
        O_DEMOLR,
        O_OUTER,
        O_OUTERK,
        O_RESUME,
        O_REPORT,
        O_NOCONST,
        O_SPLIT,
        O_HELP
    };
    static const struct option opts[] = {{"config", required_argument, NULL, O_CONFIG},
                                         {"steps", required_argument, NULL, O_STEPS},
                                         {"stages", required_argument, NULL, O_STAGES},
                                         {"peers", required_argument, NULL, O_PEERS},
                                         {"replicas", required_argument, NULL, O_REPLICAS},
                                         {"val-every", required_argument, NULL, O_VALEVERY},
                                         {"val-batches", required_argument, NULL, O_VALBATCHES},
                                         {"seeds", required_argument, NULL, O_SEEDS},
                                         {"seed", required_argument, NULL, O_SEED},
                                         {"codec", required_argument, NULL, O_CODEC},
                                         {"skip", required_argument, NULL, O_SKIP},
                                         {"skip-until", required_argument, NULL, O_SKIPUNTIL},
                                         {"swap", required_argument, NULL, O_SWAP},
                                         {"churn", required_argument, NULL, O_CHURN},
                                         {"churn-kills", required_argument, NULL, O_CHURNKILLS},
                                         {"churn-at", required_argument, NULL, O_CHURNAT},
                                         {"kill-stage", required_argument, NULL, O_KILLSTAGE},
                                         {"no-ablations", no_argument, NULL, O_NOABL},
                                         {"ablations", no_argument, NULL, O_ABL},
                                         {"leave-one-out", no_argument, NULL, O_LEAVE1},
                                         {"json", required_argument, NULL, O_JSON},
                                         {"svg", required_argument, NULL, O_SVG},
                                         {"dir", required_argument, NULL, O_DIR},
                                         {"data", required_argument, NULL, O_DATA},
                                         {"threads", required_argument, NULL, O_THREADS},
                                         {"baseline-schedule", required_argument, NULL, O_BSCHED},
                                         {"only", required_argument, NULL, O_ONLY},
                                         {"demo-lr", required_argument, NULL, O_DEMOLR},
                                         {"outer", required_argument, NULL, O_OUTER},
                                         {"outer-k", required_argument, NULL, O_OUTERK},
                                         {"resume", no_argument, NULL, O_RESUME},
                                         {"report", no_argument, NULL, O_REPORT},
                                         {"no-constant", no_argument, NULL, O_NOCONST},
                                         {"split", required_argument, NULL, O_SPLIT},
                                         {"help", no_argument, NULL, O_HELP},
                                         {NULL, 0, NULL, 0}};
    static learn_opts_t lo;
    memset(&lo, 0, sizeof lo);
    lo.config = "tiny", lo.codec = "int8", lo.churn_at = "3:3", lo.svg = "bench-learn.svg";
    lo.baseline_schedule = "cosine";
    lo.steps = -1, lo.stages = -1, lo.peers = -1, lo.replicas = 2, lo.val_every = -1;
    lo.seeds = 1, lo.seed = 1337, lo.ablations = -1, lo.churn_kills = 3, lo.kill_stage = 1;
    lo.split = 4;
    /* a quarter of the middle-stage visits skipped in the first half of the run: skipped
     * visits cost learning the later they come, and on `tiny` in rounds over six seeds,
     * with the swaps, a quarter cost +1.8% where half cost +2.5% (docs/design-notes.md,
     * session 34); it saves half the compute that skipping half did */
    lo.val_batches = 20, lo.skip = 0.25, lo.skip_until = 0.5, lo.swap = 0.1;
    int c, churn_kills_given = 0, churn_at_given = 0;
    float f;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_CONFIG:
            lo.config = optarg;
            break;
        case O_STEPS:
            bad = run_opts_int("--steps", optarg, 1, &lo.steps);
            break;
        case O_STAGES:
            bad = run_opts_int("--stages", optarg, 1, &lo.stages);
            break;
        case O_PEERS:
            bad = run_opts_int("--peers", optarg, 1, &lo.peers);
            break;
        case O_REPLICAS:
            bad = run_opts_int("--replicas", optarg, 1, &lo.replicas);
            break;
        case O_VALEVERY:
            bad = run_opts_int("--val-every", optarg, 0, &lo.val_every);
            break;
        case O_VALBATCHES:
            bad = run_opts_int("--val-batches", optarg, 1, &lo.val_batches);
            break;
        case O_SEEDS:
            bad = run_opts_int("--seeds", optarg, 1, &lo.seeds);
            if (!bad && lo.seeds > LEARN_MAX_SEEDS) {
                fprintf(stderr, "bench learn: at most %d seeds\n", LEARN_MAX_SEEDS);
                bad = 1;
            }
            break;
        case O_SEED:
            lo.seed = strtoll(optarg, NULL, 0);
            break;
        case O_CODEC:
            lo.codec = optarg;
            break;
        case O_SKIP:
            bad = run_opts_float("--skip", optarg, &f);
            lo.skip = f;
            break;
        case O_SKIPUNTIL:
            bad = run_opts_float("--skip-until", optarg, &f);
            if (!bad && !(f > 0 && f <= 1)) {
                fprintf(stderr, "bench learn: --skip-until: a share of the steps in (0, 1]\n");
                bad = 1;
            }
            lo.skip_until = f;
            break;
        case O_SWAP:
            bad = run_opts_float("--swap", optarg, &f);
            lo.swap = f;
            break;
        case O_CHURN:
            lo.churn = optarg;
            break;
        case O_CHURNKILLS:
            bad = run_opts_int("--churn-kills", optarg, 0, &lo.churn_kills);
            churn_kills_given = 1;
            break;
        case O_CHURNAT: { /* checked here as local will, not an hour into the command */
            int n;
            double rs;
            bad = run_opts_churn_at(optarg, &n, &rs);
            lo.churn_at = optarg, churn_at_given = 1;
            break;
        }
        case O_KILLSTAGE:
            lo.kill_stage = atoi(optarg);
            break;
        case O_NOABL:
            lo.ablations = 0;
            break;
        case O_ABL:
            lo.ablations = 1;
            break;
        case O_LEAVE1:
            lo.leave_one_out = 1;
            break;
        case O_JSON:
            lo.json = optarg;
            break;
        case O_SVG:
            lo.svg = optarg;
            break;
        case O_DIR:
            snprintf(lo.dir, sizeof lo.dir, "%s", optarg);
            break;
        case O_DATA:
            lo.data = optarg;
            break;
        case O_THREADS:
            bad = run_opts_int("--threads", optarg, 1, &lo.threads);
            break;
        case O_BSCHED:
            lo.baseline_schedule = optarg;
            break;
        case O_ONLY:
            lo.only = optarg;
            break;
        case O_DEMOLR:
            bad = run_opts_float("--demo-lr", optarg, &f);
            lo.demo_lr = optarg;
            break;
        case O_OUTER:
            bad = run_opts_int("--outer", optarg, 0, &lo.outer);
            break;
        case O_OUTERK: {
            int k;
            bad = run_opts_int("--outer-k", optarg, 1, &k);
            lo.outer_k = optarg;
            break;
        }
        case O_RESUME:
            lo.resume = 1;
            break;
        case O_REPORT:
            lo.resume = lo.report = 1;
            break;
        case O_NOCONST:
            lo.no_constant = 1;
            break;
        case O_SPLIT:
            bad = run_opts_int("--split", optarg, 1, &lo.split);
            break;
        case O_HELP:
        case 'h':
            printf(
                "usage: swarmtrain bench learn [options] [-- RUN OPTIONS]\n\n"
                "Trains, on the same tokens, the single-process AdamW baseline (train: the\n"
                "exact average of --replicas gradients) and a local swarm with every mechanism\n"
                "on (sign DeMo, the codec, --skip, --swap, churn, a whole stage SIGKILLed and\n"
                "rebuilt), then (unless --no-ablations) the swarm with DeMo alone and with each\n"
                "mechanism alone. Prints validation loss at each --val-every point, the final\n"
                "one (measured here on the model assembled from each run's stores, the same\n"
                "held-out batches for all), a line with the word `ratio` (full swarm over\n"
                "AdamW), tokens/s and CPU seconds of each command, the swarm's exchange bytes\n"
                "per parameter per step (per replica) and wire bytes per token; draws the\n"
                "curves into --svg.\n\n"
                "  --config NAME        model (default tiny; small, medium)\n"
                "  --steps N            steps of every run (small 2500: 10.2 M tokens; else 600)\n"
                "  --replicas R         replicas per stage pool (2); R x K microbatches a step\n"
                "  --stages S           swarm stages (tiny, small: 4; medium: 4)\n"
                "  --peers N            swarm peers (default 2 per stage)\n"
                "  --val-every N        validation every N steps (default steps/6)\n"
                "  --val-batches N      held-out batches (of the config's size) per\n"
                "                       validation (20)\n"
                "  --split K            each replica's batch in K microbatches a step (the\n"
                "                       runs' --batch B/K --accum K: the same tokens; 4), so\n"
                "                       that the swarm's members split a step nearly evenly\n"
                "  --seeds N            repeat every run with seeds SEED .. SEED+N-1 (1)\n"
                "  --seed X             first seed (1337); faults drawn from 1000+seed\n"
                "  --codec NAME         activation codec of the swarm (int8; any --codec of "
                "local)\n"
                "  --skip R             SkipPipe ratio (0.25)\n"
                "  --skip-until F       skipping in the first F of the steps only (0.5; 1: all)\n"
                "  --swap S             CheckFree+ swap share (0.1)\n"
                "  --churn-at N:S       churn: N peers SIGKILLed from outside at steps drawn\n"
                "                       over the whole run, each replaced by a new peer S s\n"
                "                       later (3:3; local --churn-at)\n"
                "  --churn RATE:S       churn at a rate instead (local --churn: RATE kills per\n"
                "                       peer per minute), with --churn-kills N at most N (3;\n"
                "                       0: no limit): capped, they all land early in a long run\n"
                "  --kill-stage S       the stage SIGKILLed whole at a drawn step (1; -1: none)\n"
                "  --ablations          also the one-mechanism rows (default but for tiny)\n"
                "  --no-ablations       only AdamW and the full swarm (default for tiny: the\n"
                "                       quick form, a few minutes)\n"
                "  --only A,B,...       only these ablation rows (swarm-demo, swarm+codec,\n"
                "                       swarm+skip, swarm+swap, swarm+churn, swarm+stage-lost;\n"
                "                       with --leave-one-out also full-no-codec, ...)\n"
                "  --leave-one-out      also the full swarm without each mechanism in turn\n"
                "                       (full-no-codec, full-no-skip, full-no-swap,\n"
                "                       full-no-churn, full-no-stage-lost): each one's cost\n"
                "                       among the others\n"
                "  --baseline-schedule  AdamW's lr schedule (cosine, as the sign preset; "
                "constant)\n"
                "  --no-constant        without AdamW at a constant lr (issue 17's reference;\n"
                "                       an hour a seed on small)\n"
                "  --outer H            the DeMo runs (swarm and demo-train) exchange once every\n"
                "                       H steps, local AdamW steps between (--demo-local H with\n"
                "                       the sign preset's outer step: top-k in parameter space,\n"
                "                       the linear update; docs/protocol.md 12.14)\n"
                "  --outer-k K          their DeMo k, coefficients of each 256 (default: the\n"
                "                       sign preset's)\n"
                "  --threads N          train's threads (local divides the cores itself)\n"
                "  --data FILE          corpus (default: the KJV cache)\n"
                "  --dir DIR            runs' logs and stores (default: a new /tmp dir, kept)\n"
                "  --resume             with --dir: a run that ended there by itself (its\n"
                "                       done.txt, the same options; a failed exit too) is\n"
                "                       not run again: read from its marker, which holds its\n"
                "                       measurement (the stores are not needed: markers\n"
                "                       copied into another --dir resume there), else from\n"
                "                       its stores; the others (never run, or killed part\n"
                "                       way) run from the start\n"
                "  --report             with --dir: as --resume, but runs nothing: the table,\n"
                "                       ratio, curves and JSON of the runs that finished\n"
                "                       there; the others are left out (a campaign part way)\n"
                "  --svg FILE           the curves (default bench-learn.svg)\n"
                "  --json FILE          the numbers as JSON (- for stdout)\n"
                "  -- RUN OPTIONS       given to every run (train and local), e.g. -- --lr 2e-3\n");
            return 0;
        default:
            return 2;
        }
        if (bad) return 2;
    }
    lo.extra = argv + optind;
    lo.nextra = argc - optind;
    int is_tiny = !strcmp(lo.config, "tiny"), is_small = !strcmp(lo.config, "small");
    if (lo.steps < 0) lo.steps = is_small ? 2500 : 600; /* small: 10.2 M tokens, issue 27 */
    if (lo.stages < 0) lo.stages = 4;
    if (lo.peers < 0) lo.peers = 2 * lo.stages;
    if (lo.val_every < 0) lo.val_every = lo.steps / 6 > 0 ? lo.steps / 6 : 1;
    if (lo.ablations < 0) lo.ablations = !is_tiny || lo.only;
    if (lo.kill_stage >= lo.stages) {
        fprintf(stderr, "bench learn: --kill-stage %d: the swarm has %d stages\n", lo.kill_stage,
                lo.stages);
        return 2;
    }
    if (lo.churn && churn_at_given) {
        fprintf(stderr, "bench learn: --churn-at or --churn (a rate), not both\n");
        return 2;
    }
    if (churn_kills_given && !lo.churn) {
        fprintf(stderr, "bench learn: --churn-kills caps --churn's rate; --churn-at N says "
                        "how many\n");
        return 2;
    }
    /* more microbatches than replicas: the swarm's members split a step's microbatches by
     * rendezvous hashing, each one independently; with 2 of them over 2 members one starts
     * none in a quarter of the steps, and in a round (--outer) its local step is then on
     * no gradient of its own (docs/design-notes.md, session 32). 8 over 2 leave it less. */
    model_config_t preset;
    char perr[STATUS_ERR_LEN];
    if (config_preset(&preset, lo.config, perr)) {
        fprintf(stderr, "bench learn: %s\n", perr);
        return 2;
    }
    if (preset.batch % lo.split) {
        fprintf(stderr,
                "bench learn: --split %d: %s's batch of %d sequences does not divide by it\n",
                lo.split, lo.config, preset.batch);
        return 2;
    }
    for (int i = 0; i < lo.nextra && lo.split > 1; i++)
        if (!strncmp(lo.extra[i], "--batch", 7) || !strncmp(lo.extra[i], "--accum", 7)) {
            fprintf(stderr,
                    "bench learn: %s among the run words: --split %d sets the "
                    "microbatches (--split 1: the run words do)\n",
                    lo.extra[i], lo.split);
            return 2;
        }
    lo.split_batch = preset.batch / lo.split;
    lo.val_batches *= lo.split; /* the same held-out windows (data_val_batch) */
    char churn_desc[96];
    if (lo.churn)
        snprintf(churn_desc, sizeof churn_desc, "at a rate %s (at most %d kills)", lo.churn,
                 lo.churn_kills);
    else
        snprintf(churn_desc, sizeof churn_desc, "%s (kills:restart s, at drawn steps)",
                 lo.churn_at);
    if (lo.peers < 2 * lo.stages)
        fprintf(stderr, "bench learn: note: churn never kills the last peer of a stage; with "
                        "fewer than 2 peers per stage it kills nobody there\n");
    /* the run as train and local will read it: its tokens per step and parameters */
    /* (the words stay alive while lo.run points into them: --data) */
    static learn_args_t words;
    args_add(&words, "bench learn");
    args_common(&words, &lo, lo.seed);
    args_add(&words, "--stages"), args_addf(&words, "%.0f", lo.stages);
    lo.run = train_defaults();
    optind = 1;
    int prc = run_opts_parse("bench learn", words.n, words.a, &lo.run, NULL);
    if (prc) {
        args_free(&words);
        return prc == 1 ? 0 : 2;
    }
    /* the DeMo rows' rate as demo-train will read it (the sign preset's unless told) */
    learn_args_t dwords = {.n = 0};
    for (int i = 0; i < words.n; i++) args_add(&dwords, words.a[i]);
    args_demo(&dwords, &lo);
    if (lo.demo_lr) args_add(&dwords, "--lr"), args_add(&dwords, lo.demo_lr);
    train_options_t drun = train_defaults();
    optind = 1;
    prc = run_opts_parse("bench learn", dwords.n, dwords.a, &drun, NULL);
    args_free(&dwords);
    if (prc) {
        args_free(&words);
        return prc == 1 ? 0 : 2;
    }
    lo.demo_lr_run = drun.opt.lr;
    lo.demo_k_run = drun.demo.k, lo.demo_chunk_run = drun.demo.chunk;
    lo.tokens_per_step = (double)lo.run.replicas * lo.run.accum * lo.run.cfg.batch * lo.run.cfg.seq;
    lo.params = config_num_params(&lo.run.cfg);
    if (lo.resume && !lo.dir[0]) {
        fprintf(stderr, "bench learn: %s needs --dir, the directory of the runs to %s\n",
                lo.report ? "--report" : "--resume", lo.report ? "report" : "resume");
        return 2;
    }
    if (!lo.dir[0]) {
        snprintf(lo.dir, sizeof lo.dir, "/tmp/swarmtrain-bench-learn-XXXXXX");
        if (!mkdtemp(lo.dir)) {
            fprintf(stderr, "bench learn: cannot make a directory: %s\n", strerror(errno));
            return 1;
        }
    } else if (lo.report && access(lo.dir, R_OK)) {
        fprintf(stderr, "bench learn: --report: %s: %s\n", lo.dir, strerror(errno));
        return 2;
    } else if (mkdir(lo.dir, 0755) && errno != EEXIST) {
        fprintf(stderr, "bench learn: cannot make %s: %s\n", lo.dir, strerror(errno));
        return 1;
    }
    int on[LEARN_NROWS], picked[LEARN_NROWS] = {0};
    for (int i = 0; i < LEARN_NROWS; i++) {
        on[i] = !learn_rows[i].ablation || lo.ablations;
        if (learn_rows[i].without) on[i] = lo.leave_one_out;
        if (learn_rows[i].schedule && lo.no_constant) on[i] = 0;
    }
    /* --only: each name a row of this table that is on; a misspelt one, or one whose rows are
     * off (--no-ablations, no --leave-one-out), would run nothing for it without a word */
    for (const char *p = lo.only; p && *p;) {
        size_t k = strcspn(p, ",");
        int found = -1;
        for (int i = 0; i < LEARN_NROWS && found < 0; i++)
            if (on[i] && strlen(learn_rows[i].name) == k && !strncmp(p, learn_rows[i].name, k))
                found = i;
        if (found < 0) {
            fprintf(stderr,
                    "bench learn: --only %.*s: no such row in this table (the ablation rows "
                    "with --ablations; full-no-codec, ... with --leave-one-out)\n",
                    (int)k, p);
            return 2;
        }
        picked[found] = 1;
        p += k + (p[k] == ',');
    }
    /* it picks among the ablation and leave-one-out rows; the rows the ratio needs stay on */
    for (int i = 0; i < LEARN_NROWS && lo.only; i++)
        if (learn_rows[i].ablation || learn_rows[i].without) on[i] &= picked[i];
    if (lo.leave_one_out && lo.kill_stage < 0) {
        fprintf(stderr, "bench learn: --leave-one-out with --kill-stage -1: full-no-stage-lost "
                        "would be the full swarm again\n");
        return 2;
    }
    char load0[64] = "?";
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (!fgets(load0, sizeof load0, la)) load0[0] = 0;
        load0[strcspn(load0, "\n")] = 0;
        fclose(la);
    }
    printf("bench learn: %s (%zu parameters), %d steps x %.0f tokens = %.2f M tokens per run, "
           "%d replicas x %d microbatches of %d sequences; AdamW lr %g %s; swarm: %d stages, %d "
           "peers, sign DeMo (lr %g, k %d, "
           "an exchange every %d step(s)), codec "
           "%s, skip %g (the first %g of the steps), swap %g, churn %s, "
           "stage %d lost at a drawn step; "
           "%d seed(s); logs and stores in %s; load average %s\n",
           lo.config, lo.params, lo.steps, lo.tokens_per_step, lo.tokens_per_step * lo.steps / 1e6,
           lo.replicas, lo.run.accum, lo.run.cfg.batch, (double)lo.run.opt.lr, lo.baseline_schedule,
           lo.stages, lo.peers, (double)lo.demo_lr_run, lo.demo_k_run, lo.outer > 0 ? lo.outer : 1,
           lo.codec, lo.skip, lo.skip_until, lo.swap, churn_desc, lo.kill_stage, lo.seeds, lo.dir,
           load0);
    fflush(stdout);
    static learn_result_t res[LEARN_NROWS][LEARN_MAX_SEEDS];
    store_event_t *ev = malloc(LEARN_MAX_EV * sizeof *ev);
    if (!ev) return 1;
    /* the order runs go in: the rows that make the ratio, every seed (AdamW, then the full
     * swarm), then the rows that explain it, every seed (DeMo in one process, the cheapest
     * and deterministic, then the one-mechanism rows), and issue 17's reference last, so
     * that a long command stopped part way (--resume) has said the most */
    int failed = 0;
    for (int group = 0; group < 3; group++)
        for (int s = 0; s < lo.seeds; s++)
            for (int swarm = 0; swarm < 2; swarm++)
                for (int i = 0; i < LEARN_NROWS; i++) {
                    const learn_row_t *w = &learn_rows[i];
                    if (!on[i] || w->swarm != swarm || row_group(w) != group) continue;
                    if (learn_run(&lo, w, s, &res[i][s], ev) == -2) {
                        fprintf(stderr, "bench learn: %s\n", res[i][s].err);
                        free(ev);
                        return 2;
                    }
                    /* (--report: what did not run is left out, not a failure) */
                    if (res[i][s].ran || !lo.report) failed |= !isfinite(res[i][s].val_final);
                }
    free(ev);
    for (int i = 0; i < LEARN_NROWS && lo.report; i++) { /* a row no seed of which ran */
        int ran = 0;
        for (int s = 0; s < lo.seeds; s++) ran |= res[i][s].ran;
        on[i] &= ran;
    }
    print_table(&lo, res, on);
    double ratios[LEARN_MAX_SEEDS], rm, rlo, rhi, rm2, rlo2, rhi2;
    for (int s = 0; s < lo.seeds; s++) ratios[s] = res[1][s].val_final / res[0][s].val_final;
    numbers_stats(ratios, lo.seeds, &rm, &rlo, &rhi);
    printf("\nratio swarm/AdamW (final validation loss, equal tokens): %.4f", rm);
    if (lo.seeds > 1) {
        printf(" (mean of %d seeds, min %.4f, max %.4f:", lo.seeds, rlo, rhi);
        for (int s = 0; s < lo.seeds; s++) printf(" %.4f", ratios[s]);
        printf(")");
    }
    printf("; target <= 1.05 (quick form), <= 1.03 (small)\n");
    if (on[LEARN_NROWS - 1]) {
        double rc2[LEARN_MAX_SEEDS], mc2, lc2, hc2;
        for (int s = 0; s < lo.seeds; s++) {
            ratios[s] = res[0][s].val_final / res[LEARN_NROWS - 1][s].val_final;
            rc2[s] = res[1][s].val_final / res[LEARN_NROWS - 1][s].val_final;
        }
        numbers_stats(ratios, lo.seeds, &rm2, &rlo2, &rhi2);
        numbers_stats(rc2, lo.seeds, &mc2, &lc2, &hc2);
        printf("AdamW %s over AdamW at a constant lr (issue 17's reference): %.4f; ratio "
               "swarm/AdamW-constant: %.4f\n",
               lo.baseline_schedule, rm2, mc2);
    }
    bench_cost_t costs[BENCH_COST_MAX];
    int ncost = learn_costs(&lo, res, on, 0, -1, costs);
    print_costs(costs, ncost);
    static learn_cost_points_t cp[LEARN_MAX_SEEDS];
    learn_cost_points(&lo, res, on, cp);
    print_cost_points(&lo, cp, costs, ncost);
    char load1[64] = "?";
    if ((la = fopen("/proc/loadavg", "r"))) {
        if (!fgets(load1, sizeof load1, la)) load1[0] = 0;
        load1[strcspn(load1, "\n")] = 0;
        fclose(la);
    }
    printf("load average at the end: %s (tokens/s are of the whole command, start-up and "
           "validation included; only as good as the machine is quiet)\n",
           load1);
    if (lo.svg && lo.svg[0] && !write_svg(&lo, res, on)) printf("curves: %s\n", lo.svg);
    if (lo.json && write_json(&lo, res, on, rm, rlo, rhi, costs, ncost, cp)) failed = 1;
    fflush(stdout);
    args_free(&words);
    return failed ? 1 : 0;
}
