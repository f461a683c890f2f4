/* guard.h — the update guard, a part of the pool's step (docs/protocol.md 12.4, 12.5):
 * the recent norms of the DeMo messages a replica took, the bound a new message's norm
 * must stay under, and the members whose messages were refused, expelled after repeated
 * refusals. Pure rules on its own state: no peer, no network, no clock, no log; the caller
 * (step.c) acts on what they return (logs, records, drops an expelled member from its
 * view).
 *
 * Lifetime: the refusals, for the process (an expelled member stays expelled); the norms,
 * for the stage held (guard_forget_norms when the peer leaves its stage: another stage's
 * updates have another scale).
 *
 * Not for: checking a message's values and indices (demo_opt.c), when to apply (step.c). */
#ifndef SWARMTRAIN_GUARD_H
#define SWARMTRAIN_GUARD_H

#include "swarm/msg.h"

#include <stdint.h>

#define GUARD_BAD_MAX     64 /* members tracked for refused updates */
#define GUARD_NORMS       32 /* recent update norms kept for the bound */
#define GUARD_NORMS_MED   3  /* norms known before the bound is on their median (on their
                              * largest before: one odd early update is no scale) */
#define GUARD_EXPEL_AFTER 2  /* steps with a refused message of its own that expel a member */
/* a DeMo message may be this much above the recent median: far above an honest member's
 * growth in warm-up (1000 refused honest members: DeMo message norms of one pool spread
 * over more than 3 orders of magnitude; bench_checkfree, stage 2 at step 138) */
#define GUARD_NORM_FACTOR 1e6

typedef struct {
    struct {
        uint8_t id[MSG_ID_LEN];
        int refused;       /* steps at which a message of its own (sent by it, not relayed)
                            * was refused */
        int64_t last_step;
        int expelled;      /* left out of the view and pool for good */
    } bad[GUARD_BAD_MAX];
    int nbad;
    double norms[GUARD_NORMS]; /* L2 norms of the last DeMo messages taken, a ring */
    int nnorms;
} guard_t;

/* Empty: nothing refused, no norm known. */
void guard_init(guard_t *g);
/* The norms forgotten (a new stage held); the refusals kept. */
void guard_forget_norms(guard_t *g);

/* A message of origin's for `step` was refused; direct: sent by origin itself, and not
 * this peer (a relay's copy does not count against it). Refusals at GUARD_EXPEL_AFTER
 * distinct steps expel it: returns 1 when this refusal does (the caller says so and drops
 * it from its view), else 0. */
int guard_refused(guard_t *g, const uint8_t *origin, int64_t step, int direct);
/* How many refusals expelled origin (after guard_refused returned 1). */
int guard_refusals(const guard_t *g, const uint8_t *origin);
int guard_expelled(const guard_t *g, const uint8_t *id);
/* Whether any member was refused at all (the view needs filtering). */
int guard_any(const guard_t *g);
/* The members in[0, n) without the expelled ones, into out; returns how many. */
int guard_view(const guard_t *g, const msg_member_t *in, int n, msg_member_t *out);

/* Whether a DeMo message's norm is within the bound: GUARD_NORM_FACTOR x the median of the
 * recent norms, own included (x the largest while fewer than GUARD_NORMS_MED are known; no
 * bound before any is). */
int guard_norm_ok(const guard_t *g, double norm);
/* Notes the norm of a message taken that counted `counted` microbatches: one that counted
 * none carries only decayed momentum (after a restart, next to nothing) and sets no scale,
 * nor does a norm of zero. */
void guard_norm_note(guard_t *g, double norm, uint32_t counted);

#endif
