#!/usr/bin/python3
"""PyTorch oracle for qkv's positional encodings (run with /usr/bin/python3).

Writes safetensors files (tools/safetensors_io.py) into --out DIR for
tests/test_posenc.c:

  sinusoidal.safetensors  the PyTorch tutorial's PositionalEncoding
      ("Language Modeling with nn.Transformer"), its float32 arithmetic as
      written there: "x" (T,N,d), "y" = the module's eval forward, "pe" its
      buffer (max_len,d); and "pe_exact" (max_len,d), the same formula in
      float64; "pe_big" / "pe_big_exact" for max_len 2048, d 64 (where the
      tutorial's float32 angles drift).
  rope_K.safetensors (K < the number in rope.count)  RoPE in float64 from
      float32 inputs: "x" (N,H,T,hd), "y", "dout", "grad.x" (the backward of
      sum(y * dout)); metadata layout ("interleaved" or "half"), base,
      offset, rot_dim. The interleaved form is RoFormer's (sin/cos repeated
      per pair, x2 = (-x[1::2], x[0::2]) interleaved), checked here against
      Meta LLaMA's complex form (view_as_complex * polar); the half form is
      HF LLaMA's q * cos + rotate_half(q) * sin, with GPT-NeoX's partial
      rotary (the first rot_dim dims) when rot_dim < hd. Cases with
      metadata positions=1 carry "positions" I64 (N,T), the position of
      each (batch entry, step), as HF's position_ids (offset 0).
  alibi.safetensors  "slopes.H" (H) from get_slopes of the ALiBi reference
      code (ofirpress/attention_with_linear_biases) for H = 1..40, 48, 64,
      80, 96, 100, 128; and for H = 6, S = 7: "scores" (H,S,S) random,
      "probs" (H,S,S) = softmax(scores + future mask + alibi) built as the
      reference's fairseq code builds it (slope * arange(S), the future
      mask triu(-inf, 1)), in float64.
  tokemb.safetensors  the translation tutorial's TokenEmbedding
      (nn.Embedding(V,d)(ids) * sqrt(d)): "weight", "ids" (I64), "y",
      "dout", "grad.weight".

Usage: posenc_oracle.py --out DIR [--seed 1]
"""
import argparse
import math
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

f64 = torch.float64


# ---- sinusoidal: the tutorial's module, verbatim ---------------------------

class PositionalEncoding(nn.Module):
    """From pytorch.org/tutorials/beginner/transformer_tutorial.html."""

    def __init__(self, d_model: int, dropout: float = 0.1, max_len: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer('pe', pe)

    def forward(self, x):
        """x: (seq_len, batch_size, embedding_dim)"""
        x = x + self.pe[:x.size(0)]
        return self.dropout(x)


def sinusoidal_exact(max_len, d):
    """pe[t, 2i] = sin(t / 10000^(2i/d)), pe[t, 2i+1] = cos(...), in float64."""
    t = torch.arange(max_len, dtype=f64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=f64) / d)
    pe = torch.zeros(max_len, d, dtype=f64)
    pe[:, 0::2] = torch.sin(t * freq)
    pe[:, 1::2] = torch.cos(t * freq)
    return pe


def write_sinusoidal(out, gen):
    T, N, d, max_len = 50, 3, 16, 64
    m = PositionalEncoding(d, dropout=0.1, max_len=max_len).eval()
    x = torch.randn(T, N, d, generator=gen)
    with torch.no_grad():
        y = m(x)
    big = PositionalEncoding(64, max_len=2048)
    safetensors_io.save(os.path.join(out, "sinusoidal.safetensors"), {
        "x": x, "y": y, "pe": m.pe[:, 0, :].clone(),
        "pe_exact": sinusoidal_exact(max_len, d).float(),
        "pe_big": big.pe[:, 0, :].clone(),
        "pe_big_exact": sinusoidal_exact(2048, 64).float(),
    }, {"d_model": str(d), "max_len": str(max_len)})


# ---- RoPE: two independent references ------------------------------------

def inv_freq(base, rd):
    return 1.0 / (base ** (torch.arange(0, rd, 2, dtype=f64) / rd))


def rope_roformer(x, pos, base, rd):
    """RoFormer's interleaved rotation of the first rd dims of x (..., T, hd)."""
    sinus = pos[:, None] * inv_freq(base, rd)[None, :]           # (T, rd/2)
    sin_pos = torch.stack([sinus.sin(), sinus.sin()], -1).reshape(-1, rd)
    cos_pos = torch.stack([sinus.cos(), sinus.cos()], -1).reshape(-1, rd)
    xr, xp = x[..., :rd], x[..., rd:]
    x2 = torch.stack([-xr[..., 1::2], xr[..., 0::2]], -1).reshape(xr.shape)
    return torch.cat([xr * cos_pos + x2 * sin_pos, xp], -1)


def rope_complex(x, pos, base, rd):
    """Meta LLaMA's form: pairs as complex numbers times e^(i angle)."""
    freqs = torch.outer(pos, inv_freq(base, rd))
    freqs_cis = torch.polar(torch.ones_like(freqs), freqs)        # (T, rd/2)
    xr, xp = x[..., :rd], x[..., rd:]
    xc = torch.view_as_complex(xr.reshape(*xr.shape[:-1], -1, 2).contiguous())
    yr = torch.view_as_real(xc * freqs_cis).flatten(-2)
    return torch.cat([yr, xp], -1)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope_half(x, pos, base, rd):
    """HF LLaMA / GPT-NeoX: q * cos + rotate_half(q) * sin on the first rd dims.
    pos (T), or (N,T) per batch entry (HF's position_ids), broadcast over heads."""
    freqs = pos[..., None] * inv_freq(base, rd)                   # (T, rd/2) or (N,T,rd/2)
    emb = torch.cat((freqs, freqs), dim=-1)                       # (T, rd) or (N,T,rd)
    cos, sin = emb.cos(), emb.sin()
    if pos.dim() == 2:                                            # (N,1,T,rd): over heads
        cos, sin = cos[:, None], sin[:, None]
    xr, xp = x[..., :rd], x[..., rd:]
    return torch.cat([xr * cos + rotate_half(xr) * sin, xp], -1)


# (layout, N, H, T, hd, offset, rot_dim (0 = hd), base)
ROPE_CASES = [
    ("interleaved", 2, 3, 5, 8, 0, 0, 10000.0),
    ("interleaved", 1, 2, 7, 16, 13, 0, 10000.0),
    ("interleaved", 2, 2, 4, 12, 3, 8, 500.0),
    ("half", 2, 3, 5, 8, 0, 0, 10000.0),
    ("half", 1, 2, 7, 16, 13, 0, 10000.0),
    ("half", 2, 2, 4, 12, 3, 8, 500.0),
    ("half", 1, 4, 6, 64, 1000, 0, 10000.0),
    ("interleaved", 1, 4, 6, 64, 1000, 0, 10000.0),
]
# per-(row, step) positions (N,T), half layout: (N, H, T, hd, rot_dim, base, positions)
ROPE_POS_CASES = [
    (2, 3, 5, 8, 0, 10000.0, [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]),   # a left-padded row
    (3, 2, 4, 16, 0, 10000.0, [[7, 8, 9, 10], [0, 0, 1, 2], [3, 1, 4, 1]]),
    (2, 2, 3, 12, 8, 500.0, [[1000, 1001, 1002], [5, 5, 5]]),      # past N*T, rot_dim 8
    (1, 4, 6, 64, 0, 10000.0, [[0, 1, 2, 3, 4, 5]]),
]


def write_rope(out, gen):
    for k, (layout, N, H, T, hd, offset, rot, base) in enumerate(ROPE_CASES):
        rd = rot or hd
        x = torch.randn(N, H, T, hd, generator=gen)
        dout = torch.randn(N, H, T, hd, generator=gen)
        xd = x.double().requires_grad_(True)
        pos = torch.arange(offset, offset + T, dtype=f64)
        if layout == "interleaved":
            y = rope_roformer(xd, pos, base, rd)
            other = rope_complex(xd.detach(), pos, base, rd)
            assert torch.allclose(y.detach(), other, atol=1e-12), "RoFormer and complex forms differ"
        else:
            y = rope_half(xd, pos, base, rd)
        (y * dout.double()).sum().backward()
        safetensors_io.save(os.path.join(out, "rope_%d.safetensors" % k), {
            "x": x, "y": y.detach().float(), "dout": dout, "grad.x": xd.grad.float(),
        }, {"layout": layout, "base": repr(base), "offset": str(offset), "rot_dim": str(rot)})
    for j, (N, H, T, hd, rot, base, positions) in enumerate(ROPE_POS_CASES):
        k = len(ROPE_CASES) + j
        rd = rot or hd
        x = torch.randn(N, H, T, hd, generator=gen)
        dout = torch.randn(N, H, T, hd, generator=gen)
        xd = x.double().requires_grad_(True)
        pos = torch.tensor(positions, dtype=torch.int64)
        y = rope_half(xd, pos.double(), base, rd)
        (y * dout.double()).sum().backward()
        safetensors_io.save(os.path.join(out, "rope_%d.safetensors" % k), {
            "x": x, "y": y.detach().float(), "dout": dout, "grad.x": xd.grad.float(),
            "positions": pos,
        }, {"layout": "half", "base": repr(base), "offset": "0", "rot_dim": str(rot), "positions": "1"})
    with open(os.path.join(out, "rope.count"), "w") as f:
        f.write("%d\n" % (len(ROPE_CASES) + len(ROPE_POS_CASES)))


# ---- ALiBi: the reference code -------------------------------------------

def get_slopes(n):
    """ofirpress/attention_with_linear_biases, fairseq/models/transformer.py."""
    def get_slopes_power_of_2(n):
        start = (2**(-2**-(math.log2(n) - 3)))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2**math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + get_slopes(2 * closest_power_of_2)[0::2][:n - closest_power_of_2])


ALIBI_HEADS = list(range(1, 41)) + [48, 64, 80, 96, 100, 128]


def write_alibi(out, gen):
    tensors = {"slopes.%d" % h: torch.tensor(get_slopes(h), dtype=f64).float()
               for h in ALIBI_HEADS}
    H, S = 6, 7
    # The reference builds the bias for causal decoding as slope * j (a
    # row-constant shift away from -slope * (i - j)) plus the future mask.
    slopes = torch.tensor(get_slopes(H), dtype=f64)
    alibi = slopes[:, None, None] * torch.arange(S, dtype=f64)[None, None, :]   # (H,1,S)
    future = torch.triu(torch.full((S, S), float("-inf"), dtype=f64), 1)
    mask = future[None] + alibi                                                 # (H,S,S)
    scores = torch.randn(H, S, S, generator=gen)
    probs = torch.softmax(scores.double() + mask, dim=-1)
    tensors.update({"scores": scores, "probs": probs.float()})
    safetensors_io.save(os.path.join(out, "alibi.safetensors"), tensors,
                        {"heads": ",".join(str(h) for h in ALIBI_HEADS)})


# ---- the translation tutorial's TokenEmbedding ---------------------------

class TokenEmbedding(nn.Module):
    """From pytorch.org/tutorials/beginner/translation_transformer.html."""

    def __init__(self, vocab_size: int, emb_size):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)


def write_tokemb(out, gen):
    V, d = 11, 12
    m = TokenEmbedding(V, d)
    with torch.no_grad():
        m.embedding.weight.copy_(torch.randn(V, d, generator=gen))
    ids = torch.randint(0, V, (3, 5), generator=gen)
    y = m(ids)
    dout = torch.randn(y.shape, generator=gen)
    (y * dout).sum().backward()
    safetensors_io.save(os.path.join(out, "tokemb.safetensors"), {
        "weight": m.embedding.weight.detach(), "ids": ids, "y": y.detach(), "dout": dout,
        "grad.weight": m.embedding.weight.grad,
    }, {"d_model": str(d)})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(args.seed)
    torch.manual_seed(args.seed)
    write_sinusoidal(args.out, gen)
    write_rope(args.out, gen)
    write_alibi(args.out, gen)
    write_tokemb(args.out, gen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
