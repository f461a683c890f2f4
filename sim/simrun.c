/* simrun.c — real peers on the simulated network, with the invariants of simrun.h
 * checked after every event. The peers are driven exactly as peer_run drives one on the
 * ZeroMQ thread: events in, peer_step, wake_at. */
#include "sim/simrun.h"
#include "common/rng.h"
#include "common/status.h"
#include "peer/peer.h"
#include "peer/peer_impl.h" /* the store a sim peer keeps (p->ps), what it agreed on */
#include "peer/peer_store.h"
#include "swarm/path.h"
#include "store/store.h"
#include "swarm/sim.h"

#include <sqlite3.h>
#include <unistd.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define REPAIR_S 20.0 /* virtual seconds after a partition in which replicas may differ */

#define WORK_S 0.002 /* virtual compute time of a peer_step that did work */
#define STRAND_S 60.0 /* how long the end waits for peers that arrived as the run ended */

typedef struct drv drv_t;

/* faults "restart": where the whole-swarm restart stands */
enum { RS_NONE, RS_PLANNED, RS_CRASHING, RS_DOWN, RS_RESUMING, RS_RESUMED };
/* ... and what happened to the stores meanwhile (simrun_result_t.resume_kind) */
enum {
    RS_STORE_KEPT,    /* every store as its peer left it */
    RS_STORE_WIPED,   /* one store lost (a new disk): its peer comes back empty */
    RS_STORE_TORN,    /* every store of one stage lost its newest checkpoint (the last
                       * write never reached the disk): the agreed step is older */
    RS_STORE_STAGE,   /* every store of one stage lost: CheckFree rebuilds it */
    RS_STORE_ALL,     /* every store lost: the swarm starts afresh (step 0) */
};
#define RS_MAX_DISKS 256

typedef struct {
    drv_t *d;
    int index;
    peer_t *p;
    int stage;        /* -1 until the peer has one */
    int serving;      /* its stage's state is held (SERVING) */
    int done;         /* finished the run and left */
    double started_at;
    double serving_at; /* when it first held its stage's state (-1: never) */
    int bootstrap;    /* the node it joined through, -1 for the founder */
    char join[32];
    peer_options_t po;
} dnode_t;

struct drv {
    const simrun_options_t *o;
    simrun_result_t *res;
    sim_t *sim;
    rng_t rng;
    train_options_t run;
    FILE *devnull;
    dnode_t *n;
    int cap;
    /* invariants */
    int failed;
    char why[512];
    int S, M;
    int64_t max_step;     /* highest step applied by anyone */
    int64_t *stage_step;  /* [stage]: highest step a member of the pool applied */
    int64_t swarm_step;   /* the lowest of those: the step every pool has applied */
    double last_progress; /* when swarm_step last rose */
    int seen_all;         /* every stage has had a serving peer */
    int stage_gone;       /* ... and then some stage had none (its state is lost) */
    double covered_since; /* every stage has had a serving peer continuously since */
    int64_t hash_cap;
    uint64_t *hash;    /* [stage * hash_cap + step]: hash_after of the first to apply */
    int **holders;     /* same index: the nodes that applied hash[] (-1 ended) */
    int *nholders;
    uint8_t *hash_set; /* same index: 1 when hash[] holds a value, 2: set within REPAIR_S
                        * of a partition (one side's version: not a reference) */
    uint8_t *lost;     /* [step * M + index]: reported lost */
    int64_t lost_cap;
    /* an update that missed microbatches after a stage was gone: they must be reported
     * lost (hooks.lost comes right after hooks.applied), checked at the next check */
    int64_t pend_step;
    int pend_stage, pend_node;
    uint8_t pend_missing[64]; /* M bits */
    int pending;
    int finished;      /* peers that finished the run */
    int stranded;      /* peers that arrived as the run ended, still waiting at the end */
    /* partitions: both sides go on (a dead peer and an unreachable one look the same), so
     * a pool's replicas may differ while it lasts; the hash vote after it heals must make
     * them equal again: by the end of the run every finisher of a stage holds one hash */
    double parted_at;    /* the last time a partition was seen (-inf: never) */
    double first_done_at; /* when the first peer finished the run (-1: not yet) */
    int diverged;        /* updates that differed within REPAIR_S of a partition */
    uint64_t *final_hash; /* [stage]: the first finisher's hash at the last step */
    uint8_t *final_set;
    double val_loss;
    int crashes;
    /* faults "stage": every peer of one stage crashes at once, at a step and moment drawn
     * from the seed; the swarm must rebuild the stage (recover.c) and finish */
    int lose;            /* 1: planned, 2: done */
    int lose_stage;
    int64_t lose_step;
    double lose_delay, lose_at;
    int rebuilt;         /* the lost stage served again */
    int lose_spare;      /* some other pool had a member to spare when the stage was lost */
    int also_gone;       /* 1 + another stage left with no serving peer alive before the
                          * lost one served again: two stages' state gone, beyond what
                          * rebuilding from neighbours promises (a crash the mover's pool
                          * had not noticed yet when the mover left it) */
    int spare_gone;      /* a crash after the loss, before a mover set off, left no pool
                          * with a member to spare (d_crash) */
    /* rebalancing */
    int *placed; /* [node] stage of the first peers (--placement), -1: in turn */
    double next_move_at;
    int moves_asked;
    /* faults "restart": every peer keeps a store (a "disk", which outlives its peer: a
     * peer restarted by a fault takes its predecessor's), checkpoints every ck_every
     * steps; at a drawn step every peer crashes (some a little later), and after a
     * drawn pause every disk comes back with a peer that resumes (resume.c) */
    int ck_every;          /* 0: no stores (other fault levels) */
    int rs;                /* RS_* */
    rng_t rs_rng;
    int64_t rs_step;
    double rs_delay, rs_at, rs_pause, rs_down_at, rs_up_at;
    int rs_kind, rs_kind_stage;
    double *crash_at;      /* [node] when the planned crash takes it (-1: not planned) */
    int ndisks;
    char (*disk)[600];     /* [disk] its file */
    int *disk_owner;       /* [disk] the node using it, -1 */
    int *node_disk;        /* [node] its disk, -1 */
    int *preset_disk;      /* [node] the disk the driver started it with, -1 */
    int *resuming;         /* [node] started with po.resume, not yet decided */
    int rs_list[RS_MAX_DISKS], nrs; /* the disks of the peers that crashed together */
    int rs_node[RS_MAX_DISKS];      /* ... and those peers' nodes */
    int64_t rs_agreed;     /* what the stores say the swarm must resume from */
    int64_t *rs_first;     /* [stage] the first step a pool applied after the restart */
    uint64_t *pre_hash;    /* [stage * hash_cap + step] before the crash */
    uint8_t *pre_set;
    int rs_decided, replay_same, replay_diff;
};

simrun_options_t simrun_defaults(void)
{
    simrun_options_t o;
    memset(&o, 0, sizeof o);
    o.seed = 1;
    o.peers = 4;
    o.stages = 2;
    o.steps = 6;
    o.microbatches = 4;
    o.faults = "none";
    o.optimizer = -1;
    o.budget_s = 600;
    o.live_s = 60;
    o.early_exchange = 1; /* as a peer's default */
    o.trace_lines = 200;
    return o;
}

int simrun_corpus(const char *dir, char *path, size_t cap, char *err)
{
    if (mkdir(dir, 0700) && errno != EEXIST)
        return status_set(err, STATUS_EIO, "cannot create %s: %s", dir, strerror(errno));
    snprintf(path, cap, "%s/sim-corpus.txt", dir);
    FILE *f = fopen(path, "w");
    if (!f) return status_set(err, STATUS_EIO, "cannot write %s: %s", path, strerror(errno));
    static const char *const words[] = {"the", "swarm", "trains", "a", "model", "in", "pools", "of",
                                  "peers", "and", "every", "step", "counts", "once", "."};
    rng_t r;
    rng_seed(&r, 42);
    for (int i = 0; i < 6000; i++)
        fprintf(f, "%s%s", words[rng_below(&r, sizeof words / sizeof words[0])],
                i % 12 == 11 ? "\n" : " ");
    if (fclose(f)) return status_set(err, STATUS_EIO, "cannot write %s", path);
    return 0;
}

/* ---- failures ------------------------------------------------------------------------- */

static void failf(drv_t *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(drv_t *d, const char *fmt, ...)
{
    if (d->failed) return;
    d->failed = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->why, sizeof d->why, fmt, ap);
    va_end(ap);
    if (d->sim) sim_note(d->sim, "INVARIANT VIOLATED: %s", d->why);
}

static dnode_t *node_of(drv_t *d, const peer_t *p)
{
    for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++)
        if (d->n[i].p == p) return &d->n[i];
    return NULL;
}

/* ---- peer hooks --------------------------------------------------------------------------- */

/* --plant-bug: a pool steps one microbatch short at step 1 (the checker must catch it). */
static int planted_bug(void *ctx, int64_t step, int missing)
{
    (void)ctx;
    return step == 1 && missing == 1;
}

static void on_applied(void *ctx, const peer_t *p, const peer_applied_t *a)
{
    drv_t *d = ctx;
    dnode_t *n = node_of(d, p);
    int idx = n ? n->index : -1;
    /* with SkipPipe paths a pool expects only the microbatches whose path visits it; it
     * must count exactly those (the run's schedule, recomputed here: swarm/path.h) */
    int bits = 0, want = 0, stray = 0;
    double r = train_skip_at(&d->run, a->step);
    for (int i = 0; i < a->M; i++) {
        int c = (a->counted[i >> 3] >> (i & 7)) & 1;
        int e = path_on(path_skip(d->run.seed, a->step, (uint32_t)i, d->M, d->S, r), a->stage);
        if (a->expected && e != ((a->expected[i >> 3] >> (i & 7)) & 1))
            failf(d, "path: node %d stage %d step %lld expects microbatch %d %s the schedule", idx,
                  a->stage, (long long)a->step, i, e ? "against" : "beyond");
        bits += c && e;
        stray += c && !e;
        want += e;
    }
    if (stray)
        failf(d, "path: node %d stage %d step %lld counted %d microbatch(es) whose path skips it",
              idx, a->stage, (long long)a->step, stray);
    sim_note(d->sim, "peer  %d applied stage %d step %lld: %d/%d counted%s%s hash %016llx", idx,
             a->stage, (long long)a->step, bits, want, a->counted_twice ? " TWICE" : "",
             a->following ? " (following)" : "", (unsigned long long)a->hash_after);
    if (a->M != d->M)
        failf(d, "node %d stage %d step %lld: M is %d, the run's is %d", idx, a->stage,
              (long long)a->step, a->M, d->M);
    if (a->counted_twice)
        failf(d, "counted: node %d stage %d step %lld counted %d microbatch(es) twice", idx,
              a->stage, (long long)a->step, a->counted_twice);
    /* Near a partition both sides go on; what one side counted may meet what the other
     * counted again, and a message that counts a microbatch twice is left out: then the
     * missing microbatches must be reported lost, as when a whole stage is gone. */
    int excused = d->stage_gone || sim_now(d->sim) - d->parted_at < REPAIR_S ||
                  d->rs == RS_CRASHING; /* the last peers alive, their swarm crashing */
    if (bits != want && !excused)
        failf(d,
              "counted: node %d stage %d step %lld applied an update counting %d of %d "
              "microbatches with every stage alive",
              idx, a->stage, (long long)a->step, bits, want);
    if (bits != want && excused && a->M <= 512 && !d->pending) {
        d->pending = 1;
        d->pend_step = a->step;
        d->pend_stage = a->stage;
        d->pend_node = idx;
        memset(d->pend_missing, 0, sizeof d->pend_missing);
        for (int i = 0; i < a->M; i++)
            if (!((a->counted[i >> 3] >> (i & 7)) & 1) &&
                path_on(path_skip(d->run.seed, a->step, (uint32_t)i, d->M, d->S, r), a->stage))
                d->pend_missing[i >> 3] |= 1u << (i & 7);
    }
    /* after a whole-swarm restart: never below the step the stores agree on, and each
     * pool goes on exactly from it */
    if (d->rs >= RS_RESUMING && a->stage >= 0 && a->stage < d->S) {
        if (a->step < d->rs_agreed)
            failf(d, "resume: node %d stage %d applied step %lld, below the step %lld the "
                     "swarm resumed from", idx, a->stage, (long long)a->step,
                  (long long)d->rs_agreed);
        if (d->rs_first[a->stage] < 0) {
            d->rs_first[a->stage] = a->step;
            /* unless a partition cut the stage's pool off before its first step, and the
             * other side rebuilt the stage at its neighbours' step (9.6: a lost stage goes
             * on from where the swarm is, not from a checkpoint; seed 30093 of 6x3
             * restart, a partition 1 s after every stage served again) */
            if (a->step != d->rs_agreed && sim_now(d->sim) - d->parted_at >= REPAIR_S)
                failf(d, "resume: stage %d's pool went on with step %lld after the restart; "
                         "the newest step every stage has a checkpoint of is %lld",
                      a->stage, (long long)a->step, (long long)d->rs_agreed);
        }
        if (a->step >= 0 && a->step < d->hash_cap) {
            size_t k = (size_t)a->stage * (size_t)d->hash_cap + (size_t)a->step;
            if (d->pre_set[k]) {
                d->pre_set[k] = 0;
                if (d->pre_hash[k] == a->hash_after) d->replay_same++;
                else d->replay_diff++;
            }
        }
    }
    if (a->stage >= 0 && a->stage < d->S && a->step >= 0 && a->step < d->hash_cap) {
        size_t k = (size_t)a->stage * (size_t)d->hash_cap + (size_t)a->step;
        int near_partition = sim_now(d->sim) - d->parted_at < REPAIR_S;
        /* the pool's version is what its live members hold: a member that applied and
         * then died (its message reached nobody) leaves no version behind, nor one frozen
         * now, which the swarm takes for dead meanwhile (pause 2x2 seed 700316: the stage's
         * one other member crashed, its restart rebuilt the stage, and the frozen member
         * must re-sync to that when it wakes, 10.8), nor one that moved to another stage
         * since (its state of this one is dropped: deadlink 6x3 --steps 14 seed 5232, the
         * one mate's message of step 4 died on a dead link, the mate moved away by
         * rebalancing before the link was mended, and the member left alone re-ran the
         * microbatch the mate had counted, 12.7) */
        int live_holder = 0;
        for (int h = 0; h < d->nholders[k]; h++) {
            int node = d->holders[k][h];
            peer_info_t hi = {.stage = -1}; /* no peer: at no stage */
            if (d->n[node].p) peer_info(d->n[node].p, &hi);
            live_holder |= hi.stage == a->stage && sim_node_alive(d->sim, node) &&
                           !(sim_node_paused_until(d->sim, node) > sim_now(d->sim));
        }
        if (!d->hash_set[k] || (d->hash_set[k] == 2 && !near_partition) ||
            (d->hash[k] != a->hash_after && !live_holder)) {
            d->hash_set[k] = near_partition ? 2 : 1;
            d->hash[k] = a->hash_after;
            d->nholders[k] = 0;
        }
        if (d->hash[k] == a->hash_after) {
            int *hl = realloc(d->holders[k], (size_t)(d->nholders[k] + 1) * sizeof *hl);
            if (hl) {
                d->holders[k] = hl;
                hl[d->nholders[k]++] = idx;
            }
        } else if (d->hash[k] != a->hash_after && !d->stage_gone &&
                   (near_partition || d->hash_set[k] == 2)) {
            d->diverged++;
            sim_note(d->sim, "node %d stage %d step %lld differs from its pool (a partition "
                             "%.1f s ago): the hash vote must repair it",
                     idx, a->stage, (long long)a->step, sim_now(d->sim) - d->parted_at);
        } else if (d->hash[k] != a->hash_after && !d->stage_gone) {
            failf(d, "hash: node %d stage %d step %lld holds %016llx, its pool applied %016llx",
                  idx, a->stage, (long long)a->step, (unsigned long long)a->hash_after,
                  (unsigned long long)d->hash[k]);
        }
    }
    if (a->step > d->max_step) d->max_step = a->step;
    if (a->stage >= 0 && a->stage < d->S && a->step > d->stage_step[a->stage]) {
        d->stage_step[a->stage] = a->step;
        int64_t lo = INT64_MAX;
        for (int s = 0; s < d->S; s++)
            if (d->stage_step[s] < lo) lo = d->stage_step[s];
        if (lo > d->swarm_step) {
            d->swarm_step = lo;
            d->last_progress = sim_now(d->sim);
        }
    }
}

static void on_lost(void *ctx, const peer_t *p, int64_t step, uint32_t index, const char *why)
{
    drv_t *d = ctx;
    dnode_t *n = node_of(d, p);
    sim_note(d->sim, "peer  %d LOST step %lld microbatch %u: %s", n ? n->index : -1,
             (long long)step, index, why);
    if (step >= 0 && step < d->lost_cap && index < (uint32_t)d->M) d->lost[step * d->M + index] = 1;
    if (!d->stage_gone && sim_now(d->sim) - d->parted_at >= REPAIR_S && d->rs != RS_CRASHING)
        failf(d, "lost: node %d lost step %lld microbatch %u (%s) while every stage kept a "
                 "live peer and the network was whole", n ? n->index : -1, (long long)step,
              index, why);
}

/* ---- disks (faults "restart") -------------------------------------------------------------- */


/* The disk a starting node uses: the one the driver chose (a whole-swarm restart), else
 * its predecessor's when a fault restarts a crashed peer outside the restart (a preempted
 * peer comes back with its store), else a new one. */
static int disk_for(drv_t *d, int node, int restart_of, char *err)
{
    int k = d->preset_disk[node];
    if (k < 0 && restart_of >= 0 && restart_of < d->cap && d->rs != RS_DOWN &&
        d->rs != RS_RESUMING) {
        int o = d->node_disk[restart_of];
        if (o >= 0 && d->disk_owner[o] < 0) k = o;
    }
    if (k < 0) {
        if (d->ndisks >= RS_MAX_DISKS)
            return status_set(err, STATUS_EFULL, "simrun: %d disks already", RS_MAX_DISKS);
        k = d->ndisks++;
        snprintf(d->disk[k], sizeof d->disk[k], "%s/seed%llu-disk%d.db", d->o->store_dir,
                 (unsigned long long)d->o->seed, k);
        store_remove(d->disk[k]); /* a leftover of an interrupted run */
    }
    d->node_disk[node] = k;
    d->disk_owner[k] = node;
    return k;
}

/* The stage of a disk's newest checkpoint and the steps of its newest MSG_CKPT_MAX of
 * that stage (what a resuming peer gossips, resume.c); -1 when it holds none. */
static int disk_ckpts(drv_t *d, int k, int64_t steps[MSG_CKPT_MAX])
{
    unsigned char pk[crypto_sign_PUBLICKEYBYTES];
    char err[STATUS_ERR_LEN];
    for (int i = 0; i < MSG_CKPT_MAX; i++) steps[i] = 0;
    peer_store_t *ps = peer_store_open(d->disk[k], pk, err);
    if (!ps) {
        failf(d, "resume: disk %d: %s", k, err);
        return -1;
    }
    int st = peer_store_newest_stage(ps);
    if (st >= 0) peer_store_ckpt_steps(ps, st, steps, MSG_CKPT_MAX);
    peer_store_close(&ps);
    return st;
}

/* The newest checkpoint of `stage` on disk k never reached it (a write torn by the
 * crash, rolled back by SQLite): the checkpoint's rows go, as the rollback would leave
 * them. Written with SQLite itself: the store has no call that deletes a checkpoint. */
static void disk_tear(drv_t *d, int k, int stage)
{
    sqlite3 *db = NULL;
    char sql[512];
    snprintf(sql, sizeof sql,
             "BEGIN;"
             "CREATE TEMP TABLE gone AS SELECT id FROM ckpt WHERE stage = %d ORDER BY id DESC LIMIT 1;"
             "DELETE FROM ckpt_chunk WHERE blob_id IN (SELECT id FROM ckpt_blob WHERE ckpt_id IN gone);"
             "DELETE FROM ckpt_blob WHERE ckpt_id IN gone;"
             "DELETE FROM ckpt WHERE id IN gone;"
             "COMMIT;",
             stage);
    char *msg = NULL;
    if (sqlite3_open_v2(d->disk[k], &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK ||
        sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        failf(d, "resume: tearing disk %d: %s", k, msg ? msg : db ? sqlite3_errmsg(db) : "?");
    sqlite3_free(msg);
    sqlite3_close(db);
}

/* What the stores of the restarted peers say the swarm must resume from: the newest
 * step s > 0 such that every stage some store holds a checkpoint of has a store holding
 * one of s (docs/protocol.md 9.6), 0 when there is none. Computed here from the files,
 * independently of the peers' gossip. */
static int64_t disks_agree(drv_t *d)
{
    int64_t steps[RS_MAX_DISKS][MSG_CKPT_MAX];
    int stage[RS_MAX_DISKS];
    for (int i = 0; i < d->nrs; i++) stage[i] = disk_ckpts(d, d->rs_list[i], steps[i]);
    int64_t best = 0;
    for (int i = 0; i < d->nrs; i++)
        for (int c = 0; c < MSG_CKPT_MAX; c++) {
            int64_t s = steps[i][c];
            if (s <= best) continue;
            int ok = 1;
            for (int st = 0; st < d->S && ok; st++) {
                int any = 0, at = 0;
                for (int j = 0; j < d->nrs; j++) {
                    if (stage[j] != st) continue;
                    any |= steps[j][0] > 0;
                    for (int e = 0; e < MSG_CKPT_MAX; e++) at |= steps[j][e] == s;
                }
                ok = !any || at;
            }
            if (ok) best = s;
        }
    char line[400];
    int w = 0;
    for (int i = 0; i < d->nrs && w < (int)sizeof line - 40; i++)
        w += snprintf(line + w, sizeof line - (size_t)w, " d%d:s%d@%lld,%lld,%lld", d->rs_list[i],
                      stage[i], (long long)steps[i][0], (long long)steps[i][1],
                      (long long)steps[i][2]);
    sim_note(d->sim, "stores%s: resume from step %lld", line, (long long)best);
    return best;
}

/* ---- sim callbacks ------------------------------------------------------------------------ */

static int d_start(void *ctx, int node, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                   const char *join, int restart_of, double now, char *err)
{
    (void)restart_of;
    drv_t *d = ctx;
    if (node >= d->cap) return status_set(err, STATUS_EINVAL, "simrun: node %d of %d", node, d->cap);
    dnode_t *n = &d->n[node];
    memset(n, 0, sizeof *n);
    n->d = d;
    n->index = node;
    n->stage = -1;
    n->bootstrap = join ? atoi(join + 6) : -1;
    peer_options_t po = peer_defaults();
    po.run = d->run;
    po.is_new = !join;
    if (join) {
        snprintf(n->join, sizeof n->join, "%s", join);
        po.join = n->join;
    }
    /* the first peers take the stages in turn, as `local` starts them; joiners and
     * restarts choose (the pool with the least throughput) */
    po.stage = node < d->o->peers ? (d->placed ? d->placed[node] : node % d->S) : -1;
    po.slowdown = sim_node_slow(d->sim, node); /* the measured throughput follows it */
    if (d->o->rebalance_cooldown_s > 0) po.rebalance_cooldown_s = d->o->rebalance_cooldown_s;
    po.early_exchange = d->o->early_exchange;
    if (d->o->copy_budget != 0) po.copy_budget = d->o->copy_budget;
    po.custody_s = 10.0;
    /* a restarting swarm waits for all its peers, as `local` starts it (--wait-peers) */
    po.wait_peers = d->ck_every ? d->o->peers : d->S;
    po.data_path = d->o->data_path;
    po.device = "cpu";
    po.threads = 1;
    po.log = d->o->trace ? d->o->trace : d->devnull;
    po.hooks = (peer_hooks_t){.ctx = d, .applied = on_applied, .lost = on_lost};
    if (d->o->plant_bug) po.faults = (peer_faults_t){.step_short_ok = planted_bug};
    peer_store_t *ps = NULL;
    if (d->ck_every) {
        int k = disk_for(d, node, restart_of, err);
        if (k < 0) return k;
        if (d->preset_disk[node] >= 0) {
            /* restarted with the swarm, as `local --resume` restarts its peers: in half the
             * schedules with the stage it was first given, in the others with none (`peer
             * --resume` alone; its store's newest checkpoint overrides either), and the
             * founder waits for as many as come back */
            int given = (rng_mix(d->o->seed, 0x5354) >> 7) & 1;
            po.stage = given && k < d->o->peers ? (d->placed ? d->placed[k] : k % d->S) : -1;
            po.wait_peers = d->nrs;
        }
        po.db = d->disk[k];
        po.checkpoint_every = d->ck_every;
        /* whoever starts while the swarm is down or restarting restarts with it */
        po.resume = d->rs == RS_DOWN || d->rs == RS_RESUMING;
        unsigned char pk[crypto_sign_PUBLICKEYBYTES];
        if (!(ps = peer_store_open(po.db, pk, err))) return STATUS_EIO;
        peer_store_set_sync(ps, 1); /* checkpoints by step, not by the writer's timing */
        d->resuming[node] = po.resume;
        sim_note(d->sim, "peer  %d keeps disk %d%s", node, k, po.resume ? ", resumes" : "");
    }
    n->po = po;
    n->p = peer_new(&n->po, tp, id, err);
    if (!n->p) {
        peer_store_close(&ps);
        return STATUS_EINVAL;
    }
    n->p->ps = ps; /* as peer_run hands it its store */
    n->started_at = now;
    n->serving_at = -1;
    return 0;
}

/* The node's peer is gone (crashed, finished, gave up): its disk is free again. */
static void release_disk(drv_t *d, int node)
{
    if (!d->ck_every || node >= d->cap || d->node_disk[node] < 0) return;
    if (d->disk_owner[d->node_disk[node]] == node) d->disk_owner[d->node_disk[node]] = -1;
    d->resuming[node] = 0;
}

/* A peer started with po.resume has decided (resume.c cleared it): it must have agreed
 * on the step the stores say (or restored its own checkpoint of the step its serving
 * mates are at, the same). A peer that found a mate serving downloaded instead and
 * resumed at the mate's step: never below the agreed one. */
static void check_decided(drv_t *d, dnode_t *n)
{
    if (!d->ck_every || !d->resuming[n->index] || !n->p || n->p->po.resume) return;
    d->resuming[n->index] = 0;
    int dl = n->p->trans.downloaded;
    d->rs_decided += !dl;
    sim_note(d->sim, "peer  %d %s step %lld (the stores: %lld)", n->index,
             dl ? "resumed from a mate's state at" : "agreed on", (long long)n->p->resume.agreed,
             (long long)d->rs_agreed);
    if (d->rs >= RS_RESUMING && dl && n->p->resume.agreed < d->rs_agreed)
        failf(d, "resume: node %d resumed from a mate's state at step %lld, below the "
                 "agreed step %lld", n->index, (long long)n->p->resume.agreed,
              (long long)d->rs_agreed);
    if (d->rs >= RS_RESUMING && !dl && n->p->resume.agreed != d->rs_agreed)
        failf(d, "resume: node %d agreed on step %lld; the newest step every stage has a "
                 "checkpoint of in the restarted stores is %lld",
              n->index, (long long)n->p->resume.agreed, (long long)d->rs_agreed);
}

/* A fatal status: a failure of the schedule, unless the peer was a joiner whose
 * bootstrap node is gone (a real peer would exit the same way; it then leaves). */
static int peer_failed(drv_t *d, dnode_t *n, int rc, char *err)
{
    if (n->stage < 0 && n->bootstrap >= 0 && !sim_node_alive(d->sim, n->bootstrap)) {
        sim_note(d->sim, "peer  %d gives up joining (its bootstrap %d is gone): %s", n->index,
                 n->bootstrap, peer_error(n->p));
        peer_destroy(&n->p);
        release_disk(d, n->index);
        n->done = 1;
        return 1;
    }
    failf(d, "node %d: fatal %s: %s", n->index, status_str(rc), peer_error(n->p));
    return status_set(err, rc, "%s", d->why);
}

static void refresh(drv_t *d, dnode_t *n)
{
    if (!n->p) return;
    peer_info_t info;
    peer_info(n->p, &info);
    if (info.stage >= 0 && n->stage < 0) sim_note(d->sim, "peer  %d takes stage %d", n->index, info.stage);
    n->stage = info.stage;
    int serving = info.state == MEMBER_SERVING;
    if (serving && !n->serving) sim_note(d->sim, "peer  %d serves stage %d", n->index, n->stage);
    if (serving && n->serving_at < 0) n->serving_at = sim_now(d->sim);
    n->serving = serving; /* a member that re-syncs holds no good state meanwhile */
}

static int finish(drv_t *d, dnode_t *n)
{
    peer_info_t info;
    peer_info(n->p, &info);
    sim_note(d->sim, "peer  %d done: stage %d step %lld val_loss %.4f", n->index, info.stage,
             (long long)info.step, info.val_loss);
    if (isfinite(info.val_loss)) d->val_loss = info.val_loss;
    /* (a peer that arrives after the run ended finds nobody and starts over: not the
     * run's replica) */
    if (d->first_done_at < 0) d->first_done_at = sim_now(d->sim);
    if (info.stage >= 0 && info.stage < d->S && info.step == d->run.steps && !d->stage_gone &&
        sim_now(d->sim) - d->parted_at >= REPAIR_S && n->serving_at >= 0 &&
        n->serving_at < d->first_done_at) {
        if (!d->final_set[info.stage]) {
            d->final_set[info.stage] = 1;
            d->final_hash[info.stage] = info.hash;
        } else if (d->final_hash[info.stage] != info.hash) {
            failf(d, "hash: node %d stage %d ends the run with %016llx, its pool with %016llx "
                     "(replicas never made equal again)",
                  n->index, info.stage, (unsigned long long)info.hash,
                  (unsigned long long)d->final_hash[info.stage]);
        }
    }
    peer_finish(n->p, "run done");
    peer_destroy(&n->p);
    release_disk(d, n->index);
    n->done = 1;
    n->serving = 0;
    d->finished++;
    return 1;
}

/* The node's peer stopped because the run went on, or ended, without it (woken from a
 * pause): not a finisher; it says LEAVE without "the run is over" (2). */
static int left_behind(drv_t *d, dnode_t *n)
{
    peer_info_t info;
    peer_info(n->p, &info);
    sim_note(d->sim, "peer  %d left behind at step %lld", n->index, (long long)info.step);
    peer_finish(n->p, "left behind");
    peer_destroy(&n->p);
    release_disk(d, n->index);
    n->done = 1;
    n->serving = 0;
    return 2;
}

/* The node's peer is done: it finished the run, or was left behind. */
static int done(drv_t *d, dnode_t *n)
{
    return peer_left_behind(n->p) ? left_behind(d, n) : finish(d, n);
}

static int d_event(void *ctx, int node, const net_ev_t *ev, double now, char *err)
{
    drv_t *d = ctx;
    dnode_t *n = &d->n[node];
    if (!n->p) return 0;
    int rc = peer_on_event(n->p, ev, now);
    if (rc) return peer_failed(d, n, rc, err);
    check_decided(d, n);
    /* no refresh here: peer_info hashes the parameters (a fifth of a 70-peer run's time),
     * and the step that follows every batch of events refreshes */
    if (peer_done(n->p)) return done(d, n);
    return 0;
}

static int d_step(void *ctx, int node, double now, double *wake_at, double *work_s, char *err)
{
    drv_t *d = ctx;
    dnode_t *n = &d->n[node];
    *work_s = 0;
    *wake_at = INFINITY;
    if (!n->p) return 0;
    int rc = peer_step(n->p, now, wake_at);
    if (rc) return peer_failed(d, n, rc, err);
    check_decided(d, n);
    if (*wake_at <= now) *work_s = WORK_S;
    refresh(d, n);
    if (peer_done(n->p)) return done(d, n);
    return 0;
}

/* Serving peers of a stage other than `not`. */
static int serving_in(drv_t *d, int stage, int not)
{
    int c = 0;
    for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++)
        c += i != not && d->n[i].p && d->n[i].serving && d->n[i].stage == stage &&
             sim_node_alive(d->sim, i);
    return c;
}

/* Whether a pool other than the lost stage's has a member to spare (two or more serving). */
static int spare_pool(drv_t *d)
{
    for (int t = 0; t < d->S; t++)
        if (t != d->lose_stage && serving_in(d, t, -1) > 1) return 1;
    return 0;
}

static void d_crash(void *ctx, int node, double now)
{
    (void)now;
    drv_t *d = ctx;
    if (node >= d->cap) return;
    dnode_t *n = &d->n[node];
    peer_destroy(&n->p); /* SIGKILL: nothing more from it */
    release_disk(d, node);
    n->serving = 0;
    d->crashes++;
    /* a crash after a whole stage was lost, before anyone set off to rebuild it, that
     * leaves no pool with a member to spare: the stage waits for a joiner (recover.c says
     * so), which this schedule never brings; like a second stage gone, beyond what
     * rebuilding from neighbours promises */
    if (d->lose != 2 || d->rebuilt || d->spare_gone) return;
    for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++)
        if (d->n[i].p && d->n[i].stage == d->lose_stage && sim_node_alive(d->sim, i)) return;
    if (spare_pool(d)) return;
    d->spare_gone = 1;
    sim_note(d->sim, "lose  crash %d leaves no pool a member to spare before the lost stage "
                     "was rebuilt", node);
}

/* "mild" keeps a serving peer in every stage (the promises then say: nothing lost, the
 * run finishes); "heavy" may take a whole stage down. */
static int d_may_fail(void *ctx, int node)
{
    drv_t *d = ctx;
    if (!strcmp(d->o->faults, "heavy")) return 1;
    if (d->rs >= RS_CRASHING && d->rs <= RS_RESUMING && !d->o->restart_wild) return 0;
    if (node >= d->cap || !d->n[node].p) return 1;
    if (d->n[node].stage < 0) return 1;
    if (!d->n[node].serving) return serving_in(d, d->n[node].stage, -1) > 0;
    return serving_in(d, d->n[node].stage, node) > 0;
}

/* moves_rate: now and then a random serving peer is asked to move to a random other
 * stage (never the last serving peer of its stage but under heavy faults). */
static void ask_move(drv_t *d, double now)
{
    if (d->o->moves_rate <= 0 || now < d->next_move_at) return;
    d->next_move_at = now - log(1 - rng_uniform(&d->rng)) / d->o->moves_rate;
    int nn = sim_nodes(d->sim) < d->cap ? sim_nodes(d->sim) : d->cap;
    if (nn < 1 || d->S < 2) return;
    int i = (int)rng_below(&d->rng, (uint64_t)nn);
    dnode_t *n = &d->n[i];
    if (!n->p || !n->serving || !sim_node_alive(d->sim, i)) return;
    if (strcmp(d->o->faults, "heavy") && serving_in(d, n->stage, i) < 1) return;
    int to = (n->stage + 1 + (int)rng_below(&d->rng, (uint64_t)(d->S - 1))) % d->S;
    if (peer_request_move(n->p, to, "simulated move") == 0) {
        d->moves_asked++;
        sim_note(d->sim, "peer  %d asked to move: stage %d -> %d", i, n->stage, to);
    }
}

/* The stores' faults, then every disk of the crashed peers back with a resuming peer,
 * a little apart (the first founds the swarm anew, the others join it). */
static void restart_all(drv_t *d, double now)
{
    int64_t steps[MSG_CKPT_MAX];
    int stage[RS_MAX_DISKS];
    for (int i = 0; i < d->nrs; i++) stage[i] = disk_ckpts(d, d->rs_list[i], steps);
    int x = d->rs_kind_stage;
    switch (d->rs_kind) {
    case RS_STORE_WIPED: {
        int i = (int)rng_below(&d->rs_rng, (uint64_t)d->nrs);
        store_remove(d->disk[d->rs_list[i]]);
        sim_note(d->sim, "disk  %d lost", d->rs_list[i]);
        break;
    }
    case RS_STORE_TORN:
        for (int i = 0; i < d->nrs; i++)
            if (stage[i] == x) {
                disk_tear(d, d->rs_list[i], x);
                sim_note(d->sim, "disk  %d lost its newest checkpoint of stage %d", d->rs_list[i], x);
            }
        break;
    case RS_STORE_STAGE:
    case RS_STORE_ALL:
        for (int i = 0; i < d->nrs; i++)
            if (stage[i] == x || d->rs_kind == RS_STORE_ALL) {
                store_remove(d->disk[d->rs_list[i]]);
                sim_note(d->sim, "disk  %d lost (stage %d)", d->rs_list[i], stage[i]);
            }
        break;
    default:
        break;
    }
    int64_t s = d->rs_agreed = disks_agree(d);
    if (d->o->plant_tear) /* the checker's self-test: the files change behind its back */
        for (int i = 0; i < d->nrs; i++)
            if (disk_ckpts(d, d->rs_list[i], steps) == (x + 1) % d->S)
                disk_tear(d, d->rs_list[i], (x + 1) % d->S);
    /* from here on a new history: steps from s are applied again */
    for (int st = 0; st < d->S; st++) {
        d->rs_first[st] = -1;
        d->stage_step[st] = s - 1;
        for (int64_t k = s > 0 ? s : 0; k < d->hash_cap; k++) {
            size_t i = (size_t)st * (size_t)d->hash_cap + (size_t)k;
            d->pre_set[i] = d->hash_set[i] == 1;
            d->pre_hash[i] = d->hash[i];
            d->hash_set[i] = 0;
            d->nholders[i] = 0;
        }
    }
    for (int64_t k = s > 0 ? s : 0; k < d->lost_cap; k++) memset(d->lost + k * d->M, 0, (size_t)d->M);
    d->pending = 0;
    d->swarm_step = s - 1;
    d->last_progress = now;
    double off[RS_MAX_DISKS];
    int first = 0;
    for (int i = 0; i < d->nrs; i++) {
        off[i] = 3.0 * rng_uniform(&d->rs_rng);
        if (off[i] < off[first]) first = i;
    }
    d->rs = RS_RESUMING;
    d->rs_up_at = now;
    char err[STATUS_ERR_LEN];
    for (int i = 0; i < d->nrs; i++) {
        int k = d->rs_list[i];
        int node = sim_add_restart(d->sim, now + off[i], d->rs_node[i], i == first, err);
        if (node < 0 || node >= d->cap) {
            failf(d, "resume: cannot restart disk %d: %s", k, node < 0 ? err : "too many nodes");
            return;
        }
        d->preset_disk[node] = k;
        sim_note(d->sim, "peer  %d will restart from disk %d at t=%.3f%s", node, k, now + off[i],
                 i == first ? " (founds the swarm again)" : "");
    }
}

/* faults "restart": plans, crashes and restarts the whole swarm (RS_*). */
static void restart_tick(drv_t *d, double now)
{
    int nn = sim_nodes(d->sim) < d->cap ? sim_nodes(d->sim) : d->cap;
    switch (d->rs) {
    case RS_PLANNED: {
        if (d->max_step < d->rs_step) return;
        if (d->rs_at < 0) d->rs_at = now + d->rs_delay;
        if (now < d->rs_at) return;
        if (d->finished || d->max_step >= d->run.steps - 1) {
            d->rs = RS_NONE; /* the run is (nearly) over: pools may be validating or leaving */
            sim_note(d->sim, "restart cancelled: the run reached its last step first");
            return;
        }
        if (!d->o->restart_wild) sim_hold_faults(d->sim, INFINITY);
        /* most crash at once; some a little later; sometimes one much later (its pool and
         * the rest of the swarm see it alone for a while) */
        int late = rng_uniform(&d->rs_rng) < 0.3 ? (int)rng_below(&d->rs_rng, (uint64_t)nn) : -1;
        for (int i = 0; i < nn; i++) {
            double a = rng_uniform(&d->rs_rng) < 0.3 ? 0.5 * rng_uniform(&d->rs_rng) : 0;
            double b = 1 + 5 * rng_uniform(&d->rs_rng);
            d->crash_at[i] = d->n[i].p && sim_node_alive(d->sim, i) ? now + a + (i == late ? b : 0) : -1;
        }
        d->rs = RS_CRASHING;
        sim_note(d->sim, "restart: every peer crashes (step %lld)", (long long)d->max_step);
    }
    /* fall through */
    case RS_CRASHING: {
        int left = 0;
        for (int i = 0; i < nn; i++) {
            if (!d->n[i].p || !sim_node_alive(d->sim, i)) continue;
            if (d->crash_at[i] < 0) d->crash_at[i] = now; /* started meanwhile */
            if (now < d->crash_at[i]) {
                left++;
                continue;
            }
            int k = d->node_disk[i];
            if (k >= 0 && d->nrs < RS_MAX_DISKS) d->rs_node[d->nrs] = i, d->rs_list[d->nrs++] = k;
            sim_kill(d->sim, i);
        }
        if (left) return;
        d->rs = RS_DOWN;
        d->rs_down_at = now;
        sim_note(d->sim, "restart: the swarm is down; %d disk(s) come back in %.3f s", d->nrs,
                 d->rs_pause);
        return;
    }
    case RS_DOWN:
        if (!d->nrs) { /* nobody was left to crash: nothing comes back */
            failf(d, "resume: no peer was alive when the swarm was to crash");
            return;
        }
        /* a partition that began before the crash heals first */
        if (now >= d->rs_down_at + d->rs_pause && !sim_partitioned(d->sim)) restart_all(d, now);
        return;
    case RS_RESUMING:
        for (int st = 0; st < d->S; st++)
            if (!serving_in(d, st, -1)) return;
        d->rs = RS_RESUMED;
        if (!d->o->restart_wild) sim_hold_faults(d->sim, now);
        sim_note(d->sim, "restart: every stage serves again, %.3f s after the restart",
                 now - d->rs_up_at);
        return;
    default:
        return;
    }
}

/* What the node's peer refused so far (sim_app_t.rejected: a corrupted message). */
static uint64_t d_rejected(void *ctx, int node)
{
    drv_t *d = ctx;
    return node < d->cap && d->n[node].p ? d->n[node].p->stats.rejected : 0;
}

static int d_check(void *ctx, double now, char *err)
{
    drv_t *d = ctx;
    ask_move(d, now);
    if (sim_partitioned(d->sim)) d->parted_at = now;
    if (d->rs) restart_tick(d, now);
    /* while the whole swarm is down and restarting, no stage is "lost" */
    int window = d->rs >= RS_CRASHING && d->rs <= RS_RESUMING;
    if (d->lose == 1 && d->max_step >= d->lose_step) {
        if (d->lose_at < 0) d->lose_at = now + d->lose_delay;
        if (now >= d->lose_at && d->finished) {
            /* the run's validation is over and peers leave: nothing is rebuilt (recover.c);
             * up to then, the last training step and the validation included, a stage
             * lost is rebuilt and the validation waits for it */
            d->lose = 0;
            sim_note(d->sim, "lose  cancelled: the run ended first");
        } else if (now >= d->lose_at) {
            d->lose = 2;
            sim_note(d->sim, "lose  every peer of stage %d (step %lld)", d->lose_stage,
                     (long long)d->max_step);
            for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++)
                if (d->n[i].p && sim_node_alive(d->sim, i) && d->n[i].stage == d->lose_stage)
                    sim_crash(d->sim, i);
            d->lose_spare = spare_pool(d);
            if (!d->lose_spare) sim_note(d->sim, "lose  no other pool has a member to spare");
        }
    }
    for (int t = 0; d->lose == 2 && !d->rebuilt && !d->also_gone && t < d->S; t++)
        if (t != d->lose_stage && serving_in(d, t, -1) == 0) {
            d->also_gone = 1 + t;
            sim_note(d->sim, "lose  stage %d has no serving peer either: two stages' state is "
                             "gone", t);
        }
    if (d->lose == 2 && !d->rebuilt && serving_in(d, d->lose_stage, -1) > 0) {
        d->rebuilt = 1;
        sim_note(d->sim, "stage %d serves again", d->lose_stage);
    }
    if (d->pending) {
        d->pending = 0;
        for (int i = 0; i < d->M; i++)
            if (((d->pend_missing[i >> 3] >> (i & 7)) & 1) &&
                !(d->pend_step >= 0 && d->pend_step < d->lost_cap &&
                  d->lost[d->pend_step * d->M + i]))
                failf(d, "counted: node %d stage %d step %lld applied an update without "
                         "microbatch %d and did not report it lost",
                      d->pend_node, d->pend_stage, (long long)d->pend_step, i);
    }
    /* with no fault at all nothing is malformed, forged or out of place: a refusal is a
     * peer counting its mates' ordinary traffic as refused (a mover counted its old pool's
     * PROGRESS, "rejected 2" in status after every move) */
    int calm = !strcmp(d->o->faults, "none");
    for (int i = 0; calm && !d->failed && i < sim_nodes(d->sim); i++)
        if (d_rejected(d, i))
            failf(d, "refused: node %d (stage %d) refused %llu message(s) with no fault drawn",
                  i, d->n[i].stage, (unsigned long long)d_rejected(d, i));
    if (d->failed) return status_set(err, STATUS_ECORRUPT, "%s", d->why);
    int covered = 1;
    for (int s = 0; s < d->S && covered; s++) covered = serving_in(d, s, -1) > 0;
    /* a stage gone in the run's last step (its validation) counts too */
    if (!covered && d->seen_all && !d->stage_gone && !d->finished && !window) {
        d->stage_gone = 1;
        sim_note(d->sim, "a whole stage is gone: its state is lost");
    }
    if (d->swarm_step >= d->run.steps - 1 || d->finished) return 0; /* the run's end: budget */
    if (covered) {
        if (!d->seen_all) d->seen_all = 1, d->covered_since = now;
        if (d->covered_since < 0) d->covered_since = now;
    } else {
        if (d->seen_all && !d->stage_gone && !window) {
            d->stage_gone = 1;
            sim_note(d->sim, "a whole stage is gone: its state is lost");
        }
        d->covered_since = -1;
        return 0;
    }
    if (sim_partitioned(d->sim)) {
        d->parted_at = now;
        return 0;
    }
    double since = d->covered_since;
    if (sim_last_fault(d->sim) > since) since = sim_last_fault(d->sim);
    if (d->last_progress > since) since = d->last_progress;
    if (now - since > d->o->live_s) {
        failf(d, "liveness: every stage has a serving peer and the network is calm since "
                 "t=%.3f, but no pool stepped for %.1f s (every pool applied step %lld; the "
                 "furthest %lld)",
              since, now - since, (long long)d->swarm_step, (long long)d->max_step);
        return status_set(err, STATUS_ETIMEOUT, "%s", d->why);
    }
    return 0;
}

/* Done when every peer finished and left. A peer that never held its stage's state
 * before the first one finished arrived as the swarm was leaving: it finds nobody, starts
 * its stage over and waits forever; so does one cut off by a partition, or by its own
 * connections dying silently, within REPAIR_S of the first finish, on a side without some
 * stage (the other side finishes the run and leaves meanwhile). After STRAND_S it no
 * longer holds the schedule up; it is counted (simrun_result_t.stranded) and noted in the
 * trace, not failed.
 * TODO(lead): should such a peer learn that the run is over (members at the last step
 * in its WELCOME table) and exit? Then count it as a failure here. */

static int d_done(void *ctx)
{
    drv_t *d = ctx;
    if (!d->finished) return 0;
    double now = sim_now(d->sim);
    int stranded = 0;
    for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++) {
        const dnode_t *n = &d->n[i];
        if (!n->p || !sim_node_alive(d->sim, i)) continue;
        /* ... and so does one left on the side of a partition near the run's end that
         * lacked a stage: the others finished meanwhile, their LEAVE never reached it; or
         * one whose own connections died silently near it (deadlink: what it sent was
         * lost, the others took it for dead and finished; seed 920103, 4x2: both of a
         * stage-0 member's connections died 3-5 s before the end) */
        double died = sim_node_link_died_at(d->sim, i);
        int late = d->first_done_at >= 0 &&
                   (n->serving_at < 0 || n->serving_at >= d->first_done_at ||
                    d->first_done_at - d->parted_at < REPAIR_S ||
                    (died > 0 && d->first_done_at - died < REPAIR_S));
        if (!late || now - d->first_done_at < STRAND_S) return 0;
        stranded++;
    }
    if (stranded) sim_note(d->sim, "%d peer(s) that arrived as the run ended still wait", stranded);
    d->stranded = stranded;
    return 1;
}

/* ---- one schedule ------------------------------------------------------------------------ */

static train_options_t tiny_run(const simrun_options_t *o, rng_t *r)
{
    train_options_t run = train_defaults();
    run.cfg.vocab = 256;
    run.cfg.dim = 16;
    run.cfg.n_heads = 2;
    run.cfg.ffn = 32;
    run.cfg.seq = 8;
    run.cfg.batch = 2;
    run.cfg.stages = o->stages;
    run.cfg.n_layers = o->stages;
    run.steps = o->steps;
    run.replicas = 2;
    run.accum = o->microbatches / 2 > 0 ? o->microbatches / 2 : 1;
    run.val_batches = 2;
    run.seed = rng_below(r, 1u << 30); /* the run text takes a modest seed */
    run.opt.warmup = 2;
    run.skip = o->skip;
    run.skip_until = o->skip_until;
    run.swap = o->swap;
    run.overlap = o->overlap;
    run.optimizer = o->optimizer >= 0 ? o->optimizer : (int)rng_below(r, 2);
    if (o->outer > 0) {
        run.optimizer = TRAIN_DEMO, run.demo_local = o->outer;
        /* the outer update drawn: sign, or SparseLoCo's linear one (the sign preset's with
         * local steps, tools/run_opts.c) at its outer rate, in parameter space (the preset's)
         * or after the DCT */
        if (rng_below(r, 2)) {
            run.demo.update = DEMO_LOCAL_UPDATE, run.demo.imode = DEMO_LOCAL_INDEX;
            run.demo.beta = DEMO_LOCAL_BETA, run.outer_lr = DEMO_LOCAL_OUTER_LR;
            run.demo.xform = rng_below(r, 2) ? DEMO_LOCAL_XFORM : DEMO_XFORM_DCT;
        }
    }
    run.device = "cpu";
    run.threads = 1;
    return run;
}

int simrun_one(const simrun_options_t *o, simrun_result_t *res, char *err)
{
    memset(res, 0, sizeof *res);
    res->val_loss = NAN;
    if (o->peers < 1 || o->stages < 1 || o->steps < 1 || o->microbatches < 1)
        return status_set(err, STATUS_EINVAL, "simrun: peers, stages, steps, M must be >= 1");
    drv_t *d = calloc(1, sizeof *d);
    if (!d) return status_set(err, STATUS_ENOMEM, "simrun: out of memory");
    int rc = 0;
    FILE *report = o->report ? o->report : stderr;
    d->o = o;
    d->res = res;
    d->val_loss = NAN;
    d->max_step = -1;
    d->covered_since = -1;
    rng_seed(&d->rng, rng_mix(o->seed, 0x52554e));
    d->run = tiny_run(o, &d->rng);
    d->S = o->stages;
    d->M = d->run.replicas * d->run.accum;
    d->hash_cap = o->steps + 2;
    d->lost_cap = o->steps + 2;
    d->hash = calloc((size_t)(d->S * d->hash_cap), sizeof *d->hash);
    d->hash_set = calloc((size_t)(d->S * d->hash_cap), 1);
    d->holders = calloc((size_t)(d->S * d->hash_cap), sizeof *d->holders);
    d->nholders = calloc((size_t)(d->S * d->hash_cap), sizeof *d->nholders);
    d->final_hash = calloc((size_t)d->S, sizeof *d->final_hash);
    d->final_set = calloc((size_t)d->S, 1);
    d->parted_at = -INFINITY;
    d->first_done_at = -1;
    d->stage_step = malloc((size_t)d->S * sizeof *d->stage_step);
    d->swarm_step = -1;
    for (int s = 0; d->stage_step && s < d->S; s++) d->stage_step[s] = -1;
    d->lost = calloc((size_t)(d->lost_cap * d->M), 1);
    d->next_move_at = 2.0;
    if (o->placement) { /* "N0,N1,...": the first peers, stage by stage */
        d->placed = malloc((size_t)(o->peers > 0 ? o->peers : 1) * sizeof *d->placed);
        int k = 0, s = 0;
        for (const char *a = o->placement; d->placed && *a && s < d->S; s++) {
            char *end;
            long v = strtol(a, &end, 10);
            if (end == a || v < 1) break;
            for (long j = 0; j < v && k < o->peers; j++) d->placed[k++] = s;
            a = *end == ',' ? end + 1 : end;
        }
        if (!d->placed || k != o->peers || s != d->S) {
            rc = status_set(err, STATUS_EINVAL, "simrun: --placement %s does not place %d peers "
                            "on %d stages", o->placement, o->peers, d->S);
            goto done;
        }
    }
    d->devnull = fopen("/dev/null", "w");
    /* fixed: a peer keeps pointers into its node's options (the join endpoint) */
    int restart = !strcmp(o->faults, "restart");
    d->cap = (restart ? 3 : 2) * o->peers + 32;
    d->n = calloc((size_t)d->cap, sizeof *d->n);
    if (restart) {
        if (!o->store_dir) {
            rc = status_set(err, STATUS_EINVAL, "simrun: faults restart needs a store_dir");
            goto done;
        }
        /* drawn from a stream of its own: the plan does not move the other draws */
        rng_seed(&d->rs_rng, rng_mix(o->seed, 0x5245535441ull));
        d->ck_every = 1 + (int)rng_below(&d->rs_rng, 3);
        d->rs = RS_PLANNED;
        /* a step takes some hundredths of a virtual second: the crash comes well before
         * the run's last steps */
        d->rs_step = 2 + (int64_t)rng_below(&d->rs_rng, (uint64_t)(o->steps > 7 ? o->steps - 6 : 1));
        d->rs_delay = 0.1 * rng_uniform(&d->rs_rng);
        d->rs_at = -1;
        d->rs_pause = 1 + 14 * rng_uniform(&d->rs_rng);
        static const int kinds[10] = {RS_STORE_KEPT,  RS_STORE_KEPT,  RS_STORE_WIPED, RS_STORE_WIPED,
                                      RS_STORE_TORN,  RS_STORE_TORN,  RS_STORE_STAGE, RS_STORE_STAGE,
                                      RS_STORE_STAGE, RS_STORE_ALL};
        d->rs_kind = kinds[rng_below(&d->rs_rng, 10)];
        if (d->rs_kind == RS_STORE_STAGE && d->S < 2) d->rs_kind = RS_STORE_TORN;
        d->rs_kind_stage = (int)rng_below(&d->rs_rng, (uint64_t)d->S);
        d->rs_agreed = -1;
        d->crash_at = malloc((size_t)d->cap * sizeof *d->crash_at);
        d->disk = calloc(RS_MAX_DISKS, sizeof *d->disk);
        d->disk_owner = malloc(RS_MAX_DISKS * sizeof *d->disk_owner);
        d->node_disk = malloc((size_t)d->cap * sizeof *d->node_disk);
        d->preset_disk = malloc((size_t)d->cap * sizeof *d->preset_disk);
        d->resuming = calloc((size_t)d->cap, sizeof *d->resuming);
        d->rs_first = malloc((size_t)d->S * sizeof *d->rs_first);
        d->pre_hash = calloc((size_t)(d->S * d->hash_cap), sizeof *d->pre_hash);
        d->pre_set = calloc((size_t)(d->S * d->hash_cap), 1);
        if (!d->crash_at || !d->disk || !d->disk_owner || !d->node_disk || !d->preset_disk ||
            !d->resuming || !d->rs_first || !d->pre_hash || !d->pre_set) {
            rc = status_set(err, STATUS_ENOMEM, "simrun: out of memory");
            goto done;
        }
        for (int i = 0; i < RS_MAX_DISKS; i++) d->disk_owner[i] = -1;
        for (int i = 0; i < d->cap; i++) d->node_disk[i] = d->preset_disk[i] = -1, d->crash_at[i] = -1;
        for (int st = 0; st < d->S; st++) d->rs_first[st] = -1;
    }
    if (!d->n || !d->stage_step || !d->hash || !d->hash_set || !d->lost || !d->devnull ||
        !d->final_hash || !d->final_set || !d->holders || !d->nholders) {
        rc = status_set(err, STATUS_ENOMEM, "simrun: out of memory");
        goto done;
    }
    sim_config_t c = sim_config_defaults();
    c.seed = o->seed;
    c.max_nodes = d->cap;
    c.faults_from = 1.0;
    /* faults while the run trains; then calm so that it can finish */
    c.faults_until = o->budget_s > 0 ? o->budget_s / 3 : 200;
    /* "stage": mild, and one whole stage lost (d_check); "restart": mild, and the whole
     * swarm crashes and restarts from its stores (restart_tick) */
    int lose = !strcmp(o->faults, "stage");
    if ((rc = sim_config_faults(&c, lose || restart ? "mild" : o->faults, err))) goto done;
    if (lose) {
        rng_t lr;
        rng_seed(&lr, rng_mix(o->seed, 0x1057));
        d->lose = 1;
        d->lose_stage = (int)rng_below(&lr, (uint64_t)d->S);
        /* any step, the last and the validation after it included */
        d->lose_step = 1 + (int64_t)rng_below(&lr, (uint64_t)(o->steps > 1 ? o->steps - 1 : 1));
        d->lose_delay = rng_uniform(&lr);
        d->lose_at = -1;
    }
    for (const char *k = o->knobs; k && *k;) {
        char key[64], val[64];
        size_t n = strcspn(k, ",");
        const char *eq = memchr(k, '=', n);
        if (!eq || (size_t)(eq - k) >= sizeof key || n - (size_t)(eq - k) > sizeof val) {
            rc = status_set(err, STATUS_EINVAL, "--set: want key=value,... in '%s'", o->knobs);
            goto done;
        }
        memcpy(key, k, (size_t)(eq - k));
        key[eq - k] = 0;
        memcpy(val, eq + 1, n - (size_t)(eq - k) - 1);
        val[n - (size_t)(eq - k) - 1] = 0;
        if ((rc = sim_config_set(&c, key, val, err))) goto done;
        k += n + (k[n] == ',');
    }
    c.trace = o->trace;
    c.gossip_fanout = o->peers > 16 ? 6 : 0;
    sim_app_t app = {.ctx = d,
                     .start = d_start,
                     .event = d_event,
                     .step = d_step,
                     .crash = d_crash,
                     .may_fail = d_may_fail,
                     .check = d_check,
                     .done = d_done,
                     .rejected = d_rejected};
    if (!(d->sim = sim_new(&c, &app, err))) {
        rc = STATUS_ENOMEM;
        goto done;
    }
    sim_note(d->sim, "schedule seed %llu: %d peers, %d stages, %d steps, M %d, %s, faults %s",
             (unsigned long long)o->seed, o->peers, o->stages, o->steps, d->M,
             d->run.optimizer == TRAIN_DEMO ? "demo" : "adamw", o->faults);
    for (int i = 0; i < o->peers; i++)
        if ((rc = sim_add_node(d->sim, 0.05 * i, err)) < 0) goto done;
    rc = 0;
    char e2[STATUS_ERR_LEN] = "";
    int r = sim_run(d->sim, o->budget_s > 0 ? o->budget_s : 600, e2);
    if (r == 1 && !d->failed) {
        if (d->lose && !d->also_gone && !d->spare_gone)
            failf(d, "liveness: stage %d was lost at step %lld and the swarm %s within %.0f "
                     "virtual seconds (step %lld applied, %d peers finished)",
                  d->lose_stage, (long long)d->lose_step,
                  d->rebuilt ? "rebuilt it but did not finish" : "did not rebuild it",
                  o->budget_s > 0 ? o->budget_s : 600, (long long)d->max_step, d->finished);
        else if (d->stage_gone)
            sim_note(d->sim, "budget reached after a whole stage was lost: not a failure");
        else
            failf(d, "liveness: the run did not finish within %.0f virtual seconds (step %lld "
                     "applied, %d peers finished)",
                  o->budget_s > 0 ? o->budget_s : 600, (long long)d->max_step, d->finished);
    } else if (r < 0 && !d->failed) {
        failf(d, "%s", e2);
    }
    /* without a whole stage lost for good (heavy; or "stage" with no pool to spare a
     * member for it, or a second stage gone before the first was rebuilt: its run may end
     * unvalidated, as it may never end), the run must end validated */
    if (r == 0 && !d->failed && !isfinite(d->val_loss) &&
        !(d->stage_gone && (!d->lose || !d->lose_spare || d->also_gone || d->spare_gone)))
        failf(d, "the run finished without a held-out loss");
    res->failed = d->failed;
    snprintf(res->why, sizeof res->why, "%s", d->why);
    res->virtual_s = sim_now(d->sim);
    res->events = sim_events(d->sim);
    res->trace_hash = sim_trace_hash(d->sim);
    res->nodes = sim_nodes(d->sim);
    res->crashes = d->crashes;
    res->steps_applied = d->max_step;
    res->stage_lost = d->stage_gone;
    res->stranded = d->stranded;
    res->val_loss = d->val_loss;
    res->restarted = d->rs >= RS_RESUMING;
    res->resume_step = d->rs_agreed;
    res->resume_kind = d->rs_kind;
    res->replay_same = d->replay_same;
    res->replay_diff = d->replay_diff;
    res->corrupted = sim_corrupted(d->sim, &res->corrupt_refused);
    memset(res->sent_mean, 0, sizeof res->sent_mean);
    memset(res->sent_max, 0, sizeof res->sent_max);
    res->sent_peers = 0;
    for (int i = 0; i < sim_nodes(d->sim); i++) {
        wire_count_t w;
        double up;
        sim_node_wire(d->sim, i, &w, &up);
        if (up < 1.0) continue; /* a peer up for a moment sends its join, no rate */
        res->sent_peers++;
        for (int k = 0; k < WIRE_KINDS; k++) {
            double rate = (double)w.out[k] / up;
            res->sent_mean[k] += rate;
            if (rate > res->sent_max[k]) res->sent_max[k] = rate;
        }
    }
    for (int k = 0; k < WIRE_KINDS && res->sent_peers; k++) res->sent_mean[k] /= res->sent_peers;
    if (d->failed) {
        fprintf(report, "seed %llu: FAILED: %s\n  last events:\n", (unsigned long long)o->seed,
                d->why);
        sim_dump_trace(d->sim, report, o->trace_lines > 0 ? o->trace_lines : 200);
        fprintf(report, "  peers still running at t=%.3f:\n", sim_now(d->sim));
        for (int i = 0; i < sim_nodes(d->sim) && i < d->cap; i++) {
            if (!d->n[i].p) continue;
            peer_info_t info;
            peer_info(d->n[i].p, &info);
            fprintf(report,
                    "    node %d: stage %d state %d step %lld served %llu retries %llu lost %llu "
                    "slow %.2f%s%s\n",
                    i, info.stage, info.state, (long long)info.step,
                    (unsigned long long)info.served, (unsigned long long)info.retries,
                    (unsigned long long)info.lost, sim_node_slow(d->sim, i),
                    d->n[i].bootstrap >= 0 ? " joiner" : " founder",
                    peer_error(d->n[i].p)[0] ? peer_error(d->n[i].p) : "");
        }
    }
done:
    if (d->n)
        for (int i = 0; i < d->cap; i++) peer_destroy(&d->n[i].p);
    sim_destroy(&d->sim);
    if (d->devnull) fclose(d->devnull);
    free(d->n);
    free(d->hash);
    for (int64_t i = 0; d->holders && i < (int64_t)d->S * d->hash_cap; i++) free(d->holders[i]);
    free(d->holders);
    free(d->nholders);
    free(d->hash_set);
    free(d->final_hash);
    free(d->final_set);
    free(d->lost);
    free(d->stage_step);
    free(d->placed);
    for (int k = 0; d->disk && k < d->ndisks; k++) store_remove(d->disk[k]);
    free(d->disk);
    free(d->disk_owner);
    free(d->node_disk);
    free(d->preset_disk);
    free(d->resuming);
    free(d->crash_at);
    free(d->rs_first);
    free(d->pre_hash);
    free(d->pre_set);
    free(d);
    return rc;
}
