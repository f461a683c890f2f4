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

struct store {
    char *path;

    /* The callers' connection and everything done on it. */
    pthread_mutex_t mu;
    sqlite3 *db;
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
