/* move.c — a serving peer changes stage: it hands back what it holds (its senders
 * re-route), drops everything that belonged to the old stage (the stage, optimizer,
 * corpus, pool bookkeeping, records) and builds the new one as a joiner would, then
 * takes the new stage's state the usual way (state.c: download from the pool, else a
 * checkpoint or the seed). Rebalancing and the recovery of a lost stage both move peers.
 * Rebalancing's decision is rebal.h's; here the peer records each stage's throughput and
 * makes a decided move at a clean moment (move_rebal_tick).
 * Not for: deciding who moves (rebal.h, recover.c). */
#include "peer/peer_event.h"
#include "peer/peer_impl.h"
#include "swarm/rebalance.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Frees what join_setup_stage built for the old stage; the kernels, the store and the
 * copies kept for CheckFree+ stay (a mover rebuilding a lost end stage needs its copy). */
void peer_drop_stage(peer_t *p)
{
    guard_forget_norms(&p->guard); /* another stage's updates have another scale */
    custody_free(p);
    while (p->queue.n) serve_dequeue(p, p->queue.n - 1);
    /* its exchange messages stay answerable: a mate that missed one (a connection reset)
     * asks the member that moved, which no longer holds the stage */
    pool_destroy(&p->moved.pool);
    p->moved.pool = step_close(p);
    p->moved.stage = p->stage;
    val_reset(&p->val);
    state_drop(p);
    recover_drop_stage(p); /* a fetch for the old stage's neighbourhood */
    join_free_held(p);
    join_left_stage(&p->join);
    /* its speed is measured again on the new stage's work (the old stage's may differ a
     * lot: the embedding, the LM head); until then the swarm sees it as unmeasured */
    stats_forget_throughput(&p->stats);
    peer_self_throughput(p, 0);
    peer_self_loss(p, NAN);
    rebal_reset(&p->rebal);
}

void move_free(peer_t *p)
{
    pool_destroy(&p->moved.pool);
}

void move_on_exch_req(peer_t *p, const msg_t *m)
{
    if (!p->moved.pool || m->stage != p->moved.stage) return;
    step_answer_exch_req(p, p->moved.pool, p->moved.stage, m);
}

int peer_move(peer_t *p, int stage, const char *why)
{
    if (stage < 0 || stage >= p->dims.S || stage == p->stage)
        return status_set(p->err, STATUS_EINVAL, "peer: cannot move from stage %d to %d",
                          p->stage, stage);
    int from = p->stage;
    /* Pools step together (a stage's microbatches wait for the other stages' steps): a
     * contributor's pace of its old pool is its new pool's, and spares it timing the new
     * pool for as long before it contributes (step.c) */
    follow_moving(&p->follow, p->me.entry.serving_from <= p->step);
    /* what it holds goes back to the senders (they re-route at once) */
    peer_start_download(p, why);
    peer_drop_stage(p);
    p->po.stage = stage;
    int rc = join_setup_stage(p);
    if (rc) return rc;
    fprintf(p->log, "moved: stage %d -> %d (%s)\n", from, stage, why);
    fflush(p->log);
    peer_event(p, "moved", "from=%d to=%d why=%s", from, stage, why);
    return peer_start_download(p, NULL);
}

/* ---- rebalancing (rebal.h decides; here the peer acts) ------------------------------- */

int peer_request_move(peer_t *p, int stage, const char *why)
{
    if (p->phase != PHASE_SERVING || stage < 0 || stage >= p->dims.S || stage == p->stage)
        return status_set(p->err, STATUS_EINVAL, "peer: no move from stage %d to %d", p->stage,
                          stage);
    rebal_ask(&p->rebal, stage, p->view.m, p->view.n, why);
    return 0;
}

int move_rebal_tick(peer_t *p)
{
    rebal_t *r = &p->rebal;
    if (p->dims.S < 2 || p->ending.over || p->phase != PHASE_SERVING) return 0;
    /* A decided move waits for a clean moment: right after this member has sent its
     * exchange message of the pool's current step (its share of the step is then in
     * every mate's hands, and mates that count it as an exchange member do not wait for
     * a message that would never come). A change of placement meanwhile calls it off. */
    if (r->to >= 0) {
        if (!rebal_stands(r, p->view.m, p->view.n)) return 0;
        if (!p->contrib.exch_sent) return 0; /* (a follower asked to move waits until it contributes) */
        /* overlap: nor while it holds microbatches it started ahead of its step (serve.c):
         * a member still in the view at another stage is no gone owner (source.h), so its
         * mates would start them again at once, and both copies be counted (sim heavy 6x3
         * --moves 0.05 seed 37). It starts none while a move waits. */
        if (custody_in_flight(p, 0) > custody_in_flight_upto(p, p->step)) return 0;
        char why[sizeof r->why];
        snprintf(why, sizeof why, "%s", r->why);
        return peer_move(p, rebal_take(r), why);
    }
    /* each stage's throughput over time, in the store (status --db shows the events) */
    if (p->ps && rebal_record_due(r, p->now)) {
        double tp[REBALANCE_MAX_STAGES];
        int cnt[REBALANCE_MAX_STAGES];
        rebalance_totals(p->view.m, p->view.n, p->dims.S < REBALANCE_MAX_STAGES ? p->dims.S : 1, tp, cnt);
        for (int s = 0; s < p->dims.S && s < REBALANCE_MAX_STAGES; s++)
            peer_event(p, "stage_load", "of=%d peers=%d samples_per_s=%.1f", s, cnt[s], tp[s]);
    }
    rebal_in_t in = {.view = p->view.m,
                     .n = p->view.n,
                     .S = p->dims.S,
                     .self = p->me.entry.id,
                     .stage = p->stage,
                     .step = p->step,
                     .steps = p->def.train.steps,
                     .cooldown_s = p->po.rebalance_cooldown_s,
                     .margin = p->po.rebalance_margin,
                     .off = p->po.no_rebalance};
    rebal_decide(r, &in, p->now);
    return 0;
}
