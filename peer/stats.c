/* stats.c — what a member counts about its own work (stats.h). */
#include "peer/stats.h"

#include <math.h>

#define STATS_TP_ALPHA 0.1 /* the throughput EMA's weight of a new pass */

float stats_note_throughput(peer_stats_t *s, int batch, double seconds)
{
    if (s->tp_n++ == 0) return -1; /* the very first pass: cold caches */
    double tp = batch / (seconds > 1e-6 ? seconds : 1e-6);
    s->tp_ema = STATS_TP_ALPHA * tp + (1 - STATS_TP_ALPHA) * s->tp_ema;
    /* bias-corrected EMA (SWARM): divide by 1 - (1-a)^n */
    return (float)(s->tp_ema / (1 - pow(1 - STATS_TP_ALPHA, s->tp_n - 1)));
}

void stats_forget_throughput(peer_stats_t *s)
{
    s->tp_ema = 0;
    s->tp_n = 0;
}

void stats_note_rejected(peer_stats_t *s)
{
    s->rejected++;
}

void stats_note_act_bytes(peer_stats_t *s, uint64_t n)
{
    s->act_bytes += n;
    s->act_tensors++;
}
