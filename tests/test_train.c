/* test_train.c — data-parallel training in one process and durable training:
 * DeMo replicas stay bit-identical, stage messages are checked, a run killed with
 * SIGKILL resumes loss for loss. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/status.h"
#include "peer/data.h"
#include "peer/demo_opt.h"
#include "peer/model.h"
#include "peer/train.h"
#include "testutil.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define R 4

typedef struct {
    kern_t *k;
    data_t *d;
    model_t *rep[R];
    demo_opt_t *opt[R][2];
    uint8_t *msg[R][2];
    model_config_t c;
} pool_t;

static void pool_init(pool_t *p, const demo_cfg_t *dc)
{
    char err[STATUS_ERR_LEN];
    config_preset(&p->c, "tiny", NULL);
    p->c.batch = 4;
    p->c.stages = 2;
    p->k = kern_new("cpu", 2, err);
    assert_non_null(p->k);
    p->d = data_open(testutil_corpus(), p->c.seq, 0.05, err);
    if (!p->d) fail_msg("%s", err);
    for (int r = 0; r < R; r++) {
        p->rep[r] = model_new(&p->c, p->k, 5, err);
        assert_non_null(p->rep[r]);
        for (int s = 0; s < 2; s++) {
            p->opt[r][s] = demo_opt_new(model_stage(p->rep[r], s), dc, err);
            if (!p->opt[r][s]) fail_msg("%s", err);
            p->msg[r][s] = malloc(demo_opt_msg_size(p->opt[r][s]));
        }
    }
}

static void pool_free(pool_t *p)
{
    for (int r = 0; r < R; r++) {
        for (int s = 0; s < 2; s++) {
            demo_opt_destroy(&p->opt[r][s]);
            free(p->msg[r][s]);
        }
        model_destroy(&p->rep[r]);
    }
    data_destroy(&p->d);
    kern_destroy(&p->k);
}

/* Every replica computes its gradient on its own data and prepares its messages.
 * Returns the mean loss. */
static double pool_prepare(pool_t *p, const optim_config_t *oc, int step)
{
    char err[STATUS_ERR_LEN];
    int32_t tok[4 * 64], tgt[4 * 64];
    double sum = 0;
    for (int r = 0; r < R; r++) {
        float loss;
        model_zero_grads(p->rep[r]);
        data_train_batch(p->d, 1, (uint64_t)r, step, p->c.batch, tok, tgt);
        assert_int_equal(model_train_micro(p->rep[r], tok, tgt, &loss, err), 0);
        sum += loss;
        for (int s = 0; s < 2; s++)
            if (demo_opt_prepare(p->opt[r][s], oc, step, 1.0f, p->msg[r][s], NULL, err))
                fail_msg("prepare: %s", err);
    }
    return sum / R;
}

/* Replica r applies the messages of `senders` (a list of replica indices) for stage s. */
static int pool_apply(pool_t *p, const optim_config_t *oc, int step, int r, int s,
                      const int *senders, int m, char *err)
{
    const uint8_t *ptrs[R];
    size_t lens[R];
    for (int j = 0; j < m; j++) {
        ptrs[j] = p->msg[senders[j]][s];
        lens[j] = demo_opt_msg_size(p->opt[senders[j]][s]);
    }
    return demo_opt_apply(p->opt[r][s], oc, step, ptrs, lens, m, err);
}

static int params_equal(pool_t *p, int a, int b)
{
    for (int s = 0; s < 2; s++) {
        stage_t *x = model_stage(p->rep[a], s), *y = model_stage(p->rep[b], s);
        if (memcmp(stage_params(x), stage_params(y), stage_num_params(x) * sizeof(float))) return 0;
    }
    return 1;
}

/* 100 DeMo steps: each replica receives the pool's messages in its own order; all stay
 * bit-identical and the loss falls. */
static void replicas_identical(demo_vfmt_t vfmt, int k)
{
    pool_t p;
    demo_cfg_t dc = {.chunk = 64, .k = k, .vfmt = vfmt, .beta = 0.999f};
    pool_init(&p, &dc);
    optim_config_t oc = optim_defaults();
    char err[STATUS_ERR_LEN];
    double first = 0, last = 0;
    for (int step = 0; step < 100; step++) {
        double loss = pool_prepare(&p, &oc, step);
        if (step == 0) first = loss;
        last = loss;
        for (int r = 0; r < R; r++)
            for (int s = 0; s < 2; s++) {
                /* each replica hears the pool in another order, one not a rotation */
                static const int orders[R][R] = {{0, 1, 2, 3}, {2, 0, 3, 1}, {3, 2, 1, 0}, {1, 3, 0, 2}};
                const int *order = orders[r];
                if (pool_apply(&p, &oc, step, r, s, order, R, err)) fail_msg("apply: %s", err);
            }
        for (int r = 1; r < R; r++)
            if (!params_equal(&p, 0, r)) fail_msg("replica %d diverged at step %d", r, step);
    }
    printf("demo %s k=%d: loss %.3f -> %.3f over 100 steps\n",
           vfmt == DEMO_VAL_SIGN ? "sign" : "f32", k, first, last);
    assert_true(last < first - 1.0);

    /* The comparison can see a divergence: replica 0 misses replica 3's message. */
    pool_prepare(&p, &oc, 100);
    int all[R] = {0, 1, 2, 3}, missing[R - 1] = {0, 1, 2};
    for (int s = 0; s < 2; s++) {
        assert_int_equal(pool_apply(&p, &oc, 100, 0, s, missing, R - 1, err), 0);
        assert_int_equal(pool_apply(&p, &oc, 100, 1, s, all, R, err), 0);
    }
    assert_false(params_equal(&p, 0, 1));
    pool_free(&p);
}

static void test_demo_replicas_sign(void **state)
{
    (void)state;
    replicas_identical(DEMO_VAL_SIGN, 4);
}

static void test_demo_replicas_f32(void **state)
{
    (void)state;
    replicas_identical(DEMO_VAL_F32, 32);
}

/* A damaged or misdirected stage message is refused and nothing is applied. */
static void test_demo_bad_messages(void **state)
{
    (void)state;
    pool_t p;
    demo_cfg_t dc = {.chunk = 64, .k = 8, .vfmt = DEMO_VAL_SIGN, .beta = 0.999f};
    pool_init(&p, &dc);
    optim_config_t oc = optim_defaults();
    char err[STATUS_ERR_LEN];
    pool_prepare(&p, &oc, 0);
    stage_t *st = model_stage(p.rep[0], 0);
    size_t bytes = stage_num_params(st) * sizeof(float);
    float *before = malloc(bytes);
    memcpy(before, stage_params(st), bytes);
    size_t len = demo_opt_msg_size(p.opt[1][0]);
    uint8_t *bad = malloc(len + 8);
    const uint8_t *ptrs[2] = {p.msg[0][0], bad};
    size_t lens[2] = {demo_opt_msg_size(p.opt[0][0]), len};

    memcpy(bad, p.msg[1][0], len);
    assert_int_equal(demo_opt_apply(p.opt[0][0], &oc, 1, ptrs, lens, 2, err), STATUS_EMALFORMED);
    assert_non_null(strstr(err, "step"));       /* a message of another step */
    lens[1] = len - 1;                           /* truncated */
    assert_true(demo_opt_apply(p.opt[0][0], &oc, 0, ptrs, lens, 2, err) < 0);
    lens[1] = len + 8;                           /* trailing bytes */
    memset(bad + len, 0, 8);
    assert_true(demo_opt_apply(p.opt[0][0], &oc, 0, ptrs, lens, 2, err) < 0);
    lens[1] = len;
    bad[4] = 9;                                  /* another version */
    assert_int_equal(demo_opt_apply(p.opt[0][0], &oc, 0, ptrs, lens, 2, err), STATUS_EVERSION);
    memcpy(bad, p.msg[1][0], len);
    bad[len - 3] ^= 0x40;                        /* a flipped bit in the last tensor */
    assert_true(demo_opt_apply(p.opt[0][0], &oc, 0, ptrs, lens, 2, err) < 0);
    assert_memory_equal(before, stage_params(st), bytes); /* all or nothing */
    memcpy(bad, p.msg[1][0], len);
    assert_int_equal(demo_opt_apply(p.opt[0][0], &oc, 0, ptrs, lens, 2, err), 0);
    assert_memory_not_equal(before, stage_params(st), bytes);
    free(before);
    free(bad);
    pool_free(&p);
}

/* ---- resume after SIGKILL ----------------------------------------------------------- */

/* Runs the binary with args, collecting the "step N loss X" lines into losses[N]; when
 * kill_at >= 0 the child gets SIGKILL right after it prints step kill_at. Returns the
 * first step it printed. */
static int run_train(const char *args, int kill_at, char losses[][32], int nsteps)
{
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "exec %s train %s", testutil_bin(), args);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    FILE *f = fdopen(fds[0], "r");
    char line[512];
    int first = -1;
    while (fgets(line, sizeof line, f)) {
        int step;
        char loss[32];
        if (sscanf(line, "step %d loss %31s", &step, loss) == 2 && step >= 0 && step < nsteps) {
            snprintf(losses[step], 32, "%s", loss);
            if (first < 0) first = step;
            if (step == kill_at) {
                kill(pid, SIGKILL);
                break;
            }
        }
    }
    fclose(f);
    int status;
    waitpid(pid, &status, 0);
    if (kill_at >= 0) assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    else assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    return first;
}

static void resume_matches(const char *extra)
{
    enum { N = 40 };
    char dir[] = "/tmp/st_resumeXXXXXX", args[2048], cmd[256];
    assert_non_null(mkdtemp(dir));
    static char whole[N][32], killed[N][32], resumed[N][32];
    memset(whole, 0, sizeof whole);
    memset(resumed, 0, sizeof resumed);
    snprintf(args, sizeof args, "--steps %d --batch 8 --threads 1 --data %s %s", N,
             testutil_corpus(), extra);
    run_train(args, -1, whole, N);
    snprintf(args, sizeof args, "--steps %d --batch 8 --threads 1 --data %s %s --db %s/run.db "
             "--checkpoint-every 3", N, testutil_corpus(), extra, dir);
    run_train(args, 23, killed, N);
    snprintf(args + strlen(args), sizeof args - strlen(args), " --resume");
    int from = run_train(args, -1, resumed, N);
    printf("killed after step 23, resumed at step %d\n", from);
    assert_true(from > 0 && from <= 24 && from % 3 == 0);
    for (int s = 0; s < 23; s++) assert_string_equal(killed[s], whole[s]);
    for (int s = from; s < N; s++) {
        if (strcmp(resumed[s], whole[s]))
            fail_msg("step %d: resumed loss %s, uninterrupted %s", s, resumed[s], whole[s]);
    }
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_resume_adamw(void **state)
{
    (void)state;
    resume_matches("--stages 2");
}

static void test_resume_demo(void **state)
{
    (void)state;
    resume_matches("--replicas 2 --optimizer demo --demo-values sign --demo-k 4");
}

/* --resume without a store, or with a checkpoint of another run, is refused clearly. */
static void test_resume_refusals(void **state)
{
    (void)state;
    char dir[] = "/tmp/st_resume2XXXXXX", cmd[4096];
    assert_non_null(mkdtemp(dir));
    snprintf(cmd, sizeof cmd, "%s train --steps 1 --resume >/dev/null 2>&1", testutil_bin());
    int rc = system(cmd);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    snprintf(cmd, sizeof cmd, "%s train --steps 4 --batch 2 --db %s/a.db --checkpoint-every 2 >/dev/null 2>&1",
             testutil_bin(), dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s train --steps 4 --batch 2 --lr 0.01 --db %s/a.db --resume 2>&1 | grep -q 'another run configuration'",
             testutil_bin(), dir);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_demo_replicas_sign), cmocka_unit_test(test_demo_replicas_f32),
        cmocka_unit_test(test_demo_bad_messages),  cmocka_unit_test(test_resume_adamw),
        cmocka_unit_test(test_resume_demo),        cmocka_unit_test(test_resume_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
