/* join.c — how a peer enters a swarm: it starts one (--new: it writes the run text,
 * with the swarm's own settings after the training keys) or asks a bootstrap peer
 * (HELLO every 3 s, 10 tries) and reads the run from WELCOME; then it takes a stage and
 * builds it: kernels, the stage, the optimizer, the corpus (stage 0), the pool's
 * bookkeeping. Every step here returns at once; the peer's phase says where it is.
 * Not for: the stage's state (state.c). */
#include "common/log.h"
#include "common/rng.h"
#include "compress/codec.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Takes a stage and builds it: kernels, the stage, the optimizer, data (stage 0), the
 * pool's bookkeeping. The run is known by now. */
int join_setup_stage(peer_t *p)
{
    const model_config_t *c = &p->def.train.cfg;
    const peer_options_t *po = &p->po;
    p->dims.S = c->stages;
    p->dims.M = p->def.train.replicas * p->def.train.accum;
    p->dims.BT = c->batch * c->seq;
    p->dims.C = c->dim;
    p->held.wire_codec = p->def.train.codec >= 0 ? p->def.train.codec : CODEC_F32;
    recover_stage_setup(p);
    if (po->stage >= p->dims.S)
        return status_set(p->err, STATUS_EINVAL, "--stage %d: the run has %d stages", po->stage,
                          p->dims.S);
    int rs = resume_stage(p);
    peer_take_stage(p, rs >= 0 && rs < p->dims.S ? rs
                       : po->stage >= 0 ? po->stage
                                        : view_weakest_stage(&p->view, p->dims.S, p->me.entry.id));
    if (!peer_kernels(p) ||
        !(p->held.st = stage_new(c, p->stage, p->k, p->held.nslots, p->def.train.seed, p->err)))
        return STATUS_EINVAL;
    const train_options_t *t = &p->def.train;
    if (t->demo_local > 0 && (t->optimizer != TRAIN_DEMO || t->outer_mom > 0 || t->overlap))
        return status_set(p->err, STATUS_EINVAL,
                          "the run's local steps (demo_local=%d) need DeMo, no outer momentum "
                          "(it would be shared state no member serves yet) and no overlap (the "
                          "lookahead reads an update inner steps do not send)",
                          t->demo_local);
    if (p->def.train.grad_delay) /* a measurement of train's (docs/thin-links.md) */
        return status_set(p->err, STATUS_EINVAL,
                          "the run delays every gradient by a step (grad_delay=1): train only");
    if (p->def.train.optimizer == TRAIN_DEMO && !(p->held.dopt = demo_opt_new(p->held.st, &p->def.train.demo, p->err)))
        return STATUS_EINVAL;
    if (p->held.dopt) demo_opt_defer_decay(p->held.dopt, 1); /* decayed at apply: update.c */
    p->held.update = update_rule(p->held.st, p->k, p->held.dopt, &p->def.train.opt);
    if (outer_open(&p->held.outer, t->demo_local, t->outer_lr, t->steps, p->held.st, p->k,
                   p->held.dopt, p->err))
        return STATUS_EINVAL;
    peer_store_bind(p->ps, p->stage, &p->def.train, po->checkpoint_every, po->checkpoint_budget);
    if (p->stage == 0) {
        int rc = peer_open_corpus(p, &p->held.data);
        if (rc) return rc;
    }
    /* records: one per slot, one more per slot for a revisit in it (CheckFree+ swaps: a
     * revisit must always find one, or stage 0 or S-1 waits on itself), and slotless
     * ones (validation at the source) */
    int nomem = custody_alloc(p, 2 * p->held.nslots + 2 * po->in_flight + 8);
    nomem |= step_open(p);
    p->held.host_tok = malloc((size_t)p->dims.BT * sizeof(int32_t));
    p->held.wiring = wiring_new(rng_mix(p->def.train.seed, *(uint64_t *)(void *)p->me.entry.id));
    if (nomem || !p->held.host_tok || !p->held.wiring)
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    peer_push_self(p);
    return 0;
}
void join_free_held(peer_t *p)
{
    free(p->held.host_tok);
    p->held.host_tok = NULL;
    outer_close(&p->held.outer);
    demo_opt_destroy(&p->held.dopt);
    stage_destroy(&p->held.st);
    data_destroy(&p->held.data);
    wiring_destroy(&p->held.wiring);
}

int join_on_welcome(peer_t *p, const net_ev_t *ev)
{
    if (p->phase != PHASE_HELLO) return 0;
    int rc = ev->nframes != 2
                 ? status_set(p->err, STATUS_EMALFORMED, "malformed WELCOME from %s", p->po.join)
                 : run_def_read(&p->def, ev->frame[0], ev->frame_len[0], ev->msg.swarm, p->err);
    if (rc) { /* refused; the next HELLO gets another answer (join.hello) */
        stats_note_rejected(&p->stats);
        log_warn("join: refused a WELCOME from %s: %s", p->po.join, p->err);
        return ++p->join.bad_welcomes >= JOIN_BAD_WELCOMES ? rc : 0;
    }
    p->join.wait_peers = p->def.wait_peers;
    memcpy(p->join.welcomer, ev->msg.sender, MSG_ID_LEN);
    p->tp.set_run(p->tp.ctx, p->def.swarm, p->def.text);
    fprintf(p->log, "swarm: joined %016" PRIx64 " through %s\n", p->def.swarm, p->po.join);
    peer_event(p, "swarm", "swarm=%016" PRIx64 " through=%s", p->def.swarm, p->po.join);
    peer_enter(p, PHASE_VIEW);
    return 0;
}

int join_hello_tick(peer_t *p)
{
    if (p->po.is_new) {
        int rc = run_def_found(&p->def, &p->po.run, p->po.wait_peers, p->me.entry.id, p->err);
        if (rc) return rc;
        p->join.wait_peers = p->def.wait_peers;
        p->tp.set_run(p->tp.ctx, p->def.swarm, p->def.text);
        fprintf(p->log, "swarm: new swarm %016" PRIx64 "\n", p->def.swarm);
        peer_event(p, "swarm", "swarm=%016" PRIx64 " new=%d", p->def.swarm, 1);
        rc = join_setup_stage(p);
        if (rc) return rc;
        return peer_start_download(p, NULL);
    }
    int due = join_hello_due(&p->join, p->now);
    if (due == JOIN_HELLO_WAIT) return 0;
    if (due == JOIN_HELLO_GIVE_UP)
        return status_set(p->err, STATUS_ETIMEOUT, "no answer from %s", p->po.join);
    if (p->tp.hello(p->tp.ctx, p->po.join, p->po.stage, p->err)) return STATUS_ENET;
    return 0;
}
