/* resume.h — what the resume part (resume.c: a whole swarm restarting from its peers'
 * stores, `peer --resume`) keeps while a peer waits for the agreement on the step to
 * resume from, and after. Lifetime: the process; zero (as peer_new makes it) is the
 * state of a peer that has not begun to wait. Written only by resume.c. */
#ifndef SWARMTRAIN_RESUME_H
#define SWARMTRAIN_RESUME_H

#include <stdint.h>

typedef struct {
    double t0;         /* when this peer began to wait for the agreement (0: not yet) */
    int64_t agreed;    /* the step it agreed on (0: none), once po.resume is cleared; the
                        * simulator checks it (simrun.c) */
    uint64_t table;    /* the table it would decide on (a hash) ... */
    double changed_at; /* ... and when that last changed */
} resume_state_t;

#endif
