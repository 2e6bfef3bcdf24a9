#!/usr/bin/python3
"""PyTorch's side of bench/lm_bench.py (run with /usr/bin/python3): the same
model as build/bench/lm_bench (`qkv train lm`'s default: tools/lm_torch.py's
LM with 4 layers, d_model 128, 4 heads, feed-forward 512, context 128,
vocabulary 75, tied, pre-norm, GELU), FP32, on random tokens.

    lm_torch_peer.py train [STEPS] [--threads N] [--bf16]
        training steps of batch 32 x 128 tokens: forward, cross-entropy,
        backward, clip_grad_norm_(1), AdamW: tokens/s; --bf16 runs the
        forward and loss under torch.autocast("cpu", dtype=torch.bfloat16)
    lm_torch_peer.py generate CONTEXT [NEW] [--threads N]
        NEW tokens (default 64), greedy, one at a time after a prompt of
        CONTEXT tokens, with a key/value cache as people write it for
        nn.TransformerEncoderLayer's weights: each layer's past keys and
        values kept and torch.cat'ed with the new token's (checked against
        the full forward first): tokens/s

Prints "RESULT name value" lines, as lm_bench does.
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

V, CTX, BATCH = 75, 128, 32
D_MODEL, LAYERS, HEADS = 128, 4, 4  # --model D,L,H changes them (feed-forward 4D)


def make_model(max_len):
    torch.manual_seed(1)
    m = lm_torch.LM(lm_torch.gpt_config(V, d_model=D_MODEL, nhead=HEADS, num_layers=LAYERS, max_len=max_len,
                                        dim_feedforward=4 * D_MODEL))
    with torch.no_grad():
        m.tok_emb.weight.normal_(0, 0.02)
    return m


def train(steps, bf16=False):
    m = make_model(CTX).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(7)

    def step():
        x = torch.randint(0, V, (BATCH, CTX), generator=g)
        y = torch.randint(0, V, (BATCH, CTX), generator=g)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()

    for _ in range(2):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sec = time.perf_counter() - t0
    print('RESULT train_tokens_per_s %.1f' % (steps * BATCH * CTX / sec))
    print('RESULT train_params %d' % sum(p.numel() for p in m.parameters()))


def cached_forward(m, ids, past, start):
    """ids (1,t) at positions [start, start+t); past: per layer (k, v) of
    (1,H,start,hd) or None. Returns the last position's logits and the new past."""
    cfg = m.cfg
    E, H = cfg['d_model'], cfg['nhead']
    hd = E // H
    x = m.embed(ids, start)
    t = ids.shape[1]
    new_past = []
    for layer, kv in zip(m.blocks.layers, past):
        sa = layer.self_attn
        h = layer.norm1(x)
        q, k, v = F.linear(h, sa.in_proj_weight, sa.in_proj_bias).split(E, dim=-1)
        q, k, v = (z.reshape(1, t, H, hd).transpose(1, 2) for z in (q, k, v))
        if kv is not None:
            k = torch.cat([kv[0], k], dim=2)
            v = torch.cat([kv[1], v], dim=2)
        new_past.append((k, v))
        s = q @ k.transpose(-2, -1) / math.sqrt(hd)
        if t > 1:
            S = k.shape[2]
            s = s + torch.triu(torch.full((t, S), float('-inf')), diagonal=S - t + 1)
        a = (s.softmax(-1) @ v).transpose(1, 2).reshape(1, t, E)
        x = x + sa.out_proj(a)
        x = x + layer.linear2(F.gelu(layer.linear1(layer.norm2(x))))
    x = m.blocks.norm(x[:, -1:])
    return m.head(x)[0, -1], new_past


def generate(context, new):
    m = make_model(context + new).eval()
    g = torch.Generator().manual_seed(3)
    prompt = torch.randint(0, V, (1, context), generator=g)
    with torch.no_grad():
        # The cache gives the full forward's logits.
        n = min(context, 12)
        past = [None] * len(m.blocks.layers)
        last, past = cached_forward(m, prompt[:, :n - 1], past, 0)
        last, _ = cached_forward(m, prompt[:, n - 1:n], past, n - 1)
        full = m(prompt[:, :n])[0, -1]
        assert torch.allclose(last, full, atol=1e-4), (last - full).abs().max()
        best = float('inf')
        for _ in range(3):
            past = [None] * len(m.blocks.layers)
            logits, past = cached_forward(m, prompt, past, 0)
            t0 = time.perf_counter()
            pos = context
            for _ in range(new):
                nxt = logits.argmax().view(1, 1)
                logits, past = cached_forward(m, nxt, past, pos)
                pos += 1
            best = min(best, time.perf_counter() - t0)
    print('RESULT generate_%d_tokens_per_s %.1f' % (context, new / best))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('what', choices=['train', 'generate'])
    ap.add_argument('args', nargs='*', type=int)
    ap.add_argument('--threads', type=int, default=0)
    ap.add_argument('--model', default='128,4,4', help='d_model,layers,heads')
    ap.add_argument('--bf16', action='store_true', help='train under bf16 autocast')
    a = ap.parse_args()
    global D_MODEL, LAYERS, HEADS
    D_MODEL, LAYERS, HEADS = (int(x) for x in a.model.split(','))
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.what == 'train':
        train(a.args[0] if a.args else 10, a.bf16)
    else:
        generate(a.args[0], a.args[1] if len(a.args) > 1 else 64)
    print('RESULT threads %d' % torch.get_num_threads())


if __name__ == '__main__':
    main()
