/* demo_opt.c — one stage replica's DeMo step: prepare this replica's stage message
 * (version 2: one header, bit-packed bodies), apply the pool's messages.
 *
 * Two paths, the same messages. A host backend runs compress/demo.c on its own buffers.
 * A device backend (kern_on_device(k)) keeps the residual momentum in device memory and runs
 * accumulation, DCT, top-k and the removal of what was sent with the kernels.h
 * compression ops; per step only the selected (index, value) entries come to the host,
 * where demo_body_pack writes the same bodies, and only sign(Q) goes back (2 bits per
 * parameter) after the HOST aggregation (demo_body_add / demo_body_finish), which must
 * stay bit-identical on every replica of a pool, whatever its backend. */
#include "model/demo_opt.h"
#include "common/status.h"
#include "common/rng.h"
#include "kernels/dct.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_K 65536 /* k above the largest tile (256 x 256) means the same as 65536 */

/* One tensor's tiles on the device path. */
typedef struct {
    int cr, cc, tn, kt; /* tile rows, cols, size; entries per tile */
    int64_t tiles;
    size_t e0; /* first entry of the tensor's selection */
} dev_geom_t;

struct demo_opt {
    int defer_decay; /* demo_opt_defer_decay */
    stage_t *st;
    kern_t *k;
    int n; /* tensors */
    const stage_tensor_t *tab;
    demo_t **d;    /* one per tensor */
    int chunk, kk; /* normalized configuration (0 = default resolved, k <= MAX_K) */
    demo_vfmt_t vfmt;
    demo_imode_t imode;
    demo_xform_t xform;
    uint32_t table_crc; /* fingerprint of the tensor shapes */
    size_t msg_size;    /* whole stage message */
    float *q;           /* aggregated update direction, all tensors */
    float qnorm;        /* its L2 norm at the last apply (the same on every replica) */
    int update;         /* DEMO_UPDATE_* */
    float *dstep;       /* rms update on a device: (P) the step, made on the host */
    float *hv;          /* rmsprop/adam update on a device: (2P) host copies of v and m */
    double *sum;        /* aggregation scratch: the largest tensor's coefficients */
    uint32_t *cnt;
    int *ord; /* scratch for m messages: canonical order, k, format, index mode, bit position */
    int *mk;
    demo_vfmt_t *mf;
    demo_imode_t *mi;
    uint64_t *mpos;
    uint32_t *mw; /* the messages' weights in lowest terms */
    int cap_m;
    /* the device path (kern_on_device(k)): backend memory unless named h... */
    float beta;
    dev_geom_t *geo;                  /* per tensor */
    size_t entries;                   /* selected entries per step, all tensors */
    float *dD;                        /* (P) residual momentum, the table's offsets */
    float *dcoef, *dwork;             /* (largest tensor) coefficients; IDCT of what was sent */
    uint16_t *didx, *hidx;            /* (entries) this step's selection */
    float *dval, *hval;               /* (entries) */
    uint8_t *dsign, *hsign;           /* (kern_sign_bytes(P)) sign(Q) */
    uint8_t *mark;                    /* (largest tile) shared-index draws */
    float *dbasis[DCT_MAX_CHUNK + 1]; /* basis of each tile size in use (DCT-II or identity) */
};

/* The fingerprint of the shapes (compress/demo_wire.h), table order. */
static uint32_t table_crc(const stage_tensor_t *t, int n)
{
    uint32_t crc = 0;
    for (int i = 0; i < n; i++) crc = demo_stage_table_add(crc, t[i].rows, t[i].cols);
    return crc;
}

/* Body bits of the whole stage for (chunk, k, vfmt, imode); 0 when some tensor refuses them. */
static uint64_t stage_bits(const stage_tensor_t *t, int n, int chunk, int k, demo_vfmt_t vfmt,
                           demo_imode_t imode)
{
    uint64_t bits = 0;
    for (int i = 0; i < n; i++) {
        uint64_t b = demo_body_bits_ex(t[i].rows, t[i].cols, chunk, k, vfmt, imode);
        if (!b) return 0;
        bits += b;
    }
    return bits;
}

/* The part of a configuration that sizes the bodies (the transform changes no size). */
static void normalize(const demo_cfg_t *cfg, int *chunk, int *k, demo_vfmt_t *vfmt,
                      demo_imode_t *imode)
{
    *chunk = cfg && cfg->chunk ? cfg->chunk : DEMO_DEFAULT_CHUNK;
    *k = cfg && cfg->k ? cfg->k : DEMO_DEFAULT_K;
    if (*k > MAX_K) *k = MAX_K;
    *vfmt = cfg ? cfg->vfmt : DEMO_VAL_F32;
    *imode = cfg ? cfg->imode : DEMO_IDX_TOPK;
}

/* The shared-index seed of tensor i (table order) at a step: every replica of the pool
 * derives the same from what the stage message header carries. */
uint64_t demo_opt_tensor_seed(int64_t step, int i)
{
    return rng_mix(rng_mix(UINT64_C(0x5354445853454544) /* "STDXSEED" */, (uint64_t)step),
                   (uint64_t)i);
}

size_t demo_opt_stage_bytes(const stage_tensor_t *t, int n, const demo_cfg_t *cfg)
{
    int chunk, k;
    demo_vfmt_t vfmt;
    demo_imode_t imode;
    normalize(cfg, &chunk, &k, &vfmt, &imode);
    if (!t || n < 1 || k < 1) return 0;
    uint64_t bits = stage_bits(t, n, chunk, k, vfmt, imode);
    return bits ? DEMO_OPT_HEADER_LEN + (size_t)((bits + 7) / 8) : 0;
}

/* The device path's state: geometry, D = 0 and scratch in backend memory, the DCT bases
 * of every tile size the tensors use. -1 when memory runs out. */
static int device_init(demo_opt_t *o, size_t maxn)
{
    kern_t *k = o->k;
    size_t P = stage_num_params(o->st);
    if (!(o->geo = calloc((size_t)o->n, sizeof *o->geo))) return -1;
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        dev_geom_t *g = &o->geo[i];
        g->cr = (int)dct_chunk_size(t->rows, o->chunk);
        g->cc = (int)dct_chunk_size(t->cols, o->chunk);
        g->tn = g->cr * g->cc;
        g->tiles = (int64_t)(t->rows / g->cr) * (t->cols / g->cc);
        g->kt = demo_entries_per_tile_ex(t->rows, t->cols, o->chunk, o->kk, o->vfmt, o->imode);
        g->e0 = o->entries;
        o->entries += (size_t)g->tiles * (size_t)g->kt;
        for (int j = 0; j < 2; j++) {
            int n = j ? g->cc : g->cr;
            if (o->dbasis[n]) continue;
            float *b = malloc((size_t)n * n * sizeof(float));
            if (!b || !(o->dbasis[n] = kern_alloc(k, (size_t)n * n * sizeof(float)))) {
                free(b);
                return -1;
            }
            dct_basis_of(b, n, demo_dct_kind(o->xform));
            kern_upload(k, o->dbasis[n], b, (size_t)n * n * sizeof(float));
            free(b);
        }
    }
    o->dD = kern_alloc(k, P * sizeof(float));
    o->dcoef = kern_alloc(k, maxn * sizeof(float));
    o->dwork = kern_alloc(k, maxn * sizeof(float));
    o->didx = kern_alloc(k, o->entries * sizeof(uint16_t));
    o->dval = kern_alloc(k, o->entries * sizeof(float));
    o->dsign = kern_alloc(k, kern_sign_bytes(P));
    o->hidx = malloc(o->entries * sizeof(uint16_t));
    o->hval = malloc(o->entries * sizeof(float));
    o->hsign = malloc(kern_sign_bytes(P));
    o->mark = malloc((size_t)DCT_MAX_CHUNK * DCT_MAX_CHUNK);
    return o->mark && o->dD && o->dcoef && o->dwork && o->didx && o->dval && o->dsign && o->hidx &&
                   o->hval && o->hsign
               ? 0
               : -1;
}

demo_opt_t *demo_opt_new(stage_t *st, const demo_cfg_t *cfg, char *err)
{
    demo_opt_t *o = calloc(1, sizeof *o);
    if (!o) goto nomem;
    o->st = st;
    o->k = stage_kern(st);
    o->tab = stage_tensors(st, &o->n);
    normalize(cfg, &o->chunk, &o->kk, &o->vfmt, &o->imode);
    o->xform = cfg ? cfg->xform : DEMO_XFORM_DCT;
    size_t P = stage_num_params(st), maxn = 0;
    o->d = calloc((size_t)o->n, sizeof *o->d);
    o->q = malloc(P * sizeof(float));
    if (!o->d || !o->q) goto nomem;
    o->update = cfg ? cfg->update : DEMO_UPDATE_SIGN;
    if (o->update < DEMO_UPDATE_SIGN || o->update > DEMO_UPDATE_LINEAR) {
        status_set(err, STATUS_EINVAL, "demo: unknown update rule %d", o->update);
        demo_opt_destroy(&o);
        return NULL;
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
    o->beta = cfg ? cfg->beta : DEMO_DEFAULT_BETA;
    if (kern_on_device(o->k) && device_init(o, maxn)) goto nomem;
    if (kern_on_device(o->k) && o->update != DEMO_UPDATE_SIGN &&
        !(o->dstep = kern_alloc(o->k, P * sizeof(float))))
        goto nomem;
    if (kern_on_device(o->k) && (o->update == DEMO_UPDATE_RMSPROP || o->update == DEMO_UPDATE_ADAM) &&
        !(o->hv = malloc(2 * P * sizeof(float))))
        goto nomem;
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
    kern_t *k = o->k;
    void *dev[] = {o->dD, o->dcoef, o->dwork, o->didx, o->dval, o->dsign, o->dstep};
    for (size_t i = 0; k && i < sizeof dev / sizeof dev[0]; i++) kern_free(k, dev[i]);
    for (int n = 0; k && n <= DCT_MAX_CHUNK; n++) kern_free(k, o->dbasis[n]);
    free(o->geo);
    free(o->hidx);
    free(o->hval);
    free(o->hsign);
    free(o->hv);
    free(o->mark);
    free(o->d);
    free(o->q);
    free(o->sum);
    free(o->cnt);
    free(o->ord);
    free(o->mk);
    free(o->mf);
    free(o->mi);
    free(o->mpos);
    free(o->mw);
    free(o);
    *op = NULL;
}

size_t demo_opt_msg_size(const demo_opt_t *o)
{
    return o->msg_size;
}

void demo_opt_defer_decay(demo_opt_t *o, int defer)
{
    o->defer_decay = defer;
}

void demo_opt_decay(demo_opt_t *o, const optim_config_t *oc, int64_t step)
{
    float lr = optim_lr(oc, step);
    float *p = stage_params(o->st);
    for (int i = 0; i < o->n; i++)
        if (o->tab[i].decay && oc->wd > 0)
            kern_scale(o->k, p + o->tab[i].offset, 1.0f - lr * oc->wd, o->tab[i].numel);
}

/* The bodies of prepare on a device: D = beta D + lr g; per tensor the tile DCT and the
 * top-k into the selection buffers; one download of the selection; bodies packed on the
 * host (demo_body_pack checks every value before anything is written); then, all bodies
 * written, D -= IDCT(what was sent) per tensor. The gradient's finiteness was checked by
 * the caller's norm. */
static int prepare_device(demo_opt_t *o, float lr, int64_t step, uint8_t *msg, char *err)
{
    kern_t *k = o->k;
    kern_scale(k, o->dD, o->beta, stage_num_params(o->st));
    kern_axpy(k, o->dD, lr, stage_grads(o->st), stage_num_params(o->st));
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        const dev_geom_t *g = &o->geo[i];
        kern_dct_forward(k, o->dcoef, o->dD + t->offset, o->dbasis[g->cr], o->dbasis[g->cc],
                         t->rows, t->cols, g->cr, g->cc);
        if (o->imode == DEMO_IDX_SHARED && g->kt < g->tn) {
            /* shared indices: the coefficients come to the host (there is no gather op),
             * the drawn entries go back for the removal below */
            float *c = o->q; /* scratch: P >= this tensor */
            uint16_t *ix = o->hidx + g->e0;
            float *v = o->hval + g->e0;
            size_t ne = (size_t)g->tiles * (size_t)g->kt;
            kern_download(k, c, o->dcoef, t->numel * sizeof(float));
            demo_shared_indices(ix, g->tiles, g->tn, g->kt, demo_opt_tensor_seed(step, i), o->mark);
            for (size_t e = 0; e < ne; e++) v[e] = c[(e / (size_t)g->kt) * (size_t)g->tn + ix[e]];
            kern_upload(k, o->didx + g->e0, ix, ne * sizeof(uint16_t));
            kern_upload(k, o->dval + g->e0, v, ne * sizeof(float));
        } else {
            kern_topk(k, o->didx + g->e0, o->dval + g->e0, o->dcoef, g->tiles, g->tn, g->kt);
        }
    }
    kern_download(k, o->hidx, o->didx, o->entries * sizeof(uint16_t));
    kern_download(k, o->hval, o->dval, o->entries * sizeof(float));
    uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        const dev_geom_t *g = &o->geo[i];
        int rc = demo_body_pack_ex(msg, o->msg_size, pos, t->rows, t->cols, o->chunk, o->kk,
                                   o->vfmt, o->imode, demo_opt_tensor_seed(step, i),
                                   o->hidx + g->e0, o->hval + g->e0, err);
        if (rc) return rc;
        pos += demo_body_size(o->d[i]);
    }
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        const dev_geom_t *g = &o->geo[i];
        kern_scatter(k, o->dcoef, o->didx + g->e0, o->dval + g->e0, g->tiles, g->tn, g->kt,
                     o->vfmt == DEMO_VAL_BF16);
        kern_dct_inverse(k, o->dwork, o->dcoef, o->dbasis[g->cr], o->dbasis[g->cc], t->rows,
                         t->cols, g->cr, g->cc);
        kern_axpy(k, o->dD + t->offset, -1.0f, o->dwork, t->numel);
    }
    return 0;
}

int demo_opt_prepare(demo_opt_t *o, const optim_config_t *oc, int64_t step, float grad_scale,
                     uint8_t *msg, float *grad_norm, char *err)
{
    kern_t *k = o->k;
    size_t P = stage_num_params(o->st);
    float *g = stage_grads(o->st);
    double norm = grad_scale * sqrt(kern_sumsq(k, g, P)); /* of the mean */
    if (grad_norm) *grad_norm = (float)norm;
    if (!isfinite(norm)) return status_set(err, STATUS_EINVAL, "demo: gradient is not finite");
    float scale = 1.0f; /* the momentum takes the (clipped) sum: demo_opt.h says why */
    if (oc->clip > 0 && norm > oc->clip) scale = (float)(oc->clip / norm);
    if (scale != 1.0f) kern_scale(k, g, scale, P);
    float lr = optim_lr(oc, step);
    if (!o->defer_decay) demo_opt_decay(o, oc, step);

    memset(msg, 0, o->msg_size); /* the padding bits of the last octet */
    demo_stage_hdr_t h = {.vfmt = o->vfmt,
                          .chunk = o->chunk,
                          .k = (uint32_t)o->kk, /* <= MAX_K < 2^24 */
                          .imode = o->imode,
                          .xform = o->xform,
                          .ntensors = (uint32_t)o->n,
                          .step = step,
                          .table = o->table_crc};
    demo_stage_hdr_put(msg, &h);
    if (kern_on_device(k)) {
        int rc = prepare_device(o, lr, step, msg, err);
        if (rc) return rc;
    } else {
        uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
        for (int i = 0; i < o->n; i++) {
            int rc = demo_accumulate(o->d[i], g + o->tab[i].offset, lr, err);
            if (!rc)
                rc = demo_extract_body_ex(o->d[i], msg, o->msg_size, pos,
                                          demo_opt_tensor_seed(step, i), err);
            if (rc) return rc;
            pos += demo_body_size(o->d[i]);
        }
    }
    demo_stage_seal(msg, o->msg_size);
    return kern_check(k, err);
}

/* p -= o->q, the step made on the host: one exact subtraction on any backend (axpy with
 * alpha -1 is exact), so CPU and device replicas stay bit-identical. */
static int subtract_step(demo_opt_t *o, float *p, size_t P, char *err)
{
    kern_t *k = o->k;
    if (kern_on_device(k)) {
        kern_upload(k, o->dstep, o->q, P * sizeof(float));
        kern_axpy(k, p, -1.0f, o->dstep, P);
    } else {
        for (size_t j = 0; j < P; j++) p[j] -= o->q[j];
    }
    return kern_check(k, err);
}

/* Checks one stage message up to its bodies; on success gives the sender's k and format. */
static int check_frame(const demo_opt_t *o, const uint8_t *m, size_t len, int64_t step, int *k,
                       demo_vfmt_t *vfmt, demo_imode_t *imode, char *err)
{
    demo_stage_hdr_t h;
    int rc = demo_stage_hdr_get(m, len, &h, err);
    if (rc) return rc;
    int chunk = h.chunk;
    uint32_t kk = h.k;
    if (chunk != o->chunk)
        return status_set(err, STATUS_EMALFORMED, "stage message: chunk %d, this replica uses %d",
                          chunk, o->chunk);
    if (kk < 1 || kk > MAX_K)
        return status_set(err, STATUS_EMALFORMED, "stage message: k %u outside 1..%d", kk, MAX_K);
    if (h.ntensors != (uint32_t)o->n || h.table != o->table_crc)
        return status_set(err, STATUS_EMALFORMED,
                          "stage message: %u tensors of another shape table (this stage: %d)",
                          h.ntensors, o->n);
    if (h.step != step)
        return status_set(err, STATUS_EMALFORMED, "stage message for step %lld, expected %lld",
                          (long long)h.step, (long long)step);
    if (h.xform != o->xform) /* coefficients of another space: no mean with ours */
        return status_set(err, STATUS_EMALFORMED,
                          "stage message in transform %s, this replica uses %s",
                          demo_xform_name(h.xform), demo_xform_name(o->xform));
    uint64_t bits = stage_bits(o->tab, o->n, chunk, (int)kk, h.vfmt, h.imode);
    uint64_t want = DEMO_OPT_HEADER_LEN + (bits + 7) / 8;
    if (!bits || (uint64_t)len != want)
        return status_set(err, STATUS_EMALFORMED,
                          "stage message: %s: %zu bytes, k %u format %d needs %llu",
                          (uint64_t)len < want ? "truncated" : "oversized", len, kk, h.vfmt,
                          (unsigned long long)want);
    if ((rc = demo_stage_check_crc(m, len, err))) return rc;
    if ((rc = demo_stage_check_padding(m, len, bits, err))) return rc;
    *k = (int)kk;
    *vfmt = h.vfmt;
    *imode = h.imode;
    return 0;
}

int demo_opt_apply(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                   const uint8_t *const *msgs, const size_t *lens, int m, char *err)
{
    return demo_opt_apply_w(o, oc, step, msgs, lens, NULL, m, err);
}

static uint32_t gcd32(uint32_t a, uint32_t b)
{
    while (b) {
        uint32_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int demo_opt_apply_w(demo_opt_t *o, const optim_config_t *oc, int64_t step,
                     const uint8_t *const *msgs, const size_t *lens, const uint32_t *w, int m,
                     char *err)
{
    if (m < 1 || !msgs || !lens)
        return status_set(err, STATUS_EINVAL, "demo: no messages to apply");
    /* weights in lowest terms: equal weights are the plain mean, bit for bit */
    uint32_t wg = 0;
    for (int j = 0; w && j < m; j++) {
        if (w[j] < 1 || w[j] > DEMO_OPT_MAX_WEIGHT)
            return status_set(err, STATUS_EINVAL, "demo: message %d weighs %u", j, w[j]);
        wg = gcd32(wg, w[j]);
    }
    if (m > o->cap_m) {
        free(o->ord);
        free(o->mk);
        free(o->mf);
        free(o->mi);
        free(o->mpos);
        free(o->mw);
        o->ord = malloc((size_t)m * sizeof *o->ord);
        o->mk = malloc((size_t)m * sizeof *o->mk);
        o->mf = malloc((size_t)m * sizeof *o->mf);
        o->mi = malloc((size_t)m * sizeof *o->mi);
        o->mpos = malloc((size_t)m * sizeof *o->mpos);
        o->mw = malloc((size_t)m * sizeof *o->mw);
        if (!o->ord || !o->mk || !o->mf || !o->mi || !o->mpos || !o->mw) {
            o->cap_m = 0;
            return status_set(err, STATUS_ENOMEM, "demo: out of memory");
        }
        o->cap_m = m;
    }
    for (int j = 0; j < m; j++) {
        char e2[STATUS_ERR_LEN];
        int rc = check_frame(o, msgs[j], lens[j], step, &o->mk[j], &o->mf[j], &o->mi[j], e2);
        if (rc) return status_set(err, rc, "message %d: %s", j, e2);
        o->mpos[j] = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    }
    for (int j = 0; w && j < m; j++) o->mw[j] = w[j] / wg;
    demo_canonical_order_w(o->ord, msgs, lens, w ? o->mw : NULL, m);
    /* Aggregate every tensor before touching any parameter: all or nothing. */
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        memset(o->sum, 0, t->numel * sizeof *o->sum);
        memset(o->cnt, 0, t->numel * sizeof *o->cnt);
        for (int r = 0; r < m; r++) {
            int j = o->ord[r];
            char e2[STATUS_ERR_LEN];
            int rc = demo_body_add_w(o->d[i], msgs[j], lens[j], o->mpos[j], o->mk[j], o->mf[j],
                                     o->mi[j], demo_opt_tensor_seed(step, i), w ? o->mw[j] : 1,
                                     o->sum, o->cnt, e2);
            if (rc) return status_set(err, rc, "message %d, tensor %d (%s): %s", j, i, t->name, e2);
            o->mpos[j] +=
                demo_body_bits_ex(t->rows, t->cols, o->chunk, o->mk[j], o->mf[j], o->mi[j]);
        }
        demo_body_finish(o->d[i], o->sum, o->cnt, o->q + t->offset);
    }
    kern_t *k = o->k;
    size_t P = stage_num_params(o->st);
    double qq = 0;
    for (size_t j = 0; j < P; j++) qq += (double)o->q[j] * o->q[j];
    o->qnorm = (float)sqrt(qq);
    float *p = stage_params(o->st);
    float lr = optim_lr(oc, step);
    if (o->update == DEMO_UPDATE_LINEAR) return subtract_step(o, p, P, err); /* p -= Q */
    if (o->update == DEMO_UPDATE_RMSPROP || o->update == DEMO_UPDATE_ADAM) {
        /* Adam's moments of the aggregate, per parameter, in the stage's v and m (which
         * checkpoints carry; t in stage_opt_step): identical on every replica as Q is. The
         * step is made on the host and subtracted exactly, as for rms. rmsprop: v only. */
        int adam = o->update == DEMO_UPDATE_ADAM;
        float *v = kern_on_device(k) ? o->hv : stage_opt_v(o->st);
        float *mo = kern_on_device(k) ? o->hv + P : stage_opt_m(o->st);
        if (kern_on_device(k)) kern_download(k, v, stage_opt_v(o->st), P * sizeof(float));
        if (kern_on_device(k) && adam) kern_download(k, mo, stage_opt_m(o->st), P * sizeof(float));
        int64_t t = ++*stage_opt_step(o->st);
        double b1 = oc->beta1, b2 = oc->beta2, bc2 = 1.0 - pow(b2, (double)t),
               bc1 = 1.0 - pow(b1, (double)t);
        for (size_t j = 0; j < P; j++) {
            double q = o->q[j], vj = b2 * v[j] + (1.0 - b2) * q * q;
            v[j] = (float)vj;
            if (adam) {
                double mj = b1 * mo[j] + (1.0 - b1) * q;
                mo[j] = (float)mj;
                q = mj / bc1;
            }
            o->q[j] = (float)(lr * q / (sqrt(vj / bc2) + oc->eps));
        }
        if (kern_on_device(k)) {
            kern_upload(k, stage_opt_v(o->st), v, P * sizeof(float));
            if (adam) kern_upload(k, stage_opt_m(o->st), mo, P * sizeof(float));
        }
        return subtract_step(o, p, P, err);
    }
    if (o->update == DEMO_UPDATE_RMS) {
        /* the step lr * Q / rms(Q) per tensor, rounded to float on the host (then
         * subtract_step) */
        for (int i = 0; i < o->n; i++) {
            const stage_tensor_t *t = &o->tab[i];
            float *x = o->q + t->offset; /* the step overwrites q */
            double ss = 0;
            for (size_t j = 0; j < t->numel; j++) ss += (double)x[j] * x[j];
            double rms = sqrt(ss / (double)t->numel);
            double fd = rms > 0 ? lr / rms : 0.0;
            if (fd <= FLT_MAX) {
                float f = (float)fd;
                for (size_t j = 0; j < t->numel; j++) x[j] *= f;
            } else { /* rms below lr / FLT_MAX (tiny values from a sender): f alone is Inf */
                for (size_t j = 0; j < t->numel; j++) x[j] = (float)(x[j] * fd);
            }
        }
        return subtract_step(o, p, P, err);
    }
    if (kern_on_device(k)) {
        kern_sign_pack(o->hsign, o->q, P);
        kern_upload(k, o->dsign, o->hsign, kern_sign_bytes(P));
        kern_apply_sign(k, p, o->dsign, lr, P);
    } else {
        demo_apply_sign(p, o->q, lr, P);
    }
    return kern_check(k, err);
}

int demo_opt_check_norm(demo_opt_t *o, int64_t step, const uint8_t *msg, size_t len, double *norm,
                        char *err)
{
    int k;
    demo_vfmt_t vfmt;
    demo_imode_t imode;
    double ss = 0;
    int rc = check_frame(o, msg, len, step, &k, &vfmt, &imode, err);
    uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    for (int i = 0; !rc && i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        memset(o->sum, 0, t->numel * sizeof *o->sum);
        memset(o->cnt, 0, t->numel * sizeof *o->cnt);
        char e2[STATUS_ERR_LEN];
        rc = demo_body_add_ex(o->d[i], msg, len, pos, k, vfmt, imode, demo_opt_tensor_seed(step, i),
                              o->sum, o->cnt, e2);
        if (rc) status_set(err, rc, "tensor %d (%s): %s", i, t->name, e2);
        for (size_t j = 0; !rc && norm && j < t->numel; j++) ss += o->sum[j] * o->sum[j];
        pos += demo_body_bits_ex(t->rows, t->cols, o->chunk, k, vfmt, imode);
    }
    if (norm) *norm = sqrt(ss);
    return rc;
}

float demo_opt_update_norm(const demo_opt_t *o)
{
    return o->qnorm;
}

int demo_opt_check(demo_opt_t *o, int64_t step, const uint8_t *msg, size_t len, char *err)
{
    return demo_opt_check_norm(o, step, msg, len, NULL, err);
}

static void poison_bits(uint8_t *b, uint64_t pos, int w, uint64_t v)
{
    for (int i = 0; i < w; i++, pos++) {
        uint8_t m = (uint8_t)(1u << (pos & 7));
        if ((v >> i) & 1)
            b[pos >> 3] |= m;
        else
            b[pos >> 3] &= (uint8_t)~m;
    }
}

int demo_opt_poison(const demo_opt_t *o, uint8_t *msg, size_t len, int kind, char *err)
{
    if (len != o->msg_size || kind < 1 || kind > 3)
        return status_set(err, STATUS_EINVAL, "demo poison: bad arguments");
    int vb = o->vfmt == DEMO_VAL_F32 ? 32 : o->vfmt == DEMO_VAL_BF16 ? 16 : 1;
    int sb = o->vfmt == DEMO_VAL_SIGN && o->imode == DEMO_IDX_TOPK ? 16 : 0;
    if (kind != 3 && vb == 1 && !sb)
        return status_set(err, STATUS_EINVAL, "demo poison: shared sign values carry no magnitude");
    union {
        float f;
        uint32_t u;
    } nan = {.f = NAN}, huge = {.f = 1e29f};
    uint64_t pos = 8 * (uint64_t)DEMO_OPT_HEADER_LEN;
    int done = 0;
    for (int i = 0; i < o->n; i++) {
        const stage_tensor_t *t = &o->tab[i];
        int64_t cr = dct_chunk_size(t->rows, o->chunk), cc = dct_chunk_size(t->cols, o->chunk);
        uint64_t tiles = (uint64_t)(t->rows / cr) * (uint64_t)(t->cols / cc);
        int kt = demo_entries_per_tile_ex(t->rows, t->cols, o->chunk, o->kk, o->vfmt, o->imode);
        uint64_t ne = tiles * (uint64_t)kt;
        uint64_t bits = demo_body_bits_ex(t->rows, t->cols, o->chunk, o->kk, o->vfmt, o->imode);
        int ib = (int)((bits - (uint64_t)sb) / ne) - vb;
        uint32_t f = kind == 1 ? nan.u : huge.u;
        if (kind == 3) {
            if (!done && ib > 0 && kt > 1) { /* tile 0: its first two indices equal */
                poison_bits(msg, pos + (uint64_t)sb, ib, 1);
                poison_bits(msg, pos + (uint64_t)sb + (uint64_t)ib, ib, 1);
                done = 1;
            }
        } else if (sb) { /* sign values: the scale carries the magnitude */
            poison_bits(msg, pos, 16, f >> 16);
            done = 1;
        } else {
            uint64_t v0 = pos + ne * (uint64_t)ib;
            for (uint64_t e = 0; e < ne; e++)
                poison_bits(msg, v0 + e * (uint64_t)vb, vb, vb == 32 ? f : f >> 16);
            done = 1;
        }
        pos += bits;
    }
    if (!done) return status_set(err, STATUS_EINVAL, "demo poison: no body carries indices");
    demo_stage_seal(msg, o->msg_size);
    return 0;
}

void demo_opt_get_momentum(demo_opt_t *o, float *out)
{
    if (kern_on_device(o->k)) { /* the tensors tile [0, P) in table order */
        kern_download(o->k, out, o->dD, stage_num_params(o->st) * sizeof(float));
        return;
    }
    for (int i = 0; i < o->n; i++)
        memcpy(out + o->tab[i].offset, demo_momentum(o->d[i]), o->tab[i].numel * sizeof(float));
}

void demo_opt_set_momentum(demo_opt_t *o, const float *in)
{
    if (kern_on_device(o->k)) {
        kern_upload(o->k, o->dD, in, stage_num_params(o->st) * sizeof(float));
        return;
    }
    for (int i = 0; i < o->n; i++)
        memcpy(demo_momentum(o->d[i]), in + o->tab[i].offset, o->tab[i].numel * sizeof(float));
}

int demo_opt_rule(const demo_opt_t *o)
{
    return o->update;
}
