/* wiring.c — virtual loads per peer id, least loaded first. */
#include "swarm/wiring.h"
#include "common/rng.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    uint8_t id[MSG_ID_LEN];
    double load;
    uint64_t seen; /* the last pick it was a candidate of */
} entry_t;

struct wiring {
    entry_t *e;
    int n, cap;
    rng_t rng;
    uint64_t picks;
};

wiring_t *wiring_new(uint64_t seed)
{
    wiring_t *w = calloc(1, sizeof *w);
    if (w) rng_seed(&w->rng, seed);
    return w;
}

void wiring_destroy(wiring_t **w)
{
    if (!w || !*w) return;
    free((*w)->e);
    free(*w);
    *w = NULL;
}

static entry_t *lookup(wiring_t *w, const uint8_t *id)
{
    for (int i = 0; i < w->n; i++)
        if (!memcmp(w->e[i].id, id, MSG_ID_LEN)) return &w->e[i];
    return NULL;
}

int wiring_pick(wiring_t *w, const msg_member_t *cand, int n, const uint8_t *exclude, double cost)
{
    double min_known = -1;
    for (int i = 0; i < n; i++) {
        entry_t *e = lookup(w, cand[i].id);
        if (e && (min_known < 0 || e->load < min_known)) min_known = e->load;
    }
    if (min_known < 0) min_known = 0;
    /* A peer that was not a candidate of the last pick (it followed, re-synced, was
     * refused) comes back at the load of those that stayed: the time it was away is no
     * credit that would flood it now. */
    w->picks++;
    double min_stayed = -1;
    for (int i = 0; i < n; i++) {
        entry_t *e = lookup(w, cand[i].id);
        if (e && e->seen + 1 == w->picks && (min_stayed < 0 || e->load < min_stayed))
            min_stayed = e->load;
    }
    for (int i = 0; i < n && min_stayed >= 0; i++) {
        entry_t *e = lookup(w, cand[i].id);
        if (e && e->seen + 1 != w->picks && e->load < min_stayed) e->load = min_stayed;
    }
    int best = -1, ties = 0;
    double best_load = 0;
    for (int i = 0; i < n; i++) {
        if (exclude && !memcmp(cand[i].id, exclude, MSG_ID_LEN)) continue;
        entry_t *e = lookup(w, cand[i].id);
        if (!e) { /* a newcomer enters at the current minimum */
            if (w->n == w->cap) {
                int cap = w->cap ? 2 * w->cap : 8;
                entry_t *p = realloc(w->e, (size_t)cap * sizeof *p);
                if (!p) continue;
                w->e = p;
                w->cap = cap;
            }
            e = &w->e[w->n++];
            memcpy(e->id, cand[i].id, MSG_ID_LEN);
            e->load = min_known;
        }
        e->seen = w->picks;
        if (best < 0 || e->load < best_load) {
            best = i, best_load = e->load, ties = 1;
        } else if (e->load == best_load && rng_below(&w->rng, (uint64_t)++ties) == 0) {
            best = i; /* reservoir choice among equal loads */
        }
    }
    if (best >= 0) {
        /* The charge is relative to the stage's mean throughput (an average peer pays 1 x
         * cost per microbatch, one twice as fast half), so that a peer with no measurement
         * yet (charged as the mean) and the measured ones are in the same unit: an absolute
         * charge of cost / 1 sample/s for the unmeasured starved the first-picked peer for
         * a thousand picks once the others measured ~1000 samples/s (a 1:3 split and
         * worse between equal peers). */
        double sum = 0;
        int known = 0;
        for (int i = 0; i < n; i++)
            if (cand[i].throughput > 0) sum += cand[i].throughput, known++;
        double rel = cand[best].throughput > 0 && known ? cand[best].throughput / (sum / known) : 1.0;
        lookup(w, cand[best].id)->load += cost / rel;
    }
    return best;
}
