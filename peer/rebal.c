/* rebal.c — the rebalancing part's rules (rebal.h). */
#include "peer/rebal.h"
#include "swarm/rebalance.h"

#include <stdio.h>
#include <string.h>

void rebal_init(rebal_t *r)
{
    memset(r, 0, sizeof *r);
    r->decide = timeout_make("rebal.decide", REBAL_EVERY_S);
    r->record = timeout_make("rebal.record", REBAL_RECORD_S);
    r->reverse = timeout_make("rebal.reverse", REBAL_REVERSE_S);
    r->to = -1;
    r->last_from = r->last_to = -1;
}

void rebal_reset(rebal_t *r)
{
    r->to = -1;
    r->streak = 0;
}

/* A periodic timeout that is due at once the first time. */
static int due(timeout_t *t, double now)
{
    if (timeout_running(t) && !timeout_fired(t, now)) return 0;
    timeout_start(t, now);
    return 1;
}

int rebal_record_due(rebal_t *r, double now)
{
    return due(&r->record, now);
}

int rebal_decide(rebal_t *r, const rebal_in_t *in, double now)
{
    if (in->off || !due(&r->decide, now)) return 0;
    /* the last move seen: the same members, one fewer on a stage and one more on another
     * (joining or serving there); moving it back needs the reverse margin for a while */
    int cnt[REBAL_STAGES] = {0}, n = 0, lost = -1, gained = -1, other = 0;
    for (int i = 0; i < in->n; i++)
        if (in->view[i].stage >= 0 && in->view[i].stage < REBAL_STAGES &&
            in->view[i].stage < in->S)
            cnt[in->view[i].stage]++, n++;
    for (int s = 0; s < in->S && s < REBAL_STAGES; s++) {
        int d = cnt[s] - r->cnt[s];
        if (d == -1 && lost < 0) lost = s;
        else if (d == 1 && gained < 0) gained = s;
        else if (d) other = 1;
    }
    if (n == r->n && lost >= 0 && gained >= 0 && !other) {
        r->last_from = lost, r->last_to = gained;
        timeout_start(&r->reverse, now);
    } else if (n != r->n) { /* a member came or went: a new situation, no reverse */
        r->last_from = r->last_to = -1;
        timeout_stop(&r->reverse);
    }
    memcpy(r->cnt, cnt, sizeof cnt);
    r->n = n;
    uint64_t pl = rebalance_placement(in->view, in->n);
    if (pl != r->placement || !r->stable_since) {
        r->placement = pl;
        r->stable_since = now;
        r->streak = 0;
    }
    /* a move in the run's last steps would only cost */
    if (now - r->stable_since < in->cooldown_s || in->step + 2 >= in->steps) return 0;
    rebalance_config_t c = rebalance_defaults();
    if (in->margin > 0) c.margin = in->margin;
    if (c.reverse_margin < 3 * c.margin) c.reverse_margin = 3 * c.margin;
    if (r->last_from >= 0 && timeout_running(&r->reverse) && !timeout_fired(&r->reverse, now))
        c.last_from = r->last_from, c.last_to = r->last_to;
    rebalance_decision_t d;
    if (rebalance_decide(in->view, in->n, in->S, &c, &d) != REBALANCE_MOVE ||
        memcmp(d.who, in->self, MSG_ID_LEN) || d.from != in->stage) {
        r->streak = 0;
        return 0;
    }
    if (++r->streak < REBAL_STREAK) return 0;
    r->to = d.to;
    snprintf(r->why, sizeof r->why, "%s", d.why);
    return 1;
}

int rebal_stands(rebal_t *r, const msg_member_t *view, int n)
{
    if (r->to < 0) return 0;
    if (rebalance_placement(view, n) == r->placement) return 1;
    rebal_reset(r);
    return 0;
}

void rebal_ask(rebal_t *r, int stage, const msg_member_t *view, int n, const char *why)
{
    r->to = stage;
    r->placement = rebalance_placement(view, n);
    snprintf(r->why, sizeof r->why, "%s", why ? why : "asked to");
}

int rebal_take(rebal_t *r)
{
    int to = r->to;
    rebal_reset(r);
    r->moves++;
    return to;
}
