#!/usr/bin/python3
"""PyTorch oracle for qkv's layers (run with /usr/bin/python3).

For random shapes and options, runs each op of include/qkv/nn.h in PyTorch
1.13, takes the backward of the random linear functional sum(y * dout), and
writes one safetensors file per case (tools/safetensors_io.py):

  - the inputs under their names ("x", "a", "b", "ids") and the parameters
    under their state_dict names ("weight", "bias", "0.weight", ...),
  - "y" (the output), "dout", and "grad.<name>" for every differentiable
    input and parameter,
  - __metadata__: "op" and the op's options; "inputs", the comma-separated
    names that have a gradient; "module", the torch.nn class when the case
    was built as a module (the C test then runs both the functional op and
    qkv's module, loading the parameters by name).

Ops: relu, tanh, gelu (approximate none and tanh), add (same shape and
broadcast over leading dims, either way round), cat (dims 0..3 and negative),
layer_norm (with and without weight / bias), embedding (with and without
padding_idx, ids of 0..3 dims), conv1d (stride, padding, dilation, no bias,
unbatched, and the lecture's Conv1d(1,64,5,padding=2) and
Conv1d(64,64,5,padding=2)), linear (nn.Linear), sequential (the lecture's
Sequential(Conv1d, ReLU, Conv1d, GELU, Conv1d) in miniature).

Inputs, parameters and dout are float32 values; PyTorch computes in float64
from them (so the reference is PyTorch's function itself, not float32
rounding of it, which is ill-conditioned in places, e.g. layer_norm over 2
elements) and the results are stored rounded to float32.

Dropout is not here: qkv's masks do not match PyTorch's draws (the C test
checks it by its statistics).

Usage: layers_oracle.py --out DIR [--seed 1]; prints the number of cases.
"""
import argparse
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def randn(gen, *shape, scale=1.0):
    """N(0, scale^2) rounded to float32, as a float64 leaf."""
    x = torch.randn(tuple(shape), generator=gen) * scale
    return x.double().requires_grad_(True)


def rand_shape(rng, lo_nd, hi_nd, hi=6):
    return tuple(rng.randint(1, hi) for _ in range(rng.randint(lo_nd, hi_nd)))


def finish(gen, op, inputs, y, meta, params=None, module=None):
    """Backward of sum(y * dout); returns (tensors, metadata) for one file."""
    params = params or {}
    dout = torch.randn(y.shape, generator=gen).double()
    leaves = {**inputs, **params}
    diff = {k: v for k, v in leaves.items() if v.requires_grad}
    grads = torch.autograd.grad((y * dout).sum(), list(diff.values()), allow_unused=True)
    t = {k: v.detach() for k, v in leaves.items()}
    t['y'] = y.detach()
    t['dout'] = dout
    for k, g in zip(diff, grads):
        t['grad.' + k] = torch.zeros_like(diff[k]) if g is None else g
    # Inputs were float32 values already; results are rounded once, here.
    t = {k: (v.float() if v.is_floating_point() else v).contiguous() for k, v in t.items()}
    m = {k: str(v) for k, v in meta.items()}
    m['op'] = op
    m['inputs'] = ','.join(diff)
    if module:
        m['module'] = module
    return t, m


def case_activation(rng, gen, op):
    x = randn(gen, *rand_shape(rng, 1, 4), scale=2.0)
    with torch.no_grad():  # exact zeros: relu's gradient there is 0
        x.view(-1)[0] = 0.0
    meta = {}
    if op == 'relu':
        y = F.relu(x)
    elif op == 'tanh':
        y = torch.tanh(x)
    else:
        approx = rng.choice(['none', 'tanh'])
        y = F.gelu(x, approximate=approx)
        meta['approximate'] = int(approx == 'tanh')
    return finish(gen, op, {'x': x}, y, meta)


def case_add(rng, gen):
    big = rand_shape(rng, 1, 4)
    k = rng.randint(0, len(big))  # b is big's last len(big) - k dims (k = 0: same shape)
    a, b = randn(gen, *big), randn(gen, *big[k:])
    swap = rng.random() < 0.3
    if swap:
        a, b = b, a
    return finish(gen, 'add', {'a': a, 'b': b}, a + b, {'trailing': len(big) - k, 'swap': int(swap)})


def case_cat(rng, gen):
    shape = list(rand_shape(rng, 1, 4))
    dim = rng.randrange(-len(shape), len(shape))
    sb = list(shape)
    sb[dim] = rng.randint(1, 5)
    a, b = randn(gen, *shape), randn(gen, *sb)
    return finish(gen, 'cat', {'a': a, 'b': b}, torch.cat((a, b), dim), {'dim': dim})


def case_layer_norm(rng, gen):
    shape = rand_shape(rng, 1, 3) + (rng.choice([1, 2, 5, 16, 33]),)
    C = shape[-1]
    eps = rng.choice([1e-5, 1e-3, 0.1])
    x = torch.randn(shape, generator=gen) * 3 + torch.randn(shape[:-1] + (1,), generator=gen) * 5
    x = x.double().requires_grad_(True)  # rows with means far from 0
    affine = rng.choice(['both', 'both', 'none', 'weight', 'bias'])
    if affine == 'both' and rng.random() < 0.5:
        m = torch.nn.LayerNorm(C, eps=eps)
        with torch.no_grad():
            m.weight.copy_(torch.randn(C, generator=gen))
            m.bias.copy_(torch.randn(C, generator=gen))
        m.double()
        params = dict(m.named_parameters())
        return finish(gen, 'layer_norm', {'x': x}, m(x), {'eps': repr(eps), 'affine': affine},
                      params, 'LayerNorm')
    params = {}
    if affine in ('both', 'weight'):
        params['weight'] = randn(gen, C)
    if affine in ('both', 'bias'):
        params['bias'] = randn(gen, C)
    y = F.layer_norm(x, (C,), params.get('weight'), params.get('bias'), eps)
    return finish(gen, 'layer_norm', {'x': x}, y, {'eps': repr(eps), 'affine': affine}, params)


def case_embedding(rng, gen):
    num, dim = rng.randint(2, 10), rng.randint(1, 6)
    pad = rng.choice([-1, -1, rng.randrange(num)])
    ishape = rand_shape(rng, 0, 3)
    ids = torch.randint(0, num, ishape, generator=gen)
    if pad >= 0 and ids.numel() > 1:
        ids.view(-1)[1] = pad
    m = torch.nn.Embedding(num, dim, padding_idx=None if pad < 0 else pad)
    with torch.no_grad():
        m.weight.copy_(torch.randn(num, dim, generator=gen))  # a nonzero padding row too
    m.double()
    t, meta = finish(gen, 'embedding', {}, m(ids), {'padding_idx': pad},
                     dict(m.named_parameters()), 'Embedding')
    t['ids'] = ids
    return t, meta


def conv_case(gen, N, Cin, Cout, K, L, stride, padding, dilation, bias, unbatched=False):
    m = torch.nn.Conv1d(Cin, Cout, K, stride=stride, padding=padding, dilation=dilation, bias=bias)
    with torch.no_grad():
        if bias:
            m.bias.uniform_(-0.5, 0.5, generator=gen)
    m.double()
    x = randn(gen, *((Cin, L) if unbatched else (N, Cin, L)))
    meta = {'stride': stride, 'padding': padding, 'dilation': dilation, 'bias': int(bias),
            'in_channels': Cin, 'out_channels': Cout, 'kernel_size': K}
    return finish(gen, 'conv1d', {'x': x}, m(x), meta, dict(m.named_parameters()), 'Conv1d')


def case_conv1d(rng, gen):
    Cin, Cout, K = rng.randint(1, 5), rng.randint(1, 5), rng.randint(1, 5)
    stride, padding, dilation = rng.randint(1, 3), rng.randint(0, 3), rng.randint(1, 3)
    span = dilation * (K - 1) + 1
    L = max(1, span - 2 * padding) + rng.randint(0, 9)
    return conv_case(gen, rng.randint(1, 3), Cin, Cout, K, L, stride, padding, dilation,
                     rng.random() < 0.7, unbatched=rng.random() < 0.15)


def case_linear(rng, gen):
    i, o = rng.randint(1, 8), rng.randint(1, 8)
    bias = rng.random() < 0.7
    m = torch.nn.Linear(i, o, bias=bias).double()
    x = randn(gen, *(rand_shape(rng, 0, 2) + (i,)))
    meta = {'in_features': i, 'out_features': o, 'bias': int(bias)}
    return finish(gen, 'linear', {'x': x}, m(x), meta, dict(m.named_parameters()), 'Linear')


def case_sequential(rng, gen, approx):
    """The lecture's conv stack in miniature: (N,1,T) -> (N,1,T)."""
    C = 8
    m = torch.nn.Sequential(torch.nn.Conv1d(1, C, 5, padding=2), torch.nn.ReLU(),
                            torch.nn.Conv1d(C, C, 5, padding=2), torch.nn.GELU(approximate=approx),
                            torch.nn.Conv1d(C, 1, 1), torch.nn.Tanh()).double()
    x = randn(gen, 3, 1, 16)
    return finish(gen, 'sequential', {'x': x}, m(x), {'channels': C, 'approximate': int(approx == 'tanh')},
                  dict(m.named_parameters()), 'Sequential')


def all_cases(rng, gen):
    for op in ['relu', 'tanh']:
        for _ in range(6):
            yield case_activation(rng, gen, op)
    for _ in range(12):
        yield case_activation(rng, gen, 'gelu')
    for _ in range(12):
        yield case_add(rng, gen)
    for _ in range(12):
        yield case_cat(rng, gen)
    for _ in range(14):
        yield case_layer_norm(rng, gen)
    for _ in range(10):
        yield case_embedding(rng, gen)
    for _ in range(28):
        yield case_conv1d(rng, gen)
    yield conv_case(gen, 2, 1, 64, 5, 32, 1, 2, 1, True)    # the lecture's first layer
    yield conv_case(gen, 2, 64, 64, 5, 32, 1, 2, 1, True)   # and its middle ones
    yield conv_case(gen, 2, 64, 1, 1, 32, 1, 0, 1, False)   # a kernel_size=1 conv
    for _ in range(6):
        yield case_linear(rng, gen)
    yield case_sequential(rng, gen, 'none')
    yield case_sequential(rng, gen, 'tanh')


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    torch.manual_seed(a.seed)  # module initialisers
    n = 0
    for t, meta in all_cases(rng, gen):
        safetensors_io.save(os.path.join(a.out, f'case_{n:04d}.safetensors'), t, meta)
        n += 1
    with open(os.path.join(a.out, 'count'), 'w') as f:
        f.write(f'{n}\n')
    print(f'layers_oracle: wrote {n} cases to {a.out}')


if __name__ == '__main__':
    main()
