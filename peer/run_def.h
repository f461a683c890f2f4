/* run_def.h — a swarm run's definition: what every member must share, and its text form,
 * which WELCOME carries to a joiner (docs/protocol.md 7.6) and the swarm id is hashed
 * from. It is the training options every process of the run shares (model shape, batch,
 * stages, optimizer and schedule, DeMo, codec, seed, steps, the corpus's URL and checksum:
 * model/train.h's text form) and the swarm's own settings, as "swarm.key=value" lines after
 * them (today swarm.wait_peers). Not the device, threads, local data path, store or log.
 *
 * Not for: the single-process trainer's options (model/train.h), a member's own options
 * (peer.h). */
#ifndef SWARMTRAIN_RUN_DEF_H
#define SWARMTRAIN_RUN_DEF_H

#include "model/train.h"

#include <stddef.h>
#include <stdint.h>

#define RUN_DEF_TEXT_MAX 4096

typedef struct {
    train_options_t train; /* the training run every member shares */
    int wait_peers;        /* swarm.wait_peers: a new swarm's first step waits for this many */
    char text[RUN_DEF_TEXT_MAX]; /* its text form, as sent (run_def_write / run_def_read) */
    uint64_t swarm;        /* the swarm's id: the text's hash salted by the founder's id */
} run_def_t;

/* A founder's definition from its options: the text made, the swarm id from the text and
 * the founder's id. 0, or STATUS_EINVAL when the text does not fit. */
int run_def_found(run_def_t *d, const train_options_t *train, int wait_peers,
                  const uint8_t founder_id[32], char *err);

/* A joiner's definition from a WELCOME's text (len octets) and the swarm id it names:
 * unknown keys, bad values and a malformed swarm line are refused (STATUS_EMALFORMED). */
int run_def_read(run_def_t *d, const uint8_t *text, size_t len, uint64_t swarm, char *err);

#endif
