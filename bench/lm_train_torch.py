#!/usr/bin/python3
"""The PyTorch peer of `qkv train lm` (run with /usr/bin/python3): the same
model (tools/lm_torch.py's LM: pre-norm, GELU, final LayerNorm, learned (or --pos
rotary) positions, tied output layer, PyTorch's layer init and GPT-2's N(0, 0.02)
embeddings), data (the corpus's characters as ids 1..K in code point order,
0 unknown, K+1 <|endoftext|>; the last --val-fraction of the tokens for
validation), batches of random windows, AdamW, linear warm-up from 0 then
cosine to --min-lr at --steps, clip_grad_norm_, the validation loss every
--eval-every steps on --eval-batches fixed batches, and a wall-clock limit:

    bench/lm_train_torch.py --time-limit 30            the 30-minute comparison
    build/qkv train lm --time-limit 30 --out kjv-30    qkv's side (docs/lm.md)

Defaults are `qkv train lm`'s. At the end it prints the step reached, the
tokens trained on and the last validation loss (nats per character). Only
the data order differs from qkv's (each draws its own random windows).
"""
import argparse
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tools'))
import lm_torch  # noqa: E402


def chars_ids(text):
    chars = sorted(set(text))
    index = {c: i + 1 for i, c in enumerate(chars)}
    return torch.tensor([index[c] for c in text], dtype=torch.int64), len(chars) + 2


def lr_at(step, a, min_lr):
    if step < a.warmup:
        return a.lr * step / a.warmup
    if step >= a.steps:
        return min_lr
    t = (step - a.warmup) / (a.steps - a.warmup)
    return min_lr + (a.lr - min_lr) * (1 + math.cos(math.pi * t)) / 2


def windows(ids, lo, hi, B, T, gen):
    off = torch.randint(lo, hi - T, (B,), generator=gen)
    idx = off[:, None] + torch.arange(T)[None, :]
    return ids[idx], ids[idx + 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--corpus', default='data/kjv/kjv.txt')
    ap.add_argument('--val-fraction', type=float, default=0.05)
    ap.add_argument('--layers', type=int, default=4)
    ap.add_argument('--d-model', type=int, default=128)
    ap.add_argument('--heads', type=int, default=4)
    ap.add_argument('--ff', type=int, default=0)
    ap.add_argument('--dropout', type=float, default=0.0)
    ap.add_argument('--pos', choices=('learned', 'rotary'), default='learned',
                    help="positions, as qkv train lm's --pos")
    ap.add_argument('--context', type=int, default=128)
    ap.add_argument('--batch', type=int, default=32)
    ap.add_argument('--steps', type=int, default=1500)
    ap.add_argument('--lr', type=float, default=3e-3)
    ap.add_argument('--min-lr', type=float, default=-1)
    ap.add_argument('--warmup', type=int, default=100)
    ap.add_argument('--weight-decay', type=float, default=0.01)
    ap.add_argument('--clip', type=float, default=1.0)
    ap.add_argument('--eval-every', type=int, default=250)
    ap.add_argument('--eval-batches', type=int, default=8)
    ap.add_argument('--time-limit', type=float, default=0, help='minutes (0: none)')
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--threads', type=int, default=0, help='torch.set_num_threads (0: its default)')
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    min_lr = a.min_lr if a.min_lr >= 0 else a.lr / 10
    with open(a.corpus, encoding='utf-8') as f:
        text = f.read()
    ids, V = chars_ids(text)
    n_val = int(math.floor(len(ids) * a.val_fraction))
    n_train = len(ids) - n_val
    torch.manual_seed(a.seed)
    cfg = lm_torch.gpt_config(V, d_model=a.d_model, nhead=a.heads, num_layers=a.layers, max_len=a.context,
                              dim_feedforward=a.ff or 4 * a.d_model, dropout=a.dropout, posenc=a.pos)
    m = lm_torch.LM(cfg)
    with torch.no_grad():
        m.tok_emb.weight.normal_(0, 0.02)
        if a.pos == 'learned':
            m.pos_emb.weight.normal_(0, 0.02)
    opt = torch.optim.AdamW(m.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    print('PyTorch %s, %d threads: %s, %d tokens (%d ids): %d train, %d validation; %d parameters' % (
        torch.__version__, torch.get_num_threads(), a.corpus, len(ids), V, n_train, n_val,
        sum(p.numel() for p in m.parameters())), flush=True)
    gen = torch.Generator().manual_seed(a.seed)

    def validate():
        g = torch.Generator().manual_seed(a.seed + 2)
        m.eval()
        with torch.no_grad():
            tot = sum(F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1)).item()
                      for x, y in (windows(ids, n_train, len(ids), a.batch, a.context, g)
                                   for _ in range(a.eval_batches)))
        m.train()
        return tot / a.eval_batches

    t0 = time.perf_counter()
    step, val = 0, float('nan')
    m.train()
    while step < a.steps:
        for group in opt.param_groups:
            group['lr'] = lr_at(step, a, min_lr)
        x, y = windows(ids, 0, n_train, a.batch, a.context, gen)
        loss = F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(m.parameters(), a.clip)
        opt.step()
        step += 1
        over = a.time_limit > 0 and time.perf_counter() - t0 > 60 * a.time_limit
        if step % a.eval_every == 0 or step == a.steps or over:
            val = validate()
            el = time.perf_counter() - t0
            print('step %d: validation loss %.4f (train %.4f), %.0f tokens/s' % (
                step, val, loss.item(), step * a.batch * a.context / el), flush=True)
        if over:
            print('the time limit (%g minutes) is reached' % a.time_limit)
            break
    el = time.perf_counter() - t0
    print('done: step %d, validation loss %.4f nats per token, %d tokens trained on in %.0f s (%.0f tokens/s)' % (
        step, val, step * a.batch * a.context, el, step * a.batch * a.context / el))


if __name__ == '__main__':
    main()
