#!/usr/bin/python3
"""PyTorch references of the Llama and Gemma 3 families for tests/test_llm.c,
written from the semantics of transformers' modeling_llama.py and
modeling_gemma3.py (torch 1.13 has neither them nor nn.RMSNorm nor
enable_gqa, so everything is spelled out here in torch ops).

    llm_ref.py --out DIR --seed 1

writes, for each small random configuration, DIR/case_K/ as a Hugging Face
folder (config.json + model.safetensors, the transformers names) and
DIR/case_K/ref.safetensors (ids (T,) I64 and logits (T,V) of the full
causal forward); DIR/rmsnorm.safetensors (x, weight, upstream g, y and
the gradients dx, dw of F.rms_norm's formula); DIR/gqa.safetensors (q, k,
v with fewer key/value heads, g, out and dq, dk, dv of
scaled_dot_product_attention(..., enable_gqa=True) written as
repeat_interleave + softmax).

    llm_ref.py --gguf FILE --ids 1,2,3 --out PATH [--layers N]

runs the reference on a GGUF file's tensors (llama or gemma3) dequantized
by gguf-py (data/venv/bin/python: torch + gguf), a Llama file's q/k rows
un-permuted back to HF's order and rotated with rotate_half as
transformers does (so the C side's adjacent-pair RoPE on the file's rows is
checked, not copied), and writes ids and logits to PATH; --layers N keeps
the first N layers, --random-ids N appends N ids drawn from --seed, --last
N keeps the logits of the last N positions.
"""
import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

# ---- the two architectures -----------------------------------------------


def rms_norm(x, w, eps, offset):
    """LlamaRMSNorm (w * x / rms) or Gemma3RMSNorm (x / rms * (1 + w)), in float32."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * (1.0 + w) if offset else y * w


def rope(x, pos, base, interleaved):
    """x (H,T,hd) rotated to positions pos (T): rotate_half (HF) or
    adjacent pairs (llama.cpp's NORM rope, the GGUF llama layout)."""
    hd = x.shape[-1]
    inv = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.int64).double() / hd))
    ang = pos.double()[:, None] * inv[None, :]  # (T, hd/2)
    cos, sin = ang.cos().float(), ang.sin().float()
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = a * cos - b * sin
        out[..., 1::2] = a * sin + b * cos
        return out
    h = hd // 2
    a, b = x[..., :h], x[..., h:]
    return torch.cat([a * cos - b * sin, a * sin + b * cos], dim=-1)


def attention(q, k, v, scale, window):
    """q (H,T,hd), k, v (Hkv,T,hd): causal, key j seen by query i when
    i - window < j <= i (window 0: all j <= i); kv heads repeated."""
    H, T, _ = q.shape
    g = H // k.shape[0]
    k = k.repeat_interleave(g, dim=0)
    v = v.repeat_interleave(g, dim=0)
    s = (q @ k.transpose(1, 2)) * scale
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    masked = j > i
    if window:
        masked = masked | (j <= i - window)
    s = s.masked_fill(masked, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def is_local(cfg, i):
    return cfg["gemma"] and cfg["window"] > 0 and cfg["pattern"] > 0 and (i + 1) % cfg["pattern"] != 0


def forward(cfg, W, ids, last=0):
    """Logits (T,V) of ids (T,) under weights W (the HF names); with last
    > 0 those of the last `last` positions only."""
    gem = cfg["gemma"]
    E, H, Hkv, hd, eps = cfg["E"], cfg["H"], cfg["Hkv"], cfg["hd"], cfg["eps"]
    T = ids.shape[0]
    pos = torch.arange(T)
    x = W["model.embed_tokens.weight"][ids]
    if gem:
        x = x * torch.tensor(E ** 0.5, dtype=torch.float32)
    scale = cfg["query_pre_attn_scalar"] ** -0.5 if gem else hd ** -0.5
    for i in range(cfg["L"]):
        p = "model.layers.%d." % i
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps, gem)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).view(T, H, hd).transpose(0, 1)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).view(T, Hkv, hd).transpose(0, 1)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).view(T, Hkv, hd).transpose(0, 1)
        if gem:
            q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps, True)
            k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps, True)
        local = is_local(cfg, i)
        base = cfg["rope_local"] if local else cfg["rope_theta"]
        q = rope(q, pos, base, cfg["interleaved"])
        k = rope(k, pos, base, cfg["interleaved"])
        o = attention(q, k, v, scale, cfg["window"] if local else 0)
        o = o.transpose(0, 1).reshape(T, H * hd) @ W[p + "self_attn.o_proj.weight"].T
        if gem:
            o = rms_norm(o, W[p + "post_attention_layernorm.weight"], eps, True)
            h = rms_norm(x + o, W[p + "pre_feedforward_layernorm.weight"], eps, True)
        else:
            h = rms_norm(x + o, W[p + "post_attention_layernorm.weight"], eps, False)
        x = x + o
        a = h @ W[p + "mlp.gate_proj.weight"].T
        b = h @ W[p + "mlp.up_proj.weight"].T
        act = torch.nn.functional.gelu(a, approximate="tanh") if gem else torch.nn.functional.silu(a)
        f = (act * b) @ W[p + "mlp.down_proj.weight"].T
        if gem:
            f = rms_norm(f, W[p + "post_feedforward_layernorm.weight"], eps, True)
        x = x + f
    if last > 0:
        x = x[-last:]
    x = rms_norm(x, W["model.norm.weight"], eps, gem)
    out = W.get("lm_head.weight", W["model.embed_tokens.weight"])
    logits = x @ out.T
    if cfg.get("softcap"):
        logits = torch.tanh(logits / cfg["softcap"]) * cfg["softcap"]
    return logits


# ---- random configurations saved as HF folders ------------------------------

CASES = [
    # Llama, GQA 2:1, untied, F32
    dict(gemma=False, E=48, H=4, Hkv=2, hd=12, F=80, L=2, V=61, T=11, tied=False,
         rope_theta=10000.0, eps=1e-5, dtype="F32"),
    # Llama, GQA 3:1, tied, head_dim given (H*hd != E), BF16 weights, a large base
    dict(gemma=False, E=40, H=6, Hkv=2, hd=8, F=72, L=3, V=50, T=9, tied=True,
         rope_theta=500000.0, eps=1e-6, dtype="BF16", head_dim_key=True),
    # Llama, multi-head (Hkv = H), head_dim 16 (the AVX-512 decode loop)
    dict(gemma=False, E=64, H=4, Hkv=4, hd=16, F=96, L=2, V=70, T=13, tied=True,
         rope_theta=10000.0, eps=1e-5, dtype="F32"),
    # Gemma 3, GQA 2:1, pattern 2 with a window of 5 < T, softcap, scalar != hd
    dict(gemma=True, E=32, H=4, Hkv=2, hd=16, F=64, L=4, V=67, T=14, tied=True,
         rope_theta=1000000.0, rope_local=10000.0, eps=1e-6, dtype="F32", window=5,
         pattern=2, query_pre_attn_scalar=24, softcap=30.0),
    # Gemma 3, GQA 3:1, layer_types list (pattern 3), window 4, untied, hd 32
    dict(gemma=True, E=48, H=3, Hkv=1, hd=32, F=80, L=3, V=53, T=12, tied=False,
         rope_theta=1000000.0, rope_local=10000.0, eps=1e-6, dtype="F32", window=4,
         pattern=3, query_pre_attn_scalar=32, layer_types=True),
    # Gemma 3, GQA 4:1, T = 150 > the fused kernels' tiles (64 queries, 128 keys), window 40
    dict(gemma=True, E=32, H=4, Hkv=1, hd=16, F=48, L=2, V=41, T=150, tied=True,
         rope_theta=1000000.0, rope_local=10000.0, eps=1e-6, dtype="F32", window=40,
         pattern=2, query_pre_attn_scalar=16),
    # Llama, GQA 3:1, T = 140, untied
    dict(gemma=False, E=48, H=6, Hkv=2, hd=8, F=64, L=2, V=45, T=140, tied=False,
         rope_theta=10000.0, eps=1e-5, dtype="F32"),
]


def hf_config(c):
    j = {
        "architectures": ["Gemma3ForCausalLM" if c["gemma"] else "LlamaForCausalLM"],
        "hidden_size": c["E"], "intermediate_size": c["F"], "num_attention_heads": c["H"],
        "num_key_value_heads": c["Hkv"], "num_hidden_layers": c["L"], "vocab_size": c["V"],
        "rms_norm_eps": c["eps"], "rope_theta": c["rope_theta"], "tie_word_embeddings": c["tied"],
        "max_position_embeddings": 256, "rope_scaling": None, "torch_dtype": "float32",
    }
    if c["gemma"]:
        j.update({"model_type": "gemma3_text", "head_dim": c["hd"], "sliding_window": c["window"],
                  "rope_local_base_freq": c["rope_local"],
                  "query_pre_attn_scalar": c["query_pre_attn_scalar"],
                  "final_logit_softcapping": c.get("softcap"), "attn_logit_softcapping": None,
                  "hidden_activation": "gelu_pytorch_tanh"})
        if c.get("layer_types"):
            j["layer_types"] = ["full_attention" if (i + 1) % c["pattern"] == 0 else "sliding_attention"
                                for i in range(c["L"])]
        else:
            j["sliding_window_pattern"] = c["pattern"]
    else:
        j.update({"model_type": "llama", "hidden_act": "silu", "attention_bias": False,
                  "mlp_bias": False})
        if c.get("head_dim_key"):
            j["head_dim"] = c["hd"]
    return j


def random_weights(c, gen):
    E, H, Hkv, hd, F, V = c["E"], c["H"], c["Hkv"], c["hd"], c["F"], c["V"]

    def lin(o, i):
        return torch.randn(o, i, generator=gen) / math.sqrt(i)

    def norm(n):  # Gemma stores w of (1 + w); Llama w itself
        return 0.3 * torch.randn(n, generator=gen) + (0.0 if c["gemma"] else 1.0)

    W = {"model.embed_tokens.weight": torch.randn(V, E, generator=gen) * (0.3 if c["gemma"] else 1.0),
         "model.norm.weight": norm(E)}
    if not c["tied"]:
        W["lm_head.weight"] = lin(V, E)
    for i in range(c["L"]):
        p = "model.layers.%d." % i
        W[p + "self_attn.q_proj.weight"] = lin(H * hd, E)
        W[p + "self_attn.k_proj.weight"] = lin(Hkv * hd, E)
        W[p + "self_attn.v_proj.weight"] = lin(Hkv * hd, E)
        W[p + "self_attn.o_proj.weight"] = lin(E, H * hd)
        W[p + "mlp.gate_proj.weight"] = lin(F, E)
        W[p + "mlp.up_proj.weight"] = lin(F, E)
        W[p + "mlp.down_proj.weight"] = lin(E, F)
        W[p + "input_layernorm.weight"] = norm(E)
        W[p + "post_attention_layernorm.weight"] = norm(E)
        if c["gemma"]:
            W[p + "pre_feedforward_layernorm.weight"] = norm(E)
            W[p + "post_feedforward_layernorm.weight"] = norm(E)
            W[p + "self_attn.q_norm.weight"] = norm(hd)
            W[p + "self_attn.k_norm.weight"] = norm(hd)
    if c["dtype"] == "BF16":  # the file keeps bf16; the reference computes with its values
        W = {k: v.to(torch.bfloat16) for k, v in W.items()}
    return W


def ref_cfg(c, interleaved=False):
    return dict(gemma=c["gemma"], E=c["E"], H=c["H"], Hkv=c["Hkv"], hd=c["hd"], L=c["L"],
                eps=c["eps"], rope_theta=c["rope_theta"], rope_local=c.get("rope_local", 10000.0),
                window=c.get("window", 0), pattern=c.get("pattern", 0),
                query_pre_attn_scalar=c.get("query_pre_attn_scalar", c["hd"]),
                softcap=c.get("softcap"), interleaved=interleaved)


def write_cases(out, gen):
    for n, c in enumerate(CASES):
        d = os.path.join(out, "case_%d" % n)
        os.makedirs(d, exist_ok=True)
        W = random_weights(c, gen)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(hf_config(c), f, indent=2)
        safetensors_io.save(os.path.join(d, "model.safetensors"), W, {"format": "pt"})
        Wf = {k: v.float() for k, v in W.items()}
        ids = torch.randint(0, c["V"], (c["T"],), generator=gen)
        with torch.no_grad():
            logits = forward(ref_cfg(c), Wf, ids)
        safetensors_io.save(os.path.join(d, "ref.safetensors"), {"ids": ids, "logits": logits},
                            {"cases": str(len(CASES))})


def write_rmsnorm(out, gen):
    x = torch.randn(3, 5, 24, generator=gen, dtype=torch.float64)
    x[1, 2] *= 40.0  # a row far from unit scale
    w = torch.randn(24, generator=gen, dtype=torch.float64)
    g = torch.randn(3, 5, 24, generator=gen, dtype=torch.float64)
    eps = 1e-5
    x.requires_grad_(True)
    w.requires_grad_(True)
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w  # F.rms_norm
    y.backward(g)
    t = {"x": x.detach(), "weight": w.detach(), "g": g, "y": y.detach(), "dx": x.grad, "dw": w.grad}
    # eps=None: torch.finfo(float32).eps, no weight
    y2 = x.detach() * torch.rsqrt(x.detach().pow(2).mean(-1, keepdim=True) + torch.finfo(torch.float32).eps)
    t["y_default"] = y2
    safetensors_io.save(os.path.join(out, "rmsnorm.safetensors"), {k: v.float() for k, v in t.items()},
                        {"eps": repr(eps)})


def write_gqa(out, gen):
    t = {}
    for name, (N, H, Hkv, L, S, D, causal) in {"a": (2, 6, 2, 5, 7, 8, False),
                                               "b": (1, 8, 2, 9, 9, 16, True)}.items():
        q = torch.randn(N, H, L, D, generator=gen, requires_grad=True)
        k = torch.randn(N, Hkv, S, D, generator=gen, requires_grad=True)
        v = torch.randn(N, Hkv, S, D, generator=gen, requires_grad=True)
        g = torch.randn(N, H, L, D, generator=gen)
        kr, vr = k.repeat_interleave(H // Hkv, dim=1), v.repeat_interleave(H // Hkv, dim=1)
        s = q @ kr.transpose(-1, -2) / math.sqrt(D)
        if causal:
            s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.softmax(s, dim=-1) @ vr
        o.backward(g)
        for k2, v2 in {"q": q, "k": k, "v": v, "g": g, "out": o, "dq": q.grad, "dk": k.grad,
                       "dv": v.grad}.items():
            t[name + "." + k2] = v2.detach()
    safetensors_io.save(os.path.join(out, "gqa.safetensors"), t, {"causal_b": "1"})


# ---- a GGUF file through the same reference ------------------------------------

GGUF_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
              "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
              "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm"}
GGUF_LLAMA = {"ffn_norm": "post_attention_layernorm"}
GGUF_GEMMA = {"post_attention_norm": "post_attention_layernorm", "ffn_norm": "pre_feedforward_layernorm",
              "post_ffw_norm": "post_feedforward_layernorm", "attn_q_norm": "self_attn.q_norm",
              "attn_k_norm": "self_attn.k_norm"}


def unpermute(w, n_head):
    """Undoes convert_hf_to_gguf.py's LlamaModel.permute of q/k rows (per
    head, the halves interleaved for llama.cpp's adjacent-pair RoPE): the
    HF rows, for rotate_half."""
    hd = w.shape[0] // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).transpose(1, 2).reshape(w.shape)


def gguf_run(path, ids, out, layers, last):
    import gguf  # data/venv/bin/python
    import numpy as np
    r = gguf.GGUFReader(path)

    def field(k, default=None):
        if k not in r.fields:
            return default
        f = r.fields[k]
        v = f.parts[f.data[0]]
        return v.tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else v.item()
    arch = field("general.architecture")
    gem = arch == "gemma3"
    if arch not in ("llama", "gemma3"):
        raise SystemExit("llm_ref.py --gguf: architecture %s, only llama and gemma3" % arch)
    nL = field(arch + ".block_count")
    L = nL if layers <= 0 else min(layers, nL)
    H, Hkv = field(arch + ".attention.head_count"), field(arch + ".attention.head_count_kv")
    E = field(arch + ".embedding_length")
    hd = field(arch + ".attention.key_length", E // H)

    def get(name):
        t = tensors[name]
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        return torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).reshape(
            [int(d) for d in reversed(t.shape.tolist())])
    tensors = {t.name: t for t in r.tensors}
    W = {"model.embed_tokens.weight": get("token_embd.weight")}
    # Gemma's files hold 1 + w (the converter's norm_shift); the reference takes w
    shift = 1.0 if gem else 0.0
    W["model.norm.weight"] = get("output_norm.weight") - shift
    if "output.weight" in tensors:
        W["lm_head.weight"] = get("output.weight")
    names = dict(GGUF_NAMES, **(GGUF_GEMMA if gem else GGUF_LLAMA))
    for i in range(L):
        for g, h in names.items():
            w = get("blk.%d.%s.weight" % (i, g))
            if "norm" in g:
                w = w - shift
            if not gem and g in ("attn_q", "attn_k"):
                w = unpermute(w, H if g == "attn_q" else Hkv)
            W["model.layers.%d.%s.weight" % (i, h)] = w
    cfg = dict(gemma=gem, E=E, H=H, Hkv=Hkv, hd=hd, L=L,
               eps=field(arch + ".attention.layer_norm_rms_epsilon"),
               rope_theta=field(arch + ".rope.freq_base", 1e6 if gem else 1e4), rope_local=10000.0,
               window=field(arch + ".attention.sliding_window", 0) if gem else 0, pattern=6 if gem else 0,
               query_pre_attn_scalar=hd, softcap=field(arch + ".final_logit_softcapping"),
               interleaved=False)
    ids = torch.tensor(ids, dtype=torch.int64)
    with torch.no_grad():
        logits = forward(cfg, W, ids, last)
    safetensors_io.save(out, {"ids": ids, "logits": logits}, {"layers": str(L)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--gguf")
    ap.add_argument("--ids", default="1,2,3")
    ap.add_argument("--layers", type=int, default=0)
    ap.add_argument("--random-ids", type=int, default=0, help="with --gguf: N ids drawn from the seed, after --ids")
    ap.add_argument("--last", type=int, default=0, help="with --gguf: logits of the last N positions only")
    a = ap.parse_args()
    if a.gguf:
        ids = [int(s) for s in a.ids.split(",")]
        if a.random_ids:
            g = torch.Generator().manual_seed(a.seed)
            ids += torch.randint(3, 20000, (a.random_ids,), generator=g).tolist()
        gguf_run(a.gguf, ids, a.out, a.layers, a.last)
        return
    gen = torch.Generator().manual_seed(a.seed)
    os.makedirs(a.out, exist_ok=True)
    write_cases(a.out, gen)
    write_rmsnorm(a.out, gen)
    write_gqa(a.out, gen)


if __name__ == "__main__":
    main()
