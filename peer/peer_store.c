/* peer_store.c — a swarm peer's identity, metrics, events and stage checkpoints. */
#include "peer/peer_store.h"
#include "common/log.h"
#include "common/rng.h"
#include "model/stage_ckpt.h"

#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct peer_store {
    store_t *s;
    int stage, every;
    int sync; /* checkpoints written on the caller's thread (peer_store_set_sync) */
    char run_text[2048];
    char run_hash[17];
    int64_t last_ckpt; /* step of the last checkpoint handed over; -1 none */
};

peer_store_t *peer_store_open(const char *path, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                              char *err)
{
    peer_store_t *ps = calloc(1, sizeof *ps);
    if (!ps) {
        status_set(err, STATUS_ENOMEM, "peer store: out of memory");
        return NULL;
    }
    ps->stage = -1;
    ps->last_ckpt = -1;
    if (!(ps->s = store_open(path, err)) || store_identity(ps->s, pk, NULL, err)) {
        peer_store_close(&ps);
        return NULL;
    }
    return ps;
}

int peer_store_secret(peer_store_t *ps, unsigned char pk[crypto_sign_PUBLICKEYBYTES],
                      unsigned char *sk, char *err)
{
    return store_identity(ps->s, pk, sk, err);
}

void peer_store_bind(peer_store_t *ps, int stage, const train_options_t *run, int every,
                     double budget)
{
    if (!ps) return;
    ps->stage = stage;
    ps->every = every;
    train_options_to_text(run, ps->run_text, sizeof ps->run_text);
    snprintf(ps->run_hash, sizeof ps->run_hash, "%016" PRIx64, rng_hash_str(ps->run_text));
    store_set_writer_budget(ps->s, budget > 0 ? budget : STORE_WRITER_BUDGET_DEFAULT);
}

void peer_store_metric(peer_store_t *ps, int64_t step, double loss, double tokens_per_s,
                       uint64_t bytes_sent, uint64_t bytes_recv)
{
    if (!ps) return;
    char err[STATUS_ERR_LEN];
    store_metric_t m = {.stage = ps->stage,
                        .step = step,
                        .loss = loss,
                        .tokens_per_s = tokens_per_s,
                        .bytes_sent = (int64_t)bytes_sent,
                        .bytes_recv = (int64_t)bytes_recv};
    if (store_metric_add(ps->s, &m, err)) log_warn("peer store: metrics: %s", err);
}

void peer_store_event(peer_store_t *ps, const char *kind, const char *fmt, ...)
{
    if (!ps) return;
    char detail[512], err[STATUS_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    if (store_event_add(ps->s, kind, detail, err)) log_warn("peer store: event: %s", err);
}

void peer_store_step(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t step, int span,
                     int force)
{
    if (!ps || !ps->every || ps->stage < 0 || step == ps->last_ckpt) return;
    if (!force && (step % ps->every >= (span > 0 ? span : 1) ||
                   (!ps->sync && !store_ckpt_ready(ps->s))))
        return;
    store_ckpt_t *ck = store_ckpt_new(ps->stage, step, ps->run_text, ps->run_hash);
    int rc = ck ? store_ckpt_add_blob(ck, "peer.step", &step, sizeof step) : STATUS_ENOMEM;
    if (!rc) rc = stage_ckpt_add(ck, "stage.", st);
    if (!rc && dopt) rc = stage_ckpt_add_demo(ck, "stage.demo", dopt, stage_num_params(st));
    if (rc) {
        log_warn("peer store: no checkpoint at step %" PRId64 ": %s", step, status_str(rc));
        store_ckpt_destroy(&ck);
        return;
    }
    if (ps->sync) {
        char err[STATUS_ERR_LEN];
        rc = store_ckpt_save(ps->s, ck, err);
        store_ckpt_destroy(&ck);
        if (rc) {
            log_warn("peer store: no checkpoint at step %" PRId64 ": %s", step, err);
            return;
        }
    } else {
        store_ckpt_save_async(ps->s, &ck);
    }
    ps->last_ckpt = step;
}

void peer_store_set_sync(peer_store_t *ps, int sync)
{
    if (ps) ps->sync = sync != 0;
}

int peer_store_ckpt_steps(peer_store_t *ps, int stage, int64_t *steps, int max)
{
    for (int i = 0; i < max; i++) steps[i] = 0;
    if (!ps) return 0;
    store_ckpt_info_t info[64];
    int n = 0, k = 0;
    char err[STATUS_ERR_LEN];
    if (store_ckpt_list(ps->s, 0, info, 64, &n, err)) return 0;
    for (int i = 0; i < n && k < max; i++) /* newest first */
        if (info[i].stage == stage && info[i].step > 0) {
            int dup = 0;
            for (int j = 0; j < k; j++) dup |= steps[j] == info[i].step;
            if (!dup) steps[k++] = info[i].step;
        }
    return k;
}

int peer_store_newest_stage(peer_store_t *ps)
{
    store_ckpt_info_t info[1];
    int n = 0;
    char err[STATUS_ERR_LEN];
    if (!ps || store_ckpt_list(ps->s, 0, info, 1, &n, err) || n < 1) return -1;
    return info[0].stage;
}

int peer_store_restore(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t *step, char *err)
{
    return peer_store_restore_step(ps, st, dopt, -1, step, err);
}

int peer_store_restore_step(peer_store_t *ps, stage_t *st, demo_opt_t *dopt, int64_t at,
                            int64_t *step, char *err)
{
    if (!ps || ps->stage < 0) return status_set(err, STATUS_ENOTFOUND, "no store");
    store_ckpt_t *ck = NULL;
    int rc = store_ckpt_load_step(ps->s, ps->stage, at, &ck, err);
    if (rc) return rc;
    if (strcmp(store_ckpt_config_hash(ck), ps->run_hash)) {
        rc = status_set(err, STATUS_ENOTFOUND,
                        "the newest checkpoint of stage %d in %s is of another run", ps->stage,
                        store_path(ps->s));
    } else {
        /* every blob checked before the stage is touched: all or nothing */
        size_t P = stage_num_params(st);
        const int64_t *s = stage_ckpt_blob(ck, "peer.step", sizeof(int64_t), err);
        rc = s && (!dopt || stage_ckpt_blob(ck, "stage.demo", P * sizeof(float), err))
                 ? stage_ckpt_load(ck, "stage.", st, err)
                 : STATUS_ECORRUPT;
        if (!rc && dopt) rc = stage_ckpt_load_demo(ck, "stage.demo", dopt, P, err);
        if (!rc) *step = *s, ps->last_ckpt = *s;
    }
    store_ckpt_destroy(&ck);
    return rc;
}

void peer_store_close(peer_store_t **psp)
{
    if (!psp || !*psp) return;
    peer_store_t *ps = *psp;
    store_close(&ps->s);
    free(ps);
    *psp = NULL;
}
