#!/usr/bin/python3
"""PyTorch side of the training parity test (run with /usr/bin/python3).

Initialises two models in PyTorch, trains each for 20 steps on fixed random
batches with Adam and with AdamW (dropout 0), and writes, per (model,
optimizer), one safetensors file: the initial parameters ("init.<name>"),
every batch ("x.<step>", "y.<step>"), the loss of every step ("losses") and
the final parameters ("final.<name>"). tests/test_train_parity.c loads the
initial parameters into the same models built in qkv, trains on the same
batches and compares.

Models:
  toy   the lecture's attention network (Conv1d, ReLU, SelfAttentionLayer,
        ...), narrowed to 8 channels, MSE loss;
  mlp   Linear, LayerNorm, GELU, Linear, Tanh, Linear; cross-entropy loss.

Usage: train_parity_oracle.py OUT_DIR
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

STEPS = 20


class SelfAttentionLayer(nn.Module):
    """The lecture's layer, verbatim in behaviour."""

    def __init__(self, in_dim, out_dim, key_dim):
        super().__init__()
        self.conv_Q = nn.Conv1d(in_dim, key_dim, kernel_size=1, bias=False)
        self.conv_K = nn.Conv1d(in_dim, key_dim, kernel_size=1, bias=False)
        self.conv_V = nn.Conv1d(in_dim, out_dim, kernel_size=1, bias=False)

    def forward(self, x):
        Q = self.conv_Q(x)
        K = self.conv_K(x)
        V = self.conv_V(x)
        A = Q.transpose(1, 2).matmul(K).softmax(2)
        return A.matmul(V.transpose(1, 2)).transpose(1, 2)


def toy_model(c=8, k=5):
    return nn.Sequential(
        nn.Conv1d(1, c, k, padding=k // 2), nn.ReLU(),
        nn.Conv1d(c, c, k, padding=k // 2), nn.ReLU(),
        SelfAttentionLayer(c, c, c),
        nn.Conv1d(c, c, k, padding=k // 2), nn.ReLU(),
        nn.Conv1d(c, 1, k, padding=k // 2))


def mlp_model():
    return nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 16),
                         nn.Tanh(), nn.Linear(16, 5))


def batches(kind, gen):
    out = []
    for _ in range(STEPS):
        if kind == 'toy':
            x = torch.randn(10, 1, 24, generator=gen)
            y = torch.randn(10, 1, 24, generator=gen)
        else:
            x = torch.randn(12, 6, generator=gen)
            y = torch.randint(0, 5, (12,), generator=gen)
        out.append((x, y))
    return out


def run(kind, optim_name, out_dir):
    torch.manual_seed(7)
    model = toy_model() if kind == 'toy' else mlp_model()
    with torch.no_grad():  # non-zero LayerNorm affine, so its gradients matter
        for name, p in model.named_parameters():
            if kind == 'mlp' and name.startswith('1.'):
                p.add_(0.1 * torch.randn_like(p))
    init = {'init.' + n: p.detach().clone() for n, p in model.named_parameters()}
    if optim_name == 'adam':
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    gen = torch.Generator().manual_seed(11)
    data = batches(kind, gen)
    losses = []
    for x, y in data:
        out = model(x)
        loss = F.mse_loss(out, y) if kind == 'toy' else F.cross_entropy(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    t = dict(init)
    for s, (x, y) in enumerate(data):
        t[f'x.{s}'] = x
        t[f'y.{s}'] = y
    t['losses'] = torch.tensor(losses, dtype=torch.float32)
    for n, p in model.named_parameters():
        t['final.' + n] = p.detach()
    meta = {'model': kind, 'optimizer': optim_name, 'lr': '0.01',
            'weight_decay': '0.1' if optim_name == 'adamw' else '0', 'steps': str(STEPS)}
    safetensors_io.save(os.path.join(out_dir, f'{kind}_{optim_name}.safetensors'), t, meta)


def main():
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    for kind in ('toy', 'mlp'):
        for opt in ('adam', 'adamw'):
            run(kind, opt, out_dir)
    print(f'train_parity_oracle: wrote 4 runs of {STEPS} steps to {out_dir}')


if __name__ == '__main__':
    main()
