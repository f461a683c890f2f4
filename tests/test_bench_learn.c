/* test_bench_learn.c — `swarmtrain bench learn` in a very small form (tiny, 2 stages, 4
 * peers, 16 steps, no ablation rows): its --json document has the structure the issue
 * asks of it — a summary with a finite ratio and --split's microbatches (the same
 * tokens); AdamW, the full swarm, DeMo in one process and AdamW at a constant lr, each
 * with a final validation loss measured at the last step; validation points that end
 * there, with their token counts; the swarm's bytes per parameter per step and per
 * token; the cost parts (what the total is made of: here DeMo's own and the full swarm's
 * over it), the ratios of those losses, at the end and at each validation step — and the
 * SVG of the curves is written. Then --resume: the same command again reads every run
 * from its marker and runs none (the same losses, the build that ran each; a marker
 * without its measurement is measured again on the stores), a run without its done
 * marker runs again alone, --leave-one-out's row without the lost stage runs alone beside
 * the markers (the full swarm's words less that mechanism's; its cost among the others the
 * full swarm's loss over its), and other options are refused before any run (no JSON, the
 * markers untouched), as are a split that does not divide the batch and --accum among
 * the run words beside a split. Last, the markers alone, moved to another --dir without
 * a store, give the same numbers; --report there runs nothing and leaves out the run
 * whose marker is gone (and the cost parts that need it); and a garbled marker is
 * refused. It reads the JSON and the markers, never the printed table.
 *
 * Not for: the numbers themselves (the benchmark reports them; at this length they mean
 * nothing) or the faults' outcomes (tests/test_swarm.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "tools/json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define STEPS 16

/* The runs of the quick form, in order: AdamW, the full swarm, sign DeMo in one process
 * (the optimizer's own cost), AdamW at a constant lr (issue 17's reference). */
static const char *const run_names[] = {"adamw", "swarm-full", "demo-train", "adamw-constant"};
#define NRUNS 4

static char dir[64];

typedef struct {
    int n;
    char name[8][32];
    double val_loss[8], ratio[8], tps[8], exch[8], wire[8];
    long long final_step[8], seed[8];
    int npoints[8], swarm[8], has_kills[8], resumed[8];
    char build[8][64];
} runs_t;

typedef struct {
    int n, bad;
    double tokens_per_step;
    /* per run of run_names: the last point's step, how many points, the loss by step (NAN
     * where it has no point) */
    long long last_step[NRUNS];
    int count[NRUNS];
    double loss[NRUNS][STEPS + 1];
} points_t;

typedef struct {
    int n;
    double ratio, tokens_per_run;
    int steps, microbatches, mb_sequences;
} summary_t;

static void on_summary(void *ctx, const json_obj_t *o)
{
    summary_t *s = ctx;
    s->n++;
    s->ratio = strcmp(json_get(o, "ratio"), "null") ? atof(json_get(o, "ratio")) : NAN;
    s->tokens_per_run = atof(json_get(o, "tokens_per_run"));
    s->steps = atoi(json_get(o, "steps"));
    s->microbatches = atoi(json_get(o, "microbatches_per_step"));
    s->mb_sequences = atoi(json_get(o, "microbatch_sequences"));
}

static void on_run(void *ctx, const json_obj_t *o)
{
    runs_t *r = ctx;
    if (r->n == 8) return;
    int i = r->n++;
    snprintf(r->name[i], sizeof r->name[i], "%s", json_get(o, "name"));
    const char *v = json_get(o, "val_loss");
    r->val_loss[i] = strcmp(v, "null") && *v ? atof(v) : NAN;
    r->ratio[i] = atof(json_get(o, "ratio"));
    r->tps[i] = atof(json_get(o, "tokens_per_s"));
    r->final_step[i] = atoll(json_get(o, "final_step"));
    r->seed[i] = atoll(json_get(o, "seed"));
    r->npoints[i] = atoi(json_get(o, "npoints"));
    r->swarm[i] = !strcmp(json_get(o, "kind"), "swarm");
    v = json_get(o, "exchange_bytes_per_param_step");
    r->exch[i] = *v && strcmp(v, "null") ? atof(v) : NAN;
    v = json_get(o, "wire_bytes_per_token");
    r->wire[i] = *v && strcmp(v, "null") ? atof(v) : NAN;
    r->has_kills[i] = *json_get(o, "kills") && *json_get(o, "stages_rebuilt");
    r->resumed[i] = !strcmp(json_get(o, "resumed"), "true");
    snprintf(r->build[i], sizeof r->build[i], "%s", json_get(o, "build"));
}

/* The steps a row's churn kills were drawn at (its local summary's faults), in order. */
typedef struct {
    int n;
    long long drawn[8];
} churn_t;

static void on_fault(void *ctx, const json_obj_t *o)
{
    churn_t *c = ctx;
    if (strcmp(json_get(o, "cause"), "churn") || c->n == 8) return;
    c->drawn[c->n++] = atoll(json_get(o, "drawn_step"));
}

static void churn_of(const char *row, churn_t *c)
{
    char path[256];
    snprintf(path, sizeof path, "%s/runs/%s-s1337/summary.json", dir, row);
    char *json = testutil_slurp(path, NULL);
    assert_non_null(json);
    memset(c, 0, sizeof *c);
    json_each(json, "faults", on_fault, c);
    free(json);
    printf("%s: %d churn kill(s), drawn at", row, c->n);
    for (int i = 0; i < c->n; i++) printf(" %lld", c->drawn[i]);
    printf("\n");
}

/* The cost parts (tools/bench_cost.h), in order. */
typedef struct {
    int n;
    char part[16][32];
    double cost[16];
    int seeds[16];
} costs_t;

static void on_cost(void *ctx, const json_obj_t *o)
{
    costs_t *c = ctx;
    if (c->n == 16) return;
    int i = c->n++;
    snprintf(c->part[i], sizeof c->part[i], "%s", json_get(o, "part"));
    c->cost[i] = atof(json_get(o, "cost"));
    c->seeds[i] = atoi(json_get(o, "seeds"));
}

/* The cost parts at a step (cost_points) checked against the runs' points: each the
 * ratio of its rows' losses at that step, less one. */
typedef struct {
    const points_t *pts;
    int n, bad, at_end; /* at_end: parts at the last step */
} cost_points_t;

static void on_cost_point(void *ctx, const json_obj_t *o)
{
    cost_points_t *c = ctx;
    const points_t *p = c->pts;
    long long step = atoll(json_get(o, "step"));
    const char *part = json_get(o, "part");
    double cost = atof(json_get(o, "cost")), want = NAN;
    c->n++;
    if (step < 1 || step > STEPS || atoll(json_get(o, "seed")) != 1337) {
        c->bad++;
        return;
    }
    if (!strcmp(part, "optimizer")) want = p->loss[2][step] / p->loss[0][step] - 1;
    if (!strcmp(part, "swarm")) want = p->loss[1][step] / p->loss[2][step] - 1;
    if (!(fabs(cost - want) < 1e-4)) c->bad++; /* and a part of no such rows */
    c->at_end += step == STEPS;
}

/* The objects of the array `array` of dir/NAME.json, each given to fn. */
static int read_array(const char *name, const char *array, void (*fn)(void *, const json_obj_t *),
                      void *ctx)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    char *json = testutil_slurp(path, NULL);
    assert_non_null(json);
    int n = json_each(json, array, fn, ctx);
    free(json);
    return n;
}

/* The cost parts of dir/NAME.json. */
static int read_costs(const char *name, costs_t *c)
{
    memset(c, 0, sizeof *c);
    return read_array(name, "costs", on_cost, c);
}

static void on_point(void *ctx, const json_obj_t *o)
{
    points_t *p = ctx;
    const char *name = json_get(o, "name");
    int k = 0;
    while (k < NRUNS - 1 && strcmp(name, run_names[k])) k++;
    if (strcmp(name, run_names[k])) p->bad++;
    long long step = atoll(json_get(o, "step"));
    double tokens = atof(json_get(o, "tokens")), v = atof(json_get(o, "val_loss"));
    p->n++;
    if (step < 1 || step > STEPS || !isfinite(v) || v <= 0 ||
        fabs(tokens - (double)step * p->tokens_per_step) > 0.5)
        p->bad++;
    if (step < p->last_step[k]) p->bad++; /* in step order */
    if (step >= 1 && step <= STEPS) p->loss[k][step] = v;
    p->last_step[k] = step;
    p->count[k]++;
}

/* Runs the bench (steps, extra words; its JSON into dir/NAME.json); returns its exit
 * status, its output shown when not 0. */
static int bench(int steps, const char *extra, const char *name)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "%s bench learn --config tiny --steps %d --stages 2 --peers 4 --val-every 4 "
             "--val-batches 4 --churn-at 1:3 --no-ablations --data '%s' --dir %s/runs %s "
             "--json %s/%s.json --svg %s/out.svg > %s/%s.txt 2>&1",
             testutil_bin(), steps, testutil_corpus(), dir, extra, dir, name, dir, dir, name);
    int rc = system(cmd);
    if (rc) {
        snprintf(cmd, sizeof cmd, "cat %s/%s.txt", dir, name);
        if (system(cmd)) {
        }
    }
    return rc;
}

/* Whether the file at path has a line starting with prefix. */
static int has_line(const char *path, const char *prefix)
{
    char line[4096];
    int found = 0;
    FILE *f = fopen(path, "r");
    while (f && !found && fgets(line, sizeof line, f))
        found = !strncmp(line, prefix, strlen(prefix));
    if (f) fclose(f);
    return found;
}

/* Cuts the file at path back to its first n lines. */
static void keep_head(const char *path, int n)
{
    char *s = testutil_slurp(path, NULL), *p = s;
    assert_non_null(s);
    for (int i = 0; i < n && p && *p; i++) {
        p = strchr(p, '\n');
        if (p) p++;
    }
    if (p) *p = 0;
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(s, f);
    fclose(f);
    free(s);
}

/* The run words of the marker at path ("args ..."), with the run's own directory (the last
 * path word after --dir) cut out, into out. */
static void marker_args(const char *path, char *out, size_t n)
{
    char line[1024];
    out[0] = 0;
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "args ", 5)) snprintf(out, n, "%s", line + 5);
    fclose(f);
    assert_true(out[0] != 0);
    char *d = strstr(out, "--dir ");
    assert_non_null(d);
    char *end = strchr(d + 6, ' ');
    assert_non_null(end);
    memmove(d, end + 1, strlen(end + 1) + 1);
}

/* Runs the bench with extra words, which it must refuse before any run: its exit status
 * not 0, no JSON written, and the marker at `marker` the same file (a run would replace
 * it, renamed into place) with the same bytes. */
static void assert_refused(int steps, const char *extra, const char *name, const char *marker)
{
    char path[128];
    struct stat before, after;
    char *was = testutil_slurp(marker, NULL);
    assert_non_null(was);
    assert_int_equal(stat(marker, &before), 0);
    assert_int_not_equal(bench(steps, extra, name), 0);
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    assert_int_not_equal(stat(path, &after), 0); /* no report of runs it did not run */
    assert_int_equal(stat(marker, &after), 0);
    assert_true(after.st_ino == before.st_ino);
    char *is = testutil_slurp(marker, NULL);
    assert_non_null(is);
    assert_string_equal(is, was);
    free(is);
    free(was);
}

/* The runs of the JSON dir/NAME.json: there must be n of them. */
static void read_runs(const char *name, runs_t *r, int n)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    char *json = testutil_slurp(path, NULL);
    assert_non_null(json);
    memset(r, 0, sizeof *r);
    assert_int_equal(json_each(json, "runs", on_run, r), n);
    free(json);
}

static void test_json_structure(void **state)
{
    (void)state;
    char path[128];
    assert_int_equal(bench(STEPS, "", "out"), 0);
    snprintf(path, sizeof path, "%s/out.json", dir);
    char *json = testutil_slurp(path, NULL);
    assert_non_null(json);

    summary_t s = {0};
    assert_int_equal(json_each(json, "summary", on_summary, &s), 1);
    assert_int_equal(s.steps, STEPS);
    assert_true(isfinite(s.ratio) && s.ratio > 0);
    /* --split's default, 4: tiny's batch of 16 sequences a replica in 4 microbatches of 4,
     * 2 x 4 a step; the same tokens as 2 batches of 16 (2 x 16 x 64 a step) */
    assert_int_equal(s.microbatches, 8);
    assert_int_equal(s.mb_sequences, 4);
    assert_true(s.tokens_per_run == (double)STEPS * 2 * 16 * 64);

    runs_t r = {0};
    assert_int_equal(json_each(json, "runs", on_run, &r), NRUNS);
    for (int i = 0; i < NRUNS; i++) assert_string_equal(r.name[i], run_names[i]);
    for (int i = 0; i < NRUNS; i++) {
        assert_true(isfinite(r.val_loss[i]) && r.val_loss[i] > 0);
        assert_int_equal(r.final_step[i], STEPS); /* both trained the same tokens */
        assert_true(r.npoints[i] >= 2);
        assert_true(r.tps[i] > 0);
        assert_int_equal(r.swarm[i], i == 1);
    }
    assert_true(fabs(r.ratio[1] - r.val_loss[1] / r.val_loss[0]) < 1e-3);
    assert_true(fabs(s.ratio - r.ratio[1]) < 1e-3);
    /* the swarm's wire: a sign-DeMo exchange is far below a byte per parameter per step */
    assert_true(isfinite(r.exch[1]) && r.exch[1] > 0 && r.exch[1] < 0.1);
    assert_true(isfinite(r.wire[1]) && r.wire[1] > 0);
    assert_true(r.has_kills[1]);
    /* what the total is made of, with no one-mechanism row: DeMo's own cost over AdamW and
     * the full swarm's over DeMo in one process, each the ratio of the runs' losses */
    costs_t c;
    assert_int_equal(read_costs("out", &c), 2);
    assert_string_equal(c.part[0], "optimizer");
    assert_true(fabs(c.cost[0] - (r.val_loss[2] / r.val_loss[0] - 1)) < 1e-4);
    assert_string_equal(c.part[1], "swarm");
    assert_true(fabs(c.cost[1] - (r.val_loss[1] / r.val_loss[2] - 1)) < 1e-4);
    assert_int_equal(c.seeds[0], 1);
    assert_int_equal(c.seeds[1], 1);

    points_t p = {.tokens_per_step = s.tokens_per_run / STEPS};
    for (int k = 0; k < NRUNS; k++)
        for (int i = 0; i <= STEPS; i++) p.loss[k][i] = NAN;
    assert_true(json_each(json, "points", on_point, &p) >= 4);
    assert_int_equal(p.bad, 0);
    for (int k = 0; k < NRUNS; k++) {
        assert_true(p.count[k] >= 2);
        assert_int_equal(p.last_step[k], STEPS); /* the curve ends at the final loss */
    }
    /* the same parts at each step of the loss table: the ratios of the points there; both
     * at the last step, where they are the final losses' */
    cost_points_t cp = {.pts = &p};
    assert_true(json_each(json, "cost_points", on_cost_point, &cp) >= 2);
    assert_int_equal(cp.bad, 0);
    assert_int_equal(cp.at_end, 2);
    free(json);

    struct stat st;
    snprintf(path, sizeof path, "%s/out.svg", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_true(st.st_size > 1000);

    /* --resume: every run finished, so none runs again; each is read from its marker,
     * which holds its measurement, but the swarm's, cut back to a marker without one (a
     * measurement that failed), is measured again on its stores: the same losses */
    snprintf(path, sizeof path, "%s/runs/swarm-full-s1337/done.txt", dir);
    assert_true(has_line(path, "measured "));
    keep_head(path, 5); /* rc, wall_s, cpu_s, build, args */
    assert_false(has_line(path, "measured "));
    runs_t again;
    assert_int_equal(bench(STEPS, "--resume", "again"), 0);
    assert_true(has_line(path, "measured ")); /* measured again, and marked so */
    read_runs("again", &again, NRUNS);
    for (int i = 0; i < NRUNS; i++) {
        assert_string_equal(again.name[i], run_names[i]);
        assert_false(r.resumed[i]);
        assert_true(again.resumed[i]);
        assert_true(fabs(again.val_loss[i] - r.val_loss[i]) < 1e-5);
        assert_true(r.build[i][0] && strcmp(r.build[i], "unknown")); /* the marker names it */
        assert_string_equal(again.build[i], r.build[i]);
        assert_int_equal(again.final_step[i], STEPS);
    }
    /* a run without its marker (stopped before its end) runs again, alone */
    snprintf(path, sizeof path, "%s/runs/demo-train-s1337/done.txt", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(bench(STEPS, "--resume", "third"), 0);
    read_runs("third", &again, NRUNS);
    for (int i = 0; i < NRUNS; i++) assert_int_equal(again.resumed[i], i != 2);
    assert_true(isfinite(again.val_loss[2]) && again.final_step[2] == STEPS);
    assert_int_equal(stat(path, &st), 0); /* marked again */
    /* --leave-one-out: the full swarm without one mechanism, here the lost stage (--only;
     * the cheapest: no rebuild to wait for), runs alone beside the markers read; its words
     * are the full swarm's but for the stage SIGKILLed, and its cost among the others is
     * the full swarm's loss over it, less one */
    assert_int_equal(bench(STEPS, "--resume --leave-one-out --only full-no-stage-lost", "wo"), 0);
    runs_t wo;
    read_runs("wo", &wo, NRUNS + 1);
    int w = 0;
    while (w < NRUNS + 1 && strcmp(wo.name[w], "full-no-stage-lost")) w++;
    assert_true(w < NRUNS + 1);
    assert_false(wo.resumed[w]);
    assert_true(wo.swarm[w] && wo.has_kills[w]); /* a swarm row: kills counted */
    assert_true(isfinite(wo.val_loss[w]) && wo.final_step[w] == STEPS);
    char full_args[1024], wo_args[1024], want[1024];
    snprintf(path, sizeof path, "%s/runs/swarm-full-s1337/done.txt", dir);
    marker_args(path, full_args, sizeof full_args);
    snprintf(path, sizeof path, "%s/runs/full-no-stage-lost-s1337/done.txt", dir);
    marker_args(path, wo_args, sizeof wo_args);
    const char *kill = strstr(full_args, " --kill-stage 1:random");
    assert_non_null(kill);
    snprintf(want, sizeof want, "%.*s%s", (int)(kill - full_args), full_args,
             kill + strlen(" --kill-stage 1:random"));
    assert_string_equal(wo_args, want);
    /* and it loses only the stage: its churn kill was drawn at the full swarm's step (the
     * stage's step is drawn with or without it; one done late may miss the run's end) */
    churn_t full_churn, wo_churn;
    churn_of("swarm-full", &full_churn);
    churn_of("full-no-stage-lost", &wo_churn);
    assert_true(full_churn.n <= 1 && wo_churn.n <= 1);
    if (full_churn.n && wo_churn.n) assert_int_equal(wo_churn.drawn[0], full_churn.drawn[0]);
    assert_int_equal(read_costs("wo", &c), 3);
    assert_string_equal(c.part[2], "stage-lost in all");
    assert_string_equal(wo.name[1], "swarm-full");
    assert_true(fabs(c.cost[2] - (wo.val_loss[1] / wo.val_loss[w] - 1)) < 1e-4);
    /* refused before any run: other options than the markers'; a split that does not
     * divide the config's batch; the run words setting the microbatches beside --split 4
     * (the held-out windows follow the split; the words after "--" take the rest) */
    snprintf(path, sizeof path, "%s/runs/adamw-s1337/done.txt", dir);
    assert_refused(STEPS + 2, "--resume", "other", path);
    assert_refused(STEPS, "--split 3", "split3", path);
    assert_refused(STEPS, "-- --accum 2", "accum2", path);
    /* and an --only name that is no row of the table: misspelt, or a row left off */
    assert_refused(STEPS, "--resume --only full-no-codex --leave-one-out", "only1", path);
    assert_refused(STEPS, "--resume --only full-no-codec", "only2", path);
    assert_refused(STEPS, "--resume --leave-one-out --kill-stage -1", "nostage", path);

    /* the markers alone stand for the runs: moved to another --dir without their stores,
     * every run is read from its marker, none runs again, and the numbers are the same */
    runs_t third = again;
    char from[80], to[80], cmd[512];
    snprintf(from, sizeof from, "%s/runs", dir);
    snprintf(to, sizeof to, "%s/moved", dir);
    assert_int_equal(rename(from, to), 0);
    snprintf(cmd, sizeof cmd, "rm -f %s/*/*.db %s/*/*.db-wal %s/*/*.db-shm", to, to, to);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "--resume --dir %s", to);
    assert_int_equal(bench(STEPS, cmd, "moved"), 0);
    read_runs("moved", &again, NRUNS);
    for (int i = 0; i < NRUNS; i++) {
        assert_true(again.resumed[i]);
        assert_true(fabs(again.val_loss[i] - third.val_loss[i]) < 1e-6);
        assert_int_equal(again.final_step[i], STEPS);
        assert_int_equal(again.npoints[i], third.npoints[i]);
        assert_int_equal(again.has_kills[i], third.has_kills[i]);
        assert_true(fabs(again.wire[i] - third.wire[i]) < 1e-6 || isnan(third.wire[i]));
    }
    snprintf(path, sizeof path, "%s/adamw-s1337/train.db", to);
    assert_int_not_equal(stat(path, &st), 0); /* read from the marker, no store made */

    /* --report runs nothing: with demo-train's marker gone, the other runs are read from
     * theirs and reported with the same numbers, demo-train is left out of the JSON (its
     * run not started: no marker, no store), and the report exits 0 */
    snprintf(path, sizeof path, "%s/demo-train-s1337/done.txt", to);
    assert_int_equal(unlink(path), 0);
    char report[160], svg[96];
    snprintf(svg, sizeof svg, "%s/out.svg", dir);
    assert_int_equal(unlink(svg), 0);
    snprintf(report, sizeof report, "--report --dir %s", to);
    assert_int_equal(bench(STEPS, report, "report"), 0);
    read_runs("report", &again, NRUNS - 1);
    for (int i = 0, k = 0; i < NRUNS; i++) {
        if (i == 2) continue; /* demo-train */
        assert_string_equal(again.name[k], run_names[i]);
        assert_true(again.resumed[k]);
        assert_true(fabs(again.val_loss[k] - third.val_loss[i]) < 1e-6);
        k++;
    }
    assert_int_not_equal(stat(path, &st), 0);
    assert_int_equal(read_costs("report", &c), 0); /* each part needs demo-train */
    cost_points_t none = {.pts = &p};
    assert_int_equal(read_array("report", "cost_points", on_cost_point, &none), 0);
    snprintf(path, sizeof path, "%s/demo-train-s1337/train.db", to);
    assert_int_not_equal(stat(path, &st), 0);
    assert_int_equal(stat(svg, &st), 0); /* the curves of what finished */
    /* and a --report of a directory that is not there is refused */
    snprintf(path, sizeof path, "%s/adamw-s1337/done.txt", to);
    snprintf(report, sizeof report, "--report --dir %s/nowhere", dir);
    assert_refused(STEPS, report, "nowhere", path);
    /* a marker that does not parse is refused, as other options are */
    snprintf(path, sizeof path, "%s/adamw-s1337/done.txt", to);
    FILE *f = fopen(path, "a");
    assert_non_null(f);
    fputs("point 1\n", f);
    fclose(f);
    assert_refused(STEPS, cmd, "garbled", path);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_learnXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_json_structure, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
