/* local_watch.c — `swarmtrain local` watches its swarm (local.h): it reaps peers that
 * exit (and says at once why one died unplanned), shows progress from the swarm's own
 * status answers, lets the faults due happen (local_fault.c), stops a peer that missed
 * the run's end, and gives up on a stage nobody can rebuild or on Ctrl-C.
 * Not for: the faults themselves, the summary (local_summary.c). */
#include "common/clock.h"
#include "common/status.h"
#include "swarm/status_client.h"
#include "tools/json.h"
#include "tools/local.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

static void on_pool(void *ctx, const json_obj_t *o)
{
    local_view_t *v = ctx;
    int s = atoi(json_get(o, "stage"));
    if (s >= 0 && s < LOCAL_MAX_STAGES) {
        v->peers_per[s] = atoi(json_get(o, "peers"));
        v->step_per[s] = atoll(json_get(o, "step"));
    }
    if (s == 0) {
        v->step0 = atoll(json_get(o, "step"));
        const char *l = json_get(o, "loss");
        v->loss = strcmp(l, "null") && *l ? atof(l) : NAN;
    }
    v->pools = s + 1 > v->pools ? s + 1 : v->pools;
}

static void on_peer(void *ctx, const json_obj_t *o)
{
    local_view_t *v = ctx;
    v->live++;
    v->serving += !strcmp(json_get(o, "state"), "serving");
    v->bytes_out += atof(json_get(o, "bytes_out"));
    v->retries += atoll(json_get(o, "retries"));
    const char *colon = strrchr(json_get(o, "addr"), ':');
    if (colon && v->nports < LOCAL_MAX_PEERS) {
        v->port[v->nports] = atoi(colon + 1);
        v->port_stage[v->nports++] = atoi(json_get(o, "stage"));
    }
}

int local_watch_view(const local_t *L, local_view_t *v)
{
    for (int i = 0; i < L->n; i++) {
        if (L->ch[i].exited || L->ch[i].killed) continue;
        char ep[64], err[STATUS_ERR_LEN], *json = NULL;
        snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", L->ch[i].port);
        if (status_client_fetch_auth(ep, L->auth, 1000, &json, err)) continue;
        memset(v, 0, sizeof *v);
        v->loss = NAN;
        int ok =
            json_each(json, "pools", on_pool, v) >= 0 && json_each(json, "peers", on_peer, v) >= 0;
        free(json);
        if (ok) return 0;
    }
    return -1;
}

int local_watch_died_unplanned(const local_child_t *c)
{
    return c->exited && !c->killed && !(WIFEXITED(c->status) && WEXITSTATUS(c->status) == 0);
}

/* The last n lines of a peer's log, each indented, on stdout. */
static void print_log_tail(const char *path, int n)
{
    FILE *f = fopen(path, "r");
    if (!f) return;
    char ring[8][256], line[256];
    int k = 0;
    if (n > 8) n = 8;
    while (fgets(line, sizeof line, f)) snprintf(ring[k++ % n], sizeof ring[0], "%s", line);
    fclose(f);
    for (int i = k > n ? k - n : 0; i < k; i++) {
        const char *l = ring[i % n];
        printf("    %s%s", l, l[strlen(l) - 1] == '\n' ? "" : "\n");
    }
}

/* Peer i exited with st before training began (not cleanly): whether that leaves its
 * stage with no peer, so that the swarm cannot start. Before step 0 the others wait for
 * the run's peers only as long as the table changes (join.h): they start without one
 * that died, planned or not, once every stage serves. */
static int leaves_stage_empty(const local_t *L, int i, int st)
{
    if (L->last_step >= 1 || (WIFEXITED(st) && WEXITSTATUS(st) == 0)) return 0;
    int mates = 0;
    for (int k = 0; k < L->n; k++)
        mates += k != i && L->ch[k].pid > 0 && !L->ch[k].exited && L->ch[k].stage == L->ch[i].stage;
    return !mates && L->ch[i].stage >= 0;
}

/* Reaps the peers that exited; how many run still. *start_failed: one left a stage with
 * no peer before training began. */
static int reap(local_t *L, int *start_failed)
{
    int running = 0;
    for (int i = 0; i < L->n; i++) {
        local_child_t *c = &L->ch[i];
        if (c->exited) continue;
        int st;
        if (waitpid(c->pid, &st, WNOHANG) != c->pid) {
            running++;
            continue;
        }
        c->exited = 1;
        c->status = st;
        local_fault_on_exit(L, i, st);
        if (local_watch_died_unplanned(c)) {
            printf("local: peer %d (stage %d) died unplanned (%s %d); the end of %s:\n", i,
                   c->stage, WIFEXITED(st) ? "exit status" : "signal",
                   WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st), c->log);
            print_log_tail(c->log, 4);
            fflush(stdout);
        }
        if (leaves_stage_empty(L, i, st)) *start_failed = 1;
    }
    return running;
}

/* A peer exits 0 on its own when the run is over for it. One still running 10 s after
 * that, and not frozen, missed the run's end (asleep, cut off; the others had declared it
 * dead and said their LEAVE to the live ones only): it is told to stop (a clean leave). */
static void stop_late_ones(local_t *L, int frozen)
{
    if (L->done_seen < 0)
        for (int i = 0; i < L->n; i++)
            if (L->ch[i].exited && !L->ch[i].killed && WIFEXITED(L->ch[i].status) &&
                WEXITSTATUS(L->ch[i].status) == 0)
                L->done_seen = clock_now();
    if (L->done_seen < 0 || clock_now() - L->done_seen <= 10.0 || frozen) return;
    for (int i = 0; i < L->n; i++) {
        if (L->ch[i].exited || L->ch[i].stopped_late) continue;
        printf("local: the run is over; stopping peer %d, which missed its end\n", i);
        kill(L->ch[i].pid, SIGTERM);
        L->ch[i].stopped_late = 1;
    }
    fflush(stdout);
}

/* The poisoned peer (tests): expelled, it may wait for its pool forever; once every
 * honest peer is done, it is told to stop. */
static void stop_poisoned(local_t *L, int running)
{
    const local_opts_t *lo = &L->lo;
    if (!lo->poison_kind[0] || lo->poison_peer >= L->n || running != 1 ||
        L->ch[lo->poison_peer].exited || L->poison_stopped)
        return;
    printf("local: the honest peers are done; stopping the poisoned peer %d\n", lo->poison_peer);
    kill(L->ch[lo->poison_peer].pid, SIGTERM);
    L->poison_stopped = 1;
}

/* Peers move between stages (rebalancing): churn and restarts go by where they are now. */
static void follow_moves(local_t *L, const local_view_t *v)
{
    for (int k = 0; k < v->nports; k++)
        for (int i = 0; i < L->n; i++)
            if (L->ch[i].port == v->port[k] && !L->ch[i].exited && !L->ch[i].killed)
                L->ch[i].stage = v->port_stage[k];
}

/* A stage with no peer whose neighbouring pools have one member each: no member may move
 * to rebuild it (recover.c), and no joiner comes unless local starts one (a churn restart
 * due, --join-at). After 30 s of that the run cannot end: say which stage and how to go
 * on, and stop. 0, or local's exit status 3 once stopped. */
static int orphan_check(local_t *L, const local_view_t *v, double now)
{
    int orphan = -1, S = L->S;
    for (int s = 0; s < S && s < v->pools; s++) {
        int spare = (s > 0 && v->peers_per[s - 1] >= 2) || (s + 1 < S && v->peers_per[s + 1] >= 2);
        if (v->peers_per[s] == 0 && !spare) orphan = s;
    }
    if (orphan < 0 || local_fault_joiner_due(L) || v->step0 >= L->run.steps) {
        L->orphan_since = -1;
        return 0;
    }
    if (L->orphan_since < 0) L->orphan_since = now;
    if (now - L->orphan_since <= 30.0) return 0;
    printf("local: stage %d has no peer, and no neighbouring pool can spare one to rebuild it: "
           "it waits for a joiner, which local does not start; stopping the peers\n",
           orphan);
    local_launch_stop_all(L);
    printf("local: go on with: swarmtrain local --resume %s (or join a peer to stage %d)\n",
           L->lo.dir, orphan);
    fflush(stdout);
    local_summary_orphan(L, orphan, v->step0);
    return 3;
}

/* The progress line (unless --quiet): step, loss, peers per pool, tokens/s, bytes/s. */
static void progress(local_t *L, const local_view_t *v, double now)
{
    if (L->last_step >= 0 && v->step0 > L->last_step)
        L->tps = (double)(v->step0 - L->last_step) * L->tokens_per_step / (now - L->last_t);
    double bps = L->last_step >= 0 ? (v->bytes_out - L->last_bytes) / (now - L->last_t) : 0;
    int line = v->step0 != L->last_step || now - L->last_t > 1.0;
    if (v->step0 != L->last_step) L->last_step = v->step0, L->last_t = now;
    L->last_bytes = v->bytes_out;
    if (L->lo.quiet || !line) return;
    printf("[%5.0fs] step %lld/%d", now - L->t0, v->step0, L->run.steps);
    if (!isnan(v->loss)) printf("  loss %.4f", v->loss);
    printf("  peers/pool");
    for (int s = 0; s < v->pools; s++) printf(" %d", v->peers_per[s]);
    printf("  %.0f tok/s  wire %.2f MB/s  re-sent %lld\n", L->tps, bps / 1e6, v->retries);
    fflush(stdout);
}

/* What a view brings: where peers are, a stage nobody can rebuild, the placement while
 * it trains, progress, the faults due. 0, or local's exit status. */
static int on_view(local_t *L, const local_view_t *v, double now)
{
    follow_moves(L, v);
    int rc = orphan_check(L, v, now);
    if (rc) return rc;
    int all_held = v->pools >= L->S;
    for (int s = 0; s < L->S && all_held; s++) all_held = v->peers_per[s] > 0;
    if (all_held && v->step0 < L->run.steps - 1) { /* while it trains, not as it leaves */
        L->last_view = *v;
        L->have_last_view = 1;
    }
    progress(L, v, now);
    return local_fault_tick(L, v, now) ? local_launch_failed(L) : 0;
}

int local_watch(local_t *L)
{
    static local_view_t v;
    L->last_step = -1;
    L->last_t = clock_now();
    L->done_seen = L->orphan_since = -1;
    for (;;) {
        int start_failed = 0;
        local_fault_start_tick(L);
        int running = reap(L, &start_failed);
        if (!running) return 0;
        if (start_failed) {
            printf("local: the swarm cannot start: a stage has no peer left; stopping the other "
                   "peers\n");
            local_launch_stop_all(L);
            return 1;
        }
        stop_late_ones(L, local_fault_pause_tick(L));
        stop_poisoned(L, running);
        if (local_interrupted) {
            fprintf(stderr, "local: stopping %d peers\n", running);
            local_launch_stop_all(L);
            printf("local: interrupted; logs in %s; go on with: swarmtrain local --resume %s\n",
                   L->lo.dir, L->lo.dir);
            return 130;
        }
        int have_view = local_watch_view(L, &v) == 0;
        double now = clock_now();
        int rc = have_view ? on_view(L, &v, now) : 0;
        if (rc) return rc;
        if (local_fault_restart_tick(L, now)) return local_launch_failed(L);
        clock_sleep(
            L->lo.quiet || L->lo.churn_rate > 0 || L->lo.churn_at || L->lo.kill_random ? 0.2 : 1.0);
    }
}
