/* recover.c — a stage with no live peer (DESIGN.md sections 3 and 7; CheckFree and
 * CheckFree+, Blagoev et al.).
 *
 * Detection: every serving peer watches its view; a stage with no member at all (none
 * serving, none joining) for RECOVER_SETTLE_S after the swarm started, and before this
 * peer heard that the run is over (its validation included), is lost. Its microbatches
 * wait meanwhile: the stage before it keeps custody of what it sent and retries once the
 * stage has a peer again (custody.c), so the pipeline pauses and nothing is dropped.
 *
 * Who serves it: one peer moves there (peer_move). Every peer computes the same choice
 * from its view: among serving members whose pool has at least two serving members (a
 * stage is never emptied to fill another), those of the lost stage's neighbouring pools
 * first (for the first and last stage only the neighbour, which holds the copy below),
 * the highest rendezvous hash of (lost stage, member) wins. A peer that joins a stage
 * nobody holds in a started swarm rebuilds it the same way.
 *
 * The state: the mover fetches its neighbours' states (swarm/xfer.c, from their pools)
 * and rebuilds:
 *   middle stage i:  W = (a * W[i+1] + b * W[i-1]) / (a + b) for every block tensor,
 *                    block j from block j of each neighbour (every stage has the same
 *                    number of blocks), a and b the norms of those neighbours' last
 *                    clipped gradients + 1e-4;
 *   stage 0 / S-1:   CheckFree+: the blocks of the only neighbour, copied; the token
 *                    embedding (stage 0) or final norm and LM head (stage S-1) from the
 *                    copy that neighbour's peers keep. A copy holds only those tensors
 *                    (a range of the state, xfer_new_range), not the stage's blocks nor
 *                    its optimizer state; the first is fetched as soon as the peer serves,
 *                    a fresher one at most every COPY_EVERY steps and only while all the
 *                    copies fetched stay within --copy-budget (default 5%) of the
 *                    activation and gradient bytes this peer has sent.
 * Fresh optimizer state, and the stage's learning rate x1.1 (carried in the state, so a
 * later joiner of the stage takes it too). The step is the swarm's highest.
 * With --stage-recovery auto, the peers of stage s also keep a copy of the blocks of a
 * middle stage s + 1 (its whole parameters, no optimizer state), within the same budget
 * (none at once: CheckFree needs none), and a contributor of stage s moves first when s + 1
 * is lost (recover_rules.c): CheckFree's average is judged against that copy on held-out
 * batches and the lower loss kept; a copy taken keeps the run's learning rate. When the
 * peer has its own checkpoint of the stage, state.c restores it instead; a mover judges
 * it the same way (the fresher of it and a copy).
 * Not for: moving (move.c), the transfer itself (swarm/xfer.c). */
#include "common/log.h"
#include "common/rng.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define RECOVER_SETTLE_S 1.0 /* recover.empty: a stage must look empty this long (gossip settles) */
#define JUDGE_MAX_S 60.0  /* recover.judge: the other stages' states must arrive within this */
#define RECOVER_CHUNK_RETRY_S 5.0 /* a neighbour's chunk asked again after this */
#define RECOVER_COPY_WAIT_S 60.0 /* recover.copy: a copy's fetch is dropped and retried after this */
#define COPY_EVERY 25        /* least steps between the neighbours' copies of stage 0 / S-1 */
#define COPY_BUDGET 0.05     /* copies' share of the activation/gradient bytes sent */
#define RECOVER_LR_SCALE 1.1f

/* ---- the layout of any stage's state, from the run's config ---------------------------- */

/* Floats of one block (every block has the same tensors). */
static size_t block_floats(const model_config_t *c)
{
    size_t C = (size_t)c->dim, F = (size_t)c->ffn;
    return 2 * C + 4 * C * C + 3 * F * C;
}

static int nblocks(const model_config_t *c)
{
    return c->n_layers / c->stages;
}

/* Parameters of stage s: [embedding] blocks [final norm, head] (stage.c's table order). */
static size_t stage_floats(const model_config_t *c, int s)
{
    size_t V = (size_t)c->vocab, C = (size_t)c->dim;
    size_t n = (size_t)nblocks(c) * block_floats(c);
    if (s == 0) n += V * C;
    if (s == c->stages - 1) n += C + V * C;
    return n;
}

static size_t blocks_at(const model_config_t *c, int s)
{
    return s == 0 ? (size_t)c->vocab * c->dim : 0;
}

int recover_state_moments(const train_options_t *t)
{
    return t->optimizer == TRAIN_ADAMW || t->demo.update == DEMO_UPDATE_ADAM ? 2 : 1;
}

size_t recover_state_bytes(const train_options_t *t, int s)
{
    size_t floats = (1 + (size_t)recover_state_moments(t)) * stage_floats(&t->cfg, s);
    return floats * sizeof(float) + 8 + RECOVER_TAIL; /* + adam step */
}

/* The tail of a state blob of stage s, after params | moments | adam step: the last
 * clipped gradient norm and the stage's learning-rate scale. */
static void tail_get(const peer_t *p, const uint8_t *blob, int s, float *gnorm, float *lr_scale)
{
    size_t at = recover_state_bytes(&p->def.train, s) - RECOVER_TAIL;
    memcpy(gnorm, blob + at, 4);
    memcpy(lr_scale, blob + at + 4, 4);
}

/* ---- detection and the choice of the mover --------------------------------------------- */

static int pool_serving(peer_t *p, int s)
{
    const msg_member_t *m;
    int n = view_stage(&p->view, s, 1, &m), k = 0;
    for (int i = 0; i < n; i++) k += m[i].state == MEMBER_SERVING;
    return k;
}

/* Serving members of stage s other than this peer: those a fetch can ask. */
static int live_others(peer_t *p, int s)
{
    const msg_member_t *m;
    int n = view_stage(&p->view, s, 1, &m), k = 0;
    for (int i = 0; i < n; i++) k += !peer_is_self(p, m[i].id);
    return k;
}

/* ---- the neighbours' copies of stage 0 and S-1 (CheckFree+) ----------------------------- */

/* A kept copy, p->rec.copy[c]: this header, then the copied floats: stage 0's embedding
 * (V*C), or stage S-1's final norm and head (C + V*C), as the state holds them. */
typedef struct {
    uint64_t fetched; /* bytes fetched for this copy slot so far, this copy included */
    uint64_t count;   /* copies fetched */
} copy_hdr_t;

/* The part of stage t's state (params | m | v | tail) that its copy keeps: the embedding
 * of stage 0, the final norm and head of the last stage, every parameter of a middle
 * stage (its blocks); bytes [*off, *off + *len). */
static void copy_range(const model_config_t *c, int t, size_t *off, size_t *len)
{
    size_t V = (size_t)c->vocab, C = (size_t)c->dim;
    if (t > 0 && t < c->stages - 1) {
        *off = 0;
        *len = stage_floats(c, t) * sizeof(float);
    } else if (t == 0) {
        *off = 0;
        *len = V * C * sizeof(float);
    } else {
        *off = (stage_floats(c, t) - C - V * C) * sizeof(float);
        *len = (C + V * C) * sizeof(float);
    }
}

/* The copied floats of copy slot ci, or NULL when none is kept. */
static const float *copy_floats(const peer_t *p, int ci)
{
    return p->rec.copy[ci] ? (const float *)(const void *)(p->rec.copy[ci] + sizeof(copy_hdr_t)) : NULL;
}

static copy_hdr_t copy_header(const peer_t *p, int ci)
{
    copy_hdr_t h = {0, 0};
    if (p->rec.copy[ci]) memcpy(&h, p->rec.copy[ci], sizeof h);
    return h;
}

/* The share of the activation/gradient bytes sent that copies may take. */
static double copy_budget(const peer_t *p)
{
    double b = p->po.copy_budget;
    return b == 0 ? COPY_BUDGET : b < 0 ? 0 : b;
}

/* Which copy this peer keeps: [0] of stage 0 (kept by stage 1), [1] of stage S-1 (kept
 * by stage S-2), [2] of the middle stage after its own (--stage-recovery auto: it is
 * judged against CheckFree, which needs no copy); the stage of copy c, or -1 when this
 * peer keeps none. */
static int copy_target(const peer_t *p, int c)
{
    if (p->dims.S < 2) return -1;
    if (c == 0) return p->stage == 1 ? 0 : -1;
    if (c == 1) return p->stage == p->dims.S - 2 ? p->dims.S - 1 : -1;
    int t = p->stage + 1;
    return p->po.stage_recovery == PEER_RECOVER_AUTO && t >= 1 && t <= p->dims.S - 2 ? t : -1;
}

/* Bytes fetched for every copy slot so far. */
static uint64_t copies_spent(const peer_t *p)
{
    return copy_header(p, 0).fetched + copy_header(p, 1).fetched + copy_header(p, 2).fetched;
}

static uint64_t copies_count(const peer_t *p)
{
    return copy_header(p, 0).count + copy_header(p, 1).count + copy_header(p, 2).count;
}

static const char *copy_part(int c)
{
    return c == 0 ? "embedding" : c == 1 ? "head" : "blocks";
}

/* Starts (or goes on with) the fetch of bytes [off, off + len) of `stage`'s state into
 * p->aux (len 0: the whole state). 1 when done (the bytes are in p->rec.aux), 0 while under
 * way, negative on error. */
static int aux_fetch_range(peer_t *p, int stage, size_t off, size_t len)
{
    size_t total = recover_state_bytes(&p->def.train, stage);
    if (!len) off = 0, len = total;
    if (p->rec.aux && (p->rec.aux_stage != stage || xfer_offset(p->rec.aux) != off ||
                   xfer_length(p->rec.aux) != len))
        xfer_destroy(&p->rec.aux);
    if (!p->rec.aux) {
        if (!(p->rec.aux = xfer_new_range(stage, total, off, len)))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        p->rec.aux_stage = stage;
        timeout_start(&p->rec.aux_wait, p->now);
    }
    if (xfer_done(p->rec.aux) == 1) return 1;
    const msg_member_t *mem;
    int n = view_stage(&p->view, stage, 1, &mem), k = 0;
    msg_member_t *donors = p->view.scratch;
    for (int i = 0; i < n; i++)
        if (mem[i].state == MEMBER_SERVING && !peer_is_self(p, mem[i].id)) donors[k++] = mem[i];
    if (!k) return 0;
    /* one donor (another after a refusal or silence: xfer moves on): members of a pool
     * may be a step apart, and chunks of two snapshots never make a whole */
    uint64_t me;
    memcpy(&me, p->me.entry.id, 8);
    int pick = view_rendezvous(donors, k, me ^ (uint64_t)xfer_restarts(p->rec.aux));
    xfer_req_t req[8];
    int nr = xfer_next_requests(p->rec.aux, p->now, donors + pick, 1, RECOVER_CHUNK_RETRY_S, req, 8);
    for (int i = 0; i < nr; i++) peer_send(p, req[i].to, &req[i].req, 0, NULL, NULL);
    return 0;
}

static int aux_fetch(peer_t *p, int stage)
{
    return aux_fetch_range(p, stage, 0, 0);
}

void recover_on_state_rep(peer_t *p, const net_ev_t *ev)
{
    if (p->rec.aux && ev->nframes == 1 && ev->msg.stage == p->rec.aux_stage)
        xfer_on_reply(p->rec.aux, &ev->msg, ev->frame[0], ev->frame_len[0], p->now);
}

void recover_on_refusal(peer_t *p, const uint8_t *from)
{
    if (p->rec.aux) xfer_on_refusal(p->rec.aux, from);
}

static int copy_tick(peer_t *p)
{
    if (p->phase != PHASE_SERVING) return 0;
    const model_config_t *cfg = &p->def.train.cfg;
    for (int c = 0; c < 3; c++) {
        int t = copy_target(p, c);
        if (t < 0) continue;
        size_t off, len;
        copy_range(cfg, t, &off, &len);
        int fetching = p->rec.aux && p->rec.aux_stage == t;
        if (!fetching) {
            /* the first copy of an end stage's part at once (its rebuild needs one); then a
             * fresher one after COPY_EVERY steps, only while every copy fetched, this one
             * included, stays within the budget's share of the activation/gradient bytes
             * sent; a middle stage's, within the budget from the first (one kept of
             * another stage, before a move, counts as none) */
            int have = p->rec.copy[c] && p->rec.copy_of[c] == t;
            int64_t at = have ? p->rec.copy_step[c] : p->step - COPY_EVERY;
            if (!recover_copy_due(have || c == 2, p->step, at, COPY_EVERY, copies_spent(p), len,
                                  copy_budget(p), p->stats.act_bytes))
                continue;
        }
        if (p->rec.aux && p->rec.aux_stage != t) return 0; /* one fetch at a time */
        int rc = aux_fetch_range(p, t, off, len);
        if (rc <= 0) {
            if (rc == 0 && p->rec.aux && timeout_fired(&p->rec.aux_wait, p->now)) xfer_destroy(&p->rec.aux); /* retry */
            return rc;
        }
        copy_hdr_t h = copy_header(p, c);
        h.fetched += len;
        h.count++;
        uint8_t *buf = realloc(p->rec.copy[c], sizeof h + len);
        if (!buf) return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        memcpy(buf, &h, sizeof h);
        memcpy(buf + sizeof h, xfer_data(p->rec.aux), len);
        p->rec.copy[c] = buf;
        p->rec.copy_step[c] = xfer_step(p->rec.aux);
        p->rec.copy_of[c] = t;
        uint64_t spent = copies_spent(p);
        fprintf(p->log,
                "copy: stage %d's %s at step %" PRId64 " (%zu bytes), kept for %s; "
                "copies-bytes %" PRIu64 " in %" PRIu64 " copies = %.2f%% of the %" PRIu64
                " activation/gradient bytes sent (budget %.2f%%)\n",
                t, c == 0 ? "embedding" : c == 1 ? "final norm and head" : "blocks",
                p->rec.copy_step[c], len, c == 2 ? "its rebuild" : "CheckFree+", spent,
                copies_count(p),
                p->stats.act_bytes ? 100.0 * (double)spent / (double)p->stats.act_bytes : 0.0,
                (uint64_t)p->stats.act_bytes, 100.0 * copy_budget(p));
        peer_event(p, "copy",
                   "of=%d part=%s copy_step=%" PRId64 " bytes=%zu copies_bytes=%" PRIu64
                   " copies=%" PRIu64 " act_bytes=%" PRIu64 " budget=%.4f",
                   t, copy_part(c), p->rec.copy_step[c], len, spent, copies_count(p),
                   (uint64_t)p->stats.act_bytes, copy_budget(p));
        xfer_destroy(&p->rec.aux);
        return 0;
    }
    return 0;
}

int recover_tick(peer_t *p, int *move_to, char *why, size_t whylen)
{
    *move_to = -1;
    if (p->po.stage_recovery == PEER_RECOVER_CHECKPOINT) return 0; /* no copies, no movers */
    if (p->phase != PHASE_SERVING || !peer_swarm_started(p)) return copy_tick(p);
    /* At the run's end peers leave once stage 0's leader has validated and said so
     * (MSG_STEP_DONE): then a stage is done, not lost. Before that, the run's validation
     * needs every stage: one lost after the last training step is rebuilt as during
     * training. A stage whose peers left is empty only after this peer heard the end too
     * (were that word lost, this peer could rebuild a stage nobody needs before end_tick
     * ends its run). */
    if (p->ending.over) return 0;
    if (!p->rec.empty) {
        if (!(p->rec.empty = calloc((size_t)p->dims.S, sizeof *p->rec.empty)))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        for (int s = 0; s < p->dims.S; s++)
            p->rec.empty[s] = timeout_make("recover.empty", RECOVER_SETTLE_S);
    }
    int handled = 0;
    for (int s = 0; s < p->dims.S; s++) {
        const msg_member_t *m;
        if (s == p->stage || view_stage(&p->view, s, 0, &m) > 0) {
            timeout_stop(&p->rec.empty[s]);
            p->rec.orphan_said &= ~(1ull << (s & 63));
            continue;
        }
        if (!timeout_running(&p->rec.empty[s])) {
            timeout_start(&p->rec.empty[s], p->now);
            fprintf(p->log, "lost-stage: t=%.3f stage %d has no live peer; its microbatches wait "
                    "in custody\n", p->now, s);
            fflush(p->log);
            peer_event(p, "stage_lost", "lost=%d", s);
        }
        /* one lost stage at a time, the lowest first: two movers deciding for two stages
         * at once could both come from one pool and empty it */
        if (handled) continue;
        handled = 1;
        /* Known defect: a partition makes the stage look empty too, and a stage rebuilt on
         * one side meets its own pool, with another state, when it heals (sim mild 3x2
         * seed 9004). Waiting a failure timeout longer hid it, but then the lost peers,
         * back after a few seconds, rebuilt before the neighbour's mover came, without
         * its copy of the first or last stage's embedding or head (bench_checkfree). */
        if (!timeout_fired(&p->rec.empty[s], p->now)) continue;
        int spare = 0; /* pools a member may move from: two or more serving */
        for (int t = 0; t < p->dims.S; t++) spare += t != s && pool_serving(p, t) >= 2;
        if (!spare && !((p->rec.orphan_said >> (s & 63)) & 1)) {
            /* nobody may move to rebuild it: it waits for a joiner, and says so (once) */
            p->rec.orphan_said |= 1ull << (s & 63);
            fprintf(p->log, "lost-stage: stage %d has no peer, and no pool can spare one to "
                            "rebuild it: waiting for a joiner\n", s);
            fflush(p->log);
            peer_event(p, "stage_orphan", "lost=%d", s);
        } else if (spare) {
            p->rec.orphan_said &= ~(1ull << (s & 63));
        }
        int to = recover_mover_target(p->view.m, p->view.n, p->me.entry.id, p->dims.S, p->def.swarm, s);
        if (to < 0 || to == p->stage) continue;
        if (to == s) {
            snprintf(why, whylen, "stage %d had no live peer: rebuilding it", s);
            p->rec.mover = 1;
        } else {
            snprintf(why, whylen, "stage %d had no live peer and stage %d none to spare", s,
                     to);
        }
        *move_to = to;
        return 0;
    }
    return copy_tick(p);
}

/* ---- rebuilding ------------------------------------------------------------------------ */

void recover_init(recover_state_t *r, double peer_timeout_s)
{
    memset(r, 0, sizeof *r);
    r->aux_wait = timeout_make("recover.copy", RECOVER_COPY_WAIT_S);
    r->judge = timeout_make("recover.judge", JUDGE_MAX_S);
    for (int i = 0; i < 2; i++) r->nb_wait[i] = timeout_make("recover.neighbour", 2 * peer_timeout_s);
}

void recover_stage_setup(peer_t *p)
{
    if (!(p->rec.base_lr > 0)) p->rec.base_lr = p->def.train.opt.lr; /* once: a move resets the scale */
    p->rec.lr_scale = 1.0f;
    p->def.train.opt.lr = p->rec.base_lr;
    free(p->rec.empty);
    p->rec.empty = NULL;
}

void recover_free(peer_t *p)
{
    for (int c = 0; c < 3; c++) {
        free(p->rec.copy[c]);
        p->rec.copy[c] = NULL;
    }
    free(p->rec.empty);
    p->rec.empty = NULL;
}

void recover_set_lr_scale(peer_t *p, float scale)
{
    if (isfinite(scale) && scale > 0 && scale < 16) p->rec.lr_scale = scale;
    p->def.train.opt.lr = p->rec.base_lr * p->rec.lr_scale;
}

void recover_mover_done(peer_t *p)
{
    p->rec.mover = 0;
}

void recover_drop_stage(peer_t *p)
{
    xfer_destroy(&p->rec.aux);
}

int recover_possible(const peer_t *p)
{
    return p->dims.S >= 2 && nblocks(&p->def.train.cfg) >= 1;
}

static void free_nb(peer_t *p)
{
    for (int i = 0; i < 2; i++) {
        free(p->rec.nb[i]);
        p->rec.nb[i] = NULL;
    }
    for (int s = 0; p->rec.all && s < p->dims.S; s++) free(p->rec.all[s]);
    free(p->rec.all);
    free(p->rec.cf);
    free(p->rec.ck);
    p->rec.all = NULL;
    p->rec.cf = p->rec.ck = NULL;
}

void recover_abort(peer_t *p)
{
    if (!p->rec.active) return;
    p->rec.active = 0;
    free_nb(p);
    xfer_destroy(&p->rec.aux);
}

/* Builds the stage from the fetched neighbours into host params; 0 or a status. */
static int rebuild(peer_t *p, float *out, char *how, size_t howlen)
{
    const model_config_t *c = &p->def.train.cfg;
    int s = p->stage, S = p->dims.S;
    size_t bf = (size_t)nblocks(c) * block_floats(c);
    size_t V = (size_t)c->vocab, C = (size_t)c->dim;
    float *o = out + blocks_at(c, s);
    if (s > 0 && s < S - 1) {
        const uint8_t *na = p->rec.nb[0], *nb = p->rec.nb[1];
        if (na && nb) {
            const float *wa = (const float *)(const void *)na + blocks_at(c, s - 1);
            const float *wb = (const float *)(const void *)nb + blocks_at(c, s + 1);
            float ga, gb, sa, sb;
            tail_get(p, na, s - 1, &ga, &sa);
            tail_get(p, nb, s + 1, &gb, &sb);
            recover_blend(o, wa, ga, wb, gb, bf);
            snprintf(how, howlen,
                     "CheckFree: weighted average of stages %d (gradient norm %.4g) and %d (%.4g)",
                     s - 1, ga, s + 1, gb);
            peer_event(p, "rebuilt", "method=%s from=%d gnorm_from=%.4g and=%d gnorm_and=%.4g",
                       "checkfree", s - 1, ga, s + 1, gb);
        } else if (na || nb) {
            int from = na ? s - 1 : s + 1;
            memcpy(o, (const float *)(const void *)(na ? na : nb) + blocks_at(c, from),
                   bf * sizeof(float));
            snprintf(how, howlen, "CheckFree with one neighbour: blocks copied from stage %d "
                     "(stage %d had no live peer either)", from, na ? s + 1 : s - 1);
            peer_event(p, "rebuilt", "method=%s from=%d", "checkfree_one", from);
        } else {
            snprintf(how, howlen, "its initial parameters (neither neighbour had a live peer)");
            peer_event(p, "rebuilt", "method=%s", "initial");
        }
        return 0;
    }
    int nbs = s == 0 ? 1 : S - 2;
    int ci = s == 0 ? 0 : 1; /* copy[0] is of stage 0, copy[1] of stage S-1 */
    const float *cp = copy_floats(p, ci); /* the embedding, or the final norm and head */
    if (p->rec.nb[0])
        memcpy(o, (const float *)(const void *)p->rec.nb[0] + blocks_at(c, nbs), bf * sizeof(float));
    if (s == 0) {
        if (cp) memcpy(out, cp, V * C * sizeof(float)); /* else: the initial embedding */
    } else {
        size_t tail = C + V * C, at = bf + blocks_at(c, s);
        if (cp) memcpy(out + at, cp, tail * sizeof(float));
    }
    char blocks[64];
    if (p->rec.nb[0]) snprintf(blocks, sizeof blocks, "copied from stage %d", nbs);
    else /* a copy holds no blocks: they stay as the stage was made */
        snprintf(blocks, sizeof blocks, "initial (the neighbour had no live peer)");
    snprintf(how, howlen, "CheckFree+: blocks %s, %s from %s", blocks,
             s == 0 ? "embedding" : "final norm and head",
             cp ? "the copy kept by that stage" : "the initial parameters (no copy was kept)");
    if (cp)
        snprintf(how + strlen(how), howlen - strlen(how), " at step %" PRId64, p->rec.copy_step[ci]);
    peer_event(p, "rebuilt", "method=%s blocks_from=%d part=%s part_from=%s copy_step=%" PRId64,
               "checkfree_plus", p->rec.nb[0] ? nbs : -1, s == 0 ? "embedding" : "head",
               cp ? "copy" : "initial", cp ? p->rec.copy_step[ci] : -1);
    return 0;
}

/* ---- judging the candidates (--stage-recovery auto) ------------------------------------ */

#define JUDGE_BATCHES 4   /* held-out microbatches each candidate is judged on */

/* This peer's own newest checkpoint of the stage as the second candidate: loaded into
 * the stage (parameters, moments, DeMo momentum), its parameters kept in rec_ck. */
static int own_candidate(peer_t *p, size_t P)
{
    char e2[STATUS_ERR_LEN] = "";
    int64_t ck = -1;
    int rr = p->ps ? peer_store_restore(p->ps, p->held.st, p->held.dopt, &ck, e2) : STATUS_ENOTFOUND;
    if (rr) {
        if (rr != STATUS_ENOTFOUND) log_warn("peer: checkpoint not used: %s", e2);
        return 0;
    }
    if (!(p->rec.ck = malloc(P * sizeof(float))))
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    kern_download(p->k, p->rec.ck, stage_params(p->held.st), P * sizeof(float));
    p->rec.ck_step = ck;
    return 0;
}

/* ... or, when fresher, its copy of the stage's blocks (kept as the stage before it): the
 * stage's whole parameters at the copy's step, with fresh optimizer state if chosen. */
static int copy_candidate(peer_t *p, size_t P)
{
    int s = p->stage;
    if (!p->rec.copy[2] || p->rec.copy_of[2] != s || s < 1 || s > p->dims.S - 2) return 0;
    if (p->rec.ck && p->rec.ck_step >= p->rec.copy_step[2]) return 0;
    size_t off, len;
    copy_range(&p->def.train.cfg, s, &off, &len);
    if (len != P * sizeof(float)) return 0; /* another layout: not this run's */
    if (!p->rec.ck && !(p->rec.ck = malloc(P * sizeof(float))))
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    memcpy(p->rec.ck, copy_floats(p, 2), len);
    p->rec.ck_step = p->rec.copy_step[2];
    p->rec.ck_copy = 1;
    return 0;
}

/* The second candidate in words: "its own checkpoint of step N", "the copy of step N". */
static void ck_words(const peer_t *p, char *buf, size_t len)
{
    if (p->rec.ck_copy)
        snprintf(buf, len, "the copy of its blocks kept by stage %d, of step %" PRId64,
                 p->stage - 1, p->rec.ck_step);
    else
        snprintf(buf, len, "its own checkpoint of step %" PRId64, p->rec.ck_step);
}

/* Stage t's parameters as fetched: a neighbour's, or one fetched for judging. */
static const float *params_of(const peer_t *p, const int want[2], int t)
{
    for (int i = 0; i < 2; i++)
        if (want[i] == t && p->rec.nb[i]) return (const float *)(const void *)p->rec.nb[i];
    return p->rec.all && p->rec.all[t] ? (const float *)(const void *)p->rec.all[t] : NULL;
}

/* The mean loss of the whole model on JUDGE_BATCHES held-out microbatches, with each
 * candidate as this stage: windows between those the run's final validation uses
 * (batches 1, 3, 5, .. of a split twice as fine). losses[0] CheckFree's, [1] the
 * checkpoint's. */
static int judge_losses(peer_t *p, const int want[2], double losses[2])
{
    const model_config_t *c = &p->def.train.cfg;
    int S = p->dims.S, s = p->stage, rc = 0;
    size_t BT = (size_t)c->batch * c->seq, BTC = BT * (size_t)c->dim;
    data_t *own = NULL, *d = p->held.data;
    if (!d && (rc = peer_open_corpus(p, &own))) return rc;
    if (!d) d = own;
    stage_t **st = calloc((size_t)S, sizeof *st);
    int32_t *tok = malloc(BT * sizeof *tok), *tgt = malloc(BT * sizeof *tgt);
    float *x = malloc(BTC * sizeof *x), *y = malloc(BTC * sizeof *y);
    if (!st || !tok || !tgt || !x || !y) rc = status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    for (int t = 0; !rc && t < S; t++) {
        if (!(st[t] = stage_new(c, t, p->k, 1, p->def.train.seed, p->err))) rc = STATUS_EINVAL;
        else if (t != s)
            kern_upload(p->k, stage_params(st[t]), params_of(p, want, t),
                         stage_num_params(st[t]) * sizeof(float));
    }
    int nb = p->def.train.val_batches < JUDGE_BATCHES ? p->def.train.val_batches : JUDGE_BATCHES;
    for (int k = 0; !rc && k < 2; k++) {
        kern_upload(p->k, stage_params(st[s]), k ? p->rec.ck : p->rec.cf,
                     stage_num_params(st[s]) * sizeof(float));
        double sum = 0;
        for (int i = 0; !rc && i < nb; i++) {
            data_val_batch(d, 2 * i + 1, 2 * p->def.train.val_batches, c->batch, tok, tgt);
            float loss = NAN;
            rc = stage_forward(st[0], 0, tok, NULL, NULL, x, NULL, p->err);
            for (int t = 1; !rc && t < S - 1; t++) {
                rc = stage_forward(st[t], 0, NULL, x, NULL, y, NULL, p->err);
                float *z = x;
                x = y, y = z;
            }
            if (!rc) rc = stage_forward(st[S - 1], 0, NULL, x, tgt, NULL, &loss, p->err);
            sum += loss;
        }
        losses[k] = sum / nb;
    }
    for (int t = 0; st && t < S; t++) stage_destroy(&st[t]);
    free(st);
    free(tok);
    free(tgt);
    free(x);
    free(y);
    data_destroy(&own);
    return rc;
}

/* Judges CheckFree against this peer's checkpoint on held-out batches: fetches the
 * states of the stages the rebuild did not (every stage must have a live peer), then
 * takes the lower loss. When it cannot judge, the checkpoint (a state the run really
 * had). 1 when decided (*use_ck), 0 while fetching, negative on error. */
static int judge(peer_t *p, const int want[2], int *use_ck)
{
    int S = p->dims.S;
    const char *why = NULL;
    char whybuf[96];
    if (!p->rec.all && !(p->rec.all = calloc((size_t)S, sizeof *p->rec.all)))
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    for (int t = 0; t < S && !why; t++) {
        if (t == p->stage || params_of(p, want, t)) continue;
        int live = live_others(p, t);
        if (!live || timeout_fired(&p->rec.judge, p->now)) {
            snprintf(whybuf, sizeof whybuf, live ? "stage %d's state did not come in time"
                                                 : "stage %d has no live peer", t);
            why = whybuf;
            break;
        }
        int rc = aux_fetch(p, t);
        if (rc <= 0) return rc;
        size_t len = recover_state_bytes(&p->def.train, t);
        if (!(p->rec.all[t] = malloc(len)))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        memcpy(p->rec.all[t], xfer_data(p->rec.aux), len);
        xfer_destroy(&p->rec.aux);
    }
    double l[2] = {NAN, NAN};
    if (!why && judge_losses(p, want, l)) {
        log_warn("peer: judging the candidates failed: %s", p->err);
        why = "the evaluation failed";
    }
    if (!why && !(isfinite(l[0]) || isfinite(l[1]))) why = "neither loss is finite";
    char cf[200], ck[96];
    snprintf(cf, sizeof cf, "%.199s", p->rec.how);
    ck_words(p, ck, sizeof ck);
    const char *kind = p->rec.ck_copy ? "copy" : "checkpoint";
    if (why) {
        *use_ck = 1;
        snprintf(p->rec.how, sizeof p->rec.how, "%s (not judged against CheckFree: %s)", ck, why);
        peer_event(p, "judged", "chosen=%s against=%s judged=%d ckpt_step=%" PRId64 " why=%s", kind,
                   kind, 0, p->rec.ck_step, why);
    } else {
        *use_ck = !(l[0] <= l[1]); /* a NaN loses */
        char num[64];
        snprintf(num, sizeof num, "held-out loss %.4f against %.4f for ", *use_ck ? l[1] : l[0],
                 *use_ck ? l[0] : l[1]);
        if (*use_ck)
            snprintf(p->rec.how, sizeof p->rec.how, "%s (%sCheckFree)", ck, num);
        else
            snprintf(p->rec.how, sizeof p->rec.how, "%s (%s%s)", cf, num, ck);
        peer_event(p, "judged",
                   "chosen=%s against=%s judged=%d ckpt_step=%" PRId64
                   " chosen_loss=%.4f other_loss=%.4f",
                   *use_ck ? kind : "rebuilt", kind, 1, p->rec.ck_step, *use_ck ? l[1] : l[0],
                   *use_ck ? l[0] : l[1]);
    }
    fprintf(p->log, "lost-stage: candidates for stage %d judged: %s\n", p->stage, p->rec.how);
    return 1;
}

int recover_download_tick(peer_t *p)
{
    const model_config_t *c = &p->def.train.cfg;
    int s = p->stage, S = p->dims.S;
    int want[2] = {s > 0 ? s - 1 : s + 1, s > 0 && s < S - 1 ? s + 1 : -1};
    if (!p->rec.active) {
        p->rec.active = 1;
        timeout_start(&p->rec.judge, p->now);
        free_nb(p);
        p->rec.gone[0] = p->rec.gone[1] = 0;
        timeout_start(&p->rec.nb_wait[0], p->now);
        timeout_start(&p->rec.nb_wait[1], p->now);
        fprintf(p->log, "lost-stage: rebuilding stage %d from stage%s %d%s%.0d\n", s,
                want[1] >= 0 ? "s" : "", want[0], want[1] >= 0 ? " and " : "",
                want[1] >= 0 ? want[1] : 0);
        fflush(p->log);
        peer_event(p, "rebuilding", "from=%d and=%d", want[0], want[1]);
    }
    for (int i = 0; i < 2; i++) {
        if (want[i] < 0 || p->rec.nb[i] || p->rec.gone[i]) continue;
        /* a neighbour with no live peer either: after two failure timeouts without one,
         * the rebuild goes on without it (rebuild() says how) */
        int live = live_others(p, want[i]);
        if (live) timeout_start(&p->rec.nb_wait[i], p->now);
        else if (timeout_fired(&p->rec.nb_wait[i], p->now)) {
            p->rec.gone[i] = 1;
            xfer_destroy(&p->rec.aux);
            continue;
        }
        int rc = aux_fetch(p, want[i]);
        if (rc < 0) return rc;
        if (rc == 0) return 0;
        size_t len = recover_state_bytes(&p->def.train, want[i]);
        if (!(p->rec.nb[i] = malloc(len)))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        memcpy(p->rec.nb[i], xfer_data(p->rec.aux), len);
        p->rec.nb_step[i] = xfer_step(p->rec.aux);
        xfer_destroy(&p->rec.aux);
    }
    size_t P = stage_num_params(p->held.st);
    if (P != stage_floats(c, s))
        return status_set(p->err, STATUS_EINVAL, "recover: stage %d layout differs", s);
    if (!p->rec.cf) { /* the candidates, once the neighbours are here */
        if (!(p->rec.cf = malloc(P * sizeof(float))))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        kern_download(p->k, p->rec.cf, stage_params(p->held.st), P * sizeof(float));
        int rc = rebuild(p, p->rec.cf, p->rec.how, sizeof p->rec.how);
        if (rc) return rc;
        p->rec.ck_copy = 0;
        if (p->po.stage_recovery == PEER_RECOVER_AUTO &&
            ((rc = own_candidate(p, P)) < 0 || (rc = copy_candidate(p, P)) < 0))
            return rc;
    }
    int use_ck = 0;
    if (p->rec.ck) {
        int rc = judge(p, want, &use_ck);
        if (rc <= 0) return rc;
    }
    if (!use_ck || p->rec.ck_copy) { /* parameters only: a checkpoint is in place already */
        kern_upload(p->k, stage_params(p->held.st), use_ck ? p->rec.ck : p->rec.cf, P * sizeof(float));
        /* fresh optimizer state */
        float *z = calloc(P, sizeof(float));
        if (!z) return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        kern_upload(p->k, stage_opt_m(p->held.st), z, P * sizeof(float));
        kern_upload(p->k, stage_opt_v(p->held.st), z, P * sizeof(float));
        *stage_opt_step(p->held.st) = 0;
        if (p->held.dopt) demo_opt_set_momentum(p->held.dopt, z);
        free(z);
    }
    /* the swarm's step: the highest any member gossips, a neighbour's, or this peer's own
     * before it moved (every serving member may have moved or be joining just now) */
    int64_t step = p->step;
    for (int i = 0; i < p->view.n; i++)
        if (p->view.m[i].step > step) step = p->view.m[i].step;
    for (int i = 0; i < 2; i++)
        if (want[i] >= 0 && p->rec.nb[i] && p->rec.nb_step[i] > step) step = p->rec.nb_step[i];
    step_set(p, step < 0 ? 0 : step);
    /* a checkpoint keeps its optimizer state; a copy is the stage as it was (the run's
     * learning rate); a rebuild learns faster for a while */
    const char *by = !use_ck ? "rebuilt" : p->rec.ck_copy ? "copy" : "checkpoint";
    char after[64] = "";
    if (!use_ck) {
        recover_set_lr_scale(p, RECOVER_LR_SCALE);
        snprintf(after, sizeof after, "; fresh optimizer state, learning rate x%.2f",
                 (double)p->rec.lr_scale);
    } else if (p->rec.ck_copy) {
        snprintf(after, sizeof after, "; fresh optimizer state");
    }
    double secs = p->now - p->rec.judge.started_at;
    fprintf(p->log, "recovered: stage %d at step %" PRId64 " in %.2f s by %s%s\n", s, p->step,
            secs, p->rec.how, after);
    fflush(p->log);
    peer_event(p, "recovered_stage", "seconds=%.2f by=%s lr_scale=%.2f how=%s", secs, by,
               use_ck ? 1.0 : (double)p->rec.lr_scale, p->rec.how);
    p->rec.active = 0;
    p->rec.mover = 0;
    free_nb(p);
    return 1;
}
