#!/usr/bin/python3
"""PyTorch oracle for qkv's transformers (run with /usr/bin/python3).

Mode 1, parity cases:

    transformer_oracle.py --out DIR [--cases 120] [--seed 1]

builds random torch.nn.TransformerEncoderLayer, TransformerDecoderLayer,
TransformerEncoder, TransformerDecoder, Transformer modules and decoder-only
stacks (TransformerEncoder + causal mask) of small sizes: post- and pre-norm,
relu, gelu and tanh-gelu, bias and PyTorch 2.1's bias=False (emulated by
setting the biases to None), batch_first both ways, batched and unbatched,
one to three layers, with and without each mask (bool and float, 2-D and
3-D, key padding masks, generate_square_subsequent_mask, and qkv's causal
flag, which PyTorch gets as the equivalent mask). It runs each in float64 on
float32 values (so the reference is the function, not float32 rounding),
takes the backward of a random linear functional sum(out * dout), and writes
one safetensors file per case: parameters under their state_dict names, the
inputs (src, tgt, memory), the masks qkv gets, out, dout, and grad.<name> of
every input and parameter. The configuration is in __metadata__.

Dropout cannot be matched draw for draw: a case with 0 < dropout < 1 runs
in eval mode, one with dropout 0 in either mode, and a few with dropout 1
in training mode (deterministic: every block's output is dropped). References are computed with
requires_grad on, so PyTorch 1.13 takes its normal path, not the eval-mode
fast path (torch._transformer_encoder_layer_fwd). Every query row keeps at
least one key (key 0 is never masked): PyTorch gives NaN on fully masked
rows, qkv gives 0. A float key padding mask is used only where its attention
has no other mask (PyTorch 1.13 cannot combine them; qkv adds them).

Mode 2, a model trained in qkv:

    transformer_oracle.py --check-trained DIR

loads DIR/params.safetensors (the state_dict qkv saved, its configuration
in __metadata__) into nn.Transformer with load_state_dict(strict=True), runs
it in eval mode on the inputs of DIR/io.safetensors (src, tgt and the masks
there), and compares with qkv's output (out): in float64 (within 1e-5) and
as a user would run it, float32 under torch.no_grad() (within 1e-4, PyTorch's
fast path included). Exit status 0 when both agree.
"""
import argparse
import functools
import os
import random
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

ACTIVATIONS = ['relu', 'gelu', 'gelu_tanh']  # qkv_activation order


def activation_fn(name):
    if name == 'gelu_tanh':
        return functools.partial(F.gelu, approximate='tanh')
    return name


def rel_err(a, b):
    """max |a - b| / max |b|, as tests/harness.h's h_rel_err."""
    d = (a.double() - b.double()).abs().max().item()
    s = b.double().abs().max().item()
    return 0.0 if d == 0 else d / (s if s > 0 else 1e-30)


# ---- random configurations ----------------------------------------------

KINDS = ['encoder_layer', 'decoder_layer', 'encoder', 'decoder', 'transformer', 'decoder_only']


def random_case(rng, idx):
    c = {'kind': KINDS[idx % len(KINDS)], 'seed': idx}
    H = rng.choice([1, 2, 3, 4])
    hd = rng.choice([2, 3, 4]) if H > 1 else rng.choice([4, 5, 8])
    c['d_model'], c['nhead'] = H * hd, H
    c['dim_feedforward'] = rng.choice([3, 8, 16, 24])
    c['dropout'] = rng.choice([0.0, 0.0, 0.1, 0.3])
    c['activation'] = rng.randrange(3)
    c['layer_norm_eps'] = rng.choice([1e-5, 1e-5, 1e-3])
    c['batch_first'] = rng.random() < 0.5
    c['norm_first'] = rng.random() < 0.5
    c['bias'] = rng.random() < 0.85
    c['batched'] = rng.random() < 0.8
    c['N'] = rng.choice([1, 2, 3]) if c['batched'] else 1
    c['S'] = rng.choice([1, 2, 3, 5, 7])
    c['T'] = rng.choice([1, 2, 4, 6])
    if c['kind'] in ('encoder_layer', 'encoder', 'decoder_only'):
        c['T'] = c['S']
    c['num_layers'] = rng.choice([1, 2, 3])
    c['num_encoder_layers'] = rng.choice([1, 2])
    c['num_decoder_layers'] = rng.choice([1, 2])
    c['norm'] = rng.random() < 0.6  # encoder, decoder, decoder_only: a final LayerNorm
    # The layers' fast path does not accept bias=False (None) parameters.
    c['training'] = c['dropout'] == 0.0 and (not c['bias'] or rng.random() < 0.5)
    if rng.random() < 0.06:
        # Dropout 1 in training is deterministic (every block's output is 0):
        # it checks that each block ends in a dropout that training turns on.
        c['dropout'], c['training'] = 1.0, True
    # Masks per attention: 'src' (encoder self), 'tgt' (decoder self), 'memory' (cross).
    for a in ('src', 'tgt', 'memory'):
        square = a != 'memory'
        kinds = ['none', 'none', 'bool2', 'float2', 'bool3', 'float3']
        if square:
            kinds += ['causal', 'flag', 'flag+bool2', 'flag+float3']
        c[a + '_mask'] = rng.choice(kinds)
        kpm = rng.choice(['none', 'none', 'bool', 'float'])
        if kpm == 'float' and c[a + '_mask'] != 'none':
            kpm = 'bool'  # PyTorch 1.13 cannot combine a float kpm with a mask
        c[a + '_kpm'] = kpm
    if c['kind'] == 'decoder_only':
        c['src_mask'] = 'flag'
        c['src_kpm'] = rng.choice(['none', 'bool'])
    # The stacks' final LayerNorm has an eps of its own (drawn last, so the
    # draws above are those of earlier versions).
    c['norm_eps'] = rng.choice([1e-5, 1e-6, 1e-2]) if c['norm'] else 0.0
    return c


def perturb(m, gen):
    """Non-default values everywhere, so that every parameter's use and
    gradient is tested and cloned layers differ."""
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() > 1:
                p.add_(torch.randn(p.shape, generator=gen) * p.std().clamp(min=0.05) * 0.5)
            elif name.endswith('norm1.weight') or name.endswith('norm2.weight') or \
                    name.endswith('norm3.weight') or name.endswith('norm.weight'):
                p.uniform_(0.5, 1.5, generator=gen)
            else:
                p.uniform_(-0.5, 0.5, generator=gen)


def drop_biases(m):
    """PyTorch 2.1's bias=False on a 1.13 module: every bias is None."""
    for mod in m.modules():
        if isinstance(mod, nn.MultiheadAttention):
            mod.in_proj_bias = None
        elif isinstance(mod, (nn.Linear, nn.LayerNorm)):
            mod.bias = None


def layer_kwargs(c):
    return dict(dim_feedforward=c['dim_feedforward'], dropout=c['dropout'],
                activation=activation_fn(ACTIVATIONS[c['activation']]),
                layer_norm_eps=c['layer_norm_eps'], batch_first=c['batch_first'],
                norm_first=c['norm_first'])


def build(c):
    E, H = c['d_model'], c['nhead']
    kw = layer_kwargs(c)
    kind = c['kind']
    if kind == 'encoder_layer':
        return nn.TransformerEncoderLayer(E, H, **kw)
    if kind == 'decoder_layer':
        return nn.TransformerDecoderLayer(E, H, **kw)
    norm = nn.LayerNorm(E, eps=c['norm_eps']) if c['norm'] else None
    if kind in ('encoder', 'decoder_only'):
        return nn.TransformerEncoder(nn.TransformerEncoderLayer(E, H, **kw), c['num_layers'], norm)
    if kind == 'decoder':
        return nn.TransformerDecoder(nn.TransformerDecoderLayer(E, H, **kw), c['num_layers'], norm)
    return nn.Transformer(E, H, c['num_encoder_layers'], c['num_decoder_layers'], **kw)


def make_mask(kind, L, S, NH, gen):
    """(qkv's tensor or None, PyTorch's tensor or None, qkv's causal flag)."""
    if kind == 'none':
        return None, None, 0
    if kind == 'causal':
        m = nn.Transformer.generate_square_subsequent_mask(L)
        return m, m, 0
    flag = kind.startswith('flag')
    base = kind.split('+')[1] if '+' in kind else ('none' if flag else kind)
    m = None
    shape = (L, S) if base.endswith('2') else (NH, L, S)
    if base.startswith('bool'):
        m = torch.rand(shape, generator=gen) < 0.3
        m[..., 0] = False  # key 0 stays visible: no fully masked row
    elif base.startswith('float'):
        m = torch.randn(shape, generator=gen)
        m[torch.rand(shape, generator=gen) < 0.15] = float('-inf')
        m[..., 0] = torch.randn(shape[:-1], generator=gen)
    if not flag:
        return m, m, 0
    causal = torch.ones(L, S, dtype=torch.bool).triu(1)
    if m is None:
        tm = nn.Transformer.generate_square_subsequent_mask(L)
    elif m.dtype == torch.bool:
        tm = m | causal
    else:
        tm = m.masked_fill(causal, float('-inf'))
    return m, tm, 1


def make_kpm(kind, N, S, batched, gen):
    shape = (N, S) if batched else (S,)
    if kind == 'bool':
        k = torch.rand(shape, generator=gen) < 0.3
        k[..., 0] = False
        return k
    if kind == 'float':
        return torch.randn(shape, generator=gen)
    return None


def make_case(c, gen):
    E, H, N, S, T = c['d_model'], c['nhead'], c['N'], c['S'], c['T']
    torch.manual_seed(c['seed'])
    m = build(c)
    perturb(m, gen)
    if not c['bias']:
        drop_biases(m)
    m = m.double()
    m.train(c['training'])

    def seq(length):
        if not c['batched']:
            shape = (length, E)
        elif c['batch_first']:
            shape = (N, length, E)
        else:
            shape = (length, N, E)
        return torch.randn(shape, generator=gen)

    kind = c['kind']
    inputs = {}
    if kind in ('encoder_layer', 'encoder', 'decoder_only', 'transformer'):
        inputs['src'] = seq(S)
    if kind in ('decoder_layer', 'decoder', 'transformer'):
        inputs['tgt'] = seq(T)
    if kind in ('decoder_layer', 'decoder'):
        inputs['memory'] = seq(S)
    leaves = {k: v.double().requires_grad_(True) for k, v in inputs.items()}

    files, tm, meta = {}, {}, {}
    has = {'src': 'src' in inputs, 'tgt': 'tgt' in inputs, 'memory': 'tgt' in inputs}
    lens = {'src': (S, S), 'tgt': (T, T), 'memory': (T, S)}
    for a in ('src', 'tgt', 'memory'):
        meta[a + '_causal'] = '0'
        if not has[a]:
            continue
        L_, S_ = lens[a]
        qm, pm, flag = make_mask(c[a + '_mask'], L_, S_, N * H, gen)
        kp = make_kpm(c[a + '_kpm'], N, S_, c['batched'], gen)
        meta[a + '_causal'] = str(flag)
        if qm is not None:
            files[a + '_mask'] = qm
        if kp is not None:
            files[a + '_key_padding_mask'] = kp
        tm[a + '_mask'] = None if pm is None else (pm if pm.dtype == torch.bool else pm.double())
        tm[a + '_kpm'] = None if kp is None else (kp if kp.dtype == torch.bool else kp.double())

    x = leaves
    if kind == 'encoder_layer':
        out = m(x['src'], src_mask=tm['src_mask'], src_key_padding_mask=tm['src_kpm'])
    elif kind in ('encoder', 'decoder_only'):
        out = m(x['src'], mask=tm['src_mask'], src_key_padding_mask=tm['src_kpm'])
    elif kind in ('decoder_layer', 'decoder'):
        out = m(x['tgt'], x['memory'], tgt_mask=tm['tgt_mask'], memory_mask=tm['memory_mask'],
                tgt_key_padding_mask=tm['tgt_kpm'], memory_key_padding_mask=tm['memory_kpm'])
    else:
        out = m(x['src'], x['tgt'], src_mask=tm['src_mask'], tgt_mask=tm['tgt_mask'],
                memory_mask=tm['memory_mask'], src_key_padding_mask=tm['src_kpm'],
                tgt_key_padding_mask=tm['tgt_kpm'], memory_key_padding_mask=tm['memory_kpm'])
    assert torch.isfinite(out).all(), 'PyTorch gave a non-finite output'
    dout = torch.randn(out.shape, generator=gen)
    params = dict(m.named_parameters())
    grads = torch.autograd.grad((out * dout.double()).sum(),
                                list(leaves.values()) + list(params.values()), allow_unused=True)
    t = {}
    for name, p in params.items():
        t[name] = p.detach().float()
    for name, v in inputs.items():
        t[name] = v
    t.update(files)
    t['out'] = out.detach().float()
    t['dout'] = dout
    for name, g in zip(list(leaves) + list(params), grads):
        t['grad.' + name] = torch.zeros_like(t[name]) if g is None else g.float()
    skip = ('kind', 'src_mask', 'tgt_mask', 'memory_mask', 'src_kpm', 'tgt_kpm', 'memory_kpm')
    for k, v in c.items():
        if k not in skip:
            meta[k] = str(int(v)) if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)
    meta['kind'] = kind
    for a in ('src', 'tgt', 'memory'):
        meta[a + '_mask_kind'] = c[a + '_mask']
        meta[a + '_kpm_kind'] = c[a + '_kpm']
    return t, meta


def write_cases(out_dir, cases, seed):
    os.makedirs(out_dir, exist_ok=True)
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for idx in range(cases):
        c = random_case(rng, idx)
        t, meta = make_case(c, gen)
        safetensors_io.save(os.path.join(out_dir, f'case_{idx:04d}.safetensors'), t, meta)
    print(f'transformer_oracle: wrote {cases} cases to {out_dir}')
    return 0


# ---- mode 2: a model trained in qkv --------------------------------------

def check_trained(d):
    warnings.filterwarnings('ignore', message='The PyTorch API of nested tensors')
    params, meta = safetensors_io.load(os.path.join(d, 'params.safetensors'))
    io, _ = safetensors_io.load(os.path.join(d, 'io.safetensors'))
    gi = lambda k: int(meta[k])
    gf = lambda k: float(meta[k])
    m = nn.Transformer(gi('d_model'), gi('nhead'), gi('num_encoder_layers'),
                       gi('num_decoder_layers'), gi('dim_feedforward'), gf('dropout'),
                       activation_fn(ACTIVATIONS[gi('activation')]),
                       layer_norm_eps=gf('layer_norm_eps'), batch_first=bool(gi('batch_first')),
                       norm_first=bool(gi('norm_first')))
    m.load_state_dict(params, strict=True)  # every name, both ways, and every shape
    m.eval()
    kw = {k: io.get(k) for k in ('src_mask', 'tgt_mask', 'memory_mask', 'src_key_padding_mask',
                                 'tgt_key_padding_mask', 'memory_key_padding_mask')}
    want = io['out']
    with torch.no_grad():
        out32 = m(io['src'], io['tgt'], **kw)
    md = m.double()
    kw64 = {k: (v.double() if v is not None and v.dtype != torch.bool else v) for k, v in kw.items()}
    src = io['src'].double().requires_grad_(True)  # the normal path, in float64
    out64 = md(src, io['tgt'].double(), **kw64)
    e64, e32 = rel_err(want, out64.detach()), rel_err(want, out32)
    print(f'transformer_oracle: trained qkv model in nn.Transformer: {len(params)} tensors '
          f'loaded strictly, output error {e64:.3g} (float64), {e32:.3g} (float32, no_grad)')
    ok = out64.shape == want.shape and e64 <= 1e-5 and e32 <= 1e-4
    if not ok:
        print('transformer_oracle: qkv and PyTorch disagree', file=sys.stderr)
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out')
    ap.add_argument('--cases', type=int, default=120)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--check-trained')
    a = ap.parse_args()
    if a.check_trained:
        return check_trained(a.check_trained)
    if not a.out:
        ap.error('--out DIR or --check-trained DIR')
    return write_cases(a.out, a.cases, a.seed)


if __name__ == '__main__':
    sys.exit(main())
