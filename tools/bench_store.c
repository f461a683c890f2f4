/* bench_store.c — `swarmtrain bench store`: checkpoint write speed of store/ for a
 * checkpoint the size of the `small` model (parameters + AdamW m and v) against the
 * ceiling, a plain write of the same bytes into SQLite as one blob in one transaction, in
 * the same run. Also the caller's cost of a background save, the verified load speed, and
 * the training-step overhead of background checkpoints (bench_step_overhead).
 * Not for: tests; this measures, it asserts nothing. */
#include "tools/cmd.h"
#include "tools/numbers.h"

#include "common/clock.h"
#include "store/store.h"

#include <getopt.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The `small` model: 6,459,648 float32 parameters per copy. */
#define BENCH_SMALL_PARAMS 6459648u
#define BENCH_NBLOBS       3


/* The ceiling: the same bytes as one blob per row, one transaction, plain sqlite3_bind_blob,
 * same page size, WAL and synchronous=FULL as the store. Seconds, or -1 on error. */
static double bench_plain(const char *path, unsigned char *const *blobs, size_t bytes)
{
    sqlite3 *db = NULL;
    sqlite3_stmt *q = NULL;
    double t = -1;
    store_remove(path);
    if (sqlite3_open(path, &db) != SQLITE_OK) goto done;
    if (sqlite3_exec(db,
                     "PRAGMA page_size=65536; PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;"
                     "CREATE TABLE b(id INTEGER PRIMARY KEY, data BLOB)",
                     NULL, NULL, NULL) != SQLITE_OK)
        goto done;
    double t0 = clock_now();
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto done;
    if (sqlite3_prepare_v2(db, "INSERT INTO b(data) VALUES(?)", -1, &q, NULL) != SQLITE_OK)
        goto done;
    for (int i = 0; i < BENCH_NBLOBS; i++) {
        sqlite3_reset(q);
        sqlite3_bind_blob64(q, 1, blobs[i], bytes, SQLITE_STATIC);
        if (sqlite3_step(q) != SQLITE_DONE) goto done;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto done;
    t = clock_now() - t0;
done:
    if (t < 0) fprintf(stderr, "bench store: plain write failed: %s\n", sqlite3_errmsg(db));
    sqlite3_finalize(q);
    sqlite3_close(db);
    store_remove(path);
    return t;
}

static store_ckpt_t *bench_ckpt(int64_t step, unsigned char *const *blobs, size_t bytes)
{
    static const char *const names[BENCH_NBLOBS] = {"params", "adamw_m", "adamw_v"};
    store_ckpt_t *ck = store_ckpt_new(0, step, "model=small\n", "0123456789abcdef");
    for (int i = 0; ck && i < BENCH_NBLOBS; i++)
        if (store_ckpt_add_blob(ck, names[i], blobs[i], bytes) != STATUS_OK)
            store_ckpt_destroy(&ck);
    return ck;
}

static void bench_usage(FILE *f)
{
    fprintf(f, "usage: swarmtrain bench store [--dir DIR] [--reps N] [--steps N] [--rounds N] "
               "[--threads N]\n"
               "  --dir DIR     where the scratch databases go (default /tmp)\n"
               "  --reps N      repetitions; the best of each is reported (default 3)\n"
               "  --steps N     training steps per arm of the step-overhead run (default 30)\n"
               "  --rounds N    rounds of the step-overhead run, arms rotated (default 5)\n"
               "  --threads N   training threads (default 2)\n");
}

/* The median of x[0..n), n >= 1; sorts x. */
static double bench_median(double *x, int n)
{
    numbers_sort(x, n);
    return numbers_median_sorted(x, n);
}

/* Seconds of CPU time the hypervisor took from this VM's CPUs so far ("steal" in
 * /proc/stat), all CPUs together; 0 where there is no such line. */
static double bench_steal_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (!f) return 0;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
                   &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    return n == 8 ? (double)v[7] / (double)sysconf(_SC_CLK_TCK) : 0;
}

/* One training run of `small` in a child process (so that no arm inherits another's heap,
 * threads or store); fills tokens/s over the timed steps, the share of the run's CPU time
 * the hypervisor stole, and the checkpoint counts. */
static int bench_train_child(int steps, int threads, const char *db, double budget, double *tps,
                             double *stolen, int *saved, int *skipped, double *cpu)
{
    double t0 = clock_now(), s0 = bench_steal_s();
    char cmd[2048];
    int n = snprintf(cmd, sizeof cmd,
                     "exec /proc/%d/exe train --config small --steps %d --val-batches 1 "
                     "--log-every 100000 --threads %d",
                     (int)getpid(), steps + 1, threads); /* the first step is not timed */
    if (db)
        snprintf(cmd + n, sizeof cmd - (size_t)n,
                 " --db %s --checkpoint-every 1 --keep 2 --checkpoint-budget %g", db, 100 * budget);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    char line[512];
    *tps = 0, *saved = *skipped = 0, *cpu = 0;
    while (fgets(line, sizeof line, f)) {
        sscanf(line, "tokens/s %lf", tps);
        sscanf(line,
               "checkpoints: %d written, %d due but skipped (writer busy or within its "
               "budget), %*d replaced; writer CPU %lf",
               saved, skipped, cpu);
    }
    int st = pclose(f);
    /* the share of this run's CPU time the hypervisor took */
    *stolen = (bench_steal_s() - s0) / ((double)sysconf(_SC_NPROCESSORS_ONLN) * (clock_now() - t0));
    return st == 0 && *tps > 0 ? 0 : -1;
}

/* Training-step time of the `small` model with a background checkpoint due after every
 * step against none. Arms: "budget", the default writer (at most STORE_WRITER_BUDGET_DEFAULT
 * of one CPU: due checkpoints are skipped while it rests), and "no budget", writes back to
 * back. Each run is its own process; round r starts with arm r % 3 so that every arm takes
 * every position. A VM's speed drifts with the time its hypervisor steals (this one's by
 * up to 40% between runs a minute apart), so each run's steal share is measured and every
 * round printed; the summary is the median over rounds, raw and with each run's tokens/s
 * scaled by 1 / (1 - its steal share). */
static int bench_step_overhead(const char *dir, int steps, int threads, int rounds)
{
    enum { ARMS = 3, MAX_ROUNDS = 64 };
    static const char *const label[ARMS] = {"no checkpoints", "checkpoint due every step, budget",
                                            "checkpoint due every step, no budget"};
    const double budget[ARMS] = {0, STORE_WRITER_BUDGET_DEFAULT, 1.0};
    char db[1024];
    double tps[MAX_ROUNDS][ARMS] = {{0}}, stolen[MAX_ROUNDS][ARMS] = {{0}}, cpu[ARMS] = {0};
    int saved[ARMS] = {0}, skipped[ARMS] = {0};
    if (rounds > MAX_ROUNDS) rounds = MAX_ROUNDS;
    snprintf(db, sizeof db, "%s/swarmtrain-bench-steps-%d.db", dir, (int)getpid());
    printf("training step, small, %d threads, %d timed steps per run, %d rounds of 3 runs "
           "(budget %.0f%% of one CPU):\n",
           threads, steps, rounds, 100 * STORE_WRITER_BUDGET_DEFAULT);
    for (int round = 0; round < rounds; round++) {
        for (int j = 0; j < ARMS; j++) {
            int arm = (round + j) % ARMS, sv, sk;
            double c;
            store_remove(db);
            if (bench_train_child(steps, threads, arm ? db : NULL, budget[arm], &tps[round][arm],
                                  &stolen[round][arm], &sv, &sk, &c)) {
                fprintf(stderr, "bench store: the training run of arm '%s' failed\n", label[arm]);
                store_remove(db);
                return 1;
            }
            saved[arm] += sv, skipped[arm] += sk, cpu[arm] += c;
        }
        double *t = tps[round], *st = stolen[round];
        printf("  round %d: tokens/s %5.0f / %5.0f / %5.0f (none / budget / no budget), steal "
               "%2.0f / %2.0f / %2.0f %%; overhead %5.1f %% / %5.1f %%, steal-corrected %5.1f %% "
               "/ %5.1f %%\n",
               round + 1, t[0], t[1], t[2], 100 * st[0], 100 * st[1], 100 * st[2],
               100 * (1 - t[1] / t[0]), 100 * (1 - t[2] / t[0]),
               100 * (1 - t[1] * (1 - st[0]) / (t[0] * (1 - st[1]))),
               100 * (1 - t[2] * (1 - st[0]) / (t[0] * (1 - st[2]))));
        fflush(stdout);
    }
    store_remove(db);
    for (int arm = 1; arm < ARMS; arm++) {
        double raw[MAX_ROUNDS], cor[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            raw[r] = 100 * (1 - tps[r][arm] / tps[r][0]);
            cor[r] =
                100 * (1 - tps[r][arm] * (1 - stolen[r][0]) / (tps[r][0] * (1 - stolen[r][arm])));
        }
        printf("  %-37s overhead median %5.1f %% (steal-corrected %5.1f %%); %d written, %d "
               "skipped; writer CPU %.2f s per write\n",
               label[arm], bench_median(raw, rounds), bench_median(cor, rounds), saved[arm],
               skipped[arm], saved[arm] ? cpu[arm] / saved[arm] : 0);
    }
    return 0;
}

int bench_store(int argc, char **argv)
{
    static const struct option opts[] = {{"dir", required_argument, NULL, 'd'},
                                         {"reps", required_argument, NULL, 'r'},
                                         {"steps", required_argument, NULL, 's'},
                                         {"threads", required_argument, NULL, 't'},
                                         {"rounds", required_argument, NULL, 'n'},
                                         {"help", no_argument, NULL, 'h'},
                                         {NULL, 0, NULL, 0}};
    const char *dir = "/tmp";
    int reps = 3, steps = 30, threads = 2, rounds = 5, c, rc = 1;
    char err[STATUS_ERR_LEN], path[1024], plain[1024];
    unsigned char *blobs[BENCH_NBLOBS] = {NULL};
    const size_t bytes = (size_t)BENCH_SMALL_PARAMS * sizeof(float);
    const double mb = BENCH_NBLOBS * (double)bytes / 1e6;
    store_t *s = NULL;
    store_ckpt_t *ck = NULL, *got = NULL;

    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd':
            dir = optarg;
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 's':
            steps = atoi(optarg);
            break;
        case 't':
            threads = atoi(optarg);
            break;
        case 'n':
            rounds = atoi(optarg);
            break;
        case 'h':
            bench_usage(stdout);
            return 0;
        default:
            bench_usage(stderr);
            return 2;
        }
    }
    if (reps < 1 || steps < 1 || threads < 1 || rounds < 1 || optind < argc) {
        bench_usage(stderr);
        return 2;
    }
    snprintf(path, sizeof path, "%s/swarmtrain-bench-store-%d.db", dir, (int)getpid());
    snprintf(plain, sizeof plain, "%s/swarmtrain-bench-plain-%d.db", dir, (int)getpid());
    for (int i = 0; i < BENCH_NBLOBS; i++) {
        float *f = malloc(bytes);
        if (!f) goto fail;
        uint32_t x = 2463534242u + (uint32_t)i;
        for (size_t k = 0; k < BENCH_SMALL_PARAMS; k++) {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            f[k] = (float)(int32_t)x * 1e-10f;
        }
        blobs[i] = (unsigned char *)f;
    }
    printf("checkpoint: %d blobs x %zu bytes = %.1f MB (model small: params, AdamW m, v)\n",
           BENCH_NBLOBS, bytes, mb);

    double best_plain = 1e30, best_store = 1e30, best_load = 1e30, best_copy = 1e30,
           best_call = 1e30;
    store_remove(path);
    s = store_open(path, err);
    if (!s) {
        fprintf(stderr, "bench store: %s\n", err);
        goto fail;
    }
    store_set_keep(s, 2);
    for (int r = 0; r < reps; r++) {
        double t = bench_plain(plain, blobs, bytes);
        if (t < 0) goto fail;
        best_plain = t < best_plain ? t : best_plain;

        double t0 = clock_now();
        ck = bench_ckpt(2 * r, blobs, bytes);
        double t_copy = clock_now() - t0;
        if (!ck) goto fail;
        best_copy = t_copy < best_copy ? t_copy : best_copy;
        t0 = clock_now();
        if (store_ckpt_save(s, ck, err) != STATUS_OK) {
            fprintf(stderr, "bench store: %s\n", err);
            goto fail;
        }
        t = clock_now() - t0;
        best_store = t < best_store ? t : best_store;
        store_ckpt_destroy(&ck);

        t0 = clock_now();
        if (store_ckpt_load_latest(s, 0, &got, err) != STATUS_OK) {
            fprintf(stderr, "bench store: %s\n", err);
            goto fail;
        }
        t = clock_now() - t0;
        best_load = t < best_load ? t : best_load;
        store_ckpt_destroy(&got);

        /* What a training loop pays for a background checkpoint: the snapshot copy and the
         * hand-off; the write itself runs on the store's thread. */
        t0 = clock_now();
        ck = bench_ckpt(2 * r + 1, blobs, bytes);
        if (!ck) goto fail;
        store_ckpt_save_async(s, &ck);
        t = clock_now() - t0;
        best_call = t < best_call ? t : best_call;
        store_ckpt_wait(s);
    }
    store_writer_stats_t ws;
    store_writer_stats(s, &ws);
    if (ws.failed) {
        fprintf(stderr, "bench store: background write failed: %s\n", ws.last_err);
        goto fail;
    }

    printf("plain SQLite, one blob per row, one transaction (ceiling): %8.1f MB/s  (%.3f s)\n",
           mb / best_plain, best_plain);
    printf("store_ckpt_save (1 MiB chunks, BLAKE2b-256, prune):        %8.1f MB/s  (%.3f s)\n",
           mb / best_store, best_store);
    printf("ratio store / ceiling:                                     %8.2f\n",
           best_plain / best_store);
    printf("store_ckpt_load_latest (read + verify every hash):         %8.1f MB/s  (%.3f s)\n",
           mb / best_load, best_load);
    printf("background save, caller's cost (snapshot copy + hand-off): %8.1f ms (copy alone "
           "%.1f ms)\n",
           1e3 * best_call, 1e3 * best_copy);
    printf("best of %d; database in %s\n", reps, dir);
    store_close(&s);
    store_remove(path);
    rc = bench_step_overhead(dir, steps, threads, rounds);
fail:
    store_ckpt_destroy(&ck);
    store_ckpt_destroy(&got);
    store_close(&s);
    store_remove(path);
    for (int i = 0; i < BENCH_NBLOBS; i++) free(blobs[i]);
    return rc;
}
