/* stage.c — a pipeline stage: tensor table, initialization, forward and backward.
 * The passes read like the model: each line is one op of kernels.h.
 * Not for: optimizers (optim.c) or anything that crosses a process boundary. */
#include "model/stage.h"
#include "common/clock.h"
#include "common/le.h"
#include "common/rng.h"
#include "common/status.h"
#include "compress/codec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Offsets of one block's tensors in the stage buffers. wq, wk, wv are adjacent and so
 * form one (3C, C) matrix; w1 and w3 likewise form one (2F, C) matrix. */
typedef struct {
    size_t attn_norm, wqkv, wo, ffn_norm, w13, w2;
} block_offsets_t;

/* Activations one microbatch keeps for its backward pass (backend memory). */
typedef struct {
    float *x;         /* (L+1, BT, C): x[0] stage input, x[l+1] block l's output */
    float *ln1;       /* (L, BT, C) */
    float *rstd1;     /* (L, BT) */
    float *qkv;       /* (L, BT, 3C) after rope */
    float *atty;      /* (L, BT, C) */
    float *lse;       /* (L, B, NH, T) */
    float *x2;        /* (L, BT, C) residual after attention */
    float *ln2;       /* (L, BT, C) */
    float *rstd2;     /* (L, BT) */
    float *h13;       /* (L, BT, 2F) */
    float *sw;        /* (L, BT, F) */
    float *lnf;       /* (BT, C) last stage */
    float *rstdf;     /* (BT) last stage */
    float *logits;    /* (BT, V) last stage; becomes dlogits in backward */
    float *losses;    /* (BT) last stage */
    int32_t *tokens;  /* (BT) first stage */
    int32_t *targets; /* (BT) last stage */
    int pending;      /* SLOT_* bits: the parts whose forward pass awaits its backward */
    float *out;       /* the output of the last forward pass without the head, or NULL */
    void *mem;        /* the one allocation all of the above point into */
} slot_t;

/* A slot may hold two parts of one microbatch at once (a CheckFree+ swap visits stage 0
 * or S-1 twice, stage.h): the embedding's backward needs only the tokens, the blocks'
 * backward never reads their own output x[L], where the head's input lies. */
enum { SLOT_EMBED = 1, SLOT_BLOCKS = 2, SLOT_HEAD = 4, SLOT_TARGETS = 8 };

struct stage {
    model_config_t cfg;
    int index, first, last, nblocks, layer0;
    uint64_t seed;
    kern_t *k;
    stage_tensor_t *tensors;
    int ntensors;
    size_t nparams;
    float *params, *grads, *m, *v; /* backend memory */
    int64_t opt_step;
    size_t wte, norm, head; /* offsets; valid when first / last */
    block_offsets_t *blocks;
    float *freqs; /* (T, HS/2, 2) backend memory */
    slot_t *slots;
    int nslots;
    /* scratch shared by all slots (backend memory) */
    float *tmp;         /* (BT, C) projection output before the residual add */
    float *dres;        /* (BT, C) gradient of the residual stream */
    float *dln;         /* (BT, C) */
    float *datty;       /* (BT, C) */
    float *dqkv;        /* (BT, 3C) */
    float *dh13;        /* (BT, 2F) */
    float *dsw;         /* (BT, F) */
    float *host_losses; /* (BT) host memory */
    /* the boundary on the wire (stage_wire_*) */
    float *bin;    /* (BT, C) backend memory: the last tensor stage_wire_decode placed */
    float *hbnd;   /* (BT, C) host staging for a device's float codecs; made when needed */
    uint8_t *dpay; /* backend memory: a quantize payload of dpay_cap bytes; when needed */
    size_t dpay_cap;
    int have_dx; /* dres holds dL/dx_in of the last backward pass */
    int profiling;
    double prof[STAGE_PROF_N];
};

const char *const stage_profile_names[STAGE_PROF_N] = {"matmul", "attention", "rmsnorm", "rope",
                                                       "swiglu", "loss",      "other"};

/* Runs one op; with profiling on, syncs the backend and charges the time to `cat`. */
#define OP(cat, call)                                                                              \
    do {                                                                                           \
        if (st->profiling) {                                                                       \
            double t0_ = clock_now();                                                              \
            call;                                                                                  \
            kern_sync(k);                                                                          \
            st->prof[cat] += clock_now() - t0_;                                                    \
        } else {                                                                                   \
            call;                                                                                  \
        }                                                                                          \
    } while (0)

static size_t add_tensor(stage_t *st, const char *name, int rows, int cols, int layer, int decay)
{
    stage_tensor_t *t = &st->tensors[st->ntensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = rows == 1 ? 1 : 2;
    t->rows = rows;
    t->cols = cols;
    t->offset = st->nparams;
    t->numel = (size_t)rows * cols;
    t->layer = layer;
    t->decay = decay;
    st->nparams += t->numel;
    return t->offset;
}

static size_t add_layer_tensor(stage_t *st, int l, const char *suffix, int rows, int cols,
                               int decay)
{
    char name[64];
    snprintf(name, sizeof name, "layers.%d.%s", l, suffix);
    return add_tensor(st, name, rows, cols, l, decay);
}

static void build_table(stage_t *st)
{
    int C = st->cfg.dim, F = st->cfg.ffn, V = st->cfg.vocab;
    if (st->first) st->wte = add_tensor(st, "tok_embeddings.weight", V, C, -1, 1);
    for (int b = 0; b < st->nblocks; b++) {
        int l = st->layer0 + b;
        block_offsets_t *bo = &st->blocks[b];
        bo->attn_norm = add_layer_tensor(st, l, "attention_norm.weight", 1, C, 0);
        bo->wqkv = add_layer_tensor(st, l, "attention.wq.weight", C, C, 1);
        add_layer_tensor(st, l, "attention.wk.weight", C, C, 1);
        add_layer_tensor(st, l, "attention.wv.weight", C, C, 1);
        bo->wo = add_layer_tensor(st, l, "attention.wo.weight", C, C, 1);
        bo->ffn_norm = add_layer_tensor(st, l, "ffn_norm.weight", 1, C, 0);
        bo->w13 = add_layer_tensor(st, l, "feed_forward.w1.weight", F, C, 1);
        add_layer_tensor(st, l, "feed_forward.w3.weight", F, C, 1);
        bo->w2 = add_layer_tensor(st, l, "feed_forward.w2.weight", C, F, 1);
    }
    if (st->last) {
        st->norm = add_tensor(st, "norm.weight", 1, C, -1, 0);
        st->head = add_tensor(st, "output.weight", V, C, -1, 1);
    }
}

/* Initial values depend only on (seed, tensor name). */
static void init_params(const stage_t *st, float *host)
{
    for (int i = 0; i < st->ntensors; i++) {
        const stage_tensor_t *t = &st->tensors[i];
        float *p = host + t->offset;
        if (t->ndim == 1) {
            for (size_t j = 0; j < t->numel; j++) p[j] = 1.0f;
            continue;
        }
        rng_t r;
        rng_seed(&r, rng_mix(st->seed, rng_hash_str(t->name)));
        for (size_t j = 0; j < t->numel; j++) p[j] = (float)(0.02 * rng_normal(&r));
    }
}

/* Carves a slot's buffers out of one allocation; with mem == NULL only sizes it. */
static size_t slot_layout(const stage_t *st, slot_t *s, char *mem)
{
    const model_config_t *c = &st->cfg;
    size_t BT = (size_t)c->batch * c->seq, C = c->dim, F = c->ffn, L = st->nblocks;
    size_t off = 0;
#define CARVE(field, type, count)                                                                  \
    do {                                                                                           \
        if (mem) s->field = (type *)(mem + off);                                                   \
        off += (((count) * sizeof(type)) + 63) / 64 * 64;                                          \
    } while (0)
    CARVE(x, float, (L + 1) * BT * C);
    CARVE(ln1, float, L *BT *C);
    CARVE(rstd1, float, L *BT);
    CARVE(qkv, float, L *BT * 3 * C);
    CARVE(atty, float, L *BT *C);
    CARVE(lse, float, L *BT * c->n_heads);
    CARVE(x2, float, L *BT *C);
    CARVE(ln2, float, L *BT *C);
    CARVE(rstd2, float, L *BT);
    CARVE(h13, float, L *BT * 2 * F);
    CARVE(sw, float, L *BT *F);
    if (st->last) {
        CARVE(lnf, float, BT *C);
        CARVE(rstdf, float, BT);
        CARVE(logits, float, BT *(size_t)c->vocab);
        CARVE(losses, float, BT);
        CARVE(targets, int32_t, BT);
    }
    if (st->first) CARVE(tokens, int32_t, BT);
#undef CARVE
    return off;
}

stage_t *stage_new(const model_config_t *cfg, int index, kern_t *k, int max_inflight, uint64_t seed,
                   char *err)
{
    if (config_validate(cfg, err)) return NULL;
    if (index < 0 || index >= cfg->stages) {
        status_set(err, STATUS_EINVAL, "stage %d: must be in [0, %d)", index, cfg->stages);
        return NULL;
    }
    if (max_inflight < 1) {
        status_set(err, STATUS_EINVAL, "max_inflight %d: must be at least 1", max_inflight);
        return NULL;
    }
    stage_t *st = calloc(1, sizeof *st);
    float *host = NULL;
    if (!st) goto nomem;
    st->cfg = *cfg;
    st->k = k;
    st->index = index;
    st->seed = seed;
    st->first = index == 0;
    st->last = index == cfg->stages - 1;
    st->nblocks = cfg->n_layers / cfg->stages;
    st->layer0 = index * st->nblocks;
    st->tensors = calloc((size_t)(3 + 9 * st->nblocks), sizeof *st->tensors);
    st->blocks = calloc((size_t)st->nblocks, sizeof *st->blocks);
    if (!st->tensors || !st->blocks) goto nomem;
    build_table(st);

    size_t P = st->nparams * sizeof(float);
    size_t BT = (size_t)cfg->batch * cfg->seq, C = cfg->dim, F = cfg->ffn;
    int HS = cfg->dim / cfg->n_heads;
    st->params = kern_alloc(k, P);
    st->grads = kern_alloc(k, P);
    st->m = kern_alloc(k, P);
    st->v = kern_alloc(k, P);
    st->freqs = kern_alloc(k, (size_t)cfg->seq * HS * sizeof(float));
    st->tmp = kern_alloc(k, BT * C * sizeof(float));
    st->dres = kern_alloc(k, BT * C * sizeof(float));
    st->dln = kern_alloc(k, BT * C * sizeof(float));
    st->datty = kern_alloc(k, BT * C * sizeof(float));
    st->dqkv = kern_alloc(k, BT * 3 * C * sizeof(float));
    st->dh13 = kern_alloc(k, BT * 2 * F * sizeof(float));
    st->dsw = kern_alloc(k, BT * F * sizeof(float));
    st->host_losses = malloc(BT * sizeof(float));
    st->bin = kern_alloc(k, BT * C * sizeof(float));
    if (!st->params || !st->grads || !st->m || !st->v || !st->freqs || !st->tmp || !st->dres ||
        !st->dln || !st->datty || !st->dqkv || !st->dh13 || !st->dsw || !st->host_losses ||
        !st->bin)
        goto nomem;

    st->slots = calloc((size_t)max_inflight, sizeof *st->slots);
    if (!st->slots) goto nomem;
    st->nslots = max_inflight;
    size_t slot_bytes = slot_layout(st, &st->slots[0], NULL);
    for (int i = 0; i < max_inflight; i++) {
        st->slots[i].mem = kern_alloc(k, slot_bytes);
        if (!st->slots[i].mem) goto nomem;
        slot_layout(st, &st->slots[i], st->slots[i].mem);
    }

    /* Parameters and the rotary table are made on the host and uploaded once. */
    size_t host_floats = st->nparams > (size_t)cfg->seq * HS ? st->nparams : (size_t)cfg->seq * HS;
    host = malloc(host_floats * sizeof(float));
    if (!host) goto nomem;
    init_params(st, host);
    kern_upload(k, st->params, host, P);
    kern_rope_freqs(host, cfg->seq, HS, cfg->rope_theta);
    kern_upload(k, st->freqs, host, (size_t)cfg->seq * HS * sizeof(float));
    free(host);
    return st;

nomem:
    free(host);
    status_set(err, STATUS_ENOMEM, "stage %d: out of memory", index);
    stage_destroy(&st);
    return NULL;
}

void stage_destroy(stage_t **stp)
{
    if (!stp || !*stp) return;
    stage_t *st = *stp;
    kern_t *k = st->k;
    float *bufs[] = {st->params, st->grads, st->m,    st->v,    st->freqs, st->tmp, st->dres,
                     st->dln,    st->datty, st->dqkv, st->dh13, st->dsw,   st->bin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) kern_free(k, bufs[i]);
    kern_free(k, st->dpay);
    free(st->hbnd);
    for (int i = 0; st->slots && i < st->nslots; i++) kern_free(k, st->slots[i].mem);
    free(st->slots);
    free(st->host_losses);
    free(st->tensors);
    free(st->blocks);
    free(st);
    *stp = NULL;
}

int stage_index(const stage_t *st)
{
    return st->index;
}
int stage_is_first(const stage_t *st)
{
    return st->first;
}
int stage_is_last(const stage_t *st)
{
    return st->last;
}
const model_config_t *stage_config(const stage_t *st)
{
    return &st->cfg;
}
kern_t *stage_kern(const stage_t *st)
{
    return st->k;
}
size_t stage_num_params(const stage_t *st)
{
    return st->nparams;
}
float *stage_params(stage_t *st)
{
    return st->params;
}
float *stage_grads(stage_t *st)
{
    return st->grads;
}
float *stage_opt_m(stage_t *st)
{
    return st->m;
}
float *stage_opt_v(stage_t *st)
{
    return st->v;
}
int64_t *stage_opt_step(stage_t *st)
{
    return &st->opt_step;
}

const stage_tensor_t *stage_tensors(const stage_t *st, int *n)
{
    *n = st->ntensors;
    return st->tensors;
}

void stage_zero_grads(stage_t *st)
{
    kern_zero(st->k, st->grads, st->nparams * sizeof(float));
}

void stage_profile(stage_t *st, int on)
{
    st->profiling = on;
    memset(st->prof, 0, sizeof st->prof);
}

const double *stage_profile_seconds(const stage_t *st)
{
    return st->prof;
}

static int check_tokens(const int32_t *t, size_t n, int vocab, const char *what, char *err)
{
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0 || t[i] >= vocab)
            return status_set(err, STATUS_EINVAL, "%s[%zu] = %d is outside the vocabulary [0, %d)",
                              what, i, t[i], vocab);
    return 0;
}

/* Block b's activations inside a slot. */
typedef struct {
    float *x, *xout, *ln1, *rstd1, *qkv, *atty, *lse, *x2, *ln2, *rstd2, *h13, *sw;
} block_acts_t;

static block_acts_t block_acts(const stage_t *st, const slot_t *s, int b)
{
    const model_config_t *c = &st->cfg;
    size_t BT = (size_t)c->batch * c->seq, C = (size_t)c->dim, F = (size_t)c->ffn, B = (size_t)b;
    block_acts_t a = {
        .x = s->x + B * BT * C,
        .ln1 = s->ln1 + B * BT * C,
        .rstd1 = s->rstd1 + B * BT,
        .qkv = s->qkv + B * BT * 3 * C,
        .atty = s->atty + B * BT * C,
        .lse = s->lse + B * BT * (size_t)c->n_heads,
        .x2 = s->x2 + B * BT * C,
        .ln2 = s->ln2 + B * BT * C,
        .rstd2 = s->rstd2 + B * BT,
        .h13 = s->h13 + B * BT * 2 * F,
        .sw = s->sw + B * BT * F,
    };
    a.xout = a.x + BT * C;
    return a;
}

/* Which of the embedding, the blocks and the head a pass of `part` runs here; -1 for a part
 * this stage does not have. */
static int part_bits(const stage_t *st, int part)
{
    switch (part) {
    case STAGE_PART_ALL:
        return (st->first ? SLOT_EMBED : 0) | SLOT_BLOCKS | (st->last ? SLOT_HEAD : 0);
    case STAGE_PART_EMBED:
        return st->first ? SLOT_EMBED : -1;
    case STAGE_PART_BLOCKS:
        return SLOT_BLOCKS;
    case STAGE_PART_HEAD:
        return st->last ? SLOT_HEAD : -1;
    default:
        return -1;
    }
}

/* The residual stream after the part's last layer: x[0] after the embedding alone, x[L]
 * otherwise (where the head alone also takes its input). */
static float *part_output(const stage_t *st, const slot_t *s, int bits)
{
    size_t BTC = (size_t)st->cfg.batch * st->cfg.seq * st->cfg.dim;
    return s->x + (bits == SLOT_EMBED ? 0 : (size_t)st->nblocks * BTC);
}

void stage_part_params(const stage_t *st, int part, size_t *offset, size_t *count)
{
    int bits = part_bits(st, part);
    size_t lo = st->nparams, hi = 0;
    for (int i = 0; bits > 0 && i < st->ntensors; i++) {
        const stage_tensor_t *t = &st->tensors[i];
        int of = t->layer >= 0                       ? SLOT_BLOCKS
                 : st->first && t->offset == st->wte ? SLOT_EMBED
                                                     : SLOT_HEAD;
        if (!(bits & of)) continue;
        if (t->offset < lo) lo = t->offset;
        if (t->offset + t->numel > hi) hi = t->offset + t->numel;
    }
    *offset = hi > lo ? lo : 0;
    *count = hi > lo ? hi - lo : 0;
}

int stage_forward(stage_t *st, int slot, const int32_t *tokens, const float *x_in,
                  const int32_t *targets, float *y_out, float *loss, char *err)
{
    return stage_forward_part(st, slot, STAGE_PART_ALL, tokens, x_in, targets, y_out, loss, err);
}

int stage_forward_with(stage_t *st, const float *params, float *save, int slot, int part,
                       const int32_t *tokens, const float *x_in, const int32_t *targets,
                       float *y_out, float *loss, char *err)
{
    size_t bytes = stage_num_params(st) * sizeof(float);
    kern_copy(stage_kern(st), save, stage_params(st), bytes);
    kern_copy(stage_kern(st), stage_params(st), params, bytes);
    int rc = stage_forward_part(st, slot, part, tokens, x_in, targets, y_out, loss, err);
    kern_copy(stage_kern(st), stage_params(st), save, bytes);
    return rc;
}

int stage_forward_part(stage_t *st, int slot, int part, const int32_t *tokens, const float *x_in,
                       const int32_t *targets, float *y_out, float *loss, char *err)
{
    kern_t *k = st->k;
    const model_config_t *c = &st->cfg;
    int B = c->batch, T = c->seq, C = c->dim, F = c->ffn, V = c->vocab, NH = c->n_heads;
    int HS = C / NH, BT = B * T;
    if (slot < 0 || slot >= st->nslots)
        return status_set(err, STATUS_EINVAL, "slot %d: must be in [0, %d)", slot, st->nslots);
    int bits = part_bits(st, part);
    if (bits < 0) return status_set(err, STATUS_EINVAL, "stage %d has no part %d", st->index, part);
    slot_t *s = &st->slots[slot];
    /* what this pass overwrites: the embedding writes x[0] (the blocks' input), the blocks
     * x[0..L] (the head's input), the head its own buffers */
    if (part == STAGE_PART_ALL) s->pending = 0;
    if (bits & SLOT_EMBED) s->pending &= ~(SLOT_EMBED | SLOT_BLOCKS);
    if (bits & SLOT_BLOCKS) s->pending &= ~(SLOT_BLOCKS | SLOT_HEAD | SLOT_TARGETS);
    if (bits & SLOT_HEAD) s->pending &= ~(SLOT_HEAD | SLOT_TARGETS);
    s->out = NULL;
    float *p = st->params,
          *in = (bits & (SLOT_EMBED | SLOT_BLOCKS)) ? s->x : part_output(st, s, bits);

    if (bits & SLOT_EMBED) {
        if (check_tokens(tokens, (size_t)BT, V, "token", err)) return STATUS_EINVAL;
        kern_upload(k, s->tokens, tokens, (size_t)BT * sizeof(int32_t));
        OP(STAGE_PROF_OTHER, kern_embedding_forward(k, s->x, s->tokens, p + st->wte, BT, C));
    } else if (x_in) {
        kern_upload(k, in, x_in, (size_t)BT * C * sizeof(float));
    } else {
        kern_copy(k, in, st->bin, (size_t)BT * C * sizeof(float));
    }

    for (int b = 0; (bits & SLOT_BLOCKS) && b < st->nblocks; b++) {
        const block_offsets_t *bo = &st->blocks[b];
        block_acts_t a = block_acts(st, s, b);
        float *x = a.x, *xout = a.xout, *ln1 = a.ln1, *rstd1 = a.rstd1, *qkv = a.qkv,
              *atty = a.atty, *lse = a.lse;
        float *x2 = a.x2, *ln2 = a.ln2, *rstd2 = a.rstd2, *h13 = a.h13, *sw = a.sw;

        OP(STAGE_PROF_NORM,
           kern_rmsnorm_forward(k, ln1, rstd1, x, p + bo->attn_norm, BT, C, c->norm_eps));
        OP(STAGE_PROF_MATMUL, kern_matmul_forward(k, qkv, ln1, p + bo->wqkv, BT, C, 3 * C));
        OP(STAGE_PROF_ROPE, kern_rope_forward(k, qkv, st->freqs, B, T, NH, HS));
        OP(STAGE_PROF_ATTENTION, kern_attention_forward(k, atty, lse, qkv, B, T, NH, HS));
        OP(STAGE_PROF_MATMUL, kern_matmul_forward(k, st->tmp, atty, p + bo->wo, BT, C, C));
        OP(STAGE_PROF_OTHER, kern_add(k, x2, x, st->tmp, (size_t)BT * C));
        OP(STAGE_PROF_NORM,
           kern_rmsnorm_forward(k, ln2, rstd2, x2, p + bo->ffn_norm, BT, C, c->norm_eps));
        OP(STAGE_PROF_MATMUL, kern_matmul_forward(k, h13, ln2, p + bo->w13, BT, C, 2 * F));
        OP(STAGE_PROF_SWIGLU, kern_swiglu_forward(k, sw, h13, BT, F));
        OP(STAGE_PROF_MATMUL, kern_matmul_forward(k, st->tmp, sw, p + bo->w2, BT, F, C));
        OP(STAGE_PROF_OTHER, kern_add(k, xout, x2, st->tmp, (size_t)BT * C));
    }

    float *y = part_output(st, s, bits);
    if (!(bits & SLOT_HEAD)) {
        if (y_out) kern_download(k, y_out, y, (size_t)BT * C * sizeof(float));
        s->out = y;
        s->pending |= bits;
        return kern_check(k, err);
    }
    OP(STAGE_PROF_NORM,
       kern_rmsnorm_forward(k, s->lnf, s->rstdf, y, p + st->norm, BT, C, c->norm_eps));
    OP(STAGE_PROF_MATMUL, kern_matmul_forward(k, s->logits, s->lnf, p + st->head, BT, C, V));
    s->pending |= bits;
    if (!targets) return kern_check(k, err);
    if (check_tokens(targets, (size_t)BT, V, "target", err)) return STATUS_EINVAL;
    kern_upload(k, s->targets, targets, (size_t)BT * sizeof(int32_t));
    OP(STAGE_PROF_LOSS, kern_crossentropy_forward(k, s->losses, s->logits, s->targets, BT, V));
    kern_download(k, st->host_losses, s->losses, (size_t)BT * sizeof(float));
    double sum = 0;
    for (int i = 0; i < BT; i++) sum += st->host_losses[i];
    *loss = (float)(sum / BT);
    s->pending |= SLOT_TARGETS;
    return kern_check(k, err);
}

int stage_logits(stage_t *st, int slot, float *out, char *err)
{
    if (!st->last || slot < 0 || slot >= st->nslots || !(st->slots[slot].pending & SLOT_HEAD))
        return status_set(err, STATUS_EINVAL, "stage %d: slot %d holds no logits", st->index, slot);
    size_t n = (size_t)st->cfg.batch * st->cfg.seq * st->cfg.vocab;
    kern_download(st->k, out, st->slots[slot].logits, n * sizeof(float));
    return 0;
}

int stage_backward(stage_t *st, int slot, const float *dy, float *dx, char *err)
{
    return stage_backward_part(st, slot, STAGE_PART_ALL, dy, dx, err);
}

int stage_backward_part(stage_t *st, int slot, int part, const float *dy, float *dx, char *err)
{
    kern_t *k = st->k;
    const model_config_t *c = &st->cfg;
    int B = c->batch, T = c->seq, C = c->dim, F = c->ffn, V = c->vocab, NH = c->n_heads;
    int HS = C / NH, BT = B * T;
    if (slot < 0 || slot >= st->nslots)
        return status_set(err, STATUS_EINVAL, "slot %d: must be in [0, %d)", slot, st->nslots);
    int bits = part_bits(st, part);
    if (bits < 0) return status_set(err, STATUS_EINVAL, "stage %d has no part %d", st->index, part);
    slot_t *s = &st->slots[slot];
    int need = bits | (bits & SLOT_HEAD ? SLOT_TARGETS : 0);
    if ((s->pending & need) != need)
        return status_set(err, STATUS_EINVAL, "slot %d holds no forward pass to differentiate%s",
                          slot, bits & SLOT_HEAD ? " (the last stage needs targets)" : "");
    s->pending &= ~need; /* the loss gradient overwrites the logits */
    float *p = st->params, *g = st->grads;
    size_t act = (size_t)BT * C * sizeof(float);

    if (bits & SLOT_HEAD) {
        float *y = part_output(st, s, bits);
        OP(STAGE_PROF_LOSS,
           kern_crossentropy_backward(k, s->logits, s->logits, s->targets, 1.0f / BT, BT, V));
        kern_zero(k, st->dln, act);
        OP(STAGE_PROF_MATMUL, kern_matmul_backward(k, st->dln, g + st->head, s->logits, s->lnf,
                                                   p + st->head, BT, C, V));
        kern_zero(k, st->dres, act);
        OP(STAGE_PROF_NORM, kern_rmsnorm_backward(k, st->dres, g + st->norm, st->dln, y,
                                                  p + st->norm, s->rstdf, BT, C));
    } else if (dy) {
        kern_upload(k, st->dres, dy, act);
    } else {
        kern_copy(k, st->dres, st->bin, act);
    }

    for (int b = (bits & SLOT_BLOCKS) ? st->nblocks - 1 : -1; b >= 0; b--) {
        const block_offsets_t *bo = &st->blocks[b];
        block_acts_t a = block_acts(st, s, b);
        float *x = a.x, *ln1 = a.ln1, *rstd1 = a.rstd1, *qkv = a.qkv, *atty = a.atty, *lse = a.lse;
        float *x2 = a.x2, *ln2 = a.ln2, *rstd2 = a.rstd2, *h13 = a.h13, *sw = a.sw;

        /* xout = x2 + sw w2^T: dres flows to x2 unchanged and into the MLP. */
        kern_zero(k, st->dsw, (size_t)BT * F * sizeof(float));
        OP(STAGE_PROF_MATMUL,
           kern_matmul_backward(k, st->dsw, g + bo->w2, st->dres, sw, p + bo->w2, BT, F, C));
        kern_zero(k, st->dh13, (size_t)BT * 2 * F * sizeof(float));
        OP(STAGE_PROF_SWIGLU, kern_swiglu_backward(k, st->dh13, st->dsw, h13, BT, F));
        kern_zero(k, st->dln, act);
        OP(STAGE_PROF_MATMUL,
           kern_matmul_backward(k, st->dln, g + bo->w13, st->dh13, ln2, p + bo->w13, BT, C, 2 * F));
        OP(STAGE_PROF_NORM, kern_rmsnorm_backward(k, st->dres, g + bo->ffn_norm, st->dln, x2,
                                                  p + bo->ffn_norm, rstd2, BT, C));

        /* x2 = x + atty wo^T: dres now is dL/dx2; it flows to x and into attention. */
        kern_zero(k, st->datty, act);
        OP(STAGE_PROF_MATMUL,
           kern_matmul_backward(k, st->datty, g + bo->wo, st->dres, atty, p + bo->wo, BT, C, C));
        kern_zero(k, st->dqkv, 3 * act);
        OP(STAGE_PROF_ATTENTION,
           kern_attention_backward(k, st->dqkv, st->datty, qkv, atty, lse, B, T, NH, HS));
        OP(STAGE_PROF_ROPE, kern_rope_backward(k, st->dqkv, st->freqs, B, T, NH, HS));
        kern_zero(k, st->dln, act);
        OP(STAGE_PROF_MATMUL, kern_matmul_backward(k, st->dln, g + bo->wqkv, st->dqkv, ln1,
                                                   p + bo->wqkv, BT, C, 3 * C));
        OP(STAGE_PROF_NORM, kern_rmsnorm_backward(k, st->dres, g + bo->attn_norm, st->dln, x,
                                                  p + bo->attn_norm, rstd1, BT, C));
    }

    if (bits & SLOT_EMBED) {
        OP(STAGE_PROF_OTHER, kern_embedding_backward(k, g + st->wte, st->dres, s->tokens, BT, C));
        st->have_dx = 0;
    } else {
        if (dx) kern_download(k, dx, st->dres, act);
        st->have_dx = 1;
    }
    return kern_check(k, err);
}

/* --- the boundary on the wire ---------------------------------------------------------- */

static size_t boundary_elems(const stage_t *st)
{
    return (size_t)st->cfg.batch * st->cfg.seq * st->cfg.dim;
}

static void boundary_shape(const stage_t *st, int64_t shape[3])
{
    shape[0] = st->cfg.batch;
    shape[1] = st->cfg.seq;
    shape[2] = st->cfg.dim;
}

static int is_quantized(int codec)
{
    return codec == CODEC_INT8 || codec == CODEC_INT4;
}

size_t stage_wire_size(const stage_t *st, int codec, uint32_t block)
{
    if (!codec_name(codec)) return 0;
    int64_t shape[3];
    boundary_shape(st, shape);
    codec_params_t cp = {.block = block};
    return codec_encoded_size((codec_id_t)codec, &cp, shape, 3);
}

/* Backend scratch for a quantize payload of `bytes`; 0 or STATUS_ENOMEM. */
static int need_dpay(stage_t *st, size_t bytes, char *err)
{
    if (bytes <= st->dpay_cap) return 0;
    kern_free(st->k, st->dpay);
    st->dpay_cap = 0;
    if (!(st->dpay = kern_alloc(st->k, bytes)))
        return status_set(err, STATUS_ENOMEM, "stage %d: out of memory for a %zu-byte payload",
                          st->index, bytes);
    st->dpay_cap = bytes;
    return 0;
}

static int need_hbnd(stage_t *st, char *err)
{
    if (!st->hbnd && !(st->hbnd = malloc(boundary_elems(st) * sizeof(float))))
        return status_set(err, STATUS_ENOMEM, "stage %d: out of memory", st->index);
    return 0;
}

/* Encodes the boundary tensor src (backend memory). */
static int wire_encode(stage_t *st, const float *src, int codec, uint32_t block, uint8_t *out,
                       size_t cap, size_t *written, char *err)
{
    kern_t *k = st->k;
    size_t n = boundary_elems(st), total = stage_wire_size(st, codec, block);
    int64_t shape[3];
    boundary_shape(st, shape);
    codec_params_t cp = {.block = block};
    if (!total)
        return status_set(err, STATUS_EINVAL, "stage %d: codec %d with block %u is not valid",
                          st->index, codec, block);
    if (!out || cap < total)
        return status_set(err, STATUS_EINVAL,
                          "stage %d: an encoded tensor needs %zu bytes, has %zu", st->index, total,
                          out ? cap : 0);
    int rc;
    if (!kern_on_device(k)) {
        rc = codec_encode((codec_id_t)codec, &cp, src, shape, 3, out, cap, written, err);
    } else if (is_quantized(codec)) {
        size_t plen = total - CODEC_HEADER_LEN;
        if ((rc = need_dpay(st, plen, err))) return rc;
        kern_quantize(k, st->dpay, src, n, codec == CODEC_INT8 ? 8 : 4,
                      block ? block : CODEC_DEFAULT_BLOCK);
        kern_download(k, out + CODEC_HEADER_LEN, st->dpay, plen);
        rc = codec_seal((codec_id_t)codec, &cp, shape, 3, out, total, err);
        if (!rc && written) *written = total;
    } else {
        if ((rc = need_hbnd(st, err))) return rc;
        kern_download(k, st->hbnd, src, n * sizeof(float));
        rc = codec_encode((codec_id_t)codec, &cp, st->hbnd, shape, 3, out, cap, written, err);
    }
    return rc;
}

int stage_wire_encode_output(stage_t *st, int slot, int codec, uint32_t block, uint8_t *out,
                             size_t cap, size_t *written, char *err)
{
    if (slot < 0 || slot >= st->nslots || !st->slots[slot].out)
        return status_set(err, STATUS_EINVAL, "stage %d: slot %d holds no output to encode",
                          st->index, slot);
    return wire_encode(st, st->slots[slot].out, codec, block, out, cap, written, err);
}

int stage_wire_encode_dx(stage_t *st, int codec, uint32_t block, uint8_t *out, size_t cap,
                         size_t *written, char *err)
{
    if (!st->have_dx)
        return status_set(err, STATUS_EINVAL, "stage %d: no input gradient to encode", st->index);
    return wire_encode(st, st->dres, codec, block, out, cap, written, err);
}

/* The largest |value| a boundary tensor from the wire may hold. The codecs carry up to
 * about FLT_MAX, and a gradient dL/dy of 3e38 (finite, well formed) overflowed the
 * receiving stage's parameter gradients to Inf, which stopped its pool's step (found by
 * fuzz_stage). 2^20 is far above what a training run's activations and gradients reach. */
#define WIRE_MAX_ABS 1048576.0f

static int wire_values_ok(const float *x, size_t n)
{
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++) bad |= !(x[i] >= -WIRE_MAX_ABS && x[i] <= WIRE_MAX_ABS);
    return !bad;
}

/* int8 / int4 payloads: every block's scale times the largest code (127, 8) within bounds */
static int wire_scales_ok(const uint8_t *pay, size_t n, const codec_info_t *info)
{
    float top = info->codec == CODEC_INT8 ? 127.0f : 8.0f;
    size_t nb = (n + info->block - 1) / info->block;
    for (size_t b = 0; b < nb; b++) {
        float s = le_get_f32(pay + 4 * b);
        if (!(s * top <= WIRE_MAX_ABS)) return 0;
    }
    return 1;
}

int stage_wire_decode(stage_t *st, const uint8_t *buf, size_t len, char *err)
{
    kern_t *k = st->k;
    size_t n = boundary_elems(st);
    int64_t want[3];
    boundary_shape(st, want);
    codec_info_t info;
    const uint8_t *pay;
    int rc;
    if (kern_on_device(k)) {
        if ((rc = codec_open(buf, len, &info, &pay, err))) return rc;
    } else {
        int64_t shape[CODEC_MAX_DIMS];
        int ndim = 0;
        if ((rc = codec_decode(buf, len, st->bin, n, shape, &ndim, err))) return rc;
        info.ndim = ndim;
        memcpy(info.shape, shape, sizeof shape);
    }
    if (info.ndim != 3 || info.shape[0] != want[0] || info.shape[1] != want[1] ||
        info.shape[2] != want[2])
        return status_set(err, STATUS_EMALFORMED, "activation of the wrong shape");
    if (!kern_on_device(k)) {
        if (!wire_values_ok(st->bin, n))
            return status_set(err, STATUS_EMALFORMED, "boundary values above %g", WIRE_MAX_ABS);
        return 0;
    }
    if (is_quantized(info.codec)) {
        if (!wire_scales_ok(pay, n, &info))
            return status_set(err, STATUS_EMALFORMED, "boundary values above %g", WIRE_MAX_ABS);
        if ((rc = need_dpay(st, info.payload_len, err))) return rc;
        kern_upload(k, st->dpay, pay, info.payload_len);
        kern_dequantize(k, st->bin, st->dpay, n, info.codec == CODEC_INT8 ? 8 : 4, info.block);
    } else {
        if ((rc = need_hbnd(st, err))) return rc;
        if ((rc = codec_decode(buf, len, st->hbnd, n, NULL, NULL, err))) return rc;
        if (!wire_values_ok(st->hbnd, n))
            return status_set(err, STATUS_EMALFORMED, "boundary values above %g", WIRE_MAX_ABS);
        kern_upload(k, st->bin, st->hbnd, n * sizeof(float));
    }
    return 0;
}
