/* xfer.c — chunked, hashed state transfer (xfer.h). */
#include "swarm/xfer.h"
#include "common/status.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int xfer_snap_reserve(xfer_snap_t *s, size_t total)
{
    if (total > s->cap) {
        uint8_t *b = realloc(s->buf, total);
        if (!b) return STATUS_ENOMEM;
        s->buf = b;
        s->cap = total;
    }
    s->total = total;
    s->step = -1;
    return 0;
}

void xfer_snap_seal(xfer_snap_t *s, int64_t step)
{
    crypto_generichash(s->hash, 32, s->buf, s->total, NULL, 0);
    s->step = step;
}

void xfer_snap_free(xfer_snap_t *s)
{
    free(s->buf);
    memset(s, 0, sizeof *s);
    s->step = -1;
}

xfer_shared_t *xfer_shared_new(int stage, size_t total)
{
    xfer_shared_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->snap.step = -1;
    if (xfer_snap_reserve(&s->snap, total)) {
        free(s);
        return NULL;
    }
    s->stage = stage;
    atomic_init(&s->refs, 1);
    atomic_init(&s->served_us, 0);
    return s;
}

xfer_shared_t *xfer_shared_ref(xfer_shared_t *s)
{
    atomic_fetch_add(&s->refs, 1);
    return s;
}

void xfer_shared_unref(xfer_shared_t **s)
{
    if (!*s) return;
    if (atomic_fetch_sub(&(*s)->refs, 1) == 1) {
        xfer_snap_free(&(*s)->snap);
        free(*s);
    }
    *s = NULL;
}

int xfer_shared_fresh(const xfer_shared_t *s, int64_t at, double age_s)
{
    return at == s->snap.step || (at - s->snap.step <= s->fresh_steps && age_s <= s->fresh_s);
}

void xfer_shared_served(xfer_shared_t *s, double now)
{
    atomic_store(&s->served_us, (int64_t)(now * 1e6));
}

int xfer_shared_in_use(const xfer_shared_t *s, double now)
{
    int64_t at = atomic_load(&s->served_us);
    return at > 0 && now * 1e6 - (double)at <= XFER_IN_USE_S * 1e6;
}

int xfer_serve(const xfer_snap_t *s, const msg_t *req, msg_t *rep, const uint8_t **data,
               size_t *len, char *err)
{
    if (!s->buf || s->step < 0 || (req->step >= 0 && req->step != s->step))
        return status_set(err, STATUS_ENOTFOUND, "state of step %" PRId64 " is gone", req->step);
    /* any offset inside: whole downloads ask at multiples of XFER_CHUNK, ranged ones
     * (xfer_new_range: the part of a state CheckFree+ keeps) where their range starts */
    if (req->offset >= s->total)
        return status_set(err, STATUS_ENOTFOUND, "offset %" PRIu64 " is outside the state",
                          req->offset);
    size_t n = s->total - req->offset;
    if (n > req->length) n = req->length;
    if (n > XFER_CHUNK) n = XFER_CHUNK;
    *rep = (msg_t){.type = MSG_STATE_REP,
                   .stage = req->stage,
                   .step = s->step,
                   .offset = req->offset,
                   .total = s->total,
                   .length = (uint32_t)n};
    memcpy(rep->state_hash, s->hash, 32);
    *data = s->buf + req->offset;
    *len = n;
    return 0;
}

struct xfer {
    int stage;
    size_t total;    /* the snapshot's size */
    size_t off, len; /* the bytes fetched: [off, off + len) of it (whole: 0, total) */
    int64_t step;    /* -1 until the first answer */
    uint8_t hash[32];
    uint8_t *buf;
    int nchunks;
    uint8_t *got;
    double *asked_at; /* per chunk; 0: not asked */
    double started;   /* when the first request went out; 0: not yet */
    int restarts, verified;
    uint8_t (*donors)[MSG_ID_LEN];
    int ndonors;
    int next_donor;
    uint8_t first_to[MSG_ID_LEN]; /* who was asked which snapshot it offers */
    double now;                  /* the time of the last xfer_next_requests */
    double fixed_at;             /* when the answer that fixed the snapshot came */
    double first_asked_at;       /* its first request (0: none yet; a start over keeps it) */
    uint8_t shunned[MSG_ID_LEN]; /* the donor that refused last ... */
    double shun_until;           /* ... is not asked before this (0: none) */
};

/* A donor that refused is not asked again for this long: its entry may still show it
 * serving the stage while it re-syncs, and asked at once it refused again within a round
 * trip, each refusal a start over, until the download gave up (sim stage 6x3 seed
 * 5000561: 50 in 0.25 s). */
#define XFER_SHUN_S 1.0

xfer_t *xfer_new(int stage, size_t total)
{
    return xfer_new_range(stage, total, 0, total);
}

xfer_t *xfer_new_range(int stage, size_t total, size_t off, size_t len)
{
    if (off > total || len > total - off || (!len && total)) return NULL;
    xfer_t *x = calloc(1, sizeof *x);
    if (!x) return NULL;
    x->stage = stage;
    x->total = total;
    x->off = off;
    x->len = len;
    x->step = -1;
    x->nchunks = (int)((len + XFER_CHUNK - 1) / XFER_CHUNK);
    x->buf = malloc(len ? len : 1);
    x->got = calloc((size_t)x->nchunks + 1, 1);
    x->asked_at = calloc((size_t)x->nchunks + 1, sizeof(double));
    if (!x->buf || !x->got || !x->asked_at) xfer_destroy(&x);
    return x;
}

void xfer_destroy(xfer_t **xp)
{
    if (!xp || !*xp) return;
    xfer_t *x = *xp;
    free(x->buf);
    free(x->got);
    free(x->asked_at);
    free(x->donors);
    free(x);
    *xp = NULL;
}

static void restart(xfer_t *x)
{
    x->step = -1;
    x->started = 0;
    x->ndonors = 0;
    memset(x->got, 0, (size_t)x->nchunks);
    memset(x->asked_at, 0, (size_t)x->nchunks * sizeof *x->asked_at);
    x->restarts++;
}

static void note_donor(xfer_t *x, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < x->ndonors; i++)
        if (!memcmp(x->donors[i], id, MSG_ID_LEN)) return;
    void *d = realloc(x->donors, (size_t)(x->ndonors + 1) * MSG_ID_LEN);
    if (!d) return;
    x->donors = d;
    memcpy(x->donors[x->ndonors++], id, MSG_ID_LEN);
}

int xfer_on_reply(xfer_t *x, const msg_t *m, const uint8_t *data, size_t len, double now)
{
    if (x->verified || m->stage != x->stage) return 0;
    if (m->total != x->total || m->offset < x->off || (m->offset - x->off) % XFER_CHUNK ||
        m->offset - x->off >= x->len) {
        restart(x);
        return 1;
    }
    if (x->step < 0) {
        x->step = m->step;
        memcpy(x->hash, m->state_hash, 32);
        x->fixed_at = now;
    } else if (m->step != x->step || memcmp(m->state_hash, x->hash, 32)) {
        /* another snapshot: take the newer one, from scratch */
        if (m->step < x->step) return 0;
        restart(x);
        x->step = m->step;
        memcpy(x->hash, m->state_hash, 32);
        x->fixed_at = now;
    }
    size_t at = m->offset - x->off;
    int c = (int)(at / XFER_CHUNK);
    size_t want = x->len - at < XFER_CHUNK ? x->len - at : XFER_CHUNK;
    if (len != want || m->length != want || x->got[c]) return 0;
    memcpy(x->buf + at, data, want);
    x->got[c] = 1;
    note_donor(x, m->sender);
    return 0;
}

void xfer_on_refusal(xfer_t *x, const uint8_t from[MSG_ID_LEN])
{
    /* the snapshot is gone at that donor (it took a newer one), or it does not serve the
     * stage now: start over from the snapshot the other donors offer now */
    memcpy(x->shunned, from, MSG_ID_LEN);
    x->shun_until = x->now + XFER_SHUN_S;
    if (!x->verified) restart(x);
}

/* The next donor in turn among m of them, donors[skip] left out (skip -1: none). */
static int donor_in_turn(xfer_t *x, int m, int skip)
{
    int i = x->next_donor++ % m;
    return skip >= 0 && i >= skip ? i + 1 : i;
}

int xfer_next_requests(xfer_t *x, double now, const msg_member_t *donors, int n, double retry_s,
                       xfer_req_t *out, int cap)
{
    x->now = now;
    if (x->verified || n <= 0 || cap <= 0) return 0;
    /* the donor that refused lately is left out for a while (XFER_SHUN_S): donors[skip] */
    int skip = -1;
    for (int i = 0; i < n && skip < 0 && now < x->shun_until; i++)
        if (!memcmp(donors[i].id, x->shunned, MSG_ID_LEN)) skip = i;
    int m = n - (skip >= 0); /* the donors asked */
    if (!m) return 0; /* the only donor: wait for it */
    if (x->started > 0 && x->step < 0) {
        int there = 0;
        for (int i = 0; i < n && !there; i++)
            there = i != skip && !memcmp(donors[i].id, x->first_to, MSG_ID_LEN);
        if (!there || now - x->started > retry_s) restart(x); /* gone, or no answer */
    }
    int k = 0;
    if (x->step < 0) { /* first, one request: it tells which snapshot the donors offer */
        if (x->started > 0) return 0;
        x->started = now;
        if (!x->first_asked_at) x->first_asked_at = now;
        memcpy(out[k].to, donors[donor_in_turn(x, m, skip)].id, MSG_ID_LEN);
        memcpy(x->first_to, out[k].to, MSG_ID_LEN);
        out[k].req = (msg_t){.type = MSG_STATE_REQ,
                             .stage = (int16_t)x->stage,
                             .step = -1,
                             .offset = x->off,
                             .length = x->len < XFER_CHUNK ? (uint32_t)x->len : XFER_CHUNK};
        x->asked_at[0] = now;
        return 1;
    }
    int outstanding = 0;
    for (int c = 0; c < x->nchunks; c++)
        if (!x->got[c] && x->asked_at[c] > 0 && now - x->asked_at[c] < retry_s) outstanding++;
    for (int c = 0; c < x->nchunks && outstanding < 2 * m && k < cap; c++) {
        if (x->got[c] || (x->asked_at[c] > 0 && now - x->asked_at[c] < retry_s)) continue;
        memcpy(out[k].to, donors[donor_in_turn(x, m, skip)].id, MSG_ID_LEN);
        size_t at = (size_t)c * XFER_CHUNK;
        out[k].req =
            (msg_t){.type = MSG_STATE_REQ,
                    .stage = (int16_t)x->stage,
                    .step = x->step,
                    .offset = x->off + at,
                    .length = x->len - at < XFER_CHUNK ? (uint32_t)(x->len - at) : XFER_CHUNK};
        x->asked_at[c] = now;
        outstanding++;
        k++;
    }
    return k;
}

int xfer_done(xfer_t *x)
{
    if (x->verified) return 1;
    if (x->step < 0) return 0;
    for (int c = 0; c < x->nchunks; c++)
        if (!x->got[c]) return 0;
    if (x->len < x->total) { /* a part: the snapshot's hash covers the whole; every chunk
                              * came from the one snapshot (step and hash agreed) */
        x->verified = 1;
        return 1;
    }
    uint8_t h[32];
    crypto_generichash(h, 32, x->buf, x->total, NULL, 0);
    if (memcmp(h, x->hash, 32)) {
        restart(x);
        return -1;
    }
    x->verified = 1;
    return 1;
}

int64_t xfer_step(const xfer_t *x)
{
    return x->step;
}
const uint8_t *xfer_data(const xfer_t *x)
{
    return x->buf;
}
double xfer_fixed_at(const xfer_t *x)
{
    return x->fixed_at;
}
double xfer_first_asked_at(const xfer_t *x)
{
    return x->first_asked_at;
}

int xfer_restarts(const xfer_t *x)
{
    return x->restarts;
}
int xfer_donors(const xfer_t *x)
{
    return x->ndonors;
}

size_t xfer_offset(const xfer_t *x)
{
    return x->off;
}

size_t xfer_length(const xfer_t *x)
{
    return x->len;
}
