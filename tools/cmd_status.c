/* cmd_status.c — `swarmtrain status`: a live swarm's pools and peers as tables, or the
 * raw JSON document, once or refreshed in place; peers' stores as tables, as a chart of
 * their metrics (--plot, SVG) or as Prometheus metrics (--metrics-file).
 * Not for: fetching (swarm/status_client.c), drawing (plot.c), the text format (prom.c). */
#include "common/clock.h"
#include "common/status.h"
#include "store/store.h"
#include "swarm/auth.h"
#include "swarm/handshake.h"
#include "swarm/status_client.h"
#include "swarm/transport.h"
#include "tools/cmd.h"
#include "tools/json.h"
#include "tools/numbers.h"
#include "tools/plot.h"
#include "tools/prom.h"

#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static void pool_row(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    printf("  %-6s %-6s %-12s %-8s %-8s\n", json_get(o, "stage"), json_get(o, "peers"),
           json_get(o, "throughput"), json_get(o, "step"), json_get(o, "loss"));
}

/* A stage with no peer: rebuilt by a member another pool spares, or waiting for a joiner. */
static void pool_note(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    if (atoi(json_get(o, "peers")) > 0) return;
    if (!strcmp(json_get(o, "orphan"), "true"))
        printf("  stage %s has no peer, and no pool can spare one to rebuild it: waiting for a "
               "joiner\n",
               json_get(o, "stage"));
    else
        printf("  stage %s has no peer: a pool with a member to spare sends one to rebuild it\n",
               json_get(o, "stage"));
}

static void peer_row(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    char id[17];
    snprintf(id, sizeof id, "%s", json_get(o, "id"));
    double in = atof(json_get(o, "bytes_in")) / 1e6, out = atof(json_get(o, "bytes_out")) / 1e6;
    printf("  %-16s %-24s %-5s %-8s %-7s %-7s %-9s %9.1f %9.1f %-7s %-8s\n", id,
           json_get(o, "addr"), json_get(o, "stage"), json_get(o, "state"), json_get(o, "uptime_s"),
           json_get(o, "step"), json_get(o, "served"), in, out, json_get(o, "retries"),
           json_get(o, "rejected"));
}

/* The answering peer's own traffic by kind (net.c "wire"); ctx sums in and out. */
static void wire_row(void *ctx, const json_obj_t *o)
{
    double *sum = ctx, in = atof(json_get(o, "in")), out = atof(json_get(o, "out"));
    printf("  %-12s %12.3f %12.3f\n", json_get(o, "kind"), in / 1e6, out / 1e6);
    sum[0] += in, sum[1] += out;
}

static void refusal_row(void *ctx, const json_obj_t *o)
{
    (void)ctx;
    printf("  refused key %s from %s\n", json_get(o, "key"), json_get(o, "addr"));
}

/* The top-level security fields (net.c): mechanism, refused handshakes, forged entries. */
static void show_security(const char *json)
{
    const char *sec = strstr(json, "\"security\":\""), *ref = strstr(json, "\"refused\":"),
               *forged = strstr(json, "\"forged\":");
    if (!sec || !ref) return;
    sec += 12;
    printf("security: %.*s, %lld connection(s) refused at the handshake, %lld forged member "
           "entr(ies) ignored\n",
           (int)strcspn(sec, "\""), sec, atoll(ref + 10), forged ? atoll(forged + 9) : 0LL);
    json_each(json, "refusals", refusal_row, NULL);
}

/* ---- every member's wire bytes by kind: each member asked at its advertised address ---- */

#define MEMBERS_MAX 1024

typedef struct {
    int n;
    char id[MEMBERS_MAX][65], addr[MEMBERS_MAX][160];
    uint8_t key[MEMBERS_MAX][32];
} members_t;

static void member_row(void *ctx, const json_obj_t *o)
{
    members_t *m = ctx;
    const char *id = json_get(o, "id"), *addr = json_get(o, "addr");
    if (m->n >= MEMBERS_MAX || strlen(id) != 64 || !*addr) return;
    for (int i = 0; i < 32; i++) {
        unsigned v;
        if (sscanf(id + 2 * i, "%2x", &v) != 1) return;
        m->key[m->n][i] = (uint8_t)v;
    }
    snprintf(m->id[m->n], sizeof m->id[0], "%s", id);
    snprintf(m->addr[m->n], sizeof m->addr[0], "%s", addr);
    m->n++;
}

typedef struct {
    FILE *f;
    const char *id, *addr;
    int *first;
} wire_out_t;

static void peer_wire_row(void *ctx, const json_obj_t *o)
{
    wire_out_t *w = ctx;
    fprintf(w->f, "%s{\"peer\":\"%s\",\"addr\":", *w->first ? "" : ",", w->id);
    json_put_string(w->f, w->addr);
    fprintf(w->f, ",\"kind\":");
    json_put_string(w->f, json_get(o, "kind"));
    fprintf(w->f, ",\"in\":%lld,\"out\":%lld}", atoll(json_get(o, "in")),
            atoll(json_get(o, "out")));
    *w->first = 0;
}

/* The asked peer's document with "peer_wire" added: each member's traffic by kind as it
 * answered itself (one object per member and kind: peer, addr, kind, in, out), or a
 * member it could not be asked of (peer, addr, error). Members are asked at once, within
 * timeout_ms. Caller frees; NULL: out of memory or not a status document. */
static char *with_peer_wire(const char *json, const auth_t *auth, int timeout_ms)
{
    members_t *m = calloc(1, sizeof *m);
    char *out = NULL, **answers = NULL;
    int *rcs = NULL;
    const char **eps = NULL;
    size_t len = strlen(json), olen = 0;
    while (len && (json[len - 1] == '\n' || json[len - 1] == ' ')) len--;
    if (!m || !len || json[len - 1] != '}' || json_each(json, "peers", member_row, m) < 0)
        goto done;
    answers = calloc((size_t)m->n + 1, sizeof *answers);
    rcs = calloc((size_t)m->n + 1, sizeof *rcs);
    eps = calloc((size_t)m->n + 1, sizeof *eps);
    if (!answers || !rcs || !eps) goto done;
    for (int i = 0; i < m->n; i++) eps[i] = m->addr[i];
    char err[STATUS_ERR_LEN] = "";
    if (status_client_fetch_many(eps, (const uint8_t(*)[32])m->key, m->n, auth, timeout_ms, answers,
                                 rcs, err) < 0)
        goto done;
    FILE *f = open_memstream(&out, &olen);
    if (!f) goto done;
    fprintf(f, "%.*s,\"peer_wire\":[", (int)(len - 1), json);
    int first = 1;
    for (int i = 0; i < m->n; i++) {
        wire_out_t w = {f, m->id[i], m->addr[i], &first};
        if (!answers[i] || json_each(answers[i], "wire", peer_wire_row, &w) <= 0) {
            fprintf(f, "%s{\"peer\":\"%s\",\"addr\":", first ? "" : ",", m->id[i]);
            json_put_string(f, m->addr[i]);
            fprintf(f, ",\"error\":");
            json_put_string(f, answers[i] ? "its answer has no wire counts" : status_str(rcs[i]));
            fprintf(f, "}");
            first = 0;
        }
    }
    /* and each one's join into a running pool, when it was one (net.c "join") */
    fprintf(f, "],\"peer_join\":[");
    first = 1;
    for (int i = 0; i < m->n; i++) {
        json_obj_t j;
        if (!answers[i] || json_object(answers[i], "join", &j) || !isfinite(json_num(&j, "contrib_s")))
            continue;
        fprintf(f, "%s{\"peer\":\"%s\",\"state_s\":%.3f,\"contrib_s\":%.3f}", first ? "" : ",",
                m->id[i], json_num(&j, "state_s"), json_num(&j, "contrib_s"));
        first = 0;
    }
    fprintf(f, "]}");
    fclose(f);
done:
    for (int i = 0; answers && i < m->n; i++) free(answers[i]);
    free(answers);
    free(rcs);
    free(eps);
    free(m);
    return out;
}

typedef struct {
    char peer[65];
    int have;
    double in[8], out[8];
} wire_peer_t;

typedef struct {
    int n;
    wire_peer_t p[MEMBERS_MAX];
    char errors[4096];
} wire_table_t;

static void wire_table_row(void *ctx, const json_obj_t *o)
{
    wire_table_t *t = ctx;
    const char *peer = json_get(o, "peer"), *kind = json_get(o, "kind");
    int i = 0;
    while (i < t->n && strcmp(t->p[i].peer, peer)) i++;
    if (i == t->n) {
        if (t->n >= MEMBERS_MAX) return;
        memset(&t->p[t->n], 0, sizeof t->p[0]);
        snprintf(t->p[t->n++].peer, sizeof t->p[0].peer, "%s", peer);
    }
    if (!*kind) {
        size_t l = strlen(t->errors);
        snprintf(t->errors + l, sizeof t->errors - l, "  %.16s (%s): not asked: %s\n", peer,
                 json_get(o, "addr"), json_get(o, "error"));
        return;
    }
    for (int k = 0; k < WIRE_KINDS; k++)
        if (!strcmp(kind, transport_wire_name(k))) {
            t->p[i].in[k] = atof(json_get(o, "in"));
            t->p[i].out[k] = atof(json_get(o, "out"));
            t->p[i].have = 1;
        }
}

/* The "peer_wire" table: a row per member, MB in/out per kind. 0, or -1 if absent. */
static int show_peer_wire(const char *json)
{
    wire_table_t *t = calloc(1, sizeof *t);
    if (!t || json_each(json, "peer_wire", wire_table_row, t) <= 0) {
        free(t);
        return -1;
    }
    printf("wire by peer (MB in/out, since each started, as each peer counts it; headers "
           "included):\n  %-16s",
           "id");
    for (int k = 0; k < WIRE_KINDS; k++) printf(" %17s", transport_wire_name(k));
    printf(" %17s\n", "total");
    for (int i = 0; i < t->n; i++) {
        if (!t->p[i].have) continue;
        double ti = 0, to = 0;
        printf("  %-16.16s", t->p[i].peer);
        for (int k = 0; k < WIRE_KINDS; k++) {
            char cell[40];
            snprintf(cell, sizeof cell, "%.2f/%.2f", t->p[i].in[k] / 1e6, t->p[i].out[k] / 1e6);
            printf(" %17s", cell);
            ti += t->p[i].in[k], to += t->p[i].out[k];
        }
        char cell[40];
        snprintf(cell, sizeof cell, "%.2f/%.2f", ti / 1e6, to / 1e6);
        printf(" %17s\n", cell);
    }
    fputs(t->errors, stdout);
    free(t);
    return 0;
}

typedef struct {
    int n;
    double s[MEMBERS_MAX];
} join_times_t;

static void join_row(void *ctx, const json_obj_t *o)
{
    join_times_t *t = ctx;
    if (t->n < MEMBERS_MAX) t->s[t->n++] = json_num(o, "contrib_s");
}

/* The "peer_join" rows: members that joined a running pool, from start to their first
 * contributed step, median and worst. */
static void show_joins(const char *json)
{
    join_times_t *t = calloc(1, sizeof *t);
    if (!t) return;
    if (json_each(json, "peer_join", join_row, t) > 0) {
        numbers_sort(t->s, t->n);
        printf("joins into a running pool: %d member(s), start to first contributed step median "
               "%.2f s, worst %.2f s\n",
               t->n, numbers_median_sorted(t->s, t->n), t->s[t->n - 1]);
    }
    free(t);
}

static int show(const char *json)
{
    printf("pools:\n  %-6s %-6s %-12s %-8s %-8s\n", "stage", "peers", "samples/s", "step", "loss");
    if (json_each(json, "pools", pool_row, NULL) < 0) return -1;
    json_each(json, "pools", pool_note, NULL);
    printf("peers:\n  %-16s %-24s %-5s %-8s %-7s %-7s %-9s %9s %9s %-7s %-8s\n", "id", "address",
           "stage", "state", "uptime", "step", "served", "MB in", "MB out", "retries", "rejected");
    if (json_each(json, "peers", peer_row, NULL) < 0) return -1;
    if (strstr(json, "\"peer_wire\":[") && show_peer_wire(json) == 0) {
        /* every member's, the asked one's included */
    } else if (strstr(json, "\"wire\":[")) {
        double sum[2] = {0, 0};
        printf("wire (the peer asked, since it started; headers included):\n  %-12s %12s %12s\n",
               "kind", "MB in", "MB out");
        if (json_each(json, "wire", wire_row, sum) < 0) return -1;
        printf("  %-12s %12.3f %12.3f\n", "total", sum[0] / 1e6, sum[1] / 1e6);
    }
    show_joins(json);
    show_security(json);
    return 0;
}

/* A peer's own store, read while the peer may be writing it (WAL readers do not block the
 * writer): its checkpoints, last events and last metrics rows. */
static int show_store(const char *path, int as_json, int verify)
{
    enum { N = 20 };
    char err[STATUS_ERR_LEN];
    if (access(path, F_OK) != 0) { /* a store is read here, never created */
        fprintf(stderr, "swarmtrain status: %s: no such store\n", path);
        return 1;
    }
    store_t *s = store_open(path, err);
    if (!s) {
        fprintf(stderr, "swarmtrain status: %s\n", err);
        return 1;
    }
    store_ckpt_info_t ck[N];
    store_event_t ev[N];
    store_metric_t me[N];
    int nck = 0, nev = 0, nme = 0;
    if (store_ckpt_list(s, verify, ck, N, &nck, err) || store_event_last(s, N, ev, &nev, err) ||
        store_metric_last(s, N, me, &nme, err)) {
        fprintf(stderr, "swarmtrain status: %s\n", err);
        store_close(&s);
        return 1;
    }
    store_close(&s);
    static const char *const ver[3] = {"unchecked", "BAD", "ok"};
    if (as_json) {
        printf("{\"checkpoints\":[");
        for (int i = 0; i < nck; i++)
            printf("%s{\"id\":%lld,\"stage\":%d,\"step\":%lld,\"time\":%.3f,\"bytes\":%lld,"
                   "\"blobs\":%d,\"verified\":%d}",
                   i ? "," : "", (long long)ck[i].id, ck[i].stage, (long long)ck[i].step,
                   ck[i].time, (long long)ck[i].bytes, ck[i].nblobs, ck[i].verified);
        printf("],\"events\":[");
        for (int i = 0; i < nev; i++) {
            printf("%s{\"time\":%.3f,\"kind\":\"%s\",\"detail\":\"", i ? "," : "", ev[i].time,
                   ev[i].kind);
            for (const char *c = ev[i].detail; *c; c++)
                if (*c == '"' || *c == '\\')
                    printf("\\%c", *c);
                else if ((unsigned char)*c >= 0x20)
                    putchar(*c);
            printf("\"}");
        }
        printf("],\"metrics\":[");
        for (int i = 0; i < nme; i++) {
            printf("%s{\"time\":%.3f,\"stage\":%d,\"step\":%lld,\"loss\":", i ? "," : "",
                   me[i].time, me[i].stage, (long long)me[i].step);
            if (isfinite(me[i].loss))
                printf("%.6g", me[i].loss);
            else
                printf("null");
            printf(",\"tokens_per_s\":%.1f,\"bytes_sent\":%lld,\"bytes_recv\":%lld}",
                   me[i].tokens_per_s, (long long)me[i].bytes_sent, (long long)me[i].bytes_recv);
        }
        printf("]}\n");
        return 0;
    }
    printf("store %s\ncheckpoints (newest first):\n  %-6s %-6s %-9s %-10s %-6s %s\n", path, "id",
           "stage", "step", "MB", "blobs", "hashes");
    for (int i = 0; i < nck; i++)
        printf("  %-6lld %-6d %-9lld %-10.1f %-6d %s\n", (long long)ck[i].id, ck[i].stage,
               (long long)ck[i].step, (double)ck[i].bytes / 1e6, ck[i].nblobs,
               ver[ck[i].verified + 1]);
    printf("events (oldest first):\n");
    for (int i = 0; i < nev; i++) {
        char when[32] = "?";
        time_t t = (time_t)ev[i].time;
        struct tm tm;
        if (gmtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
        printf("  %s UTC  %-10s %s\n", when, ev[i].kind, ev[i].detail);
    }
    printf("metrics (oldest first):\n  %-6s %-9s %-10s %-10s %-10s %-10s\n", "stage", "step",
           "loss", "tokens/s", "MB sent", "MB recv");
    for (int i = 0; i < nme; i++)
        printf("  %-6d %-9lld %-10.4f %-10.0f %-10.1f %-10.1f\n", me[i].stage,
               (long long)me[i].step, me[i].loss, me[i].tokens_per_s,
               (double)me[i].bytes_sent / 1e6, (double)me[i].bytes_recv / 1e6);
    return 0;
}

/* ---- stores as a chart and as Prometheus metrics ---------------------------------------- */

#define MAX_DBS 64
enum { MAX_ROWS = 200000, MAX_EVENTS = 20000, MAX_CKPTS = 512 };

/* What one store holds, read once. */
typedef struct {
    const char *path;
    store_metric_t *me; /* oldest first */
    int nme;
    double *val_step, *val_loss; /* from "val_loss" events */
    int nval;
    store_ckpt_info_t *ck; /* newest first */
    int nck;
} store_data_t;

static void store_data_free(store_data_t *d)
{
    free(d->me);
    free(d->val_step);
    free(d->val_loss);
    free(d->ck);
    memset(d, 0, sizeof *d);
}

static int store_data_load(const char *path, store_data_t *d, char *err)
{
    memset(d, 0, sizeof *d);
    d->path = path;
    if (access(path, F_OK) != 0) /* a store is read here, never created */
        return status_set(err, STATUS_ENOTFOUND, "%s: no such store", path);
    store_t *s = store_open(path, err);
    if (!s) return STATUS_EIO;
    store_event_t *ev = malloc(MAX_EVENTS * sizeof *ev);
    int nev = 0, rc = 0;
    d->me = malloc(MAX_ROWS * sizeof *d->me);
    d->ck = malloc(MAX_CKPTS * sizeof *d->ck);
    if (!ev || !d->me || !d->ck) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = store_metric_last(s, MAX_ROWS, d->me, &d->nme, err)) ||
        (rc = store_event_last(s, MAX_EVENTS, ev, &nev, err)) ||
        (rc = store_ckpt_list(s, 0, d->ck, MAX_CKPTS, &d->nck, err)))
        goto done;
    d->val_step = malloc((size_t)(nev ? nev : 1) * sizeof(double));
    d->val_loss = malloc((size_t)(nev ? nev : 1) * sizeof(double));
    if (!d->val_step || !d->val_loss) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < nev; i++) {
        long long step;
        double v;
        if (!strcmp(ev[i].kind, "val_loss") && json_val_loss_detail(ev[i].detail, &step, &v)) {
            d->val_step[d->nval] = (double)step;
            d->val_loss[d->nval++] = v;
        }
    }
done:
    free(ev);
    store_close(&s);
    if (rc) store_data_free(d);
    return rc;
}

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

/* One line of the chart: one stage's rows in one store. */
typedef struct {
    char label[96];
    double *x, *loss, *tps, *mbs;
    int n, color;
} line_t;

static int plot_stores(const store_data_t *d, int nd, const char *path, char *err)
{
    int nlines = 0, rc = 0, color = 0;
    line_t *lines = calloc((size_t)nd * 64 + 1, sizeof *lines);
    plot_series_t *ser[4] = {calloc((size_t)nd * 64 + 1, sizeof(plot_series_t)),
                             calloc((size_t)nd * 64 + 1, sizeof(plot_series_t)),
                             calloc((size_t)nd * 64 + 1, sizeof(plot_series_t)),
                             calloc((size_t)nd * 64 + 1, sizeof(plot_series_t))};
    int ns[4] = {0};
    int64_t s0 = -1, s1 = -1;
    if (!lines || !ser[0] || !ser[1] || !ser[2] || !ser[3]) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < nd; i++) {
        int stages[64], nst = 0;
        for (int j = 0; j < d[i].nme; j++) {
            int st = d[i].me[j].stage, seen = 0;
            for (int q = 0; q < nst; q++) seen |= stages[q] == st;
            if (!seen && nst < 64) stages[nst++] = st;
        }
        for (int q = 0; q < nst; q++) {
            line_t *l = &lines[nlines++];
            snprintf(l->label, sizeof l->label, "stage %d, %s", stages[q], base_name(d[i].path));
            l->color = color++;
            l->x = malloc((size_t)d[i].nme * sizeof(double));
            l->loss = malloc((size_t)d[i].nme * sizeof(double));
            l->tps = malloc((size_t)d[i].nme * sizeof(double));
            l->mbs = malloc((size_t)d[i].nme * sizeof(double));
            if (!l->x || !l->loss || !l->tps || !l->mbs) {
                rc = status_set(err, STATUS_ENOMEM, "out of memory");
                goto done;
            }
            int any_wire = 0, first = -1;
            for (int j = 0; j < d[i].nme; j++) {
                const store_metric_t *m = &d[i].me[j];
                if (m->stage != stages[q]) continue;
                if (first < 0) first = j;
                l->x[l->n] = (double)m->step;
                /* a cross-entropy is never exactly 0 and a pace never 0 tokens/s: peers
                 * write 0 for "not measured" (a step that saw no loss, the first step) */
                l->loss[l->n] = m->loss > 0 ? m->loss : NAN;
                l->tps[l->n] = m->tokens_per_s > 0 ? m->tokens_per_s : NAN;
                /* wire MB/s: the byte counters' growth over the last second or more of
                 * rows (counters move in bursts, a per-row rate is noise); a counter that
                 * went back (a restarted peer) leaves a gap */
                int k = j;
                while (k > first && m->time - d[i].me[k].time < 1.0) {
                    k--;
                    while (k > first && d[i].me[k].stage != stages[q]) k--;
                }
                const store_metric_t *o = &d[i].me[k];
                double dt = m->time - o->time, mbs = NAN;
                int64_t db = (m->bytes_sent + m->bytes_recv) - (o->bytes_sent + o->bytes_recv);
                if (k != j && dt > 0 && db >= 0) mbs = (double)db / dt / 1e6;
                any_wire |= m->bytes_sent + m->bytes_recv > 0;
                l->mbs[l->n++] = mbs;
                if (s0 < 0 || m->step < s0) s0 = m->step;
                if (m->step > s1) s1 = m->step;
            }
            plot_series_t base = {.label = l->label, .x = l->x, .n = l->n, .color = l->color};
            int has_loss = 0;
            for (int j = 0; j < l->n; j++) has_loss |= isfinite(l->loss[j]);
            if (has_loss) ser[0][ns[0]] = base, ser[0][ns[0]++].y = l->loss;
            ser[2][ns[2]] = base, ser[2][ns[2]++].y = l->tps;
            if (any_wire) ser[3][ns[3]] = base, ser[3][ns[3]++].y = l->mbs;
        }
        if (d[i].nval) {
            line_t *l = &lines[nlines++];
            snprintf(l->label, sizeof l->label, "%s", base_name(d[i].path));
            ser[1][ns[1]++] =
                (plot_series_t){.label = l->label,
                                .x = d[i].val_step,
                                .y = d[i].val_loss,
                                .n = d[i].nval,
                                .color = nst ? lines[nlines - 1 - nst].color : color++};
        }
    }
    plot_panel_t panels[4] = {
        {"training loss", "loss (nats/token)", ser[0], ns[0], NULL},
        {"validation loss (held-out data)", "loss (nats/token)", ser[1], ns[1],
         "no data: no val_loss events (train --db; a swarm: at its end, and --val-every)"},
        {"throughput", "tokens/s", ser[2], ns[2], NULL},
        {"wire traffic, sent + received (average over >= 1 s)", "MB/s", ser[3], ns[3],
         "no data: no bytes counted"},
    };
    char title[256];
    if (s0 >= 0)
        snprintf(title, sizeof title, "swarmtrain: %d store%s, steps %" PRId64 "-%" PRId64, nd,
                 nd == 1 ? "" : "s", s0, s1);
    else
        snprintf(title, sizeof title, "swarmtrain: %d store%s, no metrics yet", nd,
                 nd == 1 ? "" : "s");
    rc = plot_svg_write(path, title, "step", panels, 4, err);
done:
    for (int i = 0; lines && i < nlines; i++) {
        free(lines[i].x);
        free(lines[i].loss);
        free(lines[i].tps);
        free(lines[i].mbs);
    }
    free(lines);
    for (int i = 0; i < 4; i++) free(ser[i]);
    return rc;
}

/* The newest row of each stage in a store, for the gauges. */
static int last_rows(const store_data_t *d, const store_metric_t **rows, int max)
{
    int n = 0;
    for (int j = d->nme - 1; j >= 0; j--) {
        int seen = 0;
        for (int q = 0; q < n; q++) seen |= rows[q]->stage == d->me[j].stage;
        if (!seen && n < max) rows[n++] = &d->me[j];
    }
    return n;
}

/* The stores' metrics as an exposition document; NULL when out of memory. */
static prom_t *metrics_build(const store_data_t *d, int nd)
{
    prom_t *p = prom_new();
    if (!p) return NULL;
    static const struct {
        const char *name, *type, *help;
    } fam[] = {
        {"swarmtrain_step", "gauge", "Last training step with a metrics row in the store."},
        {"swarmtrain_loss", "gauge", "Training loss of that step (nats/token)."},
        {"swarmtrain_tokens_per_second", "gauge", "Tokens per second of that step."},
        {"swarmtrain_bytes_sent_total", "counter",
         "Bytes the peer sent (train: stage-boundary bytes)."},
        {"swarmtrain_bytes_received_total", "counter", "Bytes the peer received."},
        {"swarmtrain_metrics_timestamp_seconds", "gauge", "Unix time of that metrics row."},
        {"swarmtrain_val_loss", "gauge", "Last validation loss recorded (nats/token)."},
        {"swarmtrain_val_step", "gauge", "Step of the last validation loss."},
        {"swarmtrain_checkpoint_step", "gauge", "Step of the newest checkpoint of a stage."},
        {"swarmtrain_checkpoints", "gauge", "Checkpoints kept in the store for a stage."},
    };
    int nf = (int)(sizeof fam / sizeof fam[0]);
    for (int f = 0; f < nf; f++) {
        prom_family(p, fam[f].name, fam[f].type, fam[f].help);
        for (int i = 0; i < nd; i++) {
            char stage[16];
            const char *kv[4] = {"store", d[i].path, "stage", stage};
            if (f < 6) {
                const store_metric_t *rows[64];
                int n = last_rows(&d[i], rows, 64);
                for (int q = 0; q < n; q++) {
                    const store_metric_t *m = rows[q];
                    double v[6] = {(double)m->step,       m->loss,
                                   m->tokens_per_s,       (double)m->bytes_sent,
                                   (double)m->bytes_recv, m->time};
                    snprintf(stage, sizeof stage, "%d", m->stage);
                    if (isfinite(v[f])) prom_sample(p, kv, 2, v[f]);
                }
            } else if (f < 8) {
                if (d[i].nval)
                    prom_sample(p, kv, 1,
                                f == 6 ? d[i].val_loss[d[i].nval - 1]
                                       : d[i].val_step[d[i].nval - 1]);
            } else {
                for (int c = 0; c < d[i].nck; c++) { /* newest first: the first of a stage */
                    int first = 1, count = 0;
                    for (int e = 0; e < d[i].nck; e++) {
                        if (d[i].ck[e].stage != d[i].ck[c].stage) continue;
                        first &= e >= c;
                        count++;
                    }
                    if (!first) continue;
                    snprintf(stage, sizeof stage, "%d", d[i].ck[c].stage);
                    prom_sample(p, kv, 2, f == 8 ? (double)d[i].ck[c].step : count);
                }
            }
        }
    }
    return p;
}

static int metrics_stores(const store_data_t *d, int nd, const char *path, char *err)
{
    prom_t *p = metrics_build(d, nd);
    if (!p) return status_set(err, STATUS_ENOMEM, "out of memory");
    int rc = path ? prom_write(p, path, err) : 0;
    if (!path) fputs(prom_text(p), stdout);
    prom_destroy(&p);
    return rc;
}

static int send_all(int fd, const char *buf, size_t n)
{
    while (n) {
        ssize_t w = send(fd, buf, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        buf += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One HTTP exchange: GET /metrics (the stores read afresh) or 404. The request is read
 * with a deadline and at most 4 KiB of it; anything but a GET line is refused. */
static void serve_one(int fd, const char *const *dbs, int ndb)
{
    char req[4096];
    size_t got = 0;
    struct timeval tv = {.tv_sec = 2};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    while (got < sizeof req - 1) { /* up to the end of the headers */
        ssize_t r = recv(fd, req + got, sizeof req - 1 - got, 0);
        if (r <= 0) break;
        got += (size_t)r;
        req[got] = 0;
        if (strstr(req, "\r\n\r\n") || strstr(req, "\n\n")) break;
    }
    req[got] = 0;
    int is_get = !strncmp(req, "GET ", 4), head = !strncmp(req, "HEAD ", 5);
    const char *target = req + (is_get ? 4 : 5);
    size_t tl = strcspn(target, " ?\r\n");
    char hdr[256];
    if ((!is_get && !head) || tl != 8 || strncmp(target, "/metrics", 8)) {
        static const char nf[] = "HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
                                 "Content-Length: 17\r\nConnection: close\r\n\r\n"
                                 "try GET /metrics\n";
        send_all(fd, nf, sizeof nf - 1);
        return;
    }
    char err[STATUS_ERR_LEN];
    store_data_t d[MAX_DBS];
    int rc = 0, n = 0;
    for (; n < ndb && !rc; n++) rc = store_data_load(dbs[n], &d[n], err);
    if (rc) n--;
    prom_t *p = rc ? NULL : metrics_build(d, n);
    for (int i = 0; i < n; i++) store_data_free(&d[i]);
    if (!p) {
        if (!rc) snprintf(err, sizeof err, "out of memory");
        snprintf(hdr, sizeof hdr,
                 "HTTP/1.0 500 Internal Server Error\r\nContent-Type: text/plain\r\n"
                 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                 strlen(err) + 1);
        if (!send_all(fd, hdr, strlen(hdr)) && !head) {
            send_all(fd, err, strlen(err));
            send_all(fd, "\n", 1);
        }
        return;
    }
    const char *body = prom_text(p);
    snprintf(hdr, sizeof hdr,
             "HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
             strlen(body));
    if (!send_all(fd, hdr, strlen(hdr)) && !head) send_all(fd, body, strlen(body));
    prom_destroy(&p);
}

/* --prometheus [HOST:]PORT: an HTTP endpoint for a Prometheus server to scrape, one
 * request at a time, until killed. Port 0 picks a free port; the address is printed. */
static int serve_metrics(const char *const *dbs, int ndb, const char *spec)
{
    char host[256] = "0.0.0.0";
    const char *colon = strrchr(spec, ':'), *port_s = spec;
    if (colon) {
        size_t hl = (size_t)(colon - spec);
        if (hl >= sizeof host) hl = sizeof host - 1;
        memcpy(host, spec, hl);
        host[hl] = 0;
        port_s = colon + 1;
    }
    char *end;
    long port = strtol(port_s, &end, 10);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (*end || port < 0 || port > 65535 || inet_pton(AF_INET, host, &a.sin_addr) != 1) {
        fprintf(stderr, "swarmtrain status: --prometheus %s: want [IPv4:]PORT\n", spec);
        return 2;
    }
    int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 16)) {
        fprintf(stderr, "swarmtrain status: --prometheus %s: %s\n", spec, strerror(errno));
        if (fd >= 0) close(fd);
        return 1;
    }
    socklen_t al = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &al);
    printf("status: serving the stores' metrics at http://%s:%u/metrics\n", host,
           (unsigned)ntohs(a.sin_port));
    fflush(stdout);
    for (;;) {
        int c = accept(fd, NULL, NULL);
        if (c < 0) {
            if (errno == EINTR) continue;
            fprintf(stderr, "swarmtrain status: accept: %s\n", strerror(errno));
            close(fd);
            return 1;
        }
        serve_one(c, dbs, ndb);
        close(c);
    }
}

/* --plot and --metrics-file over the stores, once or every `watch` seconds. */
static int report_stores(const char *const *dbs, int ndb, const char *plot, const char *mfile,
                         double watch)
{
    for (;;) {
        char err[STATUS_ERR_LEN];
        store_data_t d[MAX_DBS];
        int rc = 0, n = 0;
        for (; n < ndb && !rc; n++) rc = store_data_load(dbs[n], &d[n], err);
        if (rc) n--;
        if (!rc && plot) rc = plot_stores(d, n, plot, err);
        if (!rc && mfile) rc = metrics_stores(d, n, strcmp(mfile, "-") ? mfile : NULL, err);
        for (int i = 0; i < n; i++) store_data_free(&d[i]);
        if (rc) {
            fprintf(stderr, "swarmtrain status: %s\n", err);
            return 1;
        }
        if (watch <= 0) return 0;
        clock_sleep(watch);
    }
}

int cmd_status(int argc, char **argv)
{
    static const struct option opts[] = {{"connect", required_argument, 0, 'c'},
                                         {"json", no_argument, 0, 'j'},
                                         {"watch", optional_argument, 0, 'w'},
                                         {"timeout", required_argument, 0, 't'},
                                         {"db", required_argument, 0, 'd'},
                                         {"verify", no_argument, 0, 'v'},
                                         {"plot", required_argument, 0, 'p'},
                                         {"metrics-file", required_argument, 0, 'm'},
                                         {"prometheus", required_argument, 0, 'P'},
                                         {"swarm-key", required_argument, 0, 'S'},
                                         {"allow", required_argument, 0, 'A'},
                                         {"key", required_argument, 0, 'K'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *ep = NULL, *dbs[MAX_DBS], *plot = NULL, *mfile = NULL, *prom = NULL;
    const char *swarm_key = NULL, *allow = NULL, *key = NULL;
    int as_json = 0, c, timeout_ms = 3000, verify = 0, ndb = 0;
    double watch = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'c':
            ep = optarg;
            break;
        case 'j':
            as_json = 1;
            break;
        case 'w':
            watch = optarg ? atof(optarg) : 1.0;
            break;
        case 't':
            timeout_ms = atoi(optarg);
            break;
        case 'd':
            if (ndb == MAX_DBS) {
                fprintf(stderr, "swarmtrain status: at most %d --db\n", MAX_DBS);
                return 2;
            }
            dbs[ndb++] = optarg;
            break;
        case 'v':
            verify = 1;
            break;
        case 'p':
            plot = optarg;
            break;
        case 'm':
            mfile = optarg;
            break;
        case 'P':
            prom = optarg;
            break;
        case 'S':
            swarm_key = optarg;
            break;
        case 'A':
            allow = optarg;
            break;
        case 'K':
            key = optarg;
            break;
        case 'h':
            printf(
                "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]] "
                "[--timeout MS]\n"
                "                         [--swarm-key FILE | --allow FILE --key FILE]\n"
                "       swarmtrain status --db PATH [--db PATH ...] [--json] [--verify]\n"
                "       swarmtrain status --db PATH [--db PATH ...] [--plot FILE.svg]\n"
                "                         [--metrics-file PATH] [--watch[=SECONDS]]\n"
                "       swarmtrain status --db PATH [--db PATH ...] --prometheus [IPv4:]PORT\n\n"
                "Asks any live peer for its view of the swarm: pools (stage, peers, throughput,\n"
                "step, loss) and peers (id, address, stage, state, uptime, microbatches served,\n"
                "bytes in and out, retries, rejected messages). --json prints the document as\n"
                "the peer sent it; --watch refreshes in place every SECONDS (default 1).\n"
                "A secure swarm (peer --swarm-key / --allow) answers only over CURVE: give the\n"
                "swarm key, or the allowlist and a key pair on it (swarmtrain keygen); a peer\n"
                "that refuses the handshake ends the command at once with exit status 3 and\n"
                "a message that starts with \"" HANDSHAKE_TOKEN "\" and says why.\n"
                "--db reads peers' stores instead (also while the peers run): their\n"
                "checkpoints (--verify checks every hash), last events and metrics.\n"
                "--plot FILE.svg draws the stores' metrics over steps, one panel each for\n"
                "training loss, validation loss, tokens/s and wire MB/s, a line per stage\n"
                "and store. --metrics-file PATH writes them in the Prometheus text format\n"
                "(atomically, for node_exporter's textfile collector; '-' prints them).\n"
                "With --watch, both are rewritten every SECONDS. --prometheus [IPv4:]PORT\n"
                "serves them over HTTP at /metrics for a Prometheus server to scrape (the\n"
                "stores read at each scrape; port 0 picks one; default address 0.0.0.0).\n");
            return 0;
        default:
            return 2;
        }
    }
    if (ndb && !ep && optind == argc && prom && !plot && !mfile)
        return serve_metrics(dbs, ndb, prom);
    if (ndb && !ep && optind == argc && (plot || mfile) && !prom)
        return report_stores(dbs, ndb, plot, mfile, watch);
    if (ndb && !ep && optind == argc) {
        int rc = 0;
        for (int i = 0; i < ndb && !rc; i++) rc = show_store(dbs[i], as_json, verify);
        return rc;
    }
    if (!ep || ndb || optind < argc || timeout_ms <= 0 || watch < 0 || plot || mfile || prom) {
        fprintf(stderr, "usage: swarmtrain status --connect ENDPOINT [--json] [--watch[=SECONDS]]\n"
                        "       swarmtrain status --db PATH [--db PATH ...] [--json] [--verify]\n"
                        "       swarmtrain status --db PATH ... [--plot FILE.svg] "
                        "[--metrics-file PATH]\n");
        return 2;
    }
    auth_t *auth = NULL;
    if (swarm_key || allow) {
        char err[STATUS_ERR_LEN];
        uint8_t pk[AUTH_ID_LEN], sk[AUTH_SK_LEN];
        int rc = !(auth = auth_new(swarm_key, allow, err));
        if (!rc && allow && !key)
            rc = status_set(err, STATUS_EINVAL, "--allow needs --key FILE (a pair on the list)");
        if (!rc && key)
            rc = auth_key_read(key, pk, sk, err) || auth_set_identity(auth, pk, sk, err);
        memset(sk, 0, sizeof sk);
        if (rc) {
            fprintf(stderr, "swarmtrain status: %s\n", err);
            auth_destroy(&auth);
            return 2;
        }
    }
    for (;;) {
        char err[STATUS_ERR_LEN], *json = NULL;
        int frc = status_client_fetch_auth(ep, auth, timeout_ms, &json, err);
        if (frc) {
            fprintf(stderr, "swarmtrain status: %s\n", err);
            auth_destroy(&auth);
            return frc == STATUS_EDENIED ? HANDSHAKE_EXIT_REFUSED : 1;
        }
        /* every member's wire bytes by kind, asked of each member (its own counts) */
        char *full = with_peer_wire(json, auth, timeout_ms < 2000 ? timeout_ms : 2000);
        if (full) {
            free(json);
            json = full;
        }
        if (watch > 0) printf("\033[H\033[2J");
        if (as_json)
            printf("%s\n", json);
        else if (show(json)) {
            fprintf(stderr, "swarmtrain status: the peer's answer is not a status document\n");
            free(json);
            auth_destroy(&auth);
            return 1;
        }
        free(json);
        fflush(stdout);
        if (watch <= 0) {
            auth_destroy(&auth);
            return 0;
        }
        clock_sleep(watch);
    }
}
