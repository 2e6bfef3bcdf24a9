#!/usr/bin/python3
"""PyTorch oracle for qkv's language model (qkv_lm) at small sizes (run with
/usr/bin/python3). For random configurations (layers 1-2, pre- or post-norm,
relu or gelu, learned, sinusoidal, rotary or no positions, tied or separate
output layer, final norm or not, scaled embedding or not), builds
tools/lm_torch.py's LM (dropout 0), runs it in float64 on float32 values,
takes the backward of sum(logits * dlogits) and writes one safetensors file
per case:

  - "ids" (I64 (N,T)), the parameters as "lm." + their state_dict names,
  - every fourth case rotary, half of those with "pad" (BOOL (N,T), rows
    left-padded, true = padding) given to the forward as key_padding_mask,
  - "logits", "dlogits", "grad.<name>" for every parameter,
  - __metadata__: "lm.config" (qkv_lm_opts_format's line).

Usage: lm_oracle.py --out DIR --cases N [--seed 1].
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_torch  # noqa: E402
import safetensors_io  # noqa: E402


def case(rng, gen, i):
    H = rng.choice([1, 2, 4])
    E = H * rng.choice([2, 4])
    cfg = lm_torch.gpt_config(rng.randint(3, 12), d_model=E, nhead=H, num_layers=rng.randint(1, 2),
                              max_len=rng.randint(6, 10), dim_feedforward=rng.randint(3, 9),
                              tie_weights=rng.randint(0, 1))
    cfg['norm_first'] = 1 if i % 3 else 0
    cfg['activation'] = rng.choice(['gelu', 'gelu', 'relu'])
    cfg['posenc'] = 'rotary' if i % 4 == 3 else rng.choice(['learned', 'learned', 'sinusoidal', 'none'])
    if cfg['posenc'] == 'rotary':
        cfg['rotary_base'] = rng.choice([10000.0, 10000.0, 500.0])
    cfg['final_norm'] = rng.choice([1, 1, 0])
    cfg['scale_embedding'] = rng.choice([0, 0, 1])
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = lm_torch.LM(cfg)
    with torch.no_grad():  # non-trivial norms and biases
        for name, p in m.named_parameters():
            if 'norm' in name or name.endswith('bias'):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
    m = m.double().train()
    N, T = rng.randint(1, 3), rng.randint(1, cfg['max_len'])
    ids = torch.randint(0, cfg['vocab_size'], (N, T), generator=gen)
    pad = None
    if cfg['posenc'] == 'rotary' and i % 8 == 7:  # left padding: 0 .. T-1 pads per row
        N, T = max(N, 2), max(T, 3)
        ids = torch.randint(0, cfg['vocab_size'], (N, T), generator=gen)
        pad = torch.arange(T)[None, :] < torch.tensor([rng.randint(0, T - 1) for _ in range(N)])[:, None]
    logits = m(ids, pad)
    dlogits = torch.randn(logits.shape, generator=gen).double()
    params = dict(m.named_parameters())
    grads = torch.autograd.grad((logits * dlogits).sum(), list(params.values()))
    t = {'lm.' + k: v.detach() for k, v in params.items()}
    t.update({'grad.' + k: g for k, g in zip(params, grads)})
    t.update(logits=logits.detach(), dlogits=dlogits)
    t = {k: v.float().contiguous() for k, v in t.items()}
    t['ids'] = ids
    if pad is not None:
        t['pad'] = pad
    return t, {'lm.config': lm_torch.format_config(cfg)}


def main():
    safetensors_io.write_cases(case, 24)


if __name__ == '__main__':
    main()
