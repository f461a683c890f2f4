/* stats.h — what a member counts and times about its own work: the microbatches it
 * served, re-sent, lost and refused, its throughput estimate, and the moments of the run
 * that its closing line and tokens/s are computed from. Lifetime: the process, but the
 * throughput estimate, which is measured again on each stage held (move.c). Read by the
 * member's entry (peer_push_self), peer_info and the closing line. */
#ifndef SWARMTRAIN_STATS_H
#define SWARMTRAIN_STATS_H

#include <stdint.h>

typedef struct {
    double tp_ema; /* samples per second, bias-corrected EMA of its passes (serve.c) */
    int tp_n;
    uint64_t served, retries, lost, act_bytes, rejected, net_rejected;
    uint64_t act_tensors; /* the tensors those act_bytes carried, each batch x seq x dim
                           * elements: the codec's bytes per element (peer.c, `left`) */
    uint64_t stale;    /* backward passes of a step the pool had already applied */
    uint64_t revisits; /* second visits of a swapped microbatch served here (CheckFree+) */
    uint64_t ahead;     /* overlap: microbatches stage 0 started before their step (serve.c) */
    uint64_t refreshed; /* ... forwards it ran again before their backward: the step moved */
    double t_train0, t_train1; /* first microbatch; last step */
    double t_half;     /* the step half-way through the run (tokens/s of the last half) */
    double serve_t0;   /* serving began (state in place): a follower's time to contribute */
    double t_start;    /* the peer's first moment (peer.c) */
    int contributed;   /* it has contributed to a step (step.c); the first after following
                        * is its join's end, told to the transport for status */
} peer_stats_t;

/* A pass of `batch` samples took `seconds`: the throughput estimate (samples per second,
 * a bias-corrected EMA; SWARM), or -1 for the very first pass, left out: it pays for
 * first-touch allocations and cold caches, and would weigh on dozens of estimates. */
float stats_note_throughput(peer_stats_t *s, int batch, double seconds);
/* A new stage held: its throughput is measured again. */
void stats_forget_throughput(peer_stats_t *s);
/* A message refused (malformed, unexpected, over a limit). */
void stats_note_rejected(peer_stats_t *s);
/* An activation or gradient tensor sent, n octets encoded. */
void stats_note_act_bytes(peer_stats_t *s, uint64_t n);

#endif
