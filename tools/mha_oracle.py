#!/usr/bin/python3
"""PyTorch oracle for qkv's MultiheadAttention (run with /usr/bin/python3).

Builds random torch.nn.MultiheadAttention modules and inputs covering every
option (bias, add_bias_kv, add_zero_attn, kdim/vdim, batch_first, batched and
unbatched, self and cross attention, bool and float masks, 2-D and 3-D masks,
key padding masks, need_weights, average_attn_weights), runs them, takes the
backward of a random linear functional sum(out * dout), and writes one
safetensors file per case: the parameters under their state_dict names, the
inputs and masks, out, weights, dout and every gradient (grad.<name>).
Config goes in __metadata__.

qkv's additions (causal, local window) are tested by merging the equivalent
mask into the one PyTorch gets; the C side gets the flag.

Rows whose every key is masked come out NaN in PyTorch 1.13; qkv defines
their attention output as 0 (so the module output is out_proj.bias) with zero
gradients. For such cases the reference is `reference_mha` below: the same
computation written out in torch, with a softmax that gives 0 on fully
masked rows; it is checked against nn.MultiheadAttention on every element
PyTorch gives as a number before it is used.

Usage: mha_oracle.py --out DIR [--cases 240] [--seed 1]
"""
import argparse
import math
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def reference_mha(m, query, key, value, attn_mask, key_padding_mask, need_weights,
                  average_attn_weights):
    """F.multi_head_attention_forward step by step, with fully masked rows 0."""
    batched = query.dim() == 3
    if m.batch_first and batched:
        query, key, value = (x.transpose(0, 1) for x in (query, key, value))
    if not batched:
        query, key, value = (x.unsqueeze(1) for x in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    L, N, E = query.shape
    S = key.shape[0]
    H, hd = m.num_heads, E // m.num_heads
    if m._qkv_same_embed_dim:
        wq, wk, wv = m.in_proj_weight.chunk(3)
    else:
        wq, wk, wv = m.q_proj_weight, m.k_proj_weight, m.v_proj_weight
    bq = bk = bv = None
    if m.in_proj_bias is not None:
        bq, bk, bv = m.in_proj_bias.chunk(3)
    q, k, v = F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)
    # The additive mask over the original S keys, (N*H, L, S).
    add = torch.zeros(N * H, L, S, dtype=q.dtype)
    if attn_mask is not None:
        am = attn_mask if attn_mask.dim() == 3 else attn_mask.unsqueeze(0).expand(N * H, L, S)
        add = add.masked_fill(am, float('-inf')) if am.dtype == torch.bool else add + am
    if key_padding_mask is not None:
        kp = key_padding_mask.view(N, 1, 1, S).expand(N, H, L, S).reshape(N * H, L, S)
        add = add.masked_fill(kp, float('-inf')) if kp.dtype == torch.bool else add + kp
    if m.bias_k is not None:
        k = torch.cat([k, m.bias_k.repeat(1, N, 1)])
        v = torch.cat([v, m.bias_v.repeat(1, N, 1)])
        add = F.pad(add, (0, 1))
    q = q.reshape(L, N * H, hd).transpose(0, 1)
    k = k.reshape(k.shape[0], N * H, hd).transpose(0, 1)
    v = v.reshape(v.shape[0], N * H, hd).transpose(0, 1)
    if m.add_zero_attn:
        k = torch.cat([k, torch.zeros(N * H, 1, hd)], dim=1)
        v = torch.cat([v, torch.zeros(N * H, 1, hd)], dim=1)
        add = F.pad(add, (0, 1))
    s = torch.bmm(q / math.sqrt(hd), k.transpose(1, 2)) + add
    dead = torch.isinf(s).all(dim=-1, keepdim=True) & (s < 0).all(dim=-1, keepdim=True)
    s = s.masked_fill(dead, 0.0)
    w = torch.softmax(s, dim=-1).masked_fill(dead, 0.0)
    o = torch.bmm(w, v).transpose(0, 1).reshape(L, N, E)
    out = F.linear(o, m.out_proj.weight, m.out_proj.bias)
    if m.batch_first and batched:
        out = out.transpose(0, 1)
    if not batched:
        out = out.squeeze(1)
    if not need_weights:
        return out, None
    w = w.view(N, H, L, -1)
    if average_attn_weights:
        w = w.sum(dim=1) / H
    if not batched:
        w = w.squeeze(0)
    return out, w


def random_case(rng, idx):
    c = {}
    H = rng.choice([1, 2, 3, 4])
    hd = rng.choice([1, 2, 3, 4, 8])
    E = H * hd
    c['embed_dim'], c['num_heads'] = E, H
    c['bias'] = rng.random() < 0.7
    c['add_bias_kv'] = rng.random() < 0.3
    c['add_zero_attn'] = rng.random() < 0.3
    c['self'] = rng.random() < 0.4
    separate = (not c['self']) and rng.random() < 0.35
    c['kdim'] = rng.choice([2, 5, 7]) if separate else E
    c['vdim'] = rng.choice([3, 5, 6]) if separate else E
    c['batch_first'] = rng.random() < 0.5
    c['batched'] = rng.random() < 0.75
    c['N'] = rng.choice([1, 2, 3]) if c['batched'] else 1
    c['L'] = rng.choice([1, 2, 3, 5, 8, 13])
    c['S'] = c['L'] if c['self'] else rng.choice([1, 2, 4, 6, 9, 17])
    c['dropout'] = rng.choice([0.0, 0.0, 0.1, 0.5])
    c['need_weights'] = rng.random() < 0.7
    c['average_attn_weights'] = rng.random() < 0.5
    c['attn_mask'] = rng.choice(['none', 'none', 'bool2', 'float2', 'bool3', 'float3'])
    c['key_padding_mask'] = rng.choice(['none', 'none', 'bool', 'float'])
    if c['key_padding_mask'] == 'float' and c['attn_mask'] != 'none':
        c['key_padding_mask'] = 'bool'  # PyTorch 1.13 cannot mix a float kpm with a mask
    c['causal'] = rng.choice([0, 0, 0, 1, 2])  # none, top-left, bottom-right
    c['window'] = rng.choice([-1, -1, -1, 0, 1, 3])
    c['dead_row'] = rng.random() < 0.15  # force a query row with every key masked
    if c['key_padding_mask'] == 'float':
        # PyTorch 1.13 adds a float key_padding_mask only when there is no
        # attn_mask (with a bool one it takes nonzero as masked, with a float
        # one it fails); qkv always adds it, as PyTorch 2 does.
        c['causal'], c['window'], c['dead_row'] = 0, -1, False
    c['seed'] = idx
    return c


def make_case(c, gen):
    E, H, N, L, S = c['embed_dim'], c['num_heads'], c['N'], c['L'], c['S']
    torch.manual_seed(c['seed'])
    m = torch.nn.MultiheadAttention(E, H, dropout=c['dropout'], bias=c['bias'],
                                    add_bias_kv=c['add_bias_kv'],
                                    add_zero_attn=c['add_zero_attn'], kdim=c['kdim'],
                                    vdim=c['vdim'], batch_first=c['batch_first'])
    # Non-zero biases so that their gradients and uses are tested too.
    with torch.no_grad():
        for name, p in m.named_parameters():
            if 'bias' in name:
                p.uniform_(-0.5, 0.5)
    # Dropout cannot be matched draw for draw: p > 0 runs in eval mode.
    m.train(c['dropout'] == 0.0)

    def seq(length, dim):
        if not c['batched']:
            shape = (length, dim)
        elif c['batch_first']:
            shape = (N, length, dim)
        else:
            shape = (length, N, dim)
        return torch.randn(shape, generator=gen).requires_grad_(True)

    query = seq(L, E)
    key = query if c['self'] else seq(S, c['kdim'])
    value = query if c['self'] else seq(S, c['vdim'])

    NH = N * H
    attn_mask = None
    kind = c['attn_mask']
    mshape = (L, S) if kind.endswith('2') else (NH, L, S)
    if kind.startswith('bool'):
        attn_mask = torch.rand(mshape, generator=gen) < 0.25
    elif kind.startswith('float'):
        attn_mask = torch.randn(mshape, generator=gen)
        attn_mask[torch.rand(mshape, generator=gen) < 0.15] = float('-inf')
    kpm = None
    kshape = (N, S) if c['batched'] else (S,)
    if c['key_padding_mask'] == 'bool':
        kpm = torch.rand(kshape, generator=gen) < 0.25
    elif c['key_padding_mask'] == 'float':
        kpm = torch.randn(kshape, generator=gen)
    if c['dead_row']:
        if attn_mask is None:
            attn_mask = torch.zeros(mshape, dtype=torch.bool)
        row = L // 2
        if attn_mask.dtype == torch.bool:
            attn_mask[..., row, :] = True
        else:
            attn_mask[..., row, :] = float('-inf')

    # qkv's causal and window flags, as a mask PyTorch understands.
    i = torch.arange(L).view(L, 1)
    j = torch.arange(S).view(1, S)
    ia = i + (S - L if c['causal'] == 2 else 0)
    extra = torch.zeros(L, S, dtype=torch.bool)
    if c['causal']:
        extra |= j > ia
    if c['window'] >= 0:
        extra |= (j > ia + c['window']) | (j < ia - c['window'])
    torch_mask = attn_mask
    if extra.any():
        if attn_mask is None:
            torch_mask = extra
        elif attn_mask.dtype == torch.bool:
            torch_mask = attn_mask | extra
        else:
            torch_mask = attn_mask.masked_fill(extra, float('-inf'))

    kw = dict(key_padding_mask=kpm, need_weights=c['need_weights'], attn_mask=torch_mask,
              average_attn_weights=c['average_attn_weights'])
    out, w = m(query, key, value, **kw)
    ref_out, ref_w = reference_mha(m, query, key, value, torch_mask, kpm, c['need_weights'],
                                   c['average_attn_weights'])
    # The written-out reference must agree with PyTorch wherever PyTorch has numbers.
    fin = torch.isfinite(out)
    assert torch.allclose(out[fin], ref_out[fin], rtol=1e-5, atol=1e-5), 'reference != torch'
    nan_rows = not bool(fin.all())
    if nan_rows:
        out, w = ref_out, ref_w
    dout = torch.randn(out.shape, generator=gen)
    params = dict(m.named_parameters())
    leaves = {'query': query} if c['self'] else {'query': query, 'key': key, 'value': value}
    grads = torch.autograd.grad((out * dout).sum(), list(leaves.values()) + list(params.values()),
                                allow_unused=True)
    t = {}
    for name, p in params.items():
        t[name] = p.detach()
    for name, x in leaves.items():
        t[name] = x.detach()
    if attn_mask is not None:
        t['attn_mask'] = attn_mask
    if kpm is not None:
        t['key_padding_mask'] = kpm
    t['out'] = out.detach()
    if w is not None:
        t['weights'] = w.detach()
    t['dout'] = dout
    for name, g in zip(list(leaves) + list(params), grads):
        t['grad.' + name] = torch.zeros_like(t[name]) if g is None else g
    for name, x in t.items():
        if 'mask' not in name:
            assert not torch.isnan(x).any(), f'NaN left in {name}'
    meta = {k: str(int(v)) if isinstance(v, bool) else str(v) for k, v in c.items()}
    meta['training'] = str(int(m.training))
    meta['nan_rows'] = str(int(nan_rows))
    return t, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', required=True)
    ap.add_argument('--cases', type=int, default=240)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    nan_cases = 0
    for idx in range(a.cases):
        c = random_case(rng, a.seed * 100000 + idx)
        t, meta = make_case(c, gen)
        nan_cases += meta['nan_rows'] == '1'
        safetensors_io.save(os.path.join(a.out, f'case_{idx:04d}.safetensors'), t, meta)
    print(f'mha_oracle: wrote {a.cases} cases to {a.out} ({nan_cases} with rows PyTorch makes NaN)')


if __name__ == '__main__':
    main()
