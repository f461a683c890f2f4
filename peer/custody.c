/* custody.c — the microbatches a peer holds: activation slots, and custody of what it
 * sent downstream until the gradient comes back. When the next hop dies, refuses or
 * stays silent past the custody time, the same activation goes to another peer of that
 * stage (a failure costs one hop of work, never the microbatch).
 * Not for: computing anything (serve.c) or counting microbatches (step.c). */
#include "common/log.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A forward with no next peer to take it is tried again this often. */
#define CUSTODY_RETRY_S 0.05

int custody_alloc(peer_t *p, int n)
{
    p->cust.nmbs = n;
    p->cust.mbs = calloc((size_t)n, sizeof *p->cust.mbs);
    return p->cust.mbs ? 0 : STATUS_ENOMEM;
}

void custody_free(peer_t *p)
{
    for (int i = 0; i < p->cust.nmbs; i++) custody_drop(&p->cust.mbs[i]);
    free(p->cust.mbs);
    p->cust.mbs = NULL;
    p->cust.nmbs = 0;
}

mbrec_t *custody_find(peer_t *p, const msg_mb_t *mb, int hop)
{
    for (int i = 0; i < p->cust.nmbs; i++)
        if (p->cust.mbs[i].used && p->cust.mbs[i].mb.step == mb->step && p->cust.mbs[i].mb.index == mb->index &&
            p->cust.mbs[i].mb.kind == mb->kind && p->cust.mbs[i].hop == hop)
            return &p->cust.mbs[i];
    return NULL;
}

int custody_hops(const peer_t *p, const mbrec_t *r, path_hop_t *h)
{
    return path_hops(r->skip, r->swap, p->dims.S, h);
}

int custody_free_slot(const peer_t *p)
{
    for (int s = 0; s < p->held.nslots; s++) {
        int taken = 0;
        for (int i = 0; i < p->cust.nmbs && !taken; i++) taken = p->cust.mbs[i].used && p->cust.mbs[i].slot == s;
        if (!taken) return s;
    }
    return -1;
}

mbrec_t *custody_new(peer_t *p)
{
    for (int i = 0; i < p->cust.nmbs; i++)
        if (!p->cust.mbs[i].used) {
            memset(&p->cust.mbs[i], 0, sizeof p->cust.mbs[i]);
            p->cust.mbs[i].used = 1;
            p->cust.mbs[i].slot = -1;
            return &p->cust.mbs[i];
        }
    return NULL;
}

void custody_drop(mbrec_t *r)
{
    free(r->act);
    free(r->targets);
    free(r->gdelta);
    memset(r, 0, sizeof *r);
    r->slot = -1;
}

int custody_in_flight(const peer_t *p, int kind)
{
    int n = 0; /* microbatches: a revisit is the same one again */
    for (int i = 0; i < p->cust.nmbs; i++)
        n += p->cust.mbs[i].used && p->cust.mbs[i].mb.kind == kind && p->cust.mbs[i].hop == p->cust.mbs[i].first;
    return n;
}

int custody_in_flight_upto(const peer_t *p, int64_t step)
{
    int n = 0;
    for (int i = 0; i < p->cust.nmbs; i++) {
        const mbrec_t *r = &p->cust.mbs[i];
        n += r->used && r->mb.kind == 0 && r->hop == r->first && r->mb.step <= step;
    }
    return n;
}

/* Where a held microbatch goes next: the stage of its next hop; *back the hop whose peer
 * must take it (a revisit, CheckFree+), else -1. */
static int next_stage(const peer_t *p, const mbrec_t *r, int *back)
{
    path_hop_t h[PATH_HOPS_MAX];
    int n = custody_hops(p, r, h), nx = r->hop + 1;
    if (nx >= n) return -1;
    int f = path_first_visit(h, nx);
    if (back) *back = f < nx ? f : -1;
    return h[nx].stage;
}

/* Whether the peer a revisit must go back to may still take it: it is in the view. Its
 * entry may lag (it sent this microbatch a moment ago: a peer that just moved to the
 * stage, rebuilding it, still shows its old stage elsewhere), so neither its stage nor its
 * state are asked; a peer that cannot take it refuses, and then it is dropped. */
static int back_peer_ok(const peer_t *p, const mbrec_t *r, int back)
{
    return view_find(&p->view, r->route[back]) != NULL;
}

/* A revisit whose peer is gone (or lost the first visit): the microbatch cannot go on
 * along this path. Nothing is lost: the peer it came from holds it (it is also the one it
 * would go back to, r->prev) and is told at once, as by a refusal, so that it re-sends it
 * elsewhere (or, gone itself, the stage before it does, or stage 0's pool starts it
 * again, 11.1) instead of waiting out its custody time. */
static void drop_revisit(peer_t *p, mbrec_t *r, const char *why)
{
    fprintf(p->log, "reroute: t=%.3f step %" PRId64 " microbatch %u: %s; a revisit goes only to "
            "its first visit's peer: dropped here\n", p->now, r->mb.step, r->mb.index, why);
    fflush(p->log);
    peer_event(p, "reroute", "mb=%u mb_step=%" PRId64 " why=%s dropped=%d", r->mb.index,
               r->mb.step, why, 1);
    custody_nack_back(p, r, "its way back is gone");
    custody_drop(r);
}

void custody_nack_back(peer_t *p, const mbrec_t *r, const char *why)
{
    msg_t f = {.mb = r->mb, .stage = (int16_t)p->stage, .nroute = (uint8_t)r->hop};
    f.mb.attempt = r->in_attempt;
    memcpy(f.route, r->route, (size_t)r->hop * MSG_ID_LEN);
    peer_send_nack(p, r->prev, &f, why);
}

/* Sends (or re-sends) a held microbatch to a peer of the next stage on its path chosen
 * by the wiring, avoiding `avoid` (a revisit: to its first visit's peer, nobody else). 0
 * when sent, -1 when no peer is there now, -2 when it was a revisit whose peer is gone:
 * then r is dropped. */
int custody_forward(peer_t *p, mbrec_t *r, const uint8_t *avoid)
{
    const msg_member_t *all;
    int back = -1, to = next_stage(p, r, &back);
    int n = view_stage(&p->view, to, 1, &all), k = 0, pick = -1;
    msg_member_t *cand = p->view.scratch; /* filtered in place */
    if (back >= 0) {
        if (!back_peer_ok(p, r, back)) {
            drop_revisit(p, r, "its first visit's peer is gone");
            return -2;
        }
    } else {
        /* members still following their pool would throw the gradient away: prefer the
         * ones that contribute to this step's exchange */
        for (int i = 0; i < n; i++)
            if (all[i].serving_from <= r->mb.step || r->mb.kind == 1)
                cand[k++] = all[i];
        if (k) n = k;
        pick = wiring_pick(p->held.wiring, cand, n, avoid, 1.0);
        if (pick < 0 && avoid) pick = wiring_pick(p->held.wiring, cand, n, NULL, 1.0);
        if (pick < 0) {
            r->sent = 0;
            return -1;
        }
    }
    msg_t m = {.type = MSG_FWD,
               .flags = r->flags,
               .mb = r->mb,
               .stage = (int16_t)to,
               .nroute = (uint8_t)r->nroute,
               .skip = r->skip};
    m.mb.attempt = r->out_attempt;
    memcpy(m.route, r->route, (size_t)r->nroute * MSG_ID_LEN);
    const void *pl[2] = {r->act, r->targets};
    size_t len[2] = {r->act_len, (size_t)p->dims.BT * sizeof(int32_t)};
    memcpy(r->next, back >= 0 ? r->route[back] : cand[pick].id, MSG_ID_LEN);
    r->sent = 1;
    r->sent_at = p->now;
    if (r->mb.kind == 0) stats_note_act_bytes(&p->stats, r->act_len);
    return peer_send(p, r->next, &m, 2, pl, len);
}

void custody_reroute(peer_t *p, mbrec_t *r, const char *why)
{
    uint8_t failed[MSG_ID_LEN];
    char a[9], b[9];
    memcpy(failed, r->next, MSG_ID_LEN);
    r->out_attempt++;
    if (custody_forward(p, r, failed) == 0) {
        p->stats.retries++;
        fprintf(p->log, "reroute: t=%.3f step %" PRId64 " microbatch %u: %s; re-sent from %s to %s\n",
                p->now, r->mb.step, r->mb.index, why, peer_idhex(failed, a), peer_idhex(r->next, b));
        fflush(p->log);
        peer_event(p, "reroute", "mb=%u mb_step=%" PRId64 " why=%s from=%s to=%s dropped=%d",
                   r->mb.index, r->mb.step, why, peer_idhex(failed, a), peer_idhex(r->next, b), 0);
    }
    /* else: retried when the next stage has a peer again (custody_tick), or dropped (a
     * revisit whose peer is gone: drop_revisit logged it) */
}

/* When a forward's wait for its gradient began: when it was sent; for one this source
 * started before its step (overlap, serve.c), when this member reached that step: until
 * then the next pools hold it back by rule (docs/protocol.md 12.8), not for a failure, and
 * a re-send for time would only make a second copy (sim mild 4x2 seed 82 --overlap: both
 * were counted, 3 of 4). INFINITY: not yet. */
static double wait_from(const peer_t *p, const mbrec_t *r)
{
    double from = r->sent_at > r->parked_at ? r->sent_at : r->parked_at;
    if (r->mb.kind != 0 || r->hop != 0 || r->fwd_step >= r->mb.step) return from;
    if (r->mb.step > p->step) return INFINITY;
    return from > p->contrib.step_t0 ? from : p->contrib.step_t0;
}

/* Overlap: a forward whose next peer's pool, as its member entry says, or any later pool,
 * as its members' entries say, has not reached the microbatch's step waits there by rule
 * (12.8); its wait for time starts again while so. Stages run further apart with the
 * overlap, and a re-send of a forward a later pool held made two copies there (sim heavy
 * 6x3 seeds 2048, 2306 --overlap). */
static void note_parked(peer_t *p, mbrec_t *r)
{
    if (!p->def.train.overlap || r->mb.kind != 0 || !r->sent) return;
    const msg_member_t *nx = view_find(&p->view, r->next);
    int held = nx && nx->state == MEMBER_SERVING && nx->step < r->mb.step;
    for (int s = p->stage + 1; !held && s < p->dims.S; s++) {
        int64_t top = view_max_step(&p->view, s);
        held = top >= 0 && top < r->mb.step;
    }
    if (held) r->parked_at = p->now;
}

/* The record's case for custody_act, with a NACK's reason or none. */
static custody_case_t case_of(const peer_t *p, const mbrec_t *r, const char *nack)
{
    int back = -1, to = next_stage(p, r, &back);
    return (custody_case_t){.sent = r->sent,
                            .sent_at = wait_from(p, r),
                            .wait_s = r->sent ? custody_time(p, r) : 0,
                            .next = r->sent ? view_find(&p->view, r->next) : NULL,
                            .next_stage = to,
                            .revisit = back >= 0,
                            .nack = nack};
}

/* Acts on custody_act's answer for r; `timeouts`: a re-send for time is taken too. */
static void act_on(peer_t *p, mbrec_t *r, const char *nack, int timeouts)
{
    custody_case_t c = case_of(p, r, nack);
    if (!timeouts) c.wait_s = INFINITY;
    const char *why;
    int a = custody_act(&c, p->now, &why);
    if (a == CUSTODY_DROP)
        drop_revisit(p, r, why);
    else if (a == CUSTODY_REROUTE)
        custody_reroute(p, r, why);
}

void custody_on_view(peer_t *p)
{
    for (int i = 0; p->held.st && i < p->cust.nmbs; i++) {
        mbrec_t *r = &p->cust.mbs[i];
        if (r->used && r->sent) act_on(p, r, NULL, 0);
    }
}

void custody_on_nack(peer_t *p, const msg_t *m)
{
    mbrec_t *r = custody_find(p, &m->mb, m->nroute - 1); /* it echoes the FWD's hop */
    if (!r || !r->sent || memcmp(r->next, m->sender, MSG_ID_LEN)) return;
    char why[MSG_TEXT_MAX + 32];
    snprintf(why, sizeof why, "refused (%s)", m->text);
    custody_case_t c = case_of(p, r, why);
    c.wait_s = INFINITY;
    const char *w;
    /* "busy" is told by the text itself: the rule keeps a busy refusal re-sendable */
    c.nack = strcmp(m->text, "busy") ? why : "busy";
    int a = custody_act(&c, p->now, &w);
    if (a == CUSTODY_DROP)
        drop_revisit(p, r, why);
    else
        custody_reroute(p, r, why);
}

/* How long a forward waits for its gradient: the custody time on stage 0, less on each
 * later stage in proportion to the stages still to come, so that the hop nearest a loss
 * re-sends first. With one time for every hop, a forward lost between stages 1 and 2 was
 * re-sent by stage 1 and, at the same moment, by stage 0 (whose gradient had not come
 * back either): two members counted it, the pool left one's exchange message out and
 * lost its other microbatches (sim mild 3x2 seed 1140). */
double custody_next_deadline(const peer_t *p)
{
    double at = INFINITY;
    for (int i = 0; i < p->cust.nmbs; i++) {
        const mbrec_t *r = &p->cust.mbs[i];
        if (!r->used || !r->act) continue;
        /* one not sent yet (no next peer to take it) is tried again soon */
        double d = r->sent ? wait_from(p, r) + custody_time(p, r) : p->now + CUSTODY_RETRY_S;
        if (d < at) at = d;
    }
    return at;
}

double custody_settle_time(const peer_t *p)
{
    return custody_settle(&p->cust.fb_rtt, p->po.peer_timeout_s, p->po.custody_s);
}

double custody_time(const peer_t *p, const mbrec_t *r)
{
    int later = p->dims.S - 1 - p->stage, span = p->dims.S - 1;
    if (r->swap) { /* CheckFree+: by the hops still to come, each allowed what a hop of an
                    * unswapped path is (the last stage may hold one too). Scaled to the
                    * longer path's own length instead, a swapped hop re-sent sooner than an
                    * unswapped one during a stall, and the two copies were both counted
                    * (sim mild 8x4 --swap 0.5 seed 5607) */
        path_hop_t h[PATH_HOPS_MAX];
        later = custody_hops(p, r, h) - 1 - r->hop;
    }
    return custody_wait(p->po.custody_s, later, span, &p->cust.fb_rtt);
}

void custody_on_gradient(peer_t *p, const msg_t *m)
{
    if (m->mb.kind != 0) return;
    mbrec_t *r = custody_find(p, &m->mb, m->nroute - 2); /* the sender's route, itself in */
    if (!r || !r->sent || memcmp(r->next, m->sender, MSG_ID_LEN) || m->mb.attempt != r->out_attempt)
        return;
    rtt_note(&p->cust.fb_rtt, p->now - r->sent_at);
}

void custody_mend(peer_t *p, const uint8_t id[MSG_ID_LEN])
{
    if (p->tp.reconnect) p->tp.reconnect(p->tp.ctx, id);
}

/* A validation microbatch's loss comes from the last stage straight to its source (the
 * last stage answers the source), so a dead link from there is mended too, not only the
 * one to the next hop: sim deadlink 6x3 --steps 14 seed 6004 re-sent the final
 * validation for 570 s while every answer died on the link back. */
static void mend_last_stage(peer_t *p)
{
    const msg_member_t *m;
    int n = view_stage(&p->view, p->dims.S - 1, 1, &m);
    for (int i = 0; i < n; i++) custody_mend(p, m[i].id);
}

void custody_tick(peer_t *p)
{
    for (int i = 0; i < p->cust.nmbs; i++) {
        mbrec_t *r = &p->cust.mbs[i];
        if (!r->used || !r->act) continue;
        if (!r->sent) {
            custody_forward(p, r, NULL);
            continue;
        }
        note_parked(p, r);
        custody_case_t c = case_of(p, r, NULL);
        const char *why;
        if (custody_overdue(&c, p->now, &why) != CUSTODY_REROUTE) continue;
        if (c.next) custody_mend(p, r->next);
        if (r->mb.kind == 1 && p->stage == 0 && p->dims.S > 2) mend_last_stage(p);
        custody_reroute(p, r, why);
    }
}
