/* peer_faults.c — a peer process's own fault drills (peer_faults.h). */
#include "tools/peer_faults.h"

#include "common/events.h"

#include <inttypes.h>
#include <signal.h>
#include <string.h>

int peer_poison_kind(const char *word)
{
    static const char *const names[] = {"", "nan", "huge", "index", "mix"};
    for (int k = PEER_POISON_NAN; k <= PEER_POISON_MIX; k++)
        if (!strcmp(word, names[k])) return k;
    return -1;
}

/* Dies holding the microbatch, so that its sender must re-route it (`local --kill`). */
static void die_at(void *ctx, int64_t step, uint32_t index, double now)
{
    peer_drills_t *d = ctx;
    if (d->die_at_step < 0 || step < d->die_at_step) return;
    FILE *log = d->log ? d->log : stdout;
    fprintf(log, "fault: t=%.3f dying on purpose at step %" PRId64 " holding microbatch %u\n",
            now, step, index);
    fflush(log);
    events_add(d->events, "fault", -1, step, "mb=%u mb_step=%" PRId64, index, step);
    raise(SIGKILL);
}

/* Mates get a well-framed poisoned copy; the peer applies its own honest one. */
static void poison(void *ctx, const demo_opt_t *o, int64_t step, uint8_t *msg, size_t len)
{
    peer_drills_t *d = ctx;
    int kind = d->poison != PEER_POISON_MIX ? d->poison
               : step % 2                   ? PEER_POISON_HUGE
                                            : PEER_POISON_NAN;
    demo_opt_poison(o, msg, len, kind, NULL);
}

peer_faults_t peer_drills_hooks(peer_drills_t *d)
{
    return (peer_faults_t){.ctx = d,
                           .fwd_arrived = d->die_at_step >= 0 ? die_at : NULL,
                           .exchange_out = d->poison != PEER_POISON_NONE ? poison : NULL};
}
