/* test_swarm.c — the swarm as a user runs it: real peer processes on loopback.
 * - a swarm of one peer per stage reproduces `train --stages S` loss for loss;
 * - 2 stages x 2 peers with DeMo and int8 activations learn as well as the
 *   single-process DeMo run, while one peer of a pool is killed with SIGKILL (nothing is
 *   lost, the pool keeps stepping) and a new peer joins and ends with the pool's hash;
 * - status --json lists exactly the live peers and pools;
 * - garbage on a peer's socket is rejected and counted while the peer keeps training.
 * Argument: the name of one test to run alone (ctest registers them one by one). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/rng.h"
#include "compress/codec.h"
#include "swarm/msg.h"
#include "swarm/status_client.h"
#include "testutil.h"

#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/st_swarmXXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(dir);
}

/* Starts `swarmtrain ARGS` with stdout and stderr into dir/NAME.log. */
static pid_t start(const char *name, const char *args)
{
    char log[256], cmd[4096];
    snprintf(log, sizeof log, "%s/%s.log", dir, name);
    snprintf(cmd, sizeof cmd, "exec %s %s", testutil_bin(), args);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits for pid up to seconds; returns its exit code, or -1 (killed) on timeout. */
static int finish(pid_t pid, double seconds)
{
    double end = clock_now() + seconds;
    int st;
    while (clock_now() < end) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        clock_sleep(0.05);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

static char *slurp(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* "step N loss X" lines of a log into loss[N]; returns how many. */
static int losses(const char *text, double *loss, int max)
{
    int n = 0;
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
        int step;
        double x;
        if (sscanf(p, "step %d loss %lf", &step, &x) == 2 && step >= 0 && step < max) {
            loss[step] = x;
            n++;
        }
    }
    return n;
}

static double value_after(const char *text, const char *key)
{
    const char *p = text ? strstr(text, key) : NULL;
    return p ? atof(p + strlen(key)) : NAN;
}

/* One peer per stage, AdamW, raw f32 on the wire, one microbatch in flight: the same
 * loss sequence as the single-process run, with the same extra settings (`more`). */
static void equivalent_with(int S, const char *more)
{
    enum { STEPS = 12 };
    char args[1024];
    snprintf(args, sizeof args, "train --stages %d --steps %d --batch 8 --threads 1 %s --data %s",
             S, STEPS, more, testutil_corpus());
    pid_t t = start("train", args);
    snprintf(args, sizeof args,
             "local --peers %d --stages %d --steps %d --batch 8 --in-flight 1 --replicas 1 "
             "--optimizer adamw --codec f32 --log-every 1 --quiet %s "
             "--dir %s/local --data %s",
             S, S, STEPS, more, dir, testutil_corpus());
    pid_t l = start("local", args);
    assert_int_equal(finish(t, 300), 0);
    assert_int_equal(finish(l, 300), 0);
    char *a = slurp("train.log"), *b = slurp("local/peer0.log");
    double la[STEPS], lb[STEPS];
    assert_int_equal(losses(a, la, STEPS), STEPS);
    assert_int_equal(losses(b, lb, STEPS), STEPS);
    for (int i = 0; i < STEPS; i++) {
        double rel = fabs(la[i] - lb[i]) / fabs(la[i]);
        if (rel > 1e-5) fail_msg("S=%d step %d: train %.6f swarm %.6f", S, i, la[i], lb[i]);
    }
    printf("S=%d %s: %d steps, swarm loss = train loss (last %.6f); val_loss train %.4f swarm "
           "%.4f\n",
           S, more, STEPS, la[STEPS - 1], value_after(a, "val_loss "), value_after(b, "val_loss "));
    free(a);
    free(b);
}

/* The swarm run just made (local/peer0.log, 4 stages, accum 4) had other losses in its
 * first `steps` steps than `train` without `what` (an option that changes the paths). */
static void assert_changed(int steps, const char *what)
{
    char args[1024];
    snprintf(args, sizeof args,
             "train --stages 4 --steps %d --batch 8 --threads 1 --accum 4 --data %s", steps,
             testutil_corpus());
    pid_t t = start("train", args);
    assert_int_equal(finish(t, 300), 0);
    char *a = slurp("train.log"), *b = slurp("local/peer0.log");
    double la[4] = {0}, lb[4] = {0};
    assert_int_equal(losses(a, la, steps), steps);
    assert_int_equal(losses(b, lb, steps), steps);
    int same = 1;
    for (int i = 0; i < steps; i++) same &= fabs(la[i] - lb[i]) < 1e-6;
    if (same) fail_msg("%s changed nothing: loss %.6f at step 0", what, la[0]);
    free(a);
    free(b);
}

static void equivalent(int S)
{
    equivalent_with(S, "");
}

/* SkipPipe: with --skip the paths (and so the losses) differ from a run without it, yet
 * train and the swarm run the same paths and average each stage's gradient over the
 * same microbatches. 4 microbatches a step, 4 stages: each middle stage skipped by 1. */
static void test_equivalent_skip(void **state)
{
    (void)state;
    equivalent_with(4, "--accum 4 --skip 0.25 --skip-stages 1");
    /* validation without stage 1 gives the same loss in both, and another than whole */
    char *va = slurp("train.log"), *vb = slurp("local/peer0.log");
    double sa = value_after(va, "val_loss_skip "), sb = value_after(vb, "val_loss_skip ");
    double wa = value_after(va, "val_loss ");
    printf("val_loss_skip (stage 1 left out): train %.4f swarm %.4f (whole model %.4f)\n", sa, sb,
           wa);
    assert_true(isfinite(sa) && isfinite(sb) && isfinite(wa));
    assert_true(fabs(sa - sb) <= 1e-4 * fabs(sa));
    assert_true(fabs(sa - wa) > 1e-5);
    free(va);
    free(vb);
    /* and the paths were taken: the same run without skipping has other losses */
    assert_changed(1, "--skip 0.25");
}

/* CheckFree+ swaps: half the microbatches swap stage 0's blocks with stage 1's or stage
 * 3's with stage 2's, so stage 0 or 3 serves them twice (in one slot, counting once); the
 * swarm's losses are the single-process run's, and not those of a run without swaps. */
static void test_equivalent_swap(void **state)
{
    (void)state;
    equivalent_with(4, "--accum 4 --swap 0.5");
    assert_changed(2, "--swap 0.5");
}

static void test_equivalent_2(void **state)
{
    (void)state;
    equivalent(2);
}

static void test_equivalent_4(void **state)
{
    (void)state;
    equivalent(4);
}

/* Stage-1 hashes from the peers' closing lines must all be equal. */
static void same_hashes(const char *text, int stage, int want)
{
    char needle[64], first[17] = "";
    int n = 0;
    snprintf(needle, sizeof needle, "peer: done: stage %d step ", stage);
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle)) {
        char hash[17];
        const char *h = strstr(p, " hash ");
        assert_non_null(h);
        assert_int_equal(sscanf(h, " hash %16s", hash), 1);
        if (!n++)
            strcpy(first, hash);
        else if (strcmp(first, hash))
            fail_msg("stage %d: replicas end with hashes %s and %s", stage, first, hash);
    }
    assert_int_equal(n, want);
}

/* 2 stages x 2 peers, DeMo, int8 activations; peer 3 (stage 1) is killed at step 40 and
 * a fifth peer joins stage 1 at step 60. The kill comes late enough that the victim has
 * long been contributing (microbatches are routed to it), so one is in flight to re-route. */
static void test_demo_swarm_with_fault(void **state)
{
    (void)state;
    enum { STEPS = 100 };
    char args[1024];
    snprintf(args, sizeof args,
             "train --stages 2 --batch 8 --replicas 2 --optimizer demo --steps %d --threads 2 "
             "--log-every 50 "
             "--data %s",
             STEPS, testutil_corpus());
    pid_t t = start("train", args);
    assert_int_equal(finish(t, 900), 0);
    snprintf(args, sizeof args,
             "local --peers 4 --stages 2 --batch 8 --replicas 2 --optimizer demo --codec int8 "
             "--steps %d "
             "--log-every 50 "
             "--kill 3:40 --join-at 60 --join-stage 1 --quiet --dir %s/local --data %s",
             STEPS, dir, testutil_corpus());
    pid_t l = start("local", args);
    int rc = finish(l, 900);
    char *a = slurp("train.log"), *out = slurp("local.log");
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    double vt = value_after(a, "val_loss "), vs = value_after(out, "val_loss ");
    const char *summary = strstr(out, "local: done");
    printf("%s", summary ? summary : out);
    printf(
        "DeMo R=2: single process val_loss %.4f, swarm (int8, one kill, one join) %.4f (%+.1f%%)\n",
        vt, vs, 100 * (vs - vt) / vt);
    assert_true(isfinite(vt) && isfinite(vs));
    assert_true(vs <= vt * 1.05);
    /* the kill happened, something was re-routed, and nothing was lost */
    assert_non_null(strstr(out, "local: fault: SIGKILL peer 3 (stage 1)"));
    assert_non_null(strstr(out, "first microbatch re-routed"));
    assert_non_null(strstr(out, "lost microbatches 0"));
    /* every survivor and the newcomer finished the run; each pool ends identical */
    char all[65536] = "";
    for (int i = 0; i < 5; i++) {
        char name[64];
        snprintf(name, sizeof name, "local/peer%d.log", i);
        char *s = slurp(name);
        if (i != 3 && !(s && strstr(s, "peer: done: stage")))
            fail_msg("peer %d did not finish:\n%s", i, s ? s : "");
        if (s && i != 3) strncat(all, strstr(s, "peer: done:"), sizeof all - strlen(all) - 1);
        free(s);
    }
    char needle[64];
    snprintf(needle, sizeof needle, "step %d hash", STEPS);
    for (const char *p = strstr(all, "peer: done:"); p; p = strstr(p + 1, "peer: done:"))
        assert_true(strncmp(strstr(p, "step "), needle, strlen(needle)) == 0);
    same_hashes(all, 0, 2);
    same_hashes(all, 1, 2); /* the survivor and the newcomer */
    free(a);
    free(out);
}

/* The `--demo-values sign` preset (issue 17: shared indices, the rmsprop update of the
 * aggregate, cosine) in a swarm of 2 stages x 2 replicas against the single-process run:
 * the same val_loss within 2% (measured: 3.8699 swarm, 3.8662 train), and the pools end
 * with identical parameters. `local --demo-local` is refused (train only). */
static void test_demo_preset_swarm(void **state)
{
    (void)state;
    enum { STEPS = 60 };
    char args[1024];
    snprintf(args, sizeof args,
             "train --stages 2 --batch 8 --replicas 2 --optimizer demo --demo-values sign "
             "--steps %d --threads 1 --log-every 10 --data %s",
             STEPS, testutil_corpus());
    pid_t t = start("train", args);
    snprintf(args, sizeof args,
             "local --peers 4 --stages 2 --batch 8 --replicas 2 --optimizer demo --demo-values "
             "sign --codec f32 --steps %d --log-every 10 --threads 1 --quiet --dir %s/local "
             "--data %s",
             STEPS, dir, testutil_corpus());
    pid_t l = start("local", args);
    assert_int_equal(finish(t, 600), 0);
    int rc = finish(l, 600);
    char *a = slurp("train.log"), *out = slurp("local.log");
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    assert_non_null(strstr(a, "update rmsprop"));
    double vt = value_after(a, "val_loss "), vs = value_after(out, "val_loss ");
    printf("sign preset, 2 stages x 2 replicas, %d steps: train val_loss %.4f, swarm %.4f "
           "(%+.2f%%)\n",
           STEPS, vt, vs, 100 * (vs - vt) / vt);
    assert_true(isfinite(vt) && isfinite(vs));
    assert_true(fabs(vs - vt) <= 0.02 * vt);
    char all[16384] = "";
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "local/peer%d.log", i);
        char *s = slurp(name);
        const char *d = s ? strstr(s, "peer: done:") : NULL;
        if (!d) fail_msg("peer %d did not finish:\n%s", i, s ? s : "");
        strncat(all, d, sizeof all - strlen(all) - 1);
        free(s);
    }
    same_hashes(all, 0, 2);
    same_hashes(all, 1, 2);
    free(a);
    free(out);
    /* local steps: refused by the peers with a clear reason */
    snprintf(args, sizeof args,
             "local --peers 2 --stages 2 --batch 8 --replicas 1 --optimizer demo --demo-values "
             "sign --demo-local 4 --steps 8 --threads 1 --quiet --dir %s/local2 --data %s",
             dir, testutil_corpus());
    pid_t l2 = start("local2", args);
    assert_int_equal(finish(l2, 60), 2);
    char *p0 = slurp("local2.log");
    assert_non_null(p0);
    assert_non_null(strstr(p0, "runs in train only"));
    free(p0);
}

/* Kills from outside at a random moment (local --kill random): a 6-peer, 3-stage swarm
 * where the victim is the founding peer (fault seed 104 picks peer 0, a stage-0 peer),
 * then a stage-2 peer (seed 102); the moment within the run is random (its step is drawn
 * from the seed, its instant falls wherever the peers are then). Each run finishes with
 * a held-out loss, exit 0, nothing lost, and the summary shows the kill and the pool
 * stepping again after it. */
static void outside_kill(const char *name, int seed, const char *victim)
{
    char args[1024];
    snprintf(args, sizeof args,
             "local --peers 6 --stages 3 --layers 6 --steps 45 --log-every 20 --kill random "
             "--fault-seed %d --quiet --dir %s/%s --data %s",
             seed, dir, name, testutil_corpus());
    char logname[64];
    snprintf(logname, sizeof logname, "%s.log", name);
    pid_t l = start(name, args);
    int rc = finish(l, 600);
    char *out = slurp(logname);
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    const char *k = strstr(out, "local: fault: SIGKILL ");
    printf("%s", k ? k : out);
    assert_non_null(k);
    assert_non_null(strstr(k, victim));
    assert_non_null(strstr(out, "lost microbatches 0"));
    assert_non_null(strstr(out, "1 kills, 0 restarts"));
    assert_non_null(strstr(out, "MTTR"));
    assert_non_null(strstr(out, "no peer died unplanned"));
    free(out);
}

static void test_outside_kills(void **state)
{
    (void)state;
    outside_kill("founder", 104, "peer 0 (stage 0, the founding peer)");
    outside_kill("stage2", 102, "(stage 2)");
}

/* Every peer of one stage SIGKILLed from outside at a step and moment drawn from a seed
 * (the clock's, printed): a peer of a neighbouring pool of two moves there and rebuilds
 * it (CheckFree in the middle, CheckFree+ at the ends), and the run ends with a held-out
 * loss and nothing lost. `more`: further run options. */
static void kill_stage(int stage, unsigned seed, const char *how, const char *more)
{
    char name[32], args[1024], logname[64];
    snprintf(name, sizeof name, "stage%d", stage);
    snprintf(args, sizeof args,
             "local --peers 6 --stages 3 --layers 6 --steps 50 --log-every 10 --kill-stage "
             "%d:random --fault-seed %u --quiet %s --dir %s/%s --data %s",
             stage, seed, more, dir, name, testutil_corpus());
    snprintf(logname, sizeof logname, "%s.log", name);
    printf("stage %d lost, --fault-seed %u %s\n", stage, seed, more);
    pid_t l = start(name, args);
    int rc = finish(l, 600);
    char *out = slurp(logname);
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    char want[64];
    snprintf(want, sizeof want, "SIGKILL every peer of stage %d from outside", stage);
    if (!strstr(out, want)) fail_msg("no kill:\n%s", out);
    snprintf(want, sizeof want, "recovered: stage %d at step", stage);
    const char *r = strstr(out, want);
    if (!r || !strstr(r, how)) fail_msg("stage %d not rebuilt by %s:\n%s", stage, how, out);
    printf("%.*s", (int)(strchr(r, '\n') - r + 1), r);
    assert_non_null(strstr(out, "lost microbatches 0"));
    assert_non_null(strstr(out, "2 kills"));
    assert_non_null(strstr(out, "no peer died unplanned"));
    assert_true(value_after(out, "val_loss ") < 3.5); /* it learned: the initial is ~5.5 */
    free(out);
    if (!*more) return;
    /* the swaps were taken: peers of the stage served second visits before the kill */
    long revisits = 0;
    for (int i = 0; i < 6; i++) {
        char pl[96];
        snprintf(pl, sizeof pl, "%s/peer%d.log", name, i);
        char *log = slurp(pl);
        for (const char *q = log; q && (q = strstr(q, " revisits ")); q++) revisits += atol(q + 10);
        free(log);
    }
    printf("revisits served (the peers that lived to the end): %ld\n", revisits);
    assert_true(revisits > 0);
}

/* The middle stage, and one end stage drawn from the seed (both ends, and many more
 * moments, in the simulator: sim --faults stage), the end stage's run with CheckFree+'s
 * swaps (--swap 0.5: stage 0 or 2 serves half the microbatches twice, up to the kill). */
static void test_lost_stages(void **state)
{
    (void)state;
    unsigned seed = testutil_seed();
    kill_stage(1, seed, "by CheckFree: weighted average of stages 0", "");
    if (seed % 2)
        kill_stage(0, seed + 1, "by CheckFree+: blocks copied from stage 1, embedding from the copy",
                   "--swap 0.5");
    else
        kill_stage(2, seed + 1,
                   "by CheckFree+: blocks copied from stage 1, final norm and head from the copy",
                   "--swap 0.5");
}

/* One peer per stage: a stage lost at a seeded random step has nobody to move over, so
 * its peer comes back 3 s later with its store, and with two candidates, its own
 * checkpoint and CheckFree from the neighbours, it judges them on held-out batches and
 * takes the lower loss. Validation during the run (--val-every) is listed by local. */
static void test_judged(void **state)
{
    (void)state;
    unsigned seed = testutil_seed();
    char args[1024];
    snprintf(args, sizeof args,
             "local --peers 3 --stages 3 --layers 6 --steps 60 --log-every 20 --checkpoint-every 4 --checkpoint-budget 100 "
             "--val-every 15 --stage-failures 1:3 --fault-seed %u --quiet --dir %s/judged --data %s",
             seed, dir, testutil_corpus());
    printf("--fault-seed %u\n", seed);
    pid_t l = start("judged", args);
    int rc = finish(l, 600);
    char *out = slurp("judged.log");
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    assert_non_null(strstr(out, "lost microbatches 0"));
    assert_non_null(strstr(out, "no peer died unplanned"));
    /* the judgement, in the rebuilt stage's peer log: "held-out loss A against B for ..." */
    const char *r = strstr(out, "recovered: stage ");
    if (!r) fail_msg("no recovery:\n%s", out);
    printf("%.*s", (int)(strchr(r, '\n') - r + 1), r);
    const char *h = strstr(r, "held-out loss ");
    if (!h || h > strchr(r, '\n')) fail_msg("the candidates were not judged:\n%s", out);
    double chosen = NAN, other = NAN;
    assert_int_equal(sscanf(h, "held-out loss %lf against %lf", &chosen, &other), 2);
    assert_true(isfinite(chosen) && isfinite(other));
    assert_true(chosen <= other); /* the lower loss wins */
    assert_true(strstr(r, "its own checkpoint of step") != NULL || strstr(r, "CheckFree") != NULL);
    /* validation during the run: steps 15, 30 and 45 (a round a kill cut short is given up) */
    int nval = 0;
    for (const char *q = out; (q = strstr(q, "local: val step ")); q++) {
        double v = value_after(q, "val_loss ");
        assert_true(isfinite(v) && v > 0 && v < 10);
        nval++;
    }
    if (nval < 2) fail_msg("%d validations during the run:\n%s", nval, out);
    assert_true(value_after(out, "done in ") > 0);
    free(out);
}

/* Prints, for a failure of test_resume, what each peer of the cut run logged from the
 * resumed run's start on (its log is appended to), and the resumed run's own output. */
static void resume_dump(const char *resumed_out)
{
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut/peer%d.log", i);
        char *pl = slurp(name);
        const char *r = pl ? strstr(pl, "resume: stage ") : NULL;
        if (!r && pl) r = pl + (strlen(pl) > 3000 ? strlen(pl) - 3000 : 0);
        printf("---- %s (from the resumed run's start)\n%.6000s\n", name, r ? r : "");
        free(pl);
    }
    printf("---- resumed.log\n%s\n", resumed_out ? resumed_out : "");
}

/* A whole swarm stopped with Ctrl-C (SIGINT to `local` at a moment drawn from the clock's
 * seed) and started again with --resume continues from the newest step every stage has a
 * checkpoint of, and ends within 2% of the held-out loss of the same run uninterrupted.
 * The seed replays the drawn moment (ST_TEST_SEED=seed); where in a step the signal lands
 * also depends on the machine's load. */
static void test_resume(void **state)
{
    (void)state;
    unsigned seed = testutil_seed();
    srand(seed);
    char args[1024];
    /* shared DeMo indices: with top-k ones, who counted what in the first steps moves
     * the final loss by up to 2% either way from run to run (security_poison saw it) */
    const char *common = "local --peers 4 --stages 2 --steps 80 --log-every 20 "
                         "--checkpoint-every 10 --demo-index shared";
    snprintf(args, sizeof args, "%s --quiet --dir %s/whole --data %s", common, dir,
             testutil_corpus());
    pid_t l = start("whole", args);
    /* Ctrl-C once the run's progress line shows the drawn step, and a drawn moment later */
    int target = 15 + rand() % 50;
    double extra = (double)rand() / RAND_MAX;
    printf("Ctrl-C at step %d + %.2f s (seed %u: ST_TEST_SEED=%u replays the moment)\n", target,
           extra, seed, seed);
    int rc = finish(l, 600);
    if (rc != 0) fail_msg("the uninterrupted run exited %d (seed %u)", rc, seed);
    char *out = slurp("whole.log");
    double whole = value_after(out, "val_loss ");
    free(out);
    snprintf(args, sizeof args, "%s --dir %s/cut --data %s", common, dir, testutil_corpus());
    l = start("cut", args);
    for (double end = clock_now() + 300; clock_now() < end;) {
        char *o = slurp("cut.log");
        const char *last = NULL, *q = o;
        while (q && (q = strstr(q, "] step "))) last = q++;
        int now = last ? atoi(last + 7) : 0;
        free(o);
        if (now >= target) break;
        clock_sleep(0.1);
    }
    clock_sleep(extra);
    kill(l, SIGINT);
    rc = finish(l, 60);
    out = slurp("cut.log");
    if (rc != 130) {
        printf("%s", out ? out : "");
        free(out); /* fail_msg does not return */
        fail_msg("the interrupted run exited %d (seed %u)", rc, seed);
    }
    free(out);
    snprintf(args, sizeof args, "local --resume %s/cut --quiet", dir);
    l = start("resumed", args);
    rc = finish(l, 300);
    out = slurp("resumed.log");
    if (rc != 0) {
        resume_dump(out);
        free(out); /* fail_msg does not return */
        fail_msg("the resumed run failed (%d) (seed %u)", rc, seed);
    }
    double resumed = value_after(out, "val_loss ");
    /* The swarm resumed at one step S, the newest every stage has a checkpoint of: in each
     * stage a peer restored its own checkpoint of S. A mate whose store has none of S took
     * the state of S from that peer instead ("state: downloaded"): the members of a pool
     * leave a step apart when Ctrl-C lands between one applying step S's update (and
     * writing S as its last checkpoint) and the other doing so; and a mate that has not
     * decided yet when the other serves downloads from it (resume.c, state.c). Peer 0 is
     * not always the one that restores. */
    long long agreed = -1;
    int restored[2] = {0, 0}, ok = 1;
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "cut/peer%d.log", i);
        char *pl = slurp(name);
        const char *r = pl ? strstr(pl, "resume: stage ") : NULL;
        const char *own = r ? strstr(r, "resumed: stage ") : NULL;
        const char *dl = r ? strstr(r, "state: downloaded stage ") : NULL;
        int st = -1;
        long long step = -1;
        /* what it had and what it was told: "resume: stage S, N checkpoint(s) in DB at step
         * A, B, C; ..." and, when the agreed step is not among them, "resume: agreed on ..." */
        for (const char *q = r; q && (q = strstr(q, "resume: ")) && q < (dl ? dl : q + 1);
             q++) {
            const char *e = strchr(q, '\n');
            printf("peer %d: %.*s\n", i, e ? (int)(e - q) : 200, q);
        }
        if (own && (!dl || own < dl) &&
            sscanf(own, "resumed: stage %d from this peer's checkpoint of step %lld", &st,
                   &step) == 2 && st >= 0 && st < 2) {
            restored[st]++;
            if (agreed >= 0 && step != agreed) ok = 0;
            agreed = step;
            printf("peer %d: stage %d from its own checkpoint of step %lld\n", i, st, step);
        } else if (dl && sscanf(dl, "state: downloaded stage %d at step %lld", &st, &step) == 2) {
            printf("peer %d: stage %d downloaded from a mate at step %lld\n", i, st, step);
        } else {
            printf("peer %d: neither its own checkpoint nor a mate's state\n", i);
            ok = 0;
        }
        free(pl);
    }
    if (!ok || !restored[0] || !restored[1]) {
        resume_dump(out);
        free(out); /* fail_msg does not return */
        fail_msg("the swarm did not resume from its checkpoints at one step (seed %u)", seed);
    }
    free(out);
    printf("resumed at step %lld: val_loss %.4f; uninterrupted: %.4f (%+.2f%%)\n", agreed,
           resumed, whole, 100 * (resumed / whole - 1));
    /* the state each peer left with at Ctrl-C, or the newest periodic checkpoint when the
     * stages stopped a step apart: never older than the last multiple of 10 */
    if (!(agreed >= target / 10 * 10 && agreed <= target + 20))
        fail_msg("resumed at step %lld, Ctrl-C was at step %d (seed %u)", agreed, target, seed);
    if (!(fabs(resumed / whole - 1) < 0.02))
        fail_msg("val_loss %.4f resumed against %.4f uninterrupted (seed %u)", resumed, whole,
                 seed);
}

/* A preempted peer comes back with its disk: the only peer of stage 1 is killed, and the
 * same peer (same store, so the same identity) joins again once the swarm noticed. Nobody
 * else holds stage 1: with checkpoints it judges its newest one against CheckFree(+) on
 * held-out batches and keeps the lower loss; without, it rebuilds by CheckFree+. The run
 * finishes with nothing lost and its store shows the checkpoints and the events. */
static double revive(const char *name, const char *extra, char **out)
{
    char args[1024];
    snprintf(args, sizeof args,
             "local --peers 2 --stages 2 --batch 8 --steps 80 --log-every 10 --kill 1:30 "
             "--join-at 30 --revive --quiet --dir %s/%s --data %s %s",
             dir, name, testutil_corpus(), extra);
    char logname[64];
    snprintf(logname, sizeof logname, "%s.log", name);
    pid_t l = start(name, args);
    int rc = finish(l, 600);
    *out = slurp(logname);
    assert_non_null(*out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, *out);
    assert_non_null(strstr(*out, "(the killed peer again, with its store)"));
    assert_non_null(strstr(*out, "lost microbatches 0"));
    return value_after(*out, "val_loss ");
}

static void test_revive_from_checkpoint(void **state)
{
    (void)state;
    char *with = NULL, *without = NULL;
    double v_ck = revive("ck", "--checkpoint-every 10", &with);
    double v_init = revive("init", "--checkpoint-every 0", &without);
    printf("stage 1 revived with checkpoints: val_loss %.4f; without: %.4f\n", v_ck, v_init);
    char *log = slurp("ck/peer2.log");
    assert_non_null(log);
    const char *r = strstr(log, "recovered: stage 1 at step ");
    if (!r || !strstr(r, "held-out loss ")) fail_msg("the revived peer did not judge:\n%s", log);
    printf("%.*s", (int)(strchr(r, '\n') - r + 1), r);
    long long at = -1, ck_step = -1;
    double chosen = NAN, other = NAN;
    assert_int_equal(sscanf(r, "recovered: stage 1 at step %lld", &at), 1);
    const char *c = strstr(r, "checkpoint of step ");
    assert_non_null(c);
    assert_int_equal(sscanf(c, "checkpoint of step %lld", &ck_step), 1);
    assert_true(ck_step >= 10 && ck_step % 10 == 0 && ck_step <= at);
    assert_int_equal(sscanf(strstr(r, "held-out loss "), "held-out loss %lf against %lf", &chosen,
                            &other),
                     2);
    assert_true(chosen <= other);
    assert_non_null(strstr(log, "peer: done: stage 1 step 80"));
    free(log);
    /* without checkpoints the same peer rebuilds stage 1 from stage 0 and the copy */
    log = slurp("init/peer2.log");
    assert_non_null(log);
    assert_null(strstr(log, "held-out loss"));
    assert_non_null(strstr(log, "by CheckFree+: blocks copied from stage 0"));
    free(log);
    /* the store, as the status tool shows it */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s status --db %s/ck/peer1.db --json > %s/ck/status.json",
             testutil_bin(), dir, dir);
    assert_int_equal(system(cmd), 0);
    char *js = slurp("ck/status.json");
    assert_non_null(js);
    assert_non_null(strstr(js, "\"kind\":\"joined\""));
    assert_non_null(strstr(js, "\"kind\":\"recovered_stage\""));
    assert_non_null(strstr(js, "\"kind\":\"left\""));
    assert_non_null(strstr(js, "\"stage\":1,\"step\":80,")); /* the last step's checkpoint */
    free(js);
    assert_true(isfinite(v_ck) && isfinite(v_init) && v_ck < 3.5 && v_init < 3.5);
    free(with);
    free(without);
}

/* ids printed by each peer ("peer: id HEX") */
static void peer_id(const char *log, char *hex)
{
    char *s = NULL;
    for (int tries = 0; tries < 200; tries++) {
        free(s);
        s = slurp(log);
        if (s && strstr(s, "peer: id ")) break;
        clock_sleep(0.05);
    }
    assert_non_null(s);
    const char *p = strstr(s, "peer: id ");
    assert_non_null(p);
    assert_int_equal(sscanf(p, "peer: id %64s", hex), 1);
    free(s);
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(s, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static long long json_num(const char *json, const char *key)
{
    const char *p = strstr(json, key);
    return p ? atoll(p + strlen(key)) : -1;
}

/* status --json of a live swarm: exactly the peers that run, and their pools. */
static void test_status_json(void **state)
{
    (void)state;
    char args[1024], ep[64], ids[3][65];
    int port = 20000 + (int)(getpid() % 20000);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(args, sizeof args,
             "peer --new --listen %s --stages 2 --steps 100000 --batch 2 --threads 1 --data %s", ep,
             testutil_corpus());
    pid_t p0 = start("p0", args);
    peer_id("p0.log", ids[0]);
    snprintf(args, sizeof args, "peer --join %s --listen tcp://127.0.0.1:%d --stage 1 --threads 1",
             ep, port + 1);
    pid_t p1 = start("p1", args);
    peer_id("p1.log", ids[1]);
    snprintf(args, sizeof args, "peer --join %s --listen tcp://127.0.0.1:%d --stage 1 --threads 1",
             ep, port + 2);
    pid_t p2 = start("p2", args);
    peer_id("p2.log", ids[2]);
    clock_sleep(1.5); /* a few gossip rounds */
    char cmd[512], *json;
    snprintf(cmd, sizeof cmd, "%s status --connect %s --json > %s/status.json 2>&1", testutil_bin(),
             ep, dir);
    assert_int_equal(system(cmd), 0);
    json = slurp("status.json");
    assert_non_null(json);
    assert_int_equal(count(json, "\"id\":"), 3);
    for (int i = 0; i < 3; i++) assert_non_null(strstr(json, ids[i]));
    assert_non_null(strstr(json, "{\"stage\":0,\"peers\":1,"));
    assert_non_null(strstr(json, "{\"stage\":1,\"peers\":2,"));
    assert_int_equal(count(json, "\"state\":\"serving\""), 3);
    /* the answering peer's own traffic, by kind: gossip at least (membership), both ways */
    assert_non_null(strstr(json, "\"wire\":[{\"kind\":\"activations\",\"in\":"));
    const char *memb = strstr(json, "{\"kind\":\"membership\",\"in\":");
    assert_non_null(memb);
    assert_true(atoll(memb + strlen("{\"kind\":\"membership\",\"in\":")) > 0);
    assert_true(json_num(memb, "\"out\":") > 0);
    /* every member's traffic by kind, as each member answered for itself */
    const char *pw = strstr(json, "\"peer_wire\":[");
    assert_non_null(pw);
    for (int i = 0; i < 3; i++) {
        char row[256];
        snprintf(row, sizeof row, "{\"peer\":\"%s\",", ids[i]);
        const char *r = strstr(pw, row);
        if (!r) fail_msg("no wire counts of peer %s:\n%s", ids[i], pw);
        const char *c = strstr(r, "\"kind\":\"membership\",\"in\":");
        assert_non_null(c);
        assert_true(atoll(c + strlen("\"kind\":\"membership\",\"in\":")) > 0);
    }
    assert_int_equal(count(pw, "\"kind\":\"exchange\""), 3);
    free(json);
    /* the table form too */
    snprintf(cmd, sizeof cmd, "%s status --connect %s > %s/status.txt 2>&1", testutil_bin(), ep,
             dir);
    assert_int_equal(system(cmd), 0);
    json = slurp("status.txt");
    assert_non_null(strstr(json, "pools:"));
    assert_non_null(strstr(json, "peers:"));
    printf("%s", json);
    assert_non_null(strstr(json, "wire by peer"));
    assert_non_null(strstr(json, " exchange "));
    for (int i = 0; i < 3; i++) {
        char row[32];
        snprintf(row, sizeof row, "\n  %.16s ", ids[i]);
        assert_int_equal(count(json, row), 2); /* in the peers table and the wire table */
    }
    free(json);
    /* one leaves (SIGTERM): it exits 0 and disappears from the list */
    kill(p2, SIGTERM);
    assert_int_equal(finish(p2, 30), 0);
    clock_sleep(0.8);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s status --connect %s --json > %s/status.json 2>&1", testutil_bin(),
             ep, dir);
    assert_int_equal(system(cmd), 0);
    json = slurp("status.json");
    assert_int_equal(count(json, "\"id\":"), 2);
    assert_null(strstr(json, ids[2]));
    assert_non_null(strstr(json, "{\"stage\":1,\"peers\":1,"));
    free(json);
    kill(p1, SIGTERM);
    kill(p0, SIGTERM);
    assert_int_equal(finish(p1, 30), 0);
    assert_int_equal(finish(p0, 30), 0);
}

/* `local` whose peer cannot start (its store's path is a directory) while the swarm
 * starts (issue 24): the others start without it once the table has settled (join.h:
 * wait_peers is a minimum with a timeout) and finish the run, exit 0; local's summary
 * (DIR/summary.json) names the peer that died, and its log its own words. */
static void test_local_start_failure(void **state)
{
    (void)state;
    char sub[128], args[1024];
    snprintf(sub, sizeof sub, "%s/run", dir);
    assert_int_equal(mkdir(sub, 0755), 0);
    snprintf(args, sizeof args, "%s/peer2.db", sub);
    assert_int_equal(mkdir(args, 0755), 0);
    snprintf(args, sizeof args,
             "local --peers 4 --stages 2 --steps 5 --threads 1 --dir %s --data %s", sub,
             testutil_corpus());
    pid_t p = start("lf", args);
    /* the start waits JOIN_START_S (15 s) of a settled table, then 5 steps */
    assert_int_equal(finish(p, 120), 0);
    char *sum = slurp("run/summary.json");
    assert_non_null(sum);
    assert_non_null(strstr(sum, "\"unplanned\":[{\"peer\":2,\"stage\":0,\"exit\":1}]"));
    assert_null(strstr(sum, "\"val_loss\":null"));
    assert_int_equal(json_num(sum, "\"lost\":"), 0);
    free(sum);
    char *log = slurp("run/peer2.log");
    assert_non_null(log);
    assert_non_null(strstr(log, "peer2.db: open:")); /* its own reason */
    free(log);
}

/* A peer SIGKILLed from outside at a moment drawn from the fault seed while the swarm
 * starts (`local --kill start`, issue 24): the run goes on without it and finishes with
 * nothing lost; the summary counts the kill and no unplanned death. Two seeds: two
 * victims and moments. */
static void test_local_kill_start(void **state)
{
    (void)state;
    for (int seed = 1; seed <= 2; seed++) {
        char sub[128], args[1024], name[32], sj[64];
        snprintf(sub, sizeof sub, "%s/ks%d", dir, seed);
        snprintf(args, sizeof args,
                 "local --peers 4 --stages 2 --steps 5 --threads 1 --kill start --fault-seed %d "
                 "--dir %s --data %s",
                 seed, sub, testutil_corpus());
        snprintf(name, sizeof name, "ks%d", seed);
        pid_t p = start(name, args);
        if (finish(p, 120) != 0) fail_msg("local --kill start --fault-seed %d failed", seed);
        snprintf(sj, sizeof sj, "ks%d/summary.json", seed);
        char *sum = slurp(sj);
        assert_non_null(sum);
        assert_int_equal(json_num(sum, "\"kills\":"), 1);
        assert_int_equal(json_num(sum, "\"lost\":"), 0);
        assert_non_null(strstr(sum, "\"unplanned\":[]"));
        assert_null(strstr(sum, "\"val_loss\":null"));
        free(sum);
    }
}

/* A peer frozen from outside (SIGSTOP) for 8 s at a moment drawn from the fault seed, then
 * woken (SIGCONT; `local --pause`, issue 24): the others go on without it, it comes back
 * (its silence across the pause is not taken for the others' death; it re-syncs with its
 * pool), and the run finishes with nothing lost, exit 0; a peer that woke after the run's
 * end is stopped by local (stopped_late), not waited for. */
static void test_local_pause(void **state)
{
    (void)state;
    char sub[128], args[1024];
    snprintf(sub, sizeof sub, "%s/pz", dir);
    snprintf(args, sizeof args,
             "local --peers 4 --stages 2 --steps 180 --threads 1 --pause random:8 --fault-seed 2 "
             "--dir %s --data %s",
             sub, testutil_corpus());
    pid_t p = start("pz", args);
    assert_int_equal(finish(p, 400), 0);
    char *sum = slurp("pz/summary.json");
    assert_non_null(sum);
    assert_int_equal(json_num(sum, "\"woken\":"), 1);
    assert_true(json_num(sum, "\"paused\":") >= 0);
    assert_int_equal(json_num(sum, "\"lost\":"), 0);
    assert_non_null(strstr(sum, "\"unplanned\":[]"));
    assert_null(strstr(sum, "\"val_loss\":null"));
    free(sum);
}

/* A stage that nobody can rebuild (issue 24): 3 peers, 3 stages, every peer of stage 1
 * SIGKILLed from outside at a drawn moment; its neighbouring pools have one member each,
 * so none may move. local says so and stops within ~30 s of the loss, exit 3, and its
 * summary.json names the stage. */
static void test_local_orphan_stage(void **state)
{
    (void)state;
    char sub[128], args[1024];
    snprintf(sub, sizeof sub, "%s/orphan", dir);
    snprintf(args, sizeof args,
             "local --peers 3 --stages 3 --layers 6 --steps 140 --threads 1 --kill-stage 1:random "
             "--fault-seed 1 --quiet --dir %s --data %s",
             sub, testutil_corpus());
    pid_t p = start("orphan", args);
    assert_int_equal(finish(p, 300), 3);
    char *sum = slurp("orphan/summary.json");
    assert_non_null(sum);
    assert_int_equal(json_num(sum, "\"orphan_stage\":"), 1);
    free(sum);
}

/* Garbage on a peer's socket: rejected, counted, and training goes on. */
static void test_garbage_rejected(void **state)
{
    (void)state;
    char args[1024], ep[64];
    int port = 20000 + (int)((getpid() + 7777) % 20000);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
    snprintf(args, sizeof args,
             "peer --new --listen %s --stages 1 --steps 100000 --batch 2 --threads 1 --data %s", ep,
             testutil_corpus());
    pid_t p0 = start("g0", args);
    char hex[65], *json = NULL, err[256];
    peer_id("g0.log", hex);
    clock_sleep(0.5);
    assert_int_equal(status_client_fetch(ep, 3000, &json, err), 0);
    long long step0 = json_num(json, "\"step\":");
    free(json);

    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    uint8_t id[MSG_ID_LEN];
    memset(id, 0xab, sizeof id);
    zmq_setsockopt(s, ZMQ_ROUTING_ID, id, sizeof id);
    assert_int_equal(zmq_connect(s, ep), 0);
    int sent = 0;
    rng_t r;
    rng_seed(&r, 3);
    /* random bytes of random lengths */
    for (int i = 0; i < 50; i++, sent++) {
        uint8_t junk[300];
        size_t n = (size_t)rng_below(&r, sizeof junk);
        for (size_t j = 0; j < n; j++) junk[j] = (uint8_t)rng_next(&r);
        zmq_send(s, junk, n, 0);
    }
    /* a valid FWD header, truncated at every length */
    msg_t m = {.type = MSG_FWD, .stage = 0, .nroute = 0};
    memcpy(m.sender, id, MSG_ID_LEN);
    uint8_t hdr[MSG_HEADER_MAX];
    size_t len;
    assert_int_equal(msg_encode(&m, hdr, sizeof hdr, &len, err), 0);
    for (size_t cut = 0; cut < len; cut++, sent++) zmq_send(s, hdr, cut, 0);
    /* whole but from the wrong swarm, wrong version, and with missing payload frames */
    m.swarm = 0x1234;
    assert_int_equal(msg_encode(&m, hdr, sizeof hdr, &len, err), 0);
    zmq_send(s, hdr, len, ZMQ_SNDMORE);
    zmq_send(s, "x", 1, ZMQ_SNDMORE);
    zmq_send(s, "y", 1, 0);
    sent++;
    hdr[3] = 9;
    zmq_send(s, hdr, len, 0);
    sent++;
    hdr[3] = MSG_VERSION;
    zmq_send(s, hdr, len, 0); /* no payloads */
    sent++;
    /* a header claiming another sender than its connection */
    memset(m.sender, 0xcd, MSG_ID_LEN);
    m.swarm = 0;
    m.type = MSG_GOSSIP;
    assert_int_equal(msg_encode(&m, hdr, sizeof hdr, &len, err), 0);
    zmq_send(s, hdr, len, ZMQ_SNDMORE);
    zmq_send(s, "\0\0\0\0", 4, 0);
    sent++;
    clock_sleep(1.0);
    json = NULL;
    assert_int_equal(status_client_fetch(ep, 3000, &json, err), 0);
    long long rejected = json_num(json, "\"rejected\":"), step1 = json_num(json, "\"step\":");
    printf("garbage: %d bad messages sent, %lld rejected; step %lld -> %lld\n", sent, rejected,
           step0, step1);
    free(json);
    assert_true(rejected >= sent);
    clock_sleep(1.0);
    json = NULL;
    assert_int_equal(status_client_fetch(ep, 3000, &json, err), 0);
    long long step2 = json_num(json, "\"step\":");
    free(json);
    assert_true(step2 > step1 && step1 >= step0); /* still training */
    zmq_close(s);
    zmq_ctx_term(ctx);
    kill(p0, SIGTERM);
    assert_int_equal(finish(p0, 30), 0);
}

/* The wire counted by kind (net.c, run.c, local's summary): a 2 x 2 DeMo swarm with int8
 * activations. Each microbatch crosses one stage boundary once each way, so activation
 * bytes per token are one int8 tensor + its targets + a FWD header per microbatch, and
 * gradients one int8 tensor + a BWD header (re-sends, if any, add a little); the DeMo
 * exchange and the gossip are there (the issue: "wire 0.0 bytes per token" for a DeMo
 * pool, whose exchange was not counted). */
static void test_wire_by_kind(void **state)
{
    (void)state;
    enum { STEPS = 30, B = 8, T = 64, C = 64, M = 2, VAL = 2 }; /* tiny: seq 64, dim 64 */
    char args[1024];
    snprintf(args, sizeof args,
             "local --peers 4 --stages 2 --config tiny --batch %d --replicas 2 --optimizer demo "
             "--codec int8 --steps %d --val-batches %d --log-every 10 --quiet --dir %s/local --data %s",
             B, STEPS, VAL, dir, testutil_corpus());
    pid_t l = start("local", args);
    int rc = finish(l, 300);
    char *out = slurp("local.log");
    assert_non_null(out);
    if (rc != 0) fail_msg("local failed (%d):\n%s", rc, out);
    const char *line = strstr(out, "local: wire bytes per token");
    if (!line) fail_msg("no wire line:\n%s", out);
    printf("%.*s\n", (int)strcspn(line, "\n"), line);
    double act = value_after(line, "activations "), grad = value_after(line, "gradients "),
           exch = value_after(line, "exchange "), ctl = value_after(line, "control "),
           memb = value_after(line, "membership "), total = value_after(line, "total ");
    int64_t shape[3] = {B, T, C};
    codec_params_t cp = {0};
    double enc = (double)codec_encoded_size(CODEC_INT8, &cp, shape, 3);
    /* per training token; the validation batches at the end go forward too (a BWD of a
     * validation batch carries no gradient, only a loss in its header) */
    double tokens = (double)STEPS * M * B * T;
    double want_act = (STEPS * M + VAL) * (enc + 4.0 * B * T + 86 + 32) / tokens,
           want_grad = STEPS * M * (enc + 86 + 32) / tokens;
    printf("expected about: activations %.1f, gradients %.1f bytes per token\n", want_act,
           want_grad);
    assert_true(act >= 0.99 * want_act && act <= 1.2 * want_act);
    assert_true(grad >= 0.99 * want_grad && grad <= 1.2 * want_grad);
    assert_true(exch > 0);
    assert_true(ctl > 0);
    assert_true(memb > 0); /* gossip, HELLO, WELCOME, LEAVE: a kind of its own */
    double sum = act + grad + exch + value_after(line, "state ") + ctl + memb;
    assert_true(total >= sum - 0.5 && total <= sum + 0.5);
    assert_true(value_after(out, "wire ") == total); /* the done line says the same total */
    /* every peer logged its own counts, sent and received */
    for (int i = 0; i < 4; i++) {
        char name[64];
        snprintf(name, sizeof name, "local/peer%d.log", i);
        char *s = slurp(name);
        const char *w = s ? strstr(s, "wire: sent activations ") : NULL;
        if (!w) fail_msg("peer %d logged no wire line:\n%s", i, s ? s : "");
        assert_true(value_after(w, "; received activations ") >= 0);
        free(s);
    }
    free(out);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest all[] = {
        cmocka_unit_test_setup_teardown(test_equivalent_2, setup, teardown),
        cmocka_unit_test_setup_teardown(test_equivalent_4, setup, teardown),
        cmocka_unit_test_setup_teardown(test_equivalent_skip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_equivalent_swap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_status_json, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_rejected, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_start_failure, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_kill_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_pause, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_orphan_stage, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demo_swarm_with_fault, setup, teardown),
        cmocka_unit_test_setup_teardown(test_demo_preset_swarm, setup, teardown),
        cmocka_unit_test_setup_teardown(test_revive_from_checkpoint, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outside_kills, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_stages, setup, teardown),
        cmocka_unit_test_setup_teardown(test_judged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_resume, setup, teardown),
        cmocka_unit_test_setup_teardown(test_wire_by_kind, setup, teardown),
    };
    if (argc > 1) cmocka_set_test_filter(argv[1]);
    return cmocka_run_group_tests(all, NULL, NULL);
}
