/* rebal.c — the peer's rebalancing timer: once a second it runs the swarm-wide decision
 * (swarm/rebalance.c) on its view of the member table, and when that names this peer
 * on three ticks in a row, with the placement unchanged for the cooldown, it moves
 * (move.c) at a clean moment: right after it has sent its pool its exchange message of
 * the current step. Every peer computes the same
 * decision, so one moves and the others wait; the mover is seen joining, then following
 * its new pool, then unmeasured, and nobody else decides meanwhile; after that the
 * cooldown runs again from the change of placement. For 10 minutes after a move seen in
 * the table, moving it back (to -> from) must gain three times the margin: estimates
 * are noisy, and peers that reload stages again and again (Petals) help nobody. A
 * member that arrives or dies makes a new situation: that memory is dropped.
 * Not for: the decision itself (swarm/rebalance.c) or the move (move.c). */
#include "peer/peer_impl.h"
#include "swarm/rebalance.h"

#include <inttypes.h>
#include <string.h>

#define REBAL_EVERY_S 1.0 /* decisions a second */
#define REBAL_STREAK  3   /* the same answer this many times before a move */
#define REBAL_LOG_S   30.0 /* a "stages" event (each stage's peers and throughput) this often */
#define REBAL_REVERSE_S 600.0 /* moving the last move back needs 3x the margin this long */

int peer_request_move(peer_t *p, int stage, const char *why)
{
    if (p->phase != PHASE_SERVING || stage < 0 || stage >= p->S || stage == p->stage)
        return status_set(p->err, STATUS_EINVAL, "peer: no move from stage %d to %d", p->stage,
                          stage);
    p->rebal_to = stage;
    p->rebal_placement = rebalance_placement(p->view.m, p->view.n);
    p->rebal_decided_at = p->now;
    snprintf(p->rebal_why, sizeof p->rebal_why, "%s", why ? why : "asked to");
    return 0;
}

int rebal_tick(peer_t *p)
{
    if (p->S < 2 || p->finished || p->phase != PHASE_SERVING) return 0;
    /* A decided move waits for a clean moment: right after this member has sent its
     * exchange message of the pool's current step (its share of the step is then in
     * every mate's hands, and mates that count it as an exchange member do not wait for
     * a message that would never come). A change of placement meanwhile calls it off. */
    if (p->rebal_to >= 0) {
        if (rebalance_placement(p->view.m, p->view.n) != p->rebal_placement) {
            p->rebal_to = -1;
            p->rebal_streak = 0;
            return 0;
        }
        if (!p->exch_sent) return 0; /* (a follower asked to move waits until it contributes) */
        int to = p->rebal_to;
        p->rebal_to = -1;
        p->rebal_streak = 0;
        p->moves++;
        return peer_move(p, to, p->rebal_why);
    }
    /* each stage's throughput over time, in the store (status --db shows the events) */
    if (p->ps && p->now - p->rebal_logged_at >= REBAL_LOG_S) {
        p->rebal_logged_at = p->now;
        double tp[REBALANCE_MAX_STAGES];
        int cnt[REBALANCE_MAX_STAGES];
        char line[512];
        size_t n = 0;
        rebalance_totals(p->view.m, p->view.n, p->S < REBALANCE_MAX_STAGES ? p->S : 1, tp, cnt);
        for (int s = 0; s < p->S && s < REBALANCE_MAX_STAGES && n + 64 < sizeof line; s++)
            n += (size_t)snprintf(line + n, sizeof line - n, "%sstage %d: %d peers %.1f samples/s",
                                  s ? "; " : "", s, cnt[s], tp[s]);
        peer_store_event(p->ps, "stages", "%s", line);
    }
    if (p->po.no_rebalance || p->now - p->rebal_at < REBAL_EVERY_S) return 0;
    p->rebal_at = p->now;
    /* the last move seen: the same members, one fewer on a stage and one more on another
     * (joining or serving there); moving it back needs the reverse margin for a while */
    int cnt[64] = {0}, n = 0, lost = -1, gained = -1, other = 0;
    for (int i = 0; i < p->view.n; i++)
        if (p->view.m[i].stage >= 0 && p->view.m[i].stage < 64 && p->view.m[i].stage < p->S)
            cnt[p->view.m[i].stage]++, n++;
    for (int s = 0; s < p->S && s < 64; s++) {
        int d = cnt[s] - p->rebal_cnt[s];
        if (d == -1 && lost < 0) lost = s;
        else if (d == 1 && gained < 0) gained = s;
        else if (d) other = 1;
    }
    if (n == p->rebal_n && lost >= 0 && gained >= 0 && !other) {
        p->rebal_last_from = lost, p->rebal_last_to = gained;
        p->rebal_last_at = p->now;
    } else if (n != p->rebal_n) { /* a member came or went: a new situation, no reverse */
        p->rebal_last_from = p->rebal_last_to = -1;
    }
    memcpy(p->rebal_cnt, cnt, sizeof cnt);
    p->rebal_n = n;
    uint64_t pl = rebalance_placement(p->view.m, p->view.n);
    if (pl != p->rebal_placement || !p->rebal_stable_since) {
        p->rebal_placement = pl;
        p->rebal_stable_since = p->now;
        p->rebal_streak = 0;
    }
    /* a move in the run's last steps would only cost */
    if (p->now - p->rebal_stable_since < p->po.rebalance_cooldown_s ||
        p->step + 2 >= p->run.steps)
        return 0;
    rebalance_config_t c = rebalance_defaults();
    if (p->po.rebalance_margin > 0) c.margin = p->po.rebalance_margin;
    if (c.reverse_margin < 3 * c.margin) c.reverse_margin = 3 * c.margin;
    if (p->rebal_last_from >= 0 && p->now - p->rebal_last_at < REBAL_REVERSE_S)
        c.last_from = p->rebal_last_from, c.last_to = p->rebal_last_to;
    rebalance_decision_t d;
    if (rebalance_decide(p->view.m, p->view.n, p->S, &c, &d) != REBALANCE_MOVE ||
        !peer_is_self(p, d.who) || d.from != p->stage) {
        p->rebal_streak = 0;
        return 0;
    }
    if (++p->rebal_streak < REBAL_STREAK) return 0;
    p->rebal_to = d.to;
    p->rebal_decided_at = p->now;
    snprintf(p->rebal_why, sizeof p->rebal_why, "%s", d.why);
    return 0;
}
