/* resume.h — what the resume part (resume.c: a whole swarm restarting from its peers'
 * stores, `peer --resume`) keeps while a peer waits for the agreement on the step to
 * resume from, and after. Lifetime: the process; zero (as peer_new makes it) is the
 * state of a peer that has not begun to wait. Written only by resume.c. */
#ifndef SWARMTRAIN_RESUME_H
#define SWARMTRAIN_RESUME_H

#include "common/timeout.h"

#include <stdint.h>

#define RESUME_WAIT_S   30.0 /* resume.decide: decide with whoever is there after this */
#define RESUME_SETTLE_S 2.0  /* resume.settle: the least wait: the others' entries arrive by gossip */

typedef struct {
    timeout_t decide;  /* resume.decide: from the first wait for the agreement */
    int64_t agreed;    /* the step it agreed on (0: none), once po.resume is cleared; the
                        * simulator checks it (simrun.c) */
    uint64_t table;    /* the table it would decide on (a hash) ... */
    timeout_t settle;  /* resume.settle: ... unchanged since this started */
    int64_t tried;     /* the mates' step it last tried its own checkpoint of (0: none) */
} resume_state_t;

void resume_init(resume_state_t *r);

#endif
