/* serve.c — a peer's compute: forward and backward passes of the microbatches it is sent,
 * stage 0's data sourcing (each stage-0 member starts its share of the step's M
 * microbatches, and re-runs the ones another pool lost), and the held-out validation at
 * the end of the run. Data messages wait in a queue until the stage can take them.
 * Not for: custody of what was sent on (custody.c), the pool's step (step.c). */
#include "common/log.h"
#include "common/rng.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PENDING 256

/* The peer's throughput: samples per second of compute over a whole microbatch (its
 * forward and backward passes here), a bias-corrected EMA (SWARM). The very first
 * microbatch is left out: it pays for first-touch allocations and cold caches, and one
 * such outlier would weigh on the estimate for dozens of microbatches. */
void serve_note_throughput(peer_t *p, double seconds)
{
    float tp = stats_note_throughput(&p->stats, p->def.train.cfg.batch, seconds);
    if (tp >= 0) peer_self_throughput(p, tp);
}

/* Compute time for the throughput estimate, on the driver's compute clock (po.clock);
 * without one every pass counts 1 ms. */
static double compute_clock(const peer_t *p)
{
    return p->po.clock ? p->po.clock() : 0.0;
}

/* A pass's compute seconds, times po.slowdown (a peer made slower for tests and demos:
 * under peer_run the driver also waits that much longer; in the simulator the node's
 * slow factor plays this part). */
static double pass_seconds(peer_t *p, double t0)
{
    double t = compute_clock(p) - t0;
    if (!(t > 0)) t = 1e-3;
    return p->po.slowdown > 1 ? t * p->po.slowdown : t;
}

/* Encodes what the stage hands over: the output of `slot`'s forward pass, or with
 * slot < 0 dL/dx_in of the last backward pass. *out is a fresh buffer the caller owns. */
static int encode_act(peer_t *p, int slot, uint8_t **out, size_t *len)
{
    size_t cap = stage_wire_size(p->held.st, p->held.wire_codec, p->def.train.codec_block);
    *out = malloc(cap ? cap : 1);
    if (!*out) return STATUS_ENOMEM;
    int rc = slot >= 0 ? stage_wire_encode_output(p->held.st, slot, p->held.wire_codec, p->def.train.codec_block,
                                                  *out, cap, len, p->err)
                       : stage_wire_encode_dx(p->held.st, p->held.wire_codec, p->def.train.codec_block, *out, cap,
                                              len, p->err);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* The backward pass of a held microbatch; its parameter gradient is counted (added to
 * this step's sum) only when the pool still misses the microbatch (step.c). A revisit
 * (CheckFree+: stage 0 or S-1 visited twice) comes back first: its gradient is kept aside
 * with the first visit, whose backward, later, counts both or neither. */
static int backward(peer_t *p, mbrec_t *r)
{
    int revisit = r->hop != r->first;
    int count = !revisit && step_counts(p, &r->mb, r->flags);
    /* a re-sent microbatch (its first attempt may have been counted by a mate whose
     * message is still on its way) is counted in a part of its own: what this member
     * counted before goes out as its part 0 now, so that the pool can leave out just the
     * re-run should both arrive (sim heavy 4x2 seed 6102766: 3 of 4) */
    int rc0 = count ? step_before_resent(p, &r->mb) : 0;
    if (rc0) return rc0;
    size_t off, n;
    stage_part_params(p->held.st, r->part, &off, &n);
    float *g = stage_grads(p->held.st) + off;
    /* host scratch: the gradient kept while a pass that does not count runs, or the one a
     * revisit's gradient is added to */
    if (!contrib_grad_save(&p->contrib, stage_num_params(p->held.st))) return STATUS_ENOMEM;
    if (!count) kern_download(p->k, p->contrib.grad_save, g, n * sizeof(float));
    int rc = stage_backward_part(p->held.st, r->slot, r->part, NULL, NULL, p->err);
    mbrec_t *f = revisit ? custody_find(p, &r->mb, r->first) : NULL;
    if (!rc && f) { /* the revisit's own gradient: after - before */
        free(f->gdelta);
        if (!(f->gdelta = malloc(n * sizeof(float) + 1))) return STATUS_ENOMEM;
        kern_download(p->k, f->gdelta, g, n * sizeof(float));
        for (size_t i = 0; i < n; i++) f->gdelta[i] -= p->contrib.grad_save[i];
        f->gdelta_off = off;
        f->gdelta_n = n;
    }
    if (!count) kern_upload(p->k, g, p->contrib.grad_save, n * sizeof(float));
    if (rc) return rc;
    if (count && r->gdelta) { /* this microbatch's revisit, counted with it */
        float *d = stage_grads(p->held.st) + r->gdelta_off;
        kern_download(p->k, p->contrib.grad_save, d, r->gdelta_n * sizeof(float));
        for (size_t i = 0; i < r->gdelta_n; i++) p->contrib.grad_save[i] += r->gdelta[i];
        kern_upload(p->k, d, p->contrib.grad_save, r->gdelta_n * sizeof(float));
    }
    if (count) step_count(p, &r->mb);
    if (r->mb.step < p->step) p->stats.stale++;
    return count;
}

/* Sends the stage's input gradient (of its last backward pass) to the upstream peer. */
static int send_grad(peer_t *p, const mbrec_t *r, float loss)
{
    path_hop_t h[PATH_HOPS_MAX];
    custody_hops(p, r, h);
    msg_t b = {.type = MSG_BWD,
               .flags = r->flags,
               .mb = r->mb,
               .stage = (int16_t)h[r->hop - 1].stage,
               .loss = loss,
               .nroute = (uint8_t)r->nroute,
               .skip = r->skip};
    b.mb.attempt = r->in_attempt;
    memcpy(b.route, r->route, (size_t)r->nroute * MSG_ID_LEN);
    uint8_t *g = NULL;
    size_t glen = 0;
    int rc = encode_act(p, -1, &g, &glen);
    if (rc) return rc;
    const void *pl[1] = {g};
    stats_note_act_bytes(&p->stats, glen);
    peer_send(p, r->prev, &b, 1, pl, &glen);
    free(g);
    return 0;
}

/* Validation batches of the run's end: val_batches through the whole model, and with
 * the run's val_skip as many again without those stages (SkipPipe at inference). */
static int val_total(const peer_t *p)
{
    return p->def.train.val_batches * (p->def.train.val_skip ? 2 : 1);
}

/* The run's SkipPipe path of training microbatch `index` of `step` (swarm/path.h; the
 * ratio of that step, model/train.h's train_skip_at). */
static uint64_t run_skip(const peer_t *p, int64_t step, uint32_t index)
{
    return path_skip(p->def.train.seed, step, index, p->dims.M, p->dims.S,
                     train_skip_at(&p->def.train, step));
}

static int start_mb(peer_t *p, int64_t step, uint32_t index, int kind, uint8_t flags,
                    uint16_t attempt);

/* Validation during the run (run.val_every > 0), by the leader of stage 0 (val.h): each
 * time its step passes a multiple of val_every it sends the run's val_batches held-out
 * microbatches through the pipeline (forward only, marked with that step: a later stage
 * runs one only once its own pool has reached the step), when no training microbatch
 * is waiting to start. Their mean loss goes to the log, "val: step N val_loss X at T"
 * (T: the clock the peer runs on, CLOCK_MONOTONIC under ZeroMQ), and to the store's
 * events. A round whose losses have not all come back when the next one is due (a peer
 * died with some of them: stage 0 re-sends only after its custody time), or when the
 * run's own validation begins, is given up: its microbatches are dropped. */
static void val_round_drop(peer_t *p, const char *why)
{
    val_round_t *r = &p->val.during;
    if (!val_round_running(r)) return;
    fprintf(p->log, "val: step %" PRId64 ": round given up, %d of %d losses back (%s)\n",
            r->step, r->done, r->total, why);
    peer_event(p, "val_given_up", "val_step=%" PRId64 " back=%d of=%d why=%s", r->step, r->done,
               r->total, why);
    for (int i = 0; i < p->cust.nmbs; i++)
        if (p->cust.mbs[i].used && p->cust.mbs[i].mb.kind == 1 && p->cust.mbs[i].mb.step == r->step)
            custody_drop(&p->cust.mbs[i]);
    val_round_end(r);
}

/* The rounds of validation during the run, at stage 0 (me: this member's place among the
 * step's owners; the first leads, the others follow: val_round_due). 1 when it started a
 * microbatch. */
static int val_round_tick(peer_t *p, int me)
{
    int n = p->def.train.val_batches, every = p->def.train.val_every;
    int due = val_round_due(&p->val, p->step, every, me == 0);
    if (me != 0 || every <= 0) return 0;
    if (due && p->step > 0 && p->step < p->def.train.steps) {
        val_round_drop(p, "the next round is due");
        if (val_round_begin(&p->val.during, p->step, n, n)) return STATUS_ENOMEM;
        p->val.last = p->step;
    }
    int next = val_round_next(&p->val.during);
    if (next < 0 || custody_in_flight(p, 1) >= p->po.in_flight) return 0;
    int rc = start_mb(p, p->val.during.step, (uint32_t)next, 1, 0, 0);
    if (rc == 0) val_round_sent(&p->val.during);
    return rc < 0 ? rc : rc == 0;
}

/* A loss of the round during the run came back (or was computed here). */
static void val_round_loss(peer_t *p, const msg_mb_t *mb, float loss)
{
    val_round_t *r = &p->val.during;
    if (!val_round_add(r, mb->step, mb->index, loss)) return;
    mbrec_t *rec = custody_find(p, mb, 0);
    if (rec) custody_drop(rec);
    if (!val_round_complete(r)) return;
    double v = val_round_mean(r);
    fprintf(p->log, "val: step %" PRId64 " val_loss %.4f at %.3f\n", r->step, v, p->now);
    fflush(p->log);
    peer_event(p, "val_loss", "val_step=%" PRId64 " val_loss=%.4f final=%d", r->step, v, 0);
    val_round_end(r);
}

/* A loss of the run's own validation came back (or was computed here). */
static void val_end_loss(peer_t *p, uint32_t index, float loss)
{
    val_round_add(&p->val.end, p->val.end.step, index, loss);
}

/* Stage 0: the tokens of microbatch mb into p->held.host_tok, and its targets (11.1: what
 * the single-process run's replica index / accum reads at its step step * accum + index %
 * accum; a validation batch: the held-out batch index). */
static void read_batch(peer_t *p, const msg_mb_t *mb, int32_t *targets)
{
    if (mb->kind == 0) {
        int A = p->def.train.accum;
        data_train_batch(p->held.data, p->def.train.seed, mb->index / (uint32_t)A,
                         mb->step * A + mb->index % (uint32_t)A, p->def.train.cfg.batch,
                         p->held.host_tok, targets);
    } else {
        data_val_batch(p->held.data, (int)mb->index % p->def.train.val_batches,
                       p->def.train.val_batches, p->def.train.cfg.batch, p->held.host_tok, targets);
    }
}

/* Overlap (docs/protocol.md 12.8): the source's backward runs on the parameters it holds
 * now. When its pool has applied a step since the microbatch's forward ran here (it was
 * started before the step it belongs to), the forward is run again first, from the same
 * tokens, so that the backward sees the activations of these parameters: the gradient is
 * that of the current parameters at the gradient that came back (which the next stages
 * computed on the first forward's activation). */
static int refresh_forward(peer_t *p, mbrec_t *r)
{
    if (!p->def.train.overlap || r->hop != 0 || r->mb.kind != 0 || r->part != STAGE_PART_ALL ||
        r->fwd_step == p->step)
        return 0;
    read_batch(p, &r->mb, r->targets);
    float loss;
    int rc = stage_forward_part(p->held.st, r->slot, STAGE_PART_ALL, p->held.host_tok, NULL, NULL,
                                NULL, &loss, p->err);
    if (!rc) {
        r->fwd_step = p->step;
        p->stats.refreshed++;
    }
    return rc;
}

/* Stage 0: starts microbatch `index` of `step` (training) or validation batch `index`, as
 * attempt 0, or 1 for one that may be counted already (a gone owner's, source.h; a
 * re-run a REDO asked for). 1: no slot free; 0 started; < 0 error. */
static int start_mb(peer_t *p, int64_t step, uint32_t index, int kind, uint8_t flags,
                    uint16_t attempt)
{
    mbrec_t *r = custody_new(p);
    int slot = custody_free_slot(p);
    if (!r || slot < 0) {
        if (r) r->used = 0;
        return 1;
    }
    r->mb = (msg_mb_t){.step = step, .index = index, .kind = (uint8_t)kind, .attempt = attempt};
    r->out_attempt = attempt;
    r->flags = flags;
    /* its SkipPipe path: the run's schedule for training; for validation none, or (the
     * second round of batches, with the run's val_skip) the stages it leaves out */
    r->skip = kind == 0 ? run_skip(p, step, index)
              : (int)index >= p->def.train.val_batches ? p->def.train.val_skip
                                                 : 0;
    /* and its CheckFree+ swap (training only): hop 0 is then the embedding alone */
    r->swap = kind == 0 ? path_swap(p->def.train.seed, step, index, p->dims.M, p->dims.S, p->def.train.swap, r->skip) : 0;
    path_hop_t h[PATH_HOPS_MAX];
    custody_hops(p, r, h);
    r->part = h[0].part;
    r->slot = slot;
    memcpy(r->prev, p->me.entry.id, MSG_ID_LEN);
    memcpy(r->route[0], p->me.entry.id, MSG_ID_LEN);
    r->nroute = 1;
    r->targets = malloc((size_t)p->dims.BT * sizeof(int32_t));
    if (!r->targets) return STATUS_ENOMEM;
    read_batch(p, &r->mb, r->targets);
    r->fwd_step = p->step;
    if (kind == 0 && step == p->step) contrib_note_first(&p->contrib, p->now);
    double t0 = compute_clock(p);
    float loss, *save = NULL;
    /* overlap: a microbatch of the next step, on the lookahead of this one (source_ahead) */
    const float *ahead = kind == 0 && step > p->step ? step_lookahead(p, &save) : NULL;
    int rc = ahead ? stage_forward_with(p->held.st, ahead, save, slot, r->part, p->held.host_tok,
                                        NULL, NULL, NULL, &loss, p->err)
                   : stage_forward_part(p->held.st, slot, r->part, p->held.host_tok, NULL,
                                        p->dims.S == 1 ? r->targets : NULL, NULL, &loss, p->err);
    if (rc) return rc;
    p->stats.served++;
    if (p->dims.S == 1) { /* the whole model here */
        if (kind == 0) {
            if ((rc = backward(p, r)) < 0) return rc;
            if (rc == 1) contrib_note_loss(&p->contrib, loss);
        } else if (val_round_running(&p->val.end)) {
            val_end_loss(p, index, loss);
        } else {
            val_round_loss(p, &r->mb, loss);
        }
        custody_drop(r);
        serve_note_throughput(p, pass_seconds(p, t0));
        return 0;
    }
    if ((rc = encode_act(p, slot, &r->act, &r->act_len))) return rc;
    r->fwd_s = pass_seconds(p, t0); /* noted with its backward */
    if (kind == 1) r->slot = -1; /* validation needs no backward: the slot is free again */
    custody_forward(p, r, NULL);
    return 0;
}

/* A forward pass for a microbatch from upstream. 1: no free slot, keep it queued. */
/* Whether this member follows its pool (it contributes from a later step than it is at)
 * and a training microbatch of `step` is one it will not count while a mate will: a
 * sender that saw an earlier naming (follow.c names again when a mate heard it too late)
 * routed it here; its gradient would be left out of the pool's exchange, and the pool
 * would ask stage 0 to run it again after its suspicion wait (1.3-2.7 s stalls, two of them
 * in one join: swarm_join under load). Given back, the sender re-routes at once to a mate
 * that contributes. With none, it is served as before (the sender has nobody else). */
static int following_past(peer_t *p, int64_t step)
{
    if (p->me.entry.serving_from <= p->step || step >= p->me.entry.serving_from) return 0;
    const msg_member_t *own;
    int me, k = view_owners(&p->view, p->stage, step, p->me.entry.id, &own, &me);
    return k - (me >= 0) > 0;
}

static int on_fwd(peer_t *p, inmsg_t *in)
{
    msg_t *m = &in->m;
    /* A microbatch of a step this pool has already applied is still served: upstream
     * pools may not have counted it yet and need its gradient. Nothing here counts it
     * (step_counts), and its gradient is computed with this stage's newer weights: at
     * most one step stale, counted as `stale` in the member's stats. */
    /* a training microbatch goes by the run's schedule, which this stage's pool counts by:
     * its skip mask, and its swap (CheckFree+), which says the hops of its path */
    int train = m->mb.kind == 0, valid = path_valid(m->skip, p->dims.S);
    int swap = train && valid ? path_swap(p->def.train.seed, m->mb.step, m->mb.index, p->dims.M, p->dims.S,
                                          p->def.train.swap, m->skip)
                              : 0;
    path_hop_t h[PATH_HOPS_MAX];
    int nh = valid ? path_hops(m->skip, swap, p->dims.S, h) : 0;
    if (m->stage != p->stage || m->nroute < 1 || m->nroute >= nh || h[m->nroute].stage != p->stage) {
        peer_send_nack(p, m->sender, m, "wrong stage");
        return 0;
    }
    if (train && m->skip != run_skip(p, m->mb.step, m->mb.index)) {
        stats_note_rejected(&p->stats);
        peer_send_nack(p, m->sender, m, "not the run's path");
        return 0;
    }
    if (in->pl_len[1] != (size_t)p->dims.BT * sizeof(int32_t)) {
        stats_note_rejected(&p->stats);
        peer_send_nack(p, m->sender, m, "targets of the wrong size");
        return 0;
    }
    int hop = m->nroute, first = path_first_visit(h, hop);
    if (train && first == hop && following_past(p, m->mb.step)) { /* a revisit stays */
        peer_send_nack(p, m->sender, m, "following");
        return 0;
    }
    mbrec_t *old = custody_find(p, &m->mb, hop);
    if (old) custody_drop(old); /* a re-send supersedes what we held */
    /* a revisit runs in its first visit's slot (stage.h), and only here, where it is */
    mbrec_t *fv = first < hop ? custody_find(p, &m->mb, first) : NULL;
    if (first < hop && (!fv || fv->slot < 0)) {
        peer_send_nack(p, m->sender, m, "its first visit is gone");
        return 0;
    }
    int slot = fv ? fv->slot : custody_free_slot(p);
    mbrec_t *r = custody_new(p);
    if (!r || slot < 0) {
        if (r) r->used = 0;
        return 1;
    }
    if (stage_wire_decode(p->held.st, in->pl[0], in->pl_len[0], p->err)) {
        stats_note_rejected(&p->stats);
        peer_send_nack(p, m->sender, m, p->err);
        r->used = 0;
        return 0;
    }
    r->mb = m->mb;
    r->flags = m->flags;
    r->skip = m->skip;
    r->swap = swap;
    r->hop = hop;
    r->first = first;
    r->part = h[hop].part;
    r->in_attempt = m->mb.attempt;
    r->slot = slot;
    memcpy(r->prev, m->sender, MSG_ID_LEN);
    r->nroute = m->nroute + 1;
    memcpy(r->route, m->route, (size_t)m->nroute * MSG_ID_LEN);
    memcpy(r->route[m->nroute], p->me.entry.id, MSG_ID_LEN);
    r->targets = malloc(in->pl_len[1]);
    if (!r->targets) return STATUS_ENOMEM;
    memcpy(r->targets, in->pl[1], in->pl_len[1]);
    int last = hop == nh - 1; /* the loss is here */
    if (train && m->mb.step == p->step) contrib_note_first(&p->contrib, p->now);
    double t0 = compute_clock(p);
    float loss = NAN;
    int rc = stage_forward_part(p->held.st, slot, r->part, NULL, NULL, last ? r->targets : NULL, NULL,
                                &loss, p->err);
    if (rc && kern_status(p->k)) { /* the device failed: nothing it computes is trusted */
        custody_drop(r);
        return status_set(p->err, kern_status(p->k), "the compute device failed: %s",
                          kern_error(p->k));
    }
    if (rc) { /* bad targets from the wire: refuse, keep going */
        stats_note_rejected(&p->stats);
        peer_send_nack(p, m->sender, m, p->err);
        custody_drop(r);
        return 0;
    }
    p->stats.served++;
    p->stats.revisits += first < hop;
    if (!last) {
        if ((rc = encode_act(p, slot, &r->act, &r->act_len))) return rc;
        r->fwd_s = pass_seconds(p, t0); /* noted with its backward */
        if (m->mb.kind == 1) r->slot = -1;
        /* a copy that a later pool may have counted already (its upstream re-sent it, or
         * this pool has counted it: another copy went on before) goes on as a re-send,
         * which the next pool counts in a part of its own (12.4), so that the two copies
         * cost one part, not a message. With overlap: an early forward, parked until its
         * step, served as its source died (sim mild 8x4 seed 1052 --overlap). Without: a
         * forward of the next step parked while this pool finished its step, served after
         * its source died and beside the re-run of it (sim deadlink 6x3 --steps 14 seed
         * 5113: the next pool counted both copies in two members' part 0, left one whole
         * message out and lost a microbatch with every stage alive). */
        if (train && (m->mb.attempt > 0 || step_counted(p, &m->mb))) r->out_attempt = 1;
        custody_forward(p, r, NULL);
        if (m->mb.kind == 1) custody_drop(r); /* validation: the last stage answers the source */
        return 0;
    }
    p->held.last_loss = loss;
    if (m->mb.kind == 1) {
        msg_t b = {
            .type = MSG_BWD, .mb = m->mb, .stage = 0, .loss = loss, .nroute = 1, .skip = m->skip};
        memcpy(b.route, r->route, MSG_ID_LEN);
        const void *pl[1] = {""};
        size_t len[1] = {0};
        peer_send(p, r->route[0], &b, 1, pl, len);
        custody_drop(r);
        return 0;
    }
    /* last stage: the loss, and the backward pass at once */
    if ((rc = backward(p, r)) < 0) return rc;
    serve_note_throughput(p, pass_seconds(p, t0));
    rc = send_grad(p, r, loss);
    custody_drop(r);
    return rc;
}

static int on_bwd(peer_t *p, inmsg_t *in)
{
    msg_t *m = &in->m;
    /* a validation loss comes to the source (hop 0) straight from the last stage; a
     * gradient carries its sender's route, the sender included */
    mbrec_t *r = custody_find(p, &m->mb, m->mb.kind == 1 ? 0 : m->nroute - 2);
    if (m->mb.kind == 1) { /* a validation loss, at the source */
        if (r && p->stage == 0 && !val_round_running(&p->val.end)) {
            val_round_loss(p, &m->mb, m->loss);
            return 0;
        }
        if (r && p->stage == 0 && val_round_add(&p->val.end, p->val.end.step, m->mb.index, m->loss))
            custody_drop(r);
        return 0;
    }
    if (!r || !r->sent || memcmp(r->next, m->sender, MSG_ID_LEN) || r->out_attempt != m->mb.attempt)
        return 0; /* a gradient for a microbatch we re-sent elsewhere, or never had */
    if (r->slot < 0) {
        custody_drop(r);
        return 0;
    }
    double t0 = compute_clock(p);
    int rc = refresh_forward(p, r); /* before the decode: a forward may reuse its buffer */
    if (rc) return rc;
    if (stage_wire_decode(p->held.st, in->pl[0], in->pl_len[0], p->err)) {
        stats_note_rejected(&p->stats);
        custody_reroute(p, r, "its gradient was malformed");
        return 0;
    }
    rc = backward(p, r);
    if (rc < 0) return rc;
    serve_note_throughput(p, r->fwd_s + pass_seconds(p, t0));
    if (r->hop == 0) { /* the source */
        if (rc == 1) contrib_note_loss(&p->contrib, m->loss);
        p->held.last_loss = m->loss;
    } else {
        rc = send_grad(p, r, m->loss);
    }
    custody_drop(r);
    return rc < 0 ? rc : 0;
}

/* Whether this FWD was delivered already: the same sender and seq (unique per sender,
 * 4) within FWD_SEEN_S. A FWD served twice goes on to two members of the next pool, and
 * both count it: one of their messages is then left out whole (sim 8x4 heavy seeds 284,
 * 61; TCP does not deliver twice, the simulator's network may, and so may a relay). A
 * re-send is a new message with a new seq, never taken for a duplicate. */
static int fwd_seen(peer_t *p, const msg_t *m)
{
    for (int i = 0; i < FWD_SEEN; i++) {
        const fwd_seen_t *e = &p->cust.fwd_seen[i];
        if (e->seq == m->seq && p->now - e->at < FWD_SEEN_S &&
            !memcmp(e->sender, m->sender, MSG_ID_LEN))
            return 1;
    }
    fwd_seen_t *e = &p->cust.fwd_seen[p->cust.fwd_seen_next++ % FWD_SEEN];
    memcpy(e->sender, m->sender, MSG_ID_LEN);
    e->seq = m->seq;
    e->at = p->now;
    return 0;
}

void serve_free(peer_t *p)
{
    free(p->queue.msgs);
    p->queue.msgs = NULL;
}

int serve_enqueue(peer_t *p, const net_ev_t *ev)
{
    if (ev->msg.type == MSG_FWD && fwd_seen(p, &ev->msg)) return 0;
    /* forwards beyond MAX_PENDING are refused (the sender re-routes); gradients are
     * always kept: they finish work already done */
    if (p->queue.n >= MAX_PENDING && ev->msg.type == MSG_FWD) {
        peer_send_nack(p, ev->msg.sender, &ev->msg, "busy");
        return 0;
    }
    if (p->queue.n == p->queue.cap) {
        int cap = p->queue.cap ? 2 * p->queue.cap : 64;
        inmsg_t *q = realloc(p->queue.msgs, (size_t)cap * sizeof *q);
        if (!q) return STATUS_ENOMEM;
        p->queue.msgs = q;
        p->queue.cap = cap;
    }
    inmsg_t *in = &p->queue.msgs[p->queue.n];
    memset(in, 0, sizeof *in);
    in->m = ev->msg;
    for (int i = 0; i < ev->nframes && i < 2; i++) {
        in->pl[i] = malloc(ev->frame_len[i] ? ev->frame_len[i] : 1);
        if (!in->pl[i]) return STATUS_ENOMEM;
        memcpy(in->pl[i], ev->frame[i], ev->frame_len[i]);
        in->pl_len[i] = ev->frame_len[i];
    }
    p->queue.n++;
    return 0;
}

void serve_dequeue(peer_t *p, int i)
{
    free(p->queue.msgs[i].pl[0]);
    free(p->queue.msgs[i].pl[1]);
    memmove(&p->queue.msgs[i], &p->queue.msgs[i + 1], (size_t)(p->queue.n - i - 1) * sizeof *p->queue.msgs);
    p->queue.n--;
}

/* Overlap: a gradient of a training microbatch of a later step than its pool's (stage 0
 * started it early) waits in the queue until the pool gets there, as a forward does
 * (12.8): it is counted for its own step, with that step's parameters. */
static int bwd_waits(const peer_t *p, const msg_t *m)
{
    return p->def.train.overlap && m->mb.kind == 0 && m->mb.step > p->step;
}

/* Overlap: a training forward whose source (route[0]) is not, in this member's view, a
 * serving stage-0 member that contributes at the microbatch's step (it left the view, or
 * came back as a new life with the same id: it joins or follows) is dropped, not served.
 * Its source may have started it a step ahead, and it may wait here until the pool
 * reaches that step, longer than the settle wait after which stage 0 starts a gone
 * owner's microbatches again (11.1): served then, both copies would be counted, as first
 * attempts, by two members of a later pool (sim corrupt 6x3 seed 60, mild 6x3 seed 2266
 * --overlap). A re-run a REDO asked for is kept: a follower runs those too (12.7). */
static int source_gone(peer_t *p, const msg_t *m)
{
    if (!p->def.train.overlap || m->mb.kind != 0 || m->nroute < 1 || (m->flags & MSG_FLAG_REDO) ||
        peer_is_self(p, m->route[0]))
        return 0;
    const msg_member_t *s = view_find(&p->view, m->route[0]);
    return !s || s->stage != 0 || s->state != MEMBER_SERVING || s->serving_from > m->mb.step;
}

/* One unit of compute: a gradient to pass back, else a forward of this step. */
int serve_one(peer_t *p, int *did)
{
    *did = 0;
    for (int i = 0; i < p->queue.n; i++)
        if (p->queue.msgs[i].m.type == MSG_BWD && !bwd_waits(p, &p->queue.msgs[i].m)) {
            int rc = on_bwd(p, &p->queue.msgs[i]);
            serve_dequeue(p, i);
            *did = 1;
            return rc;
        }
    for (int i = 0; i < p->queue.n; i++) {
        inmsg_t *in = &p->queue.msgs[i];
        if (in->m.type != MSG_FWD) continue;
        if (in->m.mb.step > p->step) continue; /* its pool step is not here yet */
        if (source_gone(p, &in->m)) {
            /* the source itself is told (its entry here may be behind: it re-routes); a
             * later stage's sender is not, or two members of this pool would hand the
             * microbatch of a gone source back and forth */
            if (in->m.nroute == 1)
                peer_send_nack(p, in->m.sender, &in->m, "its source does not serve stage 0");
            serve_dequeue(p, i--);
            continue;
        }
        int rc = on_fwd(p, in);
        if (rc == 1) continue; /* no free slot */
        serve_dequeue(p, i);
        *did = 1;
        return rc;
    }
    return 0;
}

/* Validation at the end of the run, by the leader of stage 0; its loss also goes to the
 * store's events ("val_loss", like the rounds of --val-every). */
static int validate(peer_t *p)
{
    val_round_t *e = &p->val.end;
    if (!val_round_running(e)) {
        val_round_drop(p, "the run's validation begins");
        if (val_round_begin(e, p->step, val_total(p), p->def.train.val_batches)) return STATUS_ENOMEM;
    }
    if (val_round_complete(e)) {
        p->val.loss = val_round_mean(e);
        double span = p->stats.t_train1 - p->stats.t_train0, half = p->stats.t_train1 - p->stats.t_half;
        int64_t half_steps = p->def.train.steps - p->def.train.steps / 2;
        /* the whole swarm's tokens: every stage-0 peer sources its share */
        double tps = span > 0 ? (double)p->def.train.steps * p->dims.M * p->dims.BT / span : 0.0;
        double tps_half = p->stats.t_half > 0 && half > 0 ? (double)half_steps * p->dims.M * p->dims.BT / half : NAN;
        fprintf(p->log, "tokens/s %.0f\nval_loss %.4f\n", tps, p->val.loss);
        if (isfinite(tps_half))
            fprintf(p->log, "tokens/s of the last %" PRId64 " steps %.0f\n", half_steps, tps_half);
        if (p->def.train.overlap)
            fprintf(p->log,
                    "overlap: %" PRIu64 " microbatches started here before their step, %" PRIu64
                    " forwards run again for their backward\n",
                    p->stats.ahead, p->stats.refreshed);
        if (p->def.train.val_skip) {
            char list[256];
            double vs = val_round_mean_skip(e);
            fprintf(p->log, "val_loss_skip %.4f (stages %s left out; whole model %.4f, %+.1f%%)\n",
                    vs, path_format(p->def.train.val_skip, list, sizeof list), p->val.loss,
                    100.0 * (vs - p->val.loss) / p->val.loss);
            peer_event(p, "val_loss_skip", "val_step=%" PRId64 " val_loss_skip=%.4f skipped=%s",
                       p->step, vs, list);
        }
        fflush(p->log);
        /* as the rounds during the run: status --plot draws the store's val_loss events */
        peer_event(p, "val_loss",
                   "val_step=%" PRId64 " val_loss=%.4f final=%d tokens_per_s=%.0f "
                   "tokens_per_s_half=%.0f half_steps=%" PRId64,
                   p->step, p->val.loss, 1, tps, tps_half, half_steps);
        msg_t d = {.type = MSG_STEP_DONE, .flags = 1, .step = p->step};
        for (int i = 0; i < p->view.n; i++) peer_send(p, p->view.m[i].id, &d, 0, NULL, NULL);
        peer_run_over(p);
        return 0;
    }
    int next = val_round_next(e);
    if (next >= 0 && custody_in_flight(p, 1) < p->po.in_flight) {
        int rc = start_mb(p, e->step, (uint32_t)next, 1, 0, 0);
        if (rc == 0) val_round_sent(e);
        return rc < 0 ? rc : rc == 0;
    }
    /* a validation microbatch whose loss never came back (its route died): ask again */
    return 0;
}

/* Overlap (docs/protocol.md 11.1, 12.8): once this member's part 0 of its step N is out
 * (its gradient of N is whole; what it counts later goes into a supplement), it starts
 * its own microbatches of N+1 while the pool exchanges N: their forward here runs on the
 * parameters of N, their gradient waits for N+1 (bwd_waits) and their backward recomputes
 * the forward (refresh_forward). Only indices that are its own by the rendezvous of N+1's
 * owners in its view, none while an owner that left is remembered (source.h: its
 * microbatches move only after a wait, at their step) or a stage-0 member does not
 * contribute at N+1 yet (joining or following), none while a move of its own waits (move.c),
 * none that swap (CheckFree+: a
 * stage-0 revisit), at most in_flight of them in custody at once. 1 when it started one,
 * 0 when none, < 0 an error. */
static int source_ahead(peer_t *p)
{
    int64_t next = p->step + 1;
    if (!p->def.train.overlap || p->dims.S < 2 || next >= p->def.train.steps || p->source.n > 0 ||
        p->rebal.to >= 0 ||
        !(p->contrib.exch_early || p->contrib.exch_sent) || p->me.entry.serving_from > p->step ||
        custody_in_flight(p, 0) >= p->po.in_flight)
        return 0;
    /* a stage-0 member that does not contribute yet may be named an owner of N+1 while
     * this one starts N+1 ahead of the pool: the naming's margin (timeout_s before the
     * pool reaches it, 9.5) counts from the pool's step, not this early start, and both
     * would start the index it takes over (sim corrupt 8x4 seed 191) */
    for (int i = 0; i < p->view.n; i++) {
        const msg_member_t *v = &p->view.m[i];
        if (v->stage == 0 && !peer_is_self(p, v->id) &&
            (v->state != MEMBER_SERVING || v->serving_from > next))
            return 0;
    }
    const msg_member_t *own;
    int me, n = view_owners(&p->view, 0, next, p->me.entry.id, &own, &me);
    if (me < 0) return 0;
    for (int i = 0; i < p->dims.M; i++) {
        if (view_rendezvous(own, n, rng_mix((uint64_t)next, (uint64_t)i)) != me) continue;
        uint64_t skip = run_skip(p, next, (uint32_t)i);
        if (path_swap(p->def.train.seed, next, (uint32_t)i, p->dims.M, p->dims.S,
                      p->def.train.swap, skip) != PATH_SWAP_NONE)
            continue;
        msg_mb_t mb = {.step = next, .index = (uint32_t)i};
        if (custody_find(p, &mb, 0)) continue;
        int rc = start_mb(p, next, (uint32_t)i, 0, 0, 0);
        if (rc == 0) p->stats.ahead++;
        return rc == 1 ? 0 : rc < 0 ? rc : 1;
    }
    return 0;
}

/* Whether every later stage's pool has applied `step`: each stage 1 .. S-1 has a member
 * in the view that takes part in its exchange, and every such member's gossiped step is
 * past it (a step gossiped is one reached). Then no forward of `step` a gone stage-0
 * owner started can still be counted downstream, and its microbatches wait for no
 * settling (source.h): re-run, they are served there without counting (protocol.md
 * 12.8) and counted at stage 0 alone. Waiting, stage 0 stood 13 s with 3 of 4
 * microbatches missing after its one mate's crash while every later pool had applied the
 * step (sim heavy 8x4 seed 20182: the settle time at its 10 s cap, begun again when the
 * dead mate's entry came back for a while). */
static int later_pools_past(peer_t *p, int64_t step)
{
    for (int s = 1; s < p->dims.S; s++) {
        const msg_member_t *m;
        int n = view_stage(&p->view, s, 1, &m), k = 0;
        for (int i = 0; i < n; i++) {
            if (m[i].serving_from > step) continue; /* a follower counts nothing */
            if (m[i].step <= step) return 0;
            k++;
        }
        if (k == 0) return 0;
    }
    return 1;
}

/* Stage 0: starts the next microbatch this peer owns. 1 when it did work. */
int serve_source(peer_t *p)
{
    if (p->stage != 0 || p->me.entry.state != MEMBER_SERVING) return 0;
    /* re-runs first: another pool lost these and waits for them */
    for (int i = 0; i < p->dims.M && p->contrib.redo_step >= 0; i++) {
        if (!pool_bit(p->contrib.redo_for, i)) continue;
        msg_mb_t mb = {.step = p->contrib.redo_step, .index = (uint32_t)i};
        if (custody_find(p, &mb, 0)) continue;
        /* as a re-send (attempt 1): a copy may be counted already (a REDO duplicated on
         * the way ran twice, two mates counted the re-run in their first parts, and the
         * pool kept one part 0 of the two: sim heavy 4x2 seed 31000701), and a re-send is
         * counted in a part of its own, which the pool can leave out alone (12.4) */
        int rc = start_mb(p, p->contrib.redo_step, (uint32_t)i, 0, MSG_FLAG_REDO, 1);
        if (rc < 0) return rc;
        if (rc == 1) break;
        contrib_redo_started(&p->contrib, i, p->now);
        return 1;
    }
    if (p->me.entry.serving_from > p->step) return 0; /* a follower sources nothing */
    const msg_member_t *own;
    int me, n = view_owners(&p->view, 0, p->step, p->me.entry.id, &own, &me);
    if (me < 0) return 0;
    if (p->step < p->def.train.steps) {
        /* a swarm that resumed from its stores (resume.c) starts again at the agreed step:
         * the same wait as a new swarm's, else two stage-0 members that began serving a
         * moment apart each source the whole step before they see each other */
        int resumed = p->resume.agreed > 0 && p->step == p->resume.agreed;
        if ((p->step == 0 || resumed) && !p->join.go) {
            /* A new swarm waits for its first peers (the run's swarm.wait_peers, which the
             * founding peer set; every stage-0 peer applies it), unless it has started. */
            int serving = 0, joining = 0, staged = 0;
            uint64_t served = 0; /* bit s: stage s has a serving member */
            for (int i = 0; i < p->view.n; i++) {
                int sv = p->view.m[i].state == MEMBER_SERVING, st = p->view.m[i].stage;
                serving += sv;
                joining += p->view.m[i].state == MEMBER_JOINING;
                if (sv && st >= 0 && st < 64) served |= 1ULL << st;
            }
            for (int s = 0; s < p->dims.S && s < 64; s++) staged += (int)((served >> s) & 1);
            /* nobody half-way in: a member still downloading would not know whether it
             * missed step 0 (it learns it from its donor, STATE_REP flag 1); a resumed
             * one: nobody still deciding, downloading or rebuilding. wait_peers is a
             * minimum with a timeout (join.h): a peer that died while the swarm started
             * never serves */
            if (resumed ? joining > 0
                        : !peer_swarm_started(p) &&
                              !join_may_start(&p->join, serving, joining, staged, p->dims.S, p->now))
                return 0;
            if (!join_settled(&p->join, serving, p->now)) return 0; /* let gossip settle */
        }
        if (custody_in_flight_upto(p, p->step) >= p->po.in_flight) return val_round_tick(p, me);
        if (p->stats.t_train0 == 0) p->stats.t_train0 = p->now;
        step_seen(p);
        /* read only for the owners gone (source.h): none, and the walk over every later
         * stage's members is not made on each pass */
        double settle =
            p->source.n == 0 || later_pools_past(p, p->step) ? 0 : custody_settle_time(p);
        for (int i = 0; i < p->dims.M; i++) {
            /* microbatch i of this step belongs to one owner; when an owner is gone only
             * its microbatches pass on, once what it sent had time to be counted
             * (source.h), so no two start the same one */
            int own_it = pool_bit(p->contrib.ubuf, i)
                             ? SOURCE_OTHER
                             : source_owner(&p->source, own, n, me,
                                            rng_mix((uint64_t)p->step, (uint64_t)i), p->step,
                                            p->now, settle);
            if (own_it < SOURCE_MINE) continue;
            msg_mb_t mb = {.step = p->step, .index = (uint32_t)i};
            if (custody_find(p, &mb, 0)) continue;
            int rc = start_mb(p, p->step, (uint32_t)i, 0, 0, own_it == SOURCE_MINE_AGAIN);
            return rc == 1 ? 0 : rc < 0 ? rc : 1;
        }
        int rc = source_ahead(p);
        if (rc) return rc < 0 ? rc : 1;
        return val_round_tick(p, me);
    }
    if (me != 0 || p->ending.over) return 0;
    return validate(p);
}
