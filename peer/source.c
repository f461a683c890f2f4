/* source.c — stage 0's sourcing part: see source.h. */
#include "peer/source.h"

#include "swarm/view.h"

#include <string.h>

void source_init(source_t *s)
{
    memset(s, 0, sizeof *s);
}

static int find(const msg_member_t *m, int n, const uint8_t *id)
{
    for (int i = 0; i < n; i++)
        if (!memcmp(m[i].id, id, MSG_ID_LEN)) return i;
    return -1;
}

static void forget(source_t *s, int i)
{
    s->gone[i] = s->gone[--s->n];
}

void source_on_view(source_t *s, const msg_member_t *old, int nold, const msg_member_t *now,
                    int nnow, int64_t step, double t)
{
    /* one back as the owner it was (a false death healed) is forgotten; one back as a
     * new run of its id (a restart: joining, or serving from a later step) is not: the
     * forwards its previous run started may be counted downstream (sim heavy 3x2 seed
     * 950165: a stage-0 member restarted under its id, its mate forgot it and started
     * its microbatches as first attempts; stage 1 counted two copies of one in two
     * members' part 0, and left one part out whole: 3 of 4) */
    for (int i = s->n - 1; i >= 0; i--) {
        int j = find(now, nnow, s->gone[i].id);
        if (j >= 0 && now[j].stage == 0 && now[j].state == MEMBER_SERVING &&
            now[j].serving_from <= s->gone[i].from)
            forget(s, i);
    }
    for (int i = 0; i < nold; i++) {
        if (old[i].stage != 0 || old[i].state != MEMBER_SERVING || find(now, nnow, old[i].id) >= 0)
            continue;
        if (s->n == SOURCE_GONE_MAX) { /* the oldest goes */
            int o = 0;
            for (int k = 1; k < s->n; k++)
                if (s->gone[k].at < s->gone[o].at) o = k;
            forget(s, o);
        }
        source_gone_t *g = &s->gone[s->n++];
        memcpy(g->id, old[i].id, MSG_ID_LEN);
        g->from = old[i].serving_from;
        g->until = step + 1;
        g->at = t;
    }
}

int source_owner(source_t *s, const msg_member_t *own, int n, int me, uint64_t key,
                 int64_t step, double now, double settle)
{
    int best = view_rendezvous(own, n, key), again = 0;
    uint64_t best_w = best >= 0 ? view_rendezvous_weight(own[best].id, key) : 0;
    for (int i = s->n - 1; i >= 0; i--) {
        const source_gone_t *g = &s->gone[i];
        if (step > g->until) {
            forget(s, i);
            continue;
        }
        if (g->from > step || (best >= 0 && view_rendezvous_weight(g->id, key) <= best_w)) continue;
        if (now - g->at < settle) return SOURCE_WAIT;
        again = 1;
    }
    if (best < 0 || best != me) return SOURCE_OTHER;
    return again ? SOURCE_MINE_AGAIN : SOURCE_MINE;
}
