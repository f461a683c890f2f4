/* fuzz_store.c — fuzz target: reading and verifying checkpoints from a store file that
 * someone else altered (store/store_ckpt.c, docs/store-format.md): store_ckpt_load_latest,
 * store_ckpt_list with verification, store_identity.
 *
 * A template store with three checkpoints (two stages; blobs of 0, 1 and a few thousand
 * bytes) and an identity is made once, in a memory file system, with 4 KiB pages (VACUUM),
 * and kept in memory. The store is opened once per process with store_open (the open path,
 * WAL switch and schema checks run there) and stays open. For each input a second connection
 * ("someone else"), in one transaction, puts the template's rows back (every row and row id
 * of the four tables, sqlite_sequence, no events: what restoring the file gave the reads
 * below) and applies the input's edits: op u8 (update a column of a ckpt / ckpt_blob /
 * ckpt_chunk / identity row, delete a row, insert a chunk row), row u8, column u8, then typed
 * values (NULL, integers, small integers, reals, text, blobs). Invariants: nothing crashes or
 * leaks whatever the rows say; a checkpoint that loads or lists as verified is one of the
 * three written (stage, step, config, blobs and their bytes), because every field but id and
 * created is under a hash; an identity that reads is a matching key pair.
 *
 * Rewriting and reopening the file for every input, with every edit parsed anew, cost about
 * 2.4 ms of CPU an input (ASan) and 6.5 ms of wall time on a loaded machine; keeping the store
 * open brought that to about 0.7 ms of CPU. The store now keeps its prepared statements
 * (store_stmt), and only the tables the last input's edits aimed at are put back (identity,
 * sqlite_sequence and event always): about 0.18 ms, with the same outcomes for the same
 * inputs (docs/fuzzing.md). What is left is mostly SQLite writing the restoring transaction
 * to the WAL and reading it back.
 *
 * Not for: the raw file format (SQLite's own fuzzing covers its b-trees), the writer, the
 * open path against altered files (store_open reads only the header and sqlite_master, which
 * the edits never touch; tests/test_store.c covers foreign and damaged files). */
#define _GNU_SOURCE
#include "fuzz.h"

#include "common/log.h"
#include "common/status.h"
#include "store/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[256], path[300], wal[310], shm[310];
static uint8_t *tmpl; /* the template file's bytes (sqlite3_malloc64) */
static size_t tmpl_len, tmpl_cap;
static sqlite3 *edit_db; /* "someone else"'s connection to the store file; the template is
                          * attached to it, in memory, as "t" */
static store_t *store;   /* open for the whole process */
static unsigned char tmpl_pk[crypto_sign_PUBLICKEYBYTES];
/* Statements of edit_db, prepared once (parsing SQL was most of an input's time). */
enum {
    Q_BEGIN,
    Q_COMMIT,
    Q_RESTORE,
    NRESTORE = 11,
    Q_INSERT_CHUNK = Q_RESTORE + NRESTORE,
    Q_DELETE,
    Q_UPDATE = Q_DELETE + 4
};
static sqlite3_stmt *stmts[Q_UPDATE + 4 * 9];
static void prepare_all(void);

#define NCK 3
static const struct {
    int stage;
    int64_t step;
    const char *config;
    int nblobs;
    size_t bytes[3];
} orig[NCK] = {{0, 5, "dim=32\n", 3, {3000, 0, 1}},
               {0, 9, "dim=32\n", 2, {200, 7, 0}},
               {1, 9, "dim=64\n", 1, {4100, 0, 0}}};
static const char *blob_names[3] = {"stage.0.params", "adam_m", "x"};

static uint8_t blob_byte(int c, int b, size_t i)
{
    return (uint8_t)(i * 13 + (size_t)b * 7 + (size_t)c);
}

/* blob b of checkpoint c as written, for comparing a loaded one with memcmp (a loop of
 * blob_byte was a tenth of an input's time) */
static uint8_t expect[NCK][3][4100];

static void make_template(void)
{
    char err[STATUS_ERR_LEN];
    store_t *s = store_open(path, err);
    FUZZ_CHECK(s);
    for (int c = 0; c < NCK; c++) {
        store_ckpt_t *ck = store_ckpt_new(orig[c].stage, orig[c].step, orig[c].config, "abc123");
        FUZZ_CHECK(ck);
        for (int b = 0; b < orig[c].nblobs; b++) {
            size_t n = orig[c].bytes[b];
            FUZZ_CHECK(n <= sizeof expect[c][b]);
            for (size_t i = 0; i < n; i++) expect[c][b][i] = blob_byte(c, b, i);
            FUZZ_CHECK(store_ckpt_add_blob(ck, blob_names[b], expect[c][b], n) == 0);
        }
        FUZZ_CHECK(store_ckpt_save(s, ck, err) == 0);
        store_ckpt_destroy(&ck);
    }
    unsigned char sk[crypto_sign_SECRETKEYBYTES];
    FUZZ_CHECK(store_identity(s, tmpl_pk, sk, err) == 0);
    store_close(&s);
    /* 4 KiB pages, no WAL: a small file that deserializes into memory as it is; the store
     * opens it as it opens any store file */
    sqlite3 *db;
    FUZZ_CHECK(sqlite3_open(path, &db) == SQLITE_OK);
    FUZZ_CHECK(sqlite3_exec(db, "PRAGMA journal_mode=DELETE; PRAGMA page_size=4096; VACUUM;", NULL,
                            NULL, NULL) == SQLITE_OK);
    sqlite3_close(db);
    FILE *f = fopen(path, "rb");
    FUZZ_CHECK(f);
    tmpl_cap = 1 << 20;
    tmpl = sqlite3_malloc64(tmpl_cap);
    FUZZ_CHECK(tmpl);
    tmpl_len = fread(tmpl, 1, tmpl_cap, f);
    fclose(f);
    FUZZ_CHECK(tmpl_len > 0 && tmpl_len < tmpl_cap);
}

static void teardown(void)
{
    store_close(&store);
    for (size_t i = 0; i < sizeof stmts / sizeof *stmts; i++) sqlite3_finalize(stmts[i]);
    sqlite3_close(edit_db); /* frees tmpl */
    unlink(wal);
    unlink(shm);
    unlink(path);
    rmdir(dir);
}

static void setup(void)
{
    if (store) return;
    log_level = -1; /* a bad checkpoint is logged; thousands a second are noise */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/fuzz_store.%d", base, (int)getpid());
    mkdir(dir, 0700);
    snprintf(path, sizeof path, "%s/store.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    snprintf(shm, sizeof shm, "%s-shm", path);
    unlink(path);
    make_template();
    char err[STATUS_ERR_LEN];
    store = store_open(path, err); /* switches the template file to WAL */
    FUZZ_CHECK(store);
    FUZZ_CHECK(sqlite3_open(path, &edit_db) == SQLITE_OK);
    FUZZ_CHECK(sqlite3_exec(edit_db, "PRAGMA synchronous=OFF; ATTACH ':memory:' AS t", NULL, NULL,
                            NULL) == SQLITE_OK);
    FUZZ_CHECK(sqlite3_deserialize(
                   edit_db, "t", tmpl, (sqlite3_int64)tmpl_len, (sqlite3_int64)tmpl_cap,
                   SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) == SQLITE_OK);
    prepare_all();
    atexit(teardown);
}

static void run_stmt(sqlite3_stmt *q)
{
    FUZZ_CHECK(sqlite3_step(q) == SQLITE_DONE);
    sqlite3_reset(q);
}

/* Tables (1 << t, t as in tables[] below) that the last input's edits aimed at: only those
 * can differ from the template, besides identity (which the store writes when the row is
 * gone), sqlite_sequence and event, which are put back every time. There are no triggers
 * and foreign keys are not enforced, so an edit changes only its own table. */
static unsigned dirty = 15;

/* The store's rows become the template's again, in the transaction that then applies the
 * edits: the same rows and row ids as restoring the file (sqlite_sequence included), without
 * touching the schema, so no connection rereads it. */
static void restore(void)
{
    static const int del[4] = {2, 1, 0, 3}; /* DELETE statements of ckpt, blob, chunk, identity */
    dirty |= 8;
    for (int t = 0; t < 4; t++)
        if (dirty & (1u << t)) run_stmt(stmts[Q_RESTORE + del[t]]);
    for (int t = 0; t < 4; t++)
        if (dirty & (1u << t)) run_stmt(stmts[Q_RESTORE + 4 + t]);
    for (int i = 8; i < NRESTORE; i++) run_stmt(stmts[Q_RESTORE + i]);
    dirty = 0;
}

/* identity: edits reach it through op >> 2 == 3 */
static const char *tables[4] = {"ckpt", "ckpt_blob", "ckpt_chunk", "identity"};
static const char *columns[4][9] = {{"id", "stage", "step", "created", "config_text", "config_hash",
                                     "nblobs", "total_bytes", "manifest_hash"},
                                    {"id", "ckpt_id", "idx", "name", "bytes", "hash"},
                                    {"id", "blob_id", "seq", "data"},
                                    {"id", "algorithm", "public_key", "secret_key", "created"}};
static const int ncolumns[4] = {9, 6, 4, 5};

static void bind_value(sqlite3_stmt *q, int at, fuzz_in_t *in)
{
    int type = (int)fuzz_u(in, 1) % 6;
    size_t len, rest;
    const uint8_t *p;
    switch (type) {
    case 0:
        sqlite3_bind_null(q, at);
        break;
    case 1:
        sqlite3_bind_int64(q, at, (int64_t)fuzz_u(in, 8));
        break;
    case 2: /* small integers: ids, indexes, counts */
        sqlite3_bind_int64(q, at, (int64_t)fuzz_u(in, 1) - 8);
        break;
    case 3: {
        uint64_t bits = fuzz_u(in, 8);
        double d;
        memcpy(&d, &bits, 8);
        sqlite3_bind_double(q, at, d);
        break;
    }
    default:
        len = (size_t)fuzz_u(in, 1);
        p = fuzz_rest(in, &rest);
        if (len > rest) len = rest;
        in->at += len;
        if (type == 4)
            sqlite3_bind_text(q, at, (const char *)p, (int)len, SQLITE_TRANSIENT);
        else
            sqlite3_bind_blob(q, at, len ? p : (const void *)"", (int)len, SQLITE_TRANSIENT);
        break;
    }
}

static void prepare_all(void)
{
    static const char *const fixed[Q_INSERT_CHUNK + 1] = {
        "BEGIN",
        "COMMIT",
        "DELETE FROM ckpt_chunk",
        "DELETE FROM ckpt_blob",
        "DELETE FROM ckpt",
        "DELETE FROM identity",
        "INSERT INTO ckpt SELECT * FROM t.ckpt",
        "INSERT INTO ckpt_blob SELECT * FROM t.ckpt_blob",
        "INSERT INTO ckpt_chunk SELECT * FROM t.ckpt_chunk",
        "INSERT INTO identity SELECT * FROM t.identity",
        "DELETE FROM sqlite_sequence", /* after the inserts, which moved it */
        "INSERT INTO sqlite_sequence SELECT * FROM t.sqlite_sequence",
        "DELETE FROM event", /* "ckpt_bad" rows the store wrote for the last input */
        "INSERT INTO ckpt_chunk(blob_id, seq, data) VALUES(?,?,?)"};
    char sql[256];
    for (int i = 0; i < Q_UPDATE + 4 * 9; i++) {
        const char *text = sql;
        if (i <= Q_INSERT_CHUNK) {
            text = fixed[i];
        } else if (i < Q_UPDATE) {
            int t = i - Q_DELETE;
            snprintf(sql, sizeof sql,
                     "DELETE FROM %s WHERE rowid = "
                     "(SELECT rowid FROM %s ORDER BY rowid LIMIT 1 OFFSET ?1)",
                     tables[t], tables[t]);
        } else {
            int t = (i - Q_UPDATE) / 9, col = (i - Q_UPDATE) % 9;
            if (col >= ncolumns[t]) continue;
            snprintf(sql, sizeof sql,
                     "UPDATE %s SET %s = ?1 WHERE rowid = "
                     "(SELECT rowid FROM %s ORDER BY rowid LIMIT 1 OFFSET ?2)",
                     tables[t], columns[t][col], tables[t]);
        }
        FUZZ_CHECK(sqlite3_prepare_v3(edit_db, text, -1, SQLITE_PREPARE_PERSISTENT, &stmts[i],
                                      NULL) == SQLITE_OK);
    }
}

static void apply_edits(const uint8_t *data, size_t size)
{
    /* one transaction: a refused edit (a constraint) is undone alone, as in autocommit */
    run_stmt(stmts[Q_BEGIN]);
    restore();
    fuzz_in_t in = {data, size, 0};
    for (int ops = 0; in.at < in.n && ops < 16; ops++) {
        int op = (int)fuzz_u(&in, 1);
        int t = (op >> 2) % 4, row = (int)fuzz_u(&in, 1) % 8;
        sqlite3_stmt *q;
        dirty |= 1u << ((op & 3) == 3 ? 2 : t);
        switch (op & 3) {
        case 0:
        case 1:
            q = stmts[Q_UPDATE + 9 * t + (int)fuzz_u(&in, 1) % ncolumns[t]];
            bind_value(q, 1, &in);
            sqlite3_bind_int(q, 2, row);
            break;
        case 2:
            q = stmts[Q_DELETE + t];
            sqlite3_bind_int(q, 1, row);
            break;
        default:
            q = stmts[Q_INSERT_CHUNK];
            bind_value(q, 1, &in);
            bind_value(q, 2, &in);
            bind_value(q, 3, &in);
            break;
        }
        sqlite3_step(q); /* constraint failures are fine: the edit is not made */
        sqlite3_reset(q);
        sqlite3_clear_bindings(q);
    }
    FUZZ_CHECK(!sqlite3_get_autocommit(edit_db));
    run_stmt(stmts[Q_COMMIT]);
}

/* The original checkpoint ck is, or -1. */
static int which(const store_ckpt_t *ck)
{
    for (int c = 0; c < NCK; c++) {
        if (store_ckpt_stage(ck) != orig[c].stage || store_ckpt_step(ck) != orig[c].step ||
            strcmp(store_ckpt_config_text(ck), orig[c].config) ||
            strcmp(store_ckpt_config_hash(ck), "abc123") ||
            store_ckpt_blob_count(ck) != (size_t)orig[c].nblobs)
            continue;
        int same = 1;
        for (int b = 0; b < orig[c].nblobs && same; b++) {
            const char *name;
            size_t bytes;
            const uint8_t *d = store_ckpt_blob_at(ck, (size_t)b, &name, &bytes);
            same = !strcmp(name, blob_names[b]) && bytes == orig[c].bytes[b] &&
                   (bytes == 0 || (d && !memcmp(d, expect[c][b], bytes)));
        }
        if (same) return c;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    apply_edits(data, size);
    char err[STATUS_ERR_LEN];
    store_t *s = store;
    for (int stage = 0; stage < 2; stage++) {
        store_ckpt_t *ck = NULL;
        if (store_ckpt_load_latest(s, stage, &ck, err) == 0) {
            fuzz_accepted++;
            FUZZ_CHECK(ck && store_ckpt_stage(ck) == stage);
            FUZZ_CHECK(which(ck) >= 0);
            store_ckpt_destroy(&ck);
        }
    }
    /* the identity: the template's key pair, a new one when the row is gone, or an error */
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES],
        check[crypto_sign_PUBLICKEYBYTES];
    int id = store_identity(s, pk, sk, err);
    FUZZ_CHECK(id == 0 || id == STATUS_ECORRUPT || id == STATUS_EIO);
    if (id == 0) {
        FUZZ_CHECK(crypto_sign_ed25519_sk_to_pk(check, sk) == 0 && !memcmp(check, pk, sizeof pk));
    }
    store_ckpt_info_t info[8];
    int n = 0;
    if (store_ckpt_list(s, 1, info, 8, &n, err) == 0) {
        FUZZ_CHECK(n >= 0 && n <= 8);
        for (int i = 0; i < n; i++) {
            if (info[i].verified != 1) continue;
            int found = 0;
            for (int c = 0; c < NCK; c++)
                found |= info[i].stage == orig[c].stage && info[i].step == orig[c].step &&
                         info[i].nblobs == orig[c].nblobs;
            FUZZ_CHECK(found);
        }
    }
    return 0;
}

/* ---- seeds: a few edits of each kind ---------------------------------------------- */

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static const uint8_t none[] = {0};
    emit(ctx, "no-edit", none, 0);
    /* ckpt row 0: step := small int 3 */
    static const uint8_t step[] = {0x00, 0, 2, 2, 11};
    emit(ctx, "ckpt-step", step, sizeof step);
    /* ckpt_blob row 1: bytes := int64 2^40 */
    static const uint8_t bytes[] = {0x04, 1, 4, 1, 0, 0, 0, 0, 0, 1, 0, 0};
    emit(ctx, "blob-bytes-huge", bytes, sizeof bytes);
    /* ckpt_chunk row 0: data := blob "xyz" */
    static const uint8_t chunk[] = {0x08, 0, 3, 5, 3, 'x', 'y', 'z'};
    emit(ctx, "chunk-data", chunk, sizeof chunk);
    /* delete ckpt_blob row 2; insert a chunk (blob_id 1, seq 1, blob "ab") */
    static const uint8_t del_ins[] = {0x06, 2, 0x03, 0, 2, 9, 2, 9, 5, 2, 'a', 'b'};
    emit(ctx, "delete-insert", del_ins, sizeof del_ins);
    /* ckpt row 2: config_text := NULL; manifest_hash := text "" */
    static const uint8_t nulls[] = {0x00, 2, 4, 0, 0x01, 2, 8, 4, 0};
    emit(ctx, "nulls", nulls, sizeof nulls);
    /* identity: public_key := blob "abc"; or the row deleted */
    static const uint8_t idkey[] = {0x0c, 0, 2, 5, 3, 'a', 'b', 'c'};
    emit(ctx, "identity-key", idkey, sizeof idkey);
    static const uint8_t iddel[] = {0x0e, 0};
    emit(ctx, "identity-delete", iddel, sizeof iddel);
}
