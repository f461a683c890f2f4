/* peer.c — the compute thread of a swarm peer: joining, state download, serving
 * microbatches with custody, pool progress and exchange, validation. Every byte it
 * sends or receives passes through the network thread (swarm/net.c). */
#include "peer/peer.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"
#include "peer/data.h"
#include "peer/demo_opt.h"
#include "peer/peer_store.h"
#include "peer/stage.h"
#include "store/store.h"
#include "swarm/net.h"
#include "swarm/wiring.h"

#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static volatile sig_atomic_t stop_requested;

void peer_stop(void)
{
    stop_requested = 1;
}

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
    return po;
}

#define MAX_PENDING 256
#define STATE_CHUNK (1u << 20)

/* A microbatch this peer holds: its activations in a stage slot, and (when it sent the
 * microbatch on) custody of what it sent. */
typedef struct {
    int used;
    msg_mb_t mb;          /* step, index, kind (attempt unused here) */
    uint16_t in_attempt;  /* the upstream's attempt number, echoed in our gradient */
    uint16_t out_attempt; /* our attempt number for what we sent downstream */
    int slot;
    uint8_t prev[MSG_ID_LEN]; /* upstream peer; the source itself on stage 0 */
    int nroute;
    uint8_t route[MSG_ROUTE_MAX][MSG_ID_LEN];
    int sent; /* custody: forwarded downstream, waiting for the gradient */
    uint8_t next[MSG_ID_LEN];
    double sent_at;
    uint8_t *act; /* encoded activation as sent, kept for a re-send */
    size_t act_len;
    int32_t *targets;
} mbrec_t;

/* A data message waiting for compute (payloads copied out of the network buffers). */
typedef struct {
    msg_t m;
    uint8_t *pl[2];
    size_t pl_len[2];
} inmsg_t;

typedef struct {
    uint8_t id[MSG_ID_LEN];
    int64_t step, since;
    uint32_t count;
    uint64_t hash;
    uint8_t *data;
    size_t len;
} exch_t;

typedef struct {
    const peer_options_t *po;
    train_options_t run;
    FILE *log;
    char err[STATUS_ERR_LEN];
    uint8_t id[MSG_ID_LEN];
    uint64_t swarm;
    net_t *net;
    kern_t *k;
    stage_t *st;
    demo_opt_t *dopt;
    data_t *data;
    wiring_t *wiring;
    peer_store_t *ps; /* the peer's store; NULL without --db */
    int S, stage, M, BT, C;
    int nslots;
    int wire_codec;
    /* membership as of the last view */
    msg_member_t *view;
    int nview, view_cap;
    /* work */
    mbrec_t *mbs;
    int nmbs;
    inmsg_t *pending;
    int npending, pending_cap;
    int64_t step;        /* this pool's step: microbatches of this step are worked on */
    uint8_t *done_mine;  /* M bits: indices this peer completed at this step */
    uint8_t *done_union; /* M bits: indices anyone in the pool completed */
    uint8_t *next_union; /* progress reported for step+1, kept until we get there */
    uint8_t *started;    /* stage 0: indices this peer started at this step */
    int step_done_flag;  /* stage 0 said this step is finished */
    uint32_t my_count;   /* microbatches in my gradient */
    double loss_sum;     /* stage 0: losses of the microbatches it sourced this step */
    int loss_n;
    int exch_sent;
    uint8_t *my_msg;
    size_t my_msg_len;
    exch_t *exch;
    int nexch, exch_cap;
    double exch_wait_since;
    uint64_t my_hash; /* parameter hash at the start of this step */
    double step_t0;
    /* validation (the leader of stage 0) */
    int val_phase, val_next, val_done;
    double val_sum;
    uint8_t *val_got;
    /* stats */
    msg_member_t self;
    double tp_ema;
    int tp_n;
    uint64_t served, retries, lost, act_bytes, rejected;
    double last_self_push;
    double t_start, t_train0, t_train1; /* process start; first microbatch; last step */
    int finished;
    int go; /* stage 0: the first step may start */
    int64_t follow_step;
    double follow_since;
    double pool_step_s; /* EMA of the pool's seconds per step, as seen here */
    int followed;       /* steps followed since the last download */
    double go_at;
    float last_loss;
    int32_t *host_tok, *host_tgt;
} peer_t;

/* ---- small helpers ----------------------------------------------------------------- */

static int bit(const uint8_t *b, int i)
{
    return (b[i >> 3] >> (i & 7)) & 1;
}
static void set_bit(uint8_t *b, int i)
{
    b[i >> 3] |= (uint8_t)(1u << (i & 7));
}

static int all_bits(const uint8_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (!bit(b, i)) return 0;
    return 1;
}

static const char *idhex(const uint8_t *id)
{
    static char buf[4][9];
    static int k;
    k = (k + 1) & 3;
    return msg_id_short(id, buf[k]);
}

static double wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static const msg_member_t *member(const peer_t *p, const uint8_t *id)
{
    for (int i = 0; i < p->nview; i++)
        if (!memcmp(p->view[i].id, id, MSG_ID_LEN)) return &p->view[i];
    return NULL;
}

static int is_self(const peer_t *p, const uint8_t *id)
{
    return !memcmp(p->id, id, MSG_ID_LEN);
}

/* Live serving members of a stage, into out (cap entries). */
static int stage_members(const peer_t *p, int stage, msg_member_t *out, int cap, int serving_only)
{
    int n = 0;
    for (int i = 0; i < p->nview && n < cap; i++)
        if (p->view[i].stage == stage && (!serving_only || p->view[i].state == MEMBER_SERVING))
            out[n++] = p->view[i];
    return n;
}

static int id_cmp(const void *a, const void *b)
{
    return memcmp(((const msg_member_t *)a)->id, ((const msg_member_t *)b)->id, MSG_ID_LEN);
}

/* The parameters' fingerprint (kernels.h hash64: computed where they live, the same on
 * every backend, so CPU and GPU replicas of a pool compare it). */
static uint64_t param_hash(peer_t *p)
{
    return p->k->hash64(p->k, stage_params(p->st), stage_num_params(p->st));
}

static int send_msg(peer_t *p, const uint8_t *dest, msg_t *m, int n, const void *const *pl,
                    const size_t *len)
{
    if (is_self(p, dest)) return 0;
    char err[STATUS_ERR_LEN];
    int rc = net_send(p->net, dest, m, n, pl, len, err);
    if (rc) log_warn("peer: send %s: %s", msg_type_name(m->type), err);
    return rc;
}

static mbrec_t *find_mb(peer_t *p, const msg_mb_t *mb)
{
    for (int i = 0; i < p->nmbs; i++)
        if (p->mbs[i].used && p->mbs[i].mb.step == mb->step && p->mbs[i].mb.index == mb->index &&
            p->mbs[i].mb.kind == mb->kind)
            return &p->mbs[i];
    return NULL;
}

static int free_slot(peer_t *p)
{
    int nslots = p->nslots;
    for (int s = 0; s < nslots; s++) {
        int taken = 0;
        for (int i = 0; i < p->nmbs && !taken; i++) taken = p->mbs[i].used && p->mbs[i].slot == s;
        if (!taken) return s;
    }
    return -1;
}

static mbrec_t *new_mb(peer_t *p)
{
    for (int i = 0; i < p->nmbs; i++)
        if (!p->mbs[i].used) {
            memset(&p->mbs[i], 0, sizeof p->mbs[i]);
            p->mbs[i].used = 1;
            p->mbs[i].slot = -1;
            return &p->mbs[i];
        }
    return NULL;
}

static void drop_mb(mbrec_t *r)
{
    free(r->act);
    free(r->targets);
    memset(r, 0, sizeof *r);
    r->slot = -1;
}

static int in_flight(const peer_t *p, int kind)
{
    int n = 0;
    for (int i = 0; i < p->nmbs; i++) n += p->mbs[i].used && p->mbs[i].mb.kind == kind;
    return n;
}

/* ---- sending microbatches ------------------------------------------------------------ */

/* Sends (or re-sends) a held microbatch to a peer of the next stage chosen by the
 * wiring, excluding `avoid`. Returns 0 when sent, -1 when no peer is there now. */
static int forward_to_next(peer_t *p, mbrec_t *r, const uint8_t *avoid)
{
    msg_member_t cand[64];
    int n = stage_members(p, p->stage + 1, cand, 64, 1), k = 0;
    /* members still following their pool would throw the gradient away: prefer the
     * ones that contribute to this step's exchange */
    for (int i = 0; i < n; i++)
        if (cand[i].serving_from <= r->mb.step || r->mb.kind == 1) cand[k++] = cand[i];
    if (k) n = k;
    int pick = wiring_pick(p->wiring, cand, n, avoid, 1.0);
    if (pick < 0 && avoid) pick = wiring_pick(p->wiring, cand, n, NULL, 1.0);
    if (pick < 0) return -1;
    msg_t m = {.type = MSG_FWD,
               .mb = r->mb,
               .stage = (int16_t)(p->stage + 1),
               .nroute = (uint8_t)r->nroute};
    m.mb.attempt = r->out_attempt;
    memcpy(m.route, r->route, (size_t)r->nroute * MSG_ID_LEN);
    const void *pl[2] = {r->act, r->targets};
    size_t len[2] = {r->act_len, (size_t)p->BT * sizeof(int32_t)};
    memcpy(r->next, cand[pick].id, MSG_ID_LEN);
    r->sent = 1;
    r->sent_at = clock_now();
    if (r->mb.kind == 0) p->act_bytes += r->act_len;
    return send_msg(p, r->next, &m, 2, pl, len);
}

static void reroute(peer_t *p, mbrec_t *r, const char *why)
{
    uint8_t failed[MSG_ID_LEN];
    memcpy(failed, r->next, MSG_ID_LEN);
    r->out_attempt++;
    if (forward_to_next(p, r, failed) == 0) {
        p->retries++;
        fprintf(p->log,
                "reroute: t=%.3f step %" PRId64 " microbatch %u: %s; re-sent from %s to %s\n",
                wall_now(), r->mb.step, r->mb.index, why, idhex(failed), idhex(r->next));
        fflush(p->log);
        peer_store_event(p->ps, "recovered",
                         "step %" PRId64 " microbatch %u: %s; re-sent from %s to %s", r->mb.step,
                         r->mb.index, why, idhex(failed), idhex(r->next));
    } else {
        r->sent = 0; /* retried when the next stage has a peer again */
    }
}

/* Encodes what the stage hands over, straight from its memory (stage_wire_*: on a GPU,
 * int8/int4 are quantized there): the output of `slot`'s forward pass, or with slot < 0
 * dL/dx_in of the last backward pass. *out is a fresh buffer the caller owns. */
static int encode_act(peer_t *p, int slot, uint8_t **out, size_t *len)
{
    size_t cap = stage_wire_size(p->st, p->wire_codec, p->run.codec_block);
    *out = malloc(cap ? cap : 1);
    if (!*out) return STATUS_ENOMEM;
    int rc = slot >= 0 ? stage_wire_encode_output(p->st, slot, p->wire_codec, p->run.codec_block,
                                                  *out, cap, len, p->err)
                       : stage_wire_encode_dx(p->st, p->wire_codec, p->run.codec_block, *out, cap,
                                              len, p->err);
    if (rc) {
        free(*out);
        *out = NULL;
    }
    return rc;
}

/* Checks an activation or gradient from the wire and places it for the stage's next
 * forward (x_in NULL) or backward (dy NULL) pass. */
static int decode_act(peer_t *p, const uint8_t *buf, size_t len)
{
    return stage_wire_decode(p->st, buf, len, p->err);
}

static void send_nack(peer_t *p, const msg_t *m, const char *why)
{
    msg_t n = {.type = MSG_NACK, .mb = m->mb, .stage = m->stage};
    snprintf(n.text, sizeof n.text, "%s", why);
    send_msg(p, m->sender, &n, 0, NULL, NULL);
}

static void progress(peer_t *p)
{
    msg_t m = {
        .type = MSG_PROGRESS, .stage = (int16_t)p->stage, .step = p->step, .count = (uint32_t)p->M};
    msg_member_t cand[64];
    int n = stage_members(p, p->stage, cand, 64, 1);
    size_t len = ((size_t)p->M + 7) / 8;
    const void *pl[1] = {p->done_mine};
    for (int i = 0; i < n; i++) send_msg(p, cand[i].id, &m, 1, pl, &len);
}

static void note_throughput(peer_t *p, double seconds)
{
    double tp = p->run.cfg.batch / (seconds > 1e-6 ? seconds : 1e-6);
    p->tp_n++;
    double a = 0.1;
    p->tp_ema = a * tp + (1 - a) * p->tp_ema;
    /* bias-corrected EMA (SWARM): divide by 1 - (1-a)^n */
    p->self.throughput = (float)(p->tp_ema / (1 - pow(1 - a, p->tp_n)));
}

/* ---- the work -------------------------------------------------------------------------- */

/* This peer finished the backward pass of microbatch `index` of the current step. */
static void complete_mb(peer_t *p, uint32_t index)
{
    p->my_count++;
    set_bit(p->done_mine, (int)index);
    set_bit(p->done_union, (int)index);
    progress(p);
}

/* Sends the stage's input gradient (of its last backward pass) upstream, to the peer
 * that sent us the microbatch. */
static int send_grad(peer_t *p, const mbrec_t *r, msg_t *b)
{
    uint8_t *g = NULL;
    size_t glen = 0;
    int rc = encode_act(p, -1, &g, &glen);
    if (rc) return rc;
    const void *pl[1] = {g};
    p->act_bytes += glen;
    send_msg(p, r->prev, b, 1, pl, &glen);
    free(g);
    return 0;
}

/* Stage 0: start microbatch `index` of this step (or validation batch `index`). */
static int start_mb(peer_t *p, uint32_t index, int kind)
{
    mbrec_t *r = new_mb(p);
    int slot = free_slot(p);
    if (!r || slot < 0) {
        if (r) r->used = 0;
        return 1;
    }
    r->mb = (msg_mb_t){.step = p->step, .index = index, .kind = (uint8_t)kind};
    r->slot = slot;
    memcpy(r->prev, p->id, MSG_ID_LEN);
    memcpy(r->route[0], p->id, MSG_ID_LEN);
    r->nroute = 1;
    r->targets = malloc((size_t)p->BT * sizeof(int32_t));
    if (!r->targets) return STATUS_ENOMEM;
    if (kind == 0) {
        int A = p->run.accum;
        data_train_batch(p->data, p->run.seed, index / A, p->step * A + index % A, p->run.cfg.batch,
                         p->host_tok, r->targets);
        set_bit(p->started, (int)index);
    } else {
        data_val_batch(p->data, (int)index, p->run.val_batches, p->run.cfg.batch, p->host_tok,
                       r->targets);
    }
    double t0 = clock_now();
    float loss;
    int rc = stage_forward(p->st, slot, p->host_tok, NULL, p->S == 1 ? r->targets : NULL, NULL,
                           &loss, p->err);
    if (rc) return rc;
    if (p->S == 1) { /* the whole model here */
        if (kind == 0) {
            if ((rc = stage_backward(p->st, slot, NULL, NULL, p->err))) return rc;
            complete_mb(p, index);
            p->loss_sum += loss, p->loss_n++;
        } else {
            p->val_sum += loss, p->val_done++;
        }
        drop_mb(r);
        note_throughput(p, clock_now() - t0);
        p->served++;
        return 0;
    }
    if ((rc = encode_act(p, slot, &r->act, &r->act_len))) return rc;
    note_throughput(p, clock_now() - t0);
    if (kind == 1) r->slot = -1; /* validation needs no backward: the slot is free again */
    if (forward_to_next(p, r, NULL)) r->sent = 0;
    p->served++;
    return 0;
}

static int on_fwd(peer_t *p, inmsg_t *in)
{
    msg_t *m = &in->m;
    if (m->stage != p->stage || m->nroute != p->stage || m->mb.step != p->step) {
        send_nack(p, m, m->mb.step < p->step ? "stale step" : "wrong stage");
        return 0;
    }
    if (in->pl_len[1] != (size_t)p->BT * sizeof(int32_t)) {
        p->rejected++;
        send_nack(p, m, "targets of the wrong size");
        return 0;
    }
    if (decode_act(p, in->pl[0], in->pl_len[0])) {
        p->rejected++;
        send_nack(p, m, p->err);
        return 0;
    }
    mbrec_t *old = find_mb(p, &m->mb);
    if (old) drop_mb(old); /* a re-send supersedes what we held */
    int slot = free_slot(p);
    mbrec_t *r = new_mb(p);
    if (!r || slot < 0) {
        if (r) r->used = 0;
        return 1; /* no room: keep it queued */
    }
    r->mb = m->mb;
    r->in_attempt = m->mb.attempt;
    r->slot = slot;
    memcpy(r->prev, m->sender, MSG_ID_LEN);
    r->nroute = m->nroute + 1;
    memcpy(r->route, m->route, (size_t)m->nroute * MSG_ID_LEN);
    memcpy(r->route[m->nroute], p->id, MSG_ID_LEN);
    r->targets = malloc(in->pl_len[1]);
    if (!r->targets) return STATUS_ENOMEM;
    memcpy(r->targets, in->pl[1], in->pl_len[1]);
    int last = p->stage == p->S - 1;
    double t0 = clock_now();
    float loss = NAN;
    int rc = stage_forward(p->st, slot, NULL, NULL, last ? r->targets : NULL, NULL, &loss, p->err);
    if (rc) {
        /* bad targets from the wire: refuse, keep going */
        p->rejected++;
        send_nack(p, m, p->err);
        drop_mb(r);
        return 0;
    }
    p->served++;
    if (!last) {
        if ((rc = encode_act(p, slot, &r->act, &r->act_len))) return rc;
        note_throughput(p, clock_now() - t0);
        if (m->mb.kind == 1) r->slot = -1;
        if (forward_to_next(p, r, NULL)) r->sent = 0;
        if (m->mb.kind == 1) { /* validation: the last stage answers the source directly */
            drop_mb(r);
        }
        return 0;
    }
    /* Last stage: loss, and for training the backward pass at once. */
    msg_t b = {.type = MSG_BWD,
               .mb = m->mb,
               .stage = (int16_t)(p->stage - 1),
               .loss = loss,
               .nroute = (uint8_t)r->nroute};
    b.mb.attempt = r->in_attempt;
    memcpy(b.route, r->route, (size_t)r->nroute * MSG_ID_LEN);
    p->last_loss = loss;
    if (m->mb.kind == 1) {
        const void *pl[1] = {""};
        size_t len[1] = {0};
        b.stage = 0;
        send_msg(p, r->route[0], &b, 1, pl, len);
        drop_mb(r);
        return 0;
    }
    if ((rc = stage_backward(p->st, slot, NULL, NULL, p->err))) return rc;
    note_throughput(p, clock_now() - t0);
    complete_mb(p, m->mb.index);
    rc = send_grad(p, r, &b);
    drop_mb(r);
    return rc;
}

static int on_bwd(peer_t *p, inmsg_t *in)
{
    msg_t *m = &in->m;
    mbrec_t *r = find_mb(p, &m->mb);
    if (m->mb.kind == 1) { /* a validation loss, at the source */
        if (r && p->stage == 0 && p->val_phase && isfinite(m->loss) &&
            !bit(p->val_got, (int)m->mb.index)) {
            set_bit(p->val_got, (int)m->mb.index);
            p->val_sum += m->loss;
            p->val_done++;
            drop_mb(r);
        }
        return 0;
    }
    if (!r || !r->sent || memcmp(r->next, m->sender, MSG_ID_LEN) || r->out_attempt != m->mb.attempt)
        return 0; /* a gradient for a microbatch we re-sent elsewhere, or never had */
    if (m->mb.step != p->step || r->slot < 0) {
        drop_mb(r);
        return 0;
    }
    if (decode_act(p, in->pl[0], in->pl_len[0])) {
        p->rejected++;
        reroute(p, r, "its gradient was malformed");
        return 0;
    }
    double t0 = clock_now();
    int rc = stage_backward(p->st, r->slot, NULL, NULL, p->err);
    if (rc) return rc;
    note_throughput(p, clock_now() - t0);
    complete_mb(p, m->mb.index);
    if (p->stage == 0) {
        p->loss_sum += m->loss, p->loss_n++;
        p->last_loss = m->loss;
    } else {
        msg_t b = {.type = MSG_BWD,
                   .mb = r->mb,
                   .stage = (int16_t)(p->stage - 1),
                   .loss = m->loss,
                   .nroute = m->nroute};
        memcpy(b.route, m->route, (size_t)m->nroute * MSG_ID_LEN);
        b.mb.attempt = r->in_attempt;
        rc = send_grad(p, r, &b);
    }
    drop_mb(r);
    return rc;
}

/* ---- pool progress and exchange -------------------------------------------------------- */

static exch_t *find_exch(peer_t *p, const uint8_t *id, int64_t step)
{
    for (int i = 0; i < p->nexch; i++)
        if (p->exch[i].step == step && !memcmp(p->exch[i].id, id, MSG_ID_LEN)) return &p->exch[i];
    return NULL;
}

static int store_exch(peer_t *p, const msg_t *m, const uint8_t *data, size_t len)
{
    /* only this step and the next few: a peer cannot make us hoard messages */
    if (m->step < p->step || m->step > p->step + 4 || find_exch(p, m->sender, m->step)) return 0;
    if (p->nexch == p->exch_cap) {
        int cap = p->exch_cap ? 2 * p->exch_cap : 16;
        exch_t *e = realloc(p->exch, (size_t)cap * sizeof *e);
        if (!e) return STATUS_ENOMEM;
        p->exch = e;
        p->exch_cap = cap;
    }
    exch_t *e = &p->exch[p->nexch];
    memcpy(e->id, m->sender, MSG_ID_LEN);
    e->step = m->step, e->count = m->count, e->hash = m->hash, e->since = m->since, e->len = len;
    if (!(e->data = malloc(len ? len : 1))) return STATUS_ENOMEM;
    memcpy(e->data, data, len);
    p->nexch++;
    return 0;
}

static void drop_exch_before(peer_t *p, int64_t step)
{
    int k = 0;
    for (int i = 0; i < p->nexch; i++) {
        if (p->exch[i].step < step)
            free(p->exch[i].data);
        else
            p->exch[k++] = p->exch[i];
    }
    p->nexch = k;
}

/* My contribution to this step's exchange: DeMo stage message, or my dense gradient
 * sum (AdamW: the pool averages exactly). */
static int make_exchange(peer_t *p)
{
    free(p->my_msg);
    p->my_msg = NULL;
    if (p->dopt) {
        p->my_msg_len = demo_opt_msg_size(p->dopt);
        if (!(p->my_msg = malloc(p->my_msg_len))) return STATUS_ENOMEM;
        float scale = 1.0f / (float)(p->my_count ? p->my_count : 1);
        return demo_opt_prepare(p->dopt, &p->run.opt, p->step, scale, p->my_msg, NULL, p->err);
    }
    p->my_msg_len = stage_num_params(p->st) * sizeof(float);
    if (!(p->my_msg = malloc(p->my_msg_len))) return STATUS_ENOMEM;
    p->k->download(p->k, p->my_msg, stage_grads(p->st), p->my_msg_len);
    return 0;
}

/* Members whose exchange message this step needs: serving, alive, joined by now. */
static int expected_senders(peer_t *p, msg_member_t *out, int cap)
{
    msg_member_t cand[64];
    int n = stage_members(p, p->stage, cand, 64, 1), k = 0;
    for (int i = 0; i < n && k < cap; i++)
        if (cand[i].serving_from <= p->step || is_self(p, cand[i].id)) out[k++] = cand[i];
    return k;
}

static int pool_complete(peer_t *p)
{
    if (all_bits(p->done_union, p->M)) return 1;
    return p->stage != 0 && p->step_done_flag;
}

static void reset_step(peer_t *p)
{
    size_t nb = ((size_t)p->M + 7) / 8;
    memset(p->done_mine, 0, nb);
    memcpy(p->done_union, p->next_union, nb);
    memset(p->next_union, 0, nb);
    memset(p->started, 0, nb);
    p->step_done_flag = 0;
    p->my_count = 0;
    p->loss_sum = 0, p->loss_n = 0;
    p->exch_sent = 0;
    stage_zero_grads(p->st);
    /* whatever we still hold of the old step is a duplicate someone else finished */
    for (int i = 0; i < p->nmbs; i++)
        if (p->mbs[i].used && p->mbs[i].mb.kind == 0 && p->mbs[i].mb.step < p->step)
            drop_mb(&p->mbs[i]);
    drop_exch_before(p, p->step);
}

/* Steps a newcomer follows before it contributes: long enough (3 s of pool steps, and at
 * least 2 steps) that every member has heard through gossip when it starts counting. */
static int64_t join_margin(const peer_t *p)
{
    double sps = p->pool_step_s > 0 ? p->pool_step_s : 1.0;
    double steps = ceil(3.0 / sps);
    return steps < 2 ? 2 : steps > 1000 ? 1000 : (int64_t)steps;
}

/* A dense AdamW message: the right size, every value finite. */
static int dense_ok(const peer_t *p, const exch_t *e)
{
    size_t P = stage_num_params(p->st);
    if (e->len != P * sizeof(float)) return 0;
    const float *g = (const float *)(const void *)e->data;
    for (size_t i = 0; i < P; i++)
        if (!isfinite(g[i])) return 0;
    return 1;
}

/* Applies the pool's messages for this step and moves to the next. */
static int apply_exchange(peer_t *p, const msg_member_t *senders, int n)
{
    const uint8_t *msgs[64];
    size_t lens[64];
    uint32_t total = 0;
    int m = 0, agree = 1, disagree = 0; /* we agree with ourselves */
    /* the most senior member on each side: earliest contributor, then lowest id */
    int64_t a_since = p->self.serving_from, d_since = INT64_MAX;
    const uint8_t *a_id = p->id, *d_id = NULL;
    for (int i = 0; i < n; i++) {
        if (is_self(p, senders[i].id)) {
            msgs[m] = p->my_msg, lens[m] = p->my_msg_len, total += p->my_count;
            m++;
            continue;
        }
        exch_t *e = find_exch(p, senders[i].id, p->step);
        if (!e) continue;
        if (!p->dopt && !dense_ok(p, e)) {
            p->rejected++;
            continue;
        }
        msgs[m] = e->data, lens[m] = e->len, total += e->count;
        int same = e->hash == p->my_hash;
        int64_t *since = same ? &a_since : &d_since;
        const uint8_t **id = same ? &a_id : &d_id;
        if (e->since < *since ||
            (e->since == *since && (!*id || memcmp(e->id, *id, MSG_ID_LEN) < 0)))
            *since = e->since, *id = e->id;
        if (same)
            agree++;
        else
            disagree++;
        m++;
    }
    /* Replicas must be identical. The majority keeps its parameters; on a tie the side
     * holding the most senior member does. The others fetch the pool's state again. */
    int senior_disagrees =
        d_id && (d_since < a_since || (d_since == a_since && memcmp(d_id, a_id, MSG_ID_LEN) < 0));
    if (disagree > agree || (disagree && disagree == agree && senior_disagrees)) {
        log_warn("peer: my parameters differ from the pool's at step %" PRId64
                 " (%d of %d disagree)",
                 p->step, disagree, agree + disagree);
        return STATUS_ECORRUPT; /* the caller re-syncs */
    }
    log_debug("peer: step %" PRId64
              " stage %d: applying %d message(s) of %d expected, %u microbatches%s",
              p->step, p->stage, m, n, total, p->self.serving_from > p->step ? " (following)" : "");
    int rc = 0;
    float gnorm = 0;
    if (p->dopt) {
        rc = demo_opt_apply(p->dopt, &p->run.opt, p->step, msgs, lens, m, p->err);
    } else {
        /* the exact mean of every member's gradient sum over all their microbatches */
        size_t P = stage_num_params(p->st);
        float *sum = calloc(P, sizeof(float));
        if (!sum) return STATUS_ENOMEM;
        for (int j = 0; j < m; j++) {
            const float *g = (const float *)msgs[j];
            for (size_t i = 0; i < P; i++) sum[i] += g[i];
        }
        p->k->upload(p->k, stage_grads(p->st), sum, P * sizeof(float));
        free(sum);
        optim_adamw_step(p->st, &p->run.opt, p->step, 1.0f / (float)(total ? total : 1), &gnorm);
    }
    if (rc) return rc;
    double now = clock_now();
    if (p->stage == 0 && p->loss_n) {
        int64_t s = p->step;
        double tok = (double)p->BT * p->M;
        if (s % p->po->log_every == 0 || s == p->run.steps - 1)
            fprintf(p->log, "step %" PRId64 " loss %.6f lr %.3e gnorm %.3f tok/s %.0f\n", s,
                    p->loss_sum / p->loss_n, optim_lr(&p->run.opt, s), gnorm,
                    p->step_t0 > 0 ? tok / (now - p->step_t0) : 0.0);
        fflush(p->log);
        p->self.loss = (float)(p->loss_sum / p->loss_n);
    } else if (p->stage == p->S - 1) {
        p->self.loss = p->last_loss;
    }
    double step_s = p->step_t0 > 0 ? now - p->step_t0 : 0;
    if (p->step_t0 > 0) /* the pool's pace, from the second step seen on */
        p->pool_step_s =
            p->pool_step_s > 0 ? 0.8 * p->pool_step_s + 0.2 * (now - p->step_t0) : now - p->step_t0;
    p->step_t0 = now;
    p->step++;
    if (p->self.serving_from > p->step && ++p->followed >= 4) { /* the pool's pace is known now */
        int64_t want = p->step + join_margin(p);
        if (want < p->self.serving_from) p->self.serving_from = want;
    }
    if (p->step == p->run.steps) p->t_train1 = now;
    p->my_hash = param_hash(p);
    reset_step(p);
    if (p->ps) {
        const msg_member_t *me = member(p, p->id);
        double loss = p->stage == 0 || p->stage == p->S - 1 ? p->self.loss : NAN;
        peer_store_metric(p->ps, p->step - 1, loss, step_s > 0 ? (double)p->BT * p->M / step_s : 0,
                          me ? me->bytes_out : 0, me ? me->bytes_in : 0);
        peer_store_step(p->ps, p->st, p->dopt, p->step, p->step == p->run.steps);
    }
    if (p->stage == 0) { /* tell every other pool this step is over */
        msg_t d = {.type = MSG_STEP_DONE, .step = p->step - 1};
        for (int i = 0; i < p->nview; i++)
            if (p->view[i].stage != 0) send_msg(p, p->view[i].id, &d, 0, NULL, NULL);
    }
    return 0;
}

static int try_exchange(peer_t *p)
{
    if (p->self.state != MEMBER_SERVING || p->self.serving_from > p->step) return 0;
    if (p->step >= p->run.steps || !pool_complete(p)) return 0;
    int rc;
    if (!p->exch_sent) {
        if ((rc = make_exchange(p))) return rc;
        msg_t m = {.type = MSG_EXCH,
                   .stage = (int16_t)p->stage,
                   .step = p->step,
                   .count = p->my_count,
                   .hash = p->my_hash,
                   .since = p->self.serving_from};
        msg_member_t cand[64];
        int n = stage_members(p, p->stage, cand, 64, 1);
        const void *pl[1] = {p->my_msg};
        for (int i = 0; i < n; i++) send_msg(p, cand[i].id, &m, 1, pl, &p->my_msg_len);
        p->exch_sent = 1;
        p->exch_wait_since = clock_now();
    }
    msg_member_t exp[64];
    int n = expected_senders(p, exp, 64), have = 0;
    for (int i = 0; i < n; i++) have += is_self(p, exp[i].id) || find_exch(p, exp[i].id, p->step);
    if (have < n && clock_now() - p->exch_wait_since < 30.0) return 0;
    if (have < n)
        log_warn("peer: step %" PRId64
                 ": %d of %d pool messages after 30 s; stepping without the rest",
                 p->step, have, n);
    return apply_exchange(p, exp, n);
}

/* A peer that is not (yet) an exchange member applies the pool's update from the
 * messages it is sent, so it stays in step without contributing. */
static int follow_exchange(peer_t *p)
{
    if (p->self.state != MEMBER_SERVING || p->self.serving_from <= p->step) return 0;
    msg_member_t exp[64];
    int n = expected_senders(p, exp, 64), have = 0, others = 0;
    for (int i = 0; i < n; i++) {
        if (is_self(p, exp[i].id)) continue;
        others++;
        have += find_exch(p, exp[i].id, p->step) != NULL;
    }
    if (!others || have < others) return 0;
    /* our own (empty) gradient is not part of it */
    msg_member_t only[64];
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!is_self(p, exp[i].id)) only[k++] = exp[i];
    p->my_count = 0;
    if (p->dopt) demo_opt_decay(p->dopt, &p->run.opt, p->step);
    return apply_exchange(p, only, k);
}

/* ---- stage state: serving it and downloading it ------------------------------------- */

typedef struct {
    uint8_t *snap; /* params | adam m | adam v | adam step (i64) */
    size_t total;
    int64_t step;
    uint8_t hash[32];
} snapshot_t;

static snapshot_t snap; /* one peer per process */

static size_t state_bytes(peer_t *p)
{
    return 3 * stage_num_params(p->st) * sizeof(float) + 8;
}

static int take_snapshot(peer_t *p)
{
    size_t P = stage_num_params(p->st) * sizeof(float), total = state_bytes(p);
    if (snap.total != total) {
        uint8_t *b = realloc(snap.snap, total);
        if (!b) return STATUS_ENOMEM;
        snap.snap = b;
        snap.total = total;
    }
    p->k->download(p->k, snap.snap, stage_params(p->st), P);
    p->k->download(p->k, snap.snap + P, stage_opt_m(p->st), P);
    p->k->download(p->k, snap.snap + 2 * P, stage_opt_v(p->st), P);
    memcpy(snap.snap + 3 * P, stage_opt_step(p->st), 8);
    crypto_generichash(snap.hash, 32, snap.snap, total, NULL, 0);
    snap.step = p->step;
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
    msg_t r = {.type = MSG_ERROR};
    if (m->stage != p->stage || p->self.state != MEMBER_SERVING ||
        p->self.serving_from > p->step + 1) {
        r.code = STATUS_ENOTFOUND;
        snprintf(r.text, sizeof r.text, "not serving stage %d", m->stage);
        send_msg(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    if (m->step >= 0 && m->step != p->step && !(snap.snap && snap.step == m->step)) {
        r.code = STATUS_ENOTFOUND;
        snprintf(r.text, sizeof r.text, "state of step %" PRId64 " is gone; now at %" PRId64,
                 m->step, p->step);
        send_msg(p, m->sender, &r, 0, NULL, NULL);
        return;
    }
    if (!snap.snap || snap.step != (m->step >= 0 ? m->step : p->step) ||
        snap.total != state_bytes(p))
        if (take_snapshot(p)) return;
    if (m->offset > snap.total) return;
    size_t len = snap.total - m->offset;
    if (len > m->length) len = m->length;
    if (len > STATE_CHUNK) len = STATE_CHUNK;
    msg_t rep = {.type = MSG_STATE_REP,
                 .stage = (int16_t)p->stage,
                 .step = snap.step,
                 .offset = m->offset,
                 .total = snap.total,
                 .length = (uint32_t)len};
    memcpy(rep.state_hash, snap.hash, 32);
    const void *pl[1] = {snap.snap + m->offset};
    send_msg(p, m->sender, &rep, 1, pl, &len);
}

/* Download state: in flight are chunk requests spread over the pool's members. */
typedef struct {
    int active;
    int64_t step; /* -1 until the first answer */
    size_t total;
    uint8_t hash[32];
    uint8_t *buf;
    int nchunks;
    uint8_t *got;     /* per chunk */
    double *asked_at; /* per chunk, 0 = not asked */
    int restart;      /* the state moved on: start again */
} download_t;

static download_t dl;

static void on_state_rep(peer_t *p, net_ev_t *ev)
{
    const msg_t *m = &ev->msg;
    if (!dl.active || m->stage != p->stage || ev->nframes != 1) return;
    if (dl.step < 0) {
        if (m->offset != 0 || m->total != state_bytes(p)) {
            dl.restart = 1;
            return;
        }
        dl.step = m->step;
        dl.total = m->total;
        memcpy(dl.hash, m->state_hash, 32);
        dl.nchunks = (int)((dl.total + STATE_CHUNK - 1) / STATE_CHUNK);
        dl.buf = malloc(dl.total);
        dl.got = calloc((size_t)dl.nchunks, 1);
        dl.asked_at = calloc((size_t)dl.nchunks, sizeof(double));
        if (!dl.buf || !dl.got || !dl.asked_at) {
            dl.restart = 1;
            return;
        }
    }
    if (m->step != dl.step || m->total != dl.total || memcmp(m->state_hash, dl.hash, 32) ||
        m->offset % STATE_CHUNK || m->offset >= dl.total) {
        dl.restart = 1; /* members disagree or moved on */
        return;
    }
    int c = (int)(m->offset / STATE_CHUNK);
    size_t want = dl.total - m->offset < STATE_CHUNK ? dl.total - m->offset : STATE_CHUNK;
    if (ev->frame_len[0] != want || m->length != want) return;
    memcpy(dl.buf + m->offset, ev->frame[0], want);
    dl.got[c] = 1;
}

static void dl_reset(void)
{
    free(dl.buf);
    free(dl.got);
    free(dl.asked_at);
    memset(&dl, 0, sizeof dl);
}

static int handle_event(peer_t *p, net_ev_t *ev);

/* Downloads the stage's state from its live members, several chunks at once from
 * several members, verifies its hash, loads it. 0, STATUS_ENOTFOUND (no member), or
 * another status after repeated failures. */
static int download_state(peer_t *p)
{
    for (int attempt = 0; attempt < 20 && !stop_requested; attempt++) {
        msg_member_t mem[64];
        int n = 0;
        {
            msg_member_t all[64];
            int k = stage_members(p, p->stage, all, 64, 1);
            for (int i = 0; i < k; i++)
                if (!is_self(p, all[i].id)) mem[n++] = all[i];
        }
        if (!n) return STATUS_ENOTFOUND;
        dl_reset();
        dl.active = 1;
        dl.step = -1;
        msg_t q = {.type = MSG_STATE_REQ,
                   .stage = (int16_t)p->stage,
                   .step = -1,
                   .offset = 0,
                   .length = STATE_CHUNK};
        send_msg(p, mem[0].id, &q, 0, NULL, NULL);
        double t0 = clock_now(), first_deadline = t0 + 10;
        while (!dl.restart && !stop_requested) {
            net_ev_t ev;
            int rc = net_recv(p->net, 20, &ev);
            if (rc < 0) return STATUS_ENET;
            if (rc == 0 && (rc = handle_event(p, &ev))) return rc;
            if (dl.step < 0) {
                if (clock_now() > first_deadline) dl.restart = 1;
                continue;
            }
            /* keep up to 2 chunks per member in flight; re-ask after 10 s */
            n = 0;
            msg_member_t all[64];
            int k = stage_members(p, p->stage, all, 64, 1);
            for (int i = 0; i < k; i++)
                if (!is_self(p, all[i].id)) mem[n++] = all[i];
            if (!n) break;
            int outstanding = 0, done = 1;
            double now = clock_now();
            for (int c = 0; c < dl.nchunks; c++) {
                if (dl.got[c]) continue;
                done = 0;
                if (dl.asked_at[c] > 0 && now - dl.asked_at[c] < 10) outstanding++;
            }
            if (done) break;
            for (int c = 0, next = 0; c < dl.nchunks && outstanding < 2 * n; c++) {
                if (dl.got[c] || (dl.asked_at[c] > 0 && now - dl.asked_at[c] < 10)) continue;
                msg_t r = {.type = MSG_STATE_REQ,
                           .stage = (int16_t)p->stage,
                           .step = dl.step,
                           .offset = (uint64_t)c * STATE_CHUNK,
                           .length = STATE_CHUNK};
                send_msg(p, mem[next++ % n].id, &r, 0, NULL, NULL);
                dl.asked_at[c] = now;
                outstanding++;
            }
        }
        if (dl.restart || dl.step < 0) {
            log_info("peer: state download restarts (the pool moved on or did not answer)");
            continue;
        }
        if (!n) continue;
        uint8_t h[32];
        crypto_generichash(h, 32, dl.buf, dl.total, NULL, 0);
        if (memcmp(h, dl.hash, 32)) {
            log_warn("peer: downloaded state does not match its hash; again");
            continue;
        }
        load_state(p, dl.buf);
        p->step = dl.step;
        p->step_t0 = 0, p->pool_step_s = 0, p->followed = 0;
        fprintf(p->log,
                "state: downloaded stage %d at step %" PRId64
                " (%.1f MB in %.2f s from %d peer(s)), hash verified\n",
                p->stage, p->step, dl.total / 1e6, clock_now() - t0, n);
        fflush(p->log);
        dl_reset();
        return 0;
    }
    dl_reset();
    return status_set(p->err, STATUS_ETIMEOUT, "could not download stage %d's state", p->stage);
}

/* ---- events ---------------------------------------------------------------------------- */

static int enqueue(peer_t *p, net_ev_t *ev)
{
    /* forwards beyond MAX_PENDING are refused (the sender re-routes); gradients are
     * always kept: they finish work already done */
    if (p->npending >= MAX_PENDING && ev->msg.type == MSG_FWD) {
        send_nack(p, &ev->msg, "busy");
        return 0;
    }
    if (p->npending == p->pending_cap) {
        int cap = p->pending_cap ? 2 * p->pending_cap : 64;
        inmsg_t *q = realloc(p->pending, (size_t)cap * sizeof *q);
        if (!q) return STATUS_ENOMEM;
        p->pending = q;
        p->pending_cap = cap;
    }
    inmsg_t *in = &p->pending[p->npending];
    memset(in, 0, sizeof *in);
    in->m = ev->msg;
    for (int i = 0; i < ev->nframes && i < 2; i++) {
        in->pl[i] = malloc(ev->frame_len[i] ? ev->frame_len[i] : 1);
        if (!in->pl[i]) return STATUS_ENOMEM;
        memcpy(in->pl[i], ev->frame[i], ev->frame_len[i]);
        in->pl_len[i] = ev->frame_len[i];
    }
    p->npending++;
    return 0;
}

static void dequeue(peer_t *p, int i)
{
    free(p->pending[i].pl[0]);
    free(p->pending[i].pl[1]);
    memmove(&p->pending[i], &p->pending[i + 1], (size_t)(p->npending - i - 1) * sizeof *p->pending);
    p->npending--;
}

/* Fault injection for drills (`local --kill`): with SWARMTRAIN_FAULT_DIE_AT_STEP=N in its
 * environment the peer SIGKILLs itself when a microbatch of step >= N reaches it, so that
 * it dies holding work its sender must re-route; the log line gives the moment. */
static void fault_point(peer_t *p, const msg_t *m)
{
    static long long die_at = -2;
    if (die_at == -2) {
        const char *e = getenv("SWARMTRAIN_FAULT_DIE_AT_STEP");
        die_at = e && *e ? atoll(e) : -1;
    }
    if (die_at < 0 || m->step < die_at) return;
    fprintf(p->log, "fault: t=%.3f dying on purpose at step %" PRId64 " holding microbatch %u\n",
            wall_now(), m->step, m->mb.index);
    fflush(p->log);
    raise(SIGKILL);
}

static int handle_event(peer_t *p, net_ev_t *ev)
{
    if (ev->type == NET_EV_VIEW) {
        for (int i = 0; p->ps && i < p->nview; i++) { /* who is gone: dead or left */
            int still = 0;
            for (int j = 0; j < ev->nmembers && !still; j++)
                still = !memcmp(ev->members[j].id, p->view[i].id, MSG_ID_LEN);
            if (!still)
                peer_store_event(p->ps, "failed",
                                 "peer %s of stage %d left the view (silent past the timeout, or "
                                 "left) at step %" PRId64,
                                 idhex(p->view[i].id), p->view[i].stage, p->step);
        }
        if (ev->nmembers > p->view_cap) {
            msg_member_t *v = realloc(p->view, (size_t)ev->nmembers * sizeof *v);
            if (!v) return STATUS_ENOMEM;
            p->view = v;
            p->view_cap = ev->nmembers;
        }
        memcpy(p->view, ev->members, (size_t)ev->nmembers * sizeof *p->view);
        p->nview = ev->nmembers;
        for (int i = 0; p->st && i < p->nmbs; i++) {
            mbrec_t *r = &p->mbs[i];
            if (!r->used) continue;
            const msg_member_t *nx = r->sent ? member(p, r->next) : NULL;
            if (r->sent && (!nx || nx->stage != p->stage + 1))
                reroute(p, r, "its next peer is gone");
        }
        return 0;
    }
    if (ev->type == NET_EV_UNDELIV) {
        if (ev->msg.type == MSG_FWD && p->st) {
            mbrec_t *r = find_mb(p, &ev->msg.mb);
            if (r && r->sent && !memcmp(r->next, ev->dest, MSG_ID_LEN))
                reroute(p, r, "undeliverable");
        }
        return 0;
    }
    if (ev->type != NET_EV_MSG) return 0;
    msg_t *m = &ev->msg;
    switch (m->type) {
    case MSG_FWD:
    case MSG_BWD:
        if (!p->st || ev->nframes != msg_payloads(m->type)) return 0;
        fault_point(p, m);
        return enqueue(p, ev);
    case MSG_NACK: {
        if (!p->st) return 0;
        mbrec_t *r = find_mb(p, &m->mb);
        if (!r || !r->sent || memcmp(r->next, m->sender, MSG_ID_LEN)) return 0;
        if (!strcmp(m->text, "stale step")) {
            p->lost++;
            fprintf(p->log, "lost: step %" PRId64 " microbatch %u: the next stage moved past it\n",
                    r->mb.step, r->mb.index);
            drop_mb(r);
        } else {
            char why[MSG_TEXT_MAX + 32];
            snprintf(why, sizeof why, "refused (%s)", m->text);
            reroute(p, r, why);
        }
        return 0;
    }
    case MSG_PROGRESS: {
        size_t nb = ((size_t)p->M + 7) / 8;
        if (!p->st || m->stage != p->stage || m->count != (uint32_t)p->M || ev->nframes != 1 ||
            ev->frame_len[0] != nb) {
            log_debug("peer: rejected PROGRESS (stage %d, count %u)", m->stage, m->count);
            p->rejected++;
            return 0;
        }
        uint8_t *into = m->step == p->step       ? p->done_union
                        : m->step == p->step + 1 ? p->next_union
                                                 : NULL;
        for (size_t i = 0; into && i < nb; i++) into[i] |= ev->frame[0][i];
        return 0;
    }
    case MSG_STEP_DONE:
        if (m->flags & 1)
            p->finished = 1;
        else if (m->step == p->step)
            p->step_done_flag = 1;
        return 0;
    case MSG_EXCH: {
        if (!p->st || m->stage != p->stage || ev->nframes != 1) return 0;
        char why[STATUS_ERR_LEN];
        if (p->dopt && m->step >= p->step && m->step <= p->step + 4 &&
            demo_opt_check(p->dopt, m->step, ev->frame[0], ev->frame_len[0], why)) {
            p->rejected++; /* the pool steps without it; hashes catch a peer that diverges */
            log_warn("peer: refused the step %" PRId64 " exchange message of %s: %s", m->step,
                     idhex(m->sender), why);
            return 0;
        }
        return store_exch(p, m, ev->frame[0], ev->frame_len[0]);
    }
    case MSG_STATE_REQ:
        if (p->st) on_state_req(p, m);
        return 0;
    case MSG_STATE_REP:
        on_state_rep(p, ev);
        return 0;
    case MSG_ERROR:
        if (dl.active) dl.restart = 1;
        log_debug("peer: error from %s: %s", idhex(m->sender), m->text);
        return 0;
    default:
        return 0;
    }
}

/* ---- the loop ---------------------------------------------------------------------------- */

/* Stage-0 peers split each step's M microbatch indices: index i belongs to the i mod n-th
 * of the pool's exchange members in id order. When one dies its indices pass on. */
static int owners(peer_t *p, msg_member_t *own, int *me)
{
    msg_member_t cand[64];
    int n = stage_members(p, 0, cand, 64, 1), k = 0;
    for (int i = 0; i < n; i++)
        if (cand[i].serving_from <= p->step) own[k++] = cand[i];
    qsort(own, (size_t)k, sizeof *own, id_cmp);
    *me = -1;
    for (int i = 0; i < k; i++)
        if (is_self(p, own[i].id)) *me = i;
    return k;
}

static int source_work(peer_t *p)
{
    if (p->stage != 0 || p->self.state != MEMBER_SERVING) return 0;
    msg_member_t own[64];
    int me, n = owners(p, own, &me);
    if (me < 0) return 0;
    if (p->step < p->run.steps) {
        if (p->step == 0 && !p->go) { /* a new swarm waits for its first peers */
            int serving = 0;
            for (int i = 0; i < p->nview; i++) serving += p->view[i].state == MEMBER_SERVING;
            if (serving < p->po->wait_peers) return 0;
            if (p->go_at == 0) p->go_at = clock_now() + 4 * 0.25; /* let gossip settle */
            if (clock_now() < p->go_at) return 0;
            p->go = 1;
        }
        if (in_flight(p, 0) >= p->po->in_flight) return 0;
        if (p->t_train0 == 0) p->t_train0 = clock_now();
        for (int i = 0; i < p->M; i++)
            if (i % n == me && !bit(p->started, i) && !bit(p->done_union, i))
                return start_mb(p, (uint32_t)i, 0) == 1 ? 0 : 1;
        return 0;
    }
    /* All steps done: the leader measures the held-out loss. */
    if (me != 0 || p->finished) return 0;
    if (!p->val_phase) {
        p->val_phase = 1;
        p->val_got = calloc(((size_t)p->run.val_batches + 7) / 8, 1);
        if (!p->val_got) return STATUS_ENOMEM;
    }
    if (p->val_done == p->run.val_batches) {
        double val = p->val_sum / p->run.val_batches;
        fprintf(p->log, "tokens/s %.0f\nval_loss %.4f\n",
                /* the whole swarm's tokens: every stage-0 peer sources its share */
                (double)p->run.steps * p->M * p->BT / (p->t_train1 - p->t_train0), val);
        fflush(p->log);
        msg_t d = {.type = MSG_STEP_DONE, .flags = 1, .step = p->step};
        for (int i = 0; i < p->nview; i++) send_msg(p, p->view[i].id, &d, 0, NULL, NULL);
        p->finished = 1;
        return 0;
    }
    if (p->val_next < p->run.val_batches && in_flight(p, 1) < p->po->in_flight) {
        int rc = start_mb(p, (uint32_t)p->val_next, 1);
        if (rc == 0) p->val_next++;
        return rc < 0 ? rc : 0;
    }
    return 0;
}

/* One unit of compute: a gradient to pass back, else a forward of this step. */
static int serve_one(peer_t *p, int *did)
{
    *did = 0;
    for (int i = 0; i < p->npending; i++)
        if (p->pending[i].m.type == MSG_BWD) {
            int rc = on_bwd(p, &p->pending[i]);
            dequeue(p, i);
            *did = 1;
            return rc;
        }
    for (int i = 0; i < p->npending; i++) {
        inmsg_t *in = &p->pending[i];
        if (in->m.type != MSG_FWD) continue;
        if (in->m.mb.step > p->step) continue; /* its pool step is not here yet */
        int rc = on_fwd(p, in);
        if (rc == 1) continue; /* no free slot */
        dequeue(p, i);
        *did = 1;
        return rc;
    }
    return 0;
}

static void custody(peer_t *p)
{
    double now = clock_now();
    for (int i = 0; i < p->nmbs; i++) {
        mbrec_t *r = &p->mbs[i];
        if (!r->used || !r->act) continue;
        if (!r->sent) {
            if (forward_to_next(p, r, NULL) == 0)
                r->sent = 1;
            else
                r->sent = 0;
        } else if (now - r->sent_at > p->po->custody_s) {
            reroute(p, r, "no gradient back in time");
        }
    }
}

static void push_self(peer_t *p)
{
    p->self.step = p->step;
    p->self.served = p->served;
    p->self.retries = p->retries;
    p->self.rejected = p->rejected; /* the network thread adds its own */
    p->self.stage = (int16_t)p->stage;
    net_set_self(p->net, &p->self);
    p->last_self_push = clock_now();
}

static int choose_stage(peer_t *p)
{
    if (p->po->stage >= 0) {
        if (p->po->stage >= p->S)
            return status_set(p->err, STATUS_EINVAL, "--stage %d: the run has %d stages",
                              p->po->stage, p->S);
        return p->po->stage;
    }
    int best = 0, best_n = 0;
    double best_tp = -1;
    for (int s = 0; s < p->S; s++) {
        double tp = 0;
        int n = 0;
        for (int i = 0; i < p->nview; i++)
            if (p->view[i].stage == s && p->view[i].state == MEMBER_SERVING &&
                !is_self(p, p->view[i].id))
                tp += p->view[i].throughput, n++;
        if (best_tp < 0 || tp < best_tp || (tp == best_tp && n < best_n))
            best = s, best_tp = tp, best_n = n;
    }
    return best;
}

/* Waits up to `seconds` for a message of `type` (other events are handled). */
static int wait_for(peer_t *p, int type, double seconds, net_ev_t *out)
{
    double end = clock_now() + seconds;
    while (clock_now() < end && !stop_requested) {
        int rc = net_recv(p->net, 50, out);
        if (rc < 0) return STATUS_ENET;
        if (rc) continue;
        if (out->type == NET_EV_MSG && out->msg.type == type) return 0;
        if (out->type == NET_EV_VIEW && (rc = handle_event(p, out))) return rc;
    }
    return STATUS_ETIMEOUT;
}

static int join_swarm(peer_t *p, char *endpoint)
{
    const peer_options_t *po = p->po;
    char text[4096];
    if (po->is_new) {
        p->run = po->run;
        train_options_to_text(&p->run, text, sizeof text);
        uint64_t salt;
        memcpy(&salt, p->id, 8);
        p->swarm = rng_mix(rng_hash_str(text), salt);
        net_set_run(p->net, p->swarm, text);
        fprintf(p->log, "swarm: new swarm %016" PRIx64 " listening on %s\n", p->swarm, endpoint);
        return 0;
    }
    net_ev_t ev;
    for (int tries = 0; tries < 10; tries++) {
        if (net_hello(p->net, po->join, po->stage, p->err)) return STATUS_ENET;
        if (wait_for(p, MSG_WELCOME, 3.0, &ev) == 0) break;
        if (stop_requested) return STATUS_ETIMEOUT;
        if (tries == 9) return status_set(p->err, STATUS_ETIMEOUT, "no answer from %s", po->join);
    }
    if (ev.nframes != 2 || ev.frame_len[0] >= sizeof text)
        return status_set(p->err, STATUS_EMALFORMED, "malformed WELCOME from %s", po->join);
    memcpy(text, ev.frame[0], ev.frame_len[0]);
    text[ev.frame_len[0]] = 0;
    p->run = train_defaults();
    if (train_options_from_text(&p->run, text, p->err)) return STATUS_EMALFORMED;
    p->swarm = ev.msg.swarm;
    net_set_run(p->net, p->swarm, text);
    fprintf(p->log, "swarm: joined %016" PRIx64 " through %s; listening on %s\n", p->swarm,
            po->join, endpoint);
    /* the member table arrives with the next view */
    net_ev_t v;
    wait_for(p, -1, 0.6, &v);
    return 0;
}

static void peer_free(peer_t *p)
{
    for (int i = 0; i < p->nmbs; i++) drop_mb(&p->mbs[i]);
    free(p->mbs);
    while (p->npending) dequeue(p, p->npending - 1);
    free(p->pending);
    drop_exch_before(p, INT64_MAX);
    free(p->exch);
    free(p->my_msg);
    free(p->view);
    free(p->done_mine);
    free(p->done_union);
    free(p->next_union);
    free(p->started);
    free(p->val_got);
    free(p->host_tok);
    free(p->host_tgt);
    peer_store_close(&p->ps); /* waits for the checkpoint being written */
    demo_opt_destroy(&p->dopt);
    stage_destroy(&p->st);
    kern_destroy(&p->k);
    data_destroy(&p->data);
    wiring_destroy(&p->wiring);
    net_stop(&p->net);
    dl_reset();
    free(snap.snap);
    memset(&snap, 0, sizeof snap);
}

int peer_run(const peer_options_t *po, char *err)
{
    peer_t pp = {0}, *p = &pp;
    p->po = po;
    p->log = po->log ? po->log : stdout;
    p->self.loss = NAN;
    p->t_start = clock_now();
    p->nslots = po->slots > 0 ? po->slots : 2 * po->in_flight + 2;
    int rc = 0;
    if (sodium_init() < 0) return status_set(err, STATUS_EIO, "libsodium failed to initialize");
    if (po->in_flight < 1 || po->slots < 0 || po->peer_timeout_s <= 0 || po->custody_s <= 0)
        return status_set(err, STATUS_EINVAL, "in-flight, slots and timeouts must be positive");
    if (!po->is_new && !po->join)
        return status_set(err, STATUS_EINVAL, "give --new or --join ENDPOINT");
    if (po->checkpoint_every && !po->db)
        return status_set(err, STATUS_EINVAL, "--checkpoint-every needs --db PATH (the store)");

    /* identity: the store's Ed25519 key when there is a store, else a fresh one */
    if (po->db) {
        if (!(p->ps = peer_store_open(po->db, p->id, err))) return STATUS_EIO;
    } else {
        unsigned char sk[crypto_sign_SECRETKEYBYTES];
        crypto_sign_keypair(p->id, sk);
        sodium_memzero(sk, sizeof sk);
    }
    char endpoint[256];
    net_config_t nc = {.bind = po->listen,
                       .advertise = po->advertise,
                       .heartbeat_s = 0.25,
                       .timeout_s = po->peer_timeout_s};
    memcpy(nc.id, p->id, MSG_ID_LEN);
    nc.self.stage = 0;
    nc.self.state = MEMBER_JOINING;
    nc.self.loss = NAN;
    if (!(p->net = net_start(&nc, endpoint, err))) return STATUS_ENET;
    if ((rc = join_swarm(p, endpoint))) goto out;

    /* the stage */
    const model_config_t *c = &p->run.cfg;
    p->S = c->stages;
    p->M = p->run.replicas * p->run.accum;
    p->BT = c->batch * c->seq;
    p->C = c->dim;
    p->wire_codec = p->run.codec >= 0 ? p->run.codec : CODEC_F32;
    if ((p->stage = choose_stage(p)) < 0) {
        rc = STATUS_EINVAL;
        goto out;
    }
    if (!(p->k = kern_new(po->device, po->threads, p->err)) ||
        !(p->st = stage_new(c, p->stage, p->k, p->nslots, p->run.seed, p->err))) {
        rc = STATUS_EINVAL;
        goto out;
    }
    if (p->run.optimizer == TRAIN_DEMO && !(p->dopt = demo_opt_new(p->st, &p->run.demo, p->err))) {
        rc = STATUS_EINVAL;
        goto out;
    }
    peer_store_bind(p->ps, p->stage, &p->run, po->checkpoint_every, po->checkpoint_budget);
    if (p->stage == 0) {
        if (!po->data_path && (rc = data_ensure_default(p->err))) goto out;
        if (!(p->data = data_open(po->data_path ? po->data_path : data_default_path(), c->seq, 0.05,
                                  p->err))) {
            rc = STATUS_EINVAL;
            goto out;
        }
    }
    size_t nb = ((size_t)p->M + 7) / 8;
    p->nmbs = p->nslots + 2 * po->in_flight + 8;
    p->mbs = calloc((size_t)p->nmbs, sizeof *p->mbs);
    p->done_mine = calloc(nb, 1), p->done_union = calloc(nb, 1), p->next_union = calloc(nb, 1);
    p->started = calloc(nb, 1);
    p->host_tok = malloc((size_t)p->BT * sizeof(int32_t)),
    p->host_tgt = malloc((size_t)p->BT * sizeof(int32_t));
    p->wiring = wiring_new(rng_mix(p->run.seed, *(uint64_t *)p->id));
    if (!p->mbs || !p->done_mine || !p->done_union || !p->next_union || !p->started ||
        !p->host_tok || !p->host_tgt || !p->wiring) {
        rc = status_set(p->err, STATUS_ENOMEM, "peer: out of memory");
        goto out;
    }
    p->self.stage = (int16_t)p->stage;
    push_self(p);

    /* its state: from the pool; for a stage nobody holds, from this peer's newest checkpoint
     * of the run, else from the seed */
    rc = download_state(p);
    int downloaded = rc == 0;
    if (downloaded)
        peer_store_event(p->ps, "joined", "stage %d at step %" PRId64 ": state from the pool",
                         p->stage, p->step);
    if (rc == STATUS_ENOTFOUND) {
        int64_t step = 0, ck_step = -1;
        for (int i = 0; i < p->nview; i++)
            if (p->view[i].state == MEMBER_SERVING && p->view[i].step > step)
                step = p->view[i].step;
        char e2[STATUS_ERR_LEN] = "";
        /* Only into a running swarm: when every pool starts afresh nobody owns the step
         * count, so a whole-swarm resume would mix checkpoints of different steps. */
        int rr = p->ps && step > 0 ? peer_store_restore(p->ps, p->st, p->dopt, &ck_step, e2)
                                   : STATUS_ENOTFOUND;
        if (rr == 0) {
            /* The other pools set the pace: the stage goes on at their step with parameters
             * up to (step - ck_step) steps old. */
            fprintf(p->log,
                    "restored: stage %d from this peer's checkpoint of step %" PRId64
                    " in %s; the swarm is at step %" PRId64 "\n",
                    p->stage, ck_step, po->db, step);
            peer_store_event(p->ps, "restored",
                             "stage %d from the checkpoint of step %" PRId64
                             "; the swarm is at step %" PRId64,
                             p->stage, ck_step, step);
        } else {
            if (rr != STATUS_ENOTFOUND) log_warn("peer: checkpoint not used: %s", e2);
            if (step > 0)
                log_warn("stage %d has no live replica and no checkpoint: it starts from its "
                         "initial parameters at step %" PRId64
                         " (CheckFree recovery from neighbours is not implemented yet)",
                         p->stage, step);
            peer_store_event(p->ps, "joined", "stage %d at step %" PRId64 ": initial parameters",
                             p->stage, step);
        }
        p->step = step;
        rc = 0;
    }
    if (rc) goto out;
    p->my_hash = param_hash(p);
    p->self.state = MEMBER_SERVING;
    /* A newcomer joins the exchange two steps on, so that every member has heard of it
     * (gossip) before the first exchange that counts it; until then it follows the pool.
     * Before the run has started there is nothing to miss. */
    int started = 0;
    for (int i = 0; i < p->nview; i++) started |= p->view[i].step > 0 || p->view[i].served > 0;
    /* (until it has seen the pool's pace it plans far ahead; apply_exchange shortens it) */
    p->self.serving_from = downloaded && started ? p->step + 1000 : p->step;
    push_self(p);
    char hex[2 * MSG_ID_LEN + 1];
    for (int i = 0; i < MSG_ID_LEN; i++) snprintf(hex + 2 * i, 3, "%02x", p->id[i]);
    fprintf(p->log, "peer: id %s\n", hex);
    fprintf(
        p->log,
        "peer: stage %d of %d, %zu parameters, device %s (%d threads), serving from step %" PRId64
        "\n",
        p->stage, p->S, stage_num_params(p->st), p->k->name, p->k->threads, p->self.serving_from);
    fflush(p->log);
    p->step_t0 = clock_now();

    while (!stop_requested && !(p->finished && po->exit_when_done)) {
        net_ev_t ev;
        int did = 0;
        /* events first, without waiting while there is work */
        for (int n = 0; n < 64; n++) {
            int r = net_recv(p->net, 0, &ev);
            if (r < 0) {
                rc = STATUS_ENET;
                goto out;
            }
            if (r) break;
            if ((rc = handle_event(p, &ev))) goto out;
        }
        if ((rc = serve_one(p, &did))) goto out;
        if (!did) {
            int r = source_work(p);
            if (r < 0) {
                rc = r;
                goto out;
            }
            did = r;
        }
        rc = p->self.serving_from > p->step ? follow_exchange(p) : try_exchange(p);
        if (rc == STATUS_ECORRUPT) { /* diverged: fetch the pool's state again */
            p->self.state = MEMBER_JOINING;
            push_self(p);
            if ((rc = download_state(p))) goto out;
            p->self.state = MEMBER_SERVING;
            p->self.serving_from = p->step + 1000;
            p->followed = 0;
            p->my_hash = param_hash(p);
            reset_step(p);
            fprintf(p->log, "resynced: stage %d from the pool at step %" PRId64 "\n", p->stage,
                    p->step);
            peer_store_event(p->ps, "resynced",
                             "stage %d at step %" PRId64 ": parameters differed from the pool's",
                             p->stage, p->step);
        } else if (rc) {
            goto out;
        }
        /* a follower whose pool moved on without it (no update for 2 s while others are
         * ahead) downloads the state again */
        if (p->self.serving_from > p->step && p->step != p->follow_step) {
            p->follow_step = p->step;
            p->follow_since = clock_now();
        }
        if (p->self.serving_from > p->step && clock_now() - p->follow_since > 2.0) {
            int behind = 0;
            for (int i = 0; i < p->nview; i++)
                behind |= p->view[i].stage == p->stage && p->view[i].state == MEMBER_SERVING &&
                          p->view[i].step > p->step && !is_self(p, p->view[i].id);
            if (behind) {
                if ((rc = download_state(p))) goto out;
                peer_store_event(p->ps, "resynced",
                                 "stage %d at step %" PRId64
                                 ": fell behind the pool while following",
                                 p->stage, p->step);
                p->self.serving_from = p->step + 1000;
                p->followed = 0;
                p->my_hash = param_hash(p);
                reset_step(p);
            }
            p->follow_since = clock_now();
        }
        custody(p);
        if (clock_now() - p->last_self_push > 0.25) push_self(p);
        if (!did) { /* idle: wait for the network */
            int r = net_recv(p->net, 5, &ev);
            if (r == 0 && (rc = handle_event(p, &ev))) goto out;
        }
    }
    fprintf(p->log,
            "peer: done: stage %d step %" PRId64 " hash %016" PRIx64 " served %" PRIu64
            " re-sent %" PRIu64 " lost %" PRIu64 " rejected %" PRIu64 " activation-bytes %" PRIu64
            "\n",
            p->stage, p->step, param_hash(p), p->served, p->retries, p->lost,
            net_rejected(p->net) + p->rejected, p->act_bytes);
    fflush(p->log);
    peer_store_step(p->ps, p->st, p->dopt, p->step, 1); /* the state it leaves with */
    peer_store_event(p->ps, "left", "stage %d at step %" PRId64 "%s", p->stage, p->step,
                     stop_requested ? " (asked to stop)" : " (run done)");
out:
    if (rc && rc != STATUS_OK) status_set(err, rc, "%s", p->err[0] ? p->err : status_str(rc));
    peer_free(p);
    return rc;
}
