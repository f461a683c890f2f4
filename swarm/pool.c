/* pool.c — a stage pool's step protocol (pool.h). */
#include "swarm/pool.h"
#include "common/status.h"
#include "swarm/path.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t id[MSG_ID_LEN];
    int64_t step;
    uint8_t *bits;
    double heard_at;
    uint64_t hash; /* at the run's last step: the sender's parameter hash (0: none) */
    int64_t since;
} progress_t;

struct pool {
    int M;
    size_t nb;
    int64_t step;
    uint8_t *mine;
    progress_t *prog;
    int nprog, prog_cap;
    pool_msg_t *msgs;
    int nmsgs, msgs_cap;
    /* SkipPipe: the microbatches of the current step whose path visits this stage */
    uint8_t *expect;
    uint64_t path_seed;
    int path_S, path_stage;
    double path_ratio;
    int64_t path_until; /* the first step that skips nothing */
};

static void set_expect(pool_t *p)
{
    if (p->path_ratio > 0 && p->step < p->path_until) {
        path_expected(p->path_seed, p->step, p->M, p->path_S, p->path_ratio, p->path_stage,
                      p->expect);
        return;
    }
    memset(p->expect, 0, p->nb);
    for (int i = 0; i < p->M; i++) pool_set_bit(p->expect, i);
}

pool_t *pool_new(int M)
{
    pool_t *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->M = M;
    p->nb = ((size_t)M + 7) / 8;
    if (!(p->mine = calloc(p->nb, 1)) || !(p->expect = calloc(p->nb, 1))) {
        pool_destroy(&p);
        return NULL;
    }
    set_expect(p);
    return p;
}

static void free_msg(pool_msg_t *m)
{
    free(m->data);
    free(m->counted);
    free(m->claims);
}

void pool_destroy(pool_t **pp)
{
    if (!pp || !*pp) return;
    pool_t *p = *pp;
    for (int i = 0; i < p->nprog; i++) free(p->prog[i].bits);
    for (int i = 0; i < p->nmsgs; i++) free_msg(&p->msgs[i]);
    free(p->prog);
    free(p->msgs);
    free(p->mine);
    free(p->expect);
    free(p);
    *pp = NULL;
}

size_t pool_bitmap_bytes(const pool_t *p)
{
    return p->nb;
}

void pool_begin(pool_t *p, int64_t step, int keep)
{
    p->step = step;
    memset(p->mine, 0, p->nb);
    int k = 0;
    for (int i = 0; i < p->nprog; i++) {
        if (p->prog[i].step < step)
            free(p->prog[i].bits);
        else
            p->prog[k++] = p->prog[i];
    }
    p->nprog = k;
    k = 0;
    for (int i = 0; i < p->nmsgs; i++) {
        if (p->msgs[i].step < step - keep)
            free_msg(&p->msgs[i]);
        else
            p->msgs[k++] = p->msgs[i];
    }
    p->nmsgs = k;
    set_expect(p);
}

void pool_set_path(pool_t *p, uint64_t seed, int S, double ratio, int64_t until, int stage)
{
    p->path_seed = seed;
    p->path_S = S;
    p->path_ratio = ratio;
    p->path_until = until;
    p->path_stage = stage;
    set_expect(p);
}

const uint8_t *pool_expected(const pool_t *p)
{
    return p->expect;
}

int64_t pool_step(const pool_t *p)
{
    return p->step;
}

void pool_count(pool_t *p, uint32_t index)
{
    if ((int)index < p->M) pool_set_bit(p->mine, (int)index);
}

const uint8_t *pool_mine(const pool_t *p)
{
    return p->mine;
}

uint32_t pool_mine_count(const pool_t *p)
{
    uint32_t n = 0;
    for (int i = 0; i < p->M; i++) n += (uint32_t)pool_bit(p->mine, i);
    return n;
}

void pool_on_progress(pool_t *p, const uint8_t id[MSG_ID_LEN], int64_t step, const uint8_t *bits,
                      double now)
{
    if (step < p->step || step > p->step + 1) return;
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == step && !memcmp(p->prog[i].id, id, MSG_ID_LEN)) {
            for (size_t j = 0; j < p->nb; j++) p->prog[i].bits[j] |= bits[j];
            if (now > p->prog[i].heard_at) p->prog[i].heard_at = now;
            return;
        }
    if (p->nprog == p->prog_cap) {
        int cap = p->prog_cap ? 2 * p->prog_cap : 16;
        progress_t *q = realloc(p->prog, (size_t)cap * sizeof *q);
        if (!q) return; /* the sender repeats its progress */
        p->prog = q;
        p->prog_cap = cap;
    }
    progress_t *e = &p->prog[p->nprog];
    if (!(e->bits = malloc(p->nb))) return;
    memcpy(e->id, id, MSG_ID_LEN);
    e->step = step;
    e->heard_at = now;
    e->hash = 0;
    e->since = 0;
    memcpy(e->bits, bits, p->nb);
    p->nprog++;
}

int pool_reporters(const pool_t *p, uint8_t (*out)[MSG_ID_LEN], int cap)
{
    int k = 0;
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == p->step) {
            if (k < cap) memcpy(out[k], p->prog[i].id, MSG_ID_LEN);
            k++;
        }
    return k;
}

double pool_heard_at(const pool_t *p, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == p->step && !memcmp(p->prog[i].id, id, MSG_ID_LEN))
            return p->prog[i].heard_at;
    return -1;
}

static int is_live(const msg_member_t *live, int n, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < n; i++)
        if (!memcmp(live[i].id, id, MSG_ID_LEN)) return 1;
    return 0;
}

void pool_union(const pool_t *p, const msg_member_t *live, int n, uint8_t *out)
{
    memcpy(out, p->mine, p->nb);
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == p->step && is_live(live, n, p->prog[i].id))
            for (size_t j = 0; j < p->nb; j++) out[j] |= p->prog[i].bits[j];
    for (int i = 0; i < p->nmsgs; i++)
        if (p->msgs[i].step == p->step)
            for (size_t j = 0; j < p->nb; j++) out[j] |= p->msgs[i].counted[j];
}

/* Whether any of bitmap b's nb octets is set. */
static int bits_any(const uint8_t *b, size_t nb)
{
    for (size_t j = 0; j < nb; j++)
        if (b[j]) return 1;
    return 0;
}

int pool_counted_any(const pool_t *p)
{
    if (bits_any(p->mine, p->nb)) return 1;
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == p->step && bits_any(p->prog[i].bits, p->nb)) return 1;
    for (int i = 0; i < p->nmsgs; i++)
        if (p->msgs[i].step == p->step && bits_any(p->msgs[i].counted, p->nb)) return 1;
    return 0;
}

int pool_all(const pool_t *p, const uint8_t *bits)
{
    for (int i = 0; i < p->M; i++)
        if (pool_bit(p->expect, i) && !pool_bit(bits, i)) return 0;
    return 1;
}

const pool_msg_t *pool_find(const pool_t *p, const uint8_t origin[MSG_ID_LEN], int64_t step,
                            int part)
{
    for (int i = 0; i < p->nmsgs; i++)
        if (p->msgs[i].step == step && p->msgs[i].part == part &&
            !memcmp(p->msgs[i].origin, origin, MSG_ID_LEN))
            return &p->msgs[i];
    return NULL;
}

int pool_messages(const pool_t *p, int64_t step, const pool_msg_t **out, int cap)
{
    int k = 0;
    for (int i = 0; i < p->nmsgs; i++)
        if (p->msgs[i].step == step) {
            if (k < cap) out[k] = &p->msgs[i];
            k++;
        }
    return k;
}

void pool_msg_union(const pool_t *p, uint8_t *out)
{
    memset(out, 0, p->nb);
    for (int i = 0; i < p->nmsgs; i++)
        if (p->msgs[i].step == p->step)
            for (size_t j = 0; j < p->nb; j++) out[j] |= p->msgs[i].counted[j];
}

int pool_member_covered(const pool_t *p, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < p->nprog; i++) {
        const progress_t *e = &p->prog[i];
        if (e->step != p->step || memcmp(e->id, id, MSG_ID_LEN)) continue;
        for (int b = 0; b < p->M; b++) {
            if (!pool_bit(e->bits, b)) continue;
            int in = 0;
            for (int m = 0; m < p->nmsgs && !in; m++)
                in = p->msgs[m].step == p->step && !memcmp(p->msgs[m].origin, id, MSG_ID_LEN) &&
                     pool_bit(p->msgs[m].counted, b);
            if (!in) return 0;
        }
    }
    return 1;
}

int pool_first_missing(const pool_t *p, const uint8_t origin[MSG_ID_LEN], int64_t step)
{
    int part = 0;
    while (part < 256 && pool_find(p, origin, step, part)) part++;
    return part;
}

int pool_store(pool_t *p, const msg_t *m, const uint8_t *data, size_t len, const uint8_t *counted,
               size_t counted_len, const uint8_t *claims, size_t claims_len)
{
    if (counted_len != p->nb || claims_len % MSG_ID_LEN || claims_len / MSG_ID_LEN > MSG_MEMBERS_MAX)
        return STATUS_EMALFORMED;
    if (pool_find(p, m->origin, m->step, m->flags)) return 0;
    if (p->nmsgs == p->msgs_cap) {
        int cap = p->msgs_cap ? 2 * p->msgs_cap : 16;
        pool_msg_t *q = realloc(p->msgs, (size_t)cap * sizeof *q);
        if (!q) return STATUS_ENOMEM;
        p->msgs = q;
        p->msgs_cap = cap;
    }
    pool_msg_t *e = &p->msgs[p->nmsgs];
    memset(e, 0, sizeof *e);
    memcpy(e->origin, m->origin, MSG_ID_LEN);
    e->part = m->flags;
    e->step = m->step, e->since = m->since, e->count = m->count, e->hash = m->hash;
    e->len = len;
    e->data = malloc(len ? len : 1);
    e->counted = malloc(p->nb);
    e->nclaims = (int)(claims_len / MSG_ID_LEN);
    e->claims = malloc(claims_len ? claims_len : 1);
    if (!e->data || !e->counted || !e->claims) {
        free_msg(e);
        return STATUS_ENOMEM;
    }
    memcpy(e->data, data, len);
    memcpy(e->counted, counted, p->nb);
    if (claims_len) memcpy(e->claims, claims, claims_len);
    p->nmsgs++;
    return 0;
}

int pool_vote_lost(const pool_msg_t *const *msgs, int n, uint64_t my_hash, int64_t my_since,
                   const uint8_t my_id[MSG_ID_LEN])
{
    int agree = 0, disagree = 0;
    int64_t a_since = INT64_MAX, d_since = INT64_MAX;
    const uint8_t *a_id = NULL, *d_id = NULL;
    for (int i = 0; i < n; i++) {
        const pool_msg_t *e = msgs[i];
        int same = e->hash == my_hash;
        int64_t since = !memcmp(e->origin, my_id, MSG_ID_LEN) ? my_since : e->since;
        int64_t *s = same ? &a_since : &d_since;
        const uint8_t **id = same ? &a_id : &d_id;
        if (since < *s || (since == *s && (!*id || memcmp(e->origin, *id, MSG_ID_LEN) < 0)))
            *s = since, *id = e->origin;
        if (same)
            agree++;
        else
            disagree++;
    }
    int senior_disagrees =
        d_id && (!a_id || d_since < a_since ||
                 (d_since == a_since && memcmp(d_id, a_id, MSG_ID_LEN) < 0));
    return disagree > agree || (disagree && disagree == agree && senior_disagrees);
}

/* Takes msgs[j] unless refused or overlapping what is taken; 1 when taken. */
static int take_if_clear(const pool_msg_t *const *msgs, int j, const int *out, int M,
                         uint8_t *counted, int *take)
{
    if (out[j]) return 0;
    for (int b = 0; b < M; b++)
        if (pool_bit(msgs[j]->counted, b) && pool_bit(counted, b)) return 0;
    take[j] = 1;
    for (int b = 0; b < M; b++)
        if (pool_bit(msgs[j]->counted, b)) pool_set_bit(counted, b);
    return 1;
}

int pool_pick(const pool_msg_t *const *msgs, int n, const int *out, int M, int *take)
{
    uint8_t *counted = calloc((size_t)(M + 7) / 8 + 1, 1);
    int *done = calloc((size_t)(n ? n : 1), sizeof *done);
    if (!counted || !done) {
        free(counted), free(done);
        return STATUS_ENOMEM;
    }
    for (int i = 0; i < n; i++) take[i] = 0;
    /* First every part 0, the one that counts the most first, the first of equals (the
     * smaller id): every member holds every exchange member's part 0 before it applies.
     * Then the supplements, again the one that counts the most first: a member may lack
     * one, and what it takes of the part 0s must not depend on it (weighed by all parts,
     * or with a supplement taken before another origin's part 0, two members applied
     * different updates: sim pause seed 60069, corrupt 6x3 seed 15). A re-sent
     * microbatch is counted in a part of its own (protocol.md 12.4): taken in id order,
     * the smaller id's re-send pushed out a supplement that also counted a microbatch
     * nobody else held (sim pause 8x4 seed 7065: 3 of 4). */
    for (int pass = 0; pass < 2; pass++)
        for (;;) {
            int best = -1;
            uint32_t best_w = 0;
            for (int i = 0; i < n; i++) {
                if (done[i] || (msgs[i]->part != 0) != pass || out[i]) continue;
                uint32_t w = 0;
                for (int b = 0; b < M; b++) w += (uint32_t)pool_bit(msgs[i]->counted, b);
                if (best < 0 || w > best_w) best = i, best_w = w;
            }
            if (best < 0) break;
            done[best] = 1;
            take_if_clear(msgs, best, out, M, counted, take);
        }
    free(counted), free(done);
    return 0;
}

void pool_on_final(pool_t *p, const uint8_t id[MSG_ID_LEN], uint64_t hash, int64_t since)
{
    for (int i = 0; i < p->nprog; i++)
        if (p->prog[i].step == p->step && !memcmp(p->prog[i].id, id, MSG_ID_LEN)) {
            p->prog[i].hash = hash;
            p->prog[i].since = since;
        }
}

int pool_final_vote(const pool_t *p, const msg_member_t *own, int n, const uint8_t my_id[MSG_ID_LEN],
                    uint64_t my_hash, int64_t my_since)
{
    pool_msg_t *v = calloc((size_t)(n ? n : 1), sizeof *v);
    const pool_msg_t **pv = calloc((size_t)(n ? n : 1), sizeof *pv);
    if (!v || !pv) {
        free(v), free(pv);
        return -1;
    }
    int k = 0, all = 1;
    for (int i = 0; i < n && all; i++) {
        if (!memcmp(own[i].id, my_id, MSG_ID_LEN)) continue;
        int found = 0;
        for (int j = 0; j < p->nprog && !found; j++)
            if (p->prog[j].step == p->step && p->prog[j].hash &&
                !memcmp(p->prog[j].id, own[i].id, MSG_ID_LEN)) {
                memcpy(v[k].origin, own[i].id, MSG_ID_LEN);
                v[k].hash = p->prog[j].hash;
                v[k].since = p->prog[j].since;
                pv[k] = &v[k];
                k++, found = 1;
            }
        all = found;
    }
    int r = !all ? -1 : pool_vote_lost(pv, k, my_hash, my_since, my_id);
    free(v), free(pv);
    return r;
}
