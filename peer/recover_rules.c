/* recover_rules.c — recovery's rules (recover.h), pure: no peer, no network, no clock. */
#include "peer/recover.h"
#include "common/rng.h"

#include <string.h>

/* Serving members of stage s. */
static int serving_in(const msg_member_t *m, int n, int s)
{
    int k = 0;
    for (int i = 0; i < n; i++) k += m[i].stage == s && m[i].state == MEMBER_SERVING;
    return k;
}

typedef struct {
    const msg_member_t *m;
    int n, S, lost;
} table_t;

static int in_spare_pool(const table_t *t, const msg_member_t *e, int not_stage)
{
    return e->stage >= 0 && e->stage < t->S && e->stage != not_stage &&
           serving_in(t->m, t->n, e->stage) >= 2;
}

/* a member of a spare pool beside the lost stage */
static int spare_neighbour(const table_t *t, const msg_member_t *e, int s)
{
    return (e->stage == s - 1 || e->stage == s + 1) && in_spare_pool(t, e, s);
}

/* ... that contributes (a newcomer still following has no copy of the lost stage yet) */
static int spare_neighbour_contributor(const table_t *t, const msg_member_t *e, int s)
{
    return spare_neighbour(t, e, s) && e->serving_from <= e->step;
}

/* ... of the pool before a middle stage, which keeps a copy of its blocks (recover.c) */
static int spare_keeper_contributor(const table_t *t, const msg_member_t *e, int s)
{
    return e->stage == s - 1 && in_spare_pool(t, e, s) && e->serving_from <= e->step;
}

/* The highest rendezvous hash of (key, member) among the serving members `ok` accepts;
 * 1 when that member is self. */
static int picked(const table_t *t, const uint8_t *self, uint64_t key,
                  int (*ok)(const table_t *, const msg_member_t *, int), int arg)
{
    uint64_t best = 0, mine = 0;
    int found = 0;
    for (int i = 0; i < t->n; i++) {
        const msg_member_t *e = &t->m[i];
        if (e->state != MEMBER_SERVING || !ok(t, e, arg)) continue;
        uint64_t id;
        memcpy(&id, e->id, 8);
        uint64_t h = rng_mix(key, id);
        if (!found || h > best) best = h, found = 1;
        if (!memcmp(e->id, self, MSG_ID_LEN)) mine = h;
    }
    return found && mine == best;
}

static int any(const table_t *t, int (*ok)(const table_t *, const msg_member_t *, int), int arg)
{
    for (int i = 0; i < t->n; i++)
        if (t->m[i].state == MEMBER_SERVING && ok(t, &t->m[i], arg)) return 1;
    return 0;
}

int recover_mover_target(const msg_member_t *members, int n, const uint8_t self[MSG_ID_LEN],
                         int S, uint64_t swarm, int s)
{
    table_t t = {members, n, S, s};
    uint64_t key = rng_mix(swarm, (uint64_t)s + 0x5157);
    int end = s == 0 || s == S - 1;
    int nb = s == 0 ? 1 : S - 2; /* the neighbour of an end stage */
    int any_nb = any(&t, spare_neighbour, s);
    if (!end) {
        if (any(&t, spare_keeper_contributor, s))
            return picked(&t, self, key, spare_keeper_contributor, s) ? s : -1;
        if (any_nb) return picked(&t, self, key, spare_neighbour, s) ? s : -1;
        return picked(&t, self, key, in_spare_pool, s) ? s : -1;
    }
    if (any_nb) {
        int contrib = any(&t, spare_neighbour_contributor, s);
        return picked(&t, self, key, contrib ? spare_neighbour_contributor : spare_neighbour, s)
                   ? s
                   : -1;
    }
    /* the cascade's first move, unless a member is on its way into the neighbour's pool */
    int in_nb = 0;
    for (int i = 0; i < n; i++) in_nb += members[i].stage == nb;
    if (in_nb >= 2) return -1;
    return picked(&t, self, key ^ 0xca5cade, in_spare_pool, nb) ? nb : -1;
}

void recover_blend(float *out, const float *wa, float ga, const float *wb, float gb, size_t n)
{
    double a = (double)gb + 1e-4, b = (double)ga + 1e-4;
    for (size_t i = 0; i < n; i++) out[i] = (float)((a * wb[i] + b * wa[i]) / (a + b));
}

int recover_copy_due(int have, int64_t step, int64_t copy_step, int every, uint64_t spent,
                     size_t len, double budget, uint64_t act_bytes)
{
    if (!have) return 1;
    return step - copy_step >= every && (double)(spent + len) <= budget * (double)act_bytes;
}
