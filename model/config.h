/* config.h — the model's shape: named presets, overrides by key, validation, and a
 * canonical text form whose hash identifies a run's model.
 * Not for: training hyper-parameters (train.h) or swarm settings. */
#ifndef SWARMTRAIN_CONFIG_H
#define SWARMTRAIN_CONFIG_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int vocab;        /* 256: byte-level */
    int dim;          /* d_model */
    int n_layers;     /* transformer blocks in the whole model */
    int n_heads;      /* attention heads; dim % n_heads == 0, head size even */
    int ffn;          /* SwiGLU hidden size */
    int seq;          /* tokens per sequence */
    int batch;        /* sequences per microbatch */
    int stages;       /* pipeline stages; n_layers % stages == 0 */
    float norm_eps;   /* RMSNorm epsilon, 1e-5 */
    float rope_theta; /* 10000 */
} model_config_t;

/* Fills cfg with a named preset ("tiny", "small", "medium": dim 512, 12 layers, seq 512,
 * 38.2 M parameters, for learning benchmarks on a CPU; "large": dim 1024, 24 layers, seq
 * 1024, for GPU benchmarks). Returns 0, or STATUS_EINVAL with the known names in err. */
int config_preset(model_config_t *cfg, const char *name, char *err);

/* Sets one field by key ("dim", "layers", "heads", "ffn", "seq", "batch", "stages",
 * "vocab", "norm_eps", "rope_theta") from text. Returns 0 or STATUS_EINVAL. */
int config_set(model_config_t *cfg, const char *key, const char *value, char *err);

/* Checks every constraint; on failure returns STATUS_EINVAL with a message saying
 * which field is wrong and why. */
int config_validate(const model_config_t *cfg, char *err);

/* Canonical "key=value\n" text of the fields that shape the model (not batch or
 * stages' placement). Returns the length written (truncated to n-1, always 0-ended). */
size_t config_to_text(const model_config_t *cfg, char *buf, size_t n);

/* Parses text written by config_to_text (unknown keys are refused). */
int config_from_text(model_config_t *cfg, const char *text, char *err);

/* 64-bit FNV-1a of the canonical text: equal configs hash equal everywhere. */
uint64_t config_hash(const model_config_t *cfg);

/* Parameters of the whole model, and model FLOPs per trained token (forward +
 * backward): 6 x matrix parameters (LM head included, embedding excluded)
 * + 12 x layers x seq x dim, the convention of ANCHORS.md. */
size_t config_num_params(const model_config_t *cfg);
double config_flops_per_token(const model_config_t *cfg);

#endif
