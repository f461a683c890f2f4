/* store.h — a peer's durable state in one SQLite file: checkpoints (named, hashed blobs),
 * metrics history, events and the peer's Ed25519 identity. The format is specified in
 * docs/store-format.md.
 * Not for: anything that knows the model. A checkpoint here is metadata plus a list of
 * named byte blobs; what the bytes mean is the caller's business. */
#ifndef SWARMTRAIN_STORE_H
#define SWARMTRAIN_STORE_H

#include "common/status.h"

#include <sodium.h>
#include <stddef.h>
#include <stdint.h>

#define STORE_WUR __attribute__((warn_unused_result))

/* The schema version this build writes (PRAGMA user_version). Files with a newer version
 * are refused; there are no older versions yet. */
#define STORE_SCHEMA_VERSION 1
/* PRAGMA application_id of every store file: "SWMT". */
#define STORE_APPLICATION_ID 0x53574d54
/* Checkpoints kept per stage unless store_set_keep says otherwise. */
#define STORE_KEEP_DEFAULT 3
/* Blob bytes per row of the ckpt_chunk table (see docs/store-format.md for the measurements). */
#define STORE_CHUNK_BYTES (1u << 20)
/* Share of one CPU the background checkpoint writer may use on average unless
 * store_set_writer_budget says otherwise (see there). */
#define STORE_WRITER_BUDGET_DEFAULT 0.03
/* How long a call waits for another connection's write lock before failing with
 * STATUS_EBUSY. */
#define STORE_BUSY_MS 30000

typedef struct store store_t;
typedef struct store_ckpt store_ckpt_t;

/* One row of the metrics history. time is Unix seconds (wall clock); 0 on input means now. */
typedef struct {
    double time;
    int stage;
    int64_t step;
    double loss;
    double tokens_per_s;
    int64_t bytes_sent;
    int64_t bytes_recv;
} store_metric_t;

/* One row of the event log, as read back; kind and detail are truncated to fit. */
typedef struct {
    int64_t id;
    double time;
    char kind[32];
    char detail[224];
} store_event_t;

/* One checkpoint as listed for the status tool. verified: 1 every hash checked, 0 a hash or
 * the structure did not verify, -1 not checked. */
typedef struct {
    int64_t id;
    int stage;
    int64_t step;
    double time;
    int64_t bytes;
    int nblobs;
    int verified;
} store_ckpt_info_t;

/* What the background checkpoint writer has done since store_open. */
typedef struct {
    int64_t saved;                 /* checkpoints committed by the writer thread */
    int64_t failed;                /* background writes that failed (disk full, I/O, ...) */
    int64_t replaced;              /* pending snapshots dropped because a newer one arrived */
    double cpu_s;                  /* CPU seconds the writer thread spent writing */
    double rested_s;               /* seconds it rested to stay within its budget */
    int last_status;               /* status of the last failed write, STATUS_OK if none */
    char last_err[STATUS_ERR_LEN]; /* its message, "" if none */
} store_writer_stats_t;

/* ---- the store ---- */

/* Opens the store at path, creating it when the file does not exist or is empty. The file
 * is put in WAL mode with 64 KiB pages (new files only) and a busy timeout of STORE_BUSY_MS.
 * Refused, with a one-line message in err and nothing written to the file: a file that is
 * not a SQLite database (STATUS_EMALFORMED), a SQLite database that is not a store
 * (STATUS_EMALFORMED), a store with a newer schema version (STATUS_EVERSION), a file or
 * directory that cannot be written (STATUS_EIO), a lock held too long (STATUS_EBUSY).
 * Caller owns the result; NULL on error. Thread-safe once open: every call below may come
 * from any thread. */
store_t *store_open(const char *path, char *err) STORE_WUR;

/* Waits for the background writer to finish the running and the pending checkpoint, flushes
 * buffered metrics and events, closes the file and sets *s to NULL. NULL-safe. */
void store_close(store_t **s);

/* Removes a closed store's file and SQLite's -wal and -shm companions of it. */
void store_remove(const char *path);

/* The path given to store_open; valid while the store is open. */
const char *store_path(const store_t *s);

/* Checkpoints kept per stage after each save (the newest `keep`; values < 1 mean 1). */
void store_set_keep(store_t *s, int keep);

/* Caps the background writer's average CPU use at `share` of one CPU, in (0, 1]: after a
 * write that cost c CPU seconds and began at t, the next write begins no earlier than
 * t + c / share. Snapshots handed over meanwhile wait, each replacing the one before (so the
 * newest is written when the rest ends); store_ckpt_ready tells a caller whether making one
 * now is worth its copy. 1 means no rest; values outside (0, 1] mean 1. A checkpoint costs
 * about 3 ns of CPU per byte (BLAKE2b, SQLite's WAL write and copy to the main file), so on a
 * machine whose cores the training keeps busy an unbounded writer slows every step by what it
 * takes; the default keeps that under STORE_WRITER_BUDGET_DEFAULT of one core. A waiting
 * caller (store_ckpt_wait, store_close) ends the rest at once. */
void store_set_writer_budget(store_t *s, double share);

/* 1 when a snapshot handed to store_ckpt_save_async now would be written at once: the writer
 * is not writing, not resting and holds no waiting snapshot; else 0. A training loop that
 * checkpoints often asks this first and skips the snapshot's copy when the answer is 0. */
int store_ckpt_ready(store_t *s);

/* Limits the database file to about max_bytes (PRAGMA max_page_count on every connection of
 * this store; 0 removes the limit). A write that would grow the file beyond it fails with
 * STATUS_EFULL exactly as a full disk does, which is what the tests use it for. */
int store_set_max_bytes(store_t *s, int64_t max_bytes, char *err) STORE_WUR;

/* ---- checkpoint snapshots ---- */

/* A new, empty checkpoint for `stage` at `step`. config_text (the run's configuration as
 * text) and config_hash_hex (its hash, as the caller computes it) are copied; NULL means "".
 * Caller owns the result; NULL when out of memory or stage < 0. */
store_ckpt_t *store_ckpt_new(int stage, int64_t step, const char *config_text,
                             const char *config_hash_hex);

/* Frees ck and sets *ck to NULL. NULL-safe. */
void store_ckpt_destroy(store_ckpt_t **ck);

/* Adds a blob named `name` (1..255 bytes, unique within ck) holding a COPY of
 * data[0..bytes): after this returns the caller may change or free its buffer; the
 * checkpoint keeps the bytes as they were. bytes may be 0 (data may then be NULL).
 * STATUS_EINVAL on a bad or duplicate name, STATUS_ENOMEM when the copy cannot be made. */
int store_ckpt_add_blob(store_ckpt_t *ck, const char *name, const void *data,
                        size_t bytes) STORE_WUR;

int store_ckpt_stage(const store_ckpt_t *ck);
int64_t store_ckpt_step(const store_ckpt_t *ck);
const char *store_ckpt_config_text(const store_ckpt_t *ck);
const char *store_ckpt_config_hash(const store_ckpt_t *ck);
/* The row id of a loaded checkpoint; 0 for one built by the caller. */
int64_t store_ckpt_id(const store_ckpt_t *ck);
size_t store_ckpt_blob_count(const store_ckpt_t *ck);
/* The i-th blob in the order added: its bytes (NULL if i is out of range or the blob is
 * empty), its name in *name and its length in *bytes when those are not NULL. */
const void *store_ckpt_blob_at(const store_ckpt_t *ck, size_t i, const char **name, size_t *bytes);
/* The blob called `name`, its length in *bytes; NULL (and *bytes 0) when there is none. */
const void *store_ckpt_blob(const store_ckpt_t *ck, const char *name, size_t *bytes);

/* ---- saving and loading ---- */

/* Writes ck in one transaction on the caller's thread: every blob in 1 MiB chunks with its
 * BLAKE2b-256 hash and a hash over the whole manifest; in the same transaction the
 * checkpoints of ck's stage beyond the newest `keep` (counting ck) are deleted, so the file
 * never holds more than `keep` per stage, even after a crash. On failure nothing of ck is in
 * the file, older checkpoints are untouched and the store stays usable: STATUS_EFULL when
 * the disk or the limit of store_set_max_bytes is reached, STATUS_EBUSY when the write lock
 * stayed taken for STORE_BUSY_MS, STATUS_EIO otherwise. ck stays the caller's. Holds the
 * store's caller-side lock meanwhile: metrics and events from other threads wait for it. */
int store_ckpt_save(store_t *s, const store_ckpt_t *ck, char *err) STORE_WUR;

/* Hands the snapshot *ck to the store's writer thread (its own SQLite connection) and
 * returns at once; *ck becomes NULL. At most one write runs and one waits: a snapshot
 * handed over while another is waiting REPLACES the waiting one (the newest state is the
 * one worth having), which stats.replaced counts. The caller learns of failed writes from
 * store_writer_stats (failed, last_status, last_err), never by blocking. NULL-safe. */
void store_ckpt_save_async(store_t *s, store_ckpt_t **ck);

/* Blocks until the writer thread has no running and no waiting checkpoint; a rest the
 * budget imposes is cut short (the waiting snapshot is written at once). */
void store_ckpt_wait(store_t *s);

/* Copies the writer's counters and last error into *out. */
void store_writer_stats(store_t *s, store_writer_stats_t *out);

/* Loads the most recently written checkpoint of `stage` whose manifest and every blob hash
 * verify. A checkpoint that does not verify is reported (log_warn and a "ckpt_bad" event)
 * and the next older one is tried. *out is set and owned by the caller on success;
 * STATUS_ENOTFOUND when the stage has no good checkpoint, another status on I/O failure. */
int store_ckpt_load_latest(store_t *s, int stage, store_ckpt_t **out, char *err) STORE_WUR;

/* The same for the good checkpoint of `stage` taken at `step` (step < 0: the newest).
 * STATUS_ENOTFOUND when there is none. */
int store_ckpt_load_step(store_t *s, int stage, int64_t step, store_ckpt_t **out,
                         char *err) STORE_WUR;

/* Lists up to max checkpoints of every stage, newest first, into out[0..*count). With
 * verify != 0 each one's hashes are checked (reads every byte), else verified is -1. */
int store_ckpt_list(store_t *s, int verify, store_ckpt_info_t *out, int max, int *count,
                    char *err) STORE_WUR;

/* ---- metrics and events ---- */

/* Appends a metrics row. Never waits for the checkpoint writer: while another connection
 * holds the write lock the row is kept in memory and written with the next call that finds
 * the lock free (or by a query, or store_close). */
int store_metric_add(store_t *s, const store_metric_t *m, char *err) STORE_WUR;

/* The last n metrics rows, oldest first, into out[0..*count). Writes buffered rows first. */
int store_metric_last(store_t *s, int n, store_metric_t *out, int *count, char *err) STORE_WUR;

/* Appends an event of kind `kind` (1..31 bytes; joined, failed, recovered, resynced,
 * ckpt_bad, ...) with free-text detail (NULL means ""). Buffered like store_metric_add. */
int store_event_add(store_t *s, const char *kind, const char *detail, char *err) STORE_WUR;

/* The last n events, oldest first, into out[0..*count). Writes buffered rows first. */
int store_event_last(store_t *s, int n, store_event_t *out, int *count, char *err) STORE_WUR;

/* ---- identity ---- */

/* The peer's Ed25519 key pair: made with crypto_sign_keypair the first time any connection
 * asks, stored in this file only, the same on every later call and open. pk receives the
 * public key; sk, when not NULL, receives the secret key and should be sodium_malloc'd
 * memory of crypto_sign_SECRETKEYBYTES that the caller wipes. STATUS_ECORRUPT when the
 * stored secret key does not match the stored public key. */
int store_identity(store_t *s, unsigned char pk[crypto_sign_PUBLICKEYBYTES], unsigned char *sk,
                   char *err) STORE_WUR;

#endif
