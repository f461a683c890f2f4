/* fuzz_demo_opt.c — fuzz target: the DeMo stage message "STDX" (model/demo_opt.c,
 * docs/codec-format.md "DeMo stage messages"), as a pool member receives it: the frame,
 * then every tensor's body against this stage's tensor table (demo_opt_check), then the
 * update (demo_opt_apply).
 *
 * Input: one flag octet (bit 0: the target writes the correct CRC-32C into the header
 * first), then the message. The receivers are two replicas of the last stage of a small
 * model: chunk 16 with the rms update, chunk 64 with the sign update; the message's chunk
 * picks one, its step field is the step asked for.
 * Invariants: demo_opt_apply accepts exactly what demo_opt_check accepts; a refused
 * message leaves the parameters untouched; an applied one leaves them finite.
 *
 * Not for: the per-tensor body format (fuzz_demo.c). */
#include "fuzz.h"

#include "common/status.h"
#include "kernels/kernels.h"
#include "model/demo_opt.h"
#include "model/model.h"
#include "model/optim.h"

#include <math.h>
#include <string.h>

static kern_t *kern;
static model_t *model;
static stage_t *stage;
static demo_opt_t *rx16, *rx64;
static float *saved;
static size_t nparams;

static void setup(void)
{
    if (model) return;
    char err[STATUS_ERR_LEN];
    model_config_t c;
    FUZZ_CHECK(config_preset(&c, "tiny", err) == 0);
    c.dim = 16; /* small: the cost of an input is the stage's parameter count */
    c.n_layers = 2;
    c.n_heads = 2;
    c.ffn = 32;
    c.batch = 1;
    c.seq = 16;
    c.stages = 2;
    kern = kern_new("cpu", 1, err);
    FUZZ_CHECK(kern);
    model = model_new(&c, kern, 7, err);
    FUZZ_CHECK(model);
    stage = model_stage(model, c.stages - 1);
    demo_cfg_t a = {.chunk = 16,
                    .k = 9,
                    .vfmt = DEMO_VAL_SIGN,
                    .beta = 0.999f,
                    .imode = DEMO_IDX_SHARED,
                    .update = DEMO_UPDATE_RMS};
    demo_cfg_t b = {.chunk = 64,
                    .k = 32,
                    .vfmt = DEMO_VAL_F32,
                    .beta = 0.999f,
                    .imode = DEMO_IDX_TOPK,
                    .update = DEMO_UPDATE_SIGN};
    rx16 = demo_opt_new(stage, &a, err);
    rx64 = demo_opt_new(stage, &b, err);
    FUZZ_CHECK(rx16 && rx64);
    nparams = stage_num_params(stage);
    saved = malloc(nparams * sizeof *saved);
    FUZZ_CHECK(saved);
    memcpy(saved, stage_params(stage), nparams * sizeof *saved);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1) return 0;
    size_t len = size - 1;
    uint8_t *msg = malloc(len ? len : 1);
    if (!msg) return 0;
    memcpy(msg, data + 1, len);
    if ((data[0] & 1) && len >= DEMO_OPT_HEADER_LEN) demo_stage_seal(msg, len); /* get past it */
    int64_t step = 0;
    if (len >= 24)
        for (int i = 0; i < 8; i++) step |= (int64_t)((uint64_t)msg[16 + i] << (8 * i));
    demo_opt_t *o = len >= 8 && (msg[6] | msg[7] << 8) == 64 ? rx64 : rx16;
    char err[STATUS_ERR_LEN];
    int check = demo_opt_check(o, step, msg, len, err);
    optim_config_t oc = optim_defaults();
    oc.warmup = 0;
    const uint8_t *msgs[2] = {msg, msg};
    size_t lens[2] = {len, len};
    int apply = demo_opt_apply(o, &oc, step, msgs, lens, 2, err);
    FUZZ_CHECK((check == 0) == (apply == 0));
    fuzz_accepted += check == 0;
    float *p = stage_params(stage);
    if (apply) {
        FUZZ_CHECK(!memcmp(p, saved, nparams * sizeof *p));
    } else {
        for (size_t i = 0; i < nparams; i++) FUZZ_CHECK(isfinite(p[i]));
        memcpy(p, saved, nparams * sizeof *p);
    }
    free(msg);
    return 0;
}

/* ---- seeds ---------------------------------------------------------------------------- */

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    setup();
    static const demo_cfg_t cfgs[] = {
        {16, 9, DEMO_VAL_SIGN, 0.999f, DEMO_IDX_SHARED, DEMO_UPDATE_RMS, DEMO_XFORM_DCT},
        {16, 4, DEMO_VAL_F32, 0.999f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT},
        {16, 2, DEMO_VAL_BF16, 0.999f, DEMO_IDX_SHARED, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT},
        {64, 4, DEMO_VAL_SIGN, 0.999f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT},
        {64, 2, DEMO_VAL_BF16, 0.999f, DEMO_IDX_TOPK, DEMO_UPDATE_SIGN, DEMO_XFORM_DCT},
    };
    char err[STATUS_ERR_LEN];
    float *g = stage_grads(stage);
    for (size_t i = 0; i < nparams; i++) g[i] = sinf((float)i * 0.37f) * 1e-2f;
    optim_config_t oc = optim_defaults();
    for (size_t c = 0; c < sizeof cfgs / sizeof *cfgs; c++) {
        demo_opt_t *tx = demo_opt_new(stage, &cfgs[c], err);
        if (!tx) continue;
        size_t n = demo_opt_msg_size(tx);
        uint8_t *buf = malloc(n + 1);
        if (buf && demo_opt_prepare(tx, &oc, 3 + (int64_t)c, 1.0f, buf + 1, NULL, err) == 0) {
            char name[64];
            buf[0] = 0;
            snprintf(name, sizeof name, "stage-msg-%zu", c);
            emit(ctx, name, buf, n + 1);
            buf[0] = 1;
            snprintf(name, sizeof name, "stage-msg-%zu-fixcrc", c);
            emit(ctx, name, buf, n + 1);
        }
        free(buf);
        demo_opt_destroy(&tx);
    }
    memcpy(stage_params(stage), saved, nparams * sizeof(float)); /* prepare decayed them */
}
