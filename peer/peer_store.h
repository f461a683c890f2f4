/* peer_store.h — what a swarm peer keeps in its own store (store/, one SQLite file per
 * peer): its Ed25519 identity, a metrics row per step, events (joined, restored,
 * resynced, left) for the status tool, and background checkpoints of its stage
 * (stage_ckpt.h blobs under the prefix "stage.", plus "peer.step" and with DeMo
 * "stage.demo"), tagged with the run's settings so that only the same run restores them.
 * Metrics, events and checkpoint failures are logged, counted by the store, and never
 * stop the peer. A peer uses one from one thread.
 * Not for: deciding the stage or talking to the swarm (peer.c). */
#ifndef SWARMTRAIN_PEER_STORE_H
#define SWARMTRAIN_PEER_STORE_H

#include "model/demo_opt.h"
#include "model/stage.h"
#include "model/train.h"
#include "store/store.h"

typedef struct peer_store peer_store_t;

/* Opens (or creates) the store at path and reads or makes the identity into pk. NULL with
 * the store's message in err on failure. */
peer_store_t *peer_store_open(const char *path, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                              char *err);

/* The store's identity with its secret key (sk: crypto_sign_SECRETKEYBYTES, sodium_malloc'd
 * by the caller, who wipes it). 0 or a status. */
int peer_store_secret(peer_store_t *ps, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                      unsigned char *sk, char *err);

/* Says which stage and run the checkpoints are of, how often to take one (every N steps,
 * 0: never) and the writer's CPU budget (store_set_writer_budget; 0: the default). */
void peer_store_bind(peer_store_t *ps, int stage, const train_options_t *run, int every,
                     double budget);

/* sync != 0: every due checkpoint is written at once on the caller's thread
 * (store_ckpt_save), whether or not the writer would take one now. A checkpoint then
 * depends only on the steps, not on the writer's timing: the simulator (sim/simrun.c)
 * uses it so that a schedule replays exactly. Default 0 (the background writer). */
void peer_store_set_sync(peer_store_t *ps, int sync);

/* One metrics row for the step that just ended. NaN loss when this stage saw none. */
void peer_store_metric(peer_store_t *ps, int64_t step, double loss, double tokens_per_s,
                       uint64_t bytes_sent, uint64_t bytes_recv);

/* One event; detail is printf-formatted. */
void peer_store_event(peer_store_t *ps, const char *kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Called when the stage has reached `step` (the state is that after step - 1 was
 * applied): hands a checkpoint to the writer when one is due (a multiple of the interval
 * within the last `span` steps: 1 when called every step, a round's H with local steps)
 * and the writer would take it (store_ckpt_ready), or when force is set. */
void peer_store_step(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t step, int span,
                     int force);

/* Loads the newest good checkpoint of the bound stage made by the same run into st (and
 * dopt's residual momentum); *step gets the step it was taken at. STATUS_ENOTFOUND when
 * there is none (or only other runs'); another status when the checkpoint is unusable. */
int peer_store_restore(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t *step, char *err);
/* The same for the checkpoint taken at step `at` (< 0: the newest). */
int peer_store_restore_step(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t at,
                            int64_t *step, char *err);
/* The steps (> 0) of the newest checkpoints of `stage` in the store, newest first, into
 * steps[0, max) (0 where there are fewer); returns how many. */
int peer_store_ckpt_steps(peer_store_t *ps, int stage, int64_t *steps, int max);
/* The stage of the store's newest checkpoint, or -1. */
int peer_store_newest_stage(peer_store_t *ps);

/* Waits for the writer, closes the store and sets *ps to NULL. NULL-safe. */
void peer_store_close(peer_store_t **ps);

#endif
