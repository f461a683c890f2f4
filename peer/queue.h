/* queue.h — the data messages a member took and has not computed yet (serve.c): FWD and
 * BWD with their payloads copied out of the transport's buffers, served gradients first.
 * Lifetime: the stage held (move.c hands the FWDs back). */
#ifndef SWARMTRAIN_QUEUE_H
#define SWARMTRAIN_QUEUE_H

#include "swarm/msg.h"

#include <stddef.h>
#include <stdint.h>

/* A data message waiting for compute (payloads copied out of the transport's buffers). */
typedef struct {
    msg_t m;
    uint8_t *pl[2];
    size_t pl_len[2];
} inmsg_t;

typedef struct {
    inmsg_t *msgs;
    int n, cap;
} serve_queue_t;

#endif
