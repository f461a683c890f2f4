/* state.c — a peer's stage state between peers (the transfer itself is swarm/xfer.c):
 * the snapshot it serves (taken between two steps, shared by joiners that ask at about
 * the same time), the download of its stage's state when it joins or re-syncs, and
 * where the state comes from when no member holds the stage (this peer's checkpoint,
 * else the seed); then serving begins, contributing or first following the pool.
 * Not for: what the pool does with the state (step.c). */
#include "common/log.h"
#include "common/rng.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"


#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define STATE_SNAP_REUSE_S  5.0  /* a snapshot younger than this serves a fresh request */
#define STATE_CHUNK_RETRY_S 10.0 /* a chunk (or the first answer) asked again after this */

/* params | adam m (when the update reads it) | adam v | adam step (8) | last clipped
 * gradient norm (f32) | the stage's learning-rate scale (f32) */
static size_t state_bytes(const peer_t *p)
{
    return recover_state_bytes(&p->def.train, p->stage);
}

/* The floats of a state blob before its adam step: params and the moments carried. */
static size_t state_floats(const peer_t *p)
{
    return (state_bytes(p) - 8 - RECOVER_TAIL) / sizeof(float);
}


/* The state a member serves (recover_state_bytes' layout), as of its current step
 * (handlers run between steps, never inside one). A new snapshot each time: the network
 * thread may still be answering chunks of the last one (transport.h). */
static int take_snapshot(peer_t *p)
{
    size_t P = stage_num_params(p->held.st) * sizeof(float), at = P;
    xfer_shared_t *s = xfer_shared_new(p->stage, state_bytes(p));
    if (!s) return STATUS_ENOMEM;
    uint8_t *buf = s->snap.buf;
    kern_download(p->k, buf, outer_shared(&p->held.outer, p->held.st), P); /* local steps: p_sync */
    if (recover_state_moments(&p->def.train) == 2)
        kern_download(p->k, buf + at, stage_opt_m(p->held.st), P), at += P;
    kern_download(p->k, buf + at, stage_opt_v(p->held.st), P), at += P;
    memcpy(buf + at, stage_opt_step(p->held.st), 8);
    memcpy(buf + at + 8, &p->contrib.stage_gnorm, 4);
    memcpy(buf + at + 12, &p->rec.lr_scale, 4);
    xfer_snap_seal(&s->snap, p->step);
    s->flags = p->join.go || resume_begun(p) ? 1 : 0; /* training has begun: follow first */
    /* the socket thread answers fresh requests from it too, by the rule of serves_fresh,
     * once the flag can no longer change (training begun) */
    s->fresh_steps = s->flags & 1 ? STEP_KEEP - 4 : 0;
    s->fresh_s = STATE_SNAP_REUSE_S;
    xfer_shared_unref(&p->trans.snap);
    p->trans.snap = s;
    if (p->tp.serve_state) p->tp.serve_state(p->tp.ctx, s);
    return 0;
}

/* The snapshot is served no more (the stage is left, or this replica re-syncs). */
static void unserve(peer_t *p)
{
    if (p->trans.snap && p->tp.serve_state) p->tp.serve_state(p->tp.ctx, NULL);
    xfer_shared_unref(&p->trans.snap);
}

/* Whether a state blob's parameters and moments are all finite numbers. */
static int state_finite(const peer_t *p, const uint8_t *buf)
{
    size_t n = state_floats(p);
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, buf + i * sizeof f, sizeof f);
        if (!isfinite(f)) return 0;
    }
    return 1;
}

static void load_state(peer_t *p, const uint8_t *buf)
{
    size_t P = stage_num_params(p->held.st) * sizeof(float), at = P;
    kern_upload(p->k, stage_params(p->held.st), buf, P);
    if (recover_state_moments(&p->def.train) == 2) {
        kern_upload(p->k, stage_opt_m(p->held.st), buf + at, P), at += P;
    } else { /* m is not carried: zero on every replica (the update never reads it) */
        kern_zero(p->k, stage_opt_m(p->held.st), P);
    }
    kern_upload(p->k, stage_opt_v(p->held.st), buf + at, P), at += P;
    memcpy(stage_opt_step(p->held.st), buf + at, 8);
    float gnorm;
    memcpy(&gnorm, buf + at + 8, 4);
    step_set_stage_gnorm(p, gnorm);
    float scale;
    memcpy(&scale, buf + at + 12, 4);
    recover_set_lr_scale(p, scale);
}

void state_init(peer_t *p)
{
    p->trans.unbegun_at = -1;
    p->trans.snap = NULL;
    p->trans.nobody = timeout_make("download.nobody", 2 * p->po.peer_timeout_s);
    p->trans.another = timeout_make("download.another", 4 * p->po.peer_timeout_s);
}

/* The download's waits start (again) now. */
static void waits_start(peer_t *p)
{
    timeout_start(&p->trans.nobody, p->now);
    timeout_start(&p->trans.another, p->now);
}

void state_drop(peer_t *p)
{
    xfer_destroy(&p->trans.xfer);
    unserve(p);
}

/* Whether the held snapshot serves a fresh request (step -1) now: it is of the current
 * step, or was taken at most STATE_SNAP_REUSE_S ago and is at most STEP_KEEP - 4 steps
 * old, and was sealed with the right "training has begun" flag. Joiners that ask at about
 * the same time share one snapshot (a newer one would refuse the chunks of the older); it
 * may be a few steps old: they catch up through the pool's kept exchange messages. */
static int serves_fresh(const peer_t *p)
{
    if (!p->trans.snap) return 0;
    /* a snapshot sealed before training began says so (STATE_REP flag 1 clear): served
     * after it began, a joiner at step 0 would contribute to a step its mates had
     * half counted without it (sim heavy 4x2 seed 30008067: its update differed) */
    int begun = p->join.go || resume_begun(p);
    if ((p->trans.snap->flags & 1) != begun) return 0;
    return xfer_shared_fresh(p->trans.snap, p->step, p->now - p->trans.snap_at);
}

static int snapshot_now(peer_t *p)
{
    int rc = take_snapshot(p);
    if (!rc) p->trans.snap_at = p->now;
    return rc;
}

/* Whether the held snapshot is being downloaded (xfer_shared_in_use) and its download
 * may still end in time to catch up (at most STEP_KEEP steps old: past that, a follower
 * with a fast link downloads again, and must not be given the same old snapshot: tiny at
 * 100 Mbit/s + 50 ms with held.keep here, a joiner re-synced to a snapshot 20 steps old
 * twice and contributed after 10-11 s instead of 3-4): kept, whatever its age in seconds,
 * until no chunk of it was asked for a while. Once older, a download of it lands too far behind anyway, and the next
 * fresh request gets a new one (a joiner that downloads again must not get the same
 * old snapshot for good). */
static int snap_in_use(const peer_t *p)
{
    return p->trans.snap && p->step - p->trans.snap->snap.step <= STEP_KEEP &&
           xfer_shared_in_use(p->trans.snap, p->now);
}

void state_offer(peer_t *p)
{
    if (p->phase != PHASE_SERVING || !p->held.st || serves_fresh(p) || snap_in_use(p)) return;
    for (int i = 0; i < p->view.n; i++) {
        const msg_member_t *m = &p->view.m[i];
        if (m->state == MEMBER_JOINING && m->stage == p->stage && !peer_is_self(p, m->id)) {
            snapshot_now(p);
            return;
        }
    }
}

void state_on_request(peer_t *p, const msg_t *m)
{
    msg_t r = {.type = MSG_ERROR, .code = STATUS_ENOTFOUND, .stage = m->stage};
    if (m->stage != p->stage || p->phase != PHASE_SERVING) {
        snprintf(r.text, sizeof r.text, "not serving stage %d", m->stage);
        peer_send(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    /* a fresh request is served from the current step; the chunks of that snapshot are
     * served as long as nobody asks for a newer one. A chunk of the current step's state
     * is served from a snapshot taken now: the joiner learned the step from another
     * member, who took its snapshot between the same two steps, so the bytes and the hash
     * are the same. */
    int64_t held = p->trans.snap ? p->trans.snap->snap.step : -1;
    int begun = p->join.go || resume_begun(p);
    /* not while another download of the held one is in progress: a fresh request then
     * shares it (the newcomer catches up, or downloads again), a chunk of another step is
     * refused and asked afresh */
    if (!snap_in_use(p) && ((m->step < 0 && !serves_fresh(p)) ||
                            (m->step >= 0 && m->step == p->step && held != p->step)))
        if (snapshot_now(p)) return;
    const uint8_t *data;
    size_t len;
    msg_t rep;
    if (!p->trans.snap) {
        snprintf(r.text, sizeof r.text, "no snapshot of step %" PRId64 "; now at step %" PRId64,
                 m->step, p->step);
        peer_send(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    if (xfer_serve(&p->trans.snap->snap, m, &rep, &data, &len, p->err)) {
        snprintf(r.text, sizeof r.text, "%s; now at step %" PRId64, p->err, p->step);
        peer_send(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    xfer_shared_served(p->trans.snap, p->now);
    if (begun) rep.flags |= 1; /* training has begun: follow first */
    const void *pl[1] = {data};
    peer_send(p, m->sender, &rep, 1, pl, &len);
}

/* Serving begins: the state is in place (downloaded, restored or initial). */
static void begin_serving(peer_t *p)
{
    outer_begin(&p->held.outer); /* local steps: its round starts from the state taken */
    contrib_begin_serving(&p->contrib, p->now, peer_param_hash(p));
    peer_self_state(p, MEMBER_SERVING);
    /* A newcomer joins the exchange some steps on, so that every member has heard of it
     * (gossip) before the first exchange that counts it; until then it follows the pool.
     * Before the run has started there is nothing to miss. */
    int started = resume_begun(p) || p->trans.donor_started;
    peer_self_serving_from(p, p->trans.downloaded && started ? p->step + 1000 : p->step);
    p->trans.unbegun_at = p->trans.downloaded && !started ? p->step : -1; /* peer.c follow_tick */
    /* a mover's pace counts as one sample: two timed steps of the new pool are enough */
    follow_begin(&p->follow, p->now);
    p->stats.serve_t0 = p->now;
    peer_enter(p, PHASE_SERVING);
    step_reset(p);
    peer_push_self(p);
}

int peer_start_download(peer_t *p, const char *why)
{
    /* what it holds goes back to the senders (they re-route at once) */
    for (int i = 0; i < p->cust.nmbs; i++) {
        mbrec_t *r = &p->cust.mbs[i];
        if (!r->used) continue;
        if (!peer_is_self(p, r->prev)) custody_nack_back(p, r, "re-syncing");
        custody_drop(r);
    }
    /* and so do the forwards that wait in its queue: taken while it served, they would
     * else be dropped unanswered, and their senders wait out custody_s (local --pause
     * random:8 --peers 8 --stages 4 --fault-seed 82: a woken peer took two forwards
     * before it knew it was back, re-synced, and the swarm stood still for 60 s). A queued
     * gradient needs no answer: what it finishes was handed back above. */
    while (p->queue.n) {
        inmsg_t *in = &p->queue.msgs[p->queue.n - 1];
        if (in->m.type == MSG_FWD && !peer_is_self(p, in->m.sender))
            peer_send_nack(p, in->m.sender, &in->m, "re-syncing");
        serve_dequeue(p, p->queue.n - 1);
    }
    /* and its validation rounds with them: a round whose microbatches were all sent waits
     * for losses that will never come (sim pause 4x2 seed 700366 under SWIM: the stage-0
     * leader re-synced at the run's last step holding its validation's microbatches, and
     * the run waited 600 s for that round); the run's own starts again when it serves */
    val_reset(&p->val);
    xfer_destroy(&p->trans.xfer);
    unserve(p); /* its state is about to be replaced */
    follow_unwatch(&p->follow);
    if (!(p->trans.xfer = xfer_new(p->stage, state_bytes(p))))
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    p->trans.download_why = why;
    waits_start(p);
    peer_enter(p, PHASE_DOWNLOAD);
    peer_self_state(p, MEMBER_JOINING);
    peer_push_self(p);
    return 0;
}

/* No live member holds the stage: this peer's own checkpoint of the run, if it has one
 * (1), at the swarm's highest step. Only into a running swarm: when every pool starts
 * afresh nobody owns the step count, so a whole-swarm resume would mix checkpoints of
 * different steps (resume.c agrees on one instead). */
static int restore_own(peer_t *p)
{
    int64_t step = view_swarm_step(&p->view), ck_step = -1;
    char e2[STATUS_ERR_LEN] = "";
    int rr = p->ps && step > 0 ? peer_store_restore(p->ps, p->held.st, p->held.dopt, &ck_step, e2)
                               : STATUS_ENOTFOUND;
    if (rr) {
        if (rr != STATUS_ENOTFOUND) log_warn("peer: checkpoint not used: %s", e2);
        return 0;
    }
    fprintf(p->log,
            "restored: stage %d from this peer's checkpoint of step %" PRId64
            " in %s; the swarm is at step %" PRId64 "\n",
            p->stage, ck_step, p->po.db, step);
    step_set(p, step);
    peer_event(p, "restored", "source=%s ckpt_step=%" PRId64, "own_checkpoint", ck_step);
    p->trans.downloaded = 0;
    return 1;
}

/* ... else the run's initial parameters, at the swarm's highest step: the highest this
 * peer ever saw, though the members that showed it may be gone (a late joiner that found
 * only a member cut off from the others, which then fell silent, took stage 0 at step 0
 * while that member's stage was at step 8: sim restart seed 6101004). */
static void initial_state(peer_t *p)
{
    int64_t step = view_swarm_step(&p->view);
    if (step > 0)
        log_warn("stage %d has no live replica and no checkpoint: it starts from its "
                 "initial parameters at step %" PRId64,
                 p->stage, step);
    step_set(p, step);
    peer_event(p, "joined", "source=%s", "initial");
    p->trans.downloaded = 0;
}

/* Several joiners may find the same stage held by nobody at once (the lost peers coming
 * back, a mover): each would build its own state (a checkpoint, CheckFree from donors a
 * step apart, the seed) and the pool would start split, its members a step apart for
 * good. One takes it: of the stage's joining members, the highest rendezvous hash of
 * (swarm, stage, member); the others wait for it to serve and download from it. Not
 * forever: after 4 failure timeouts (it may be stuck or gone) a joiner takes it itself. */
static int another_takes_it(peer_t *p)
{
    /* the mover every peer chose (recover.c) never waits: it holds the copy an end stage
     * needs, and the lost peers coming back wait for it anyway (2 failure timeouts) */
    if (p->rec.mover || timeout_fired(&p->trans.another, p->now)) return 0;
    const msg_member_t *m;
    int n = view_stage(&p->view, p->stage, 0, &m);
    uint64_t key = rng_mix(p->def.swarm, (uint64_t)p->stage + 0x7a6b), mine, best = 0;
    memcpy(&mine, p->me.entry.id, 8);
    mine = rng_mix(key, mine);
    for (int i = 0; i < n; i++) {
        if (m[i].state != MEMBER_JOINING || peer_is_self(p, m[i].id)) continue;
        uint64_t id;
        memcpy(&id, m[i].id, 8);
        uint64_t h = rng_mix(key, id);
        if (h > best) best = h;
    }
    return best > mine;
}

static void announce(peer_t *p)
{
    char hex[2 * MSG_ID_LEN + 1];
    for (int i = 0; i < MSG_ID_LEN; i++) snprintf(hex + 2 * i, 3, "%02x", p->me.entry.id[i]);
    fprintf(p->log, "peer: id %s\n", hex);
    peer_event(p, "serving", "id=%s params=%zu device=%s threads=%d from=%" PRId64, hex,
               stage_num_params(p->held.st), kern_name(p->k), kern_threads(p->k),
               p->me.entry.serving_from);
    fprintf(p->log,
            "peer: stage %d of %d, %zu parameters, device %s (%d threads), serving from step "
            "%" PRId64 "\n",
            p->stage, p->dims.S, stage_num_params(p->held.st), kern_name(p->k), kern_threads(p->k),
            p->me.entry.serving_from);
    const outer_t *o = &p->held.outer;
    if (outer_on(o))
        fprintf(p->log,
                "peer: local steps: the pool exchanges once every %d steps (outer rate %g x "
                "lr; docs/protocol.md 12.14)\n",
                o->H, (double)o->outer_lr);
    fflush(p->log);
}

/* A resuming peer restored its own checkpoint (resume.c): nothing downloaded, it serves. */
static int serve_restored(peer_t *p)
{
    p->trans.downloaded = 0;
    xfer_destroy(&p->trans.xfer);
    begin_serving(p);
    announce(p);
    return 0;
}

int state_download_tick(peer_t *p)
{
    const msg_member_t *mem;
    int n = view_stage(&p->view, p->stage, 1, &mem), k = 0;
    msg_member_t *donors = p->view.scratch;
    for (int i = 0; i < n; i++)
        if (!peer_is_self(p, mem[i].id) && mem[i].serving_from <= mem[i].step + 1)
            donors[k++] = mem[i];
    /* no contributor: a follower's state is the stage's best (it applied every update it
     * could get), better than the seed */
    for (int i = 0; i < n && !k; i++)
        if (!peer_is_self(p, mem[i].id)) donors[k++] = mem[i];
    int first = p->trans.download_why == NULL;
    if (k) recover_abort(p); /* someone holds the stage after all */
    if (k && p->po.resume) { /* mates resumed already: at a step it has a checkpoint of? */
        int same = 1;
        for (int i = 1; i < k; i++) same &= donors[i].step == donors[0].step;
        if (same && resume_with_mates(p, donors[0].step)) return serve_restored(p);
    }
    if (!k) {
        if (!first) return 0; /* a resync waits for a donor */
        /* Nobody holds the stage, as far as this peer knows. In a running swarm its
         * view may still be filling in (gossip): it gives the others two failure
         * timeouts to show up before it takes the stage from a checkpoint, its
         * neighbours (recover.c) or the seed. A peer that moved here to rebuild the
         * stage has seen it empty already. */
        if (p->po.resume) { /* a whole swarm restarting: agree on a step first */
            int r = resume_tick(p);
            if (r < 0) return r;
            if (r == 3) waits_start(p); /* a mate serves the agreed step soon */
            if (r == 0 || r == 3) return 0;
            if (r == 1) return serve_restored(p);
        }
        int started = peer_swarm_started(p);
        if (started && !p->rec.mover && !p->rec.active &&
            !timeout_fired(&p->trans.nobody, p->now))
            return 0;
        if (started && another_takes_it(p)) { /* it will be a donor once it serves */
            recover_abort(p);
            return 0;
        }
        /* in a running swarm the neighbours (recover.c: CheckFree, and in auto mode this
         * peer's own checkpoint judged against it), else its own checkpoint (one read:
         * restore_own loads it or says there is none), else the initial parameters */
        int mode = p->po.stage_recovery;
        if (started && mode != PEER_RECOVER_CHECKPOINT && recover_possible(p)) {
            int rc = recover_download_tick(p);
            if (rc <= 0) return rc;
        } else if (!restore_own(p)) {
            initial_state(p);
        }
        recover_mover_done(p);
        xfer_destroy(&p->trans.xfer);
        begin_serving(p);
        announce(p);
        return 0;
    }
    int rc = xfer_done(p->trans.xfer);
    if (rc == 1 && !state_finite(p, xfer_data(p->trans.xfer))) {
        /* the hash proves only that the bytes are the donors'; a faulty donor's NaN
         * parameters never reach this replica: refused, fetched again */
        stats_note_rejected(&p->stats);
        log_warn("peer: stage %d's state from the pool holds non-finite values: refused",
                 p->stage);
        xfer_destroy(&p->trans.xfer);
        if (!(p->trans.xfer = xfer_new(p->stage, state_bytes(p))))
            return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        return 0;
    }
    if (rc == 1) {
        load_state(p, xfer_data(p->trans.xfer));
        step_set(p, xfer_step(p->trans.xfer));
        resume_downloaded(p);
        p->trans.downloaded = 1;
        follow_downloaded(&p->follow);
        /* the download runs from its first request; before it, the member set up its
         * stage and corpus (in the pass that began the download: `small` 1.1 s) and
         * waited for a donor that knows it. The two were one figure, "1.39 s waiting for
         * a donor's first answer", where the donor had answered in 3 ms. */
        double asked = xfer_first_asked_at(p->trans.xfer);
        p->trans.dl_at = asked;
        p->trans.dl_s = p->now - asked;
        p->trans.dl_step = p->step;
        fprintf(p->log,
                "state: downloaded stage %d at step %" PRId64
                " (%.1f MB in %.2f s from %d peer(s), %.2f s of set-up before), hash verified\n",
                p->stage, p->step, state_bytes(p) / 1e6, p->now - asked,
                xfer_donors(p->trans.xfer), asked - p->trans.nobody.started_at);
        fflush(p->log);
        peer_event(p, first ? "joined" : "resynced",
                   "source=%s why=%s mb=%.1f seconds=%.2f wait_s=%.2f prep_s=%.2f donors=%d",
                   "pool", p->trans.download_why /* NULL when first */, state_bytes(p) / 1e6,
                   p->now - asked, xfer_fixed_at(p->trans.xfer) - asked,
                   asked - p->trans.nobody.started_at, xfer_donors(p->trans.xfer));
        xfer_destroy(&p->trans.xfer);
        begin_serving(p);
        if (first) announce(p);
        else
            fprintf(p->log, "resynced: stage %d from the pool at step %" PRId64 " (%s)\n",
                    p->stage, p->step, p->trans.download_why);
        return 0;
    }
    if (xfer_restarts(p->trans.xfer) > 50)
        return status_set(p->err, STATUS_ETIMEOUT, "could not download stage %d's state",
                          p->stage);
    /* Donors whose pool steps fast take fresh snapshots and refuse each other's step: after
     * 10 fresh starts one donor serves the whole snapshot (it keeps it while asked) */
    if (xfer_restarts(p->trans.xfer) >= 10 && k > 1) k = 1;
    /* Asks donors that know this member (their gossip carried its entry): a member answers
     * only members in its table, and the socket thread answers a fresh request at once, so
     * a newcomer's first request reached a donor gossip had not told of it yet, went
     * unanswered, and was asked again 10 s later. The member that welcomed it knows it
     * from the start. Once a failure timeout has passed, any. */
    int knowing = 0;
    for (int i = 0; i < k; i++)
        if (view_knows(&p->view, donors[i].id) ||
            !memcmp(donors[i].id, p->join.welcomer, MSG_ID_LEN))
            donors[knowing++] = donors[i];
    if (knowing) k = knowing;
    else if (p->now - p->trans.nobody.started_at < p->po.peer_timeout_s) return 0;
    xfer_req_t req[8];
    int nr = xfer_next_requests(p->trans.xfer, p->now, donors, k, STATE_CHUNK_RETRY_S, req, 8);
    for (int i = 0; i < nr; i++) peer_send(p, req[i].to, &req[i].req, 0, NULL, NULL);
    step_ask_after_snapshot(p);
    return 0;
}
