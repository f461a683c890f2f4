/* store_impl.h — what store.c and store_ckpt.c share: the store's struct and the SQLite
 * helpers. Not for: anything outside store/. */
#ifndef SWARMTRAIN_STORE_IMPL_H
#define SWARMTRAIN_STORE_IMPL_H

#include "store/store.h"

#include <pthread.h>
#include <sqlite3.h>

/* A metrics row or an event waiting for the write lock (see store_metric_add). */
typedef struct {
    int is_event;
    store_metric_t m;
    double time;
    char *kind;
    char *detail;
} store_pend_t;

/* Statements on the callers' connection (db), prepared on first use and kept until
 * store_close: preparing them on every call was most of a checkpoint read's CPU. Each use
 * ends with store_stmt_done (reset, bindings cleared), so none holds a read transaction or a
 * pointer of its caller. */
enum {
    STORE_Q_CKPT_IDS,   /* id,stage,step,created,total_bytes,nblobs of ?1 (< 0: all), LIMIT ?2 */
    STORE_Q_CKPT_ROW,   /* a ckpt row by id */
    STORE_Q_CKPT_BLOB,  /* a checkpoint's ckpt_blob rows, by idx */
    STORE_Q_CKPT_CHUNK, /* a blob's ckpt_chunk rows, by seq */
    STORE_Q_IDENTITY,   /* the identity row */
    STORE_Q_METRIC_ADD,
    STORE_Q_EVENT_ADD,
    STORE_Q_BEGIN, /* a deferred transaction: the reads' snapshot */
    STORE_Q_ROLLBACK,
    STORE_Q_N
};

struct store {
    char *path;

    /* The callers' connection and everything done on it. */
    pthread_mutex_t mu;
    sqlite3 *db;
    sqlite3_stmt *q[STORE_Q_N]; /* see STORE_Q_*; NULL until first used */
    store_pend_t *pend;
    size_t npend, cap_pend;

    /* The writer thread, its connection and its queue; all under wmu. */
    pthread_mutex_t wmu;
    pthread_cond_t work_cv, done_cv;
    sqlite3 *wdb;
    pthread_t thread;
    int thread_on;
    int stop;
    int busy;
    int flush;                   /* store_ckpt_wait or close is waiting: skip the rest */
    double budget;               /* share of one CPU the writer may use on average, (0, 1] */
    double last_start, last_cpu; /* the last write: when it began, CPU seconds it took */
    double rest_until;           /* last_start + last_cpu / budget: no write starts before */
    store_ckpt_t *pending;
    int keep;
    int64_t max_pages; /* 0: no limit */
    int64_t wdb_max_pages;
    store_writer_stats_t stats;
};

/* Opens one connection to path with the store's pragmas, creating the schema when the
 * file is new and refusing files we must not touch; see store_open. */
int store_db_open(const char *path, sqlite3 **out, char *err);

/* Turns a SQLite result code into a status and a message "path: what: reason". */
int store_fail(char *err, const char *path, sqlite3 *db, int rc, const char *what);

/* Runs SQL without results; STATUS_OK or store_fail's status. */
int store_exec(sqlite3 *db, const char *path, const char *sql, char *err);

/* Statement `which` (STORE_Q_*) of s->db, prepared when first asked for; *rc is SQLite's
 * result (the statement is NULL unless SQLITE_OK). mu held. */
sqlite3_stmt *store_stmt(store_t *s, int which, int *rc);

/* Ends a use of a statement from store_stmt: resets it and clears its bindings. NULL is
 * fine. */
void store_stmt_done(sqlite3_stmt *q);

/* Runs statement `which` (one without results: STORE_Q_BEGIN); STATUS_OK or store_fail's
 * status. mu held. */
int store_stmt_exec(store_t *s, int which, char *err);

/* store_rollback for s->db, with the kept statement. mu held. */
void store_stmt_rollback(store_t *s);

/* Rolls back if a transaction is open; can't fail (errors are logged). */
void store_rollback(sqlite3 *db);

/* Sets PRAGMA max_page_count (0: the largest allowed). */
int store_db_max_pages(sqlite3 *db, const char *path, int64_t pages, char *err);

/* store_event_add with s->mu held. */
int store_event_add_locked(store_t *s, const char *kind, const char *detail, char *err);

/* Stops the writer thread after it wrote what it holds. */
void store_writer_stop(store_t *s);

/* Unix time in seconds. */
double store_unix_now(void);

#endif
