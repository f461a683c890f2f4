/* config.c — model presets, overrides, validation, canonical text and hash. */
#include "model/config.h"
#include "common/rng.h"
#include "common/status.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int config_preset(model_config_t *cfg, const char *name, char *err)
{
    model_config_t c = {.vocab = 256, .norm_eps = 1e-5f, .rope_theta = 10000.0f, .stages = 1};
    if (!strcmp(name, "tiny")) {
        c.dim = 64, c.n_layers = 4, c.n_heads = 2, c.ffn = 176, c.seq = 64, c.batch = 16;
    } else if (!strcmp(name, "small")) {
        c.dim = 256, c.n_layers = 8, c.n_heads = 4, c.ffn = 688, c.seq = 256, c.batch = 8;
    } else if (!strcmp(name, "medium")) {
        /* The CPU benchmark of learning at length (bench learn, issue 27): 38.2 M
         * parameters, seq 512; 12 layers cut into 2, 3, 4, 6 or 12 stages; head size 64;
         * ffn keeps small's ratio, 2.6875 x dim. */
        c.dim = 512, c.n_layers = 12, c.n_heads = 8, c.ffn = 1376, c.seq = 512, c.batch = 4;
    } else if (!strcmp(name, "large")) {
        /* A GPU benchmark size (~300 M parameters, ~18 GB of device memory for one
         * stage at this batch); ffn keeps small's ratio, 2.6875 x dim. */
        c.dim = 1024, c.n_layers = 24, c.n_heads = 16, c.ffn = 2752, c.seq = 1024, c.batch = 8;
    } else {
        return status_set(err, STATUS_EINVAL, "unknown config '%s' (known: tiny, small, medium, large)",
                          name);
    }
    *cfg = c;
    return 0;
}

static int parse_int(const char *key, const char *v, int *out, char *err)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < -2147483647L || x > 2147483647L)
        return status_set(err, STATUS_EINVAL, "%s: '%s' is not an integer", key, v);
    *out = (int)x;
    return 0;
}

static int parse_float(const char *key, const char *v, float *out, char *err)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    /* a float's range: 1e39 fits a double but reads as an infinite rope_theta */
    if (errno || end == v || *end || !isfinite((float)x))
        return status_set(err, STATUS_EINVAL, "%s: '%s' is not a number", key, v);
    *out = (float)x;
    return 0;
}

int config_set(model_config_t *cfg, const char *key, const char *value, char *err)
{
    static const struct {
        const char *key;
        size_t off;
    } ints[] = {
        {"vocab", offsetof(model_config_t, vocab)},
        {"dim", offsetof(model_config_t, dim)},
        {"layers", offsetof(model_config_t, n_layers)},
        {"heads", offsetof(model_config_t, n_heads)},
        {"ffn", offsetof(model_config_t, ffn)},
        {"seq", offsetof(model_config_t, seq)},
        {"batch", offsetof(model_config_t, batch)},
        {"stages", offsetof(model_config_t, stages)},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (!strcmp(key, ints[i].key))
            return parse_int(key, value, (int *)((char *)cfg + ints[i].off), err);
    if (!strcmp(key, "norm_eps")) return parse_float(key, value, &cfg->norm_eps, err);
    if (!strcmp(key, "rope_theta")) return parse_float(key, value, &cfg->rope_theta, err);
    return status_set(err, STATUS_EINVAL, "unknown config key '%s'", key);
}

int config_validate(const model_config_t *c, char *err)
{
    if (c->vocab < 256 || c->vocab > (1 << 24))
        return status_set(err, STATUS_EINVAL,
                          "vocab %d: must be in [256, 16777216] (the data is bytes)", c->vocab);
    if (c->dim <= 0) return status_set(err, STATUS_EINVAL, "dim %d: must be positive", c->dim);
    if (c->n_layers <= 0)
        return status_set(err, STATUS_EINVAL, "layers %d: need at least one layer", c->n_layers);
    if (c->n_heads <= 0)
        return status_set(err, STATUS_EINVAL, "heads %d: must be positive", c->n_heads);
    if (c->dim % c->n_heads)
        return status_set(err, STATUS_EINVAL, "dim %d is not divisible by heads %d", c->dim,
                          c->n_heads);
    if ((c->dim / c->n_heads) % 2)
        return status_set(err, STATUS_EINVAL,
                          "head size %d (dim/heads) must be even for rotary embedding",
                          c->dim / c->n_heads);
    if (c->ffn <= 0) return status_set(err, STATUS_EINVAL, "ffn %d: must be positive", c->ffn);
    if (c->seq <= 0) return status_set(err, STATUS_EINVAL, "seq %d: must be positive", c->seq);
    if (c->batch <= 0)
        return status_set(err, STATUS_EINVAL, "batch %d: must be positive", c->batch);
    if (c->stages <= 0)
        return status_set(err, STATUS_EINVAL, "stages %d: must be positive", c->stages);
    if (c->n_layers % c->stages)
        return status_set(err, STATUS_EINVAL, "stages %d do not divide layers %d into equal stages",
                          c->stages, c->n_layers);
    if (!(c->norm_eps > 0 && c->norm_eps < 1))
        return status_set(err, STATUS_EINVAL, "norm_eps %g: must be in (0, 1)",
                          (double)c->norm_eps);
    if (!(c->rope_theta > 1))
        return status_set(err, STATUS_EINVAL, "rope_theta %g: must be > 1", (double)c->rope_theta);
    /* Keep every buffer's element count well inside int range used by kernel sizes. */
    /* in double: 3 * dim and 2 * ffn overflow an int for values config_set accepts */
    double v = c->vocab, d3 = 3.0 * c->dim, f2 = 2.0 * c->ffn;
    double biggest = (double)c->batch * c->seq * (v > d3 ? (v > f2 ? v : f2) : (d3 > f2 ? d3 : f2));
    if (biggest > 2147483647.0 || (double)c->vocab * c->dim > 2147483647.0)
        return status_set(err, STATUS_EINVAL,
                          "config too large: a buffer would exceed 2^31 elements");
    return 0;
}

size_t config_to_text(const model_config_t *c, char *buf, size_t n)
{
    int w = snprintf(
        buf, n,
        "vocab=%d\ndim=%d\nlayers=%d\nheads=%d\nffn=%d\nseq=%d\nnorm_eps=%.9g\nrope_theta=%.9g\n",
        c->vocab, c->dim, c->n_layers, c->n_heads, c->ffn, c->seq, (double)c->norm_eps,
        (double)c->rope_theta);
    if (w < 0) return 0;
    return (size_t)w < n ? (size_t)w : n ? n - 1 : 0;
}

int config_from_text(model_config_t *cfg, const char *text, char *err)
{
    char line[128];
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        if (len >= sizeof line)
            return status_set(err, STATUS_EMALFORMED, "config text: line too long");
        memcpy(line, p, len);
        line[len] = 0;
        p += len + (nl ? 1 : 0);
        if (!len) continue;
        char *eq = strchr(line, '=');
        if (!eq) return status_set(err, STATUS_EMALFORMED, "config text: '%s' has no '='", line);
        *eq = 0;
        int rc = config_set(cfg, line, eq + 1, err);
        if (rc) return rc;
    }
    return 0;
}

uint64_t config_hash(const model_config_t *cfg)
{
    char text[512];
    config_to_text(cfg, text, sizeof text);
    return rng_hash_str(text);
}

size_t config_num_params(const model_config_t *c)
{
    size_t C = (size_t)c->dim, F = (size_t)c->ffn, V = (size_t)c->vocab;
    size_t per_layer = 2 * C + 4 * C * C + 3 * C * F;
    return V * C + (size_t)c->n_layers * per_layer + C + V * C;
}

double config_flops_per_token(const model_config_t *c)
{
    double C = c->dim, F = c->ffn, V = c->vocab;
    double matrix = c->n_layers * (4 * C * C + 3 * C * F) + V * C;
    return 6.0 * matrix + 12.0 * c->n_layers * c->seq * C;
}
