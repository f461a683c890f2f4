/* join.h — entering a swarm and starting it (join.c, serve.c): the HELLO retries, when
 * the phase began, and the start of a new swarm's first step at stage 0 (once the run's
 * wait_peers members serve). Lifetime: the process. */
#ifndef SWARMTRAIN_JOIN_H
#define SWARMTRAIN_JOIN_H

typedef struct {
    int wait_peers;  /* the run's swarm.wait_peers: stage 0 starts once this many serve */
    double phase_at; /* when the phase began */
    double hello_at; /* last HELLO */
    int hello_tries;
    int go;          /* stage 0: the first step may start */
    double go_at;
} join_state_t;

#endif
