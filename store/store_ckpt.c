/* store_ckpt.c — checkpoint snapshots, writing them (on the caller's thread or on the
 * store's writer thread), pruning to the newest K, and loading with verification.
 * Not for: deciding what goes into a checkpoint; the caller names the blobs. */
#define _GNU_SOURCE /* gettid for the writer thread's priority */
#include "store/store_impl.h"

#include "common/clock.h"
#include "common/le.h"
#include "common/log.h"

#include <pthread.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#define STORE_HASH_BYTES 32 /* BLAKE2b-256 */
#define STORE_NAME_MAX   255

typedef struct {
    char *name;
    unsigned char *data;
    size_t bytes;
} store_blob_t;

struct store_ckpt {
    int stage;
    int64_t step;
    int64_t id;
    char *config_text;
    char *config_hash;
    store_blob_t *blobs;
    size_t nblobs, cap;
};

/* ---- the snapshot object ---- */

store_ckpt_t *store_ckpt_new(int stage, int64_t step, const char *config_text,
                             const char *config_hash_hex)
{
    if (stage < 0) return NULL;
    store_ckpt_t *ck = calloc(1, sizeof *ck);
    if (!ck) return NULL;
    ck->stage = stage;
    ck->step = step;
    ck->config_text = strdup(config_text ? config_text : "");
    ck->config_hash = strdup(config_hash_hex ? config_hash_hex : "");
    if (!ck->config_text || !ck->config_hash) store_ckpt_destroy(&ck);
    return ck;
}

void store_ckpt_destroy(store_ckpt_t **ckp)
{
    if (!ckp || !*ckp) return;
    store_ckpt_t *ck = *ckp;
    for (size_t i = 0; i < ck->nblobs; i++) {
        free(ck->blobs[i].name);
        free(ck->blobs[i].data);
    }
    free(ck->blobs);
    free(ck->config_text);
    free(ck->config_hash);
    free(ck);
    *ckp = NULL;
}

static int store_name_ok(const char *name)
{
    size_t n = name ? strlen(name) : 0;
    return n >= 1 && n <= STORE_NAME_MAX;
}

/* Appends a blob whose name and data ck now owns (data may be NULL when bytes is 0). */
static int store_ckpt_take_blob(store_ckpt_t *ck, char *name, unsigned char *data, size_t bytes)
{
    if (ck->nblobs == ck->cap) {
        size_t cap = ck->cap ? 2 * ck->cap : 4;
        store_blob_t *b = realloc(ck->blobs, cap * sizeof *b);
        if (!b) return STATUS_ENOMEM;
        ck->blobs = b;
        ck->cap = cap;
    }
    ck->blobs[ck->nblobs++] = (store_blob_t){name, data, bytes};
    return STATUS_OK;
}

int store_ckpt_add_blob(store_ckpt_t *ck, const char *name, const void *data, size_t bytes)
{
    char *n = NULL;
    unsigned char *d = NULL;
    if (!ck || !store_name_ok(name) || (bytes > 0 && !data)) return STATUS_EINVAL;
    if (store_ckpt_blob(ck, name, NULL) || bytes > (size_t)INT64_MAX) return STATUS_EINVAL;
    n = strdup(name);
    if (bytes > 0) d = malloc(bytes);
    if (!n || (bytes > 0 && !d)) goto nomem;
    if (bytes > 0) memcpy(d, data, bytes);
    if (store_ckpt_take_blob(ck, n, d, bytes) != STATUS_OK) goto nomem;
    return STATUS_OK;

nomem:
    free(n);
    free(d);
    return STATUS_ENOMEM;
}

int store_ckpt_stage(const store_ckpt_t *ck)
{
    return ck ? ck->stage : -1;
}
int64_t store_ckpt_step(const store_ckpt_t *ck)
{
    return ck ? ck->step : -1;
}
const char *store_ckpt_config_text(const store_ckpt_t *ck)
{
    return ck ? ck->config_text : NULL;
}
const char *store_ckpt_config_hash(const store_ckpt_t *ck)
{
    return ck ? ck->config_hash : NULL;
}
int64_t store_ckpt_id(const store_ckpt_t *ck)
{
    return ck ? ck->id : 0;
}
size_t store_ckpt_blob_count(const store_ckpt_t *ck)
{
    return ck ? ck->nblobs : 0;
}

const void *store_ckpt_blob_at(const store_ckpt_t *ck, size_t i, const char **name, size_t *bytes)
{
    if (name) *name = NULL;
    if (bytes) *bytes = 0;
    if (!ck || i >= ck->nblobs) return NULL;
    if (name) *name = ck->blobs[i].name;
    if (bytes) *bytes = ck->blobs[i].bytes;
    return ck->blobs[i].data;
}

const void *store_ckpt_blob(const store_ckpt_t *ck, const char *name, size_t *bytes)
{
    if (bytes) *bytes = 0;
    if (!ck || !name) return NULL;
    for (size_t i = 0; i < ck->nblobs; i++) {
        if (strcmp(ck->blobs[i].name, name) == 0) {
            if (bytes) *bytes = ck->blobs[i].bytes;
            /* An empty blob exists but has no bytes: return a non-NULL marker. */
            return ck->blobs[i].data ? (const void *)ck->blobs[i].data
                                     : (const void *)ck->blobs[i].name;
        }
    }
    return NULL;
}

/* ---- the manifest hash (docs/store-format.md, "Manifest hash") ---- */

static void store_hash_u64(crypto_generichash_state *h, uint64_t v)
{
    uint8_t b[8];
    le_put_u64(b, v);
    crypto_generichash_update(h, b, sizeof b);
}

static void store_hash_str(crypto_generichash_state *h, const char *s)
{
    size_t n = strlen(s);
    store_hash_u64(h, n);
    crypto_generichash_update(h, (const unsigned char *)s, n);
}

/* names[i], sizes[i] and hashes[i] describe blob i in index order. */
static void store_manifest_hash(unsigned char out[STORE_HASH_BYTES], int stage, int64_t step,
                                const char *config_text, const char *config_hash,
                                const store_ckpt_t *ck, const unsigned char *hashes)
{
    static const char tag[] = "swarmtrain-ckpt-1";
    crypto_generichash_state h;
    crypto_generichash_init(&h, NULL, 0, STORE_HASH_BYTES);
    crypto_generichash_update(&h, (const unsigned char *)tag, sizeof tag - 1);
    store_hash_u64(&h, (uint64_t)(int64_t)stage);
    store_hash_u64(&h, (uint64_t)step);
    store_hash_str(&h, config_text);
    store_hash_str(&h, config_hash);
    store_hash_u64(&h, ck->nblobs);
    for (size_t i = 0; i < ck->nblobs; i++) {
        store_hash_str(&h, ck->blobs[i].name);
        store_hash_u64(&h, ck->blobs[i].bytes);
        crypto_generichash_update(&h, hashes + i * STORE_HASH_BYTES, STORE_HASH_BYTES);
    }
    crypto_generichash_final(&h, out, STORE_HASH_BYTES);
}

/* ---- writing ---- */

/* Deletes all but the newest `keep` checkpoints of `stage`, inside the caller's
 * transaction. */
static int store_prune(sqlite3 *db, const char *path, int stage, int keep, char *err)
{
    static const char *const sql[] = {
        "DELETE FROM ckpt_chunk WHERE blob_id IN (SELECT id FROM ckpt_blob WHERE ckpt_id IN "
        "(SELECT id FROM ckpt WHERE stage = ?1 ORDER BY id DESC LIMIT -1 OFFSET ?2))",
        "DELETE FROM ckpt_blob WHERE ckpt_id IN "
        "(SELECT id FROM ckpt WHERE stage = ?1 ORDER BY id DESC LIMIT -1 OFFSET ?2)",
        "DELETE FROM ckpt WHERE id IN "
        "(SELECT id FROM ckpt WHERE stage = ?1 ORDER BY id DESC LIMIT -1 OFFSET ?2)",
    };
    int st = STATUS_OK;
    for (size_t i = 0; st == STATUS_OK && i < sizeof sql / sizeof sql[0]; i++) {
        sqlite3_stmt *q = NULL;
        int rc = sqlite3_prepare_v2(db, sql[i], -1, &q, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 1, stage);
        if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 2, keep);
        if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_DONE) rc = SQLITE_OK;
        sqlite3_finalize(q);
        if (rc != SQLITE_OK) st = store_fail(err, path, db, rc, "pruning old checkpoints");
    }
    return st;
}

/* In one transaction on db: deletes all but the newest keep - 1 checkpoints of ck's stage,
 * then writes ck. Deleting first lets the new checkpoint reuse the freed pages, so the file
 * does not grow past keep checkpoints, and a crash at any point leaves at most keep. The
 * caller serializes use of db. */
static int store_ckpt_write(sqlite3 *db, const char *path, const store_ckpt_t *ck, int keep,
                            char *err)
{
    sqlite3_stmt *qk = NULL, *qb = NULL, *qc = NULL, *qh = NULL;
    unsigned char *hashes = NULL;
    unsigned char manifest[STORE_HASH_BYTES];
    int64_t total = 0, ckpt_id;
    int rc = SQLITE_OK, st;

    hashes = malloc(ck->nblobs ? ck->nblobs * STORE_HASH_BYTES : 1);
    if (!hashes) return status_set(err, STATUS_ENOMEM, "%s: out of memory", path);
    for (size_t i = 0; i < ck->nblobs; i++) total += (int64_t)ck->blobs[i].bytes;

    /* A checkpoint is worth an fsync at commit; metrics are not (NORMAL elsewhere). */
    if ((st = store_exec(db, path, "PRAGMA synchronous=FULL", err)) != STATUS_OK) goto done;
    if ((st = store_exec(db, path, "BEGIN IMMEDIATE", err)) != STATUS_OK) goto done;
    if ((st = store_prune(db, path, ck->stage, keep - 1, err)) != STATUS_OK) goto done;

    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO ckpt(stage,step,created,config_text,config_hash,nblobs,"
                            "total_bytes,manifest_hash) VALUES(?,?,?,?,?,?,?,zeroblob(32))",
                            -1, &qk, NULL);
    if (rc != SQLITE_OK) goto sqlfail;
    sqlite3_bind_int(qk, 1, ck->stage);
    sqlite3_bind_int64(qk, 2, ck->step);
    sqlite3_bind_double(qk, 3, store_unix_now());
    sqlite3_bind_text(qk, 4, ck->config_text, -1, SQLITE_STATIC);
    sqlite3_bind_text(qk, 5, ck->config_hash, -1, SQLITE_STATIC);
    sqlite3_bind_int64(qk, 6, (int64_t)ck->nblobs);
    sqlite3_bind_int64(qk, 7, total);
    if ((rc = sqlite3_step(qk)) != SQLITE_DONE) goto sqlfail;
    ckpt_id = sqlite3_last_insert_rowid(db);

    rc = sqlite3_prepare_v2(db,
                            "INSERT INTO ckpt_blob(ckpt_id,idx,name,bytes,hash) "
                            "VALUES(?,?,?,?,zeroblob(32))",
                            -1, &qb, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "INSERT INTO ckpt_chunk(blob_id,seq,data) VALUES(?,?,?)", -1,
                                &qc, NULL);
    if (rc == SQLITE_OK)
        rc = sqlite3_prepare_v2(db, "UPDATE ckpt_blob SET hash = ? WHERE id = ?", -1, &qh, NULL);
    if (rc != SQLITE_OK) goto sqlfail;

    for (size_t i = 0; i < ck->nblobs; i++) {
        const store_blob_t *b = &ck->blobs[i];
        crypto_generichash_state h;
        sqlite3_reset(qb);
        sqlite3_bind_int64(qb, 1, ckpt_id);
        sqlite3_bind_int64(qb, 2, (int64_t)i);
        sqlite3_bind_text(qb, 3, b->name, -1, SQLITE_STATIC);
        sqlite3_bind_int64(qb, 4, (int64_t)b->bytes);
        if ((rc = sqlite3_step(qb)) != SQLITE_DONE) goto sqlfail;
        int64_t blob_id = sqlite3_last_insert_rowid(db);
        crypto_generichash_init(&h, NULL, 0, STORE_HASH_BYTES);
        /* Hash each chunk just before SQLite copies it, while it is still in cache. */
        for (size_t off = 0, seq = 0; off < b->bytes; off += STORE_CHUNK_BYTES, seq++) {
            size_t n = b->bytes - off < STORE_CHUNK_BYTES ? b->bytes - off : STORE_CHUNK_BYTES;
            crypto_generichash_update(&h, b->data + off, n);
            sqlite3_reset(qc);
            sqlite3_bind_int64(qc, 1, blob_id);
            sqlite3_bind_int64(qc, 2, (int64_t)seq);
            sqlite3_bind_blob(qc, 3, b->data + off, (int)n, SQLITE_STATIC);
            if ((rc = sqlite3_step(qc)) != SQLITE_DONE) goto sqlfail;
        }
        crypto_generichash_final(&h, hashes + i * STORE_HASH_BYTES, STORE_HASH_BYTES);
        sqlite3_reset(qh);
        sqlite3_bind_blob(qh, 1, hashes + i * STORE_HASH_BYTES, STORE_HASH_BYTES, SQLITE_STATIC);
        sqlite3_bind_int64(qh, 2, blob_id);
        if ((rc = sqlite3_step(qh)) != SQLITE_DONE) goto sqlfail;
    }

    store_manifest_hash(manifest, ck->stage, ck->step, ck->config_text, ck->config_hash, ck,
                        hashes);
    sqlite3_finalize(qh);
    qh = NULL;
    rc = sqlite3_prepare_v2(db, "UPDATE ckpt SET manifest_hash = ? WHERE id = ?", -1, &qh, NULL);
    if (rc != SQLITE_OK) goto sqlfail;
    sqlite3_bind_blob(qh, 1, manifest, STORE_HASH_BYTES, SQLITE_STATIC);
    sqlite3_bind_int64(qh, 2, ckpt_id);
    if ((rc = sqlite3_step(qh)) != SQLITE_DONE) goto sqlfail;
    if ((rc = sqlite3_exec(db, "COMMIT", NULL, NULL, NULL)) != SQLITE_OK) goto sqlfail;
    st = STATUS_OK;
    goto done;

sqlfail:
    st = store_fail(err, path, db, rc, "writing a checkpoint");
done:
    sqlite3_finalize(qk);
    sqlite3_finalize(qb);
    sqlite3_finalize(qc);
    sqlite3_finalize(qh);
    store_rollback(db);
    free(hashes);
    if (store_exec(db, path, "PRAGMA synchronous=NORMAL", NULL) != STATUS_OK)
        log_warn("store: %s: cannot reset synchronous mode", path);
    return st;
}

int store_ckpt_save(store_t *s, const store_ckpt_t *ck, char *err)
{
    if (!s || !ck) return status_set(err, STATUS_EINVAL, "store_ckpt_save: NULL argument");
    pthread_mutex_lock(&s->wmu);
    int keep = s->keep;
    pthread_mutex_unlock(&s->wmu);
    pthread_mutex_lock(&s->mu);
    int st = store_ckpt_write(s->db, s->path, ck, keep, err);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- the writer thread ---- */

/* CPU seconds this thread has used. */
static double store_thread_cpu(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) != 0) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Waits, with wmu held, until the rest the budget imposes is over or someone waits for
 * the writer (flush, stop). */
static void store_writer_rest(store_t *s)
{
    for (;;) {
        double left = s->rest_until - clock_now();
        if (left <= 0 || s->flush || s->stop) return;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        double when = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + left;
        ts.tv_sec = (time_t)when;
        ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        double t0 = clock_now();
        pthread_cond_timedwait(&s->work_cv, &s->wmu, &ts);
        s->stats.rested_s += clock_now() - t0;
    }
}

static void *store_writer_main(void *arg)
{
    store_t *s = arg;
    char err[STATUS_ERR_LEN];
    /* Training should not wait for a checkpoint: the writer runs at a lower priority
     * (nice 10 on Linux, where a thread's nice value is its own) but, unlike SCHED_IDLE,
     * still progresses on a machine that is never idle; its budget (store_set_writer_budget)
     * bounds what it takes on average. A write that falls behind is replaced by a newer
     * snapshot, never queued without bound. */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 10) != 0)
        log_debug("store: could not lower the checkpoint writer's priority");
    pthread_mutex_lock(&s->wmu);
    for (;;) {
        while (!s->pending && !s->stop) pthread_cond_wait(&s->work_cv, &s->wmu);
        if (!s->pending) break;
        store_writer_rest(s); /* a newer snapshot may replace the pending one meanwhile */
        store_ckpt_t *ck = s->pending;
        s->pending = NULL;
        s->busy = 1;
        int keep = s->keep;
        int64_t max_pages = s->max_pages;
        int apply = max_pages != s->wdb_max_pages;
        pthread_mutex_unlock(&s->wmu);

        double t0 = clock_now(), c0 = store_thread_cpu();
        err[0] = '\0';
        int st = apply ? store_db_max_pages(s->wdb, s->path, max_pages, err) : STATUS_OK;
        if (st == STATUS_OK) st = store_ckpt_write(s->wdb, s->path, ck, keep, err);
        if (st != STATUS_OK)
            log_warn("store: background checkpoint of stage %d step %lld failed: %s", ck->stage,
                     (long long)ck->step, err);
        store_ckpt_destroy(&ck);
        double cpu = store_thread_cpu() - c0;

        pthread_mutex_lock(&s->wmu);
        if (apply) s->wdb_max_pages = max_pages;
        s->busy = 0;
        s->stats.cpu_s += cpu;
        s->last_start = t0;
        s->last_cpu = cpu;
        s->rest_until = t0 + cpu / s->budget;
        if (st == STATUS_OK) {
            s->stats.saved++;
        } else {
            s->stats.failed++;
            s->stats.last_status = st;
            snprintf(s->stats.last_err, sizeof s->stats.last_err, "%s", err);
        }
        pthread_cond_broadcast(&s->done_cv);
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

void store_set_writer_budget(store_t *s, double share)
{
    if (!s) return;
    pthread_mutex_lock(&s->wmu);
    s->budget = share > 0 && share <= 1 ? share : 1;
    s->rest_until = s->last_start + s->last_cpu / s->budget;
    pthread_cond_broadcast(&s->work_cv); /* a rest in progress is measured anew */
    pthread_mutex_unlock(&s->wmu);
}

int store_ckpt_ready(store_t *s)
{
    if (!s) return 0;
    pthread_mutex_lock(&s->wmu);
    int ready = !s->busy && !s->pending && clock_now() >= s->rest_until;
    pthread_mutex_unlock(&s->wmu);
    return ready;
}

void store_ckpt_save_async(store_t *s, store_ckpt_t **ckp)
{
    if (!ckp || !*ckp) return;
    if (!s) {
        store_ckpt_destroy(ckp);
        return;
    }
    pthread_mutex_lock(&s->wmu);
    if (!s->thread_on) {
        if (pthread_create(&s->thread, NULL, store_writer_main, s) != 0) {
            s->stats.failed++;
            s->stats.last_status = STATUS_ENOMEM;
            snprintf(s->stats.last_err, sizeof s->stats.last_err,
                     "%s: cannot start the checkpoint writer thread", s->path);
            log_warn("%s", s->stats.last_err);
            store_ckpt_destroy(ckp);
            pthread_mutex_unlock(&s->wmu);
            return;
        }
        s->thread_on = 1;
    }
    if (s->pending) {
        store_ckpt_destroy(&s->pending);
        s->stats.replaced++;
    }
    s->pending = *ckp;
    *ckp = NULL;
    pthread_cond_signal(&s->work_cv);
    pthread_mutex_unlock(&s->wmu);
}

void store_ckpt_wait(store_t *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->wmu);
    s->flush++;
    pthread_cond_broadcast(&s->work_cv); /* ends a rest */
    while (s->pending || s->busy) pthread_cond_wait(&s->done_cv, &s->wmu);
    s->flush--;
    pthread_mutex_unlock(&s->wmu);
}

void store_writer_stats(store_t *s, store_writer_stats_t *out)
{
    if (!out) return;
    memset(out, 0, sizeof *out);
    if (!s) return;
    pthread_mutex_lock(&s->wmu);
    *out = s->stats;
    pthread_mutex_unlock(&s->wmu);
}

void store_writer_stop(store_t *s)
{
    pthread_mutex_lock(&s->wmu);
    s->stop = 1; /* also ends a rest: what is pending is written before the thread ends */
    int on = s->thread_on;
    pthread_cond_broadcast(&s->work_cv);
    pthread_mutex_unlock(&s->wmu);
    if (on) pthread_join(s->thread, NULL);
    pthread_mutex_lock(&s->wmu);
    s->thread_on = 0;
    store_ckpt_destroy(&s->pending);
    pthread_mutex_unlock(&s->wmu);
}

/* ---- reading and verifying ---- */

/* Reads checkpoint `id` inside the caller's read transaction and checks its structure,
 * every blob hash and the manifest hash. With keep_data == 0 only the check is done and
 * *out gets the metadata without blob bytes. STATUS_ECORRUPT (message in err) when
 * something does not verify; other statuses for I/O errors. */
static int store_ckpt_read(store_t *s, int64_t id, int keep_data, store_ckpt_t **out, char *err)
{
    sqlite3 *db = s->db;
    const char *path = s->path;
    sqlite3_stmt *qk = NULL, *qb = NULL, *qc = NULL;
    store_ckpt_t *ck = NULL;
    unsigned char *hashes = NULL, *data = NULL;
    char *name = NULL;
    unsigned char manifest[STORE_HASH_BYTES];
    int64_t nblobs, total, sum = 0;
    int rc, st = STATUS_OK;
    *out = NULL;

    if ((qk = store_stmt(s, STORE_Q_CKPT_ROW, &rc))) rc = sqlite3_bind_int64(qk, 1, id);
    if (rc == SQLITE_OK) rc = sqlite3_step(qk);
    if (rc == SQLITE_DONE) {
        st = status_set(err, STATUS_ENOTFOUND, "%s: no checkpoint %lld", path, (long long)id);
        goto done;
    }
    if (rc != SQLITE_ROW) goto sqlfail;
    {
        int64_t stage = sqlite3_column_int64(qk, 0);
        const char *text = (const char *)sqlite3_column_text(qk, 2);
        const char *chash = (const char *)sqlite3_column_text(qk, 3);
        nblobs = sqlite3_column_int64(qk, 4);
        total = sqlite3_column_int64(qk, 5);
        if (stage < 0 || stage > INT32_MAX || nblobs < 0 || nblobs > 1000000 || total < 0 ||
            sqlite3_column_bytes(qk, 6) != STORE_HASH_BYTES)
            goto corrupt_row;
        memcpy(manifest, sqlite3_column_blob(qk, 6), STORE_HASH_BYTES);
        ck = store_ckpt_new((int)stage, sqlite3_column_int64(qk, 1), text, chash);
        if (!ck) goto nomem;
        ck->id = id;
    }
    hashes = malloc(nblobs ? (size_t)nblobs * STORE_HASH_BYTES : 1);
    if (!hashes) goto nomem;

    if ((qb = store_stmt(s, STORE_Q_CKPT_BLOB, &rc))) rc = sqlite3_bind_int64(qb, 1, id);
    if (rc == SQLITE_OK) qc = store_stmt(s, STORE_Q_CKPT_CHUNK, &rc);
    if (rc != SQLITE_OK) goto sqlfail;
    while ((rc = sqlite3_step(qb)) == SQLITE_ROW) {
        size_t i = ck->nblobs;
        int64_t blob_id = sqlite3_column_int64(qb, 0);
        int64_t bytes = sqlite3_column_int64(qb, 3);
        const char *bname = (const char *)sqlite3_column_text(qb, 2);
        crypto_generichash_state h;
        unsigned char got[STORE_HASH_BYTES];
        if ((int64_t)i >= nblobs || sqlite3_column_int64(qb, 1) != (int64_t)i ||
            !store_name_ok(bname) || bytes < 0 || bytes > total - sum ||
            sqlite3_column_bytes(qb, 4) != STORE_HASH_BYTES)
            goto corrupt_row;
        memcpy(hashes + i * STORE_HASH_BYTES, sqlite3_column_blob(qb, 4), STORE_HASH_BYTES);
        sum += bytes;
        name = strdup(bname);
        if (!name) goto nomem;
        /* the buffer grows with the chunks that are there: `bytes` is only a row's word
         * until the hash has checked it (a row claiming exabytes made this malloc them) */
        int64_t cap = 0;
        crypto_generichash_init(&h, NULL, 0, STORE_HASH_BYTES);
        int64_t off = 0, seq = 0;
        sqlite3_reset(qc);
        sqlite3_bind_int64(qc, 1, blob_id);
        while ((rc = sqlite3_step(qc)) == SQLITE_ROW) {
            const void *p = sqlite3_column_blob(qc, 1);
            int n = sqlite3_column_bytes(qc, 1);
            if (sqlite3_column_int64(qc, 0) != seq || n <= 0 || !p || n > bytes - off) {
                st = status_set(err, STATUS_ECORRUPT,
                                "%s: checkpoint %lld blob \"%s\": chunk %lld is malformed", path,
                                (long long)id, name, (long long)seq);
                goto done;
            }
            crypto_generichash_update(&h, p, (size_t)n);
            if (keep_data) {
                if (off + n > cap) {
                    int64_t want = cap > 0 ? 2 * cap : n; /* doubling: few copies */
                    if (want > bytes) want = bytes;
                    if (want < off + n) want = off + n;
                    unsigned char *grown = realloc(data, (size_t)want);
                    if (!grown) goto nomem;
                    data = grown;
                    cap = want;
                }
                memcpy(data + off, p, (size_t)n);
            }
            off += n;
            seq++;
        }
        if (rc != SQLITE_DONE) goto sqlfail;
        crypto_generichash_final(&h, got, STORE_HASH_BYTES);
        if (off != bytes) {
            st = status_set(err, STATUS_ECORRUPT,
                            "%s: checkpoint %lld blob \"%s\": %lld of %lld bytes present", path,
                            (long long)id, name, (long long)off, (long long)bytes);
            goto done;
        }
        if (sodium_memcmp(got, hashes + i * STORE_HASH_BYTES, STORE_HASH_BYTES) != 0) {
            st = status_set(err, STATUS_ECORRUPT,
                            "%s: checkpoint %lld (stage %d step %lld) blob \"%s\": BLAKE2b hash "
                            "mismatch",
                            path, (long long)id, ck->stage, (long long)ck->step, name);
            goto done;
        }
        /* Without keep_data the blob has its length (for the manifest) but no bytes. */
        if (store_ckpt_take_blob(ck, name, data, (size_t)bytes) != STATUS_OK) goto nomem;
        name = NULL;
        data = NULL;
    }
    if (rc != SQLITE_DONE) goto sqlfail;
    if ((int64_t)ck->nblobs != nblobs || sum != total) goto corrupt_row;
    {
        unsigned char got[STORE_HASH_BYTES];
        store_manifest_hash(got, ck->stage, ck->step, ck->config_text, ck->config_hash, ck, hashes);
        if (sodium_memcmp(got, manifest, STORE_HASH_BYTES) != 0) {
            st = status_set(err, STATUS_ECORRUPT,
                            "%s: checkpoint %lld: manifest hash mismatch (metadata altered)", path,
                            (long long)id);
            goto done;
        }
    }
    *out = ck;
    ck = NULL;
    goto done;

corrupt_row:
    st = status_set(err, STATUS_ECORRUPT, "%s: checkpoint %lld: malformed rows", path,
                    (long long)id);
    goto done;
nomem:
    st = status_set(err, STATUS_ENOMEM, "%s: out of memory reading checkpoint %lld", path,
                    (long long)id);
    goto done;
sqlfail:
    st = store_fail(err, path, db, rc, "reading a checkpoint");
done:
    store_stmt_done(qk);
    store_stmt_done(qb);
    store_stmt_done(qc);
    free(hashes);
    free(name);
    free(data);
    store_ckpt_destroy(&ck);
    return st;
}

/* Ids (and facts) of checkpoints, newest first; stage < 0 means every stage. mu held. */
static int store_ckpt_ids(store_t *s, int stage, int max, store_ckpt_info_t **out, int *n,
                          char *err)
{
    sqlite3_stmt *q = NULL;
    store_ckpt_info_t *v = NULL;
    int cap = 0, k = 0, rc;
    *out = NULL;
    *n = 0;
    if ((q = store_stmt(s, STORE_Q_CKPT_IDS, &rc))) rc = sqlite3_bind_int(q, 1, stage);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 2, max);
    while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW) {
        if (k == cap) {
            cap = cap ? 2 * cap : 16;
            store_ckpt_info_t *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) {
                free(v);
                store_stmt_done(q);
                return status_set(err, STATUS_ENOMEM, "%s: out of memory", s->path);
            }
            v = nv;
        }
        v[k++] = (store_ckpt_info_t){
            .id = sqlite3_column_int64(q, 0),
            .stage = sqlite3_column_int(q, 1),
            .step = sqlite3_column_int64(q, 2),
            .time = sqlite3_column_double(q, 3),
            .bytes = sqlite3_column_int64(q, 4),
            .nblobs = sqlite3_column_int(q, 5),
            .verified = -1,
        };
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE) {
        /* the message before the reset, which may replace it */
        int st = store_fail(err, s->path, s->db, rc, "listing checkpoints");
        store_stmt_done(q);
        free(v);
        return st;
    }
    store_stmt_done(q);
    *out = v;
    *n = k;
    return STATUS_OK;
}

int store_ckpt_load_latest(store_t *s, int stage, store_ckpt_t **out, char *err)
{
    return store_ckpt_load_step(s, stage, -1, out, err);
}

int store_ckpt_load_step(store_t *s, int stage, int64_t step, store_ckpt_t **out, char *err)
{
    store_ckpt_info_t *ids = NULL;
    char(*bad)[STATUS_ERR_LEN] = NULL;
    int n = 0, nbad = 0, st;
    if (out) *out = NULL;
    if (!s || !out || stage < 0)
        return status_set(err, STATUS_EINVAL, "store_ckpt_load_latest: bad argument");
    pthread_mutex_lock(&s->mu);
    /* One read transaction: the writer thread may prune meanwhile; we see one snapshot. */
    if ((st = store_stmt_exec(s, STORE_Q_BEGIN, err)) != STATUS_OK) goto done;
    if ((st = store_ckpt_ids(s, stage, INT32_MAX, &ids, &n, err)) != STATUS_OK) goto done;
    bad = calloc((size_t)n + 1, sizeof *bad);
    if (!bad) {
        st = status_set(err, STATUS_ENOMEM, "%s: out of memory", s->path);
        goto done;
    }
    st = status_set(err, STATUS_ENOTFOUND, "%s: no checkpoint of stage %d", s->path, stage);
    if (step >= 0)
        st = status_set(err, STATUS_ENOTFOUND, "%s: no checkpoint of stage %d at step %" PRId64,
                        s->path, stage, step);
    for (int i = 0; i < n; i++) {
        if (step >= 0 && ids[i].step != step) continue;
        st = store_ckpt_read(s, ids[i].id, 1, out, bad[nbad]);
        if (st == STATUS_OK) break;
        if (st != STATUS_ECORRUPT) {
            if (err) snprintf(err, STATUS_ERR_LEN, "%s", bad[nbad]);
            goto done;
        }
        nbad++;
        st = status_set(err, STATUS_ENOTFOUND, "%s: no good checkpoint of stage %d (%d bad)",
                        s->path, stage, nbad);
    }
done:
    store_stmt_rollback(s);
    /* Report bad ones after the read transaction: an event needs the write lock. */
    for (int i = 0; i < nbad; i++) {
        log_warn("store: skipping bad checkpoint: %s", bad[i]);
        if (store_event_add_locked(s, "ckpt_bad", bad[i], NULL) != STATUS_OK)
            log_warn("store: cannot record the ckpt_bad event");
    }
    pthread_mutex_unlock(&s->mu);
    free(ids);
    free(bad);
    return st;
}

int store_ckpt_list(store_t *s, int verify, store_ckpt_info_t *out, int max, int *count, char *err)
{
    store_ckpt_info_t *ids = NULL;
    int n = 0, st;
    if (count) *count = 0;
    if (!s || !count || max < 0 || (max > 0 && !out))
        return status_set(err, STATUS_EINVAL, "store_ckpt_list: bad argument");
    pthread_mutex_lock(&s->mu);
    if ((st = store_stmt_exec(s, STORE_Q_BEGIN, err)) != STATUS_OK) goto done;
    if ((st = store_ckpt_ids(s, -1, max, &ids, &n, err)) != STATUS_OK) goto done;
    for (int i = 0; verify && i < n; i++) {
        store_ckpt_t *ck = NULL;
        char e2[STATUS_ERR_LEN];
        int r = store_ckpt_read(s, ids[i].id, 0, &ck, e2);
        store_ckpt_destroy(&ck);
        if (r != STATUS_OK && r != STATUS_ECORRUPT) {
            st = status_set(err, r, "%s", e2);
            goto done;
        }
        ids[i].verified = r == STATUS_OK;
    }
    if (n > 0) memcpy(out, ids, (size_t)n * sizeof *ids);
    *count = n;
done:
    store_stmt_rollback(s);
    pthread_mutex_unlock(&s->mu);
    free(ids);
    return st;
}
