/* test_store.c — unit tests of store/: round trips, chunk edges, keep-K, async snapshots,
 * corruption detection, refusals (newer schema, not a database, foreign database, read-only
 * file), identity, metrics and events. Kill -9 and disk-full live in test_store_fault.c.
 * Not for: timing; see `swarmtrain bench store`. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "store/store.h"
#include "testutil.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

static char tmpdir[256];
static char dbpath[512];
static int dbcount;

/* A fresh database path in this run's temporary directory. */
static const char *fresh_path(void)
{
    snprintf(dbpath, sizeof dbpath, "%s/s%d.db", tmpdir, dbcount++);
    return dbpath;
}

/* Deterministic content: byte i of blob `salt` at `step`. */
static void fill(unsigned char *p, size_t n, int64_t step, int salt)
{
    uint64_t x =
        (uint64_t)step * 0x9E3779B97F4A7C15ull + (uint64_t)salt * 0xBF58476D1CE4E5B9ull + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

static store_ckpt_t *make_ckpt(int stage, int64_t step, const size_t *sizes, int nb)
{
    store_ckpt_t *ck = store_ckpt_new(stage, step, "d_model=64\nlayers=2\n", "ab12cd34");
    assert_non_null(ck);
    for (int j = 0; j < nb; j++) {
        char name[32];
        unsigned char *b = malloc(sizes[j] ? sizes[j] : 1);
        assert_non_null(b);
        fill(b, sizes[j], step, j);
        snprintf(name, sizeof name, "blob%d", j);
        assert_int_equal(store_ckpt_add_blob(ck, name, b, sizes[j]), STATUS_OK);
        free(b);
    }
    return ck;
}

static void check_ckpt(const store_ckpt_t *ck, int stage, int64_t step, const size_t *sizes, int nb)
{
    assert_non_null(ck);
    assert_int_equal(store_ckpt_stage(ck), stage);
    assert_int_equal(store_ckpt_step(ck), step);
    assert_string_equal(store_ckpt_config_text(ck), "d_model=64\nlayers=2\n");
    assert_string_equal(store_ckpt_config_hash(ck), "ab12cd34");
    assert_int_equal(store_ckpt_blob_count(ck), nb);
    for (int j = 0; j < nb; j++) {
        char name[32];
        size_t n = 0;
        snprintf(name, sizeof name, "blob%d", j);
        const unsigned char *got = store_ckpt_blob(ck, name, &n);
        assert_non_null(got);
        assert_int_equal(n, sizes[j]);
        unsigned char *want = malloc(sizes[j] ? sizes[j] : 1);
        fill(want, sizes[j], step, j);
        assert_memory_equal(got, want, sizes[j] ? sizes[j] : 0);
        free(want);
    }
}

static store_t *open_ok(const char *path)
{
    char err[STATUS_ERR_LEN] = "";
    store_t *s = store_open(path, err);
    if (!s) fail_msg("store_open: %s", err);
    return s;
}

static void save_ok(store_t *s, const store_ckpt_t *ck)
{
    char err[STATUS_ERR_LEN] = "";
    int st = store_ckpt_save(s, ck, err);
    if (st != STATUS_OK) fail_msg("store_ckpt_save: %s", err);
}

static void test_roundtrip_and_chunk_edges(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, STORE_CHUNK_BYTES, STORE_CHUNK_BYTES + 1,
                            3 * STORE_CHUNK_BYTES - 1};
    store_t *s = open_ok(fresh_path());
    store_ckpt_t *ck = make_ckpt(2, 17, sizes, 5), *got = NULL;
    char err[STATUS_ERR_LEN];
    assert_int_equal(store_ckpt_add_blob(ck, "blob1", "x", 1), STATUS_EINVAL); /* duplicate */
    assert_int_equal(store_ckpt_add_blob(ck, "", "x", 1), STATUS_EINVAL);
    save_ok(s, ck);
    store_ckpt_destroy(&ck);
    assert_null(ck);
    assert_int_equal(store_ckpt_load_latest(s, 2, &got, err), STATUS_OK);
    check_ckpt(got, 2, 17, sizes, 5);
    assert_true(store_ckpt_id(got) > 0);
    store_ckpt_destroy(&got);
    assert_int_equal(store_ckpt_load_latest(s, 1, &got, err), STATUS_ENOTFOUND);
    assert_null(got);
    store_ckpt_info_t info[4];
    int n = 0;
    assert_int_equal(store_ckpt_list(s, 1, info, 4, &n, err), STATUS_OK);
    assert_int_equal(n, 1);
    assert_int_equal(info[0].verified, 1);
    assert_int_equal(info[0].step, 17);
    assert_int_equal(info[0].nblobs, 5);
    store_close(&s);
    assert_null(s);
    store_close(&s); /* NULL-safe */
    store_ckpt_destroy(&ck);
}

static void test_keep_k(void **state)
{
    (void)state;
    const size_t sizes[] = {1000, 70000};
    store_t *s = open_ok(fresh_path());
    char err[STATUS_ERR_LEN];
    store_set_keep(s, 2);
    for (int step = 1; step <= 5; step++) {
        store_ckpt_t *ck = make_ckpt(0, step, sizes, 2);
        save_ok(s, ck);
        store_ckpt_destroy(&ck);
    }
    for (int step = 1; step <= 3; step++) {
        store_ckpt_t *ck = make_ckpt(1, 100 + step, sizes, 2);
        save_ok(s, ck);
        store_ckpt_destroy(&ck);
    }
    store_ckpt_info_t info[16];
    int n = 0;
    assert_int_equal(store_ckpt_list(s, 1, info, 16, &n, err), STATUS_OK);
    assert_int_equal(n, 4); /* 2 per stage */
    assert_int_equal(info[0].step, 103);
    assert_int_equal(info[1].step, 102);
    assert_int_equal(info[2].step, 5);
    assert_int_equal(info[3].step, 4);
    for (int i = 0; i < n; i++) assert_int_equal(info[i].verified, 1);
    /* No orphaned blob or chunk rows survive pruning. */
    sqlite3 *raw = NULL;
    sqlite3_stmt *q = NULL;
    assert_int_equal(sqlite3_open(store_path(s), &raw), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(raw,
                                        "SELECT (SELECT count(*) FROM ckpt_blob),"
                                        "(SELECT count(*) FROM ckpt_chunk)",
                                        -1, &q, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_equal(sqlite3_column_int(q, 0), 4 * 2);
    assert_int_equal(sqlite3_column_int(q, 1), 4 * 2);
    sqlite3_finalize(q);
    sqlite3_close(raw);
    store_close(&s);
}

static void test_async_snapshot_isolation(void **state)
{
    (void)state;
    const size_t n = 3 * STORE_CHUNK_BYTES + 123;
    store_t *s = open_ok(fresh_path());
    unsigned char *buf = malloc(n), *want = malloc(n);
    char err[STATUS_ERR_LEN];
    fill(buf, n, 7, 0);
    memcpy(want, buf, n);
    store_ckpt_t *ck = store_ckpt_new(0, 7, "cfg", "h");
    assert_int_equal(store_ckpt_add_blob(ck, "params", buf, n), STATUS_OK);
    store_ckpt_save_async(s, &ck);
    assert_null(ck);
    memset(buf, 0xEE, n); /* training goes on and changes its buffer at once */
    store_ckpt_wait(s);
    store_ckpt_t *got = NULL;
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    size_t gn = 0;
    const void *p = store_ckpt_blob(got, "params", &gn);
    assert_int_equal(gn, n);
    assert_memory_equal(p, want, n);
    store_ckpt_destroy(&got);

    /* A burst: every snapshot is either written or replaced by a newer one; the newest wins. */
    for (int step = 10; step < 20; step++) {
        store_ckpt_t *c = store_ckpt_new(0, step, "cfg", "h");
        assert_int_equal(store_ckpt_add_blob(c, "params", buf, n), STATUS_OK);
        store_ckpt_save_async(s, &c);
    }
    store_ckpt_wait(s);
    store_writer_stats_t ws;
    store_writer_stats(s, &ws);
    assert_int_equal(ws.saved + ws.replaced, 11);
    assert_int_equal(ws.failed, 0);
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    assert_int_equal(store_ckpt_step(got), 19);
    store_ckpt_destroy(&got);
    /* close waits for a pending write */
    store_ckpt_t *c = store_ckpt_new(0, 20, "cfg", "h");
    assert_int_equal(store_ckpt_add_blob(c, "params", want, n), STATUS_OK);
    char path[512];
    snprintf(path, sizeof path, "%s", store_path(s));
    store_ckpt_save_async(s, &c);
    store_close(&s);
    s = open_ok(path);
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    assert_int_equal(store_ckpt_step(got), 20);
    store_ckpt_destroy(&got);
    store_close(&s);
    free(buf);
    free(want);
}

/* The writer's CPU budget: after a write it rests (ready says 0, snapshots handed over wait
 * and replace each other), store_ckpt_wait and store_close end the rest and write the newest
 * snapshot; with no budget it never rests. */
static void test_writer_budget(void **state)
{
    (void)state;
    const size_t sizes[1] = {2 * STORE_CHUNK_BYTES};
    char err[STATUS_ERR_LEN];
    store_t *s = open_ok(fresh_path());
    assert_int_equal(store_ckpt_ready(s), 1); /* nothing written yet: no rest */
    /* A write costs milliseconds of CPU; at 1e-5 of a CPU the rest is minutes. */
    store_set_writer_budget(s, 1e-5);
    store_ckpt_t *ck = make_ckpt(0, 1, sizes, 1);
    store_ckpt_save_async(s, &ck);
    store_writer_stats_t ws;
    do { /* the writer picks it up at once: nothing was written before */
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
        store_writer_stats(s, &ws);
    } while (ws.saved + ws.failed < 1);
    assert_int_equal(ws.failed, 0);
    assert_true(ws.cpu_s > 0);
    assert_int_equal(store_ckpt_ready(s), 0); /* resting */
    for (int step = 2; step <= 4; step++) {
        ck = make_ckpt(0, step, sizes, 1);
        store_ckpt_save_async(s, &ck);
    }
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL);
    store_writer_stats(s, &ws);
    assert_int_equal(ws.saved, 1); /* still resting: nothing more written */
    assert_int_equal(ws.replaced, 2);
    store_ckpt_wait(s); /* ends the rest: the newest snapshot is written now, not in minutes */
    store_writer_stats(s, &ws);
    assert_int_equal(ws.saved, 2);
    assert_true(ws.rested_s > 0);
    store_ckpt_t *got = NULL;
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    check_ckpt(got, 0, 4, sizes, 1);
    store_ckpt_destroy(&got);

    /* No budget: the rest is over at once, and ready again as soon as a write is done. */
    store_set_writer_budget(s, 1.0);
    assert_int_equal(store_ckpt_ready(s), 1);
    ck = make_ckpt(0, 5, sizes, 1);
    store_ckpt_save_async(s, &ck);
    store_ckpt_wait(s);
    assert_int_equal(store_ckpt_ready(s), 1);

    /* close ends a rest too, and the pending snapshot is in the file afterwards. */
    store_set_writer_budget(s, 1e-5);
    ck = make_ckpt(0, 6, sizes, 1);
    store_ckpt_save_async(s, &ck);
    store_ckpt_wait(s);
    ck = make_ckpt(0, 7, sizes, 1);
    store_ckpt_save_async(s, &ck);
    char path[512];
    snprintf(path, sizeof path, "%s", store_path(s));
    store_close(&s);
    s = open_ok(path);
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    check_ckpt(got, 0, 7, sizes, 1);
    store_ckpt_destroy(&got);
    store_close(&s);
}

/* Flips one byte of chunk `seq` of blob `idx` of the newest checkpoint, in place. */
static void flip_byte(const char *path, int idx, int seq, int offset)
{
    sqlite3 *raw = NULL;
    sqlite3_stmt *q = NULL;
    sqlite3_blob *b = NULL;
    unsigned char c;
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_prepare_v2(raw,
                                        "SELECT c.id FROM ckpt_chunk c JOIN ckpt_blob b ON "
                                        "c.blob_id = b.id WHERE b.ckpt_id = (SELECT max(id) FROM "
                                        "ckpt) AND b.idx = ? AND c.seq = ?",
                                        -1, &q, NULL),
                     SQLITE_OK);
    sqlite3_bind_int(q, 1, idx);
    sqlite3_bind_int(q, 2, seq);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int64_t rowid = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    assert_int_equal(sqlite3_blob_open(raw, "main", "ckpt_chunk", "data", rowid, 1, &b), SQLITE_OK);
    assert_int_equal(sqlite3_blob_read(b, &c, 1, offset), SQLITE_OK);
    c ^= 0x01;
    assert_int_equal(sqlite3_blob_write(b, &c, 1, offset), SQLITE_OK);
    sqlite3_blob_close(b);
    sqlite3_close(raw);
}

static void raw_exec(const char *path, const char *sql)
{
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
}

/* A fresh store holding good checkpoints of stage 0 at steps 1 and 2, blobs of sizes[2]. */
static store_t *two_ckpts(const size_t sizes[2])
{
    store_t *s = open_ok(fresh_path());
    for (int step = 1; step <= 2; step++) {
        store_ckpt_t *ck = make_ckpt(0, step, sizes, 2);
        save_ok(s, ck);
        store_ckpt_destroy(&ck);
    }
    return s;
}

static void test_flipped_byte_falls_back(void **state)
{
    (void)state;
    const size_t sizes[] = {5000, 2 * STORE_CHUNK_BYTES + 10};
    char err[STATUS_ERR_LEN];
    store_t *s = two_ckpts(sizes);
    flip_byte(store_path(s), 1, 1, 777);
    store_ckpt_t *got = NULL;
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    check_ckpt(got, 0, 1, sizes, 2); /* the older good one */
    store_ckpt_destroy(&got);
    store_ckpt_info_t info[4];
    int n = 0;
    assert_int_equal(store_ckpt_list(s, 1, info, 4, &n, err), STATUS_OK);
    assert_int_equal(n, 2);
    assert_int_equal(info[0].verified, 0);
    assert_int_equal(info[1].verified, 1);
    store_event_t ev[4];
    assert_int_equal(store_event_last(s, 4, ev, &n, err), STATUS_OK);
    assert_int_equal(n, 1);
    assert_string_equal(ev[0].kind, "ckpt_bad");
    assert_non_null(strstr(ev[0].detail, "hash mismatch"));

    /* Altered metadata (not a blob) is caught by the manifest hash. */
    raw_exec(store_path(s), "UPDATE ckpt SET step = 999 WHERE id = (SELECT min(id) FROM ckpt)");
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_ENOTFOUND);
    assert_null(got);
    assert_non_null(strstr(err, "2 bad"));
    /* A missing chunk is caught too, and a good newer one is used again. */
    store_ckpt_t *ck = make_ckpt(0, 3, sizes, 2);
    save_ok(s, ck);
    store_ckpt_destroy(&ck);
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    check_ckpt(got, 0, 3, sizes, 2);
    store_ckpt_destroy(&got);
    raw_exec(store_path(s), "DELETE FROM ckpt_chunk WHERE seq = 2");
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_ENOTFOUND);
    store_close(&s);
}

/* A row's blob length is a claim until the hash checks it: a checkpoint whose rows claim
 * 2^62 bytes is skipped for the older good one (it was malloc'ed up front: out of memory,
 * and loading failed; found by fuzz_store). */
static void test_huge_length_falls_back(void **state)
{
    (void)state;
    const size_t sizes[] = {5000, 2 * STORE_CHUNK_BYTES + 10};
    char err[STATUS_ERR_LEN];
    store_t *s = two_ckpts(sizes);
    raw_exec(store_path(s), "UPDATE ckpt_blob SET bytes = 4611686018427387904 WHERE idx = 0 AND "
                            "ckpt_id = (SELECT max(id) FROM ckpt);"
                            "UPDATE ckpt SET total_bytes = 9000000000000000000 WHERE id = "
                            "(SELECT max(id) FROM ckpt)");
    store_ckpt_t *got = NULL;
    assert_int_equal(store_ckpt_load_latest(s, 0, &got, err), STATUS_OK);
    check_ckpt(got, 0, 1, sizes, 2);
    store_ckpt_destroy(&got);
    store_close(&s);
}

static void expect_refused(const char *path, const char *needle)
{
    char err[STATUS_ERR_LEN] = "";
    size_t n0, n1;
    unsigned char *before = testutil_slurp(path, &n0);
    assert_non_null(before);
    store_t *s = store_open(path, err);
    assert_null(s);
    if (!strstr(err, needle)) fail_msg("message \"%s\" lacks \"%s\"", err, needle);
    assert_non_null(strstr(err, path));
    unsigned char *after = testutil_slurp(path, &n1);
    assert_non_null(after);
    assert_int_equal(n0, n1);
    assert_memory_equal(before, after, n0);
    free(before);
    free(after);
}

static void test_refusals(void **state)
{
    (void)state;
    /* newer schema */
    const char *p = fresh_path();
    store_t *s = open_ok(p);
    store_close(&s);
    raw_exec(p, "PRAGMA user_version = 2");
    expect_refused(p, "schema version 2 is newer than this build supports (1)");

    /* not a database */
    p = fresh_path();
    FILE *f = fopen(p, "wb");
    for (int i = 0; i < 300; i++) fputs("this is a text file, not SQLite.\n", f);
    fclose(f);
    expect_refused(p, "not a SQLite database");

    /* a SQLite database that is not a store */
    p = fresh_path();
    raw_exec(p, "PRAGMA journal_mode=DELETE; CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    expect_refused(p, "not a swarmtrain store");

    /* a directory that does not exist */
    char err[STATUS_ERR_LEN] = "";
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.db", tmpdir);
    assert_null(store_open(bad, err));
    assert_non_null(strstr(err, "cannot open"));
}

static void test_readonly_file(void **state)
{
    (void)state;
    const char *p = fresh_path();
    store_t *s = open_ok(p);
    store_close(&s);
    assert_int_equal(chmod(p, 0444), 0);
    assert_int_equal(chmod(tmpdir, 0755), 0);
    if (geteuid() != 0) {
        expect_refused(p, "read-only");
        return;
    }
    /* root ignores file modes: check as nobody in a child. */
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char e[STATUS_ERR_LEN] = "";
        if (setgid(65534) != 0 || setuid(65534) != 0) _exit(77);
        store_t *t = store_open(p, e);
        int ok = !t && strstr(e, "read-only") != NULL;
        if (!ok) fprintf(stderr, "read-only open: %s\n", t ? "succeeded" : e);
        store_close(&t);
        _exit(ok ? 0 : 1);
    }
    int ws = 0;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    assert_true(WIFEXITED(ws));
    if (WEXITSTATUS(ws) == 77) skip();
    assert_int_equal(WEXITSTATUS(ws), 0);
}

static void test_identity(void **state)
{
    (void)state;
    unsigned char pk1[crypto_sign_PUBLICKEYBYTES], pk2[crypto_sign_PUBLICKEYBYTES],
        pk3[crypto_sign_PUBLICKEYBYTES];
    unsigned char *sk = sodium_malloc(crypto_sign_SECRETKEYBYTES);
    unsigned char sig[crypto_sign_BYTES];
    char err[STATUS_ERR_LEN];
    const char *msg = "hello swarm";
    char pa[512];
    snprintf(pa, sizeof pa, "%s", fresh_path());
    store_t *a = open_ok(pa);
    struct stat sb;
    assert_int_equal(stat(pa, &sb), 0);
    assert_int_equal(sb.st_mode & 077, 0); /* the file holds a secret key: private */
    assert_int_equal(store_identity(a, pk1, sk, err), STATUS_OK);
    assert_int_equal(store_identity(a, pk2, NULL, err), STATUS_OK);
    assert_memory_equal(pk1, pk2, sizeof pk1);
    crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), sk);
    assert_int_equal(crypto_sign_verify_detached(sig, (const unsigned char *)msg, strlen(msg), pk1),
                     0);
    store_close(&a);
    a = open_ok(pa);
    assert_int_equal(store_identity(a, pk2, sk, err), STATUS_OK);
    assert_memory_equal(pk1, pk2, sizeof pk1);
    store_close(&a);
    store_t *b = open_ok(fresh_path());
    assert_int_equal(store_identity(b, pk3, NULL, err), STATUS_OK);
    assert_memory_not_equal(pk1, pk3, sizeof pk1);
    store_close(&b);
    /* a tampered secret key is refused */
    raw_exec(pa, "UPDATE identity SET secret_key = zeroblob(64)");
    a = open_ok(pa);
    assert_int_equal(store_identity(a, pk2, sk, err), STATUS_ECORRUPT);
    assert_non_null(strstr(err, "does not match"));
    store_close(&a);
    sodium_free(sk);
}

static void test_metrics_events(void **state)
{
    (void)state;
    store_t *s = open_ok(fresh_path());
    char err[STATUS_ERR_LEN];
    for (int i = 0; i < 10; i++) {
        store_metric_t m = {.time = 1000 + i,
                            .stage = 1,
                            .step = i,
                            .loss = 5.0 - 0.1 * i,
                            .tokens_per_s = 1234.5,
                            .bytes_sent = 10 * i,
                            .bytes_recv = 20 * i};
        assert_int_equal(store_metric_add(s, &m, err), STATUS_OK);
    }
    store_metric_t out[8];
    int n = 0;
    assert_int_equal(store_metric_last(s, 5, out, &n, err), STATUS_OK);
    assert_int_equal(n, 5);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(out[i].step, 5 + i);
        assert_true(out[i].loss == 5.0 - 0.1 * (5 + i));
        assert_true(out[i].time == 1000 + 5 + i);
        assert_int_equal(out[i].bytes_recv, 20 * (5 + i));
        assert_int_equal(out[i].stage, 1);
    }
    assert_int_equal(store_event_add(s, "joined", "stage 1 pool", err), STATUS_OK);
    assert_int_equal(store_event_add(s, "failed", NULL, err), STATUS_OK);
    assert_int_equal(store_event_add(s, "recovered", "from ckpt", err), STATUS_OK);
    assert_int_equal(store_event_add(s, "Bad Kind", "x", err), STATUS_EINVAL);
    store_event_t ev[8];
    assert_int_equal(store_event_last(s, 2, ev, &n, err), STATUS_OK);
    assert_int_equal(n, 2);
    assert_string_equal(ev[0].kind, "failed");
    assert_string_equal(ev[0].detail, "");
    assert_string_equal(ev[1].kind, "recovered");
    assert_string_equal(ev[1].detail, "from ckpt");
    assert_true(ev[1].id > ev[0].id);

    /* While another process holds the write lock, adding does not wait; rows land later. */
    sqlite3 *raw = NULL;
    assert_int_equal(sqlite3_open(store_path(s), &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    store_metric_t m = {.stage = 1, .step = 42};
    assert_int_equal(store_metric_add(s, &m, err), STATUS_OK);
    assert_int_equal(store_event_add(s, "resynced", "while locked", err), STATUS_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double dt = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    assert_true(dt < 1.0);
    assert_int_equal(sqlite3_exec(raw, "COMMIT", NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    assert_int_equal(store_metric_last(s, 1, out, &n, err), STATUS_OK);
    assert_int_equal(n, 1);
    assert_int_equal(out[0].step, 42);
    assert_true(out[0].time > 1.6e9); /* 0 meant now */
    assert_int_equal(store_event_last(s, 1, ev, &n, err), STATUS_OK);
    assert_string_equal(ev[0].kind, "resynced");
    store_close(&s);
}

static int setup(void **state)
{
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_store.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return testutil_rmtree(tmpdir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_and_chunk_edges),
        cmocka_unit_test(test_keep_k),
        cmocka_unit_test(test_async_snapshot_isolation),
        cmocka_unit_test(test_writer_budget),
        cmocka_unit_test(test_flipped_byte_falls_back),
        cmocka_unit_test(test_huge_length_falls_back),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_readonly_file),
        cmocka_unit_test(test_identity),
        cmocka_unit_test(test_metrics_events),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
