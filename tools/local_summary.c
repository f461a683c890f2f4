/* local_summary.c — what a `swarmtrain local` run did (local.h), from one record: the
 * peers' events files (DIR/peerN.events.jsonl, docs/events.md; this run's events only,
 * a resumed run's files holding the run before too) and what local itself did (kills,
 * restarts, MTTR). Said on stdout for people and written to DIR/summary.json for
 * programs (the tests, the benchmarks); docs/events.md gives its keys.
 * Not for: reading the peers' logs, which are for people. */
#include "common/clock.h"
#include "swarm/transport.h"
#include "tools/json.h"
#include "tools/local.h"
#include "tools/numbers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

enum { MAX_RECOVERIES = 256, MAX_MOVES = 512, MAX_VALS = 512 };

/* What one peer's events say. */
typedef struct {
    char id[65];
    int left; /* its "left" event: the run's end for it, with its counts */
    int done_stage;
    long long done_step;
    char hash[17];
    double served, resent, lost, throughput, revisits, act_bytes, moves;
    double copies_bytes; /* the last "copy" event's running total */
    /* a peer that joined a running pool (its "joined" event's source "pool", then
     * "serving" from a step ahead: it followed first): from its
     * first event (its socket bound, right after it started) to its state in place and
     * to its first contributed step ("contributing", or "takes_over"); re-syncs after */
    double t_first, t_joined, t_contrib, join_mb, join_s, join_donors;
    int joined_pool, resynced_after;
    int first_serving; /* its first `serving` after the first `joined` came: joined_pool is
                        * decided (a later one is a move or a re-sync, not a join) */
    int any_joined;    /* a `joined` event came: only the first can make it a joiner */
} peer_rec_t;

/* A stage rebuilt: its "recovered_stage" event with the "rebuilt" and "judged" events
 * before it. */
typedef struct {
    int peer, stage;
    long long step;
    double seconds, lr_scale;
    char by[16], method[16], part[16], part_from[16], against[16];
    int from, and_, blocks_from, judged;
    long long copy_step, ckpt_step;
    double chosen_loss, other_loss;
    char how[256];
} recovery_t;

typedef struct {
    int peer, from, to;
    long long step;
    double t;
    char why[128];
} move_t;

typedef struct {
    double t, loss;
    long long step;
} valpt_t;

typedef struct {
    const local_t *L;
    int peer;     /* whose events are read now */
    double since; /* this run's: t >= since */
    double val, val_skip, tps, reroute_after;
    unsigned long long act, act_elems, lost, rerouted, sent[WIRE_KINDS];
    peer_rec_t *peers; /* [L->n] */
    recovery_t cur;    /* the recovery being read */
    recovery_t rec[MAX_RECOVERIES];
    int nrec;
    move_t mv[MAX_MOVES];
    int nmv, moves;
    int order[MAX_RECOVERIES + MAX_MOVES]; /* recoveries (k + 1) and moves (-k - 1) as read */
    int norder;
    valpt_t vals[MAX_VALS];
    int nvals;
} sum_t;

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = 0, cap = 1 << 16;
    char *s = malloc(cap);
    for (size_t got; s && (got = fread(s + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap) {
            char *t = realloc(s, cap *= 2);
            if (!t) free(s);
            s = t;
        }
    }
    fclose(f);
    if (s) s[n] = 0;
    return s;
}

/* Calls fn for each event of peer i from this run on. */
static void each_event(const local_t *L, int i, void (*fn)(void *ctx, const json_obj_t *o),
                       void *ctx)
{
    char *text = slurp(L->ch[i].events);
    if (text) json_lines(text, fn, ctx);
    free(text);
}

/* Whether o is an event of this run (the events files of a resumed run go on). */
static int this_run(const local_t *L, const json_obj_t *o)
{
    return json_num(o, "t") >= L->t0_wall - 0.01;
}

typedef struct {
    const local_t *L;
    int stage;
    double fault_t;
} find_t;

static void on_stage(void *ctx, const json_obj_t *o)
{
    find_t *f = ctx;
    if (this_run(f->L, o) && !strcmp(json_get(o, "kind"), "moved"))
        f->stage = (int)json_num(o, "to");
}

int local_summary_stage(const local_t *L, int i)
{
    find_t f = {L, L->ch[i].stage, -1};
    each_event(L, i, on_stage, &f);
    return f.stage;
}

static void on_fault(void *ctx, const json_obj_t *o)
{
    find_t *f = ctx;
    if (f->fault_t < 0 && this_run(f->L, o) && !strcmp(json_get(o, "kind"), "fault"))
        f->fault_t = json_num(o, "t");
}

typedef struct {
    const local_t *L;
    char *hex;
} id_find_t;

static void on_serving_id(void *ctx, const json_obj_t *o)
{
    id_find_t *f = ctx;
    if (!f->hex[0] && this_run(f->L, o) && !strcmp(json_get(o, "kind"), "serving") &&
        strlen(json_get(o, "id")) == 64)
        snprintf(f->hex, 65, "%s", json_get(o, "id"));
}

int local_summary_peer_id(const local_t *L, int i, char hex[65])
{
    hex[0] = 0;
    id_find_t f = {L, hex};
    each_event(L, i, on_serving_id, &f);
    return hex[0] != 0;
}

double local_summary_fault_time(const local_t *L, int i)
{
    find_t f = {L, -1, -1};
    each_event(L, i, on_fault, &f);
    return f.fault_t > 0 ? f.fault_t : clock_wall();
}

/* ---- reading the events ---------------------------------------------------------------- */

static void copy_text(char *out, size_t n, const json_obj_t *o, const char *key)
{
    snprintf(out, n, "%s", json_get(o, key));
}

static void on_left(sum_t *s, const json_obj_t *o)
{
    peer_rec_t *r = &s->peers[s->peer];
    r->left = 1;
    r->done_stage = (int)json_num(o, "stage");
    r->done_step = (long long)json_num(o, "step");
    copy_text(r->hash, sizeof r->hash, o, "hash");
    r->served = json_num(o, "served"), r->resent = json_num(o, "resent");
    r->lost = json_num(o, "lost"), r->throughput = json_num(o, "throughput");
    r->revisits = json_num(o, "revisits"), r->act_bytes = json_num(o, "act_bytes");
    r->moves = json_num(o, "moves");
    if (r->lost > 0) s->lost += (unsigned long long)r->lost;
    if (r->act_bytes > 0) s->act += (unsigned long long)r->act_bytes;
    double elems = json_num(o, "act_elems");
    if (elems > 0) s->act_elems += (unsigned long long)elems;
}

static void on_val(sum_t *s, const json_obj_t *o)
{
    if (json_num(o, "final") == 1) {
        s->val = json_num(o, "val_loss");
        s->tps = json_num(o, "tokens_per_s");
    } else if (s->nvals < MAX_VALS) {
        valpt_t *v = &s->vals[s->nvals++];
        v->t = json_num(o, "t") - s->L->t0_wall;
        v->loss = json_num(o, "val_loss");
        v->step = (long long)json_num(o, "val_step");
    }
}

static void on_wire(sum_t *s, const json_obj_t *o)
{
    for (int k = 0; k < WIRE_KINDS; k++)
        if (!strcmp(json_get(o, "of"), transport_wire_name(k)) && json_num(o, "sent") > 0)
            s->sent[k] += (unsigned long long)json_num(o, "sent");
}

static void on_reroute(sum_t *s, const json_obj_t *o)
{
    double t = json_num(o, "t"), kill_t = s->L->f.kill_wall;
    s->rerouted++;
    if (kill_t > 0 && t >= kill_t && (s->reroute_after < 0 || t - kill_t < s->reroute_after))
        s->reroute_after = t - kill_t;
}

static void on_moved(sum_t *s, const json_obj_t *o)
{
    s->moves++;
    if (s->nmv >= MAX_MOVES) return;
    move_t *m = &s->mv[s->nmv];
    m->peer = s->peer;
    m->from = (int)json_num(o, "from"), m->to = (int)json_num(o, "to");
    m->step = (long long)json_num(o, "step");
    m->t = json_num(o, "t") - s->L->t0_wall;
    copy_text(m->why, sizeof m->why, o, "why");
    s->order[s->norder++] = -(++s->nmv);
}

/* The CheckFree(+) candidate built ("rebuilt"), and how it was judged ("judged"). */
static void on_rebuilt(sum_t *s, const json_obj_t *o)
{
    recovery_t *c = &s->cur;
    copy_text(c->method, sizeof c->method, o, "method");
    c->from = json_has(o, "from") ? (int)json_num(o, "from") : -1;
    c->and_ = json_has(o, "and") ? (int)json_num(o, "and") : -1;
    c->blocks_from = json_has(o, "blocks_from") ? (int)json_num(o, "blocks_from") : -1;
    copy_text(c->part, sizeof c->part, o, "part");
    copy_text(c->part_from, sizeof c->part_from, o, "part_from");
    c->copy_step = json_has(o, "copy_step") ? (long long)json_num(o, "copy_step") : -1;
}

static void on_judged(sum_t *s, const json_obj_t *o)
{
    recovery_t *c = &s->cur;
    c->judged = json_num(o, "judged") == 1;
    copy_text(c->against, sizeof c->against, o, "against");
    c->ckpt_step = (long long)json_num(o, "ckpt_step");
    c->chosen_loss = json_num(o, "chosen_loss");
    c->other_loss = json_num(o, "other_loss");
}

static void on_recovered(sum_t *s, const json_obj_t *o)
{
    recovery_t *c = &s->cur;
    c->peer = s->peer;
    c->stage = (int)json_num(o, "stage");
    c->step = (long long)json_num(o, "step");
    c->seconds = json_num(o, "seconds");
    c->lr_scale = json_num(o, "lr_scale");
    copy_text(c->by, sizeof c->by, o, "by");
    copy_text(c->how, sizeof c->how, o, "how");
    if (s->nrec < MAX_RECOVERIES) {
        s->rec[s->nrec] = *c;
        s->order[s->norder++] = ++s->nrec;
    }
    memset(c, 0, sizeof *c);
    c->from = c->and_ = c->blocks_from = -1;
    c->copy_step = c->ckpt_step = -1;
    c->chosen_loss = c->other_loss = NAN;
}

/* A joiner of a running pool: when it started, had its state, contributed; re-syncs
 * after that. */
static void on_join_event(peer_rec_t *r, const char *k, const json_obj_t *o)
{
    double t = json_num(o, "t");
    if (r->t_first <= 0) r->t_first = t;
    if (!strcmp(k, "joined") && !r->any_joined) {
        /* the first only: a first member made its stage ("initial") and may download
         * another later, moved by a rebalance (a 20-joiner burst printed a worst join of
         * 78.9 s: founder peer 0 moved at 77 s) */
        r->any_joined = 1;
        if (strcmp(json_get(o, "source"), "pool")) return;
        r->t_joined = t;
        r->join_mb = json_num(o, "mb"), r->join_s = json_num(o, "seconds");
        r->join_donors = json_num(o, "donors");
    } else if (!strcmp(k, "serving") && r->t_joined > 0 && !r->first_serving) {
        /* training had begun: it follows first (from ahead of its step), else it is one
         * of the swarm's first members, which contribute from the first step. Only the
         * first: a first member that a rebalance moved later follows in its new pool too,
         * and was counted a joiner from its process's start (a 20-joiner burst on tiny
         * printed a worst join of 57 s: a founder's move at 41 s) */
        r->first_serving = 1;
        r->joined_pool = json_num(o, "from") > json_num(o, "step");
    } else if ((!strcmp(k, "contributing") || !strcmp(k, "takes_over")) && r->joined_pool &&
               r->t_contrib <= 0) {
        r->t_contrib = t;
    } else if (!strcmp(k, "resynced") && r->t_contrib > 0) {
        r->resynced_after++;
    }
}

static void on_event(void *ctx, const json_obj_t *o)
{
    sum_t *s = ctx;
    if (!this_run(s->L, o)) return;
    const char *k = json_get(o, "kind");
    peer_rec_t *r = &s->peers[s->peer];
    on_join_event(r, k, o);
    if (!strcmp(k, "val_loss"))
        on_val(s, o);
    else if (!strcmp(k, "val_loss_skip"))
        s->val_skip = json_num(o, "val_loss_skip");
    else if (!strcmp(k, "left"))
        on_left(s, o);
    else if (!strcmp(k, "wire"))
        on_wire(s, o);
    else if (!strcmp(k, "reroute"))
        on_reroute(s, o);
    else if (!strcmp(k, "copy"))
        r->copies_bytes = json_num(o, "copies_bytes");
    else if (!strcmp(k, "serving"))
        copy_text(r->id, sizeof r->id, o, "id");
    else if (!strcmp(k, "moved"))
        on_moved(s, o);
    else if (!strcmp(k, "rebuilt"))
        on_rebuilt(s, o);
    else if (!strcmp(k, "judged"))
        on_judged(s, o);
    else if (!strcmp(k, "recovered_stage"))
        on_recovered(s, o);
}

static void read_all(sum_t *s)
{
    s->val = s->val_skip = NAN;
    s->tps = 0;
    s->reroute_after = -1;
    for (int i = 0; i < s->L->n; i++) {
        s->peer = i;
        memset(&s->cur, 0, sizeof s->cur);
        s->cur.chosen_loss = s->cur.other_loss = NAN;
        s->cur.from = s->cur.and_ = s->cur.blocks_from = -1;
        s->cur.copy_step = s->cur.ckpt_step = -1;
        each_event(s->L, i, on_event, s);
    }
}

/* ---- on stdout ----------------------------------------------------------------------------- */

static int cmp_val(const void *a, const void *b)
{
    return numbers_cmp(&((const valpt_t *)a)->t, &((const valpt_t *)b)->t);
}

static unsigned long long sent_total(const sum_t *s)
{
    unsigned long long all = 0;
    for (int k = 0; k < WIRE_KINDS; k++) all += s->sent[k];
    return all;
}

static double copy_bytes(const sum_t *s)
{
    double c = 0;
    for (int i = 0; i < s->L->n; i++)
        if (s->peers[i].copies_bytes > 0) c += s->peers[i].copies_bytes;
    return c;
}

/* The run's numbers: loss, speed, the wire by kind per training token, CheckFree+'s
 * copies. Every byte is sent by one peer and received by another: the peers' sent bytes
 * (their "wire" events; a peer killed with SIGKILL has none) are the swarm's traffic. */
static void print_totals(const sum_t *s)
{
    const local_t *L = s->L;
    double tokens = (double)L->run.steps * L->tokens_per_step;
    double all = (double)sent_total(s), per = tokens > 0 ? 1 / tokens : 0;
    printf("local: done in %.1f s: val_loss %.4f, tokens/s %.0f, wire %.1f bytes per token, lost "
           "microbatches %llu\n",
           clock_now() - L->t0, s->val, s->tps, all * per, s->lost);
    printf("local: wire bytes per token (sent, all peers, headers included):");
    for (int k = 0; k < WIRE_KINDS; k++)
        printf(" %s %.1f,", transport_wire_name(k), (double)s->sent[k] * per);
    printf(" total %.1f; codec payloads (activations and gradients) %.1f", all * per,
           (double)s->act * per);
    if (s->act_elems) /* what the codec costs, its header included */
        printf(", %.4f bytes per element", (double)s->act / (double)s->act_elems);
    printf("\n");
    /* the copies ride the state kind: their keepers count what they fetched */
    printf("local: copies for recovery (the end stages' embedding / final norm and head kept "
           "by their neighbours, middle stages' blocks by the stage before): %.0f bytes, %.1f "
           "per token, %.2f%% of the wire\n",
           copy_bytes(s), copy_bytes(s) * per, all > 0 ? 100.0 * copy_bytes(s) / all : 0);
}

/* The seconds from start to first contributed step of the peers that joined a running
 * pool, sorted into t[]; how many. */
static int join_times(const sum_t *s, double *t)
{
    int n = 0;
    for (int i = 0; i < s->L->n; i++)
        if (s->peers[i].t_contrib > 0) t[n++] = s->peers[i].t_contrib - s->peers[i].t_first;
    numbers_sort(t, n);
    return n;
}

/* What the joins into a running pool came to: the seconds from start to first contributed
 * step (sorted, join_times), each download's donors (sorted), the slowest download's rate,
 * joiners that never contributed, re-syncs after contributing. */
typedef struct {
    double t[LOCAL_MAX_PEERS], donors[LOCAL_MAX_PEERS], mbps;
    int n, nd, pending, resyncs;
} join_stats_t;

static void join_stats(const sum_t *s, join_stats_t *j)
{
    j->n = join_times(s, j->t);
    j->nd = j->pending = j->resyncs = 0;
    j->mbps = INFINITY;
    for (int i = 0; i < s->L->n; i++) {
        const peer_rec_t *r = &s->peers[i];
        if (!r->joined_pool) continue;
        if (r->t_contrib <= 0) j->pending++;
        j->resyncs += r->resynced_after;
        if (r->join_s > 0 && r->join_mb / r->join_s < j->mbps) j->mbps = r->join_mb / r->join_s;
        if (r->join_donors > 0) j->donors[j->nd++] = r->join_donors;
    }
    numbers_sort(j->donors, j->nd);
}

/* Joins into a running pool: the time from a joiner's start to its first contributed
 * step (median and worst), its download's rate and donors, re-syncs after it contributed. */
static void print_joins(const sum_t *s)
{
    join_stats_t j;
    join_stats(s, &j);
    if (!j.n && !j.pending) return;
    printf("local: joins into a running pool: %d contributed", j.n);
    if (j.n)
        printf(", start to first contributed step median %.2f s worst %.2f s, slowest download "
               "%.1f MB/s, donors per download median %.0f (%.0f-%.0f), re-synced after "
               "contributing %d time(s)",
               numbers_median_sorted(j.t, j.n), j.t[j.n - 1], j.mbps,
               j.nd ? numbers_median_sorted(j.donors, j.nd) : 0, j.nd ? j.donors[0] : 0,
               j.nd ? j.donors[j.nd - 1] : 0, j.resyncs);
    if (j.pending) printf("; %d joined but never contributed", j.pending);
    printf("\n");
}

static void print_faults(const sum_t *s)
{
    const local_t *L = s->L;
    const local_faults_t *f = &L->f;
    if (L->lo.kill_stage >= 0 && !f->ks_done)
        printf("local: fault: the run ended before the drawn kill of stage %d (after step %d, "
               "%.2f s on)\n",
               L->lo.kill_stage, L->lo.kill_stage_step, f->ks_delay);
    if (f->kill_wall > 0) {
        if (s->reroute_after >= 0)
            printf("local: fault: first microbatch re-routed %.3f s after the kill\n",
                   s->reroute_after);
        else
            printf("local: fault: no microbatch needed re-routing after the kill\n");
    }
    if (L->lo.churn_at && f->ca_next < L->lo.churn_at)
        printf("local: fault: the run ended before %d of the %d drawn churn kills\n",
               L->lo.churn_at - f->ca_next, L->lo.churn_at);
    if (!f->kills && !(L->lo.churn_rate > 0) && !L->lo.churn_at) return;
    printf("local: faults: %d kills, %d restarts, %llu microbatches re-routed, %llu lost", f->kills,
           f->restarts, s->rerouted, s->lost);
    if (f->nmttr)
        printf(", MTTR (kill to the pool's next step) min %.2f s median %.2f s max %.2f s over %d",
               f->mttr[0], f->mttr[f->nmttr / 2], f->mttr[f->nmttr - 1], f->nmttr);
    if (f->npm) printf(", %d kill(s) the pool never stepped after", f->npm);
    printf("\n");
}

/* Every recovery and move, peer by peer as they happened; validation during the run in
 * time order; the placement at the end; every unplanned death. */
static void print_story(const sum_t *s)
{
    const local_t *L = s->L;
    for (int k = 0; k < s->norder; k++) {
        if (s->order[k] > 0) {
            const recovery_t *r = &s->rec[s->order[k] - 1];
            printf("local: peer %d recovered: stage %d at step %lld in %.2f s by %s", r->peer,
                   r->stage, r->step, r->seconds, r->how);
            if (!strcmp(r->by, "copy"))
                printf("; fresh optimizer state");
            else if (strcmp(r->by, "checkpoint"))
                printf("; fresh optimizer state, learning rate x%.2f", r->lr_scale);
            printf("\n");
        } else {
            const move_t *m = &s->mv[-s->order[k] - 1];
            printf("local: peer %d moved: stage %d -> %d (%s)\n", m->peer, m->from, m->to, m->why);
        }
    }
    for (int i = 0; i < s->nvals; i++)
        printf("local: val step %lld val_loss %.4f at %.1f s\n", s->vals[i].step, s->vals[i].loss,
               s->vals[i].t);
    if (L->have_last_view) {
        printf("local: %d move(s); placement at the end (peers per stage):", s->moves);
        for (int st = 0; st < L->S; st++)
            printf("%s%d", st ? "," : " ", L->last_view.peers_per[st]);
        printf("\n");
    }
    int unplanned = 0;
    for (int i = 0; i < L->n; i++) {
        int st = L->ch[i].status;
        if (!local_watch_died_unplanned(&L->ch[i])) continue;
        unplanned++;
        printf("local: peer %d (stage %d) died unplanned: %s %d; see %s\n", i, L->ch[i].stage,
               WIFEXITED(st) ? "exit status" : "signal",
               WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), L->ch[i].log);
    }
    if (!unplanned) printf("local: no peer died unplanned\n");
    fflush(stdout);
}

/* ---- DIR/summary.json ---------------------------------------------------------------------- */

/* ",\"key\":x" with null for a number that is not finite */
static void put_num(FILE *f, const char *key, double x, const char *fmt)
{
    fprintf(f, ",\"%s\":", key);
    if (isfinite(x))
        fprintf(f, fmt, x);
    else
        fprintf(f, "null");
}

/* How peer i ended: "exit":N or "signal":N (nothing while it runs). */
static void put_end(FILE *f, const local_child_t *c)
{
    if (!c->exited) return;
    fprintf(f, ",\"%s\":%d", WIFEXITED(c->status) ? "exit" : "signal",
            WIFEXITED(c->status) ? WEXITSTATUS(c->status) : WTERMSIG(c->status));
}

static void put_scalars(FILE *f, const sum_t *s)
{
    const local_t *L = s->L;
    const local_faults_t *fl = &L->f;
    fprintf(f, "{\"val_loss\":");
    fprintf(f, isfinite(s->val) ? "%.6f" : "null", s->val);
    put_num(f, "val_loss_skip", s->val_skip, "%.6f");
    fprintf(f,
            ",\"seconds\":%.3f,\"tokens_per_s\":%.1f,\"tokens\":%.0f,\"lost\":%llu,\"kills\":%d,"
            "\"restarts\":%d,\"peers\":%d,\"rerouted\":%llu",
            clock_now() - L->t0, s->tps, (double)L->run.steps * L->tokens_per_step, s->lost,
            fl->kills, fl->restarts, L->n, s->rerouted);
    put_num(f, "reroute_after_kill", s->reroute_after >= 0 ? s->reroute_after : NAN, "%.3f");
    fprintf(f, ",\"moves\":%d,\"act_bytes\":%llu,\"act_elems\":%llu,\"copy_bytes\":%.0f", s->moves,
            s->act, s->act_elems, copy_bytes(s));
    fprintf(f, ",\"mttr_n\":%d", fl->nmttr);
    put_num(f, "mttr_min", fl->nmttr ? fl->mttr[0] : NAN, "%.3f");
    put_num(f, "mttr_median", fl->nmttr ? fl->mttr[fl->nmttr / 2] : NAN, "%.3f");
    put_num(f, "mttr_max", fl->nmttr ? fl->mttr[fl->nmttr - 1] : NAN, "%.3f");
    fprintf(f, ",\"mttr_pending\":%d,\"kill_stage_missed\":%d,\"churn_at_missed\":%d", fl->npm,
            L->lo.kill_stage >= 0 && !fl->ks_done, L->lo.churn_at - fl->ca_next + fl->ca_none);
    fprintf(f, ",\"paused\":%d,\"pause_s\":%.1f,\"woken\":%d", fl->pz_state ? fl->pz_peer : -1,
            fl->pz_state ? L->lo.pause_s : 0.0, fl->pz_state == 2);
    join_stats_t j;
    join_stats(s, &j);
    fprintf(f, ",\"joins\":%d", j.n);
    put_num(f, "join_median_s", j.n ? numbers_median_sorted(j.t, j.n) : NAN, "%.3f");
    put_num(f, "join_worst_s", j.n ? j.t[j.n - 1] : NAN, "%.3f");
    put_num(f, "join_donors_min", j.nd ? j.donors[0] : NAN, "%.0f");
    fprintf(f, ",\"join_resyncs\":%d,\"join_pending\":%d", j.resyncs, j.pending);
}

/* "name":[i,...] of the peers for which pick says so */
static void put_peer_list(FILE *f, const local_t *L, const char *name, int which)
{
    fprintf(f, ",\"%s\":[", name);
    for (int i = 0, first = 1; i < L->n; i++) {
        if (!(which ? L->ch[i].stopped_late : L->ch[i].killed)) continue;
        fprintf(f, "%s%d", first ? "" : ",", i);
        first = 0;
    }
    fprintf(f, "]");
}

static void put_processes(FILE *f, const sum_t *s)
{
    const local_t *L = s->L;
    fprintf(f, ",\"unplanned\":[");
    for (int i = 0, first = 1; i < L->n; i++) {
        if (!local_watch_died_unplanned(&L->ch[i])) continue;
        fprintf(f, "%s{\"peer\":%d,\"stage\":%d", first ? "" : ",", i, L->ch[i].stage);
        put_end(f, &L->ch[i]);
        fprintf(f, "}");
        first = 0;
    }
    fprintf(f, "]");
    put_peer_list(f, L, "killed", 0);
    put_peer_list(f, L, "stopped_late", 1);
    fprintf(f, ",\"processes\":[");
    for (int i = 0; i < L->n; i++) {
        const local_child_t *c = &L->ch[i];
        const peer_rec_t *r = &s->peers[i];
        fprintf(f,
                "%s{\"peer\":%d,\"stage\":%d,\"store\":%d,\"killed\":%d,\"stopped_late\":%d,"
                "\"unplanned\":%d",
                i ? "," : "", i, c->stage, c->store, c->killed, c->stopped_late,
                local_watch_died_unplanned(c));
        put_end(f, c);
        fprintf(f, ",\"id\":");
        json_put_string(f, r->id);
        if (r->joined_pool) {
            put_num(f, "join_s", r->t_contrib > 0 ? r->t_contrib - r->t_first : NAN, "%.3f");
            put_num(f, "join_state_s", r->t_joined - r->t_first, "%.3f");
            put_num(f, "join_mb_per_s", r->join_s > 0 ? r->join_mb / r->join_s : NAN, "%.1f");
            fprintf(f, ",\"resynced_after\":%d", r->resynced_after);
        }
        if (r->left) {
            fprintf(f, ",\"done_stage\":%d,\"done_step\":%lld,\"hash\":\"%s\"", r->done_stage,
                    r->done_step, r->hash);
            put_num(f, "served", r->served, "%.0f");
            put_num(f, "resent", r->resent, "%.0f");
            put_num(f, "lost", r->lost, "%.0f");
            put_num(f, "throughput", r->throughput, "%.1f");
            put_num(f, "moves", r->moves, "%.0f");
            put_num(f, "revisits", r->revisits, "%.0f");
        }
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

static void put_wire(FILE *f, const sum_t *s)
{
    fprintf(f, ",\"wire_sent\":{");
    for (int k = 0; k < WIRE_KINDS; k++)
        fprintf(f, "%s\"%s\":%llu", k ? "," : "", transport_wire_name(k), s->sent[k]);
    fprintf(f, ",\"total\":%llu}", sent_total(s));
}

static void put_faults(FILE *f, const local_t *L)
{
    fprintf(f, ",\"faults\":[");
    for (int k = 0; k < L->f.nlog; k++) {
        const local_fault_t *x = &L->f.log[k];
        fprintf(f, "%s{\"peer\":%d,\"stage\":%d,\"step\":%lld,\"t\":%.3f,\"cause\":\"%s\"",
                k ? "," : "", x->peer, x->stage, x->step, x->t, x->cause);
        if (x->other >= 0) fprintf(f, ",\"other\":%d", x->other);
        if (x->drawn >= 0) fprintf(f, ",\"drawn_step\":%lld", x->drawn);
        fprintf(f, "}");
    }
    fprintf(f, "]");
    if (!L->have_last_view) return;
    fprintf(f, ",\"placement\":[");
    for (int st = 0; st < L->S; st++) fprintf(f, "%s%d", st ? "," : "", L->last_view.peers_per[st]);
    fprintf(f, "]");
}

static void put_recoveries(FILE *f, const sum_t *s)
{
    fprintf(f, ",\"recoveries\":[");
    for (int k = 0; k < s->nrec; k++) {
        const recovery_t *r = &s->rec[k];
        fprintf(f, "%s{\"peer\":%d,\"stage\":%d,\"step\":%lld", k ? "," : "", r->peer, r->stage,
                r->step);
        put_num(f, "seconds", r->seconds, "%.2f");
        fprintf(f, ",\"by\":");
        json_put_string(f, r->by);
        fprintf(f, ",\"method\":");
        json_put_string(f, r->method);
        fprintf(f, ",\"from\":%d,\"and\":%d,\"blocks_from\":%d,\"part\":", r->from, r->and_,
                r->blocks_from);
        json_put_string(f, r->part);
        fprintf(f, ",\"part_from\":");
        json_put_string(f, r->part_from);
        fprintf(f, ",\"copy_step\":%lld,\"judged\":%d,\"against\":", r->copy_step, r->judged);
        json_put_string(f, r->against);
        fprintf(f, ",\"ckpt_step\":%lld", r->ckpt_step);
        put_num(f, "chosen_loss", r->chosen_loss, "%.4f");
        put_num(f, "other_loss", r->other_loss, "%.4f");
        put_num(f, "lr_scale", r->lr_scale, "%.2f");
        fprintf(f, ",\"how\":");
        json_put_string(f, r->how);
        fprintf(f, "}");
    }
    fprintf(f, "]");
}

static void put_moves_vals(FILE *f, const sum_t *s)
{
    fprintf(f, ",\"moved\":[");
    for (int k = 0; k < s->nmv; k++) {
        const move_t *m = &s->mv[k];
        fprintf(f, "%s{\"peer\":%d,\"from\":%d,\"to\":%d,\"step\":%lld,\"at\":%.1f,\"why\":",
                k ? "," : "", m->peer, m->from, m->to, m->step, m->t);
        json_put_string(f, m->why);
        fprintf(f, "}");
    }
    fprintf(f, "],\"vals\":[");
    for (int k = 0; k < s->nvals; k++)
        fprintf(f, "%s{\"step\":%lld,\"val_loss\":%.4f,\"at\":%.1f}", k ? "," : "", s->vals[k].step,
                s->vals[k].loss, s->vals[k].t);
    fprintf(f, "]");
}

static void write_json(const sum_t *s)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", s->L->lo.dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    put_scalars(f, s);
    put_processes(f, s);
    put_wire(f, s);
    put_faults(f, s->L);
    put_recoveries(f, s);
    put_moves_vals(f, s);
    fprintf(f, "}\n");
    fclose(f);
}

int local_summary(local_t *L)
{
    sum_t *s = calloc(1, sizeof *s);
    peer_rec_t *peers = calloc((size_t)(L->n ? L->n : 1), sizeof *peers);
    if (!s || !peers) {
        free(s);
        free(peers);
        fprintf(stderr, "swarmtrain local: out of memory for the summary\n");
        return 1;
    }
    s->L = L;
    s->peers = peers;
    read_all(s);
    numbers_sort(L->f.mttr, L->f.nmttr);
    qsort(s->vals, (size_t)s->nvals, sizeof *s->vals, cmp_val);
    print_totals(s);
    print_faults(s);
    print_joins(s);
    print_story(s);
    write_json(s);
    /* a poisoned member's refused messages lose its microbatches by design */
    int rc = isnan(s->val) || (s->lost && !L->lo.poison_kind[0]) ? 1 : 0;
    free(peers);
    free(s);
    return rc;
}

void local_summary_orphan(const local_t *L, int stage, long long step)
{
    char path[1200];
    snprintf(path, sizeof path, "%s/summary.json", L->lo.dir);
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"val_loss\":null,\"orphan_stage\":%d,\"step\":%lld}\n", stage, step);
    fclose(f);
}
