#!/usr/bin/python3
"""PyTorch oracle for qkv's CNN layers (run with /usr/bin/python3).

Writes one safetensors file per case (tools/safetensors_io.py), cycling
through four kinds (metadata "kind"); every computation runs in float64 on
float32 values:

  conv   F.conv2d with random sizes, stride, padding, dilation, bias, and
         unbatched (C,H,W) input: "x", "weight", "bias" (when given), "y",
         "dy", "grad.x", "grad.weight", "grad.bias"; metadata stride_h,
         stride_w, padding_h, padding_w, dilation_h, dilation_w.
  pool   F.max_pool2d on values drawn from a few levels (so windows hold
         ties), random kernel, stride (or the default), padding, dilation,
         ceil_mode: "x", "y", "dy", "grad.x"; metadata kernel_h, kernel_w,
         stride_h, stride_w (0: default), padding_h, padding_w, dilation_h,
         dilation_w, ceil_mode.
  bn     nn.BatchNorm2d (random affine; momentum 0.1, 0.3, None in turn) run for
         `steps` training steps on "x0".."x{steps-1}", backward of
         sum(y * dy) at the last one; then in eval mode on "xe" with "dye":
         "bn.<state_dict names>" before the steps, "y", "dy", "grad.x",
         "grad.weight", "grad.bias", "after.running_mean", "after.running_var",
         "after.num_batches_tracked", "ye", "grad_e.x", "grad_e.weight",
         "grad_e.bias"; metadata C, affine, momentum ("none" for None), steps.
  cnn    the CNN of src/models/cnn.c as nn.Sequential (metadata in_channels,
         height, width, hidden, num_classes, blocks, channels "32,64"),
         a training-mode forward and backward of sum(logits * dlogits) on "x",
         then an eval forward on "x": "model.<state_dict names>" (initial),
         "logits", "dlogits", "grad.<name>" per parameter, "grad.x",
         "after.<buffer names>", "logits_eval"; and an MLP (metadata
         mlp_hidden "256,128", possibly empty) on the same x: "mlp.<names>",
         "mlp_logits", "mlp_dlogits", "mlp_grad.x", "mlp_grad.<name>".

Usage: conv_oracle.py --out DIR --cases N [--seed 1].
       conv_oracle.py --load-check PATH
The second form loads a state_dict that qkv saved from its default CNN
after one training step into PyTorch's nn.Sequential (strict), and exits 0
when every key matched, the buffers kept their dtypes (num_batches_tracked
int64, equal to 1) and an eval forward runs.
"""
import argparse
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def rnd(gen, *shape):
    return torch.randn(*shape, generator=gen).float().double()


def conv_case(rng, gen):
    while True:
        N, Cin, Cout = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 4)
        H, W = rng.randint(1, 9), rng.randint(1, 9)
        kh, kw = rng.randint(1, 4), rng.randint(1, 4)
        s = (rng.randint(1, 3), rng.randint(1, 3))
        p = (rng.randint(0, 2), rng.randint(0, 2))
        d = (rng.randint(1, 2), rng.randint(1, 2))
        if H + 2 * p[0] >= d[0] * (kh - 1) + 1 and W + 2 * p[1] >= d[1] * (kw - 1) + 1:
            break
    unbatched = rng.random() < 0.15
    x = rnd(gen, *((Cin, H, W) if unbatched else (N, Cin, H, W))).requires_grad_(True)
    w = (rnd(gen, Cout, Cin, kh, kw) * 0.5).requires_grad_(True)
    b = rnd(gen, Cout).requires_grad_(True) if rng.random() < 0.7 else None
    y = F.conv2d(x, w, b, s, p, d)
    dy = rnd(gen, *y.shape)
    leaves = [x, w] + ([b] if b is not None else [])
    grads = torch.autograd.grad((y * dy).sum(), leaves)
    t = dict(x=x, weight=w, y=y, dy=dy)
    t['grad.x'], t['grad.weight'] = grads[0], grads[1]
    if b is not None:
        t['bias'], t['grad.bias'] = b, grads[2]
    meta = dict(stride_h=s[0], stride_w=s[1], padding_h=p[0], padding_w=p[1],
                dilation_h=d[0], dilation_w=d[1])
    return t, meta


def pool_case(rng, gen):
    while True:
        N, C = rng.randint(1, 3), rng.randint(1, 3)
        H, W = rng.randint(1, 9), rng.randint(1, 9)
        k = (rng.randint(1, 4), rng.randint(1, 4))
        s = (rng.randint(1, 3), rng.randint(1, 3)) if rng.random() < 0.7 else None
        p = (rng.randint(0, k[0] // 2), rng.randint(0, k[1] // 2))
        d = (rng.randint(1, 2), rng.randint(1, 2))
        ceil = rng.random() < 0.3
        x = torch.randint(-3, 4, (N, C, H, W), generator=gen).double() * 0.5  # ties
        try:
            y = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
        except RuntimeError:
            continue  # the window does not fit: qkv's test covers the error
        break
    x.requires_grad_(True)
    y = F.max_pool2d(x, k, s, p, d, ceil_mode=ceil)
    dy = rnd(gen, *y.shape)
    (gx,) = torch.autograd.grad((y * dy).sum(), [x])
    ss = s if s is not None else (0, 0)
    meta = dict(kernel_h=k[0], kernel_w=k[1], stride_h=ss[0], stride_w=ss[1], padding_h=p[0],
                padding_w=p[1], dilation_h=d[0], dilation_w=d[1], ceil_mode=int(ceil))
    return {'x': x, 'y': y, 'dy': dy, 'grad.x': gx}, meta


def bn_case(rng, gen, j):
    C, steps = rng.randint(1, 4), rng.randint(1, 4)
    affine = rng.random() < 0.75
    momentum = (0.1, 0.3, None)[j % 3]  # the j-th bn case: each in turn
    m = torch.nn.BatchNorm2d(C, affine=affine, momentum=momentum).double()
    if affine:  # away from the ones/zeros init, so weight and bias matter
        with torch.no_grad():
            m.weight.copy_(rnd(gen, C))
            m.bias.copy_(rnd(gen, C))
    t = {'bn.' + k: v.clone() for k, v in m.state_dict().items()}
    m.train()
    for i in range(steps):
        N, H, W = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 4)
        if N * H * W == 1:
            W = 2
        x = (rnd(gen, N, C, H, W) * 2 + 0.5).requires_grad_(True)
        t['x%d' % i] = x
        y = m(x)
    dy = rnd(gen, *y.shape)
    params = [x] + ([m.weight, m.bias] if affine else [])
    g = torch.autograd.grad((y * dy).sum(), params)
    t.update(y=y, dy=dy)
    t['grad.x'] = g[0]
    if affine:
        t['grad.weight'], t['grad.bias'] = g[1], g[2]
    for k in ('running_mean', 'running_var', 'num_batches_tracked'):
        t['after.' + k] = getattr(m, k).clone()
    m.eval()
    xe = (rnd(gen, rng.randint(1, 3), C, rng.randint(1, 4), rng.randint(1, 4)) * 2).requires_grad_(True)
    ye = m(xe)
    dye = rnd(gen, *ye.shape)
    params = [xe] + ([m.weight, m.bias] if affine else [])
    g = torch.autograd.grad((ye * dye).sum(), params)
    t.update(xe=xe, ye=ye, dye=dye)
    t['grad_e.x'] = g[0]
    if affine:
        t['grad_e.weight'], t['grad_e.bias'] = g[1], g[2]
    meta = dict(C=C, affine=int(affine), momentum='none' if momentum is None else momentum, steps=steps)
    return t, meta


def make_cnn(cin, h, w, channels, hidden, classes):
    layers = []
    for c in channels:
        layers += [torch.nn.Conv2d(cin, c, 3, padding=1), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
                   torch.nn.MaxPool2d(2)]
        cin, h, w = c, h // 2, w // 2
    layers += [torch.nn.Flatten(), torch.nn.Linear(cin * h * w, hidden), torch.nn.ReLU(),
               torch.nn.Linear(hidden, classes)]
    return torch.nn.Sequential(*layers)


def cnn_case(rng, gen, default):
    if default:
        cfg = dict(in_channels=1, height=28, width=28, hidden=128, num_classes=10, channels=[32, 64])
        N = 2
    else:
        cfg = dict(in_channels=rng.randint(1, 3), height=rng.randint(4, 9), width=rng.randint(4, 9),
                   hidden=rng.randint(3, 8), num_classes=rng.randint(2, 5),
                   channels=[rng.randint(2, 5) for _ in range(rng.randint(1, 2))])
        N = rng.randint(2, 3)
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = make_cnn(cfg['in_channels'], cfg['height'], cfg['width'], cfg['channels'], cfg['hidden'],
                 cfg['num_classes']).double()
    with torch.no_grad():  # BatchNorm affine away from its init
        for mod in m:
            if isinstance(mod, torch.nn.BatchNorm2d):
                mod.weight.copy_(1 + 0.3 * rnd(gen, mod.num_features))
                mod.bias.copy_(0.3 * rnd(gen, mod.num_features))
    for k, v in m.state_dict().items():  # float32 values
        v.copy_(v.float().double())
    t = {'model.' + k: v.clone() for k, v in m.state_dict().items()}
    x = rnd(gen, N, cfg['in_channels'], cfg['height'], cfg['width']).requires_grad_(True)
    m.train()
    logits = m(x)
    dl = rnd(gen, *logits.shape)
    names = [k for k, _ in m.named_parameters()]
    g = torch.autograd.grad((logits * dl).sum(), [x] + [p for _, p in m.named_parameters()])
    t.update(x=x, logits=logits, dlogits=dl)
    t['grad.x'] = g[0]
    for k, gk in zip(names, g[1:]):
        t['grad.' + k] = gk
    for k, v in m.named_buffers():
        t['after.' + k] = v.clone()
    m.eval()
    with torch.no_grad():
        t['logits_eval'] = m(x)
    meta = dict(cfg, blocks=len(cfg['channels']), channels=','.join(str(c) for c in cfg['channels']),
                params=sum(p.numel() for p in m.parameters()))
    # the MLP baseline on the same images
    hidden = [256, 128] if default else [rng.randint(2, 6) for _ in range(rng.randint(0, 3))]
    dims = [cfg['in_channels'] * cfg['height'] * cfg['width']] + hidden + [cfg['num_classes']]
    layers = [torch.nn.Flatten()]
    for i in range(len(dims) - 1):
        layers += [torch.nn.Linear(dims[i], dims[i + 1])] + ([torch.nn.ReLU()] if i < len(dims) - 2 else [])
    mlp = torch.nn.Sequential(*layers).double()
    for v in mlp.state_dict().values():
        v.copy_(v.float().double())
    t.update({'mlp.' + k: v.clone() for k, v in mlp.state_dict().items()})
    x.grad = None
    out = mlp(x)
    dm = rnd(gen, *out.shape)
    g = torch.autograd.grad((out * dm).sum(), [x] + list(mlp.parameters()))
    t.update(mlp_logits=out, mlp_dlogits=dm)
    t['mlp_grad.x'] = g[0]
    for (k, _), gk in zip(mlp.named_parameters(), g[1:]):
        t['mlp_grad.' + k] = gk
    meta.update(mlp_hidden=','.join(str(h) for h in hidden), mlp_params=sum(p.numel() for p in mlp.parameters()))
    return t, meta


def load_check(path):
    t, _ = safetensors_io.load(path)
    m = make_cnn(1, 28, 28, [32, 64], 128, 10)
    m.load_state_dict(t, strict=True)
    for k in ('1.num_batches_tracked', '5.num_batches_tracked'):
        b = m.state_dict()[k]
        if b.dtype != torch.int64 or int(b) != 1:
            sys.exit('%s: %s %s, expected int64 1' % (path, k, b))
    if float(m.state_dict()['1.running_var'].sub(1).abs().max()) == 0:
        sys.exit('%s: running_var never moved' % path)
    with torch.no_grad():
        y = m.eval()(torch.randn(2, 1, 28, 28))
    if not torch.isfinite(y).all():
        sys.exit('%s: non-finite logits' % path)
    print('load-check ok: %d tensors' % len(t))


def main():
    if sys.argv[1:2] == ['--load-check']:
        load_check(sys.argv[2])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--cases', type=int, default=40)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(1)
    for i in range(a.cases):
        kind = ('conv', 'pool', 'bn', 'cnn')[i % 4]
        if kind == 'conv':
            t, meta = conv_case(rng, gen)
        elif kind == 'pool':
            t, meta = pool_case(rng, gen)
        elif kind == 'bn':
            t, meta = bn_case(rng, gen, i // 4)
        else:
            t, meta = cnn_case(rng, gen, default=(i == 3))
        out = {}
        for k, v in t.items():
            v = v.detach()
            out[k] = v.contiguous() if v.dtype == torch.int64 else v.float().contiguous()
        meta['kind'] = kind
        safetensors_io.save(os.path.join(a.out, 'case_%04d.safetensors' % i), out,
                            {k: str(v) for k, v in meta.items()})
    print(a.cases)


if __name__ == '__main__':
    main()
