#!/usr/bin/env python3
"""ref_llama.py — checks a `swarmtrain export` against an independent LLaMA forward pass.

Loads DIR/model.safetensors with the `safetensors` package and DIR/config.json, runs
the Hugging Face LlamaForCausalLM computation (RMSNorm, rotate_half RoPE, causal
attention, SwiGLU MLP, untied head; written out below in numpy, float64, after
transformers' modeling_llama.py), and compares with the swarmtrain binary on the same
prompt:
  - the logits of every prompt position (`swarmtrain sample --logits`): max abs diff;
  - the greedy continuation (`swarmtrain sample --temperature 0 --ids`).
When torch and transformers are importable it also loads DIR with
LlamaForCausalLM.from_pretrained and compares its logits and greedy output the same way.

Not part of the build or the tests (it needs numpy and safetensors from pip):
  python3 tools/ref_llama.py --bin build/tools/swarmtrain --model DIR --prompt 'And God'
Exit status 0 when logits agree within --tol (default 1e-4) and the texts are equal.

--bench: the speed reference of `swarmtrain bench model`, which runs it in the same
command: the same model (sizes given as options) written in PyTorch, trained on random
tokens with AdamW on the CPU with --threads threads (ANCHORS.md's reference); prints
"ref_llama bench: tokens/s X torch VERSION threads N steps S". Exit 3 when torch is not
importable.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

try:  # the export check needs both; --bench needs only torch
    import numpy as np
    from safetensors.numpy import load_file
except ImportError:
    np = load_file = None


def rms_norm(x, w, eps):
    var = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(var + eps) * w


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def llama_logits(W, cfg, ids):
    """HF LlamaForCausalLM forward for one sequence of token ids -> (T, vocab)."""
    C = cfg["hidden_size"]
    H = cfg["num_attention_heads"]
    KV = cfg.get("num_key_value_heads", H)
    hd = cfg.get("head_dim", C // H)
    L = cfg["num_hidden_layers"]
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_theta", 10000.0)
    assert KV == H, "grouped-query attention not used by swarmtrain"
    T = len(ids)
    x = W["model.embed_tokens.weight"][ids]  # (T, C)
    inv_freq = 1.0 / (theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
    freqs = np.outer(np.arange(T, dtype=np.float64), inv_freq)
    emb = np.concatenate([freqs, freqs], axis=-1)
    cos, sin = np.cos(emb), np.sin(emb)  # (T, hd)
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, H, hd).transpose(1, 0, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T


def greedy(logits_fn, ids, n, ctx):
    ids = list(ids)
    for _ in range(n):
        window = ids[-ctx:]
        ids.append(int(np.argmax(logits_fn(window)[-1])))
    return ids


def text(ids):
    return bytes(i if i < 256 else ord("?") for i in ids).decode("latin-1")


def bench(a):
    """Training-step tokens/s of the model in PyTorch on the CPU: forward, backward, AdamW."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("ref_llama bench: torch not importable", file=sys.stderr)
        return 3
    import time
    torch.manual_seed(0)
    torch.set_num_threads(a.threads)
    D, L, H, FF, T, B, V = a.dim, a.layers, a.heads, a.ffn, a.seq, a.batch, a.vocab
    hd = D // H

    def mat(*shape):
        return torch.nn.Parameter(torch.randn(*shape) * 0.02)

    def ones(n):
        return torch.nn.Parameter(torch.ones(n))

    emb, head, norm = mat(V, D), mat(V, D), ones(D)
    blocks = [dict(n1=ones(D), wqkv=mat(3 * D, D), wo=mat(D, D), n2=ones(D),
                   w13=mat(2 * FF, D), w2=mat(D, FF)) for _ in range(L)]
    inv = 1.0 / (a.rope_theta ** (torch.arange(0, hd, 2).float() / hd))
    fr = torch.outer(torch.arange(T).float(), inv)
    cos, sin = torch.cat([fr.cos()] * 2, -1), torch.cat([fr.sin()] * 2, -1)
    mask = torch.full((T, T), float("-inf")).triu(1)

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + a.norm_eps) * w

    def rot(x):
        h = x.shape[-1] // 2
        return torch.cat([-x[..., h:], x[..., :h]], -1)

    def attend(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        s = q @ k.transpose(-1, -2) / hd ** 0.5 + mask
        return s.softmax(-1) @ v

    def loss_of(tok, tgt):
        x = emb[tok]
        for b in blocks:
            q, k, v = (rms(x, b["n1"]) @ b["wqkv"].T).split(D, -1)
            q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
            q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
            x = x + attend(q, k, v).transpose(1, 2).reshape(B, T, D) @ b["wo"].T
            g, u = (rms(x, b["n2"]) @ b["w13"].T).chunk(2, -1)
            x = x + (F.silu(g) * u) @ b["w2"].T
        return F.cross_entropy((rms(x, norm) @ head.T).view(-1, V), tgt.view(-1))

    decay = [emb, head] + [b[n] for b in blocks for n in ("wqkv", "wo", "w13", "w2")]
    other = [norm] + [b[n] for b in blocks for n in ("n1", "n2")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": other, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    tok = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    for s in range(-2, a.steps):  # two untimed warm-up steps, as bench model
        if s == 0:
            t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_of(tok, tgt).backward()
        opt.step()
    dt = time.perf_counter() - t0
    print(f"ref_llama bench: tokens/s {B * T * a.steps / dt:.1f} torch {torch.__version__} "
          f"threads {a.threads} steps {a.steps}")
    return 0


def main():
    if "--bench" in sys.argv[1:]:
        bp = argparse.ArgumentParser(description="the PyTorch speed reference of bench model")
        bp.add_argument("--bench", action="store_true")
        for name, default in (("dim", 256), ("layers", 8), ("heads", 4), ("ffn", 688),
                              ("seq", 256), ("batch", 8), ("vocab", 256), ("threads", 2),
                              ("steps", 8)):
            bp.add_argument("--" + name, type=int, default=default)
        bp.add_argument("--norm-eps", type=float, default=1e-5)
        bp.add_argument("--rope-theta", type=float, default=10000.0)
        return bench(bp.parse_args())
    if np is None:
        print("ref_llama: numpy and safetensors are needed (pip install numpy safetensors)",
              file=sys.stderr)
        return 2
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", required=True, help="the swarmtrain binary")
    ap.add_argument("--model", required=True, help="an export directory")
    ap.add_argument("--prompt", default="And God said")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.model, "config.json")))
    path = os.path.join(a.model, "model.safetensors")
    try:
        raw = load_file(path)
        W = {k: v.astype(np.float64) for k, v in raw.items()}
    except TypeError:  # bfloat16, which numpy lacks: read it with torch instead
        from safetensors.torch import load_file as load_torch
        raw = load_torch(path)
        W = {k: v.double().numpy() for k, v in raw.items()}
    V = cfg["vocab_size"]
    ctx = cfg["max_position_embeddings"]
    prompt = list(a.prompt.encode())

    with tempfile.TemporaryDirectory() as tmp:
        lpath = os.path.join(tmp, "logits.f32")
        out = subprocess.run(
            [a.bin, "sample", "--model", a.model, "--prompt", a.prompt, "--tokens",
             str(a.tokens), "--temperature", "0", "--ids", "--logits", lpath],
            check=True, capture_output=True, text=True).stdout
        window = prompt[-ctx:]  # sample sees the last max_position_embeddings tokens
        ours = np.fromfile(lpath, dtype="<f4").reshape(len(window), V)
    ours_ids = prompt + [int(t) for t in out.split()]

    ref = llama_logits(W, cfg, window)
    diff = float(np.max(np.abs(ref - ours)))
    ref_ids = greedy(lambda w: llama_logits(W, cfg, w), prompt, a.tokens, ctx)
    print(f"tensors: {len(raw)} ({', '.join(sorted({str(v.dtype) for v in raw.values()}))}); "
          f"prompt {len(prompt)} tokens (compared: the last {len(window)}); "
          f"logits max |ref| {np.max(np.abs(ref)):.4f}")
    print(f"numpy reference: max abs logit difference {diff:.3e} (tolerance {a.tol:g})")
    print(f"swarmtrain greedy: {text(ours_ids)!r}")
    print(f"reference greedy:  {text(ref_ids)!r}")
    same = ours_ids == ref_ids
    print(f"greedy continuations equal: {same}")
    ok = diff <= a.tol and same

    try:
        import torch
        from transformers import LlamaForCausalLM
    except ImportError:
        print("transformers/torch not importable: the numpy reference above stands alone")
    else:
        m = LlamaForCausalLM.from_pretrained(a.model, torch_dtype=torch.float32).eval()
        with torch.no_grad():
            hf = m(torch.tensor([window])).logits[0].double().numpy()
            # transformers keeps absolute positions past max_position_embeddings where
            # sample slides its window: compare within the window
            n = min(a.tokens, max(0, ctx - len(prompt)))
            x = torch.tensor([prompt])
            hf_ids = prompt if n == 0 else m.generate(
                x, attention_mask=torch.ones_like(x), max_new_tokens=n, do_sample=False,
                pad_token_id=0)[0].tolist()
        hdiff = float(np.max(np.abs(hf - ours)))
        print(f"transformers LlamaForCausalLM: max abs logit difference {hdiff:.3e}")
        same_hf = hf_ids == ours_ids[:len(hf_ids)]
        print(f"transformers greedy ({len(hf_ids) - len(prompt)} tokens): {text(hf_ids)!r} "
              f"equal: {same_hf}")
        ok = ok and hdiff <= a.tol and same_hf
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
