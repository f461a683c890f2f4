/* model.c — S stages chained in one process. With a codec on the boundaries and no tap,
 * the hand-over is what peers do on the wire: stage_wire_encode_* on one stage,
 * stage_wire_decode on the next (on a device, int8/int4 never leave it but as payloads). */
#include "model/model.h"
#include "common/status.h"
#include "compress/codec.h"
#include "swarm/path.h"

#include <math.h>
#include <stdlib.h>

struct model {
    model_config_t cfg;
    kern_t *k;
    stage_t **stages;
    int S;
    float *act, *grad; /* host (BT, C) boundary buffers, one pair is enough serially */
    float *act2;
    int codec; /* < 0: none */
    codec_params_t codec_params;
    uint8_t *wire; /* encode buffer */
    size_t wire_cap;
    uint64_t wire_bytes, wire_elems;
    model_tap_fn tap;
    void *tap_ctx;
    uint64_t skip; /* stages the next passes leave out (swarm/path.h mask) */
    int swap;      /* PATH_SWAP_*: the next training passes' CheckFree+ swap */
    const float *stale0; /* model_set_stale_first: stage 0's forward parameters, NULL: off */
    float *save0;        /* ... its current parameters meanwhile (backend memory) */
};

model_t *model_new(const model_config_t *cfg, kern_t *k, uint64_t seed, char *err)
{
    if (config_validate(cfg, err)) return NULL;
    model_t *m = calloc(1, sizeof *m);
    if (!m) goto nomem;
    m->cfg = *cfg;
    m->k = k;
    m->S = cfg->stages;
    m->codec = -1;
    size_t act = (size_t)cfg->batch * cfg->seq * cfg->dim;
    m->stages = calloc((size_t)m->S, sizeof *m->stages);
    m->act = malloc(act * sizeof(float));
    m->act2 = malloc(act * sizeof(float));
    m->grad = malloc(act * sizeof(float));
    if (!m->stages || !m->act || !m->act2 || !m->grad) goto nomem;
    for (int i = 0; i < m->S; i++)
        if (!(m->stages[i] = stage_new(cfg, i, k, 1, seed, err))) {
            model_destroy(&m);
            return NULL;
        }
    return m;
nomem:
    model_destroy(&m);
    status_set(err, STATUS_ENOMEM, "model: out of memory");
    return NULL;
}

void model_destroy(model_t **mp)
{
    if (!mp || !*mp) return;
    model_t *m = *mp;
    for (int i = 0; m->stages && i < m->S; i++) stage_destroy(&m->stages[i]);
    free(m->stages);
    free(m->act);
    free(m->act2);
    free(m->grad);
    free(m->wire);
    if (m->save0) kern_free(m->k, m->save0);
    free(m);
    *mp = NULL;
}

int model_num_stages(const model_t *m)
{
    return m->S;
}
stage_t *model_stage(model_t *m, int i)
{
    return m->stages[i];
}

size_t model_num_params(const model_t *m)
{
    size_t n = 0;
    for (int i = 0; i < m->S; i++) n += stage_num_params(m->stages[i]);
    return n;
}

int model_set_codec(model_t *m, int codec, uint32_t block, char *err)
{
    if (codec >= 0 && !codec_name(codec))
        return status_set(err, STATUS_EINVAL, "unknown codec %d", codec);
    m->codec = codec;
    m->codec_params.block = block;
    return 0;
}

void model_wire_stats(const model_t *m, uint64_t *bytes, uint64_t *elems)
{
    *bytes = m->wire_bytes;
    *elems = m->wire_elems;
}

void model_set_tap(model_t *m, model_tap_fn fn, void *ctx)
{
    m->tap = fn;
    m->tap_ctx = ctx;
}

/* What crossing boundary b does to a (batch, seq, dim) tensor: the tap sees it, then
 * the codec (if any) encodes and decodes it in place. */
static int cross(model_t *m, int b, int is_grad, float *x, char *err)
{
    const model_config_t *c = &m->cfg;
    size_t n = (size_t)c->batch * c->seq * c->dim;
    if (m->tap) m->tap(m->tap_ctx, b, is_grad, x, n);
    if (m->codec < 0) return 0;
    int64_t shape[3] = {c->batch, c->seq, c->dim};
    size_t need = codec_encoded_size((codec_id_t)m->codec, &m->codec_params, shape, 3), w;
    if (need > m->wire_cap) {
        uint8_t *p = realloc(m->wire, need);
        if (!p) return status_set(err, STATUS_ENOMEM, "model: out of memory");
        m->wire = p;
        m->wire_cap = need;
    }
    int rc = codec_encode((codec_id_t)m->codec, &m->codec_params, x, shape, 3, m->wire, m->wire_cap,
                          &w, err);
    if (!rc) rc = codec_decode(m->wire, w, x, n, NULL, NULL, err);
    m->wire_bytes += w;
    m->wire_elems += n;
    return rc;
}

/* Hands a boundary tensor over as an encoded message between stage a and the next stage
 * on the path, b: going forward (is_grad 0) from a's output to b's input, coming back
 * from b's dx to a's dy. */
static int hand_over(model_t *m, int a, int b, int is_grad, char *err)
{
    stage_t *from = m->stages[is_grad ? b : a], *to = m->stages[is_grad ? a : b];
    size_t need = stage_wire_size(from, m->codec, m->codec_params.block), w = 0;
    if (!need) return status_set(err, STATUS_EINVAL, "model: bad codec block");
    if (need > m->wire_cap) {
        uint8_t *p = realloc(m->wire, need);
        if (!p) return status_set(err, STATUS_ENOMEM, "model: out of memory");
        m->wire = p;
        m->wire_cap = need;
    }
    int rc = is_grad ? stage_wire_encode_dx(from, m->codec, m->codec_params.block, m->wire,
                                            m->wire_cap, &w, err)
                     : stage_wire_encode_output(from, 0, m->codec, m->codec_params.block, m->wire,
                                                m->wire_cap, &w, err);
    if (!rc) rc = stage_wire_decode(to, m->wire, w, err);
    m->wire_bytes += w;
    m->wire_elems += (uint64_t)m->cfg.batch * m->cfg.seq * m->cfg.dim;
    return rc;
}

/* Through the wire path (hand_over) or host buffers (cross: no codec, or a tap that
 * must see the floats). */
static int use_wire(const model_t *m)
{
    return m->codec >= 0 && !m->tap;
}

/* The hops of the passes' path (skip mask and swap, swarm/path.h). */
static int hops(const model_t *m, path_hop_t *h)
{
    return path_hops(m->skip, m->swap, m->S, h);
}

/* Forward through every hop of the path; activations ping-pong between two host buffers.
 * A stage visited twice (a swap) holds both parts in its one slot (stage.h). */
static int forward(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                   const float *p0, char *err)
{
    float *in = m->act, *out = m->act2;
    int wire = use_wire(m);
    path_hop_t h[PATH_HOPS_MAX];
    int n = hops(m, h);
    for (int i = 0; i < n; i++) {
        int s = h[i].stage;
        int rc = i == 0 && p0 ? stage_forward_with(m->stages[s], p0, m->save0, 0, h[i].part, tokens,
                                                   NULL, NULL, wire ? NULL : out, loss, err)
                              : stage_forward_part(m->stages[s], 0, h[i].part, tokens,
                                                   wire ? NULL : in, targets, wire ? NULL : out,
                                                   loss, err);
        if (!rc && i + 1 < n)
            rc = wire ? hand_over(m, s, h[i + 1].stage, 0, err) : cross(m, s, 0, out, err);
        if (rc) return rc;
        float *t = in;
        in = out;
        out = t;
    }
    return 0;
}

int model_set_stale_first(model_t *m, const float *params, char *err)
{
    m->stale0 = params;
    if (!params || m->save0) return 0;
    m->save0 = kern_alloc(m->k, stage_num_params(m->stages[0]) * sizeof(float));
    return m->save0 ? 0 : status_set(err, STATUS_ENOMEM, "model: out of memory");
}

int model_train_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                      char *err)
{
    path_hop_t h[PATH_HOPS_MAX];
    /* stage 0's forward on the older parameters, its backward on a forward recomputed with
     * the current ones */
    int stale = m->stale0 && m->S > 1 && hops(m, h) > 0 && h[0].part == STAGE_PART_ALL;
    int rc = forward(m, tokens, targets, loss, stale ? m->stale0 : NULL, err), wire = use_wire(m);
    if (stale && !rc) rc = stage_forward(m->stages[0], 0, tokens, NULL, NULL, NULL, NULL, err);
    for (int i = hops(m, h) - 1; !rc && i >= 0; i--) {
        float *g = wire ? NULL : m->grad;
        rc = stage_backward_part(m->stages[h[i].stage], 0, h[i].part, g, g, err);
        if (!rc && i > 0)
            rc = wire ? hand_over(m, h[i - 1].stage, h[i].stage, 1, err)
                      : cross(m, h[i - 1].stage, 1, m->grad, err);
    }
    return rc;
}

int model_eval_micro(model_t *m, const int32_t *tokens, const int32_t *targets, float *loss,
                     char *err)
{
    return forward(m, tokens, targets, loss, NULL, err);
}

int model_logits(model_t *m, const int32_t *tokens, float *out, char *err)
{
    float loss;
    int rc = forward(m, tokens, NULL, &loss, NULL, err);
    return rc ? rc : stage_logits(m->stages[m->S - 1], 0, out, err);
}

int model_set_skip(model_t *m, uint64_t skip, char *err)
{
    if (!path_valid(skip, m->S))
        return status_set(err, STATUS_EINVAL,
                          "model: cannot skip stage 0, the last stage or a stage >= %d", m->S);
    m->skip = skip;
    return 0;
}

int model_set_swap(model_t *m, int swap, char *err)
{
    if (swap < PATH_SWAP_NONE || swap > PATH_SWAP_END)
        return status_set(err, STATUS_EINVAL, "model: unknown swap %d", swap);
    m->swap = swap;
    return 0;
}

uint64_t model_skip(const model_t *m)
{
    return m->skip;
}

void model_zero_grads(model_t *m)
{
    for (int i = 0; i < m->S; i++) stage_zero_grads(m->stages[i]);
}

void model_adamw_step(model_t *m, const optim_config_t *oc, int64_t step, float grad_scale,
                      float *grad_norm)
{
    double sq = 0;
    for (int i = 0; i < m->S; i++) {
        float n;
        optim_adamw_step(m->stages[i], oc, step, grad_scale, &n);
        sq += (double)n * n;
    }
    if (grad_norm) *grad_norm = (float)sqrt(sq);
}
