/* store.c — opening a store file (schema, version and format checks), SQLite error
 * messages, metrics, events and the peer identity. Checkpoints live in store_ckpt.c.
 * Not for: interpreting checkpoint contents. */
#include "store/store_impl.h"

#include "common/log.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Rows buffered while the write lock is taken; past this the caller waits instead. */
#define STORE_PEND_MAX 65536

/* Version 1 of the schema; docs/store-format.md explains every column. */
static const char store_schema_v1[] = "CREATE TABLE ckpt("
                                      " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                                      " stage INTEGER NOT NULL,"
                                      " step INTEGER NOT NULL,"
                                      " created REAL NOT NULL,"
                                      " config_text TEXT NOT NULL,"
                                      " config_hash TEXT NOT NULL,"
                                      " nblobs INTEGER NOT NULL,"
                                      " total_bytes INTEGER NOT NULL,"
                                      " manifest_hash BLOB NOT NULL);"
                                      "CREATE INDEX ckpt_by_stage ON ckpt(stage, id);"
                                      "CREATE TABLE ckpt_blob("
                                      " id INTEGER PRIMARY KEY,"
                                      " ckpt_id INTEGER NOT NULL REFERENCES ckpt(id),"
                                      " idx INTEGER NOT NULL,"
                                      " name TEXT NOT NULL,"
                                      " bytes INTEGER NOT NULL,"
                                      " hash BLOB NOT NULL,"
                                      " UNIQUE(ckpt_id, idx), UNIQUE(ckpt_id, name));"
                                      "CREATE TABLE ckpt_chunk("
                                      " id INTEGER PRIMARY KEY,"
                                      " blob_id INTEGER NOT NULL REFERENCES ckpt_blob(id),"
                                      " seq INTEGER NOT NULL,"
                                      " data BLOB NOT NULL,"
                                      " UNIQUE(blob_id, seq));"
                                      "CREATE TABLE metric("
                                      " id INTEGER PRIMARY KEY,"
                                      " time REAL NOT NULL,"
                                      " stage INTEGER NOT NULL,"
                                      " step INTEGER NOT NULL,"
                                      " loss REAL,"
                                      " tokens_per_s REAL,"
                                      " bytes_sent INTEGER NOT NULL,"
                                      " bytes_recv INTEGER NOT NULL);"
                                      "CREATE TABLE event("
                                      " id INTEGER PRIMARY KEY,"
                                      " time REAL NOT NULL,"
                                      " kind TEXT NOT NULL,"
                                      " detail TEXT NOT NULL);"
                                      "CREATE TABLE identity("
                                      " id INTEGER PRIMARY KEY CHECK (id = 1),"
                                      " algorithm TEXT NOT NULL,"
                                      " public_key BLOB NOT NULL,"
                                      " secret_key BLOB NOT NULL,"
                                      " created REAL NOT NULL);";

static pthread_once_t store_sodium_once = PTHREAD_ONCE_INIT;
static int store_sodium_rc = -1;

static void store_sodium_init(void)
{
    store_sodium_rc = sodium_init() < 0 ? -1 : 0;
}

double store_unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int store_fail(char *err, const char *path, sqlite3 *db, int rc, const char *what)
{
    int st = STATUS_EIO;
    const char *hint = "I/O error";
    switch (rc & 0xff) {
    case SQLITE_FULL:
        st = STATUS_EFULL;
        hint = "disk full or store size limit reached; the write was rolled back";
        break;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        st = STATUS_EBUSY;
        hint = "database locked by another connection or process";
        break;
    case SQLITE_NOMEM:
        st = STATUS_ENOMEM;
        hint = "out of memory";
        break;
    case SQLITE_NOTADB:
        st = STATUS_EMALFORMED;
        hint = "file is not a SQLite database; refusing to touch it";
        break;
    case SQLITE_CORRUPT:
        st = STATUS_ECORRUPT;
        hint = "database file is corrupt";
        break;
    case SQLITE_READONLY:
        hint = "database is read-only (file permissions or read-only file system)";
        break;
    case SQLITE_CANTOPEN:
        hint = "cannot open the file or its -wal/-shm companions (does the directory exist "
               "and is it writable?)";
        break;
    case SQLITE_PERM:
        hint = "permission denied";
        break;
    default:
        break;
    }
    const char *detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    return status_set(err, st, "%s: %s: %s [sqlite: %s]", path, what, hint, detail);
}

static const char *const store_stmt_sql[STORE_Q_N] = {
    [STORE_Q_CKPT_IDS] = "SELECT id,stage,step,created,total_bytes,nblobs FROM ckpt "
                         "WHERE ?1 < 0 OR stage = ?1 ORDER BY id DESC LIMIT ?2",
    [STORE_Q_CKPT_ROW] = "SELECT stage,step,config_text,config_hash,nblobs,total_bytes,"
                         "manifest_hash FROM ckpt WHERE id = ?",
    [STORE_Q_CKPT_BLOB] = "SELECT id,idx,name,bytes,hash FROM ckpt_blob WHERE ckpt_id = ? "
                          "ORDER BY idx",
    [STORE_Q_CKPT_CHUNK] = "SELECT seq, data FROM ckpt_chunk WHERE blob_id = ? ORDER BY seq",
    [STORE_Q_IDENTITY] = "SELECT algorithm, public_key, secret_key FROM identity WHERE id = 1",
    [STORE_Q_METRIC_ADD] = "INSERT INTO metric(time,stage,step,loss,tokens_per_s,bytes_sent,"
                           "bytes_recv) VALUES(?,?,?,?,?,?,?)",
    [STORE_Q_EVENT_ADD] = "INSERT INTO event(time,kind,detail) VALUES(?,?,?)",
    [STORE_Q_BEGIN] = "BEGIN",
    [STORE_Q_ROLLBACK] = "ROLLBACK",
};

sqlite3_stmt *store_stmt(store_t *s, int which, int *rc)
{
    *rc = SQLITE_OK;
    if (!s->q[which])
        *rc = sqlite3_prepare_v3(s->db, store_stmt_sql[which], -1, SQLITE_PREPARE_PERSISTENT,
                                 &s->q[which], NULL);
    return *rc == SQLITE_OK ? s->q[which] : NULL;
}

void store_stmt_done(sqlite3_stmt *q)
{
    if (!q) return;
    sqlite3_reset(q); /* repeats the last step's error, which its caller has seen */
    sqlite3_clear_bindings(q);
}

int store_stmt_exec(store_t *s, int which, char *err)
{
    int rc;
    sqlite3_stmt *q = store_stmt(s, which, &rc);
    if (q && (rc = sqlite3_step(q)) == SQLITE_DONE) rc = SQLITE_OK;
    int st =
        rc == SQLITE_OK ? STATUS_OK : store_fail(err, s->path, s->db, rc, store_stmt_sql[which]);
    store_stmt_done(q);
    return st;
}

void store_stmt_rollback(store_t *s)
{
    if (sqlite3_get_autocommit(s->db)) return;
    if (store_stmt_exec(s, STORE_Q_ROLLBACK, NULL) != STATUS_OK)
        log_warn("store: rollback failed: %s", sqlite3_errmsg(s->db));
}

int store_exec(sqlite3 *db, const char *path, const char *sql, char *err)
{
    int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);
    if (rc != SQLITE_OK) return store_fail(err, path, db, rc, sql);
    return STATUS_OK;
}

void store_rollback(sqlite3 *db)
{
    if (sqlite3_get_autocommit(db)) return;
    int rc = sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    if (rc != SQLITE_OK) log_warn("store: rollback failed: %s", sqlite3_errmsg(db));
}

int store_db_max_pages(sqlite3 *db, const char *path, int64_t pages, char *err)
{
    char sql[64];
    snprintf(sql, sizeof sql, "PRAGMA max_page_count=%lld",
             (long long)(pages > 0 ? pages : 4294967294LL));
    return store_exec(db, path, sql, err);
}

/* One integer from a one-row query; rc is SQLite's. */
static int store_query_int(sqlite3 *db, const char *sql, int64_t *v)
{
    sqlite3_stmt *st = NULL;
    int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);
    if (rc == SQLITE_OK) {
        rc = sqlite3_step(st);
        if (rc == SQLITE_ROW) {
            *v = sqlite3_column_int64(st, 0);
            rc = SQLITE_OK;
        } else if (rc == SQLITE_DONE) {
            *v = 0;
            rc = SQLITE_OK;
        }
    }
    sqlite3_finalize(st);
    return rc;
}

/* Reads application_id, user_version and the number of schema objects: the three facts that
 * decide whether we may touch the file. Reads only. */
static int store_probe(sqlite3 *db, const char *path, int64_t *app, int64_t *ver, int64_t *nobj,
                       char *err)
{
    int rc = store_query_int(db, "PRAGMA application_id", app);
    if (rc == SQLITE_OK) rc = store_query_int(db, "PRAGMA user_version", ver);
    if (rc == SQLITE_OK) rc = store_query_int(db, "SELECT count(*) FROM sqlite_master", nobj);
    if (rc != SQLITE_OK) return store_fail(err, path, db, rc, "reading the file header");
    return STATUS_OK;
}

/* Refuses what is not ours or too new; STATUS_OK for our stores and empty files. */
static int store_check_kind(const char *path, int64_t app, int64_t ver, int64_t nobj, char *err)
{
    if (nobj > 0 && app != STORE_APPLICATION_ID)
        return status_set(err, STATUS_EMALFORMED,
                          "%s: a SQLite database but not a swarmtrain store (application_id "
                          "0x%llx); refusing to touch it",
                          path, (unsigned long long)app);
    if (ver > STORE_SCHEMA_VERSION)
        return status_set(err, STATUS_EVERSION,
                          "%s: store schema version %lld is newer than this build supports "
                          "(%d); use a newer swarmtrain or another file",
                          path, (long long)ver, STORE_SCHEMA_VERSION);
    if (nobj > 0 && ver < 1)
        return status_set(err, STATUS_EMALFORMED,
                          "%s: store has no schema version; refusing to touch it", path);
    return STATUS_OK;
}

int store_db_open(const char *path, sqlite3 **out, char *err)
{
    sqlite3 *db = NULL;
    int64_t app = 0, ver = 0, nobj = 0;
    int rc, st;
    *out = NULL;
    /* The file holds the peer's secret key: a new one is created private (0600), and SQLite
     * gives its -wal and -shm files the same mode. */
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) close(fd);
    rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL);
    if (rc != SQLITE_OK) {
        st = store_fail(err, path, db, rc, "open");
        goto fail;
    }
    sqlite3_extended_result_codes(db, 1);
    sqlite3_busy_timeout(db, STORE_BUSY_MS);
    if (sqlite3_db_readonly(db, "main") == 1) {
        st = status_set(err, STATUS_EIO,
                        "%s: file is read-only (permissions or read-only file system); a "
                        "store must be writable",
                        path);
        goto fail;
    }
    if ((st = store_probe(db, path, &app, &ver, &nobj, err)) != STATUS_OK) goto fail;
    if ((st = store_check_kind(path, app, ver, nobj, err)) != STATUS_OK) goto fail;
    if (nobj == 0) {
        /* page_size only takes effect before the first table and before WAL. */
        if ((st = store_exec(db, path, "PRAGMA page_size=65536", err)) != STATUS_OK) goto fail;
    }
    {
        sqlite3_stmt *q = NULL;
        rc = sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &q, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_step(q);
        const char *mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(q, 0) : NULL;
        int wal = mode && strcmp(mode, "wal") == 0;
        sqlite3_finalize(q);
        if (rc != SQLITE_ROW) {
            st = store_fail(err, path, db, rc, "switching to WAL mode");
            goto fail;
        }
        if (!wal) {
            st = status_set(err, STATUS_EIO, "%s: cannot switch the database to WAL mode", path);
            goto fail;
        }
    }
    if ((st = store_exec(db, path, "PRAGMA synchronous=NORMAL", err)) != STATUS_OK) goto fail;
    if (nobj == 0) {
        /* Another process may be creating the same file: decide again under the lock. */
        if ((st = store_exec(db, path, "BEGIN IMMEDIATE", err)) != STATUS_OK) goto fail;
        if ((st = store_probe(db, path, &app, &ver, &nobj, err)) != STATUS_OK) goto fail;
        if ((st = store_check_kind(path, app, ver, nobj, err)) != STATUS_OK) goto fail;
        if (nobj == 0) {
            char sql[128];
            if ((st = store_exec(db, path, store_schema_v1, err)) != STATUS_OK) goto fail;
            snprintf(sql, sizeof sql, "PRAGMA application_id=%d; PRAGMA user_version=%d",
                     STORE_APPLICATION_ID, STORE_SCHEMA_VERSION);
            if ((st = store_exec(db, path, sql, err)) != STATUS_OK) goto fail;
        }
        if ((st = store_exec(db, path, "COMMIT", err)) != STATUS_OK) goto fail;
    }
    *out = db;
    return STATUS_OK;

fail:
    if (db) {
        store_rollback(db);
        sqlite3_close_v2(db);
    }
    return st;
}

store_t *store_open(const char *path, char *err)
{
    store_t *s = NULL;
    if (!path || !*path) {
        status_set(err, STATUS_EINVAL, "store: empty path");
        return NULL;
    }
    pthread_once(&store_sodium_once, store_sodium_init);
    if (store_sodium_rc != 0) {
        status_set(err, STATUS_EIO, "%s: libsodium failed to initialize", path);
        return NULL;
    }
    s = calloc(1, sizeof *s);
    if (!s) goto nomem;
    s->path = strdup(path);
    if (!s->path) goto nomem;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->wmu, NULL);
    pthread_cond_init(&s->work_cv, NULL);
    pthread_cond_init(&s->done_cv, NULL);
    s->keep = STORE_KEEP_DEFAULT;
    s->budget = STORE_WRITER_BUDGET_DEFAULT;
    if (store_db_open(path, &s->db, err) != STATUS_OK) goto fail;
    if (store_db_open(path, &s->wdb, err) != STATUS_OK) goto fail;
    return s;

nomem:
    status_set(err, STATUS_ENOMEM, "%s: out of memory", path);
fail:
    store_close(&s);
    return NULL;
}

const char *store_path(const store_t *s)
{
    return s ? s->path : NULL;
}

void store_set_keep(store_t *s, int keep)
{
    if (!s) return;
    pthread_mutex_lock(&s->wmu);
    s->keep = keep < 1 ? 1 : keep;
    pthread_mutex_unlock(&s->wmu);
}

int store_set_max_bytes(store_t *s, int64_t max_bytes, char *err)
{
    int64_t page = 0, pages = 0;
    if (!s || max_bytes < 0) return status_set(err, STATUS_EINVAL, "store: bad size limit");
    pthread_mutex_lock(&s->mu);
    int rc = store_query_int(s->db, "PRAGMA page_size", &page);
    int st = rc == SQLITE_OK ? STATUS_OK : store_fail(err, s->path, s->db, rc, "page_size");
    if (st == STATUS_OK && max_bytes > 0) {
        pages = max_bytes / (page > 0 ? page : 4096);
        if (pages < 1) pages = 1;
    }
    if (st == STATUS_OK) st = store_db_max_pages(s->db, s->path, pages, err);
    pthread_mutex_unlock(&s->mu);
    if (st == STATUS_OK) {
        /* The writer applies it before its next checkpoint; its connection is its own. */
        pthread_mutex_lock(&s->wmu);
        s->max_pages = pages;
        pthread_mutex_unlock(&s->wmu);
    }
    return st;
}

/* ---- metrics and events, buffered while the write lock is taken ---- */

static void store_pend_free(store_t *s)
{
    for (size_t i = 0; i < s->npend; i++) {
        free(s->pend[i].kind);
        free(s->pend[i].detail);
    }
    s->npend = 0;
}

/* Writes the buffered rows in one transaction. With wait == 0 a taken write lock is not an
 * error: the rows stay buffered. Other errors drop the rows (they are logged). mu held. */
static int store_pend_flush(store_t *s, int wait, char *err)
{
    sqlite3_stmt *qm = NULL, *qe = NULL;
    int rc = SQLITE_OK, st = STATUS_OK;
    if (s->npend == 0) return STATUS_OK;
    if (!wait) sqlite3_busy_timeout(s->db, 0);
    rc = sqlite3_exec(s->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
    if (!wait) sqlite3_busy_timeout(s->db, STORE_BUSY_MS);
    if (!wait && (rc & 0xff) == SQLITE_BUSY) return STATUS_OK;
    if (rc != SQLITE_OK) goto fail;
    for (size_t i = 0; rc == SQLITE_OK && i < s->npend; i++) {
        const store_pend_t *p = &s->pend[i];
        sqlite3_stmt **qp = p->is_event ? &qe : &qm;
        if (!*qp &&
            !(*qp = store_stmt(s, p->is_event ? STORE_Q_EVENT_ADD : STORE_Q_METRIC_ADD, &rc)))
            break;
        sqlite3_stmt *q = *qp;
        sqlite3_reset(q);
        if (p->is_event) {
            sqlite3_bind_double(q, 1, p->time);
            sqlite3_bind_text(q, 2, p->kind, -1, SQLITE_STATIC);
            sqlite3_bind_text(q, 3, p->detail, -1, SQLITE_STATIC);
        } else {
            sqlite3_bind_double(q, 1, p->m.time);
            sqlite3_bind_int(q, 2, p->m.stage);
            sqlite3_bind_int64(q, 3, p->m.step);
            sqlite3_bind_double(q, 4, p->m.loss);
            sqlite3_bind_double(q, 5, p->m.tokens_per_s);
            sqlite3_bind_int64(q, 6, p->m.bytes_sent);
            sqlite3_bind_int64(q, 7, p->m.bytes_recv);
        }
        rc = sqlite3_step(q);
        if (rc == SQLITE_DONE) rc = SQLITE_OK;
    }
    if (rc != SQLITE_OK) goto fail;
    store_stmt_done(qm);
    store_stmt_done(qe);
    qm = qe = NULL;
    rc = sqlite3_exec(s->db, "COMMIT", NULL, NULL, NULL);
    if (rc != SQLITE_OK) goto fail;
    store_pend_free(s);
    return STATUS_OK;

fail:
    st = store_fail(err, s->path, s->db, rc, "writing metrics and events");
    store_stmt_done(qm);
    store_stmt_done(qe);
    store_rollback(s->db);
    log_warn("store: %zu metrics/events rows lost: %s", s->npend, err ? err : "");
    store_pend_free(s);
    return st;
}

/* Appends a row to the buffer and tries to write it. mu held. */
static int store_pend_push(store_t *s, const store_pend_t *p, char *err)
{
    if (s->npend == s->cap_pend) {
        size_t cap = s->cap_pend ? 2 * s->cap_pend : 16;
        store_pend_t *n = realloc(s->pend, cap * sizeof *n);
        if (!n) {
            free(p->kind);
            free(p->detail);
            return status_set(err, STATUS_ENOMEM, "%s: out of memory", s->path);
        }
        s->pend = n;
        s->cap_pend = cap;
    }
    s->pend[s->npend++] = *p;
    return store_pend_flush(s, s->npend >= STORE_PEND_MAX, err);
}

int store_metric_add(store_t *s, const store_metric_t *m, char *err)
{
    if (!s || !m) return status_set(err, STATUS_EINVAL, "store_metric_add: NULL argument");
    store_pend_t p = {.is_event = 0, .m = *m};
    if (p.m.time == 0) p.m.time = store_unix_now();
    pthread_mutex_lock(&s->mu);
    int st = store_pend_push(s, &p, err);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int store_event_add_locked(store_t *s, const char *kind, const char *detail, char *err)
{
    size_t n = kind ? strlen(kind) : 0;
    if (n == 0 || n >= sizeof(((store_event_t *)0)->kind))
        return status_set(err, STATUS_EINVAL, "store_event_add: kind must be 1..31 bytes");
    for (size_t i = 0; i < n; i++) {
        char c = kind[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
            return status_set(err, STATUS_EINVAL, "store_event_add: kind \"%s\" is not [a-z0-9_]+",
                              kind);
    }
    store_pend_t p = {.is_event = 1, .time = store_unix_now()};
    p.kind = strdup(kind);
    p.detail = strdup(detail ? detail : "");
    if (!p.kind || !p.detail) {
        free(p.kind);
        free(p.detail);
        return status_set(err, STATUS_ENOMEM, "%s: out of memory", s->path);
    }
    return store_pend_push(s, &p, err);
}

int store_event_add(store_t *s, const char *kind, const char *detail, char *err)
{
    if (!s) return status_set(err, STATUS_EINVAL, "store_event_add: NULL store");
    pthread_mutex_lock(&s->mu);
    int st = store_event_add_locked(s, kind, detail, err);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int store_metric_last(store_t *s, int n, store_metric_t *out, int *count, char *err)
{
    sqlite3_stmt *q = NULL;
    int rc, st, k = 0;
    if (count) *count = 0;
    if (!s || n < 0 || (n > 0 && !out) || !count)
        return status_set(err, STATUS_EINVAL, "store_metric_last: bad argument");
    pthread_mutex_lock(&s->mu);
    if ((st = store_pend_flush(s, 1, err)) != STATUS_OK) goto done;
    rc = sqlite3_prepare_v2(s->db,
                            "SELECT time,stage,step,loss,tokens_per_s,bytes_sent,bytes_recv FROM "
                            "(SELECT * FROM metric ORDER BY id DESC LIMIT ?) ORDER BY id",
                            -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 1, n);
    while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW && k < n) {
        store_metric_t *m = &out[k++];
        m->time = sqlite3_column_double(q, 0);
        m->stage = sqlite3_column_int(q, 1);
        m->step = sqlite3_column_int64(q, 2);
        m->loss = sqlite3_column_double(q, 3);
        m->tokens_per_s = sqlite3_column_double(q, 4);
        m->bytes_sent = sqlite3_column_int64(q, 5);
        m->bytes_recv = sqlite3_column_int64(q, 6);
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_OK && rc != SQLITE_ROW)
        st = store_fail(err, s->path, s->db, rc, "reading metrics");
    *count = k;
done:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return st;
}

int store_event_last(store_t *s, int n, store_event_t *out, int *count, char *err)
{
    sqlite3_stmt *q = NULL;
    int rc, st, k = 0;
    if (count) *count = 0;
    if (!s || n < 0 || (n > 0 && !out) || !count)
        return status_set(err, STATUS_EINVAL, "store_event_last: bad argument");
    pthread_mutex_lock(&s->mu);
    if ((st = store_pend_flush(s, 1, err)) != STATUS_OK) goto done;
    rc = sqlite3_prepare_v2(s->db,
                            "SELECT id,time,kind,detail FROM (SELECT * FROM event ORDER BY id "
                            "DESC LIMIT ?) ORDER BY id",
                            -1, &q, NULL);
    if (rc == SQLITE_OK) rc = sqlite3_bind_int(q, 1, n);
    while (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_ROW && k < n) {
        store_event_t *e = &out[k++];
        const char *kind = (const char *)sqlite3_column_text(q, 2);
        const char *detail = (const char *)sqlite3_column_text(q, 3);
        e->id = sqlite3_column_int64(q, 0);
        e->time = sqlite3_column_double(q, 1);
        snprintf(e->kind, sizeof e->kind, "%s", kind ? kind : "");
        snprintf(e->detail, sizeof e->detail, "%s", detail ? detail : "");
        rc = SQLITE_OK;
    }
    if (rc != SQLITE_DONE && rc != SQLITE_OK && rc != SQLITE_ROW)
        st = store_fail(err, s->path, s->db, rc, "reading events");
    *count = k;
done:
    sqlite3_finalize(q);
    pthread_mutex_unlock(&s->mu);
    return st;
}

/* ---- identity ---- */

/* Reads the key pair into pk and sk; STATUS_ENOTFOUND when there is none yet. mu held. */
static int store_identity_read(store_t *s, unsigned char *pk, unsigned char *sk, char *err)
{
    sqlite3_stmt *q = NULL;
    unsigned char check[crypto_sign_PUBLICKEYBYTES];
    int st = STATUS_OK;
    int rc;
    if ((q = store_stmt(s, STORE_Q_IDENTITY, &rc))) rc = sqlite3_step(q);
    if (rc == SQLITE_DONE) {
        st = STATUS_ENOTFOUND;
        goto done;
    }
    if (rc != SQLITE_ROW) {
        st = store_fail(err, s->path, s->db, rc, "reading the identity");
        goto done;
    }
    const char *alg = (const char *)sqlite3_column_text(q, 0);
    const void *p = sqlite3_column_blob(q, 1);
    int np = sqlite3_column_bytes(q, 1);
    const void *k = sqlite3_column_blob(q, 2);
    int nk = sqlite3_column_bytes(q, 2);
    if (!alg || strcmp(alg, "ed25519") != 0 || !p || np != crypto_sign_PUBLICKEYBYTES || !k ||
        nk != crypto_sign_SECRETKEYBYTES) {
        st = status_set(err, STATUS_ECORRUPT, "%s: identity row is malformed", s->path);
        goto done;
    }
    memcpy(pk, p, crypto_sign_PUBLICKEYBYTES);
    memcpy(sk, k, crypto_sign_SECRETKEYBYTES);
    if (crypto_sign_ed25519_sk_to_pk(check, sk) != 0 ||
        sodium_memcmp(check, pk, crypto_sign_PUBLICKEYBYTES) != 0) {
        sodium_memzero(sk, crypto_sign_SECRETKEYBYTES);
        st = status_set(err, STATUS_ECORRUPT,
                        "%s: stored secret key does not match the stored public key", s->path);
    }
done:
    store_stmt_done(q);
    return st;
}

int store_identity(store_t *s, unsigned char pk[crypto_sign_PUBLICKEYBYTES], unsigned char *sk,
                   char *err)
{
    sqlite3_stmt *q = NULL;
    unsigned char *tmp = NULL;
    int st, rc;
    if (!s || !pk) return status_set(err, STATUS_EINVAL, "store_identity: NULL argument");
    tmp = sodium_malloc(crypto_sign_SECRETKEYBYTES);
    if (!tmp) return status_set(err, STATUS_ENOMEM, "%s: sodium_malloc failed", s->path);
    pthread_mutex_lock(&s->mu);
    st = store_identity_read(s, pk, tmp, err);
    if (st != STATUS_ENOTFOUND) goto done;
    /* First use: make it under the write lock so that two openers agree on one key. */
    if ((st = store_exec(s->db, s->path, "BEGIN IMMEDIATE", err)) != STATUS_OK) goto done;
    st = store_identity_read(s, pk, tmp, err);
    if (st == STATUS_ENOTFOUND) {
        if (crypto_sign_keypair(pk, tmp) != 0) {
            st = status_set(err, STATUS_EIO, "%s: crypto_sign_keypair failed", s->path);
            goto done;
        }
        rc = sqlite3_prepare_v2(s->db,
                                "INSERT INTO identity(id,algorithm,public_key,secret_key,created) "
                                "VALUES(1,'ed25519',?,?,?)",
                                -1, &q, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_bind_blob(q, 1, pk, crypto_sign_PUBLICKEYBYTES, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_bind_blob(q, 2, tmp, crypto_sign_SECRETKEYBYTES, NULL);
        if (rc == SQLITE_OK) rc = sqlite3_bind_double(q, 3, store_unix_now());
        if (rc == SQLITE_OK && (rc = sqlite3_step(q)) == SQLITE_DONE) rc = SQLITE_OK;
        if (rc != SQLITE_OK) {
            st = store_fail(err, s->path, s->db, rc, "storing the new identity");
            goto done;
        }
        st = STATUS_OK;
    }
    if (st == STATUS_OK) st = store_exec(s->db, s->path, "COMMIT", err);

done:
    sqlite3_finalize(q);
    store_rollback(s->db);
    pthread_mutex_unlock(&s->mu);
    if (st == STATUS_OK && sk) memcpy(sk, tmp, crypto_sign_SECRETKEYBYTES);
    if (st != STATUS_OK) sodium_memzero(pk, crypto_sign_PUBLICKEYBYTES);
    sodium_memzero(tmp, crypto_sign_SECRETKEYBYTES);
    sodium_free(tmp);
    return st;
}

/* ---- closing ---- */

void store_close(store_t **sp)
{
    if (!sp || !*sp) return;
    store_t *s = *sp;
    if (s->path) {
        /* path is set last-but-one in store_open: when it is there, so are the locks. */
        store_writer_stop(s);
        pthread_mutex_lock(&s->mu);
        if (s->db && store_pend_flush(s, 1, NULL) != STATUS_OK)
            log_warn("store: %s: buffered metrics/events could not be written", s->path);
        pthread_mutex_unlock(&s->mu);
        for (int i = 0; i < STORE_Q_N; i++) sqlite3_finalize(s->q[i]);
        sqlite3_close_v2(s->db);
        sqlite3_close_v2(s->wdb);
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->wmu);
        pthread_cond_destroy(&s->work_cv);
        pthread_cond_destroy(&s->done_cv);
    }
    free(s->pend);
    free(s->path);
    free(s);
    *sp = NULL;
}

void store_remove(const char *path)
{
    char f[4200];
    remove(path);
    snprintf(f, sizeof f, "%s-wal", path);
    remove(f);
    snprintf(f, sizeof f, "%s-shm", path);
    remove(f);
}
