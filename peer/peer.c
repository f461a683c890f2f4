/* peer.c — a swarm peer as a composition of state machines: its lifecycle (join, take a
 * stage, download the stage's state, serve, leave), a dispatch table from message types
 * to the part that owns them, and the timers. The parts: custody.c (what it holds and
 * sent), serve.c (compute), step.c (its pool's step), swarm/pool.c, swarm/xfer.c,
 * swarm/view.c. peer_run drives it with the ZeroMQ network thread.
 * Not for: sockets (swarm/net.c), launching peers (tools/). */
#include "common/clock.h"
#include "common/log.h"
#include "common/rng.h"
#include "compress/codec.h"
#include "peer/peer_impl.h"
#include "swarm/http.h"
#include "swarm/net.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>

peer_options_t peer_defaults(void)
{
    peer_options_t po = {0};
    po.run = train_defaults();
    po.listen = "tcp://127.0.0.1:0";
    po.stage = -1;
    po.in_flight = 2;
    po.slots = 0; /* 2 x in_flight + 2 */
    po.peer_timeout_s = 3.0;
    po.custody_s = 60.0;
    po.exit_when_done = 1;
    po.device = "cpu";
    po.log_every = 1;
    po.die_at_step = -1;
    return po;
}

/* ---- small helpers --------------------------------------------------------------------- */

/* Whether training has begun: some other member has served a microbatch or stepped. */
int peer_swarm_started(const peer_t *p)
{
    for (int i = 0; i < p->view.n; i++)
        if (!peer_is_self(p, p->view.m[i].id) && (p->view.m[i].step > 0 || p->view.m[i].served > 0))
            return 1;
    return p->step > 0 || p->served > 0;
}

int peer_is_self(const peer_t *p, const uint8_t *id)
{
    return !memcmp(p->id, id, MSG_ID_LEN);
}

const char *peer_idhex(const uint8_t *id, char buf[9])
{
    return msg_id_short(id, buf);
}

/* The parameters' fingerprint (kernels.h hash64: the same on every backend). */
uint64_t peer_param_hash(peer_t *p)
{
    return p->k->hash64(p->k, stage_params(p->st), stage_num_params(p->st));
}

int peer_send(peer_t *p, const uint8_t *dest, msg_t *m, int n, const void *const *pl,
              const size_t *len)
{
    if (peer_is_self(p, dest)) return 0;
    char err[STATUS_ERR_LEN];
    int rc = p->tp.send(p->tp.ctx, dest, m, n, pl, len, err);
    if (rc) log_warn("peer: send %s: %s", msg_type_name(m->type), err);
    return rc;
}

void peer_push_self(peer_t *p)
{
    p->self.step = p->step;
    p->self.served = p->served;
    p->self.retries = p->retries;
    p->self.rejected = p->rejected; /* the transport adds its own */
    p->self.stage = (int16_t)p->stage;
    p->tp.set_self(p->tp.ctx, &p->self);
    p->last_self_push = p->now;
}

static size_t state_bytes(const peer_t *p)
{
    return 3 * stage_num_params(p->st) * sizeof(float) + 8;
}

/* ---- lifecycle ------------------------------------------------------------------------- */

peer_t *peer_new(const peer_options_t *po, const transport_t *tp, const uint8_t id[MSG_ID_LEN],
                 char *err)
{
    if (po->in_flight < 1 || po->slots < 0 || po->peer_timeout_s <= 0 || po->custody_s <= 0) {
        status_set(err, STATUS_EINVAL, "in-flight, slots and timeouts must be positive");
        return NULL;
    }
    if (!po->is_new && !po->join) {
        status_set(err, STATUS_EINVAL, "give --new or --join ENDPOINT");
        return NULL;
    }
    if (po->checkpoint_every && !po->db) {
        status_set(err, STATUS_EINVAL, "--checkpoint-every needs --db PATH (the store)");
        return NULL;
    }
    peer_t *p = calloc(1, sizeof *p);
    if (!p) {
        status_set(err, STATUS_ENOMEM, "peer: out of memory");
        return NULL;
    }
    p->po = *po;
    p->tp = *tp;
    p->log = po->log ? po->log : stdout;
    memcpy(p->id, id, MSG_ID_LEN);
    p->phase = PHASE_HELLO;
    p->stage = -1;
    p->self.loss = NAN;
    p->val_loss = NAN;
    p->redo_step = -1;
    p->snap.step = -1;
    p->nslots = po->slots > 0 ? po->slots : 2 * po->in_flight + 2;
    memcpy(p->self.id, id, MSG_ID_LEN);
    p->self.state = MEMBER_JOINING;
    return p;
}

/* Takes a stage and builds it: kernels, the stage, the optimizer, data (stage 0), the
 * pool's bookkeeping. The run is known by now. */
static int setup_stage(peer_t *p)
{
    const model_config_t *c = &p->run.cfg;
    const peer_options_t *po = &p->po;
    p->S = c->stages;
    p->M = p->run.replicas * p->run.accum;
    p->BT = c->batch * c->seq;
    p->C = c->dim;
    p->wire_codec = p->run.codec >= 0 ? p->run.codec : CODEC_F32;
    if (po->stage >= p->S)
        return status_set(p->err, STATUS_EINVAL, "--stage %d: the run has %d stages", po->stage,
                          p->S);
    p->stage = po->stage >= 0 ? po->stage : view_weakest_stage(&p->view, p->S, p->id);
    if (!(p->k = kern_new(po->device, po->threads, p->err)) ||
        !(p->st = stage_new(c, p->stage, p->k, p->nslots, p->run.seed, p->err)))
        return STATUS_EINVAL;
    if (p->run.optimizer == TRAIN_DEMO && !(p->dopt = demo_opt_new(p->st, &p->run.demo, p->err)))
        return STATUS_EINVAL;
    peer_store_bind(p->ps, p->stage, &p->run, po->checkpoint_every, po->checkpoint_budget);
    if (p->stage == 0) {
        /* the run's corpus: this peer's --data checked against the run's checksum, or the
         * run's URL fetched (once, into the cache; the only wait of the peer's life, at
         * set-up; the network thread keeps it alive meanwhile) */
        char corpus[4096];
        int rc = http_data_for_run(po->data_path, p->run.data_url, p->run.data_sha256, p->log,
                                   corpus, sizeof corpus, p->err);
        if (rc) return rc;
        if (!corpus[0] && (rc = data_ensure_default(p->err))) return rc;
        if (!(p->data = data_open(corpus[0] ? corpus : data_default_path(), c->seq, 0.05, p->err)))
            return STATUS_EINVAL;
    }
    size_t nb = ((size_t)p->M + 7) / 8;
    p->nmbs = p->nslots + 2 * po->in_flight + 8;
    p->mbs = calloc((size_t)p->nmbs, sizeof *p->mbs);
    p->ubuf = calloc(nb, 1);
    p->redo_for = calloc(nb, 1);
    p->sent_bits = calloc(nb, 1);
    p->pool = pool_new(p->M);
    p->host_tok = malloc((size_t)p->BT * sizeof(int32_t));
    p->wiring = wiring_new(rng_mix(p->run.seed, *(uint64_t *)(void *)p->id));
    if (!p->mbs || !p->ubuf || !p->redo_for || !p->sent_bits || !p->pool || !p->host_tok ||
        !p->wiring)
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    p->self.stage = (int16_t)p->stage;
    peer_push_self(p);
    return 0;
}

/* The state a member serves: params | adam m | adam v | adam step, as of its current
 * step (handlers run between steps, never inside one). */
static int take_snapshot(peer_t *p)
{
    size_t P = stage_num_params(p->st) * sizeof(float);
    if (xfer_snap_reserve(&p->snap, state_bytes(p))) return STATUS_ENOMEM;
    p->k->download(p->k, p->snap.buf, stage_params(p->st), P);
    p->k->download(p->k, p->snap.buf + P, stage_opt_m(p->st), P);
    p->k->download(p->k, p->snap.buf + 2 * P, stage_opt_v(p->st), P);
    memcpy(p->snap.buf + 3 * P, stage_opt_step(p->st), 8);
    xfer_snap_seal(&p->snap, p->step);
    return 0;
}

static void load_state(peer_t *p, const uint8_t *buf)
{
    size_t P = stage_num_params(p->st) * sizeof(float);
    p->k->upload(p->k, stage_params(p->st), buf, P);
    p->k->upload(p->k, stage_opt_m(p->st), buf + P, P);
    p->k->upload(p->k, stage_opt_v(p->st), buf + 2 * P, P);
    memcpy(stage_opt_step(p->st), buf + 3 * P, 8);
}

static void on_state_req(peer_t *p, const msg_t *m)
{
    msg_t r = {.type = MSG_ERROR, .code = STATUS_ENOTFOUND, .stage = m->stage};
    if (m->stage != p->stage || p->phase != PHASE_SERVING) {
        snprintf(r.text, sizeof r.text, "not serving stage %d", m->stage);
        peer_send(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    /* a fresh request is served from the current step; the chunks of that snapshot are
     * served as long as nobody asks for a newer one */
    /* Joiners that ask at about the same time share one snapshot (a newer one would
     * refuse the chunks of the older); it may be a few steps old: they catch up through
     * the pool's kept exchange messages. */
    if (m->step < 0 && p->snap.step != p->step &&
        (p->snap.step < 0 || p->snap.step < p->step - (STEP_KEEP - 4) || p->now - p->snap_at > 5.0)) {
        if (take_snapshot(p)) return;
        p->snap_at = p->now;
    }
    const uint8_t *data;
    size_t len;
    msg_t rep;
    if (xfer_serve(&p->snap, m, &rep, &data, &len, p->err)) {
        snprintf(r.text, sizeof r.text, "%s; now at step %" PRId64, p->err, p->step);
        peer_send(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    if (p->go || peer_swarm_started(p)) rep.flags |= 1; /* training has begun: follow first */
    const void *pl[1] = {data};
    peer_send(p, m->sender, &rep, 1, pl, &len);
}

/* Serving begins: the state is in place (downloaded, restored or initial). */
static void begin_serving(peer_t *p)
{
    p->my_hash = peer_param_hash(p);
    p->self.state = MEMBER_SERVING;
    /* A newcomer joins the exchange some steps on, so that every member has heard of it
     * (gossip) before the first exchange that counts it; until then it follows the pool.
     * Before the run has started there is nothing to miss. */
    int started = peer_swarm_started(p) || p->donor_started;
    p->self.serving_from = p->downloaded && started ? p->step + 1000 : p->step;
    p->followed = 0;
    p->step_t0 = p->now;
    p->follow_since = p->now;
    p->phase = PHASE_SERVING;
    step_reset(p);
    peer_push_self(p);
}

int peer_start_download(peer_t *p, const char *why)
{
    /* what it holds goes back to the senders (they re-route at once) */
    for (int i = 0; i < p->nmbs; i++) {
        mbrec_t *r = &p->mbs[i];
        if (!r->used) continue;
        if (!peer_is_self(p, r->prev)) {
            msg_t n = {.type = MSG_NACK, .mb = r->mb, .stage = (int16_t)p->stage};
            n.mb.attempt = r->in_attempt;
            snprintf(n.text, sizeof n.text, "re-syncing");
            peer_send(p, r->prev, &n, 0, NULL, NULL);
        }
        custody_drop(r);
    }
    while (p->npending) serve_dequeue(p, p->npending - 1);
    xfer_destroy(&p->xfer);
    if (!(p->xfer = xfer_new(p->stage, state_bytes(p))))
        return status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
    p->download_why = why;
    p->xfer_t0 = p->now;
    p->phase = PHASE_DOWNLOAD;
    p->self.state = MEMBER_JOINING;
    peer_push_self(p);
    return 0;
}

/* No live member holds the stage: this peer's own checkpoint of the run, else the seed. */
static void state_from_nobody(peer_t *p)
{
    int64_t step = view_max_step(&p->view, -1), ck_step = -1;
    if (step < 0) step = 0;
    char e2[STATUS_ERR_LEN] = "";
    /* Only into a running swarm: when every pool starts afresh nobody owns the step
     * count, so a whole-swarm resume would mix checkpoints of different steps. */
    int rr = p->ps && step > 0 ? peer_store_restore(p->ps, p->st, p->dopt, &ck_step, e2)
                               : STATUS_ENOTFOUND;
    if (rr == 0) {
        fprintf(p->log,
                "restored: stage %d from this peer's checkpoint of step %" PRId64
                " in %s; the swarm is at step %" PRId64 "\n",
                p->stage, ck_step, p->po.db, step);
        peer_store_event(p->ps, "restored",
                         "stage %d from the checkpoint of step %" PRId64
                         "; the swarm is at step %" PRId64,
                         p->stage, ck_step, step);
    } else {
        if (rr != STATUS_ENOTFOUND) log_warn("peer: checkpoint not used: %s", e2);
        if (step > 0)
            log_warn("stage %d has no live replica and no checkpoint: it starts from its "
                     "initial parameters at step %" PRId64,
                     p->stage, step);
        peer_store_event(p->ps, "joined", "stage %d at step %" PRId64 ": initial parameters",
                         p->stage, step);
    }
    p->step = step;
    p->downloaded = 0;
}

static void announce(peer_t *p)
{
    char hex[2 * MSG_ID_LEN + 1];
    for (int i = 0; i < MSG_ID_LEN; i++) snprintf(hex + 2 * i, 3, "%02x", p->id[i]);
    fprintf(p->log, "peer: id %s\n", hex);
    fprintf(p->log,
            "peer: stage %d of %d, %zu parameters, device %s (%d threads), serving from step "
            "%" PRId64 "\n",
            p->stage, p->S, stage_num_params(p->st), p->k->name, p->k->threads,
            p->self.serving_from);
    fflush(p->log);
}

static int download_tick(peer_t *p)
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
    int first = p->download_why == NULL;
    if (!k) {
        if (!first) return 0; /* a resync waits for a donor */
        /* Nobody holds the stage, as far as this peer knows. In a running swarm its
         * view may still be filling in (gossip): it gives the others two failure
         * timeouts to show up before it takes the stage from a checkpoint or the seed. */
        if (peer_swarm_started(p) && p->now - p->xfer_t0 < 2 * p->po.peer_timeout_s) return 0;
        state_from_nobody(p);
        xfer_destroy(&p->xfer);
        begin_serving(p);
        announce(p);
        return 0;
    }
    int rc = xfer_done(p->xfer);
    if (rc == 1) {
        load_state(p, xfer_data(p->xfer));
        p->step = xfer_step(p->xfer);
        p->downloaded = 1;
        p->pool_step_s = 0;
        fprintf(p->log,
                "state: downloaded stage %d at step %" PRId64
                " (%.1f MB in %.2f s from %d peer(s)), hash verified\n",
                p->stage, p->step, state_bytes(p) / 1e6, p->now - p->xfer_t0,
                xfer_donors(p->xfer));
        fflush(p->log);
        xfer_destroy(&p->xfer);
        if (first)
            peer_store_event(p->ps, "joined", "stage %d at step %" PRId64 ": state from the pool",
                             p->stage, p->step);
        else
            peer_store_event(p->ps, "resynced", "stage %d at step %" PRId64 ": %s", p->stage,
                             p->step, p->download_why);
        begin_serving(p);
        if (first) announce(p);
        else
            fprintf(p->log, "resynced: stage %d from the pool at step %" PRId64 " (%s)\n",
                    p->stage, p->step, p->download_why);
        return 0;
    }
    if (xfer_restarts(p->xfer) > 50)
        return status_set(p->err, STATUS_ETIMEOUT, "could not download stage %d's state",
                          p->stage);
    xfer_req_t req[8];
    int nr = xfer_next_requests(p->xfer, p->now, donors, k, 10.0, req, 8);
    for (int i = 0; i < nr; i++) peer_send(p, req[i].to, &req[i].req, 0, NULL, NULL);
    return 0;
}

/* ---- joining --------------------------------------------------------------------------- */

static int on_welcome(peer_t *p, const net_ev_t *ev)
{
    if (p->phase != PHASE_HELLO) return 0;
    if (ev->nframes != 2 || ev->frame_len[0] >= sizeof p->run_text)
        return status_set(p->err, STATUS_EMALFORMED, "malformed WELCOME from %s", p->po.join);
    memcpy(p->run_text, ev->frame[0], ev->frame_len[0]);
    p->run_text[ev->frame_len[0]] = 0;
    /* the swarm's own settings follow the training run's, as "swarm.key=value" lines */
    char train_text[sizeof p->run_text];
    memcpy(train_text, p->run_text, sizeof train_text);
    char *sw = strstr(train_text, "swarm.");
    if (sw && (sw == train_text || sw[-1] == '\n')) {
        if (sscanf(sw, "swarm.wait_peers=%d", &p->wait_peers) != 1 || p->wait_peers < 0)
            return status_set(p->err, STATUS_EMALFORMED, "run text: bad swarm settings");
        *sw = 0;
    }
    p->run = train_defaults();
    if (train_options_from_text(&p->run, train_text, p->err)) return STATUS_EMALFORMED;
    p->swarm = ev->msg.swarm;
    p->tp.set_run(p->tp.ctx, p->swarm, p->run_text);
    fprintf(p->log, "swarm: joined %016" PRIx64 " through %s\n", p->swarm, p->po.join);
    p->phase = PHASE_VIEW;
    p->phase_at = p->now;
    return 0;
}

static int hello_tick(peer_t *p)
{
    if (p->po.is_new) {
        p->run = p->po.run;
        size_t n = train_options_to_text(&p->run, p->run_text, sizeof p->run_text);
        p->wait_peers = p->po.wait_peers;
        snprintf(p->run_text + n, sizeof p->run_text - n, "swarm.wait_peers=%d\n", p->wait_peers);
        uint64_t salt;
        memcpy(&salt, p->id, 8);
        p->swarm = rng_mix(rng_hash_str(p->run_text), salt);
        p->tp.set_run(p->tp.ctx, p->swarm, p->run_text);
        fprintf(p->log, "swarm: new swarm %016" PRIx64 "\n", p->swarm);
        int rc = setup_stage(p);
        if (rc) return rc;
        p->download_why = NULL;
        return peer_start_download(p, NULL);
    }
    if (p->hello_at > 0 && p->now - p->hello_at < 3.0) return 0;
    if (p->hello_tries == 10)
        return status_set(p->err, STATUS_ETIMEOUT, "no answer from %s", p->po.join);
    p->hello_tries++;
    p->hello_at = p->now;
    if (p->tp.hello(p->tp.ctx, p->po.join, p->po.stage, p->err)) return STATUS_ENET;
    return 0;
}

/* ---- events ---------------------------------------------------------------------------- */

/* Fault drills (`local --kill`): the peer SIGKILLs itself when a microbatch of step >=
 * die_at_step reaches it, so that it dies holding work its sender must re-route. */
static void fault_point(peer_t *p, const msg_t *m)
{
    if (p->po.die_at_step < 0 || m->mb.step < p->po.die_at_step) return;
    fprintf(p->log, "fault: t=%.3f dying on purpose at step %" PRId64 " holding microbatch %u\n",
            p->now, m->mb.step, m->mb.index);
    fflush(p->log);
    raise(SIGKILL);
}

static int on_view(peer_t *p, const net_ev_t *ev)
{
    char h[9];
    for (int i = 0; p->ps && i < p->view.n; i++) { /* who is gone: dead or left */
        int still = 0;
        for (int j = 0; j < ev->nmembers && !still; j++)
            still = !memcmp(ev->members[j].id, p->view.m[i].id, MSG_ID_LEN);
        if (!still)
            peer_store_event(p->ps, "failed",
                             "peer %s of stage %d left the view (silent past the timeout, or "
                             "left) at step %" PRId64,
                             peer_idhex(p->view.m[i].id, h), p->view.m[i].stage, p->step);
    }
    if (view_set(&p->view, ev->members, ev->nmembers)) return STATUS_ENOMEM;
    p->net_rejected = ev->rejected;
    if (p->st) custody_on_view(p);
    return 0;
}

static int on_data(peer_t *p, const net_ev_t *ev)
{
    if (!p->st || ev->nframes != msg_payloads(ev->msg.type)) return 0;
    if (p->phase == PHASE_DOWNLOAD) { /* the sender re-routes at once */
        if (ev->msg.type == MSG_FWD) {
            msg_t n = {.type = MSG_NACK, .mb = ev->msg.mb, .stage = ev->msg.stage};
            snprintf(n.text, sizeof n.text, "re-syncing");
            peer_send(p, ev->msg.sender, &n, 0, NULL, NULL);
        }
        return 0;
    }
    fault_point(p, &ev->msg);
    return serve_enqueue(p, ev);
}

static int on_nack(peer_t *p, const net_ev_t *ev)
{
    if (p->st) custody_on_nack(p, &ev->msg);
    return 0;
}

static int on_progress(peer_t *p, const net_ev_t *ev)
{
    if (p->st) step_on_progress(p, ev);
    return 0;
}

static int on_step_done(peer_t *p, const net_ev_t *ev)
{
    if (ev->msg.flags & 1) p->finished = 1;
    return 0;
}

static int on_exch(peer_t *p, const net_ev_t *ev)
{
    return p->st ? step_on_exch(p, ev) : 0;
}

static int on_exch_req(peer_t *p, const net_ev_t *ev)
{
    if (p->st) step_on_exch_req(p, &ev->msg);
    return 0;
}

static int on_redo(peer_t *p, const net_ev_t *ev)
{
    if (p->st) step_on_redo(p, ev);
    return 0;
}

static int on_state_req_ev(peer_t *p, const net_ev_t *ev)
{
    if (p->st) on_state_req(p, &ev->msg);
    return 0;
}

static int on_state_rep(peer_t *p, const net_ev_t *ev)
{
    if (p->xfer && ev->nframes == 1 && ev->msg.stage == p->stage) {
        xfer_on_reply(p->xfer, &ev->msg, ev->frame[0], ev->frame_len[0], p->now);
        p->donor_started |= ev->msg.flags & 1;
    }
    return 0;
}

static int on_error(peer_t *p, const net_ev_t *ev)
{
    char h[9];
    if (p->xfer) xfer_on_refusal(p->xfer, ev->msg.sender);
    log_debug("peer: error from %s: %s", peer_idhex(ev->msg.sender, h), ev->msg.text);
    return 0;
}

static int on_welcome_ev(peer_t *p, const net_ev_t *ev)
{
    return on_welcome(p, ev);
}

typedef int (*handler_t)(peer_t *p, const net_ev_t *ev);

static const handler_t handlers[MSG_TYPE_MAX + 1] = {
    [MSG_WELCOME] = on_welcome_ev,   [MSG_FWD] = on_data,          [MSG_BWD] = on_data,
    [MSG_NACK] = on_nack,            [MSG_PROGRESS] = on_progress, [MSG_STEP_DONE] = on_step_done,
    [MSG_EXCH] = on_exch,            [MSG_STATE_REQ] = on_state_req_ev,
    [MSG_STATE_REP] = on_state_rep,  [MSG_ERROR] = on_error,       [MSG_EXCH_REQ] = on_exch_req,
    [MSG_REDO] = on_redo,
};

int peer_on_event(peer_t *p, const net_ev_t *ev, double now)
{
    p->now = now;
    switch (ev->type) {
    case NET_EV_VIEW:
        return on_view(p, ev);
    case NET_EV_UNDELIV:
        if (ev->msg.type == MSG_FWD && p->st) {
            mbrec_t *r = custody_find(p, &ev->msg.mb);
            if (r && r->sent && !memcmp(r->next, ev->dest, MSG_ID_LEN))
                custody_reroute(p, r, "undeliverable");
        }
        return 0;
    case NET_EV_MSG: {
        int t = ev->msg.type;
        handler_t h = t >= 0 && t <= MSG_TYPE_MAX ? handlers[t] : NULL;
        return h ? h(p, ev) : 0;
    }
    default:
        return 0;
    }
}

/* ---- timers and work ------------------------------------------------------------------- */

/* A follower catches up on the pool's updates through the kept exchange messages
 * (step.c); when it is further behind than the messages are kept, or gets no update for
 * 10 s while the pool is ahead, it downloads the state again. */
static int follow_tick(peer_t *p)
{
    if (p->self.serving_from <= p->step) return 0;
    /* nobody left to follow (every contributor died): after two failure timeouts this
     * member contributes itself, from the step it is at */
    const msg_member_t *own;
    int me, n = view_owners(&p->view, p->stage, p->step, p->id, &own, &me);
    if (n - (me >= 0) > 0) {
        p->alone_since = 0;
    } else {
        if (!p->alone_since) p->alone_since = p->now;
        if (p->now - p->alone_since > 2 * p->po.peer_timeout_s) {
            p->self.serving_from = p->step;
            p->alone_since = 0;
            fprintf(p->log, "peer: no contributor left in stage %d's pool: contributing from step %" PRId64 "\n",
                    p->stage, p->step);
            peer_push_self(p);
            return 0;
        }
    }
    if (p->step != p->follow_step) {
        p->follow_step = p->step;
        p->follow_since = p->now;
    }
    int64_t ahead = view_max_step(&p->view, p->stage) - p->step;
    if (ahead <= STEP_KEEP - 2 && p->now - p->follow_since <= 10.0) return 0;
    if (ahead <= 1) {
        p->follow_since = p->now;
        return 0;
    }
    return peer_start_download(p, "fell behind the pool while following");
}

int peer_step(peer_t *p, double now, double *wake_at)
{
    p->now = now;
    *wake_at = now + 0.02;
    int rc = 0, did = 0;
    switch (p->phase) {
    case PHASE_HELLO:
        rc = hello_tick(p);
        break;
    case PHASE_VIEW:
        if (now - p->phase_at < 0.6) break; /* the member table comes with the next view */
        if ((rc = setup_stage(p))) break;
        rc = peer_start_download(p, NULL);
        break;
    case PHASE_DOWNLOAD:
        rc = download_tick(p);
        break;
    case PHASE_SERVING:
        if ((rc = serve_one(p, &did))) break;
        if (!did && (rc = serve_source(p)) > 0) did = 1, rc = 0;
        if (rc < 0) break;
        rc = step_tick(p);
        if (rc == STATUS_ECORRUPT) { /* diverged: fetch the pool's state again */
            rc = peer_start_download(p, "parameters differed from the pool's");
            break;
        }
        if (rc) break;
        if ((rc = follow_tick(p))) break;
        custody_tick(p);
        if (p->finished && p->po.exit_when_done) p->phase = PHASE_DONE;
        break;
    default:
        break;
    }
    if (rc < 0) return rc;
    if (p->stage >= 0 && now - p->last_self_push > 0.25) peer_push_self(p);
    if (did) *wake_at = now;
    return 0;
}

int peer_done(const peer_t *p)
{
    return p->phase == PHASE_DONE;
}

void peer_info(const peer_t *p, peer_info_t *out)
{
    out->stage = p->stage;
    out->state = p->stage < 0 ? -1 : p->self.state;
    out->step = p->step;
    out->hash = p->st ? peer_param_hash((peer_t *)p) : 0;
    out->served = p->served;
    out->retries = p->retries;
    out->lost = p->lost;
    out->val_loss = p->val_loss;
}

const char *peer_error(const peer_t *p)
{
    return p->err;
}

void peer_finish(peer_t *p, const char *why)
{
    if (!p->st) return;
    fprintf(p->log,
            "peer: done: stage %d step %" PRId64 " hash %016" PRIx64 " served %" PRIu64
            " re-sent %" PRIu64 " lost %" PRIu64 " rejected %" PRIu64 " activation-bytes %" PRIu64
            " stale %" PRIu64 "\n",
            p->stage, p->step, peer_param_hash(p), p->served, p->retries, p->lost,
            p->net_rejected + p->rejected, p->act_bytes, p->stale);
    fflush(p->log);
    peer_store_step(p->ps, p->st, p->dopt, p->step, 1); /* the state it leaves with */
    peer_store_event(p->ps, "left", "stage %d at step %" PRId64 " (%s)", p->stage, p->step, why);
}

void peer_destroy(peer_t **pp)
{
    if (!pp || !*pp) return;
    peer_t *p = *pp;
    for (int i = 0; i < p->nmbs; i++) custody_drop(&p->mbs[i]);
    free(p->mbs);
    while (p->npending) serve_dequeue(p, p->npending - 1);
    free(p->pending);
    pool_destroy(&p->pool);
    free(p->ubuf);
    free(p->redo_for);
    free(p->sent_bits);
    free(p->val_got);
    free(p->host_tok);
    free(p->grad_save);
    view_free(&p->view);
    xfer_destroy(&p->xfer);
    xfer_snap_free(&p->snap);
    peer_store_close(&p->ps); /* waits for the checkpoint being written */
    demo_opt_destroy(&p->dopt);
    stage_destroy(&p->st);
    kern_destroy(&p->k);
    data_destroy(&p->data);
    wiring_destroy(&p->wiring);
    free(p);
    *pp = NULL;
}

/* ---- the ZeroMQ driver ----------------------------------------------------------------- */

int peer_run(const peer_options_t *po, char *err)
{
    uint8_t id[MSG_ID_LEN];
    peer_store_t *ps = NULL;
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    /* identity: the store's Ed25519 key when there is a store, else a fresh one */
    if (po->db) {
        if (!(ps = peer_store_open(po->db, id, err))) return STATUS_EIO;
    } else {
        unsigned char sk[crypto_sign_SECRETKEYBYTES];
        crypto_sign_keypair(id, sk);
        sodium_memzero(sk, sizeof sk);
    }
    char endpoint[256];
    net_config_t nc = {.bind = po->listen,
                       .advertise = po->advertise,
                       .heartbeat_s = 0.25,
                       .timeout_s = po->peer_timeout_s};
    memcpy(nc.id, id, MSG_ID_LEN);
    nc.self.stage = 0;
    nc.self.state = MEMBER_JOINING;
    nc.self.loss = NAN;
    net_t *net = net_start(&nc, endpoint, err);
    if (!net) {
        peer_store_close(&ps);
        return STATUS_ENET;
    }
    transport_t tp = net_transport(net);
    peer_options_t run_po = *po;
    if (!run_po.clock) run_po.clock = clock_now;
    peer_t *p = peer_new(&run_po, &tp, id, err);
    if (!p) {
        net_stop(&net);
        peer_store_close(&ps);
        return STATUS_EINVAL;
    }
    p->ps = ps;
    fprintf(p->log, "peer: listening on %s\n", endpoint);
    int rc = 0;
    while (!(po->stop && *po->stop) && !peer_done(p)) {
        net_ev_t ev;
        double wake;
        /* events first, without waiting while there is work */
        for (int n = 0; n < 64; n++) {
            int r = net_recv(net, 0, &ev);
            if (r < 0) rc = status_set(p->err, STATUS_ENET, "the network thread failed");
            if (r) break;
            if ((rc = peer_on_event(p, &ev, clock_now()))) break;
        }
        if (rc || (rc = peer_step(p, clock_now(), &wake))) break;
        double idle = wake - clock_now();
        if (idle > 0) { /* idle: wait for the network */
            int r = net_recv(net, idle > 0.005 ? 5 : (int)(idle * 1000) + 1, &ev);
            if (r == 0 && (rc = peer_on_event(p, &ev, clock_now()))) break;
        }
    }
    if (!rc) peer_finish(p, po->stop && *po->stop ? "asked to stop" : "run done");
    if (rc) status_set(err, rc, "%s", p->err[0] ? p->err : status_str(rc));
    peer_destroy(&p);
    net_stop(&net);
    return rc;
}
