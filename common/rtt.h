/* rtt.h — a round-trip estimate kept as TCP keeps one (RFC 6298): the smoothed round trip,
 * its mean deviation, and the retransmission timeout srtt + 4 rttvar. Used for failure
 * detection (swarm/members.c: echoes of a peer's heartbeats) and custody (peer/custody.c:
 * a forward to its gradient). */
#ifndef SWARMTRAIN_RTT_H
#define SWARMTRAIN_RTT_H

typedef struct {
    double srtt, rttvar;
    int n; /* samples taken; 0: none */
} rtt_t;

/* Folds in one sample (seconds); a negative one is ignored. */
void rtt_note(rtt_t *r, double sample);

/* srtt + 4 rttvar, or 0 when there is no sample yet. */
double rtt_rto(const rtt_t *r);

#endif
