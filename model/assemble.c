/* assemble.c — a whole model from the newest stage checkpoints of several stores. */
#include "model/assemble.h"
#include "common/status.h"
#include "model/stage_ckpt.h"
#include "store/store.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* One stage's parameters found in one store. */
typedef struct {
    int store;        /* index into paths */
    int stage;        /* model stage */
    int64_t step;     /* steps applied */
    store_ckpt_t *ck; /* owned by the first candidate that names it (own_ck) */
    int own_ck;
    char prefix[32]; /* blob prefix: "stage." (peer) or "stage.S." (train) */
} cand_t;

typedef struct {
    cand_t *c;
    int n, cap;
} cands_t;

static int push(cands_t *cs, const cand_t *c)
{
    if (cs->n == cs->cap) {
        int cap = cs->cap ? 2 * cs->cap : 16;
        cand_t *q = realloc(cs->c, (size_t)cap * sizeof *q);
        if (!q) return STATUS_ENOMEM;
        cs->c = q;
        cs->cap = cap;
    }
    cs->c[cs->n++] = *c;
    return 0;
}

/* The model shape from a checkpoint's run text: only the model's keys are read (the text
 * also holds training settings, and train adds data=PATH). */
static int cfg_from_run_text(const char *text, model_config_t *cfg, char *err)
{
    static const char *keys[] = {"vocab", "dim",      "layers",     "heads", "ffn",
                                 "seq",   "norm_eps", "rope_theta", "stages"};
    model_config_t c;
    config_preset(&c, "tiny", NULL);
    int seen = 0;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[256];
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = 0;
            char *eq = strchr(line, '=');
            if (eq) {
                *eq = 0;
                for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
                    if (!strcmp(line, keys[i])) {
                        if (config_set(&c, line, eq + 1, err)) return STATUS_EMALFORMED;
                        seen |= 1 << i;
                    }
            }
        }
        p += len + (nl ? 1 : 0);
    }
    if (seen != (1 << (sizeof keys / sizeof keys[0])) - 1)
        return status_set(err, STATUS_EMALFORMED,
                          "a checkpoint's run settings lack the model's shape");
    c.batch = 1;
    if (config_validate(&c, err)) return STATUS_EMALFORMED;
    *cfg = c;
    return 0;
}

/* Every stage checkpoint of one store (newest per stage), appended to cs. */
static int scan_store(const char *path, int si, cands_t *cs, char *err)
{
    if (access(path, F_OK) != 0) /* a store is read here, never created */
        return status_set(err, STATUS_ENOTFOUND, "%s: no such store", path);
    store_t *s = store_open(path, err);
    if (!s) return STATUS_EIO;
    enum { MAXCK = 1024 };
    store_ckpt_info_t *info = malloc(MAXCK * sizeof *info);
    int n = 0, rc = info ? store_ckpt_list(s, 0, info, MAXCK, &n, err) : STATUS_ENOMEM;
    if (rc == STATUS_ENOMEM && !info) status_set(err, rc, "out of memory");
    int found = 0;
    for (int i = 0; !rc && i < n; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= info[j].stage == info[i].stage;
        if (dup) continue;
        store_ckpt_t *ck = NULL;
        rc = store_ckpt_load_latest(s, info[i].stage, &ck, err);
        if (rc == STATUS_ENOTFOUND) { /* every checkpoint of it is bad: already reported */
            rc = 0;
            continue;
        }
        if (rc) break;
        size_t bytes;
        cand_t c = {.store = si, .step = store_ckpt_step(ck), .ck = ck, .own_ck = 1};
        if (store_ckpt_blob(ck, "train.next_step", &bytes)) {
            /* train --db: stage.S. for every stage S of the run */
            model_config_t cfg;
            if ((rc = cfg_from_run_text(store_ckpt_config_text(ck), &cfg, err))) {
                store_ckpt_destroy(&ck);
                break;
            }
            for (int st = 0; !rc && st < cfg.stages; st++) {
                c.stage = st;
                snprintf(c.prefix, sizeof c.prefix, "stage.%d.", st);
                rc = push(cs, &c);
                c.own_ck = 0;
            }
            if (rc) {
                if (c.own_ck) store_ckpt_destroy(&ck);
                break;
            }
        } else if (store_ckpt_blob(ck, "peer.step", &bytes)) {
            c.stage = store_ckpt_stage(ck);
            snprintf(c.prefix, sizeof c.prefix, "stage.");
            if ((rc = push(cs, &c))) {
                store_ckpt_destroy(&ck);
                break;
            }
        } else {
            store_ckpt_destroy(&ck); /* not ours to read */
            continue;
        }
        found++;
    }
    if (rc == STATUS_ENOMEM) status_set(err, rc, "out of memory");
    if (!rc && !found)
        rc = status_set(err, STATUS_ENOTFOUND, "%s: holds no stage checkpoint", path);
    free(info);
    store_close(&s);
    return rc;
}

model_t *assemble_from_stores(const char *const *paths, int n, kern_t *k, int batch,
                              assemble_info_t *info, char *err)
{
    cands_t cs = {0};
    model_t *m = NULL;
    int rc = 0;
    if (n < 1) {
        status_set(err, STATUS_EINVAL, "no store given");
        return NULL;
    }
    for (int i = 0; !rc && i < n; i++) rc = scan_store(paths[i], i, &cs, err);
    if (rc) goto done;

    /* one run */
    const char *hash0 = store_ckpt_config_hash(cs.c[0].ck);
    for (int i = 1; i < cs.n; i++)
        if (strcmp(store_ckpt_config_hash(cs.c[i].ck), hash0)) {
            rc = status_set(err, STATUS_EINVAL,
                            "checkpoints of different runs: %s stage %d (run %s) and %s stage %d "
                            "(run %s); export one run's stores",
                            paths[cs.c[0].store], cs.c[0].stage, hash0, paths[cs.c[i].store],
                            cs.c[i].stage, store_ckpt_config_hash(cs.c[i].ck));
            goto done;
        }
    model_config_t cfg;
    if ((rc = cfg_from_run_text(store_ckpt_config_text(cs.c[0].ck), &cfg, err))) goto done;
    cfg.batch = batch;
    int S = cfg.stages;

    /* every stage present, then the largest step all stages share */
    for (int s = 0; s < S; s++) {
        int have = 0;
        for (int i = 0; i < cs.n; i++) have |= cs.c[i].stage == s;
        if (!have) {
            rc = status_set(err, STATUS_ENOTFOUND,
                            "no checkpoint of stage %d (of %d) in the stores given: they do not "
                            "form a whole model",
                            s, S);
            goto done;
        }
    }
    int64_t best = -1;
    for (int i = 0; i < cs.n; i++) {
        int64_t step = cs.c[i].step;
        int all = 1;
        for (int s = 0; all && s < S; s++) {
            int have = 0;
            for (int j = 0; j < cs.n; j++) have |= cs.c[j].stage == s && cs.c[j].step == step;
            all = have;
        }
        if (all && step > best) best = step;
    }
    if (best < 0) {
        char list[STATUS_ERR_LEN] = "";
        size_t at = 0;
        for (int i = 0; i < cs.n && at < sizeof list; i++) {
            int w = snprintf(list + at, sizeof list - at, "%sstage %d step %" PRId64 " (%s)",
                             i ? ", " : "", cs.c[i].stage, cs.c[i].step, paths[cs.c[i].store]);
            if (w > 0) at += (size_t)w;
        }
        rc = status_set(err, STATUS_EINVAL,
                        "the stages' newest checkpoints are at different steps: %s", list);
        goto done;
    }

    if (!(m = model_new(&cfg, k, 0, err))) {
        rc = STATUS_EINVAL;
        goto done;
    }
    for (int s = 0; s < S; s++) {
        const cand_t *c = NULL;
        for (int i = 0; !c && i < cs.n; i++)
            if (cs.c[i].stage == s && cs.c[i].step == best) c = &cs.c[i];
        stage_t *st = model_stage(m, s);
        char name[64];
        snprintf(name, sizeof name, "%sparams", c->prefix);
        size_t bytes = stage_num_params(st) * sizeof(float);
        const void *p = stage_ckpt_blob(c->ck, name, bytes, err);
        if (!p) {
            char why[STATUS_ERR_LEN];
            snprintf(why, sizeof why, "%s", err ? err : "");
            rc = status_set(err, STATUS_ECORRUPT, "%s: %s", paths[c->store], why);
            goto done;
        }
        kern_upload(stage_kern(st), stage_params(st), p, bytes);
    }
    if (info) {
        info->cfg = cfg;
        info->step = best;
        snprintf(info->run_hash, sizeof info->run_hash, "%s", hash0);
        snprintf(info->run_text, sizeof info->run_text, "%s", store_ckpt_config_text(cs.c[0].ck));
    }
done:
    for (int i = 0; i < cs.n; i++)
        if (cs.c[i].own_ck) store_ckpt_destroy(&cs.c[i].ck);
    free(cs.c);
    if (rc) model_destroy(&m);
    return m;
}
