#!/usr/bin/python3
"""PyTorch oracle for qkv's patch embedding and vision transformer (run
with /usr/bin/python3). Computed in float64 from float32 values.

--kind patch: nn.Conv2d(C, D, kernel_size=P, stride=P) on random (N,C,H,W)
  (H, W not always multiples of P: Conv2d drops the rest), flattened as
  torchvision's ViT does: conv(x).flatten(2).transpose(1, 2). Case 0 is the
  notes' 224x224 image in 16x16 patches, C=3, D=768 -> (1, 196, 768).
  Tensors: "x", "weight", "bias" (or none), "y", "dout", "grad.x",
  "grad.weight", "grad.bias"; metadata: has_bias.

--kind vit: the ViT module below (the PyTorch peer of qkv_vit, same
  parameter names) with random small configurations and every parameter
  perturbed (so the layers differ and nothing is zero). Tensors: "images",
  the parameters as "vit." + state_dict names, "pos_table" (the fixed 2-D
  sinusoidal table, when used), "logits", "dout", "grad.images",
  "grad.<name>"; metadata: the options.

--kind torchvision: a module with torchvision 0.14's VisionTransformer
  structure and state_dict names (EncoderBlock: ln_1, self_attention,
  ln_2, mlp = Linear, GELU, Dropout, Linear, Dropout; encoder.ln,
  heads.head), written here from torchvision's source (torchvision is not
  installed). Two files per case: "case_NNNN.safetensors" holds only the
  state_dict (torchvision's keys), "data_NNNN.safetensors" "images" and
  "logits"; metadata of the first: the options.

Usage: vit_oracle.py --out DIR --cases N --kind patch|vit|torchvision [--seed 1].
"""
from collections import OrderedDict
import argparse
import math
import os
import random
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def sincos_1d(h, pos):
    """MAE's get_1d_sincos_pos_embed_from_grid(h, pos): (M, h)."""
    omega = torch.arange(h // 2, dtype=torch.float64) / (h / 2.0)
    omega = 1.0 / 10000 ** omega
    out = pos.reshape(-1).double()[:, None] * omega[None, :]
    return torch.cat([torch.sin(out), torch.cos(out)], dim=1)


def sincos_2d(gh, gw, d, cls):
    """MAE's get_2d_sincos_pos_embed, on a gh x gw grid: meshgrid(w, h)
    puts the column index in the first half of the channels."""
    grid_h = torch.arange(gh, dtype=torch.float64)
    grid_w = torch.arange(gw, dtype=torch.float64)
    gy, gx = torch.meshgrid(grid_h, grid_w, indexing='ij')  # gx[i,j] = j, as np.meshgrid(w, h)[0]
    emb = torch.cat([sincos_1d(d // 2, gx), sincos_1d(d // 2, gy)], dim=1)
    if cls:
        emb = torch.cat([torch.zeros(1, d, dtype=torch.float64), emb], dim=0)
    return emb


class ViT(nn.Module):
    """The PyTorch module whose state_dict names qkv_vit uses."""

    def __init__(self, C, H, W, P, D, nhead, layers, ff, K, act, pos, pool, cls):
        super().__init__()
        self.pool, self.cls, self.pos = pool, cls, pos
        gh, gw = H // P, W // P
        S = gh * gw + (1 if cls else 0)
        self.conv_proj = nn.Conv2d(C, D, kernel_size=P, stride=P)
        if cls:
            self.class_token = nn.Parameter(torch.zeros(1, 1, D))
        if pos == 'learned':
            self.pos_embedding = nn.Parameter(torch.empty(1, S, D).normal_(std=0.02))
        elif pos == 'sincos':
            self.register_buffer('pos_table', sincos_2d(gh, gw, D, cls).float(), persistent=False)
        layer = nn.TransformerEncoderLayer(D, nhead, ff, dropout=0.0, activation=act,
                                           layer_norm_eps=1e-6, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(D, eps=1e-6),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(D, K)

    def forward(self, x):
        t = self.conv_proj(x).flatten(2).transpose(1, 2)
        if self.cls:
            t = torch.cat([self.class_token.expand(t.shape[0], -1, -1), t], dim=1)
        if self.pos == 'learned':
            t = t + self.pos_embedding
        elif self.pos == 'sincos':
            t = t + self.pos_table
        t = self.encoder(t)
        t = t[:, 0] if self.pool == 'cls' else t.mean(dim=1)
        return self.head(t)


class TVEncoderBlock(nn.Module):
    """torchvision.models.vision_transformer.EncoderBlock (0.14)."""

    def __init__(self, nhead, D, F):
        super().__init__()
        self.ln_1 = nn.LayerNorm(D, eps=1e-6)
        self.self_attention = nn.MultiheadAttention(D, nhead, dropout=0.0, batch_first=True)
        self.dropout = nn.Dropout(0.0)
        self.ln_2 = nn.LayerNorm(D, eps=1e-6)
        # MLPBlock(MLP): Linear, GELU, Dropout, Linear, Dropout
        self.mlp = nn.Sequential(nn.Linear(D, F), nn.GELU(), nn.Dropout(0.0), nn.Linear(F, D), nn.Dropout(0.0))

    def forward(self, inp):
        x = self.ln_1(inp)
        x, _ = self.self_attention(x, x, x, need_weights=False)
        x = self.dropout(x) + inp
        return x + self.mlp(self.ln_2(x))


class TVEncoder(nn.Module):
    def __init__(self, seq, layers, nhead, D, F):
        super().__init__()
        self.pos_embedding = nn.Parameter(torch.empty(1, seq, D).normal_(std=0.02))
        self.dropout = nn.Dropout(0.0)
        self.layers = nn.Sequential(OrderedDict(
            ('encoder_layer_%d' % i, TVEncoderBlock(nhead, D, F)) for i in range(layers)))
        self.ln = nn.LayerNorm(D, eps=1e-6)

    def forward(self, x):
        return self.ln(self.layers(self.dropout(x + self.pos_embedding)))


class TVViT(nn.Module):
    """torchvision's VisionTransformer (square images, no representation layer)."""

    def __init__(self, C, image, P, D, nhead, layers, F, K):
        super().__init__()
        self.conv_proj = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.class_token = nn.Parameter(torch.zeros(1, 1, D))
        self.encoder = TVEncoder((image // P) ** 2 + 1, layers, nhead, D, F)
        self.heads = nn.Sequential(OrderedDict(head=nn.Linear(D, K)))

    def forward(self, x):
        n = x.shape[0]
        x = self.conv_proj(x).reshape(n, self.conv_proj.out_channels, -1).permute(0, 2, 1)
        x = torch.cat([self.class_token.expand(n, -1, -1), x], dim=1)
        return self.heads(self.encoder(x)[:, 0])


def tv_case(rng, gen, i, out):
    C, P = rng.randint(1, 3), rng.randint(2, 4)
    image = P * rng.randint(2, 3)
    D = rng.choice([8, 12, 16])
    nhead = rng.choice([h for h in (1, 2, 4) if D % h == 0])
    layers, F, K, N = rng.randint(1, 3), rng.choice([16, 32]), rng.randint(2, 5), rng.randint(1, 3)
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = TVViT(C, image, P, D, nhead, layers, F, K)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    m = m.double().eval()
    images = torch.randn(N, C, image, image, generator=gen).double()
    with torch.no_grad():
        logits = m(images)
    meta = dict(in_channels=C, image=image, patch=P, d_model=D, nhead=nhead, num_layers=layers,
                dim_feedforward=F, num_classes=K)
    sd = {k: v.float().contiguous() for k, v in m.state_dict().items()}
    safetensors_io.save(os.path.join(out, 'case_%04d.safetensors' % i), sd,
                        {k: str(v) for k, v in meta.items()})
    safetensors_io.save(os.path.join(out, 'data_%04d.safetensors' % i),
                        {'images': images.float(), 'logits': logits.float()}, {})


def patch_case(rng, gen, i):
    if i == 0:
        N, C, H, W, P, D, bias = 1, 3, 224, 224, 16, 768, True
    else:
        P = rng.randint(1, 5)
        N, C, D = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, 8)
        H, W = rng.randint(P, 4 * P + 3), rng.randint(P, 4 * P + 3)
        bias = rng.random() < 0.8
    conv = nn.Conv2d(C, D, P, stride=P, bias=bias).double()
    x = torch.randn(N, C, H, W, generator=gen).double().requires_grad_(True)
    y = conv(x).flatten(2).transpose(1, 2)
    dout = torch.randn(y.shape, generator=gen).double()
    leaves = [x, conv.weight] + ([conv.bias] if bias else [])
    grads = torch.autograd.grad((y * dout).sum(), leaves)
    t = {'x': x, 'weight': conv.weight, 'y': y, 'dout': dout, 'grad.x': grads[0], 'grad.weight': grads[1]}
    if bias:
        t.update(bias=conv.bias, **{'grad.bias': grads[2]})
    return t, {'has_bias': int(bias)}


def vit_case(rng, gen, i):
    C, P = rng.randint(1, 3), rng.randint(2, 3)
    H, W = P * rng.randint(2, 3) + rng.choice([0, 0, 1]), P * rng.randint(2, 4)
    D = rng.choice([8, 12, 16])
    nhead = rng.choice([h for h in (1, 2, 4) if D % h == 0])
    layers, ff, K = rng.randint(1, 2), rng.choice([16, 24]), rng.randint(2, 5)
    act = rng.choice(['gelu', 'relu'])
    pos = ['learned', 'sincos', 'none'][i % 3]
    pool = rng.choice(['cls', 'mean'])
    cls = 1 if pool == 'cls' else rng.choice([0, 1])
    N = rng.randint(1, 3)
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = ViT(C, H, W, P, D, nhead, layers, ff, K, act, pos, pool, cls)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.2)
    m = m.double().eval()
    images = torch.randn(N, C, H, W, generator=gen).double().requires_grad_(True)
    logits = m(images)
    dout = torch.randn(logits.shape, generator=gen).double()
    params = dict(m.named_parameters())
    grads = torch.autograd.grad((logits * dout).sum(), [images] + list(params.values()))
    t = {'images': images, 'logits': logits, 'dout': dout, 'grad.images': grads[0]}
    for (k, v), g in zip(params.items(), grads[1:]):
        t['vit.' + k] = v
        t['grad.' + k] = g
    if pos == 'sincos':
        t['pos_table'] = m.pos_table
    meta = dict(in_channels=C, image_h=H, image_w=W, patch=P, d_model=D, nhead=nhead,
                num_layers=layers, dim_feedforward=ff, num_classes=K, activation=act, pos=pos,
                pool=pool, class_token=cls)
    return t, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--cases', type=int, default=20)
    ap.add_argument('--kind', choices=['patch', 'vit', 'torchvision'], default='vit')
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed + {'patch': 0, 'vit': 100, 'torchvision': 200}[a.kind])
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(1)
    for i in range(a.cases):
        if a.kind == 'torchvision':
            tv_case(rng, gen, i, a.out)
            continue
        t, meta = (patch_case if a.kind == 'patch' else vit_case)(rng, gen, i)
        t = {k: v.detach().float().contiguous() for k, v in t.items()}
        safetensors_io.save(os.path.join(a.out, 'case_%04d.safetensors' % i), t,
                            {k: str(v) for k, v in meta.items()})
    print(a.cases)


if __name__ == '__main__':
    main()
