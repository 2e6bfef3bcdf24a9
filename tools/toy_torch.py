#!/usr/bin/python3
"""The lecture's toy experiment (pairs task, attention model) in PyTorch,
in float32 or under torch.autocast("cpu", bfloat16): the reference for
docs/bf16.md's question of how far a bf16 autocast run ends from an FP32
run of the same seed. Run with /usr/bin/python3 (Debian's python3-torch).

Same task, network and training as `qkv toy --model attention --task
pairs` (src/data/toy.c, src/models/toy.c, src/cli/toy.c): sequences of 64
with two triangles and two boxes, heights in [1,25], widths in
[5,11]*T/100, at least one free position between shapes, noise of
amplitude 0.3, draws kept when the pair averages differ by more than 4;
10,000 training and 1,000 test sequences; the lecture's network (Conv1d
1->64, ReLU, Conv1d 64->64, ReLU, SelfAttentionLayer(64,64,64) without
scaling, Conv1d 64->64, ReLU, Conv1d 64->1; kernels 5, padding 2); Adam
lr 1e-3, batch 100 in order, MSE on inputs standardised by the training
inputs' mean and std. The data come from NumPy's generator with the seed
(not qkv's generator: the same distribution, other draws), and PyTorch's
initialisation with torch.manual_seed(seed).

Usage: toy_torch.py SEED EPOCHS fp32|bf16
Prints one line: "TOY <precision> seed <s> epochs <e> train <mse of the
last epoch> test <test mse> seconds <s>".
"""
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_parity_oracle import toy_model  # noqa: E402  the lecture's network


def shapes(rng, T):
    k = T / 100.0
    wmin, wmax = 5 * k, 11 * k
    while True:
        s = [(rng.uniform(wmax / 2, T - wmax / 2), rng.uniform(1, 25), rng.uniform(wmin, wmax), i >= 2)
             for i in range(4)]
        ok = all(abs(s[i][0] - s[j][0]) > (s[i][2] + s[j][2]) / 2 + 1 for i in range(4) for j in range(i + 1, 4))
        if ok:
            return s


def render(s, T):
    t = np.arange(T, dtype=np.float64)
    out = np.zeros(T)
    for c, h, w, box in s:
        d = np.abs(t - c)
        v = np.where(d <= w / 2, h, 0.0) if box else np.maximum(h - d * 2 * h / w, 0.0)
        out = np.maximum(out, v)
    return out


def generate(rng, n, T, noise=0.3):
    x = np.zeros((n, T), np.float32)
    y = np.zeros((n, T), np.float32)
    for i in range(n):
        while True:
            s = shapes(rng, T)
            a0 = (s[0][1] + s[1][1]) / 2
            a1 = (s[2][1] + s[3][1]) / 2
            if abs(a0 - a1) > 4:
                break
        x[i] = render(s, T) + rng.uniform(-noise / 2, noise / 2, T)
        y[i] = render([(c, a0 if k < 2 else a1, w, box) for k, (c, h, w, box) in enumerate(s)], T)
    return x, y


def main():
    usage = "usage: toy_torch.py SEED EPOCHS fp32|bf16 (SEED an integer, EPOCHS a positive integer)"
    if len(sys.argv) != 4 or sys.argv[3] not in ("fp32", "bf16"):
        sys.exit(usage)
    try:
        seed, epochs, prec = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    except ValueError:
        sys.exit(usage)
    if epochs < 1:
        sys.exit(usage)
    torch.set_num_threads(1)
    T, B = 64, 100
    rng = np.random.default_rng(seed)
    xtr, ytr = generate(rng, 10000, T)
    xte, yte = generate(rng, 1000, T)
    mu, sd = xtr.mean(), xtr.std(ddof=1)
    xtr, xte = torch.from_numpy((xtr - mu) / sd)[:, None], torch.from_numpy((xte - mu) / sd)[:, None]
    ytr, yte = torch.from_numpy(ytr)[:, None], torch.from_numpy(yte)[:, None]
    torch.manual_seed(seed)
    m = toy_model(c=64)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    ctx = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if prec == "bf16" else torch.enable_grad
    t0 = time.time()
    last = 0.0
    for e in range(epochs):
        tot = 0.0
        for b in range(0, 10000, B):
            with ctx():
                out = m(xtr[b:b + B])
            loss = F.mse_loss(out.float(), ytr[b:b + B])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += loss.item()
        last = tot / (10000 // B)
    with torch.no_grad():
        se = 0.0
        for b in range(0, 1000, B):
            with ctx():
                out = m(xte[b:b + B])
            se += F.mse_loss(out.float(), yte[b:b + B], reduction="sum").item()
    print(f"TOY {prec} seed {seed} epochs {epochs} train {last:.6f} test {se / (1000 * T):.6f} "
          f"seconds {time.time() - t0:.1f}", flush=True)


if __name__ == "__main__":
    main()
