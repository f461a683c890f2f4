/* assemble.h — one whole model from the stage checkpoints in several stores: the peers'
 * stores of a swarm (`peer --db --checkpoint-every`, one stage each) or a `train --db`
 * store (every stage in one checkpoint), for export and sampling.
 *
 * From each store it takes the newest good checkpoint of every stage it holds
 * (store_ckpt_load_latest). Then all of them MUST be of one run (the same config hash),
 * and every stage 0 .. S-1 MUST have a checkpoint at one common step (the largest such
 * step is used; replicas of a stage at that step are interchangeable, as pools keep them
 * identical). Otherwise it refuses with a message naming the stores, stages, steps and
 * runs it found. Only parameters are read; optimizer state is ignored.
 *
 * Not for: writing checkpoints (stage_ckpt.h, peer_store.h) or a live swarm. */
#ifndef SWARMTRAIN_ASSEMBLE_H
#define SWARMTRAIN_ASSEMBLE_H

#include "model/model.h"

#include <stdint.h>

typedef struct {
    model_config_t cfg;  /* the run's model, batch 1 */
    int64_t step;        /* optimizer steps applied to the assembled parameters */
    char run_hash[17];   /* the run's config hash (hex) */
    char run_text[2048]; /* the run's settings as the checkpoints carry them */
} assemble_info_t;

/* Builds the model on backend k with batch `batch` (sampling and export use 1) from the
 * stores at paths[0 .. n). Caller owns the result; NULL with err: STATUS_ENOTFOUND (a store
 * missing, a stage missing), STATUS_EINVAL (different runs or steps), or the store's
 * status. */
model_t *assemble_from_stores(const char *const *paths, int n, kern_t *k, int batch,
                              assemble_info_t *info, char *err);

#endif
