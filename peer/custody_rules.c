/* custody_rules.c — custody's rules (custody.h), pure: no peer, no network, no clock. */
#include "peer/custody.h"

#include <string.h>

double custody_wait(double custody_s, int later, int span, const rtt_t *fb_rtt)
{
    double base = span > 0 ? custody_s * later / span : custody_s;
    if (fb_rtt && fb_rtt->n > 0) {
        double rto = rtt_rto(fb_rtt);
        if (rto > CUSTODY_RTO_CAP * base) rto = CUSTODY_RTO_CAP * base;
        if (rto > base) base = rto;
    }
    return base;
}

double custody_settle(const rtt_t *fb_rtt, double timeout_s, double custody_s)
{
    double floor = CUSTODY_SETTLE_UNKNOWN * timeout_s, t = floor;
    if (fb_rtt && fb_rtt->n > 0) {
        double cap = SETTLE_SRTTS * fb_rtt->srtt > floor ? SETTLE_SRTTS * fb_rtt->srtt : floor;
        t = 1.5 * rtt_rto(fb_rtt);
        if (t > cap) t = cap;
    }
    return t < custody_s ? t : custody_s;
}

int custody_act(const custody_case_t *c, double now, const char **why)
{
    *why = NULL;
    if (!c->sent) return CUSTODY_KEEP;
    if (c->nack) {
        *why = c->nack;
        /* a revisit has nowhere else to go, but a busy peer may take it later */
        return c->revisit && strcmp(c->nack, "busy") ? CUSTODY_DROP : CUSTODY_REROUTE;
    }
    if (!c->next || (!c->revisit && c->next->stage != c->next_stage)) {
        *why = "its next peer is gone";
        return CUSTODY_REROUTE;
    }
    if (!c->revisit && c->next->state != MEMBER_SERVING) { /* a revisit's refuses */
        *why = "its next peer is re-syncing";
        return CUSTODY_REROUTE;
    }
    return custody_overdue(c, now, why);
}

int custody_overdue(const custody_case_t *c, double now, const char **why)
{
    *why = NULL;
    if (!c->sent || now - c->sent_at < c->wait_s) return CUSTODY_KEEP;
    *why = "no gradient back in time";
    return CUSTODY_REROUTE;
}
