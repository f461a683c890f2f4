/* hf_model.h — the model in the Hugging Face LLaMA layout (LlamaForCausalLM): tensor
 * names, model.safetensors and config.json, written and read.
 *
 * The mapping is one to one, with no transposition or permutation, because the stage's
 * conventions are already those of the HF code (kernels.h, model/stage.c):
 * - linear weights are (out, in), y = x W^T, like torch.nn.Linear;
 * - RoPE rotates halves (x[i], x[i + HS/2]) with frequency theta^(-2i/HS), which is HF's
 *   rotate_half, so q and k rows keep their order (no permute() as for Meta checkpoints);
 * - RMSNorm is x * rsqrt(mean(x^2) + eps) * w, attention is scaled by 1/sqrt(HS), the MLP
 *   is down(silu(gate(x)) * up(x)), the LM head is not tied to the embedding.
 *
 *   ours                              HF
 *   tok_embeddings.weight             model.embed_tokens.weight
 *   layers.N.attention_norm.weight    model.layers.N.input_layernorm.weight
 *   layers.N.attention.wq|wk|wv|wo    model.layers.N.self_attn.q|k|v|o_proj.weight
 *   layers.N.ffn_norm.weight          model.layers.N.post_attention_layernorm.weight
 *   layers.N.feed_forward.w1|w3|w2    model.layers.N.mlp.gate|up|down_proj.weight
 *   norm.weight                       model.norm.weight
 *   output.weight                     lm_head.weight
 *
 * Not for: finding checkpoints (assemble.h) or generating text (tools/cmd_sample.c). */
#ifndef SWARMTRAIN_HF_MODEL_H
#define SWARMTRAIN_HF_MODEL_H

#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

#define HF_MODEL_WEIGHTS "model.safetensors"
#define HF_MODEL_CONFIG  "config.json"

/* The HF name of one of our tensor names into out. 0, or STATUS_ENOTFOUND. */
int hf_model_name(const char *ours, char *out, size_t n);

/* Writes dir/model.safetensors (dtype SAFETENSORS_F32 or SAFETENSORS_BF16; every stage's
 * tensors, in the order of the layers; metadata "format": "pt", "swarmtrain.config" (the
 * model's config_to_text), "swarmtrain.step" and, when not NULL, "swarmtrain.run") and
 * dir/config.json. Creates dir when it does not exist. 0 or a status with err. */
int hf_model_save(model_t *m, const char *dir, int dtype, int64_t step, const char *run_text,
                  char *err);

/* Loads every parameter of m from a safetensors file in this layout (F32, BF16 or F16). All
 * or nothing: a tensor missing, of the wrong shape, or a tensor in the file that m has no
 * place for, and m is untouched; STATUS_EINVAL or the reader's status with err. */
int hf_model_load(model_t *m, const char *path, char *err);

/* Reads a model shape from dir/config.json (hidden_size, intermediate_size,
 * num_hidden_layers, num_attention_heads, vocab_size, and when present num_key_value_heads
 * (must equal the heads), rms_norm_eps, rope_theta, max_position_embeddings as seq,
 * tie_word_embeddings (must be false)) into cfg with batch 1 and stages 1. */
int hf_model_read_config(const char *dir, model_config_t *cfg, char *err);

/* The config.json text for cfg (dtype names torch_dtype) into buf; its length. */
size_t hf_model_config_json(const model_config_t *cfg, int dtype, char *buf, size_t n);

#endif
