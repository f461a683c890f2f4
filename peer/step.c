/* step.c — this peer's side of its pool's step (docs/protocol.md, "Pool protocol"):
 * counting microbatches exactly once, telling the pool (PROGRESS), sending its exchange
 * message once the pool has counted all M, applying the pool's update when every
 * contributor's message is in, relaying messages a mate missed (EXCH_REQ), and asking
 * stage 0 to re-run microbatches the pool lost with a member (REDO).
 * Not for: the bitmaps and the message store themselves (swarm/pool.c). */
#include "common/log.h"
#include "peer/optim.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define KEEP_STEPS 8 /* exchange messages kept for relays and followers */

static int pool_members(peer_t *p, const msg_member_t **out)
{
    return view_stage(&p->view, p->stage, 1, out);
}

/* The pool's union of counted microbatches as seen now, into p->ubuf. */
static void pool_seen(peer_t *p)
{
    const msg_member_t *live;
    int n = pool_members(p, &live);
    pool_union(p->pool, live, n, p->ubuf);
}

static int contributing(const peer_t *p)
{
    return p->self.state == MEMBER_SERVING && p->self.serving_from <= p->step;
}

int step_counts(peer_t *p, const msg_mb_t *mb, uint8_t flags)
{
    (void)flags;
    if (mb->kind != 0 || mb->step != p->step || !contributing(p) || p->exch_sent) return 0;
    pool_seen(p);
    return !pool_bit(p->ubuf, (int)mb->index);
}

static void send_progress(peer_t *p)
{
    msg_t m = {
        .type = MSG_PROGRESS, .stage = (int16_t)p->stage, .step = p->step, .count = (uint32_t)p->M};
    const msg_member_t *mem;
    int n = pool_members(p, &mem);
    size_t len = pool_bitmap_bytes(p->pool);
    const void *pl[1] = {pool_mine(p->pool)};
    for (int i = 0; i < n; i++) peer_send(p, mem[i].id, &m, 1, pl, &len);
    p->progress_at = p->now;
}

void step_count(peer_t *p, uint32_t index)
{
    pool_count(p->pool, index);
    send_progress(p);
}

void step_on_progress(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    if (!p->st || m->stage != p->stage || m->count != (uint32_t)p->M || ev->nframes != 1 ||
        ev->frame_len[0] != pool_bitmap_bytes(p->pool)) {
        p->rejected++;
        return;
    }
    pool_on_progress(p->pool, m->sender, m->step, ev->frame[0]);
}

void step_reset(peer_t *p)
{
    pool_begin(p->pool, p->step, KEEP_STEPS);
    memset(p->started, 0, pool_bitmap_bytes(p->pool));
    p->loss_sum = 0, p->loss_n = 0;
    p->exch_sent = 0;
    p->exch_wait_since = 0;
    stage_zero_grads(p->st);
    custody_drop_before(p, p->step);
}

/* This member's message: DeMo stage message, or its dense gradient sum (AdamW: the pool
 * averages exactly). Stored in the pool like anyone's, so that it can be relayed. */
static int make_exchange(peer_t *p)
{
    uint8_t *msg;
    size_t len;
    uint32_t count = pool_mine_count(p->pool);
    int rc = 0;
    if (p->dopt) {
        len = demo_opt_msg_size(p->dopt);
        if (!(msg = malloc(len))) return STATUS_ENOMEM;
        float scale = 1.0f / (float)(count ? count : 1);
        rc = demo_opt_prepare(p->dopt, &p->run.opt, p->step, scale, msg, NULL, p->err);
    } else {
        len = stage_num_params(p->st) * sizeof(float);
        if (!(msg = malloc(len))) return STATUS_ENOMEM;
        p->k->download(p->k, msg, stage_grads(p->st), len);
    }
    if (rc == 0) {
        msg_t m = {.type = MSG_EXCH,
                   .stage = (int16_t)p->stage,
                   .step = p->step,
                   .count = count,
                   .hash = p->my_hash,
                   .since = p->self.serving_from};
        memcpy(m.origin, p->id, MSG_ID_LEN);
        memcpy(m.sender, p->id, MSG_ID_LEN);
        rc = pool_store(p->pool, &m, msg, len, pool_mine(p->pool), pool_bitmap_bytes(p->pool));
        const msg_member_t *mem;
        int n = pool_members(p, &mem);
        const void *pl[2] = {msg, pool_mine(p->pool)};
        size_t lens[2] = {len, pool_bitmap_bytes(p->pool)};
        for (int i = 0; rc == 0 && i < n; i++) peer_send(p, mem[i].id, &m, 2, pl, lens);
    }
    free(msg);
    return rc;
}

/* A dense AdamW message: the right size, every value finite. */
static int dense_ok(const peer_t *p, const pool_msg_t *e)
{
    size_t P = stage_num_params(p->st);
    if (e->len != P * sizeof(float)) return 0;
    const float *g = (const float *)(const void *)e->data;
    for (size_t i = 0; i < P; i++)
        if (!isfinite(g[i])) return 0;
    return 1;
}

static void log_step(peer_t *p, float gnorm, double now)
{
    if (p->stage == 0 && p->loss_n) {
        int64_t s = p->step;
        double tok = (double)p->BT * p->M;
        if (s % p->po.log_every == 0 || s == p->run.steps - 1)
            fprintf(p->log, "step %" PRId64 " loss %.6f lr %.3e gnorm %.3f tok/s %.0f\n", s,
                    p->loss_sum / p->loss_n, optim_lr(&p->run.opt, s), gnorm,
                    p->step_t0 > 0 && now > p->step_t0 ? tok / (now - p->step_t0) : 0.0);
        fflush(p->log);
        p->self.loss = (float)(p->loss_sum / p->loss_n);
    } else if (p->stage == p->S - 1) {
        p->self.loss = p->last_loss;
    }
}

/* Steps a newcomer follows before it contributes: long enough (3 s of pool steps, and at
 * least 2 steps) that every member has heard through gossip when it starts counting. */
static int64_t join_margin(const peer_t *p)
{
    double sps = p->pool_step_s > 0 ? p->pool_step_s : 1.0;
    double steps = ceil(3.0 / sps);
    return steps < 2 ? 2 : steps > 1000 ? 1000 : (int64_t)steps;
}

/* Applies the pool's update for this step from msgs[0, n) and moves to the next step. */
static int apply(peer_t *p, const pool_msg_t **msgs, int n, int following)
{
    const uint8_t *bodies[n ? n : 1];
    size_t lens[n ? n : 1];
    uint32_t total = 0;
    int m = 0;
    if (pool_vote_lost(msgs, n, p->my_hash, p->self.serving_from, p->id)) {
        log_warn("peer: my parameters differ from the pool's at step %" PRId64, p->step);
        return STATUS_ECORRUPT; /* the caller re-syncs */
    }
    size_t nb = pool_bitmap_bytes(p->pool);
    uint8_t *counted = calloc(nb, 1);
    if (!counted) return STATUS_ENOMEM;
    int twice = 0;
    for (int i = 0; i < n; i++) {
        if (!p->dopt && !dense_ok(p, msgs[i])) {
            p->rejected++;
            continue;
        }
        for (int b = 0; b < p->M; b++)
            if (pool_bit(msgs[i]->counted, b)) {
                twice += pool_bit(counted, b);
                pool_set_bit(counted, b);
            }
        bodies[m] = msgs[i]->data, lens[m] = msgs[i]->len, total += msgs[i]->count;
        m++;
    }
    int rc = 0;
    float gnorm = 0;
    if (p->dopt) {
        if (following) demo_opt_decay(p->dopt, &p->run.opt, p->step);
        rc = demo_opt_apply(p->dopt, &p->run.opt, p->step, bodies, lens, m, p->err);
    } else {
        size_t P = stage_num_params(p->st);
        float *sum = calloc(P, sizeof(float));
        if (!sum) rc = STATUS_ENOMEM;
        for (int j = 0; sum && j < m; j++) {
            const float *g = (const float *)(const void *)bodies[j];
            for (size_t i = 0; i < P; i++) sum[i] += g[i];
        }
        if (sum) {
            p->k->upload(p->k, stage_grads(p->st), sum, P * sizeof(float));
            optim_adamw_step(p->st, &p->run.opt, p->step, 1.0f / (float)(total ? total : 1),
                             &gnorm);
        }
        free(sum);
    }
    if (rc) {
        free(counted);
        return rc;
    }
    double now = p->now;
    log_step(p, gnorm, now);
    double step_s = p->step_t0 > 0 ? now - p->step_t0 : 0;
    if (p->step_t0 > 0) /* the pool's pace, from the second step seen on */
        p->pool_step_s = p->pool_step_s > 0 ? 0.8 * p->pool_step_s + 0.2 * step_s : step_s;
    p->step_t0 = now;
    int64_t applied = p->step;
    p->step++;
    if (p->self.serving_from > p->step && ++p->followed >= 4) { /* the pool's pace is known now */
        int64_t want = p->step + join_margin(p);
        if (want < p->self.serving_from) p->self.serving_from = want;
    }
    if (p->step == p->run.steps) p->t_train1 = now;
    p->my_hash = peer_param_hash(p);
    if (p->po.hooks.applied) {
        peer_applied_t a = {.stage = p->stage,
                            .step = applied,
                            .M = p->M,
                            .counted = counted,
                            .counted_twice = twice,
                            .following = following,
                            .hash_after = p->my_hash};
        p->po.hooks.applied(p->po.hooks.ctx, p, &a);
    }
    for (int b = 0; b < p->M; b++)
        if (!pool_bit(counted, b)) {
            p->lost++;
            fprintf(p->log, "lost: step %" PRId64 " microbatch %d: not in stage %d's update\n",
                    applied, b, p->stage);
            if (p->po.hooks.lost)
                p->po.hooks.lost(p->po.hooks.ctx, p, applied, (uint32_t)b, "not in the update");
        }
    free(counted);
    step_reset(p);
    if (p->ps) {
        const msg_member_t *me = view_find(&p->view, p->id);
        double loss = p->stage == 0 || p->stage == p->S - 1 ? p->self.loss : NAN;
        peer_store_metric(p->ps, applied, loss, step_s > 0 ? (double)p->BT * p->M / step_s : 0,
                          me ? me->bytes_out : 0, me ? me->bytes_in : 0);
        peer_store_step(p->ps, p->st, p->dopt, p->step, p->step == p->run.steps);
    }
    return 0;
}

/* Asks the pool for messages of this step it lacks: from each missing contributor, and
 * from every mate for the messages of contributors that are gone. */
static void request_missing(peer_t *p, const msg_member_t *own, int n)
{
    if (p->now - p->exch_req_at < 1.0) return;
    p->exch_req_at = p->now;
    const msg_member_t *mem;
    int nm = pool_members(p, &mem);
    msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage, .step = p->step};
    for (int i = 0; i < n; i++) {
        if (pool_find(p->pool, own[i].id, p->step)) continue;
        memcpy(q.origin, own[i].id, MSG_ID_LEN);
        peer_send(p, own[i].id, &q, 0, NULL, NULL);
    }
    (void)nm;
}

/* The messages of this step: every held one. Into out (cap entries); the count. */
static int held(peer_t *p, const pool_msg_t **out, int cap, const msg_member_t *own, int n,
                int *missing)
{
    int k = 0;
    *missing = 0;
    for (int i = 0; i < n; i++) {
        if (peer_is_self(p, own[i].id) && !contributing(p)) continue;
        const pool_msg_t *e = pool_find(p->pool, own[i].id, p->step);
        if (!e) {
            (*missing)++;
            continue;
        }
        if (k < cap) out[k++] = e;
    }
    return k;
}

int step_tick(peer_t *p)
{
    if (p->phase != PHASE_SERVING || p->step >= p->run.steps) return 0;
    if (pool_mine_count(p->pool) && p->now - p->progress_at > 0.5) send_progress(p);
    pool_seen(p);
    int complete = pool_all(p->pool, p->ubuf);
    if (!complete && p->po.plant_bug == 1 && p->step == 1) {
        int missing = 0;
        for (int i = 0; i < p->M; i++) missing += !pool_bit(p->ubuf, i);
        complete = missing == 1; /* the planted bug: a pool that steps one microbatch short */
    }
    if (!complete) {
        /* stage 0 moved on: what this pool still misses was lost with a member */
        if (p->stage != 0 && contributing(p) && view_max_step(&p->view, 0) > p->step &&
            p->now - p->redo_asked_at > 2.0) {
            const msg_member_t *s0;
            int n0 = view_stage(&p->view, 0, 1, &s0);
            int pick = -1;
            for (int i = 0; i < n0; i++)
                if (pick < 0 || memcmp(s0[i].id, s0[pick].id, MSG_ID_LEN) < 0) pick = i;
            if (pick >= 0) {
                size_t nb = pool_bitmap_bytes(p->pool);
                uint8_t *want = malloc(nb);
                if (!want) return STATUS_ENOMEM;
                for (size_t i = 0; i < nb; i++) want[i] = (uint8_t)~p->ubuf[i];
                msg_t r = {.type = MSG_REDO, .stage = (int16_t)p->stage, .step = p->step,
                           .count = (uint32_t)p->M};
                const void *pl[1] = {want};
                uint8_t to[MSG_ID_LEN];
                memcpy(to, s0[pick].id, MSG_ID_LEN);
                peer_send(p, to, &r, 1, pl, &nb);
                free(want);
                char h[9];
                log_info("peer: stage %d step %" PRId64 ": asked %s to re-run what the pool lost",
                         p->stage, p->step, peer_idhex(to, h));
            }
            p->redo_asked_at = p->now;
        }
        return 0;
    }
    int rc;
    if (contributing(p) && !p->exch_sent) {
        if ((rc = make_exchange(p))) return rc;
        p->exch_sent = 1;
        p->exch_wait_since = p->now;
    }
    if (contributing(p) ? !p->exch_sent : 0) return 0;
    if (!p->exch_wait_since) p->exch_wait_since = p->now;
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->id, &own, &me);
    const pool_msg_t **msgs = malloc((size_t)(n + 1) * sizeof *msgs);
    if (!msgs) return STATUS_ENOMEM;
    int missing, k = held(p, msgs, n + 1, own, n, &missing);
    if (missing) {
        request_missing(p, own, n);
        if (p->now - p->exch_wait_since < 30.0 || !contributing(p)) {
            free(msgs);
            return 0;
        }
        log_warn("peer: step %" PRId64 ": %d of %d pool messages after 30 s; stepping without the rest",
                 p->step, k, k + missing);
    }
    if (!contributing(p) && k == 0) {
        free(msgs);
        return 0;
    }
    rc = apply(p, msgs, k, !contributing(p));
    free(msgs);
    return rc;
}

int step_on_exch(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    if (!p->st || m->stage != p->stage || ev->nframes != 2) return 0;
    if (m->step < p->step - KEEP_STEPS || m->step > p->step + 4) return 0;
    char why[STATUS_ERR_LEN];
    if (p->dopt && demo_opt_check(p->dopt, m->step, ev->frame[0], ev->frame_len[0], why)) {
        p->rejected++; /* the pool steps without it; hashes catch a peer that diverges */
        char h[9];
        log_warn("peer: refused the step %" PRId64 " exchange message of %s: %s", m->step,
                 peer_idhex(m->origin, h), why);
        return 0;
    }
    int rc = pool_store(p->pool, m, ev->frame[0], ev->frame_len[0], ev->frame[1], ev->frame_len[1]);
    if (rc == STATUS_EMALFORMED) {
        p->rejected++;
        return 0;
    }
    return rc;
}

void step_on_exch_req(peer_t *p, const msg_t *m)
{
    if (!p->st || m->stage != p->stage) return;
    const pool_msg_t *e = pool_find(p->pool, m->origin, m->step);
    if (!e) return; /* the asker tries again, and others */
    msg_t r = {.type = MSG_EXCH,
               .stage = (int16_t)p->stage,
               .step = e->step,
               .count = e->count,
               .hash = e->hash,
               .since = e->since};
    memcpy(r.origin, e->origin, MSG_ID_LEN);
    const void *pl[2] = {e->data, e->counted};
    size_t lens[2] = {e->len, pool_bitmap_bytes(p->pool)};
    peer_send(p, m->sender, &r, 2, pl, lens);
}

void step_on_redo(peer_t *p, const net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    size_t nb = pool_bitmap_bytes(p->pool);
    if (!p->st || p->stage != 0 || ev->nframes != 1 || ev->frame_len[0] != nb ||
        m->count != (uint32_t)p->M || m->step > p->step) {
        p->rejected++;
        return;
    }
    if (m->step > p->redo_step) {
        p->redo_step = m->step;
        memset(p->redo_for, 0, nb);
    }
    if (m->step < p->redo_step) return;
    for (size_t i = 0; i < nb; i++) p->redo_for[i] |= ev->frame[0][i];
    /* bits past M in the last byte are not microbatches */
    for (int i = p->M; i < (int)(nb * 8); i++) p->redo_for[i >> 3] &= (uint8_t) ~(1u << (i & 7));
}

void step_on_error(peer_t *p, const msg_t *m)
{
    (void)p;
    (void)m;
}
