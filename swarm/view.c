/* view.c — queries on the live member table (view.h). */
#include "swarm/view.h"
#include "common/rng.h"
#include "common/status.h"

#include <stdlib.h>
#include <string.h>

int view_set(view_t *v, const msg_member_t *members, int n)
{
    if (n > v->cap) {
        msg_member_t *m = realloc(v->m, (size_t)n * sizeof *m);
        if (!m) return STATUS_ENOMEM;
        v->m = m;
        msg_member_t *s = realloc(v->scratch, (size_t)n * sizeof *s);
        if (!s) return STATUS_ENOMEM;
        v->scratch = s;
        msg_member_t *o = realloc(v->owners, (size_t)n * sizeof *o);
        if (!o) return STATUS_ENOMEM;
        v->owners = o;
        uint8_t *k = realloc(v->knows, (size_t)n);
        if (!k) return STATUS_ENOMEM;
        v->knows = k;
        v->cap = n;
    }
    if (n) memcpy(v->m, members, (size_t)n * sizeof *members);
    if (n) memset(v->knows, 0, (size_t)n);
    v->n = n;
    int64_t s = view_max_step(v, -1);
    if (s > v->swarm_step) v->swarm_step = s;
    return 0;
}

void view_set_heard(view_t *v, const msg_member_t *members, const int64_t *heard, int n)
{
    for (int i = 0, j = 0; heard && i < v->n; i++) {
        while (j < n && memcmp(members[j].id, v->m[i].id, MSG_ID_LEN)) j++;
        if (j == n) return;
        v->knows[i] = heard[2 * j] >= 0;
    }
}

int view_knows(const view_t *v, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < v->n; i++)
        if (!memcmp(v->m[i].id, id, MSG_ID_LEN)) return v->knows[i];
    return 0;
}

void view_free(view_t *v)
{
    free(v->m);
    free(v->knows);
    free(v->scratch);
    free(v->owners);
    memset(v, 0, sizeof *v);
}

const msg_member_t *view_find(const view_t *v, const uint8_t id[MSG_ID_LEN])
{
    for (int i = 0; i < v->n; i++)
        if (!memcmp(v->m[i].id, id, MSG_ID_LEN)) return &v->m[i];
    return NULL;
}

int view_stage(view_t *v, int stage, int serving_only, const msg_member_t **out)
{
    int k = 0;
    for (int i = 0; i < v->n; i++)
        if (v->m[i].stage == stage && (!serving_only || v->m[i].state == MEMBER_SERVING))
            v->scratch[k++] = v->m[i];
    *out = v->scratch;
    return k;
}

static int id_cmp(const void *a, const void *b)
{
    return memcmp(((const msg_member_t *)a)->id, ((const msg_member_t *)b)->id, MSG_ID_LEN);
}

int view_owners(view_t *v, int stage, int64_t step, const uint8_t self[MSG_ID_LEN],
                const msg_member_t **out, int *me)
{
    int k = 0;
    for (int i = 0; i < v->n; i++) {
        const msg_member_t *m = &v->m[i];
        if (m->stage == stage && m->state == MEMBER_SERVING &&
            (m->serving_from <= step || !memcmp(m->id, self, MSG_ID_LEN)))
            v->owners[k++] = *m;
    }
    if (k > 1) qsort(v->owners, (size_t)k, sizeof *v->owners, id_cmp); /* NULL when empty */
    *me = -1;
    for (int i = 0; i < k; i++)
        if (!memcmp(v->owners[i].id, self, MSG_ID_LEN)) *me = i;
    *out = v->owners;
    return k;
}

uint64_t view_rendezvous_weight(const uint8_t id[MSG_ID_LEN], uint64_t key)
{
    uint64_t v;
    memcpy(&v, id, sizeof v);
    return rng_mix(v, key);
}

int view_rendezvous(const msg_member_t *own, int n, uint64_t key)
{
    int best = -1;
    uint64_t best_h = 0;
    for (int i = 0; i < n; i++) {
        uint64_t h = view_rendezvous_weight(own[i].id, key);
        if (best < 0 || h > best_h) best = i, best_h = h;
    }
    return best;
}

int view_weakest_stage(const view_t *v, int S, const uint8_t self[MSG_ID_LEN])
{
    int best = 0, best_n = 0;
    double best_tp = -1;
    for (int s = 0; s < S; s++) {
        double tp = 0;
        int n = 0;
        for (int i = 0; i < v->n; i++)
            if (v->m[i].stage == s && v->m[i].state == MEMBER_SERVING &&
                memcmp(v->m[i].id, self, MSG_ID_LEN))
                tp += v->m[i].throughput, n++;
        if (best_tp < 0 || tp < best_tp || (tp == best_tp && n < best_n))
            best = s, best_tp = tp, best_n = n;
    }
    return best;
}

int64_t view_swarm_step(const view_t *v)
{
    return v->swarm_step;
}

int64_t view_max_step(const view_t *v, int stage)
{
    int64_t best = -1;
    for (int i = 0; i < v->n; i++)
        if ((stage < 0 || v->m[i].stage == stage) && v->m[i].state == MEMBER_SERVING &&
            v->m[i].step > best)
            best = v->m[i].step;
    return best;
}
