/* demo_opt.c — one stage replica's DeMo step: prepare this replica's stage message,
 * apply the pool's messages. */
#include "peer/demo_opt.h"
#include "common/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct demo_opt {
    stage_t *st;
    kern_t *k;
    int n;                   /* tensors */
    const stage_tensor_t *tab;
    demo_t **d;              /* one per tensor */
    size_t *msg_len;         /* per tensor */
    size_t msg_size;         /* whole stage message */
    float *hp, *hg;          /* host copies of params and grads when the backend is a device */
    float *q;                /* aggregated update direction, all tensors */
    const uint8_t **ptrs;    /* scratch for aggregation: m pointers */
    size_t *lens;            /* and m lengths */
    int cap_m;
};

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

demo_opt_t *demo_opt_new(stage_t *st, const demo_cfg_t *cfg, char *err)
{
    demo_opt_t *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->st = st;
    o->k = stage_kern(st);
    o->tab = stage_tensors(st, &o->n);
    size_t P = stage_num_params(st);
    o->d = calloc((size_t)o->n, sizeof *o->d);
    o->msg_len = calloc((size_t)o->n, sizeof *o->msg_len);
    o->q = malloc(P * sizeof(float));
    if (!o->d || !o->msg_len || !o->q) goto nomem;
    if (o->k->on_device) {
        o->hp = malloc(P * sizeof(float));
        o->hg = malloc(P * sizeof(float));
        if (!o->hp || !o->hg) goto nomem;
    }
    o->msg_size = DEMO_OPT_HEADER_LEN + 4 * (size_t)o->n;
    for (int i = 0; i < o->n; i++) {
        if (!(o->d[i] = demo_new(o->tab[i].rows, o->tab[i].cols, cfg, err))) {
            demo_opt_destroy(&o);
            return NULL;
        }
        o->msg_len[i] = demo_msg_size(o->d[i]);
        o->msg_size += o->msg_len[i];
    }
    return o;
nomem:
    demo_opt_destroy(&o);
    status_set(err, STATUS_ENOMEM, "demo: out of memory");
    return NULL;
}

void demo_opt_destroy(demo_opt_t **op)
{
    if (!op || !*op) return;
    demo_opt_t *o = *op;
    for (int i = 0; o->d && i < o->n; i++) demo_destroy(&o->d[i]);
    free(o->d);
    free(o->msg_len);
    free(o->hp);
    free(o->hg);
    free(o->q);
    free(o->ptrs);
    free(o->lens);
    free(o);
    *op = NULL;
}

size_t demo_opt_msg_size(const demo_opt_t *o) { return o->msg_size; }

void demo_opt_decay(demo_opt_t *o, const optim_config_t *oc, int64_t step)
{
    float lr = optim_lr(oc, step);
    float *p = stage_params(o->st);
    for (int i = 0; i < o->n; i++)
        if (o->tab[i].decay && oc->wd > 0)
            o->k->scale(o->k, p + o->tab[i].offset, 1.0f - lr * oc->wd, o->tab[i].numel);
}

int demo_opt_prepare(demo_opt_t *o, const optim_config_t *oc, int64_t step, float grad_scale,
                     uint8_t *msg, float *grad_norm, char *err)
{
    kern_t *k = o->k;
    size_t P = stage_num_params(o->st);
    float *g = stage_grads(o->st);
    double norm = grad_scale * sqrt(k->sumsq(k, g, P));
    if (grad_norm) *grad_norm = (float)norm;
    if (!isfinite(norm)) return status_set(err, STATUS_EINVAL, "demo: gradient is not finite");
    float scale = grad_scale;
    if (oc->clip > 0 && norm > oc->clip) scale *= (float)(oc->clip / norm);
    if (scale != 1.0f) k->scale(k, g, scale, P);
    float lr = optim_lr(oc, step);
    demo_opt_decay(o, oc, step);
    const float *hg = g;
    if (k->on_device) {
        k->download(k, o->hg, g, P * sizeof(float));
        hg = o->hg;
    }

    memcpy(msg, "STDX", 4);
    msg[4] = DEMO_OPT_VERSION;
    msg[5] = msg[6] = msg[7] = 0;
    put_u32(msg + 8, (uint32_t)((uint64_t)step & 0xffffffffu));
    put_u32(msg + 12, (uint32_t)((uint64_t)step >> 32));
    put_u32(msg + 16, (uint32_t)o->n);
    size_t pos = DEMO_OPT_HEADER_LEN + 4 * (size_t)o->n;
    for (int i = 0; i < o->n; i++) {
        size_t w;
        int rc = demo_accumulate(o->d[i], hg + o->tab[i].offset, lr, err);
        if (!rc) rc = demo_extract(o->d[i], msg + pos, o->msg_len[i], &w, err);
        if (rc) return rc;
        put_u32(msg + DEMO_OPT_HEADER_LEN + 4 * i, (uint32_t)w);
        pos += w;
    }
    return 0;
}

/* Checks one stage message's frame; on success fills the per-tensor lengths. */
static int check_frame(const demo_opt_t *o, const uint8_t *m, size_t len, int64_t step,
                       uint32_t *lens, char *err)
{
    size_t head = DEMO_OPT_HEADER_LEN + 4 * (size_t)o->n;
    if (len < DEMO_OPT_HEADER_LEN) goto malformed;
    if (memcmp(m, "STDX", 4) || m[5] || m[6] || m[7]) goto malformed;
    if (m[4] != DEMO_OPT_VERSION)
        return status_set(err, STATUS_EVERSION, "stage message version %d (we speak %d)", m[4], DEMO_OPT_VERSION);
    int64_t s = (int64_t)((uint64_t)get_u32(m + 8) | (uint64_t)get_u32(m + 12) << 32);
    if (s != step) return status_set(err, STATUS_EMALFORMED, "stage message for step %lld, expected %lld",
                                     (long long)s, (long long)step);
    if (get_u32(m + 16) != (uint32_t)o->n || len < head) goto malformed;
    size_t sum = head;
    for (int i = 0; i < o->n; i++) {
        lens[i] = get_u32(m + DEMO_OPT_HEADER_LEN + 4 * i);
        sum += lens[i];
        if (sum > len) goto malformed;
    }
    if (sum != len) goto malformed;
    return 0;
malformed:
    return status_set(err, STATUS_EMALFORMED, "stage message: bad frame (%zu bytes)", len);
}

int demo_opt_apply(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                   const uint8_t *const *msgs, const size_t *lens, int m, char *err)
{
    if (m < 1) return status_set(err, STATUS_EINVAL, "demo: no messages to apply");
    if (m > o->cap_m) {
        free(o->ptrs);
        free(o->lens);
        o->ptrs = malloc((size_t)m * (o->n + 1) * sizeof *o->ptrs);
        o->lens = malloc((size_t)m * (o->n + 1) * sizeof *o->lens);
        if (!o->ptrs || !o->lens) {
            o->cap_m = 0;
            return status_set(err, STATUS_ENOMEM, "demo: out of memory");
        }
        o->cap_m = m;
    }
    /* ptrs/lens are laid out tensor-major: [tensor][sender]. */
    uint32_t *tl = malloc((size_t)o->n * sizeof *tl);
    if (!tl) return status_set(err, STATUS_ENOMEM, "demo: out of memory");
    for (int j = 0; j < m; j++) {
        int rc = check_frame(o, msgs[j], lens[j], step, tl, err);
        if (rc) {
            free(tl);
            return rc;
        }
        size_t pos = DEMO_OPT_HEADER_LEN + 4 * (size_t)o->n;
        for (int i = 0; i < o->n; i++) {
            o->ptrs[(size_t)i * m + j] = msgs[j] + pos;
            o->lens[(size_t)i * m + j] = tl[i];
            pos += tl[i];
        }
    }
    free(tl);
    /* Aggregate every tensor before touching any parameter: all or nothing. */
    for (int i = 0; i < o->n; i++) {
        int rc = demo_aggregate(o->d[i], o->ptrs + (size_t)i * m, o->lens + (size_t)i * m, m,
                                o->q + o->tab[i].offset, err);
        if (rc) return rc;
    }
    kern_t *k = o->k;
    size_t P = stage_num_params(o->st);
    float *p = stage_params(o->st), *hp = p;
    if (k->on_device) {
        k->download(k, o->hp, p, P * sizeof(float));
        hp = o->hp;
    }
    demo_apply_sign(hp, o->q, optim_lr(oc, step), P);
    if (k->on_device) k->upload(k, p, hp, P * sizeof(float));
    return 0;
}

void demo_opt_get_momentum(demo_opt_t *o, float *out)
{
    for (int i = 0; i < o->n; i++)
        memcpy(out + o->tab[i].offset, demo_momentum(o->d[i]), o->tab[i].numel * sizeof(float));
}

void demo_opt_set_momentum(demo_opt_t *o, const float *in)
{
    for (int i = 0; i < o->n; i++)
        memcpy(demo_momentum(o->d[i]), in + o->tab[i].offset, o->tab[i].numel * sizeof(float));
}
