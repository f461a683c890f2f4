/* fuzz_text.c — fuzz target: the run description a joiner receives in WELCOME
 * (train_options_from_text, model/train.c) and the model config text inside it
 * (config_from_text, model/config.c).
 *
 * Input: the text (cut at the first NUL, as the peer's C string is).
 * Invariants: an accepted run text describes a valid model (config_validate) with finite
 * settings, and a codec the stage boundary can use; written back (train_options_to_text)
 * it parses again to the same text; an accepted config text survives config_to_text and
 * back unchanged.
 *
 * Not for: the command line (tools/run_opts.c). */
#include "fuzz.h"

#include "common/status.h"
#include "compress/codec.h"
#include "model/config.h"
#include "model/train.h"

#include <math.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    char err[STATUS_ERR_LEN];

    train_options_t o = train_defaults();
    if (train_options_from_text(&o, text, err) == 0) {
        fuzz_accepted++;
        FUZZ_CHECK(config_validate(&o.cfg, err) == 0);
        FUZZ_CHECK(isfinite(o.cfg.norm_eps) && isfinite(o.cfg.rope_theta));
        FUZZ_CHECK(isfinite(o.opt.lr) && isfinite(o.opt.wd) && isfinite(o.opt.clip));
        FUZZ_CHECK(o.demo.chunk >= 1 && o.demo.chunk <= 256 && o.demo.k >= 1);
        if (o.codec >= 0) {
            codec_params_t cp = {.block = o.codec_block};
            int64_t shape[2] = {o.cfg.seq, o.cfg.dim};
            FUZZ_CHECK(codec_encoded_size((codec_id_t)o.codec, &cp, shape, 2) > 0);
        }
        static char t1[8192], t2[8192];
        size_t n1 = train_options_to_text(&o, t1, sizeof t1);
        FUZZ_CHECK(n1 > 0 && n1 < sizeof t1 - 1);
        train_options_t o2 = train_defaults();
        FUZZ_CHECK(train_options_from_text(&o2, t1, err) == 0);
        size_t n2 = train_options_to_text(&o2, t2, sizeof t2);
        FUZZ_CHECK(n1 == n2 && !memcmp(t1, t2, n1));
    }

    model_config_t c;
    FUZZ_CHECK(config_preset(&c, "tiny", err) == 0);
    if (config_from_text(&c, text, err) == 0 && config_validate(&c, err) == 0) {
        fuzz_accepted++;
        char t[1024];
        config_to_text(&c, t, sizeof t);
        model_config_t c2;
        FUZZ_CHECK(config_preset(&c2, "tiny", err) == 0);
        c2.batch = c.batch;
        c2.stages = c.stages;
        FUZZ_CHECK(config_from_text(&c2, t, err) == 0);
        FUZZ_CHECK(!memcmp(&c, &c2, sizeof c));
        FUZZ_CHECK(config_hash(&c) == config_hash(&c2));
    }
    free(text);
    return 0;
}

void fuzz_seeds(fuzz_emit_fn emit, void *ctx)
{
    static char t[8192];
    train_options_t o = train_defaults();
    size_t n = train_options_to_text(&o, t, sizeof t);
    emit(ctx, "run-defaults", (const uint8_t *)t, n);
    o.optimizer = TRAIN_DEMO;
    o.demo.vfmt = DEMO_VAL_SIGN;
    o.demo.chunk = 16;
    o.demo.k = 9;
    o.demo.imode = DEMO_IDX_SHARED;
    o.demo.update = DEMO_UPDATE_RMS;
    o.codec = CODEC_INT4;
    o.codec_block = 32;
    o.opt.schedule = 1;
    memset(o.data_sha256, 'a', 64);
    o.data_sha256[64] = 0;
    snprintf(o.data_url, sizeof o.data_url, "https://example.org/corpus.txt");
    n = train_options_to_text(&o, t, sizeof t);
    emit(ctx, "run-demo-sign", (const uint8_t *)t, n);
    model_config_t c;
    config_preset(&c, "small", NULL);
    n = config_to_text(&c, t, sizeof t);
    emit(ctx, "config-small", (const uint8_t *)t, n);
}
