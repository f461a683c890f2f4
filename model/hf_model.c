/* hf_model.c — our tensors under their Hugging Face LLaMA names, in and out of
 * model.safetensors, and config.json. */
#include "model/hf_model.h"
#include "common/status.h"
#include "model/safetensors.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const struct {
    const char *ours, *hf;
} block_names[] = {
    {"attention_norm.weight", "input_layernorm.weight"},
    {"attention.wq.weight", "self_attn.q_proj.weight"},
    {"attention.wk.weight", "self_attn.k_proj.weight"},
    {"attention.wv.weight", "self_attn.v_proj.weight"},
    {"attention.wo.weight", "self_attn.o_proj.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"feed_forward.w1.weight", "mlp.gate_proj.weight"},
    {"feed_forward.w3.weight", "mlp.up_proj.weight"},
    {"feed_forward.w2.weight", "mlp.down_proj.weight"},
};

int hf_model_name(const char *ours, char *out, size_t n)
{
    const char *hf = NULL;
    if (!strcmp(ours, "tok_embeddings.weight"))
        hf = "model.embed_tokens.weight";
    else if (!strcmp(ours, "norm.weight"))
        hf = "model.norm.weight";
    else if (!strcmp(ours, "output.weight"))
        hf = "lm_head.weight";
    if (hf) return (size_t)snprintf(out, n, "%s", hf) < n ? 0 : STATUS_EINVAL;
    int layer, used = 0;
    if (sscanf(ours, "layers.%d.%n", &layer, &used) != 1 || used == 0 || layer < 0)
        return STATUS_ENOTFOUND;
    for (size_t i = 0; i < sizeof block_names / sizeof block_names[0]; i++)
        if (!strcmp(ours + used, block_names[i].ours))
            return (size_t)snprintf(out, n, "model.layers.%d.%s", layer, block_names[i].hf) < n
                       ? 0
                       : STATUS_EINVAL;
    return STATUS_ENOTFOUND;
}

size_t hf_model_config_json(const model_config_t *c, int dtype, char *buf, size_t n)
{
    int w = snprintf(buf, n,
                     "{\n"
                     "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                     "  \"model_type\": \"llama\",\n"
                     "  \"hidden_size\": %d,\n"
                     "  \"intermediate_size\": %d,\n"
                     "  \"num_hidden_layers\": %d,\n"
                     "  \"num_attention_heads\": %d,\n"
                     "  \"num_key_value_heads\": %d,\n"
                     "  \"head_dim\": %d,\n"
                     "  \"vocab_size\": %d,\n"
                     "  \"max_position_embeddings\": %d,\n"
                     "  \"rms_norm_eps\": %.9g,\n"
                     "  \"rope_theta\": %.9g,\n"
                     "  \"hidden_act\": \"silu\",\n"
                     "  \"attention_bias\": false,\n"
                     "  \"mlp_bias\": false,\n"
                     "  \"tie_word_embeddings\": false,\n"
                     "  \"initializer_range\": 0.02,\n"
                     "  \"use_cache\": true,\n"
                     "  \"bos_token_id\": null,\n"
                     "  \"eos_token_id\": null,\n"
                     "  \"torch_dtype\": \"%s\"\n"
                     "}\n",
                     c->dim, c->ffn, c->n_layers, c->n_heads, c->n_heads, c->dim / c->n_heads,
                     c->vocab, c->seq, (double)c->norm_eps, (double)c->rope_theta,
                     dtype == SAFETENSORS_BF16 ? "bfloat16" : "float32");
    if (w < 0) return 0;
    return (size_t)w < n ? (size_t)w : n ? n - 1 : 0;
}

static int write_text(const char *path, const char *text, char *err)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof tmp, "%s.tmp", path) >= sizeof tmp)
        return status_set(err, STATUS_EINVAL, "%s: path too long", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return status_set(err, STATUS_EIO, "%s: cannot create: %s", tmp, strerror(errno));
    int ok = fputs(text, f) >= 0;
    if (fclose(f)) ok = 0;
    if (!ok || rename(tmp, path)) {
        remove(tmp);
        return status_set(err, STATUS_EIO, "%s: cannot write", path);
    }
    return 0;
}

int hf_model_save(model_t *m, const char *dir, int dtype, int64_t step, const char *run_text,
                  char *err)
{
    if (mkdir(dir, 0755) && errno != EEXIST)
        return status_set(err, STATUS_EIO, "%s: cannot create the directory: %s", dir,
                          strerror(errno));
    int S = model_num_stages(m), total = 0;
    if (S < 1) return status_set(err, STATUS_EINVAL, "export: a model with no stage");
    for (int s = 0; s < S; s++) {
        int n;
        stage_tensors(model_stage(m, s), &n);
        total += n;
    }
    safetensors_tensor_t *t = calloc((size_t)total, sizeof *t);
    char(*names)[96] = calloc((size_t)total, sizeof *names);
    float **host = calloc((size_t)S, sizeof *host);
    int rc = 0, at = 0;
    if (!t || !names || !host) {
        rc = status_set(err, STATUS_ENOMEM, "export: out of memory");
        goto done;
    }
    for (int s = 0; s < S; s++) {
        stage_t *st = model_stage(m, s);
        kern_t *k = stage_kern(st);
        int n;
        const stage_tensor_t *tab = stage_tensors(st, &n);
        size_t bytes = stage_num_params(st) * sizeof(float);
        if (!(host[s] = malloc(bytes))) {
            rc = status_set(err, STATUS_ENOMEM, "export: out of memory");
            goto done;
        }
        kern_download(k, host[s], stage_params(st), bytes);
        for (int i = 0; i < n; i++, at++) {
            if (hf_model_name(tab[i].name, names[at], sizeof names[at])) {
                rc = status_set(err, STATUS_EINVAL, "export: no HF name for %s", tab[i].name);
                goto done;
            }
            for (size_t j = 0; j < tab[i].numel; j++)
                if (!isfinite(host[s][tab[i].offset + j])) {
                    rc = status_set(err, STATUS_EINVAL,
                                    "export: %s holds a non-finite value; refusing to export",
                                    tab[i].name);
                    goto done;
                }
            t[at].name = names[at];
            t[at].ndim = tab[i].ndim;
            if (tab[i].ndim == 1) {
                t[at].shape[0] = tab[i].cols;
            } else {
                t[at].shape[0] = tab[i].rows;
                t[at].shape[1] = tab[i].cols;
            }
            t[at].data = host[s] + tab[i].offset;
        }
    }
    const model_config_t *c = stage_config(model_stage(m, 0));
    char cfg_text[512], step_text[32], path[4096], json[2048];
    config_to_text(c, cfg_text, sizeof cfg_text);
    snprintf(step_text, sizeof step_text, "%" PRId64, step);
    const char *meta[] = {"format",          "pt",      "swarmtrain.config", cfg_text,
                          "swarmtrain.step", step_text, "swarmtrain.run",    run_text};
    snprintf(path, sizeof path, "%s/%s", dir, HF_MODEL_WEIGHTS);
    if ((rc = safetensors_write(path, t, total, dtype, meta, run_text ? 4 : 3, err))) goto done;
    hf_model_config_json(c, dtype, json, sizeof json);
    snprintf(path, sizeof path, "%s/%s", dir, HF_MODEL_CONFIG);
    rc = write_text(path, json, err);
done:
    for (int s = 0; host && s < S; s++) free(host[s]);
    free(host);
    free(names);
    free(t);
    return rc;
}

int hf_model_load(model_t *m, const char *path, char *err)
{
    safetensors_t *f = safetensors_open(path, err);
    if (!f) return STATUS_EMALFORMED;
    int S = model_num_stages(m), rc = 0, used = 0;
    float **host = S > 0 ? calloc((size_t)S, sizeof *host) : NULL;
    if (!host) {
        rc = status_set(err, STATUS_ENOMEM, "out of memory");
        goto done;
    }
    for (int s = 0; s < S; s++) {
        stage_t *st = model_stage(m, s);
        int n;
        const stage_tensor_t *tab = stage_tensors(st, &n);
        if (!(host[s] = malloc(stage_num_params(st) * sizeof(float)))) {
            rc = status_set(err, STATUS_ENOMEM, "out of memory");
            goto done;
        }
        for (int i = 0; i < n; i++) {
            char name[96];
            if (hf_model_name(tab[i].name, name, sizeof name)) {
                rc = status_set(err, STATUS_EINVAL, "no HF name for %s", tab[i].name);
                goto done;
            }
            const safetensors_tensor_t *ft = safetensors_find(f, name);
            if (!ft) {
                rc = status_set(err, STATUS_EINVAL, "%s: no tensor %s (the model needs it)", path,
                                name);
                goto done;
            }
            int ok = tab[i].ndim == 1 ? ft->ndim == 1 && ft->shape[0] == tab[i].cols
                                      : ft->ndim == 2 && ft->shape[0] == tab[i].rows &&
                                            ft->shape[1] == tab[i].cols;
            if (!ok) {
                rc = status_set(err, STATUS_EINVAL, "%s: %s has the wrong shape for this model",
                                path, name);
                goto done;
            }
            if ((rc = safetensors_read_f32(f, name, host[s] + tab[i].offset, tab[i].numel, err)))
                goto done;
            used++;
        }
    }
    for (int i = 0; i < safetensors_count(f); i++) {
        const char *name = safetensors_at(f, i)->name;
        /* older HF exports carry the rotary table as a buffer; it is recomputed anyway */
        if (strstr(name, "rotary_emb.inv_freq")) used++;
    }
    if (used != safetensors_count(f)) {
        rc = status_set(err, STATUS_EINVAL,
                        "%s: holds %d tensors, this model has %d (another shape of model?)", path,
                        safetensors_count(f), used);
        goto done;
    }
    for (int s = 0; s < S; s++) {
        stage_t *st = model_stage(m, s);
        kern_t *k = stage_kern(st);
        kern_upload(k, stage_params(st), host[s], stage_num_params(st) * sizeof(float));
    }
done:
    for (int s = 0; host && s < S; s++) free(host[s]);
    free(host);
    safetensors_close(&f);
    return rc;
}

/* The number after "key": in a flat JSON object; 1 found, 0 absent, -1 not a number. */
static int json_number(const char *json, const char *key, double *out)
{
    char pat[80];
    snprintf(pat, sizeof pat, "\"%s\"", key);
    const char *p = strstr(json, pat);
    if (!p) return 0;
    p += strlen(pat);
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p++ != ':') return -1;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (!strncmp(p, "true", 4) || !strncmp(p, "false", 5)) {
        *out = *p == 't';
        return 1;
    }
    char *end;
    *out = strtod(p, &end);
    return end == p ? -1 : 1;
}

int hf_model_read_config(const char *dir, model_config_t *cfg, char *err)
{
    char path[4096], text[16384];
    snprintf(path, sizeof path, "%s/%s", dir, HF_MODEL_CONFIG);
    FILE *f = fopen(path, "r");
    if (!f) return status_set(err, STATUS_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t len = fread(text, 1, sizeof text - 1, f);
    int big = !feof(f);
    fclose(f);
    if (big) return status_set(err, STATUS_EMALFORMED, "%s: larger than a config should be", path);
    text[len] = 0;
    model_config_t c = {.vocab = 256,
                        .norm_eps = 1e-5f,
                        .rope_theta = 10000.0f,
                        .batch = 1,
                        .stages = 1,
                        .seq = 2048};
    static const struct {
        const char *key;
        int required;
    } keys[] = {
        {"hidden_size", 1},         {"intermediate_size", 1}, {"num_hidden_layers", 1},
        {"num_attention_heads", 1}, {"vocab_size", 1},        {"num_key_value_heads", 0},
        {"rms_norm_eps", 0},        {"rope_theta", 0},        {"max_position_embeddings", 0},
        {"tie_word_embeddings", 0}};
    double v[sizeof keys / sizeof keys[0]];
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        int r = json_number(text, keys[i].key, &v[i]);
        if (r < 0 || (r == 0 && keys[i].required))
            return status_set(err, STATUS_EMALFORMED, "%s: %s is %s", path, keys[i].key,
                              r ? "not a number" : "missing");
        if (r == 0)
            v[i] = NAN;
        else if (!(v[i] >= 0 && v[i] < 1e9))
            return status_set(err, STATUS_EMALFORMED, "%s: %s is out of range", path, keys[i].key);
    }
    c.dim = (int)v[0], c.ffn = (int)v[1], c.n_layers = (int)v[2], c.n_heads = (int)v[3];
    c.vocab = (int)v[4];
    if (!isnan(v[5]) && (int)v[5] != c.n_heads)
        return status_set(err, STATUS_EINVAL,
                          "%s: num_key_value_heads %d differs from num_attention_heads %d "
                          "(grouped-query attention is not supported)",
                          path, (int)v[5], c.n_heads);
    if (!isnan(v[6])) c.norm_eps = (float)v[6];
    if (!isnan(v[7])) c.rope_theta = (float)v[7];
    if (!isnan(v[8])) c.seq = (int)v[8];
    if (!isnan(v[9]) && v[9] != 0)
        return status_set(err, STATUS_EINVAL, "%s: tied word embeddings are not supported", path);
    if (config_validate(&c, err)) return STATUS_EINVAL;
    *cfg = c;
    return 0;
}
