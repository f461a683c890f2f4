/* stage_ckpt.c — a stage's training state in and out of checkpoint blobs. */
#include "model/stage_ckpt.h"
#include "common/status.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const what[3] = {"params", "adam_m", "adam_v"};

static float *stage_buf(stage_t *st, int i)
{
    return i == 0 ? stage_params(st) : i == 1 ? stage_opt_m(st) : stage_opt_v(st);
}

int stage_ckpt_add(store_ckpt_t *ck, const char *prefix, stage_t *st)
{
    kern_t *k = stage_kern(st);
    size_t bytes = stage_num_params(st) * sizeof(float);
    char name[128];
    float *host = NULL;
    if (kern_on_device(k) && !(host = malloc(bytes))) return STATUS_ENOMEM;
    int rc = 0;
    for (int i = 0; !rc && i < 3; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, what[i]);
        /* add_blob copies, so a host backend's buffer is snapshotted directly */
        const float *src = stage_buf(st, i);
        if (kern_on_device(k)) kern_download(k, host, src, bytes), src = host;
        rc = store_ckpt_add_blob(ck, name, src, bytes);
    }
    snprintf(name, sizeof name, "%sadam_t", prefix);
    if (!rc) rc = store_ckpt_add_blob(ck, name, stage_opt_step(st), sizeof(int64_t));
    free(host);
    return rc;
}

int stage_ckpt_add_demo(store_ckpt_t *ck, const char *name, demo_opt_t *o, size_t P)
{
    float *host = malloc(P * sizeof(float));
    if (!host) return STATUS_ENOMEM;
    demo_opt_get_momentum(o, host);
    int rc = store_ckpt_add_blob(ck, name, host, P * sizeof(float));
    free(host);
    return rc;
}

const void *stage_ckpt_blob(const store_ckpt_t *ck, const char *name, size_t want, char *err)
{
    size_t n;
    const void *p = store_ckpt_blob(ck, name, &n);
    if (!p || n != want) {
        status_set(err, STATUS_ECORRUPT, "checkpoint %" PRId64 " lacks '%s' of %zu bytes",
                   store_ckpt_step(ck), name, want);
        return NULL;
    }
    return p;
}

int stage_ckpt_load(const store_ckpt_t *ck, const char *prefix, stage_t *st, char *err)
{
    kern_t *k = stage_kern(st);
    size_t bytes = stage_num_params(st) * sizeof(float);
    const void *src[4];
    char name[128];
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "%s%s", prefix, i < 3 ? what[i] : "adam_t");
        if (!(src[i] = stage_ckpt_blob(ck, name, i < 3 ? bytes : sizeof(int64_t), err)))
            return STATUS_ECORRUPT;
    }
    for (int i = 0; i < 3; i++) kern_upload(k, stage_buf(st, i), src[i], bytes);
    memcpy(stage_opt_step(st), src[3], sizeof(int64_t));
    return 0;
}

int stage_ckpt_load_demo(const store_ckpt_t *ck, const char *name, demo_opt_t *o, size_t P,
                         char *err)
{
    const float *m = stage_ckpt_blob(ck, name, P * sizeof(float), err);
    if (!m) return STATUS_ECORRUPT;
    demo_opt_set_momentum(o, m);
    return 0;
}
