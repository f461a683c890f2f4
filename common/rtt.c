/* rtt.c — see rtt.h. */
#include "common/rtt.h"

#include <math.h>

void rtt_note(rtt_t *r, double sample)
{
    if (sample < 0) return;
    if (!r->n) {
        r->srtt = sample;
        r->rttvar = sample / 2;
    } else {
        r->rttvar = 0.75 * r->rttvar + 0.25 * fabs(r->srtt - sample);
        r->srtt = 0.875 * r->srtt + 0.125 * sample;
    }
    r->n++;
}

double rtt_rto(const rtt_t *r)
{
    return r->n ? r->srtt + 4 * r->rttvar : 0;
}
