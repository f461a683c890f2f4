/* rebalance.c — the rebalancing decision: a pure function of the member table
 * (rebalance.h). Not for: moving (peer/move.c) or when to ask (peer/rebal.c). */
#include "swarm/rebalance.h"
#include "common/rng.h"

#include <stdio.h>
#include <string.h>

rebalance_config_t rebalance_defaults(void)
{
    return (rebalance_config_t){
        .margin = 0.2, .tie = 0.05, .last_from = -1, .last_to = -1, .reverse_margin = 0.6};
}

static int counts(const msg_member_t *e, int S)
{
    return e->state == MEMBER_SERVING && e->stage >= 0 && e->stage < S;
}

void rebalance_totals(const msg_member_t *m, int n, int S, double *tp, int *count)
{
    for (int s = 0; s < S; s++) {
        if (tp) tp[s] = 0;
        if (count) count[s] = 0;
    }
    for (int i = 0; i < n; i++) {
        if (!counts(&m[i], S)) continue;
        if (tp && m[i].throughput > 0) tp[m[i].stage] += m[i].throughput;
        if (count) count[m[i].stage]++;
    }
}

/* The minimum over stages of tp, with stage a's total lowered by x and b's raised by y
 * (a < 0: as it is); *at: the stage that has it. */
static double min_after(const double *tp, int S, int a, int b, double x, double y, int *at)
{
    double lo = 0;
    int where = -1;
    for (int s = 0; s < S; s++) {
        double t = tp[s] - (s == a ? x : 0) + (s == b ? y : 0);
        if (where < 0 || t < lo) lo = t, where = s;
    }
    if (at) *at = where;
    return lo;
}

/* Member e's throughput once in stage b: its speed relative to its stage's mean, times
 * b's mean per member. */
static double in_stage(const msg_member_t *e, int b, const double *tp, const int *cnt)
{
    double mine = tp[e->stage] / cnt[e->stage], there = tp[b] / cnt[b];
    return mine > 0 ? e->throughput / mine * there : e->throughput;
}

/* The margin a move a -> b must clear. */
static double margin_for(const rebalance_config_t *c, int a, int b)
{
    return a == c->last_to && b == c->last_from ? c->reverse_margin : c->margin;
}

/* The slowest stage's throughput once member e moves to stage b, or -1 when that move is
 * not open: e does not count, its stage would keep fewer than one serving peer, b is its
 * own stage, or the gain is under the margin. */
static double move_value(const rebalance_config_t *c, const msg_member_t *e, int b, int S,
                         const double *tp, const int *cnt, double min_before)
{
    if (!counts(e, S) || cnt[e->stage] < 2 || b == e->stage) return -1;
    double v = min_after(tp, S, e->stage, b, e->throughput, in_stage(e, b, tp, cnt), NULL);
    return v >= min_before * (1 + margin_for(c, e->stage, b)) ? v : -1;
}

int rebalance_decide(const msg_member_t *m, int n, int S, const rebalance_config_t *c,
                     rebalance_decision_t *d)
{
    memset(d, 0, sizeof *d);
    d->from = d->to = d->bottleneck = -1;
    d->verdict = REBALANCE_NONE;
    if (!m || n < 1 || S < 2 || S > REBALANCE_MAX_STAGES || !c || !(c->margin >= 0) ||
        !(c->tie >= 0) || !(c->reverse_margin >= 0)) {
        snprintf(d->why, sizeof d->why, "nothing to balance");
        return d->verdict;
    }
    double tp[REBALANCE_MAX_STAGES];
    int cnt[REBALANCE_MAX_STAGES];
    rebalance_totals(m, n, S, tp, cnt);
    for (int i = 0; i < n; i++) {
        if (m[i].stage < 0 || m[i].stage >= S) continue;
        const char *what = m[i].state == MEMBER_JOINING ? "is joining"
                           : !counts(&m[i], S)          ? NULL
                           : m[i].serving_from > m[i].step ? "follows its pool"
                           : !(m[i].throughput > 0)        ? "has no throughput yet"
                                                           : NULL;
        if (what) {
            char h[9];
            d->verdict = REBALANCE_SETTLING;
            snprintf(d->why, sizeof d->why, "settling: %s of stage %d %s", msg_id_short(m[i].id, h),
                     m[i].stage, what);
            return d->verdict;
        }
    }
    for (int s = 0; s < S; s++)
        if (!cnt[s]) {
            d->verdict = REBALANCE_EMPTY;
            snprintf(d->why, sizeof d->why, "stage %d has no serving peer", s);
            return d->verdict;
        }
    d->min_before = min_after(tp, S, -1, -1, 0, 0, &d->bottleneck);
    /* the best new minimum over every (member, target) pair */
    double best = -1;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < S; b++) {
            double v = move_value(c, &m[i], b, S, tp, cnt, d->min_before);
            if (v > best) best = v;
        }
    if (best < 0 || best <= d->min_before) {
        d->verdict = REBALANCE_BALANCED;
        snprintf(d->why, sizeof d->why,
                 "balanced: the slowest stage %d does %.1f samples/s; no move raises it by %.0f%%",
                 d->bottleneck, d->min_before, 100 * c->margin);
        return d->verdict;
    }
    /* the lowest id among the moves within `tie` of the best (then the lowest target) */
    int pick = -1, to = -1;
    double got = 0;
    for (int i = 0; i < n; i++)
        for (int b = 0; b < S; b++) {
            double v = move_value(c, &m[i], b, S, tp, cnt, d->min_before);
            if (v < 0 || v < best * (1 - c->tie)) continue;
            int lower = pick < 0 || memcmp(m[i].id, m[pick].id, MSG_ID_LEN) < 0;
            if (lower) pick = i, to = b, got = v;
        }
    d->verdict = REBALANCE_MOVE;
    memcpy(d->who, m[pick].id, MSG_ID_LEN);
    d->from = m[pick].stage;
    d->to = to;
    d->min_after = got;
    snprintf(d->why, sizeof d->why,
             "rebalance: stage %d (%d peers, %.1f samples/s) is the slowest; moving a %.1f "
             "samples/s peer from stage %d (%d peers, %.1f) to stage %d raises the slowest "
             "stage to %.1f (+%.0f%%)",
             d->bottleneck, cnt[d->bottleneck], tp[d->bottleneck], (double)m[pick].throughput,
             d->from, cnt[d->from], tp[d->from], to, got,
             d->min_before > 0 ? 100 * (got / d->min_before - 1) : 100.0);
    return d->verdict;
}

uint64_t rebalance_placement(const msg_member_t *m, int n)
{
    uint64_t h = 0;
    for (int i = 0; m && i < n; i++) {
        uint64_t a, b;
        memcpy(&a, m[i].id, 8);
        memcpy(&b, m[i].id + 8, 8);
        h += rng_mix(rng_mix(a, b), (uint64_t)(uint16_t)m[i].stage + 1);
    }
    return h;
}
