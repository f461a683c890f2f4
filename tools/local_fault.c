/* local_fault.c — the faults `swarmtrain local` injects from outside (local.h), each at
 * a victim, step and moment drawn from --fault-seed in a fixed order (the same seed
 * replays the same faults): --kill start, the --kill drill (the victim kills itself; a
 * late one is killed from here), --kill random, --pause, --kill-stage, --stage-failures,
 * --churn, --dead-link; the peers it starts again or adds (--join-at, --revive, restarts); and the
 * recovery time of each kill (MTTR: to the victim's pool's next step). Every fault is
 * said on stdout as it happens and kept for the summary.
 * Not for: watching the swarm (local_watch.c), starting processes (local_launch.c). */
#include "common/clock.h"
#include "tools/local.h"

#include "swarm/auth.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <zmq.h>

/* Keeps a fault for the summary. */
static void note(local_t *L, int peer, int stage, long long step, double t, const char *cause)
{
    local_faults_t *f = &L->f;
    if (f->nlog < LOCAL_MAX_PEERS)
        f->log[f->nlog++] = (local_fault_t){peer, stage, -1, step, t, cause, -1};
}

/* SIGKILLs peer i from outside, now; kept for the summary (not yet counted as a kill:
 * the callers count what the summary's "kills" has always counted). */
static void sigkill(local_t *L, int i, long long step, const char *cause)
{
    kill(L->ch[i].pid, SIGKILL);
    L->ch[i].killed = 1;
    note(L, i, L->ch[i].stage, step, clock_wall(), cause);
}

/* A kill whose recovery is timed: to the next step of `stage`'s pool after `step`. */
static void await_step(local_t *L, int stage, long long step, double now)
{
    local_faults_t *f = &L->f;
    if (f->npm >= LOCAL_MAX_PEERS) return;
    f->pending[f->npm].stage = stage;
    f->pending[f->npm].step = step;
    f->pending[f->npm++].at = now;
}

void local_fault_plan_start(local_t *L)
{
    const local_opts_t *lo = &L->lo;
    local_start_kill_t *sk = &L->f.sk;
    int n = lo->peers;
    /* a peer, not the founding one: the others join through it */
    sk->peer = lo->kill_start && n > 1 ? 1 + (int)rng_below(&L->frng, (uint64_t)(n - 1)) : -1;
    sk->delay = lo->kill_start ? 3.0 * rng_uniform(&L->frng) : 0;
    sk->at = -1;
}

/* A step between 10% and 70% of the run (+ first). */
static long long middle_step(local_t *L, int first)
{
    return L->run.steps / 10 + first +
           (long long)rng_below(&L->frng, (uint64_t)(L->run.steps * 6 / 10 + 1));
}

void local_fault_plan(local_t *L)
{
    local_opts_t *lo = &L->lo;
    local_faults_t *f = &L->f;
    int n = L->n;
    /* --kill random: one peer, any, at a random moment of the middle of the run */
    f->rk_peer = lo->kill_random ? (int)rng_below(&L->frng, (uint64_t)n) : -1;
    f->rk_step = lo->kill_random ? middle_step(L, 0) : -1;
    f->rk_delay = rng_uniform(&L->frng), f->rk_at = -1;
    /* --pause: who, at which step (then a second drawn), frozen until when */
    f->pz_peer = lo->pause_peer == -2 ? (int)rng_below(&L->frng, (uint64_t)n) : lo->pause_peer;
    if (f->pz_peer >= n) f->pz_peer = -1;
    f->pz_step = f->pz_peer >= 0 ? middle_step(L, 0) : -1;
    f->pz_delay = f->pz_peer >= 0 ? rng_uniform(&L->frng) : 0, f->pz_at = f->pz_until = -1;
    f->ks_delay = rng_uniform(&L->frng), f->ks_at = -1; /* --kill-stage */
    /* its step, if random: between 10% and 70%; drawn with --kill-stage or without, so that
     * the faults drawn after it fall at the same steps either way (bench learn's full swarm
     * and its row without the lost stage: the same churn kills) */
    long long ks_step = middle_step(L, 1);
    if (lo->kill_stage >= 0 && lo->kill_stage_step < 0) lo->kill_stage_step = (int)ks_step;
    /* --stage-failures: the steps and stages, drawn now, in step order */
    for (int k = 0; k < lo->stage_failures; k++) {
        f->sf_step[k] =
            L->run.steps / 10 + 1 + (int)rng_below(&L->frng, (uint64_t)(L->run.steps * 7 / 10 + 1));
        f->sf_stage[k] = (int)rng_below(&L->frng, (uint64_t)L->S);
    }
    for (int a = 1; a < lo->stage_failures; a++)
        for (int b = a; b > 0 && f->sf_step[b] < f->sf_step[b - 1]; b--) {
            int t = f->sf_step[b];
            f->sf_step[b] = f->sf_step[b - 1], f->sf_step[b - 1] = t;
            t = f->sf_stage[b];
            f->sf_stage[b] = f->sf_stage[b - 1], f->sf_stage[b - 1] = t;
        }
    /* --dead-link: drawn after the others, so that adding it replays them unchanged;
     * between 10% and 40% of the run, which leaves most of it to show whether the peers
     * mended the connection (unmended, every forward over it waits out custody) */
    if (lo->dead_link) {
        f->dl_step = L->run.steps / 10 + (long long)rng_below(&L->frng, (uint64_t)(L->run.steps * 3 / 10 + 1));
        f->dl_delay = rng_uniform(&L->frng);
        for (int k = 0; k < 4; k++) f->dl_pick[k] = rng_uniform(&L->frng);
    }
    f->dl_at = -1;
    /* --churn-at: drawn after the others too; any step but the first and the last (a step
     * a kill may land in, whichever instruction the peer is at) */
    for (int k = 0; k < lo->churn_at; k++) {
        f->ca_step[k] =
            1 + (long long)rng_below(&L->frng, (uint64_t)(L->run.steps > 2 ? L->run.steps - 2 : 1));
        f->ca_delay[k] = rng_uniform(&L->frng);
    }
    for (int a = 1; a < lo->churn_at; a++)
        for (int b = a; b > 0 && f->ca_step[b] < f->ca_step[b - 1]; b--) {
            long long t = f->ca_step[b];
            f->ca_step[b] = f->ca_step[b - 1], f->ca_step[b - 1] = t;
        }
    f->ca_at = -1;
    f->kill_wall = -1;
    f->last_churn = clock_now();
}

void local_fault_start_tick(local_t *L)
{
    local_start_kill_t *sk = &L->f.sk;
    if (sk->peer < 0 || sk->done || sk->peer >= L->n || L->ch[sk->peer].pid <= 0) return;
    double now = clock_now();
    if (sk->at < 0) sk->at = now + sk->delay;
    if (now < sk->at) return;
    sk->done = 1;
    if (L->ch[sk->peer].exited || L->ch[sk->peer].killed) return;
    sigkill(L, sk->peer, -1, "start");
    sk->killed = 1;
    L->f.kills++;
    printf("local: fault: SIGKILL peer %d (stage %d) from outside %.2f s after it started, "
           "while the swarm starts\n",
           sk->peer, L->ch[sk->peer].stage, sk->delay);
    fflush(stdout);
}

void local_fault_on_exit(local_t *L, int i, int st)
{
    local_child_t *c = &L->ch[i];
    if (i != L->lo.kill_peer || c->killed || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL) return;
    c->killed = 1; /* the planned fault: it killed itself holding a microbatch */
    L->f.kill_wall = local_summary_fault_time(L, i);
    note(L, i, c->stage, L->lo.kill_step, L->f.kill_wall, "drill");
    printf("local: fault: SIGKILL peer %d (stage %d) on receiving a microbatch of step %d, "
           "t=%.3f\n",
           i, c->stage, L->lo.kill_step, L->f.kill_wall);
    fflush(stdout);
}

int local_fault_pause_tick(local_t *L)
{
    local_faults_t *f = &L->f;
    if (f->pz_state == 1 && clock_now() >= f->pz_until) {
        f->pz_state = 2;
        if (!L->ch[f->pz_peer].exited) kill(L->ch[f->pz_peer].pid, SIGCONT);
        printf("local: fault: SIGCONT peer %d after %.1f s frozen\n", f->pz_peer, L->lo.pause_s);
        fflush(stdout);
    }
    return f->pz_state == 1;
}

int local_fault_joiner_due(const local_t *L)
{
    return L->f.nrestart > 0 || (L->lo.join_step >= 0 && !L->f.joined);
}

/* Recovery: a victim's pool steps again. */
static void mttr_tick(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    for (int k = 0; k < f->npm; k++)
        if (v->step_per[f->pending[k].stage] > f->pending[k].step) {
            f->mttr[f->nmttr++] = now - f->pending[k].at;
            f->pending[k--] = f->pending[--f->npm];
        }
}

/* The drill's victim kills itself (local_launch.c); should no microbatch of its step
 * reach it, it is killed from here 20 steps later. */
static void drill_late(local_t *L, const local_view_t *v)
{
    int k = L->lo.kill_peer;
    if (k < 0 || k >= L->n || L->ch[k].killed || L->ch[k].exited || v->step0 < L->lo.kill_step + 20)
        return;
    sigkill(L, k, v->step0, "drill_late");
    L->f.kill_wall = clock_wall();
    printf("local: fault: SIGKILL peer %d (stage %d) at step %lld, t=%.3f\n", k, L->ch[k].stage,
           v->step0, L->f.kill_wall);
    fflush(stdout);
}

/* --pause: SIGSTOP at its drawn moment (SIGCONT: local_fault_pause_tick). */
static void pause_tick(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    int p = f->pz_peer;
    if (p < 0 || f->pz_state) return;
    if (f->pz_at < 0 && v->step0 >= f->pz_step) f->pz_at = now + f->pz_delay;
    if (f->pz_at < 0 || now < f->pz_at || L->ch[p].exited || L->ch[p].killed) return;
    kill(L->ch[p].pid, SIGSTOP);
    f->pz_state = 1;
    f->pz_until = now + L->lo.pause_s;
    note(L, p, L->ch[p].stage, v->step0, clock_wall(), "pause");
    printf("local: fault: SIGSTOP peer %d (stage %d%s) from outside at step %lld for %.1f s\n", p,
           L->ch[p].stage, p == 0 ? ", the founding peer" : "", v->step0, L->lo.pause_s);
    fflush(stdout);
}

/* --kill random: its peer at its drawn moment. */
static void random_kill(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    int p = f->rk_peer;
    if (p < 0) return;
    if (f->rk_at < 0 && v->step0 >= f->rk_step) f->rk_at = now + f->rk_delay;
    if (f->rk_at < 0 || now < f->rk_at || L->ch[p].killed || L->ch[p].exited) return;
    sigkill(L, p, v->step0, "random");
    f->kill_wall = clock_wall();
    f->kills++;
    await_step(L, L->ch[p].stage, v->step_per[L->ch[p].stage], now);
    printf("local: fault: SIGKILL peer %d (stage %d%s) from outside at step %lld, t=%.3f\n", p,
           L->ch[p].stage, p == 0 ? ", the founding peer" : "", v->step0, f->kill_wall);
    fflush(stdout);
}

/* SIGKILLs every live peer now serving stage s (as its events say: peers move), each
 * named on stdout; the ones killed go into back[] when not NULL. How many. */
static int kill_stage_peers(local_t *L, int s, long long step, const char *cause, int *back)
{
    int k = 0;
    for (int i = 0; i < L->n; i++) {
        local_child_t *c = &L->ch[i];
        if (c->exited || c->killed) continue;
        c->stage = local_summary_stage(L, i);
        if (c->stage != s) continue;
        sigkill(L, i, step, cause);
        L->f.kills++;
        printf(" peer %d", i);
        if (back) back[k] = i;
        k++;
    }
    return k;
}

/* --kill-stage: every peer of the stage, at a random moment after its step. */
static void kill_stage(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    int s = L->lo.kill_stage;
    if (s < 0 || f->ks_done) return;
    if (f->ks_at < 0 && v->step0 >= L->lo.kill_stage_step) f->ks_at = now + f->ks_delay;
    if (f->ks_at < 0 || now < f->ks_at) return;
    printf("local: fault: SIGKILL every peer of stage %d from outside at step %lld:", s, v->step0);
    kill_stage_peers(L, s, v->step0, "stage", NULL);
    f->kill_wall = clock_wall();
    await_step(L, s, v->step_per[s], now);
    printf(", t=%.3f\n", f->kill_wall);
    fflush(stdout);
    f->ks_done = 1;
}

/* --stage-failures: every peer now serving the drawn stage, then back with its store
 * after the restart time. */
static void stage_failures(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    const local_opts_t *lo = &L->lo;
    while (f->sf_next < lo->stage_failures && v->step0 >= f->sf_step[f->sf_next] &&
           v->step0 < L->run.steps) {
        int s = f->sf_stage[f->sf_next++], back[LOCAL_MAX_PEERS];
        printf("local: fault: stage %d lost at step %lld: SIGKILL", s, v->step0);
        int k = kill_stage_peers(L, s, v->step0, "stage_failure", back);
        for (int j = 0; j < k && lo->stage_restart_s >= 0 && f->nback < LOCAL_MAX_PEERS; j++)
            f->back_at[f->nback] = now + lo->stage_restart_s, f->back_idx[f->nback++] = back[j];
        f->kill_wall = clock_wall();
        await_step(L, s, v->step_per[s], now);
        printf("\n");
        fflush(stdout);
    }
}

/* Whether churn may kill peer i: alive, and not the last live peer of its stage. */
static int churn_may_kill(const local_t *L, int i)
{
    const local_child_t *c = &L->ch[i];
    if (c->exited || c->killed) return 0;
    int alive = 0;
    for (int j = 0; j < L->n; j++)
        alive += !L->ch[j].exited && !L->ch[j].killed && L->ch[j].stage == c->stage;
    return alive >= 2;
}

/* A churn kill: peer i SIGKILLed from outside, its stage's replacement due. */
static void churn_kill(local_t *L, const local_view_t *v, int i, double now)
{
    local_faults_t *f = &L->f;
    const local_child_t *c = &L->ch[i];
    sigkill(L, i, v->step0, "churn");
    f->kills++;
    await_step(L, c->stage, v->step_per[c->stage], now);
    printf("local: churn: SIGKILL peer %d (stage %d) at step %lld\n", i, c->stage, v->step0);
    if (L->lo.churn_restart_s >= 0 && f->nrestart < LOCAL_MAX_PEERS) {
        f->restart_due[f->nrestart] = now + L->lo.churn_restart_s;
        f->restart_stage[f->nrestart++] = c->stage;
    }
    fflush(stdout);
}

/* --churn-at: at each drawn step, after its drawn moment (within a second), a peer drawn
 * among those churn may kill. */
static void churn_at(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    if (f->ca_next >= L->lo.churn_at || v->step0 < f->ca_step[f->ca_next] ||
        v->step0 >= L->run.steps || f->npm >= LOCAL_MAX_PEERS)
        return;
    if (f->ca_at < 0) f->ca_at = now + f->ca_delay[f->ca_next];
    if (now < f->ca_at) return;
    int pick[LOCAL_MAX_PEERS], n = 0;
    for (int i = 0; i < L->n; i++)
        if (churn_may_kill(L, i)) pick[n++] = i;
    if (n) {
        int k = f->nlog;
        churn_kill(L, v, pick[rng_below(&L->frng, (uint64_t)n)], now);
        if (f->nlog > k) f->log[k].drawn = f->ca_step[f->ca_next];
    } else {
        f->ca_none++;
        printf("local: churn: no peer to kill at step %lld (each is the last of its stage)\n",
               v->step0);
    }
    f->ca_next++, f->ca_at = -1;
}

/* --churn: each live peer dies at RATE per minute, never the last of its stage. */
static void churn(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    const local_opts_t *lo = &L->lo;
    if (lo->churn_at) {
        churn_at(L, v, now);
        return;
    }
    if (!(lo->churn_rate > 0) || v->step0 < 1 || v->step0 >= L->run.steps ||
        (lo->churn_kills && f->kills >= lo->churn_kills) || f->npm >= LOCAL_MAX_PEERS)
        return;
    double dt = now - f->last_churn;
    for (int i = 0; i < L->n && (!lo->churn_kills || f->kills < lo->churn_kills); i++) {
        if (L->ch[i].exited || L->ch[i].killed) continue;
        if (rng_uniform(&L->frng) >= lo->churn_rate / 60.0 * dt) continue;
        if (churn_may_kill(L, i)) churn_kill(L, v, i, now);
    }
}

/* --join-at: one more peer at its step; with --revive the killed peer again with its
 * store, once the swarm has noticed it was gone. 0, or -1 when it could not start. */
static int join_tick(local_t *L, const local_view_t *v)
{
    const local_opts_t *lo = &L->lo;
    int kp = lo->kill_peer;
    int revived = lo->revive && kp >= 0 && kp < L->n;
    int wait_gone =
        revived && (!L->ch[kp].killed || v->peers_per[L->ch[kp].stage] >= lo->peers / L->S);
    if (lo->join_step < 0 || L->f.joined || wait_gone || v->step0 < lo->join_step ||
        L->n >= LOCAL_MAX_PEERS)
        return 0;
    int idx = L->n, db_idx = idx, stage = lo->join_stage < L->S ? lo->join_stage : 0;
    if (revived && L->ch[kp].killed) { /* the preempted instance is back, disk and all */
        db_idx = kp;
        stage = L->ch[kp].stage;
    }
    /* --joiners N: a burst, all started within this tick (the killed peer again first) */
    for (int k = 0; k < (revived ? 1 : lo->joiners) && L->n < LOCAL_MAX_PEERS; k++) {
        idx = L->n;
        int rc = local_launch_one(L, stage, k ? idx : db_idx);
        if (rc < 0) return -1;
        if (rc && !k) return 0; /* nobody to join through yet: next tick */
        if (rc) break;
        printf("local: peer %d joins stage %d at step %lld%s\n", idx, stage, v->step0,
               !k && db_idx != idx ? " (the killed peer again, with its store)" : "");
    }
    L->f.joined = 1;
    return 0;
}

/* Live peers at `stage` now (their moves followed), into who; how many. */
static int live_at(local_t *L, int stage, int *who)
{
    int k = 0;
    for (int i = 0; i < L->n; i++)
        if (!L->ch[i].exited && !L->ch[i].killed && local_summary_stage(L, i) == stage)
            who[k++] = i;
    return k;
}

/* --dead-link: at its drawn moment, the connection from one peer to another dies with
 * nothing on either side to say so. A pair of neighbouring stages is drawn, a live peer
 * at each, and the way (forward: the earlier stage's peer's connection to the later's,
 * which carries its activations; back: the other, which carries the gradients); or
 * (pool) a stage and two of its peers, whose connection carries the exchange. local
 * connects to the receiving peer's socket under the sending peer's identity (its routing
 * id): libzmq hands the id over to this connection and leaves the sender's own open with
 * nothing behind it (docs/protocol.md 3.1), so what the sender queues there vanishes, as
 * over a connection a NAT or a middlebox dropped. The peers must mend it (11.3, 10.7 rule
 * 13). The socket closes a second later; its own connection then goes away as usual. */
static void dead_link(local_t *L, const local_view_t *v, double now)
{
    local_faults_t *f = &L->f;
    if (f->dl_sock && now >= f->dl_close) {
        zmq_close(f->dl_sock);
        zmq_ctx_term(f->dl_ctx);
        f->dl_sock = f->dl_ctx = NULL;
    }
    int pool = L->lo.dead_link == 4 || (L->lo.dead_link == 1 && f->dl_pick[3] >= 2.0 / 3);
    if (!L->lo.dead_link || f->dl_done || (L->S < 2 && !pool)) return;
    if (f->dl_at < 0 && v->step0 >= f->dl_step) f->dl_at = now + f->dl_delay;
    if (f->dl_at < 0 || now < f->dl_at) return;
    int a[LOCAL_MAX_PEERS], b[LOCAL_MAX_PEERS];
    int st = (int)(f->dl_pick[0] * (pool ? L->S : L->S - 1)), na = live_at(L, st, a),
        nb = pool ? na : live_at(L, st + 1, b);
    if (pool) memcpy(b, a, sizeof a);
    if (!na || !nb || (pool && na < 2)) return; /* a stage too few hold (a kill): later */
    int xi = (int)(f->dl_pick[1] * na), yi = (int)(f->dl_pick[2] * (pool ? nb - 1 : nb));
    if (pool && yi >= xi) yi++; /* another of the pool */
    int x = a[xi], y = b[yi];
    int back = L->lo.dead_link == 3 || (L->lo.dead_link == 1 && f->dl_pick[3] >= 1.0 / 3);
    int from = back ? y : x, to = back ? x : y;
    char hex[2][65];
    uint8_t id[2][32]; /* the sender's (impersonated), the receiver's (its CURVE key) */
    if (!local_summary_peer_id(L, from, hex[0]) || !local_summary_peer_id(L, to, hex[1])) return;
    for (int j = 0; j < 2; j++)
        for (int k = 0; k < 32; k++) sscanf(hex[j] + 2 * k, "%2hhx", &id[j][k]);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", L->ch[to].port);
    f->dl_done = 1;
    f->dl_ctx = zmq_ctx_new();
    f->dl_sock = f->dl_ctx ? zmq_socket(f->dl_ctx, ZMQ_DEALER) : NULL;
    int zero = 0;
    if (!f->dl_sock || zmq_setsockopt(f->dl_sock, ZMQ_LINGER, &zero, sizeof zero) ||
        zmq_setsockopt(f->dl_sock, ZMQ_ROUTING_ID, id[0], sizeof id[0]) ||
        (L->auth && auth_client(L->auth, f->dl_sock, id[1])) || zmq_connect(f->dl_sock, ep)) {
        printf("local: fault: --dead-link could not connect to %s\n", ep);
        if (f->dl_sock) zmq_close(f->dl_sock);
        if (f->dl_ctx) zmq_ctx_term(f->dl_ctx);
        f->dl_sock = f->dl_ctx = NULL;
        return;
    }
    f->dl_close = now + 1.0;
    int k = f->nlog;
    note(L, from, local_summary_stage(L, from), v->step0, clock_wall(), "dead_link");
    if (f->nlog > k) f->log[k].other = to;
    printf("local: fault: the connection from peer %d (stage %d) to peer %d (stage %d) dies "
           "from outside at step %lld (%s: it carries the %s)\n",
           from, local_summary_stage(L, from), to, local_summary_stage(L, to), v->step0,
           pool ? "pool" : back ? "back" : "forward",
           pool ? "exchange" : back ? "gradients" : "activations");
    fflush(stdout);
}

int local_fault_tick(local_t *L, const local_view_t *v, double now)
{
    mttr_tick(L, v, now);
    dead_link(L, v, now);
    drill_late(L, v);
    pause_tick(L, v, now);
    random_kill(L, v, now);
    kill_stage(L, v, now);
    stage_failures(L, v, now);
    churn(L, v, now);
    L->f.last_churn = now;
    return join_tick(L, v);
}

int local_fault_restart_tick(local_t *L, double now)
{
    local_faults_t *f = &L->f;
    for (int k = 0; k < f->nback; k++) { /* --stage-failures: each with its store */
        int i = f->back_idx[k], idx = L->n;
        if (now < f->back_at[k]) continue;
        int rc = local_launch_one(L, L->ch[i].stage, i);
        if (rc) {
            if (rc < 0) return -1;
            continue;
        }
        printf("local: peer %d (peer %d again, with its store) joins stage %d\n", idx, i,
               L->ch[idx].stage);
        fflush(stdout);
        f->restarts++;
        f->back_at[k] = f->back_at[--f->nback];
        f->back_idx[k--] = f->back_idx[f->nback];
    }
    for (int k = 0; k < f->nrestart; k++) { /* churn: a new process (identity, store) */
        int idx = L->n;
        if (now < f->restart_due[k]) continue;
        int rc = local_launch_one(L, f->restart_stage[k], idx);
        if (rc) {
            if (rc < 0) return -1;
            continue;
        }
        printf("local: churn: peer %d starts for stage %d\n", idx, L->ch[idx].stage);
        fflush(stdout);
        f->restarts++;
        f->restart_due[k] = f->restart_due[--f->nrestart];
        f->restart_stage[k--] = f->restart_stage[f->nrestart];
    }
    return 0;
}
