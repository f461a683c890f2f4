/* peer.c — a swarm peer as a composition of state machines: its lifecycle (join, take a
 * stage, serve, leave), a dispatch table from message types to the part that owns them,
 * and the timers. The parts: join.c (entering a swarm), state.c (the stage state: snapshot, download), custody.c
 * (what it holds and sent), serve.c (compute), step.c (its pool's step), swarm/pool.c,
 * swarm/xfer.c, swarm/view.c. run.c drives it with the ZeroMQ network thread.
 * Not for: sockets (swarm/net.c), launching peers (tools/). */
#include "common/log.h"
#include "peer/peer_event.h"
#include "peer/peer_impl.h"
#include "swarm/http.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
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
    po.rebalance_margin = 0.2;
    po.rebalance_cooldown_s = 10.0;
    po.slowdown = 0; /* a real device: compute timed on the wall clock */
    po.early_exchange = 1;
    return po;
}

/* ---- small helpers --------------------------------------------------------------------- */

/* Whether training has begun: some other member has served a microbatch or stepped. */
int peer_swarm_started(const peer_t *p)
{
    for (int i = 0; i < p->view.n; i++)
        if (!peer_is_self(p, p->view.m[i].id) && (p->view.m[i].step > 0 || p->view.m[i].served > 0))
            return 1;
    /* a swarm that showed a step past 0 has begun, though every member it showed is gone;
     * so has one whose pool counted a microbatch (a mate's PROGRESS or message comes
     * before gossip says it served: a stage-0 member still waiting to start told a joiner
     * training had not begun, and the joiner counted itself into a half-counted step 0,
     * sim heavy 4x2 seed 30008067) */
    return p->step > 0 || p->stats.served > 0 || view_swarm_step(&p->view) > 0 ||
           (p->pool && pool_counted_any(p->pool));
}

int peer_open_corpus(peer_t *p, data_t **out)
{
    /* the run's corpus: this peer's --data checked against the run's checksum, or the
     * run's URL fetched (once, into the cache; the only wait of the peer's life, at
     * set-up; the network thread keeps it alive meanwhile) */
    char corpus[4096];
    int rc = http_data_for_run(p->po.data_path, p->def.train.data_url, p->def.train.data_sha256, p->log,
                               corpus, sizeof corpus, p->err);
    if (rc) return rc;
    if (!corpus[0] && (rc = data_ensure_default(p->err))) return rc;
    if (!(*out = data_open(corpus[0] ? corpus : data_default_path(), p->def.train.cfg.seq, 0.05, p->err)))
        return STATUS_EINVAL;
    return 0;
}

void peer_attach_store(peer_t *p, peer_store_t *ps)
{
    p->ps = ps;
}

kern_t *peer_kernels(peer_t *p)
{
    if (!p->k) p->k = kern_new(p->po.device, p->po.threads, p->err);
    return p->k;
}

void peer_enter(peer_t *p, int phase)
{
    p->phase = phase;
}

void peer_take_stage(peer_t *p, int stage)
{
    p->stage = stage;
    p->me.entry.stage = (int16_t)stage;
}

void peer_self_state(peer_t *p, int state)
{
    p->me.entry.state = (uint8_t)state;
}

void peer_self_serving_from(peer_t *p, int64_t step)
{
    p->me.entry.serving_from = step;
}

void peer_self_loss(peer_t *p, float loss)
{
    p->me.entry.loss = loss;
}

void peer_self_throughput(peer_t *p, float tp)
{
    p->me.entry.throughput = tp;
}

void peer_run_over(peer_t *p)
{
    p->ending.over = 1;
}

int peer_is_self(const peer_t *p, const uint8_t *id)
{
    return !memcmp(p->me.entry.id, id, MSG_ID_LEN);
}

const char *peer_idhex(const uint8_t *id, char buf[9])
{
    return msg_id_short(id, buf);
}

/* The parameters' fingerprint (kernels.h hash64: the same on every backend). */
uint64_t peer_param_hash(peer_t *p)
{
    /* with local steps the shared parameters, the round's start (model/outer.h) */
    return kern_hash64(p->k, outer_shared(&p->held.outer, p->held.st), stage_num_params(p->held.st));
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

void peer_send_nack(peer_t *p, const uint8_t *to, const msg_t *fwd, const char *why)
{
    msg_t n = {.type = MSG_NACK, .mb = fwd->mb, .stage = fwd->stage, .nroute = fwd->nroute};
    memcpy(n.route, fwd->route, (size_t)fwd->nroute * MSG_ID_LEN);
    snprintf(n.text, sizeof n.text, "%s", why);
    peer_send(p, to, &n, 0, NULL, NULL);
}

void peer_push_self(peer_t *p)
{
    p->me.entry.step = p->step;
    p->me.entry.served = p->stats.served;
    p->me.entry.retries = p->stats.retries;
    p->me.entry.rejected = p->stats.rejected; /* the transport adds its own */
    p->me.entry.stage = (int16_t)p->stage;
    p->tp.set_self(p->tp.ctx, &p->me.entry);
    timeout_start(&p->me.push, p->now);
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
    if (p) guard_init(&p->guard);
    if (!p) {
        status_set(err, STATUS_ENOMEM, "peer: out of memory");
        return NULL;
    }
    p->po = *po;
    p->tp = *tp;
    p->log = po->log ? po->log : stdout;
    p->phase = PHASE_HELLO;
    p->stage = -1;
    p->me.entry.loss = NAN;
    val_init(&p->val);
    contrib_init(&p->contrib, po->peer_timeout_s);
    recover_init(&p->rec, po->peer_timeout_s);
    resume_init(&p->resume);
    p->ending.gone = timeout_make("end.gone", END_GONE_TIMEOUTS * po->peer_timeout_s);
    p->me.push = timeout_make("member.push", PEER_PUSH_S);
    p->ending.woke = timeout_make("member.woke", PEER_WOKE_S);
    rebal_init(&p->rebal);
    join_state_init(&p->join);
    follow_init(&p->follow, po->peer_timeout_s);
    source_init(&p->source);
    state_init(p);
    p->held.nslots = po->slots > 0 ? po->slots : 2 * po->in_flight + 2;
    memcpy(p->me.entry.id, id, MSG_ID_LEN);
    p->me.entry.state = MEMBER_JOINING;
    return p;
}

/* ---- events ---------------------------------------------------------------------------- */

/* This process was frozen for longer than the member timeout (SIGSTOP, a suspended
 * laptop, a VM migrated: its network thread too, which noticed), so its mates took it for
 * dead and went on without it. It says so and keeps the members it knew, as they were:
 * woke_tick then tells who is still alive. */
static void woke(peer_t *p, double paused_s)
{
    p->ending.woke_at = p->now;
    p->ending.woke_pause = p->ending.pauses;
    timeout_start(&p->ending.woke, p->now);
    p->ending.knew_set = 0;
    /* paused again before it knew: the members it knew before the first pause still
     * decide (the view since may hold newcomers: sim pause 6x3 seed 2) */
    msg_member_t *k = p->ending.nknew ? p->ending.knew
                                      : realloc(p->ending.knew, (size_t)(p->view.n ? p->view.n : 1) * sizeof *k);
    if (k && !p->ending.nknew) {
        p->ending.knew = k;
        for (int i = 0; i < p->view.n; i++)
            if (!peer_is_self(p, p->view.m[i].id)) k[p->ending.nknew++] = p->view.m[i];
    }
    fprintf(p->log, "peer: paused for %.1f s (its network thread too) at step %" PRId64 "\n",
            paused_s, p->step);
    peer_event(p, "woke", "paused_s=%.1f", paused_s);
}

/* Whether e contributes to its pool (serving, from a step it has reached). */
static int contributes(const msg_member_t *e)
{
    return e->state == MEMBER_SERVING && e->serving_from <= e->step + 1;
}

/* A member of `stage` it knew before the pause whose heartbeat has moved since it woke
 * (alive), and that contributes: NULL, none. (A follower's heartbeat moves too: sim pause
 * 6x3 seed 700549 under SWIM, a newcomer following its pool was taken for the mate to
 * re-sync from, and the woken peer, finding it following, applied its own stale step.) */
static const msg_member_t *known_alive(const peer_t *p, int stage)
{
    for (int i = 0; i < p->ending.nknew; i++) {
        const msg_member_t *now = view_find(&p->view, p->ending.knew[i].id);
        if (now && now->heartbeat > p->ending.knew[i].heartbeat && now->stage == stage &&
            contributes(now))
            return now;
    }
    return NULL;
}

/* A mate its view shows past this peer's step: its pool went on without it. Under SWIM a
 * member's heartbeat rises only when its entry changes, so a mate waiting at its step
 * shows no sign of life though it is alive (sim pause 6x3 seed 620095 with swim_every=4:
 * the woken peer caught up alone through steps its pool had counted without it, and
 * applied one counting 2 of 4 microbatches). */
static const msg_member_t *mate_ahead(const peer_t *p)
{
    for (int i = 0; i < p->view.n; i++) {
        const msg_member_t *e = &p->view.m[i];
        if (e->stage == p->stage && contributes(e) && e->step > p->step &&
            !peer_is_self(p, e->id))
            return e;
    }
    return NULL;
}

/* After waking, every member.woke: once a member it knew vouches for it, it is back in
 * the run, and one serving a stage whose pool has a live mate to download from takes the
 * pool's state again instead of voting its own, stale one against it (it won a tie
 * against the mate that had gone on, which re-synced instead and then waited on it: local
 * --pause, four 30 s stalls). None within END_WOKE_TIMEOUTS member timeouts: the run
 * ended or moved on without it (those that finished told only the members alive to them);
 * it says so and leaves, instead of training a fork with newcomers that joined through it
 * (sim --faults pause seeds 60041, 60076). */
static int woke_tick(peer_t *p)
{
    if (!p->ending.nknew) return 0;
    if (p->ending.over) { /* a member said the run is over (its LEAVE waited for it) */
        p->ending.nknew = 0;
        timeout_stop(&p->ending.woke);
        return 0;
    }
    if (!timeout_fired(&p->ending.woke, p->now)) return 0;
    timeout_start(&p->ending.woke, p->now);
    if (!p->ending.knew_set) { /* the messages that waited in its sockets are in by now:
                                * their gossip says nothing of who is alive now */
        for (int i = 0; i < p->ending.nknew; i++) {
            const msg_member_t *now = view_find(&p->view, p->ending.knew[i].id);
            if (now && now->heartbeat > p->ending.knew[i].heartbeat)
                p->ending.knew[i].heartbeat = now->heartbeat;
        }
        p->ending.knew_set = 1;
        return 0;
    }
    /* back in the run once a member it knew vouched for it (10.8): its transport asked
     * them as it woke, and one that was not asking itself answered, or every one asked
     * did (the whole swarm was paused). Only an answer tells a mate that waits for it at
     * its own step (under SWIM its entry does not change, so it shows no sign of life)
     * from a sleeper like it, which cannot vouch for the run: two peers paused past the
     * run's end woke, saw each other and trained it to its end alone (sim pause seed
     * 9800285; 6x3 seed 100571: the other sleeper's heartbeat rose, a step ahead); a mate
     * waiting at its step was taken for a sleeper (SWIM 2x2 seed 700378: the woken peer
     * was left behind, and its mate ended with another hash). Nobody within
     * END_WOKE_TIMEOUTS member timeouts: it was left behind. */
    if (p->ending.vouched >= p->ending.woke_pause) {
        const msg_member_t *m = known_alive(p, p->stage);
        if (!m) m = mate_ahead(p);
        p->ending.nknew = 0; /* back in the run */
        timeout_stop(&p->ending.woke);
        if (p->phase == PHASE_SERVING && m)
            return peer_start_download(p, "woke from a pause: its mates took it for dead");
        return 0;
    }
    if (p->now - p->ending.woke_at <= END_WOKE_TIMEOUTS * p->po.peer_timeout_s) return 0;
    timeout_stop(&p->ending.woke);
    p->ending.nknew = 0;
    /* at the run's last step too: it trained every step, but its last one was never
     * confirmed by its pool's vote (sim pause 6x3 seed 710745 under SWIM: paused right
     * after applying it, it held another hash than its pool) */
    int at_end = p->step >= p->def.train.steps;
    fprintf(p->log, "peer: left behind: no member it knew vouched for it since it was paused "
                    "(at step %" PRId64 " of %d); the run ended or moved on without it\n",
            p->step, p->def.train.steps);
    peer_event(p, "run_over", "why=%s", at_end ? "woke_at_end" : "left_behind");
    p->ending.left_behind = 1;
    peer_run_over(p);
    return 0;
}

static int on_view(peer_t *p, const net_ev_t *ev)
{
    char h[9];
    p->ending.vouched = ev->vouched; /* a pause's question settled (10.8) */
    /* a pause: the members it knew are those of the view before it (this one may list
     * newcomers that the messages waiting in its sockets told of) */
    if (ev->pauses != p->ending.pauses) {
        p->ending.pauses = ev->pauses;
        if (ev->last_pause_s > p->po.peer_timeout_s) woke(p, ev->last_pause_s);
    }
    p->ending.suspect = 0; /* the transport has said whether it was paused */
    for (int i = 0; i < p->view.n; i++) { /* who is gone: dead or left */
        int still = 0;
        for (int j = 0; j < ev->nmembers && !still; j++)
            still = !memcmp(ev->members[j].id, p->view.m[i].id, MSG_ID_LEN);
        if (still) continue; /* else silent past the timeout, or left */
        const msg_member_t *m = &p->view.m[i];
        peer_event(p, "failed", "peer=%s peer_stage=%d", peer_idhex(m->id, h), m->stage);
        if (p->held.st && m->stage == p->stage && m->state == MEMBER_SERVING &&
            m->serving_from <= p->step) /* an owner of the step under way (step.c ask_for_gone) */
            contrib_gone_owner(&p->contrib, m->id);
    }
    source_on_view(&p->source, p->view.m, p->view.n, ev->members, ev->nmembers, p->step, p->now);
    if (guard_any(&p->guard)) { /* expelled members stay out of the view (guard.c) */
        msg_member_t *v = malloc((size_t)(ev->nmembers ? ev->nmembers : 1) * sizeof *v);
        if (!v) return STATUS_ENOMEM;
        int k = guard_view(&p->guard, ev->members, ev->nmembers, v), rc = view_set(&p->view, v, k);
        free(v);
        if (rc) return STATUS_ENOMEM;
    } else if (view_set(&p->view, ev->members, ev->nmembers)) {
        return STATUS_ENOMEM;
    }
    view_set_heard(&p->view, ev->members, ev->heard, ev->nmembers);
    p->stats.net_rejected = ev->rejected;
    if (p->held.st) custody_on_view(p);
    follow_heard(&p->follow, ev->members, ev->heard, ev->nmembers, p->stage, p->me.entry.id);
    state_offer(p);
    return 0;
}

static int on_data(peer_t *p, const net_ev_t *ev)
{
    if (!p->held.st || ev->nframes != msg_payloads(ev->msg.type)) return 0;
    if (ev->msg.type == MSG_BWD) custody_on_gradient(p, &ev->msg); /* a round trip */
    if (p->phase == PHASE_DOWNLOAD) { /* the sender re-routes at once */
        if (ev->msg.type == MSG_FWD)
            peer_send_nack(p, ev->msg.sender, &ev->msg, "re-syncing");
        return 0;
    }
    if (p->po.faults.fwd_arrived) /* a drill may end the process here */
        p->po.faults.fwd_arrived(p->po.faults.ctx, ev->msg.mb.step, ev->msg.mb.index, p->now);
    return serve_enqueue(p, ev);
}

static int on_nack(peer_t *p, const net_ev_t *ev)
{
    if (p->held.st) custody_on_nack(p, &ev->msg);
    return 0;
}

static int on_progress(peer_t *p, const net_ev_t *ev)
{
    if (p->held.st) step_on_progress(p, ev);
    return 0;
}

static int on_step_done(peer_t *p, const net_ev_t *ev)
{
    if (!(ev->msg.flags & 1) || p->ending.over) return 0;
    p->ending.over = 1;
    /* The word that the run is over goes on to every member this peer knows: one copy
     * lost on the way, and a member that missed it would take the stages others leave
     * for lost and rebuild one nobody needs (recover_tick). */
    msg_t d = {.type = MSG_STEP_DONE, .flags = 1, .step = ev->msg.step};
    for (int i = 0; i < p->view.n; i++)
        if (!peer_is_self(p, p->view.m[i].id) && memcmp(p->view.m[i].id, ev->msg.sender, MSG_ID_LEN))
            peer_send(p, p->view.m[i].id, &d, 0, NULL, NULL);
    return 0;
}

/* A LEAVE that says the run is over (the dispatch core hands only those to the program):
 * a member that missed the run's end (asleep, cut off) learns it so, as from STEP_DONE. */
static int on_leave(peer_t *p, const net_ev_t *ev)
{
    if (ev->msg.code != MSG_LEAVE_RUN_OVER || p->ending.over) return 0;
    fprintf(p->log, "peer: the run is over (said by a member that finished it); leaving at step "
                    "%" PRId64 "\n", p->step);
    peer_event(p, "run_over", "why=%s", "leave");
    p->ending.over = 1;
    return 0;
}

static int on_exch(peer_t *p, const net_ev_t *ev)
{
    return p->held.st ? step_on_exch(p, ev) : 0;
}

static int on_exch_req(peer_t *p, const net_ev_t *ev)
{
    if (p->moved.pool && ev->msg.stage != p->stage) move_on_exch_req(p, &ev->msg); /* moved */
    if (p->held.st) step_on_exch_req(p, &ev->msg);
    return 0;
}

static int on_redo(peer_t *p, const net_ev_t *ev)
{
    if (p->held.st) step_on_redo(p, ev);
    return 0;
}

static int on_state_req_ev(peer_t *p, const net_ev_t *ev)
{
    if (p->held.st) state_on_request(p, &ev->msg);
    return 0;
}

static int on_state_rep(peer_t *p, const net_ev_t *ev)
{
    if (p->trans.xfer && ev->nframes == 1 && ev->msg.stage == p->stage) {
        xfer_on_reply(p->trans.xfer, &ev->msg, ev->frame[0], ev->frame_len[0], p->now);
        p->trans.donor_started |= ev->msg.flags & 1;
    }
    recover_on_state_rep(p, ev);
    return 0;
}

static int on_error(peer_t *p, const net_ev_t *ev)
{
    char h[9];
    if (p->trans.xfer) xfer_on_refusal(p->trans.xfer, ev->msg.sender);
    recover_on_refusal(p, ev->msg.sender);
    log_debug("peer: error from %s: %s", peer_idhex(ev->msg.sender, h), ev->msg.text);
    return 0;
}

static int on_welcome_ev(peer_t *p, const net_ev_t *ev)
{
    return join_on_welcome(p, ev);
}

typedef int (*handler_t)(peer_t *p, const net_ev_t *ev);

static const handler_t handlers[MSG_TYPE_MAX + 1] = {
    [MSG_WELCOME] = on_welcome_ev,   [MSG_FWD] = on_data,          [MSG_BWD] = on_data,
    [MSG_NACK] = on_nack,            [MSG_PROGRESS] = on_progress, [MSG_STEP_DONE] = on_step_done,
    [MSG_EXCH] = on_exch,            [MSG_STATE_REQ] = on_state_req_ev,
    [MSG_STATE_REP] = on_state_rep,  [MSG_ERROR] = on_error,       [MSG_EXCH_REQ] = on_exch_req,
    [MSG_REDO] = on_redo,            [MSG_LEAVE] = on_leave,
};

/* The time of the event or step handled now; the first is the peer's start. */
static void clock_at(peer_t *p, double now)
{
    p->now = now;
    if (!p->stats.t_start) p->stats.t_start = now;
}

int peer_on_event(peer_t *p, const net_ev_t *ev, double now)
{
    clock_at(p, now);
    switch (ev->type) {
    case NET_EV_VIEW:
        return on_view(p, ev);
    case NET_EV_UNDELIV:
        if (ev->msg.type == MSG_FWD && p->held.st) {
            mbrec_t *r = custody_find(p, &ev->msg.mb, ev->msg.nroute - 1);
            if (r && r->sent && !memcmp(r->next, ev->dest, MSG_ID_LEN))
                custody_reroute(p, r, "undeliverable");
        }
        return 0;
    case NET_EV_MSG: {
        int t = ev->msg.type;
        if (guard_any(&p->guard) && (guard_expelled(&p->guard, ev->msg.sender) ||
                        (t == MSG_EXCH && guard_expelled(&p->guard, ev->msg.origin))))
            return 0; /* expelled: nothing of its is taken */
        handler_t h = t >= 0 && t <= MSG_TYPE_MAX ? handlers[t] : NULL;
        return h ? h(p, ev) : 0;
    }
    default:
        return 0;
    }
}

/* ---- timers and work ------------------------------------------------------------------- */

/* A follower's gather also asks the members of other stages ahead of its step: the pool's
 * last contributor may have applied the step and moved (to rebuild a lost stage) before
 * its followers did, and it still answers from the pool it left (move.c); its followers
 * may have joined since and know nothing of it. Else one of them took over and ran the
 * step again, another update than the one applied (sim heavy 4x2 seed 30008636). Members
 * that never held the stage ignore the request. */
static void gather_movers(peer_t *p, msg_t *q)
{
    for (int i = 0; i < p->view.n; i++) {
        const msg_member_t *m = &p->view.m[i];
        if (m->stage != p->stage && m->state == MEMBER_SERVING && m->step > p->step)
            peer_send(p, m->id, q, 0, NULL, NULL);
    }
}

/* How far behind its pool a follower may be before it downloads the state again, the
 * pool's head being `head`. Following costs a round trip per step at least, which a small
 * state's download beats (tiny at 100 Mbit/s + 50 ms: joiners contributed 2.6-4.0 s after
 * launch downloading again past STEP_KEEP steps, 6.9-9.0 s following up to 34 steps), so
 * STEP_KEEP; but where another download like its last would land half that window behind
 * or more (its seconds over the pool's pace since that download began, which the view,
 * gossip a moment old, understates: small at 100 Mbit/s, 7.4 s against 1 s steps; it
 * downloaded again and again and never contributed), it follows through the whole kept
 * window (held.keep). */
static int follow_window(const peer_t *p, int64_t head)
{
    double since = p->now - p->trans.dl_at;
    if (p->trans.dl_s <= 0 || since <= 0 || head <= p->trans.dl_step) return STEP_KEEP;
    double lands = p->trans.dl_s * (double)(head - p->trans.dl_step) / since;
    return lands >= (STEP_KEEP - 2) / 2.0 ? p->held.keep : STEP_KEEP;
}

/* A follower catches up on the pool's updates through the kept exchange messages
 * (step.c); when it is further behind than follow_window, or gets no update for 10 s while
 * the pool is ahead, it downloads the state again. */
static int follow_tick(peer_t *p)
{
    if (p->me.entry.serving_from <= p->step) {
        /* A contributor its pool left behind (two members that both restored their own
         * checkpoints of different steps, say): the others wait for its messages of
         * steps it never reaches. After 10 s two or more steps behind, it re-syncs. */
        int64_t ahead = view_max_step(&p->view, p->stage) - p->step;
        /* A newcomer contributing at once because its donor said training had not begun
         * is counted by no mate that began before hearing of it: the swarm began while it
         * downloaded (sim mild 4x2 seed 37106369: the donor answered 36 ms before applying
         * step 0; the newcomer sourced steps its mates had applied without it, and its
         * update of step 2 counted 2 of 4). In its first two steps, a mate two steps ahead
         * (it applied the step after this member's, which no mate counting this member
         * can do without its message of that step) says so: it downloads again, and
         * follows. */
        if (p->trans.unbegun_at >= 0 && p->step <= p->trans.unbegun_at + 1 && ahead >= 2)
            return peer_start_download(p, "the swarm began without it while it downloaded");
        if (follow_behind(&p->follow, 1, p->step, ahead, STEP_KEEP, p->now))
            return peer_start_download(p, "two or more steps behind its pool for 10 s");
        return 0;
    }
    /* Nobody left to follow (every contributor died). The followers first gather what
     * each holds of the step (a dead contributor's message may have reached only some of
     * them: the one that takes over must count on it exactly as the others will, sim 3x2
     * mild swap seed 9720), then after two failure timeouts the one at the highest step
     * with the lowest id there contributes from the step it is at; the others follow it
     * (several at once would not agree on who counts). One behind a mate that is ahead
     * downloads the state: the step it is at will never have a contributor. */
    const msg_member_t *own, *mem;
    int me, n = view_owners(&p->view, p->stage, p->step, p->me.entry.id, &own, &me);
    int nm = view_stage(&p->view, p->stage, 1, &mem), first = 1;
    int64_t top = p->step;
    for (int i = 0; i < nm; i++)
        if (!peer_is_self(p, mem[i].id) && mem[i].step > top) top = mem[i].step;
    for (int i = 0; i < nm; i++)
        if (!peer_is_self(p, mem[i].id) && mem[i].step == top &&
            memcmp(mem[i].id, p->me.entry.id, MSG_ID_LEN) < 0)
            first = 0;
    int todo = follow_alone(&p->follow, n - (me >= 0), p->step, top, first,
                            p->po.peer_timeout_s, p->now);
    if (todo & FOLLOW_GATHER) {
        /* origin all zero: every message of the step; and of the steps after it that a
         * mate may hold: the last contributor may have applied some before it died, and
         * the one that takes over must hold their messages as the followers that got
         * them do, or it runs those steps anew and applies other updates than they (sim
         * heavy 4x2 seed 36201935) */
        for (int64_t s = p->step; s < p->step + STEP_KEEP - 1; s++) {
            msg_t q = {.type = MSG_EXCH_REQ, .stage = (int16_t)p->stage, .step = s};
            for (int i = 0; i < nm; i++)
                if (!peer_is_self(p, mem[i].id)) peer_send(p, mem[i].id, &q, 0, NULL, NULL);
            gather_movers(p, &q);
        }
    }
    if (todo & FOLLOW_RESYNC) return peer_start_download(p, "no contributor left, and a mate is ahead");
    if (todo & FOLLOW_TAKE_OVER) {
        p->me.entry.serving_from = p->step;
        fprintf(p->log,
                "peer: no contributor left in stage %d's pool: contributing from step %" PRId64
                "\n",
                p->stage, p->step);
        peer_event(p, "takes_over", "from=%" PRId64, p->step);
        peer_push_self(p);
        return 0;
    }
    int64_t head = view_max_step(&p->view, p->stage), ahead = head - p->step;
    if (!follow_behind(&p->follow, 0, p->step, ahead, follow_window(p, head), p->now)) return 0;
    return peer_start_download(p, "fell behind the pool while following");
}

/* The run is over for a peer at the last step once a stage it saw at the last step is
 * gone from its view for END_GONE_TIMEOUTS failure timeouts: finished peers leave. The leader says so
 * (STEP_DONE flag 1) to everyone it knows, but that message may not arrive, and a peer
 * that joined late may wait on a validation whose stages have left. Seen at the last
 * step: 64 stages at most tracked (bit per stage). */
static void end_tick(peer_t *p)
{
    for (int i = 0; i < p->view.n; i++)
        if (p->view.m[i].step >= p->def.train.steps && p->view.m[i].stage < 64)
            p->ending.seen |= 1ull << p->view.m[i].stage;
    if (p->ending.over) return;
    int alone = 1; /* no other member at all: nothing left to follow or download from */
    for (int i = 0; i < p->view.n && alone; i++) alone = peer_is_self(p, p->view.m[i].id);

    /* Woken from a pause to find every member it knew gone: the run ended, or moved on,
     * without it (those that finished told only the members alive to them, and to them
     * this peer was dead). It says so and leaves instead of waiting for a joiner to train
     * a fork of the run with (sim --faults pause seed 60076). A peer that was not paused
     * and outlives the others waits for joiners: its stage's state is the swarm's. */
    if (p->ending.woke_at > 0 && alone && p->step < p->def.train.steps) {
        timeout_ensure(&p->ending.gone, p->now);
        if (!timeout_fired(&p->ending.gone, p->now)) return;
        fprintf(p->log, "peer: left behind: every member it knew is gone since it was paused "
                        "(at step %" PRId64 " of %d); the run ended or moved on "
                        "without it\n",
                p->step, p->def.train.steps);
        peer_event(p, "run_over", "why=%s", "left_behind");
        p->ending.left_behind = 1;
        p->ending.over = 1;
        return;
    }
    if (p->step < p->def.train.steps && !(p->ending.seen && alone)) {
        timeout_stop(&p->ending.gone);
        return;
    }
    int gone = -1, others = 0;
    for (int s = 0; s < p->dims.S && s < 64; s++) {
        const msg_member_t *m;
        if (s == p->stage) continue;
        int here = view_stage(&p->view, s, 0, &m) > 0;
        others += here;
        if (gone < 0 && (p->ending.seen >> s & 1) && !here) gone = s;
    }
    /* every other stage gone: they finished before this peer saw their last step, or
     * left for good; either way nobody is left to train or validate with */
    if (gone < 0 && !others && p->dims.S > 1) gone = p->stage == 0 ? 1 : 0;
    if (gone < 0 && p->ending.seen && alone) gone = p->stage == 0 ? 1 : 0;
    if (gone < 0) {
        timeout_stop(&p->ending.gone);
        return;
    }
    timeout_ensure(&p->ending.gone, p->now);
    if (!timeout_fired(&p->ending.gone, p->now)) return;
    fprintf(p->log, "peer: at the last step, and stage %d has left after it: the run is over\n",
            gone);
    peer_event(p, "run_over", "why=%s gone=%d", "stage_left", gone);
    p->ending.over = 1;
}

/* When the member wants to run again without an event: at the earliest deadline ahead of
 * its parts' timers and its forwards' custody, and at the latest PEER_IDLE_S from now
 * (the parts' conditions that are not timers look at seconds: a follower's stall, the
 * pace, a validation round). A deadline already passed was handled by this step. */
static double next_wake(const peer_t *p, double now)
{
    double at = now + PEER_IDLE_S;
    const timeout_t *t[] = {
        &p->me.push,           &p->join.hello,       &p->join.settle,
        &p->join.start,     &p->contrib.progress, &p->contrib.stall,   &p->contrib.exch_req,
        &p->contrib.gone_ask, &p->contrib.relay,  &p->contrib.unknown, &p->contrib.deadline,
        &p->contrib.suspect, &p->contrib.redo_ask, &p->follow.gather,  &p->rebal.decide,
        &p->rebal.record,   &p->rebal.reverse,    &p->ending.gone,     &p->ending.woke,     &p->resume.decide,
        &p->resume.settle,  &p->trans.nobody,     &p->trans.another,   &p->rec.aux_wait,
        &p->rec.judge,      &p->rec.nb_wait[0],   &p->rec.nb_wait[1]};
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (t[i]->deadline > now) at = timeout_earliest(at, t[i]);
    for (int s = 0; p->rec.empty && s < p->dims.S; s++)
        if (p->rec.empty[s].deadline > now) at = timeout_earliest(at, &p->rec.empty[s]);
    double c = custody_next_deadline(p);
    if (c > now && c < at) at = c;
    return at;
}

int peer_step(peer_t *p, double now, double *wake_at)
{
    clock_at(p, now);
    /* The loop woke from a pause before the transport's view said so, and would apply a
     * step whose messages it held before it (sim pause seed 9800583): it waits for that
     * view first (a long pass looks the same, and costs one view's wait) */
    if (p->ending.last_step_at > 0 && now - p->ending.last_step_at > p->po.peer_timeout_s)
        p->ending.suspect = 1;
    p->ending.last_step_at = now;
    int rc = 0, did = 0;
    switch (p->phase) {
    case PHASE_HELLO:
        rc = join_hello_tick(p);
        break;
    case PHASE_VIEW:
        /* the transport merged WELCOME's table and handed its view over before the
         * WELCOME itself: the table the stage is chosen from is in place (it waited 0.6 s
         * for it, a tenth of a tiny joiner's way to its first step) */
        if ((rc = join_setup_stage(p))) break;
        rc = peer_start_download(p, NULL);
        break;
    case PHASE_DOWNLOAD:
        if ((rc = woke_tick(p))) break;
        rc = state_download_tick(p);
        end_tick(p); /* a re-sync with every donor gone after the run's end */
        if (p->ending.over && p->po.exit_when_done) p->phase = PHASE_DONE;
        break;
    case PHASE_SERVING:
        /* woken from a pause: nothing is served or trained until it knows it is still in
         * the run (a member it knew alive) or that it is not (sim pause seed 80004: it
         * trained a whole fork with a newcomer within the wait; 12000319: it served a
         * forward its crashed mate had counted again meanwhile) */
        if ((rc = woke_tick(p)) || p->phase != PHASE_SERVING || p->ending.nknew ||
            p->ending.suspect)
            break;
        if (p->ending.over && p->step < p->def.train.steps) { /* left behind: nothing more */
            if (p->po.exit_when_done) p->phase = PHASE_DONE;
            break;
        }
        step_name_due(p);
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
        int to;
        char why[96];
        if ((rc = recover_tick(p, &to, why, sizeof why))) break;
        if (to >= 0 && (rc = peer_move(p, to, why))) break;
        if (p->phase != PHASE_SERVING) break; /* moved to rebuild a lost stage */
        custody_tick(p);
        if ((rc = move_rebal_tick(p))) break; /* may move this peer to another stage */
        end_tick(p);
        if (p->ending.over && p->po.exit_when_done) p->phase = PHASE_DONE;
        break;
    default:
        break;
    }
    /* a failed device (out of memory, a CUDA error): whatever it computed since is not
     * trusted, and the peer stops with the backend's reason (kernels.h) */
    if (!rc && p->k && kern_status(p->k))
        rc = status_set(p->err, kern_status(p->k), "the compute device failed: %s",
                        kern_error(p->k));
    if (rc < 0) return rc;
    if (p->stage >= 0 && timeout_due(&p->me.push, now)) peer_push_self(p);
    *wake_at = did ? now : next_wake(p, now);
    return 0;
}

int peer_done(const peer_t *p)
{
    return p->phase == PHASE_DONE;
}

int peer_left_behind(const peer_t *p)
{
    return p->ending.left_behind;
}

void peer_info(const peer_t *p, peer_info_t *out)
{
    out->stage = p->stage;
    out->state = p->stage < 0 ? -1 : p->me.entry.state;
    out->step = p->step;
    out->hash = p->held.st ? peer_param_hash((peer_t *)p) : 0;
    out->served = p->stats.served;
    out->retries = p->stats.retries;
    out->lost = p->stats.lost;
    out->val_loss = p->val.loss;
}

const char *peer_error(const peer_t *p)
{
    return p->err;
}

void peer_finish(peer_t *p, const char *why)
{
    if (!p->held.st) return;
    fprintf(p->log,
            "peer: done: stage %d step %" PRId64 " hash %016" PRIx64 " served %" PRIu64
            " re-sent %" PRIu64 " lost %" PRIu64 " rejected %" PRIu64 " activation-bytes %" PRIu64
            " stale %" PRIu64 " throughput %.1f revisits %" PRIu64 " moves %d\n",
            p->stage, p->step, peer_param_hash(p), p->stats.served, p->stats.retries, p->stats.lost,
            p->stats.net_rejected + p->stats.rejected, p->stats.act_bytes, p->stats.stale, (double)p->me.entry.throughput,
            p->stats.revisits, p->rebal.moves); /* moves last: tests/rebal_local.sh reads it there */
    fflush(p->log);
    /* the state it leaves with; with local steps the round's start (its local steps since
     * go with it) */
    outer_restore(&p->held.outer);
    peer_store_step(p->ps, p->held.st, p->held.dopt, p->step, 1, 1);
    peer_event(p, "left",
               "why=%s hash=%016" PRIx64 " served=%" PRIu64 " resent=%" PRIu64 " lost=%" PRIu64
               " rejected=%" PRIu64 " act_bytes=%" PRIu64 " act_elems=%" PRIu64 " stale=%" PRIu64
               " throughput=%.1f revisits=%" PRIu64 " moves=%d",
               why, peer_param_hash(p), p->stats.served, p->stats.retries, p->stats.lost,
               p->stats.net_rejected + p->stats.rejected, p->stats.act_bytes,
               p->stats.act_tensors * (uint64_t)p->dims.BT * (uint64_t)p->dims.C, p->stats.stale,
               (double)p->me.entry.throughput, p->stats.revisits, p->rebal.moves);
}

void peer_destroy(peer_t **pp)
{
    if (!pp || !*pp) return;
    peer_t *p = *pp;
    peer_store_close(&p->ps); /* waits for the checkpoint being written */
    recover_abort(p);
    peer_drop_stage(p);
    move_free(p); /* the stage's own pool, moved there by the drop */
    serve_free(p);
    view_free(&p->view);
    recover_free(p);
    free(p->ending.knew);
    kern_destroy(&p->k);
    free(p);
    *pp = NULL;
}
