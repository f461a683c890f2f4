/* demo_opt.c — one stage replica's DeMo step: prepare this replica's stage message
 * (version 2: one header, bit-packed bodies), apply the pool's messages. */
#include "peer/demo_opt.h"
#include "common/status.h"
#include "compress/codec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 65536 /* k above the largest tile (256 x 256) means the same as 65536 */

struct demo_opt {
    stage_t *st;
    kern_t *k;
    int n; /* tensors */
    const stage_tensor_t *tab;
    demo_t **d;    /* one per tensor */
    int chunk, kk; /* normalized configuration (0 = default resolved, k <= MAX_K) */
    demo_vfmt_t vfmt;
    uint32_t table_crc; /* fingerprint of the tensor shapes */
    size_t msg_size;    /* whole stage message */
    float *hp, *hg;     /* host copies of params and grads when the backend is a device */
    float *q;           /* aggregated update direction, all tensors */
    double *sum;        /* aggregation scratch: the largest tensor's coefficients */
    uint32_t *cnt;
    int *ord; /* scratch for m messages: canonical order, k, format, bit position */
    int *mk;
    demo_vfmt_t *mf;
    uint64_t *mpos;
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

/* CRC-32C of the shapes: rows u32, cols u32 per tensor, table order. */
static uint32_t table_crc(const stage_tensor_t *t, int n)
{
    uint32_t crc = 0;
    for (int i = 0; i < n; i++) {
        uint8_t b[8];
        put_u32(b, (uint32_t)t[i].rows);
        put_u32(b + 4, (uint32_t)t[i].cols);
        crc = codec_crc32c(crc, b, 8);
    }
    return crc;
}

/* Body bits of the whole stage for (chunk, k, vfmt); 0 when some tensor refuses them. */
static uint64_t stage_bits(const stage_tensor_t *t, int n, int chunk, int k, demo_vfmt_t vfmt)
{
    uint64_t bits = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = demo_body_bits(t[i].rows, t[i].cols, chunk, k, vfmt);
        if (!b) return 0;
        bits += b;
    }
    return bits;
}

static void normalize(const demo_cfg_t *cfg, int *chunk, int *k, demo_vfmt_t *vfmt)
{
    *chunk = cfg && cfg->chunk ? cfg->chunk : DEMO_DEFAULT_CHUNK;
    *k = cfg && cfg->k ? cfg->k : DEMO_DEFAULT_K;
    if (*k > MAX_K) *k = MAX_K;
    *vfmt = cfg ? cfg->vfmt : DEMO_VAL_F32;
}

size_t demo_opt_stage_bytes(const stage_tensor_t *t, int n, const demo_cfg_t *cfg)
{
    int chunk, k;
    demo_vfmt_t vfmt;
    normalize(cfg, &chunk, &k, &vfmt);
    if (!t || n < 1 || k < 1) return 0;
    uint64_t bits = stage_bits(t, n, chunk, k, vfmt);
    return bits ? DEMO_OPT_HEADER_LEN + (size_t)((bits + 7) / 8) : 0;
}

demo_opt_t *demo_opt_new(stage_t *st, const demo_cfg_t *cfg, char *err)
{
    demo_opt_t *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->st = st;
    o->k = stage_kern(st);
    o->tab = stage_tensors(st, &o->n);
    normalize(cfg, &o->chunk, &o->kk, &o->vfmt);
    size_t P = stage_num_params(st), maxn = 0;
    o->d = calloc((size_t)o->n, sizeof *o->d);
    o->q = malloc(P * sizeof(float));
    if (!o->d || !o->q) goto nomem;
    if (o->k->on_device) {
        o->hp = malloc(P * sizeof(float));
        o->hg = malloc(P * sizeof(float));
        if (!o->hp || !o->hg) goto nomem;
    }
    uint64_t bits = 0;
    for (int i = 0; i < o->n; i++) {
        if (!(o->d[i] = demo_new(o->tab[i].rows, o->tab[i].cols, cfg, err))) {
            demo_opt_destroy(&o);
            return NULL;
        }
        bits += demo_body_size(o->d[i]);
        if (o->tab[i].numel > maxn) maxn = o->tab[i].numel;
    }
    o->msg_size = DEMO_OPT_HEADER_LEN + (size_t)((bits + 7) / 8);
    o->table_crc = table_crc(o->tab, o->n);
    o->sum = malloc(maxn * sizeof *o->sum);
    o->cnt = malloc(maxn * sizeof *o->cnt);
    if (!o->sum || !o->cnt) goto nomem;
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
    free(o->hp);
    free(o->hg);
    free(o->q);
    free(o->sum);
    free(o->cnt);
    free(o->ord);
    free(o->mk);
    free(o->mf);
    free(o->mpos);
    free(o);
    *op = NULL;
}

size_t demo_opt_msg_size(const demo_opt_t *o)
{
    return o->msg_size;
}

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

    memset(msg, 0, o->msg_size); /* the padding bits of the last octet */
    memcpy(msg, "STDX", 4);
    msg[4] = DEMO_OPT_VERSION;
    msg[5] = (uint8_t)o->vfmt;
    msg[6] = (uint8_t)o->chunk;
    msg[7] = (uint8_t)(o->chunk >> 8);
    put_u32(msg + 8, (uint32_t)o->kk);
    put_u32(msg + 12, (uint32_t)o->n);
    put_u32(msg + 16, (uint32_t)((uint64_t)step & 0xffffffffu));
    put_u32(msg + 20, (uint32_t)((uint64_t)step >> 32));
    put_u32(msg + 24, o->table_crc);
    uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    for (int i = 0; i < o->n; i++) {
        int rc = demo_accumulate(o->d[i], hg + o->tab[i].offset, lr, err);
        if (!rc) rc = demo_extract_body(o->d[i], msg, o->msg_size, pos, err);
        if (rc) return rc;
        pos += demo_body_size(o->d[i]);
    }
    uint32_t crc = codec_crc32c(0, msg, 28);
    crc = codec_crc32c(crc, msg + DEMO_OPT_HEADER_LEN, o->msg_size - DEMO_OPT_HEADER_LEN);
    put_u32(msg + 28, crc);
    return 0;
}

/* Checks one stage message up to its bodies; on success gives the sender's k and format. */
static int check_frame(const demo_opt_t *o, const uint8_t *m, size_t len, int64_t step, int *k,
                       demo_vfmt_t *vfmt, char *err)
{
    if (!m || len < DEMO_OPT_HEADER_LEN)
        return status_set(err, STATUS_EMALFORMED, "stage message: truncated header (%zu bytes)",
                          m ? len : 0);
    if (memcmp(m, "STDX", 4)) return status_set(err, STATUS_EMALFORMED, "stage message: bad magic");
    if (m[4] != DEMO_OPT_VERSION)
        return status_set(err, STATUS_EVERSION, "stage message version %d (we speak %d)", m[4],
                          DEMO_OPT_VERSION);
    if (m[5] > DEMO_VAL_SIGN)
        return status_set(err, STATUS_EMALFORMED, "stage message: unknown value format %d", m[5]);
    int chunk = m[6] | m[7] << 8;
    uint32_t kk = get_u32(m + 8);
    if (chunk != o->chunk)
        return status_set(err, STATUS_EMALFORMED, "stage message: chunk %d, this replica uses %d",
                          chunk, o->chunk);
    if (kk < 1 || kk > MAX_K)
        return status_set(err, STATUS_EMALFORMED, "stage message: k %u outside 1..%d", kk, MAX_K);
    if (get_u32(m + 12) != (uint32_t)o->n || get_u32(m + 24) != o->table_crc)
        return status_set(err, STATUS_EMALFORMED,
                          "stage message: %u tensors of another shape table (this stage: %d)",
                          get_u32(m + 12), o->n);
    int64_t s = (int64_t)((uint64_t)get_u32(m + 16) | (uint64_t)get_u32(m + 20) << 32);
    if (s != step)
        return status_set(err, STATUS_EMALFORMED, "stage message for step %lld, expected %lld",
                          (long long)s, (long long)step);
    uint64_t bits = stage_bits(o->tab, o->n, chunk, (int)kk, (demo_vfmt_t)m[5]);
    uint64_t want = DEMO_OPT_HEADER_LEN + (bits + 7) / 8;
    if (!bits || (uint64_t)len != want)
        return status_set(err, STATUS_EMALFORMED,
                          "stage message: %s: %zu bytes, k %u format %d needs %llu",
                          (uint64_t)len < want ? "truncated" : "oversized", len, kk, m[5],
                          (unsigned long long)want);
    uint32_t crc = codec_crc32c(0, m, 28);
    crc = codec_crc32c(crc, m + DEMO_OPT_HEADER_LEN, len - DEMO_OPT_HEADER_LEN);
    if (crc != get_u32(m + 28)) return status_set(err, STATUS_ECORRUPT, "stage message: checksum");
    if (bits & 7 && m[len - 1] >> (bits & 7))
        return status_set(err, STATUS_EMALFORMED, "stage message: nonzero padding bits");
    *k = (int)kk;
    *vfmt = (demo_vfmt_t)m[5];
    return 0;
}

int demo_opt_apply(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                   const uint8_t *const *msgs, const size_t *lens, int m, char *err)
{
    if (m < 1 || !msgs || !lens)
        return status_set(err, STATUS_EINVAL, "demo: no messages to apply");
    if (m > o->cap_m) {
        free(o->ord);
        free(o->mk);
        free(o->mf);
        free(o->mpos);
        o->ord = malloc((size_t)m * sizeof *o->ord);
        o->mk = malloc((size_t)m * sizeof *o->mk);
        o->mf = malloc((size_t)m * sizeof *o->mf);
        o->mpos = malloc((size_t)m * sizeof *o->mpos);
        if (!o->ord || !o->mk || !o->mf || !o->mpos) {
            o->cap_m = 0;
            return status_set(err, STATUS_ENOMEM, "demo: out of memory");
        }
        o->cap_m = m;
    }
    for (int j = 0; j < m; j++) {
        char e2[STATUS_ERR_LEN];
        int rc = check_frame(o, msgs[j], lens[j], step, &o->mk[j], &o->mf[j], e2);
        if (rc) return status_set(err, rc, "message %d: %s", j, e2);
        o->mpos[j] = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    }
    demo_canonical_order(o->ord, msgs, lens, m);
    /* Aggregate every tensor before touching any parameter: all or nothing. */
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        memset(o->sum, 0, t->numel * sizeof *o->sum);
        memset(o->cnt, 0, t->numel * sizeof *o->cnt);
        for (int r = 0; r < m; r++) {
            int j = o->ord[r];
            char e2[STATUS_ERR_LEN];
            int rc = demo_body_add(o->d[i], msgs[j], lens[j], o->mpos[j], o->mk[j], o->mf[j],
                                   o->sum, o->cnt, e2);
            if (rc) return status_set(err, rc, "message %d, tensor %d (%s): %s", j, i, t->name, e2);
            o->mpos[j] += demo_body_bits(t->rows, t->cols, o->chunk, o->mk[j], o->mf[j]);
        }
        demo_body_finish(o->d[i], o->sum, o->cnt, o->q + t->offset);
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

int demo_opt_check(demo_opt_t *o, int64_t step, const uint8_t *msg, size_t len, char *err)
{
    int k;
    demo_vfmt_t vfmt;
    int rc = check_frame(o, msg, len, step, &k, &vfmt, err);
    uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    for (int i = 0; !rc && i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        memset(o->sum, 0, t->numel * sizeof *o->sum);
        memset(o->cnt, 0, t->numel * sizeof *o->cnt);
        char e2[STATUS_ERR_LEN];
        rc = demo_body_add(o->d[i], msg, len, pos, k, vfmt, o->sum, o->cnt, e2);
        if (rc) status_set(err, rc, "tensor %d (%s): %s", i, t->name, e2);
        pos += demo_body_bits(t->rows, t->cols, o->chunk, k, vfmt);
    }
    return rc;
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
