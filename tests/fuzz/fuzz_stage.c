/* fuzz_stage.c — fuzz target: activations and gradients as a serving peer takes them off
 * the wire (stage_wire_decode, model/stage.c) and computes with them: FWD into the last
 * stage of a small two-stage model (forward with the loss, backward), BWD into the first
 * stage (backward from the decoded dL/dy).
 *
 * Input: one flag octet (bit 0: the target writes the correct CRC-32C first; bit 1: BWD
 * into stage 0, else FWD into stage 1), then a codec message (compress/codec.h) of shape
 * (batch, seq, dim).
 * Invariants: what decodes has the boundary's shape; a pass over it gives a finite loss,
 * finite parameter gradients and a dL/dx the codec can send on (non-finite never goes on
 * the wire, so it would stop the microbatch).
 *
 * Not for: the codec format itself (fuzz_codec.c). */
#include "fuzz.h"
#include "common/le.h"

#include "common/status.h"
#include "compress/codec.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/stage.h"

#include <math.h>
#include <string.h>

static kern_t *kern;
static model_t *model;
static stage_t *first, *last;
static int32_t *tokens, *targets;
static size_t bt;

static void setup(void)
{
    if (model) return;
    char err[STATUS_ERR_LEN];
    model_config_t c;
    FUZZ_CHECK(config_preset(&c, "tiny", err) == 0);
    c.dim = 16, c.n_layers = 2, c.n_heads = 2, c.ffn = 32, c.batch = 1, c.seq = 8, c.stages = 2;
    kern = kern_new("cpu", 1, err);
    FUZZ_CHECK(kern);
    model = model_new(&c, kern, 11, err);
    FUZZ_CHECK(model);
    first = model_stage(model, 0);
    last = model_stage(model, 1);
    bt = (size_t)c.batch * (size_t)c.seq;
    tokens = malloc(bt * sizeof *tokens);
    targets = malloc(bt * sizeof *targets);
    for (size_t i = 0; i < bt; i++)
        tokens[i] = (int32_t)(i * 37 % 256), targets[i] = (int32_t)(i * 11 % 256);
}

static void check_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) FUZZ_CHECK(isfinite(x[i]));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    if (size < 1) return 0;
    size_t len = size - 1;
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf) return 0;
    memcpy(buf, data + 1, len);
    if ((data[0] & 1) && len >= CODEC_HEADER_LEN) {
        uint32_t crc = codec_crc32c(0, buf, 36);
        le_put_u32(buf + 36, codec_crc32c(crc, buf + CODEC_HEADER_LEN, len - CODEC_HEADER_LEN));
    }
    int bwd = data[0] & 2;
    stage_t *st = bwd ? first : last;
    char err[STATUS_ERR_LEN];
    if (bwd) FUZZ_CHECK(stage_forward(first, 0, tokens, NULL, NULL, NULL, NULL, err) == 0);
    if (stage_wire_decode(st, buf, len, err) == 0) {
        fuzz_accepted++;
        stage_zero_grads(st);
        if (bwd) {
            FUZZ_CHECK(stage_backward(first, 0, NULL, NULL, err) == 0);
        } else {
            float loss = NAN;
            FUZZ_CHECK(stage_forward(last, 0, NULL, NULL, targets, NULL, &loss, err) == 0);
            FUZZ_CHECK(isfinite(loss));
            FUZZ_CHECK(stage_backward(last, 0, NULL, NULL, err) == 0);
            size_t cap = stage_wire_size(last, CODEC_F32, 0), w = 0;
            uint8_t *dx = malloc(cap);
            FUZZ_CHECK(dx && stage_wire_encode_dx(last, CODEC_F32, 0, dx, cap, &w, err) == 0);
            free(dx);
        }
        check_finite(stage_grads(st), stage_num_params(st));
    }
    free(buf);
    return 0;
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    setup();
    char err[STATUS_ERR_LEN];
    for (int c = 0; c < CODEC_COUNT; c++) {
        size_t cap = stage_wire_size(first, c, 0), w = 0;
        uint8_t *buf = malloc(cap + 1);
        FUZZ_CHECK(stage_forward(first, 0, tokens, NULL, NULL, NULL, NULL, err) == 0);
        if (stage_wire_encode_output(first, 0, c, 0, buf + 1, cap, &w, err) == 0) {
            char name[32];
            buf[0] = 0;
            snprintf(name, sizeof name, "fwd-%s", codec_name(c));
            emit(ctx, name, buf, w + 1);
            buf[0] = 1;
            snprintf(name, sizeof name, "fwd-%s-fixcrc", codec_name(c));
            emit(ctx, name, buf, w + 1);
        }
        float loss;
        FUZZ_CHECK(stage_wire_decode(last, buf + 1, w, err) == 0);
        FUZZ_CHECK(stage_forward(last, 0, NULL, NULL, targets, NULL, &loss, err) == 0);
        FUZZ_CHECK(stage_backward(last, 0, NULL, NULL, err) == 0);
        if (stage_wire_encode_dx(last, c, 0, buf + 1, cap, &w, err) == 0) {
            char name[32];
            buf[0] = 2;
            snprintf(name, sizeof name, "bwd-%s", codec_name(c));
            emit(ctx, name, buf, w + 1);
            buf[0] = 3;
            snprintf(name, sizeof name, "bwd-%s-fixcrc", codec_name(c));
            emit(ctx, name, buf, w + 1);
        }
        free(buf);
    }
    /* the largest values a boundary tensor may hold (model/stage.c, WIRE_MAX_ABS) */
    int64_t shape[3] = {1, (int64_t)bt, 16};
    size_t n = bt * 16, cap = codec_encoded_size(CODEC_F32, NULL, shape, 3), w = 0;
    float *x = malloc(n * sizeof *x);
    uint8_t *buf = malloc(cap + 1);
    for (size_t i = 0; i < n; i++) x[i] = i & 1 ? -1048576.0f : 1048576.0f;
    if (codec_encode(CODEC_F32, NULL, x, shape, 3, buf + 1, cap, &w, err) == 0) {
        buf[0] = 0;
        emit(ctx, "fwd-f32-limit", buf, w + 1);
        buf[0] = 2;
        emit(ctx, "bwd-f32-limit", buf, w + 1);
    }
    free(x);
    free(buf);
}
