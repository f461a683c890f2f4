/* step.c — this peer's side of its pool's step (docs/protocol.md, "Pool protocol"):
 * counting microbatches exactly once, telling the pool (PROGRESS), sending its exchange
 * message once the pool has counted all M, applying the pool's update when every
 * contributor's message is in, relaying messages a mate missed (EXCH_REQ), and asking
 * stage 0 to re-run microbatches the pool lost with a member (REDO).
 * Not for: the bitmaps and the message store themselves (swarm/pool.c). */
#include "common/log.h"
#include "common/rng.h"
#include "model/optim.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static int pool_members(peer_t *p, const msg_member_t **out)
{
    return view_stage(&p->view, p->stage, 1, out);
}

/* How many steps of exchange messages a follower asks for ahead of its own (ask_steps):
 * up to 4, one when a step's messages weigh as much as the kept window allows (held.keep
 * 8: AdamW's dense sums). */
static int ahead_depth(const peer_t *p)
{
    return p->held.keep / 8 < 1 ? 1 : p->held.keep / 8 > 4 ? 4 : p->held.keep / 8;
}

/* Whom a member sends its exchange messages: every serving member of its pool (followers
 * included) and, where a step's messages are light (ahead_depth 2 or more: DeMo), the
 * members of its stage still downloading, which keep them for when their state is in
 * place. Asked for instead, they came a pool step apart, answered between the donor's own
 * steps: a `small` joiner behind 100 Mbit/s + 50 ms waited 1.5-2 s for the steps its pool
 * made during its download (protocol.md 12.4). */
static int exch_recipients(peer_t *p, const msg_member_t **out)
{
    if (ahead_depth(p) < 2) return pool_members(p, out);
    const msg_member_t *all;
    int n = view_stage(&p->view, p->stage, 0, &all), k = 0;
    msg_member_t *to = p->view.scratch; /* view_stage's own: filtered in place */
    for (int i = 0; i < n; i++)
        if (all[i].state == MEMBER_SERVING || all[i].state == MEMBER_JOINING) to[k++] = all[i];
    *out = to;
    return k;
}

/* The steps past its own (or past its snapshot's, downloading) whose exchange messages a
 * member keeps when they come: the kept window where a step's messages are light, else 4
 * (what a follower asks for ahead, ask_steps). */
static int ahead_window(const peer_t *p)
{
    return ahead_depth(p) >= 2 ? p->held.keep : 4;
}

/* The pool's union of counted microbatches as seen now, into p->contrib.ubuf: what the
 * members that contribute at this step reported, and the held messages. Not a follower's
 * report: one that re-synced since it counted (it lost the hash vote, or woke from a
 * pause) sends no message for those microbatches, and stage 0 then never started them
 * again (sim mild 8x4 --swap 0.5 seed 28: 30 s, then a step with none counted). */
void step_seen(peer_t *p)
{
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
    (void)me;
    pool_union(p->pool, own, n, p->contrib.ubuf);
}

static int contributing(const peer_t *p)
{
    return p->me.entry.state == MEMBER_SERVING && p->me.entry.serving_from <= p->step;
}

/* Local steps (model/outer.h, docs/protocol.md 12.14): whether `step` is an inner step of a
 * round, whose exchange messages carry no body (receipts of what their senders counted)
 * and whose update each member takes alone. Never with AdamW's dense exchange. */
static int inner_step(const peer_t *p, int64_t step)
{
    return p->held.dopt && outer_inner(&p->held.outer, step);
}

int step_counts(peer_t *p, const msg_mb_t *mb, uint8_t flags)
{
    (void)flags;
    if (mb->kind != 0 || mb->step != p->step || !contributing(p)) return 0;
    step_seen(p);
    return !pool_bit(p->contrib.ubuf, (int)mb->index);
}

int step_counted(peer_t *p, const msg_mb_t *mb)
{
    if (mb->kind != 0 || mb->step > p->step) return 0;
    if (mb->step < p->step) return 1;
    step_seen(p);
    return pool_bit(p->contrib.ubuf, (int)mb->index);
}

static void send_progress(peer_t *p)
{
    msg_t m = {
        .type = MSG_PROGRESS, .stage = (int16_t)p->stage, .step = p->step, .count = (uint32_t)p->dims.M};
    if (p->step >= p->def.train.steps) /* the run's end: its hash for the last vote */
        m.hash = p->contrib.my_hash, m.since = p->me.entry.serving_from;
    const msg_member_t *mem;
    int n = pool_members(p, &mem);
    size_t len = pool_bitmap_bytes(p->pool);
    const void *pl[1] = {pool_mine(p->pool)};
    for (int i = 0; i < n; i++) peer_send(p, mem[i].id, &m, 1, pl, &len);
    timeout_start(&p->contrib.progress, p->now);
}

void step_count(peer_t *p, const msg_mb_t *mb)
{
    uint32_t index = mb->index;
    pool_count(p->pool, index);
    if (mb->attempt > 0 && index < (uint32_t)p->dims.M) {
        pool_set_bit(p->contrib.resent_bits, (int)index);
        p->contrib.resent_at = p->now;
    }
    send_progress(p);
}

void step_on_progress(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    /* a live member of the stage the report is for sends it to a member that moved from
     * there before it heard of the move: ignored, not counted as refused (a mover showed
     * "rejected 2" in status after every move) */
    if (m->stage != p->stage) {
        const msg_member_t *from = view_find(&p->view, m->sender);
        if (from && from->stage == m->stage) return;
    }
    if (!p->held.st || m->stage != p->stage || m->count != (uint32_t)p->dims.M || ev->nframes != 1 ||
        ev->frame_len[0] != pool_bitmap_bytes(p->pool)) {
        stats_note_rejected(&p->stats);
        return;
    }
    pool_on_progress(p->pool, m->sender, m->step, ev->frame[0], p->now);
    if (m->hash && m->step == p->def.train.steps && m->step == p->step)
        pool_on_final(p->pool, m->sender, m->hash, m->since);
}

void step_set(peer_t *p, int64_t step)
{
    p->step = step;
}

void step_set_stage_gnorm(peer_t *p, float gnorm)
{
    p->contrib.stage_gnorm = gnorm;
}

int step_keep(const peer_t *p)
{
    size_t msg = p->held.dopt ? demo_opt_msg_size(p->held.dopt)
                              : stage_num_params(p->held.st) * sizeof(float);
    size_t steps = msg ? STEP_KEEP_BYTES / msg : STEP_KEEP_MAX;
    return steps < STEP_KEEP ? STEP_KEEP : steps > STEP_KEEP_MAX ? STEP_KEEP_MAX : (int)steps;
}

int step_open(peer_t *p)
{
    int rc = contrib_alloc(&p->contrib, p->dims.M);
    p->held.keep = step_keep(p);
    if (!(p->pool = pool_new(p->dims.M))) return STATUS_ENOMEM;
    pool_set_path(p->pool, p->def.train.seed, p->dims.S, p->def.train.skip,
                  train_skip_end(&p->def.train), p->stage);
    return rc;
}

pool_t *step_close(peer_t *p)
{
    pool_t *pool = p->pool;
    p->pool = NULL;
    if (p->contrib.ahead) kern_free(p->k, p->contrib.ahead);
    p->contrib.ahead = NULL;
    p->contrib.ahead_step = -1;
    contrib_free(&p->contrib);
    return pool;
}

void step_reset(peer_t *p)
{
    pool_begin(p->pool, p->step, p->held.keep);
    contrib_reset_step(&p->contrib);
    stage_zero_grads(p->held.st);
}

/* Folds the gradient counted since this member's message into its DeMo momentum (D +=
 * lr * g, g the sum over those microbatches, as demo_opt_prepare takes it): a supplement's
 * microbatches are counted at this step and, like any residual, reach the pool through
 * the next steps' messages. */
static int fold_into_momentum(peer_t *p)
{
    size_t P = stage_num_params(p->held.st);
    float *d = malloc(P * sizeof *d), *g = malloc(P * sizeof *g);
    if (!d || !g) {
        free(d), free(g);
        return STATUS_ENOMEM;
    }
    demo_opt_get_momentum(p->held.dopt, d);
    kern_download(p->k, g, stage_grads(p->held.st), P * sizeof *g);
    float a = optim_lr(&p->def.train.opt, p->step);
    for (size_t i = 0; i < P; i++) d[i] += a * g[i];
    demo_opt_set_momentum(p->held.dopt, d);
    free(d), free(g);
    return 0;
}

/* Overlap: the lookahead of this step from its part 0 (body, len; AdamW: count microbatches),
 * for the forwards of the next step it starts before the pool's update (serve.c). Stage 0
 * only; a failure leaves none (those forwards then run on the current parameters). */
static void make_lookahead(peer_t *p, const uint8_t *body, size_t len, uint32_t count)
{
    if (!p->def.train.overlap || p->stage != 0 || p->dims.S < 2 ||
        p->step + 1 >= p->def.train.steps)
        return;
    size_t P = stage_num_params(p->held.st);
    if (!p->contrib.ahead && !(p->contrib.ahead = kern_alloc(p->k, 2 * P * sizeof(float)))) return;
    update_batch_t b = {.step = p->step, .bodies = &body, .lens = &len, .n = 1,
                        .counted = count ? count : 1};
    char err[STATUS_ERR_LEN];
    p->contrib.ahead_step = -1;
    if (update_predict(&p->held.update, &b, p->contrib.ahead, err)) {
        log_warn("peer: step %" PRId64 ": no lookahead for the next step's forwards: %s", p->step, err);
        return;
    }
    p->contrib.ahead_step = p->step;
}

float *step_lookahead(peer_t *p, float **save)
{
    if (!p->contrib.ahead || p->contrib.ahead_step != p->step) return NULL;
    *save = p->contrib.ahead + stage_num_params(p->held.st);
    return p->contrib.ahead;
}

/* Local steps, the round's last step: this member's local step on what it counted (count
 * microbatches), then its change over the round (delta = p_sync - p) through DeMo with the
 * outer schedule (model/outer.h) into msg. */
static int round_message(peer_t *p, uint32_t count, uint8_t *msg)
{
    outer_t *o = &p->held.outer;
    outer_local_step(o, &p->def.train.opt, p->step, count, &p->rec.last_gnorm);
    outer_delta(o);
    return demo_opt_prepare(p->held.dopt, outer_schedule(o, &p->def.train.opt), p->step, 1.0f,
                            msg, NULL, p->err);
}

/* Microbatches a message counted. */
static uint32_t counted_by(const peer_t *p, const pool_msg_t *e)
{
    uint32_t c = 0;
    for (int b = 0; b < p->dims.M; b++) c += (uint32_t)pool_bit(e->counted, b);
    return c;
}

/* Adds id to the list (ids, *n of cap) unless it is there. */
static void add_id(uint8_t (*ids)[MSG_ID_LEN], int *n, int cap, const uint8_t *id)
{
    for (int i = 0; i < *n; i++)
        if (!memcmp(ids[i], id, MSG_ID_LEN)) return;
    if (*n < cap) memcpy(ids[(*n)++], id, MSG_ID_LEN);
}

/* Part 0's claims (docs/protocol.md 5.10, 12.4): the exchange members this member expects,
 * which a mate that did not know of one of them waits for too: its view's owners of the
 * step, and the origin of every part 0 of the step it holds that counts a microbatch. The
 * second covers a member that left the pool after its message reached this one (moved to
 * another stage, or died): gone from every view, it was named by no part's claims, and a
 * newcomer following the pool applied the step without its message, which its mates took
 * (sim heavy 8x4 seed 20182: another hash). */
static int make_claims(peer_t *p, uint8_t **out, size_t *len)
{
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
    int nheld = pool_messages(p->pool, p->step, NULL, 0), cap = n + nheld, k = 0;
    const pool_msg_t **held = malloc((size_t)(nheld ? nheld : 1) * sizeof *held);
    uint8_t(*ids)[MSG_ID_LEN] = malloc((size_t)(cap ? cap : 1) * MSG_ID_LEN);
    if (!held || !ids) {
        free(held), free(ids);
        return STATUS_ENOMEM;
    }
    pool_messages(p->pool, p->step, held, nheld);
    for (int i = 0; i < n; i++) add_id(ids, &k, cap, own[i].id);
    for (int i = 0; i < nheld && k < MSG_MEMBERS_MAX; i++)
        if (held[i]->part == 0 && counted_by(p, held[i]) > 0) add_id(ids, &k, cap, held[i]->origin);
    free(held);
    *out = (uint8_t *)ids, *len = (size_t)k * MSG_ID_LEN;
    return 0;
}

/* This member's message of this step, part `part`: with part 0 its DeMo stage message or
 * its dense gradient sum (AdamW: the pool averages exactly); with part > 0 a supplement
 * for the microbatches it counted since (a member died after the pool had counted all M,
 * and they were run again): their dense gradient sum, or for DeMo no body (the gradient
 * went into the momentum). The counted bitmap names only the new microbatches, so the
 * parts of a member never overlap. Stored in the pool like anyone's, to be relayed. */
static int make_exchange(peer_t *p, int part)
{
    /* Parts of its own id's message of this step that it holds and did not make in this
     * run of the step are its own earlier parts: made before a re-sync, or by the process
     * that ran under its id before a crash and a restart (their counted bits are in its
     * union, so it never counts them again). Its parts are numbered on from them: a part
     * under a number already held is dropped by every holder (pool_store keeps the first),
     * and the microbatches it counted were lost (sim pause 6x3 seed 700264 with
     * swim_every=4: a restart under a dead contributor's id took over its step, and its
     * part 0 met the dead one's everywhere; 2 of 4 applied after the 30 s deadline). */
    int held = pool_first_missing(p->pool, p->me.entry.id, p->step);
    if (held > part) part = held;
    size_t nb = pool_bitmap_bytes(p->pool);
    uint8_t *fresh = malloc(nb), *msg = NULL;
    if (!fresh) return STATUS_ENOMEM;
    uint32_t count = 0;
    for (size_t i = 0; i < nb; i++) fresh[i] = (uint8_t)(pool_mine(p->pool)[i] & ~p->contrib.sent_bits[i]);
    for (int i = 0; i < p->dims.M; i++) count += (uint32_t)pool_bit(fresh, i);
    if (part > 0 && count == 0) { /* a supplement of nothing: the earlier parts say it all */
        free(fresh);
        return 0;
    }
    size_t len = 0;
    int rc = 0, inner = inner_step(p, p->step);
    if (inner) {
        /* an inner step's part or supplement: no body; the gradient of what it counts stays
         * here for its local step when the pool is complete (apply) */
    } else if (p->held.dopt && part == 0) {
        len = demo_opt_msg_size(p->held.dopt);
        if (!(msg = malloc(len))) rc = STATUS_ENOMEM;
        float scale = 1.0f / (float)(count ? count : 1);
        if (!rc && outer_on(&p->held.outer))
            rc = round_message(p, count, msg);
        else if (!rc)
            rc = demo_opt_prepare(p->held.dopt, &p->def.train.opt, p->step, scale, msg, &p->rec.last_gnorm, p->err);
    } else if (p->held.dopt) {
        rc = fold_into_momentum(p);
    } else {
        len = stage_num_params(p->held.st) * sizeof(float);
        if (!(msg = malloc(len))) rc = STATUS_ENOMEM;
        if (!rc) kern_download(p->k, msg, stage_grads(p->held.st), len);
    }
    uint8_t *claims = NULL;
    size_t claims_len = 0;
    if (rc == 0 && part == 0) rc = make_claims(p, &claims, &claims_len);
    if (rc == 0) {
        msg_t m = {.type = MSG_EXCH,
                   .flags = (uint8_t)part,
                   .stage = (int16_t)p->stage,
                   .step = p->step,
                   .count = count,
                   .hash = p->contrib.my_hash,
                   .since = p->me.entry.serving_from};
        memcpy(m.origin, p->me.entry.id, MSG_ID_LEN);
        memcpy(m.sender, p->me.entry.id, MSG_ID_LEN);
        const uint8_t *body = msg ? msg : (const uint8_t *)"";
        const uint8_t *cl = claims ? claims : (const uint8_t *)"";
        rc = pool_store(p->pool, &m, body, len, fresh, nb, cl, claims_len);
        const msg_member_t *mem;
        int n = exch_recipients(p, &mem);
        /* fault injection: mates may get an altered copy; this peer applies its own */
        if (p->po.faults.exchange_out && p->held.dopt && part == 0 && msg)
            p->po.faults.exchange_out(p->po.faults.ctx, p->held.dopt, p->step, msg, len);
        const void *pl[3] = {body, fresh, cl};
        size_t lens[3] = {len, nb, claims_len};
        for (int i = 0; rc == 0 && i < n; i++) peer_send(p, mem[i].id, &m, 3, pl, lens);
        if (rc == 0 && part == 0) make_lookahead(p, body, len, count);
        for (size_t i = 0; i < nb; i++) p->contrib.sent_bits[i] |= fresh[i];
        if (!inner) stage_zero_grads(p->held.st); /* what is counted from now on goes into a supplement */
    }
    free(msg);
    free(fresh);
    free(claims);
    return rc;
}

/* A dense AdamW message: the right size, every value finite. */
static int dense_ok(const peer_t *p, const pool_msg_t *e)
{
    size_t P = stage_num_params(p->held.st);
    if (e->len != P * sizeof(float)) return 0;
    const float *g = (const float *)(const void *)e->data;
    for (size_t i = 0; i < P; i++)
        if (!isfinite(g[i])) return 0;
    return 1;
}

static void log_step(peer_t *p, float gnorm, double now)
{
    if (p->stage == 0 && p->contrib.loss_n) {
        int64_t s = p->step;
        double tok = (double)p->dims.BT * p->dims.M;
        if (s % p->po.log_every == 0 || s == p->def.train.steps - 1)
            fprintf(p->log, "step %" PRId64 " loss %.6f lr %.3e gnorm %.3f tok/s %.0f\n", s,
                    p->contrib.loss_sum / p->contrib.loss_n, optim_lr(&p->def.train.opt, s), gnorm,
                    p->contrib.step_t0 > 0 && now > p->contrib.step_t0 ? tok / (now - p->contrib.step_t0) : 0.0);
        fflush(p->log);
        peer_self_loss(p, (float)(p->contrib.loss_sum / p->contrib.loss_n));
    } else if (p->stage == p->dims.S - 1) {
        peer_self_loss(p, p->held.last_loss);
    }
    /* every step, in the events file only (the store keeps a metrics row per step); with
     * where its time went: since the step began here, its first microbatch, stage 0's own
     * share counted, the step complete (null: not seen; docs/events.md) */
    double t0 = p->contrib.step_t0;
#define SINCE(at) (t0 > 0 && (at) > 0 ? (at) - t0 : NAN)
    peer_event_to(p->po.events, NULL, "step", p->stage, p->step,
                  "loss=%.6f lr=%.3e gnorm=%.3f dur_s=%.4f first_s=%.4f share_s=%.4f "
                  "complete_s=%.4f",
                  p->stage == 0 && p->contrib.loss_n ? p->contrib.loss_sum / p->contrib.loss_n : NAN,
                  optim_lr(&p->def.train.opt, p->step), gnorm, SINCE(now), SINCE(p->contrib.first_at),
                  SINCE(p->contrib.share_at), SINCE(p->contrib.complete_at));
#undef SINCE
}


static int msg_order(const void *a, const void *b)
{
    const pool_msg_t *x = *(const pool_msg_t *const *)a, *y = *(const pool_msg_t *const *)b;
    int c = memcmp(x->origin, y->origin, MSG_ID_LEN);
    return c ? c : (x->part > y->part) - (x->part < y->part);
}

/* Applies the pool's update for this step from msgs[0, n) and moves to the next step.
 * The messages are taken in one order on every member (origin, then part): float sums
 * in arrival order would differ in their last bits from member to member. */
/* The pool's messages of the step that enter its update (the pool's rules, the same on
 * every member that holds the same messages): DeMo bodies whose norm is far above the
 * pool's recent updates are left out (the update guard), the hash vote may find this
 * replica diverged (STATUS_ECORRUPT: the caller re-syncs), and a message that counts a
 * microbatch already counted is left out whole. */
typedef struct {
    const uint8_t **bodies; /* the bodies that enter the update */
    size_t *lens;
    int m;
    uint8_t *counted; /* the microbatches they count (M bits) */
    uint32_t *weights; /* DeMo: what each body weighs, 1 + the microbatches its part 0 counts */
    uint32_t total;
    int twice;        /* stays 0: an overlapping message is left out (the simulator checks) */
} chosen_t;

static void chosen_free(chosen_t *c)
{
    free(c->bodies), free(c->lens), free(c->counted), free(c->weights);
}

/* Whether a taken part 0 that counts a microbatch names `origin` among its exchange
 * members (its claims). */
static int named_by_counting(const peer_t *p, const pool_msg_t **msgs, int n, const int *take,
                             const int *out, const uint8_t *origin)
{
    for (int i = 0; i < n; i++) {
        if (out[i] || !take[i] || msgs[i]->part != 0 || counted_by(p, msgs[i]) == 0) continue;
        for (int j = 0; j < msgs[i]->nclaims; j++)
            if (!memcmp(msgs[i]->claims[j], origin, MSG_ID_LEN)) return 1;
    }
    return 0;
}

static int choose_messages(peer_t *p, const pool_msg_t **msgs, int n, chosen_t *c)
{
    qsort(msgs, (size_t)n, sizeof *msgs, msg_order);
    memset(c, 0, sizeof *c);
    uint32_t total = 0;
    int m = 0, nv = 0;
    size_t nb = pool_bitmap_bytes(p->pool);
    uint8_t *counted = calloc(nb, 1);
    const uint8_t **bodies = malloc((size_t)(n ? n : 1) * sizeof *bodies);
    size_t *lens = malloc((size_t)(n ? n : 1) * sizeof *lens);
    uint32_t *weights = malloc((size_t)(n ? n : 1) * sizeof *weights);
    const pool_msg_t **voters = malloc((size_t)(n ? n : 1) * sizeof *voters);
    if (!counted || !bodies || !lens || !weights || !voters) {
        free(counted), free(bodies), free(lens), free(weights), free(voters);
        return STATUS_ENOMEM;
    }
    /* DeMo: a part 0 held without a body was refused on receipt (step_on_exch); one whose
     * norm is far above the pool's recent updates is refused here. Neither votes nor enters
     * the update; its microbatches are lost at this stage for this step. */
    int *out = calloc((size_t)(n ? n : 1), sizeof *out);
    double *norm = calloc((size_t)(n ? n : 1), sizeof *norm);
    if (!out || !norm) {
        free(counted), free(bodies), free(lens), free(weights), free(voters), free(out), free(norm);
        return STATUS_ENOMEM;
    }
    int inner = inner_step(p, p->step); /* receipts only: no bodies, nothing to guard */
    for (int i = 0; p->held.dopt && !inner && i < n; i++) {
        char why[STATUS_ERR_LEN];
        if (msgs[i]->part == 0 &&
            (msgs[i]->len == 0 ||
             demo_opt_check_norm(p->held.dopt, p->step, msgs[i]->data, msgs[i]->len, &norm[i], why)))
            out[i] = 1;
        else if (msgs[i]->part == 0 && peer_is_self(p, msgs[i]->origin))
            guard_norm_note(&p->guard, norm[i], counted_by(p, msgs[i])); /* its own update is a reference */
    }
    for (int i = 0; p->held.dopt && !inner && i < n; i++) {
        if (msgs[i]->part != 0 || out[i] || peer_is_self(p, msgs[i]->origin)) continue;
        if (!guard_norm_ok(&p->guard, norm[i])) {
            char h[9];
            out[i] = 1;
            stats_note_rejected(&p->stats);
            log_warn("peer: step %" PRId64 ": left out %s's message: norm %.3g is above %.0f x "
                     "the pool's recent updates",
                     p->step, peer_idhex(msgs[i]->origin, h), norm[i], GUARD_NORM_FACTOR);
        }
    }
    /* Its own message sent before a re-sync carries the hash it had then: it enters the
     * update as on every other member, but does not vote against the state it took since
     * (with the others' messages refused, it alone outvoted every download: a loop). Nor
     * does a message whose origin has left the view: a member that died may have applied a
     * step nobody alive holds (its mate's message lost on the way), and its next message,
     * senior by id, outvoted the one live contributor, which then took a follower's older
     * state (sim 6x3 mild seed 40557). */
    for (int i = 0; i < n; i++)
        if (msgs[i]->part == 0 && !out[i] &&
            !(peer_is_self(p, msgs[i]->origin) && msgs[i]->hash != p->contrib.my_hash) &&
            (peer_is_self(p, msgs[i]->origin) || view_find(&p->view, msgs[i]->origin)))
            voters[nv++] = msgs[i];
    if (pool_vote_lost(voters, nv, p->contrib.my_hash, p->me.entry.serving_from, p->me.entry.id)) {
        free(counted), free(bodies), free(lens), free(weights), free(voters), free(out), free(norm);
        log_warn("peer: my parameters differ from the pool's at step %" PRId64, p->step);
        return STATUS_ECORRUPT; /* the caller re-syncs */
    }
    free(voters);
    for (int i = 0; i < n; i++)
        if (!out[i] && !p->held.dopt && !dense_ok(p, msgs[i])) {
            stats_note_rejected(&p->stats);
            out[i] = 1;
        }
    /* A message that counts a microbatch already counted (a member's share was run again
     * while its message was on the way) is left out whole (pool_pick: the heavier origin
     * first); its other microbatches show as lost. */
    int *take = calloc((size_t)(n ? n : 1), sizeof *take);
    if (!take || pool_pick(msgs, n, out, p->dims.M, take)) {
        free(counted), free(bodies), free(lens), free(weights), free(out), free(norm), free(take);
        return STATUS_ENOMEM;
    }
    /* A part 0 that counts no microbatch still carries its sender's residual momentum,
     * which the pool needs (left out, one process measured +2.4%: demo_opt.h), but enters
     * only when a taken part 0 that counts one names its origin among its exchange
     * members, or when no part 0 counts one: one that counts none may be a remnant of a
     * run of this step nobody alive applied (its sender gone, named by no mate's claims):
     * a member that held it took it in, a follower that never heard of it was complete
     * without it (sim heavy 4x2 seed 33010562). A named one every member waits for. */
    int counting = 0;
    for (int i = 0; i < n; i++) counting |= take[i] && msgs[i]->part == 0 && counted_by(p, msgs[i]) > 0;
    for (int i = 0; i < n; i++) {
        if (out[i]) continue;
        if (take[i] && counting && msgs[i]->part == 0 && counted_by(p, msgs[i]) == 0 &&
            !named_by_counting(p, msgs, n, take, out, msgs[i]->origin))
            continue;
        if (!take[i]) {
            char h[9];
            log_warn("peer: step %" PRId64 ": left out part %d of %s's message (it counts "
                     "microbatches already counted)",
                     p->step, msgs[i]->part, peer_idhex(msgs[i]->origin, h));
            continue;
        }
        for (int b = 0; b < p->dims.M; b++)
            if (pool_bit(msgs[i]->counted, b)) pool_set_bit(counted, b);
        for (int b = 0; b < p->dims.M; b++) total += (uint32_t)pool_bit(msgs[i]->counted, b);
        if (inner || (p->held.dopt && msgs[i]->part > 0)) continue; /* DeMo supplements carry no body */
        bodies[m] = msgs[i]->data, lens[m] = msgs[i]->len;
        weights[m] = 1u + counted_by(p, msgs[i]); /* docs/protocol.md 12.5 */
        m++;
        if (p->held.dopt && !peer_is_self(p, msgs[i]->origin))
            guard_norm_note(&p->guard, norm[i], counted_by(p, msgs[i])); /* the pool's recent updates */
    }
    free(take);
    free(out);
    free(norm);
    *c = (chosen_t){.bodies = bodies, .lens = lens, .weights = weights, .m = m, .counted = counted,
                    .total = total};
    return 0;
}

/* The naming of the first step a follower contributes to (docs/protocol.md 9.5) after an
 * applied step, and what reaching it means: the `following` and `contributing` lines, the
 * join time for its status. */
static void name_step(peer_t *p, double now)
{
    int named;
    int64_t head = view_max_step(&p->view, p->stage);
    /* The messages it holds say more than gossip, which lags a period: a mate that sent its
     * message of s is done with its share of s, and applies it once the rest is in (a
     * pool of one at once). A follower catching up with messages asked ahead named from a
     * head of 13 while its pool's one member had started 14 (gossip still said 13), and
     * reached 14 itself 0.2 s later, before any echo: named again 5 steps later. */
    for (int64_t s = p->step;
         s < p->step + ahead_window(p) && pool_messages(p->pool, s, NULL, 0) > 0; s++)
        if (s + 1 > head) head = s + 1;
    int64_t was = p->me.entry.serving_from;
    peer_self_serving_from(p, follow_name(&p->follow, p->step, was, head, now, &named));
    /* every step, and a naming at once: a newcomer counts a mate's echo of its naming only
     * when the mate's own entry in it was 2 steps short of it (follow_heard), and that
     * entry must not trail the mate's step by a gossip period */
    peer_push_self(p);
    if (named && !p->follow.named_logged) {
        p->follow.named_logged = 1;
        fprintf(p->log,
                "following: contributes from step %" PRId64 " (%d steps followed, pool at %" PRId64
                ", %.3f s per step%s)\n",
                p->me.entry.serving_from, p->follow.followed, head, p->follow.named_sps,
                p->follow.pace_known ? ", pace known" : "");
        peer_event(p, "following",
                   "from=%" PRId64 " followed=%d head=%" PRId64 " pace_s=%.3f pace_known=%d",
                   p->me.entry.serving_from, p->follow.followed, head, p->follow.named_sps,
                   p->follow.pace_known);
    }
    if (p->me.entry.serving_from == p->step && p->follow.followed && !p->follow.contrib_logged) {
        /* what a newcomer's or mover's following cost (bench_rebalance.sh reads it) */
        p->follow.contrib_logged = 1;
        fprintf(p->log,
                "contributing: from step %" PRId64 ", %.1f s after its state was in place (%d "
                "steps followed, join margin %" PRId64 "%s)\n",
                p->step, now - p->stats.serve_t0, p->follow.followed, p->follow.margin,
                p->follow.pace_known ? ", pace known" : "");
        peer_event(p, "contributing",
                   "after_s=%.1f followed=%d margin=%" PRId64 " pace_known=%d",
                   now - p->stats.serve_t0, p->follow.followed, p->follow.margin,
                   p->follow.pace_known);
    }
    if (!p->stats.contributed && p->me.entry.serving_from <= p->step) {
        /* its first contributed step: a joiner of a running pool (it followed first)
         * tells its status how long joining took */
        p->stats.contributed = 1;
        if (p->follow.followed && p->tp.set_join)
            p->tp.set_join(p->tp.ctx, p->stats.serve_t0 - p->stats.t_start, now - p->stats.t_start);
    }
}

void step_name_due(peer_t *p)
{
    if (!p->follow.name_due) return;
    p->follow.name_due = 0;
    name_step(p, p->now);
}

/* What follows an update: the stage's gradient norm, the log line, the pool's pace, the
 * next step (and the join margin), the simulator's hooks, lost microbatches, the store. */
static int after_update(peer_t *p, const chosen_t *c, const update_result_t *r, int following)
{
    float gnorm = r->gnorm;
    const uint8_t *counted = c->counted;
    int twice = c->twice;
    double now = p->now;
    /* the stage's gradient norm in its state (recover.c weighs neighbours by it): the
     * same on every replica, so that any member's snapshot has the same bytes */
    p->contrib.stage_gnorm = r->stage_gnorm;
    log_step(p, gnorm, now);
    /* The pool's pace (follow.h). A follower's join margin (in steps) comes from it: too
     * slow a pace gives too few steps for gossip to tell every mate when it starts
     * contributing (mates then leave its message out, or wait for it). So a follower times
     * steps at the pool's head: not its first (it includes the wait for the pool: a stall,
     * a crash) and not steps it replays from kept messages while the pool is ahead (not
     * the pool's pace at all); and takes the median of the last few. Not the fastest: two
     * steps applied at once after a stall (their messages came together) timed one of them
     * at nearly 0 s, a margin of 1000 steps, and a mover that never contributed
     * (rebal_no-thrash, now and then under load). */
    int follower = p->me.entry.serving_from > p->step;
    int at_head = view_max_step(&p->view, p->stage) <= p->step + 1; /* a step ahead: live */
    double step_s = p->contrib.step_t0 > 0 ? now - p->contrib.step_t0 : 0;
    follow_pace(&p->follow, p->contrib.step_t0 > 0 ? step_s : -1, follower, at_head);
    p->contrib.step_t0 = now;
    timeout_start(&p->contrib.stall, now);
    int64_t applied = p->step;
    step_set(p, p->step + 1);
    /* A follower not yet named names at the start of the next pass, once the events that
     * came in during this update are read: named here, at the end of a 0.2-0.5 s update,
     * it named from a head its pool had passed (the mate's message of the next step
     * waiting unread), and then again 2 steps on (README's small join at 100 Mbit/s +
     * 50 ms: in about half the runs). A named one checks its naming here, as before: it
     * may contribute from this step on. */
    if (p->follow.name_due) step_name_due(p); /* two steps in one pass: the first's, late */
    if (p->me.entry.serving_from > p->step && !p->follow.first_named_at) {
        p->follow.name_due = 1;
        peer_push_self(p); /* its entry, every step */
    } else {
        name_step(p, now);
    }
    if (p->step == p->def.train.steps / 2) p->stats.t_half = now;
    if (p->step == p->def.train.steps) p->stats.t_train1 = now;
    p->contrib.my_hash = peer_param_hash(p);
    if (p->po.hooks.applied) {
        peer_applied_t a = {.stage = p->stage,
                            .step = applied,
                            .M = p->dims.M,
                            .counted = counted,
                            .expected = pool_expected(p->pool),
                            .counted_twice = twice,
                            .following = following,
                            .hash_after = p->contrib.my_hash};
        p->po.hooks.applied(p->po.hooks.ctx, p, &a);
    }
    for (int b = 0; b < p->dims.M; b++)
        if (!pool_bit(counted, b) && pool_bit(pool_expected(p->pool), b)) {
            p->stats.lost++;
            fprintf(p->log, "lost: step %" PRId64 " microbatch %d: not in stage %d's update\n",
                    applied, b, p->stage);
            peer_event(p, "lost", "mb=%d mb_step=%" PRId64 " why=%s", b, applied,
                       "not in the update");
            if (p->po.hooks.lost)
                p->po.hooks.lost(p->po.hooks.ctx, p, applied, (uint32_t)b, "not in the update");
        }
    step_reset(p);
    if (p->ps) {
        const msg_member_t *me = view_find(&p->view, p->me.entry.id);
        double loss = p->stage == 0 || p->stage == p->dims.S - 1 ? p->me.entry.loss : NAN;
        peer_store_metric(p->ps, applied, loss, step_s > 0 ? (double)p->dims.BT * p->dims.M / step_s : 0,
                          me ? me->bytes_out : 0, me ? me->bytes_in : 0);
        /* with local steps only at a round's end (p = p_sync), when a multiple of the
         * checkpoint interval lies within the round */
        const outer_t *o = &p->held.outer;
        if (outer_boundary(o, applied))
            peer_store_step(p->ps, p->held.st, p->held.dopt, p->step, outer_on(o) ? o->H : 1,
                            p->step == p->def.train.steps);
    }
    return 0;
}

/* An inner step (local steps, 12.14): a contributor's local step on what it counted;
 * nothing shared moves (a follower holds p_sync and waits for the round's last step). */
static void update_inner(peer_t *p, int following, update_result_t *r)
{
    r->gnorm = p->rec.last_gnorm;
    if (!following)
        outer_local_step(&p->held.outer, &p->def.train.opt, p->step, pool_mine_count(p->pool),
                         &r->gnorm);
    r->stage_gnorm = p->contrib.stage_gnorm;
    p->rec.last_gnorm = r->gnorm;
}

/* The pool's update of the step from the chosen bodies (the stage's rule, model/update.h;
 * with local steps, the round's last step: every replica from p_sync, the outer rule). */
static int update_pool(peer_t *p, const chosen_t *c, const pool_msg_t *const *msgs, int n,
                       update_result_t *r)
{
    outer_t *o = &p->held.outer;
    const model_update_t *u = &p->held.update;
    if (outer_on(o)) {
        outer_restore(o);
        u = outer_rule(o, &p->def.train.opt);
    }
    int rc = 0;
    if (p->held.dopt && c->m == 0) {
        /* every message of the step was refused (a follower: its only mates are bad): no
         * update here; the hash vote of the next step repairs this replica if the pool
         * applied one */
        char h[9];
        log_warn("peer: step %" PRId64 ": no update taken (every message refused), e.g. %s's",
                 p->step, n ? peer_idhex(msgs[0]->origin, h) : "none");
        r->stage_gnorm = demo_opt_update_norm(p->held.dopt);
    } else {
        update_batch_t b = {.step = p->step,
                            .bodies = c->bodies,
                            .lens = c->lens,
                            .n = c->m,
                            .weights = c->weights,
                            .counted = c->total,
                            .replica_gnorm = p->rec.last_gnorm};
        rc = u->apply(u, &b, r, p->err);
    }
    if (!rc) outer_end_round(o);
    return rc;
}

/* The step's update from the pool's messages: the pool chooses them, the update is taken
 * (update_inner, update_pool), then what follows an update (after_update). */
static int apply(peer_t *p, const pool_msg_t **msgs, int n, int following)
{
    chosen_t c;
    int rc = choose_messages(p, msgs, n, &c);
    if (rc) return rc;
    update_result_t r = {0};
    if (inner_step(p, p->step))
        update_inner(p, following, &r);
    else
        rc = update_pool(p, &c, msgs, n, &r);
    if (!rc) rc = after_update(p, &c, &r, following);
    chosen_free(&c);
    return rc;
}

/* One line on what this member waits for, when its pool has not stepped for 10 s. */
static void report_stall(peer_t *p, int complete, int exch_missing)
{
    if (!timeout_fired(&p->contrib.stall, p->now) || !peer_swarm_started(p)) return;
    timeout_retry(&p->contrib.stall, p->now);
    char bits[65];
    int k = 0;
    for (int i = 0; i < p->dims.M && k < 64; i++) bits[k++] = pool_bit(p->contrib.ubuf, i) ? '1' : '0';
    bits[k] = 0;
    int held = 0;
    for (int i = 0; i < p->cust.nmbs; i++) held += p->cust.mbs[i].used;
    log_warn("peer: stage %d step %" PRId64 " has not moved for %.0f s: counted %s (mine %u), %s, "
             "%d microbatch(es) held, %d queued, stage 0 at %" PRId64,
             p->stage, p->step, p->now - p->contrib.step_t0, bits, pool_mine_count(p->pool),
             !complete      ? "waiting for microbatches"
             : exch_missing ? "waiting for exchange messages"
                            : "ready",
             held, p->queue.n, view_max_step(&p->view, 0));
}

/* Sends the request q to every serving member of the pool (whoever holds a message
 * relays it). */
static void ask_mates(peer_t *p, msg_t *q)
{
    const msg_member_t *mates;
    int nm = pool_members(p, &mates);
    for (int j = 0; j < nm; j++) peer_send(p, mates[j].id, q, 0, NULL, NULL);
}

/* Members that counted something of this step by what this member knows (they reported
 * PROGRESS, or a mate's message names them as exchange members), or that owned it, and
 * are gone from the pool (from the view, or moved to another stage): a mate may hold
 * their messages (any holder relays). Asks every mate (and a member that moved) for the
 * next part of each: always when `always`, else at once when one more is gone than at the
 * last ask, then once a second. */
static void ask_for_gone(peer_t *p, int always)
{
    int nr = pool_reporters(p->pool, NULL, 0), nheld = pool_messages(p->pool, p->step, NULL, 0);
    const pool_msg_t **held = malloc((size_t)(nheld ? nheld : 1) * sizeof *held);
    if (!held) return;
    pool_messages(p->pool, p->step, held, nheld);
    int cap = nr + p->contrib.ngone_owners;
    for (int i = 0; i < nheld; i++) cap += held[i]->part == 0 ? held[i]->nclaims : 0;
    uint8_t(*ids)[MSG_ID_LEN] = malloc((size_t)(cap ? cap : 1) * MSG_ID_LEN);
    if (!ids) {
        free(held);
        return;
    }
    int n = pool_reporters(p->pool, ids, nr), gone = 0;
    for (int i = 0; i < nheld; i++)
        for (int c = 0; held[i]->part == 0 && c < held[i]->nclaims; c++)
            add_id(ids, &n, cap, held[i]->claims[c]);
    /* and the owners of the step that left the view: their PROGRESS and message may never
     * have reached this member while a mate holds the message (sim deadlink seed 900073:
     * the connection from the dead owner to this member was dead; it re-ran the owner's
     * share, a follower applied the owner's message, and the two held other parameters) */
    for (int i = 0; i < p->contrib.ngone_owners; i++)
        add_id(ids, &n, cap, p->contrib.gone_owners[i]);
    free(held);
    /* gone from the pool: dead, or moved to another stage (it still answers for the
     * messages it left here, move.c); kept at the front of ids */
    for (int i = 0; i < n; i++) {
        const msg_member_t *mem = view_find(&p->view, ids[i]);
        if ((mem && mem->stage == p->stage) || peer_is_self(p, ids[i])) continue;
        if (i != gone) memcpy(ids[gone], ids[i], MSG_ID_LEN);
        gone++;
    }
    int send = gone && (always || gone != p->contrib.gone_asked ||
                        timeout_due(&p->contrib.gone_ask, p->now));
    p->contrib.gone_asked = gone;
    msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage, .step = p->step};
    for (int i = 0; send && i < gone; i++) {
        memcpy(q.origin, ids[i], MSG_ID_LEN);
        q.flags = (uint8_t)pool_first_missing(p->pool, ids[i], p->step);
        ask_mates(p, &q);
        if (view_find(&p->view, ids[i])) peer_send(p, ids[i], &q, 0, NULL, NULL);
    }
    if (send) timeout_start(&p->contrib.gone_ask, p->now);
    free(ids);
}

/* Asks the serving mate furthest ahead for every message of steps from .. from + n - 1
 * below its step that this member holds none of (EXCH_REQ with origin zero, 5.16). A
 * follower catching up asks so, with its round for step N, for the next ahead_depth steps:
 * a mate answers between its own steps, and asking one step at a time, a `small` joiner
 * behind a one-member pool applied one step per pool step (0.9 s each) until the pool's
 * live messages reached it. */
static void ask_steps(peer_t *p, int64_t from, int n)
{
    const msg_member_t *mates;
    int nm = pool_members(p, &mates), best = -1;
    for (int j = 0; j < nm; j++)
        if (!peer_is_self(p, mates[j].id) && mates[j].state == MEMBER_SERVING &&
            (best < 0 || mates[j].step > mates[best].step))
            best = j;
    if (best < 0) return;
    msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage}; /* origin zero: all */
    for (int64_t s = from; s < from + n && s < mates[best].step; s++) {
        if (pool_messages(p->pool, s, NULL, 0) > 0) continue;
        q.step = s;
        peer_send(p, mates[best].id, &q, 0, NULL, NULL);
    }
}

int64_t step_snapshot_step(const peer_t *p)
{
    return p->trans.xfer && p->phase == PHASE_DOWNLOAD ? xfer_step(p->trans.xfer) : -1;
}

void step_ask_after_snapshot(peer_t *p)
{
    int64_t s = step_snapshot_step(p);
    if (s < 0 || ahead_depth(p) < 2 || p->now - p->trans.ahead_at < 1.0) return;
    p->trans.ahead_at = p->now;
    ask_steps(p, s, ahead_depth(p));
}

/* What this member still needs before it can apply the step: part 0 of every exchange
 * member's message, and every part that covers what a live member reports it counted.
 * Asks for each missing one (EXCH_REQ, at most once a second, and at once on each new
 * step of a follower behind its pool) and returns how many. */
static int missing_messages(peer_t *p, const msg_member_t *own, int n)
{
    /* A follower two or more steps behind catches up through the messages its mates
     * kept; asking once a second for each step's, it caught up at one step a second, and
     * behind a pool that steps faster it fell further behind until it re-synced, and
     * might do so again and again (suspected in rebal_no-thrash's intermittent "the mover
     * never contributed"). */
    int catching_up = !contributing(p) && p->contrib.exch_req_step != p->step &&
                      view_max_step(&p->view, p->stage) >= p->step + 2;
    int missing = 0, ask = timeout_due(&p->contrib.exch_req, p->now) || catching_up;
    /* A live mate's message (or a later part of it) asked for every second for
     * STEP_MEND_S: the connection between
     * the two may be dead (docs/protocol.md 12.4, 11.3); opened anew, both ways, once a
     * step. Unmended, every step would wait out the 30 s deadline. Not sooner: what the two
     * connections hold is lost, and on a thin link a message may be seconds on its way. */
    int mend = ask && contributing(p) && p->contrib.mended_step != p->step &&
               p->now - p->contrib.step_t0 >= STEP_MEND_S;
    if (mend) p->contrib.mended_step = p->step;
    if (catching_up) ask_steps(p, p->step + 1, ahead_depth(p));
    msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage, .step = p->step};
    /* the exchange members: this member's view, and everyone a mate's message names */
    int nheld = pool_messages(p->pool, p->step, NULL, 0), cap = n;
    const pool_msg_t **held = malloc((size_t)(nheld ? nheld : 1) * sizeof *held);
    if (!held) return 1;
    pool_messages(p->pool, p->step, held, nheld);
    for (int i = 0; i < nheld; i++) cap += held[i]->nclaims;
    uint8_t(*ids)[MSG_ID_LEN] = malloc((size_t)(cap ? cap : 1) * MSG_ID_LEN);
    if (!ids) {
        free(held);
        return 1;
    }
    int nids = 0;
    for (int i = 0; i < n; i++) add_id(ids, &nids, cap, own[i].id);
    for (int i = 0; i < nheld; i++)
        for (int c = 0; held[i]->part == 0 && c < held[i]->nclaims; c++)
            add_id(ids, &nids, cap, held[i]->claims[c]);
    free(held);
    int named = 0;
    for (int i = 0; i < nids; i++) {
        int self = peer_is_self(p, ids[i]);
        if (self && !contributing(p)) continue;
        const msg_member_t *mem = view_find(&p->view, ids[i]);
        /* a member that moved to another stage (rebalancing) is gone from this pool; it
         * still answers for the messages it left here (move.c) */
        int moved = mem && mem->stage != p->stage;
        if (moved) mem = NULL;
        int need = !pool_find(p->pool, ids[i], p->step, 0) ? 0
                   : mem && !self && !pool_member_covered(p->pool, ids[i])
                       ? pool_first_missing(p->pool, ids[i], p->step)
                       : -1;
        if (need < 0) continue;
        /* A mate that re-syncs (joining again), or follows from a later step since it
         * did, sends no message of this step, and its counted bits left the union
         * (step_seen): the pool runs them again. Waiting for its message held the step for
         * step.deadline (30 s) each time a member woke from a pause and re-synced, named
         * by a mate's message made while its entry still said it contributed (local
         * --pause: four 30 s stalls in one run). A newcomer's serving_from never goes the
         * other way unseen: its join margin lets gossip tell every mate first (9.5). */
        if (need == 0 && mem && !self &&
            (mem->state != MEMBER_SERVING || mem->serving_from > p->step))
            continue;
        /* named by a mate but unknown here: dead, or not heard of yet; wait a while. One
         * that moved to another stage left right after sending its message of the step it
         * was at, and sends none for later steps (rebal.c): a mate whose view still showed
         * it here named it for the next step, and the pool waited 2 x timeout_s for
         * nothing after each move. It answers for what it left behind (move.c) within a
         * round trip: step.relay after the wait began, it is not waited for. */
        timeout_t *wait = moved ? &p->contrib.relay : &p->contrib.unknown;
        /* one newly found named (a message just in names it): asked for at once, and its
         * wait starts now. A follower that had just taken its state got its mates' messages
         * of the step a moment after its once-a-second ask, one naming a member that had
         * moved to another stage since; its wait, running since it began serving, ran out
         * before the next ask, and it applied the step without the message its mates had
         * taken in: another hash (sim rebalance mild 5x2 seed 50, the 4,1 placement) */
        int gone = !mem && !self && need == 0;
        int fresh = gone && ++named > p->contrib.named_asked;
        if (fresh) timeout_start(wait, p->now), p->contrib.named_asked = named;
        if (gone && timeout_fired(wait, p->now)) continue;
        missing++;
        if ((!ask && !fresh) || self) continue;
        if (!mem) { /* named by a mate, unknown here: a mate may relay its message */
            memcpy(q.origin, ids[i], MSG_ID_LEN);
            q.flags = 0;
            ask_mates(p, &q);
            if (moved) peer_send(p, ids[i], &q, 0, NULL, NULL);
            continue;
        }
        memcpy(q.origin, ids[i], MSG_ID_LEN);
        q.flags = (uint8_t)need;
        peer_send(p, ids[i], &q, 0, NULL, NULL);
        if (mend) custody_mend(p, ids[i]); /* its part 0 or a later part */
        /* a member that does not answer within a second may have died after its message
         * reached some mates but not this one (a connection reset): until this member
         * calls it dead, its PROGRESS stays in the union and nothing is run again, and when
         * it does, its share is run again while a mate held its message all along (sim
         * 5x2 mild seed 1136). Any holder relays. */
        if (need == 0 && timeout_fired(&p->contrib.relay, p->now))
            ask_mates(p, &q);
    }
    /* a message of a mate's may have later parts (supplements) this member has not seen:
     * the held ones do not cover all M yet */
    pool_msg_union(p->pool, p->contrib.ubuf);
    if (ask && !pool_all(p->pool, p->contrib.ubuf))
        for (int i = 0; i < nids; i++) {
            if (peer_is_self(p, ids[i]) || !view_find(&p->view, ids[i]) ||
                !pool_find(p->pool, ids[i], p->step, 0))
                continue;
            memcpy(q.origin, ids[i], MSG_ID_LEN);
            q.flags = (uint8_t)pool_first_missing(p->pool, ids[i], p->step);
            peer_send(p, ids[i], &q, 0, NULL, NULL);
        }
    free(ids);
    pool_msg_union(p->pool, p->contrib.ubuf);
    if (!pool_all(p->pool, p->contrib.ubuf) && ask) ask_for_gone(p, 1);
    if (ask) timeout_start(&p->contrib.exch_req, p->now), p->contrib.exch_req_step = p->step;
    return missing + !pool_all(p->pool, p->contrib.ubuf);
}

/* Stage k > 0: its pool misses microbatches that stage 0 has moved past (a member died
 * with them): asks the lowest-id stage-0 member to run them again. */
static int ask_redo(peer_t *p)
{
    if (p->stage == 0 || !contributing(p) || view_max_step(&p->view, 0) <= p->step) {
        timeout_stop(&p->contrib.suspect);
        return 0;
    }
    /* A microbatch is lost only if no live member reports it in a report sent after the
     * suspicion began (progress in flight is not a loss): wait for a fresh report from
     * every live mate, then ask (again every 2 s while still missing). */
    timeout_ensure(&p->contrib.suspect, p->now);
    if (!timeout_fired(&p->contrib.suspect, p->now) || !timeout_due(&p->contrib.redo_ask, p->now))
        return 0;
    const msg_member_t *mem;
    int nm = pool_members(p, &mem);
    for (int i = 0; i < nm; i++)
        if (!peer_is_self(p, mem[i].id) && mem[i].serving_from <= p->step &&
            pool_heard_at(p->pool, mem[i].id) < p->contrib.suspect.started_at)
            return 0;
    timeout_start(&p->contrib.redo_ask, p->now);
    const msg_member_t *s0;
    int n0 = view_stage(&p->view, 0, 1, &s0), pick = -1;
    for (int i = 0; i < n0; i++)
        if (pick < 0 || memcmp(s0[i].id, s0[pick].id, MSG_ID_LEN) < 0) pick = i;
    if (pick < 0) return 0;
    size_t nb = pool_bitmap_bytes(p->pool);
    uint8_t *want = malloc(nb), to[MSG_ID_LEN];
    if (!want) return STATUS_ENOMEM;
    const uint8_t *expect = pool_expected(p->pool); /* SkipPipe: only what visits here */
    for (size_t i = 0; i < nb; i++) want[i] = (uint8_t)(expect[i] & ~p->contrib.ubuf[i]);
    msg_t r = {.type = MSG_REDO, .stage = (int16_t)p->stage, .step = p->step, .count = (uint32_t)p->dims.M};
    const void *pl[1] = {want};
    memcpy(to, s0[pick].id, MSG_ID_LEN);
    peer_send(p, to, &r, 1, pl, &nb);
    free(want);
    char h[9];
    log_info("peer: stage %d step %" PRId64 ": asked %s to re-run what the pool lost", p->stage,
             p->step, peer_idhex(to, h));
    return 0;
}

/* The early part 0 (exch_early) to the pool's members it did not go to. */
static void resend_early(peer_t *p)
{
    const msg_member_t *mem;
    int nm = pool_members(p, &mem);
    for (int i = 0; i < nm; i++) {
        int had = 0;
        for (int j = 0; j < p->contrib.nearly_to && !had; j++) had = !memcmp(p->contrib.early_to[j], mem[i].id, MSG_ID_LEN);
        if (had || peer_is_self(p, mem[i].id)) continue;
        msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage, .step = p->step, .flags = 0};
        memcpy(q.origin, p->me.entry.id, MSG_ID_LEN);
        memcpy(q.sender, mem[i].id, MSG_ID_LEN); /* answered as if it had asked */
        step_answer_exch_req(p, p->pool, p->stage, &q);
    }
}

/* Its part 0 goes out before the step is complete (exch_early); exch_sent, and the waits
 * of 12.4, only once it is. */
static int send_early(peer_t *p)
{
    int rc = make_exchange(p, 0);
    if (rc) return rc;
    p->contrib.exch_early = 1;
    p->contrib.share_at = p->now;
    const msg_member_t *mem;
    int nm = pool_members(p, &mem);
    p->contrib.nearly_to = nm <= 64 ? nm : -1;
    for (int i = 0; i < nm && i < 64; i++) memcpy(p->contrib.early_to[i], mem[i].id, MSG_ID_LEN);
    return 0;
}

int step_before_resent(peer_t *p, const msg_mb_t *mb)
{
    if (mb->step != p->step || !contributing(p)) return 0;
    /* what it counted and has not sent: flushed before a re-sent microbatch, and before
     * any microbatch while it holds a re-sent one, so that a re-run is alone in its part
     * (sim pause 6x3 seed 740253 with swim_every=4: a first attempt counted after a re-run
     * shared its supplement; a mate had counted the re-run's other copy, left the
     * supplement out, and lost the first attempt with it: 3 of 4) */
    const uint8_t *mine = pool_mine(p->pool);
    int unsent = 0, unsent_resent = 0;
    for (size_t i = 0; i < pool_bitmap_bytes(p->pool); i++) {
        unsent |= mine[i] & ~p->contrib.sent_bits[i];
        unsent_resent |= mine[i] & ~p->contrib.sent_bits[i] & p->contrib.resent_bits[i];
    }
    /* once its part 0 is out, a part that carries no body (DeMo's supplements fold into
     * the momentum; an inner step's are receipts) holds one microbatch: a first run it
     * counts there may meet a mate's re-send of it counted in the mate's part 0, which the
     * pool takes first, and what shared the supplement went out with it (sim restart 8x4
     * --outer 4 seed 9019: two first runs in one supplement, a mate's re-send of one in its
     * part 0, 3 of 4). AdamW's supplements are dense gradients: not split. */
    int alone = p->held.dopt && (p->contrib.exch_sent || p->contrib.exch_early);
    if (!unsent || (mb->attempt == 0 && !unsent_resent && !alone)) return 0;
    if (!p->contrib.exch_sent && !p->contrib.exch_early) return send_early(p);
    /* its part 0 is out: what it counted since goes out as a supplement of its own, so
     * that each re-run is alone in its part (sim heavy 4x2 seed 35209727: two re-runs in
     * one supplement, one of them counted by a mate already, and the pool left out the
     * other with it: 3 of 4) */
    int *parts = p->contrib.exch_sent ? &p->contrib.exch_sent : &p->contrib.exch_early;
    int rc = make_exchange(p, *parts);
    if (!rc) ++*parts;
    return rc;
}

/* Stage 0: whether this member has counted every microbatch of this step that is its own
 * to source (serve_source: rendezvous hashing over the step's owners), none of them a
 * re-run it was asked for. Then its own gradient for the step is whole: nothing more
 * reaches it unless a mate dies, and what it counts then goes into a supplement (12.4). */
static int own_share_done(peer_t *p)
{
    if (!p->po.early_exchange || p->stage != 0 || !contributing(p)) return 0;
    for (int i = 0; p->contrib.redo_step == p->step && i < p->dims.M; i++)
        if (pool_bit(p->contrib.redo_for, i)) return 0;
    const msg_member_t *own;
    int me, n = view_owners(&p->view, 0, p->step, p->me.entry.id, &own, &me);
    if (me < 0) return 0;
    const uint8_t *mine = pool_mine(p->pool);
    int share = 0;
    for (int i = 0; i < p->dims.M; i++)
        if (view_rendezvous(own, n, rng_mix((uint64_t)p->step, (uint64_t)i)) == me) {
            if (!pool_bit(mine, i)) return 0;
            share++;
        }
    return share > 0; /* with nothing of its own it waits for the step as before */
}

/* The run's last step is applied: no later step's hash vote will make this pool's
 * replicas equal again (a partition, or a pause, near the end left two states: sim heavy
 * 4x2 seed 6100659, pause seeds 60163, 80004). Its contributors report their hash with
 * PROGRESS of that step, and one on the losing side of the vote over every contributor's
 * report takes the pool's state again (STATUS_ECORRUPT: the caller re-syncs). */
static int final_vote(peer_t *p)
{
    if (!contributing(p)) return 0;
    if (timeout_due(&p->contrib.progress, p->now)) send_progress(p);
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
    (void)me;
    return pool_final_vote(p->pool, own, n, p->me.entry.id, p->contrib.my_hash, p->me.entry.serving_from) == 1
               ? STATUS_ECORRUPT
               : 0;
}

/* Mates that may have counted a re-sent microbatch this member counted, unknown to it yet:
 * after counting one (contrib.resent_at), the contributing mates of own[0, n) still at
 * this step (by the view) from which no PROGRESS came CONTRIB_ECHO_S after. Two copies of
 * a microbatch in flight (a custody re-send and its first run, or two re-sends) reach two
 * members at once, and each counts its own, its union not holding the other's yet; each
 * had all M covered with the other's part 0 and its own, applied before the other's
 * PROGRESS came, and the two left out different copies (sim heavy 8x4 seed 41370: two
 * hashes in one pool). A mate counts a copy only before this member's PROGRESS reaches it,
 * so its report sent after that names it; waiting for one, this member also waits for the
 * part that holds it, and both pick alike (pool_pick). A round trip above CONTRIB_ECHO_S
 * still slips through: the hash vote of the next step mends that. */
static int resent_unheard(peer_t *p, const msg_member_t *own, int n)
{
    if (!(p->contrib.resent_at > 0) || !contributing(p)) return 0;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (peer_is_self(p, own[i].id) || own[i].step > p->step) continue; /* past N: sent all */
        k += pool_heard_at(p->pool, own[i].id) < p->contrib.resent_at + CONTRIB_ECHO_S;
    }
    return k;
}

int step_tick(peer_t *p)
{
    if (p->phase != PHASE_SERVING) return 0;
    if (p->step >= p->def.train.steps) return final_vote(p);
    int rc;
    /* every 0.5 s, also with nothing counted: mates wait for a fresh report from every
     * live member before they call a microbatch lost (ask_redo) */
    if (contributing(p) && timeout_due(&p->contrib.progress, p->now)) send_progress(p);
    step_seen(p);
    /* a follower goes by the messages alone: it may be catching up on steps the pool
     * finished before it arrived, whose progress it never heard */
    int complete = !contributing(p) || pool_all(p->pool, p->contrib.ubuf);
    int planted = 0; /* fault injection: a pool that steps short (the checker must see it) */
    if (!complete && p->po.faults.step_short_ok) {
        int missing = 0;
        for (int i = 0; i < p->dims.M; i++) missing += !pool_bit(p->contrib.ubuf, i);
        complete = planted = p->po.faults.step_short_ok(p->po.faults.ctx, p->step, missing);
    }
    /* Stage 0 sends its message as soon as its own share is counted, without waiting to
     * hear (PROGRESS) that its mates counted theirs: the pool's exchange then takes one
     * one-way delay after the last gradient comes back instead of two (docs/protocol.md
     * 12.4, "Early exchange"). The step still completes only when all M are counted and
     * every message covering them is held. */
    if (!complete && !p->contrib.exch_sent && !p->contrib.exch_early && own_share_done(p) &&
        (rc = send_early(p)))
        return rc;
    if (!complete && contributing(p) && view_max_step(&p->view, p->stage) > p->step) {
        /* A mate has applied N since: its PROGRESS of N is no longer re-sent, and if it was
         * lost (stage 0's early part 0 reached the mate first; or a partition cut it off,
         * and the mate ran N alone meanwhile: sim 6x3 mild seed 40837 waited 28 s for a
         * REDO) this member would wait for ever. It asks for the messages it lacks
         * instead; their counted bits complete N. */
        const msg_member_t *own;
        int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
        (void)me;
        /* the waits of 12.4 start here: a member named by a mate's message and gone
         * from the view (it died with its message held by that mate only) is asked for
         * through the mates for 2 x timeout_s from now (sim 5x2 mild moves seed 1106:
         * waited for ever); sending its part 0 at completion starts them again */
        contrib_waits(&p->contrib, p->now, 0);
        (void)missing_messages(p, own, n);
    }
    if (!complete) {
        /* A mate that died took its PROGRESS out of the union, and its share is run again
         * (stage 0 sources it; other stages ask for a REDO). Its message may have reached
         * some mate and not this one: asked for at once, it is normally held before the
         * re-runs come back, whose bits it then covers, so that they are not counted twice
         * (sim 4x2 mild swap seed 11796: a follower held the dead member's message, the
         * contributor counted its share again, and the two applied different updates). */
        if (contributing(p)) ask_for_gone(p, 0); /* at once when one more is gone */
        report_stall(p, 0, 0);
        return ask_redo(p);
    }
    timeout_stop(&p->contrib.suspect);
    if (contributing(p) && !(p->contrib.complete_at > 0)) {
        p->contrib.complete_at = p->now;
        /* its mates complete at about the same moment and send their messages then: asked
         * for at once, a mate that had just sent its message answered with it again. On
         * `small` (steps over a second, so the ask of the last step was due again) every
         * exchange message crossed the wire twice (local 4 x 2, 32 steps: 26.3 exchange
         * bytes per token, 13.5 kB per peer per step for a 7.2 kB message). The first ask
         * waits a quarter second from here; not a whole round of asks: a message lost on
         * the way must still be asked for before its sender may die (sim restart 2x2
         * --steps 14 seed 6224: asked a second late, the sender had crashed, and the mate
         * applied the step without it). */
        timeout_start_for(&p->contrib.exch_req, p->now, CONTRIB_FIRST_ASK_S);
    }
    if (contributing(p) && p->contrib.exch_early && !p->contrib.exch_sent) {
        /* N is complete: the early parts count as sent now; mates that came into view
         * since part 0 went out get it too, as they would have at completion (they ask
         * for a supplement they lack) */
        p->contrib.exch_sent = p->contrib.exch_early;
        resend_early(p);
    }
    if (contributing(p) &&
        (!p->contrib.exch_sent || memcmp(pool_mine(p->pool), p->contrib.sent_bits, pool_bitmap_bytes(p->pool)))) {
        if ((rc = make_exchange(p, p->contrib.exch_sent))) return rc;
        if (!p->contrib.exch_sent++) contrib_waits(&p->contrib, p->now, 1);
    }
    contrib_waits(&p->contrib, p->now, 0);
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
    int missing = missing_messages(p, own, n) + resent_unheard(p, own, n);
    if (!contributing(p)) { /* a follower needs someone's update to follow */
        int others = 0;
        for (int i = 0; i < n; i++) others += !peer_is_self(p, own[i].id);
        if (!others) missing = 1;
    }
    if (missing && !planted) {
        report_stall(p, 1, missing);
        if (!timeout_fired(&p->contrib.deadline, p->now) || !contributing(p)) return 0;
        log_warn("peer: step %" PRId64 ": %d pool message(s) missing after 30 s; stepping "
                 "without them",
                 p->step, missing);
        peer_event(p, "step_deadline", "missing=%d", missing);
    }
    int cap = pool_messages(p->pool, p->step, NULL, 0);
    const pool_msg_t **msgs = malloc((size_t)(cap ? cap : 1) * sizeof *msgs);
    if (!msgs) return STATUS_ENOMEM;
    int k = pool_messages(p->pool, p->step, msgs, cap);
    if (!contributing(p) && k == 0) {
        free(msgs);
        return 0;
    }
    rc = apply(p, msgs, k, !contributing(p));
    free(msgs);
    return rc;
}

/* A message of origin's for `step` was refused (guard.h); one sent by origin itself
 * (direct) counts against it: the refusal that expels it is said, recorded, and takes it
 * out of the view at once (not waited for at this step, nor routed to). */
static void guard_refusal(peer_t *p, const uint8_t *origin, int64_t step, int direct,
                          const char *why)
{
    if (!guard_refused(&p->guard, origin, step, direct && !peer_is_self(p, origin))) return;
    char h[9];
    int n = guard_refusals(&p->guard, origin);
    log_warn("peer: expelled %s from stage %d's pool: %d of its updates refused (last: %s)",
             peer_idhex(origin, h), p->stage, n, why);
    peer_event(p, "expelled", "peer=%s refused=%d why=%s", peer_idhex(origin, h), n, why);
    msg_member_t *v = malloc((size_t)(p->view.n ? p->view.n : 1) * sizeof *v);
    if (v) {
        int k = guard_view(&p->guard, p->view.m, p->view.n, v);
        view_set(&p->view, v, k);
        free(v);
    }
}

int step_on_exch(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    if (!p->held.st || m->stage != p->stage || ev->nframes != 3) return 0;
    /* downloading: the messages of the snapshot's step on (step_ask_after_snapshot) */
    int64_t snap = step_snapshot_step(p), at = snap < 0 ? p->step : snap;
    if (m->step < at - p->held.keep || m->step > at + ahead_window(p)) return 0;
    char why[STATUS_ERR_LEN];
    int inner = inner_step(p, m->step);
    if (p->held.dopt && (m->flags > 0 || inner) && ev->frame_len[0] != 0) {
        /* a DeMo supplement, or any part of an inner step (12.14): no body */
        stats_note_rejected(&p->stats);
        return 0;
    }
    double norm = 0;
    if (p->held.dopt && m->flags == 0 && !inner &&
        (demo_opt_check_norm(p->held.dopt, m->step, ev->frame[0], ev->frame_len[0], &norm, why) ||
         (!guard_norm_ok(&p->guard, norm) &&
          snprintf(why, sizeof why, "norm %.3g is above %.0f x the pool's recent updates", norm,
                   GUARD_NORM_FACTOR)))) {
        /* Refused: held without its body, so that its counted microbatches count as left
         * out at once (12.5) instead of being waited for; the pool steps without it. */
        stats_note_rejected(&p->stats);
        char h[9];
        log_warn("peer: refused the step %" PRId64 " exchange message of %s: %s", m->step,
                 peer_idhex(m->origin, h), why);
        int rc = pool_store(p->pool, m, (const uint8_t *)"", 0, ev->frame[1], ev->frame_len[1],
                            ev->frame[2], ev->frame_len[2]);
        guard_refusal(p, m->origin, m->step, !memcmp(m->origin, m->sender, MSG_ID_LEN), why);
        return rc == STATUS_EMALFORMED ? 0 : rc;
    }
    int rc = pool_store(p->pool, m, ev->frame[0], ev->frame_len[0], ev->frame[1], ev->frame_len[1],
                        ev->frame[2], ev->frame_len[2]);
    if (rc == STATUS_EMALFORMED) {
        stats_note_rejected(&p->stats);
        return 0;
    }
    /* the pool's pace, timed on its messages while this member downloads (9.5): named
     * from it at its second step followed, not a second or three pool steps later */
    if (rc == 0 && snap >= 0 && m->step >= snap)
        follow_watch(&p->follow, m->step + 1, p->now);
    return rc;
}

static void answer_one(peer_t *p, pool_t *pool, int stage, const msg_t *m, const pool_msg_t *e);

void step_answer_exch_req(peer_t *p, pool_t *pool, int stage, const msg_t *m)
{
    static const uint8_t anyone[MSG_ID_LEN];
    if (!memcmp(m->origin, anyone, MSG_ID_LEN)) { /* every message of the step it holds */
        int k = pool_messages(pool, m->step, NULL, 0);
        const pool_msg_t **all = malloc((size_t)(k ? k : 1) * sizeof *all);
        if (!all) return;
        k = pool_messages(pool, m->step, all, k);
        for (int i = 0; i < k; i++) answer_one(p, pool, stage, m, all[i]);
        free(all);
        return;
    }
    const pool_msg_t *e = pool_find(pool, m->origin, m->step, m->flags);
    if (e) answer_one(p, pool, stage, m, e); /* if not, the asker tries again, and others */
}

/* Sends held message e to m's sender, as an answer to its EXCH_REQ m. */
static void answer_one(peer_t *p, pool_t *pool, int stage, const msg_t *m, const pool_msg_t *e)
{
    msg_t r = {.type = MSG_EXCH,
               .flags = (uint8_t)e->part,
               .stage = (int16_t)stage,
               .step = e->step,
               .count = e->count,
               .hash = e->hash,
               .since = e->since};
    memcpy(r.origin, e->origin, MSG_ID_LEN);
    const void *pl[3] = {e->data, e->counted, e->claims};
    size_t lens[3] = {e->len, pool_bitmap_bytes(pool), (size_t)e->nclaims * MSG_ID_LEN};
    peer_send(p, m->sender, &r, 3, pl, lens);
}

void step_on_exch_req(peer_t *p, const msg_t *m)
{
    if (!p->held.st || m->stage != p->stage) return;
    step_answer_exch_req(p, p->pool, p->stage, m);
}

void step_on_redo(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    size_t nb = pool_bitmap_bytes(p->pool);
    if (!p->held.st || p->stage != 0 || ev->nframes != 1 || ev->frame_len[0] != nb ||
        m->count != (uint32_t)p->dims.M || m->step > p->step) {
        stats_note_rejected(&p->stats);
        return;
    }
    contrib_redo_ask(&p->contrib, m->step, ev->frame[0], p->dims.M, p->now, p->def.train.overlap);
}
