/* stage_ckpt.h — one stage's training state as checkpoint blobs (store/): its parameters,
 * AdamW's m, v and step count, and (with DeMo) a replica's residual momentum. Named
 * "<prefix>params", "<prefix>adam_m", "<prefix>adam_v", "<prefix>adam_t" (float32 and
 * int64, host byte order) and whatever name the caller gives the momentum. The single-process
 * trainer (train.c, prefix "stage.S.") and the swarm peer (peer.c) both write and read
 * them through here, so a checkpoint of either has one layout.
 * Not for: choosing when to checkpoint, or what else a checkpoint holds. */
#ifndef SWARMTRAIN_STAGE_CKPT_H
#define SWARMTRAIN_STAGE_CKPT_H

#include "model/demo_opt.h"
#include "model/stage.h"
#include "store/store.h"

/* Adds st's parameters and AdamW state (a device backend's buffers are downloaded).
 * STATUS_ENOMEM or store_ckpt_add_blob's status on failure. */
int stage_ckpt_add(store_ckpt_t *ck, const char *prefix, stage_t *st);
/* Adds the DeMo residual momentum of o (P floats, P = the stage's parameter count). */
int stage_ckpt_add_demo(store_ckpt_t *ck, const char *name, demo_opt_t *o, size_t P);

/* Loads what stage_ckpt_add wrote into st. STATUS_ECORRUPT with a message naming the blob
 * when one is missing or of the wrong size; st is untouched then. */
int stage_ckpt_load(const store_ckpt_t *ck, const char *prefix, stage_t *st, char *err);
/* Loads a residual momentum into o; STATUS_ECORRUPT as above. */
int stage_ckpt_load_demo(const store_ckpt_t *ck, const char *name, demo_opt_t *o, size_t P,
                         char *err);

/* The blob `name` of exactly `want` bytes, or NULL with STATUS_ECORRUPT's message in err. */
const void *stage_ckpt_blob(const store_ckpt_t *ck, const char *name, size_t want, char *err);

#endif
