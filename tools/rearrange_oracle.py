#!/usr/bin/python3
"""PyTorch oracle for qkv_rearrange (run with /usr/bin/python3).

einops is not installed, so each case is built from its parts: random
elementary axes with random lengths, grouped into x's dims (unit dims "1"
or "()" among them, an ellipsis standing for some single-axis dims), a
random order of the axes grouped into y's dims, and the sizes string that
gives all but one length of each group (sometimes all). The reference is
what einops does, written in torch: x.reshape(elementary lengths)
.permute(right order).reshape(y's dims). The gradient is that of
sum(y * dout). One safetensors file per case (tools/safetensors_io.py):
"x", "y", "dout", "grad.x"; __metadata__: pattern, sizes.

A few fixed cases come first: the lecture's patchifier
"b c (h p1) (w p2) -> b (h w) (p1 p2 c)", the heads' split
"b n (h d) -> b h n d" and merge, a transpose, a pure reshape.

Usage: rearrange_oracle.py --out DIR --cases N [--seed 1].
"""
import argparse
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

NAMES = ['b', 'c', 'h', 'w', 'p1', 'p2', 'n', 'd', 'head', 'k', 'x_1', 't', 'q', 'z9']

FIXED = [
    # (left groups, right groups, lengths, given sizes)
    ([['b'], ['c'], ['h', 'p1'], ['w', 'p2']], [['b'], ['h', 'w'], ['p1', 'p2', 'c']],
     dict(b=2, c=3, h=2, p1=4, w=3, p2=4), ['p1', 'p2']),
    ([['b'], ['n'], ['h', 'd']], [['b'], ['h'], ['n'], ['d']], dict(b=2, n=5, h=3, d=4), ['h']),
    ([['b'], ['h'], ['n'], ['d']], [['b'], ['n'], ['h', 'd']], dict(b=2, n=5, h=3, d=4), []),
    ([['n'], ['d']], [['d'], ['n']], dict(n=3, d=7), []),
    ([['b'], ['h', 'w']], [['b'], ['h'], ['w']], dict(b=2, h=3, w=5), ['w']),
]


def fmt_side(groups):
    parts = []
    for g in groups:
        if g == 'unit1':
            parts.append('1')
        elif g == 'unit()':
            parts.append('()')
        elif isinstance(g, tuple):  # a top-level name (or the ellipsis), not in parentheses
            parts.append(g[0])
        else:
            parts.append('(' + ' '.join(g) + ')')
    return ' '.join(parts)


def random_case(rng):
    """Returns pattern, sizes, left dims, elementary order/lengths, right dims."""
    n_left = rng.randint(1, 4)
    names = rng.sample(NAMES, len(NAMES))
    left = []   # each: list of axis names, or 'unit'
    lens = {}
    total_axes = 0
    for _ in range(n_left):
        r = rng.random()
        if r < 0.1:
            left.append('unit1' if rng.random() < 0.5 else 'unit()')
            continue
        k = 1 if r < 0.55 else rng.randint(2, 3)
        k = min(k, 9 - total_axes) if total_axes < 9 else 0
        if k == 0:
            left.append('unit1')
            continue
        g = [names.pop() for _ in range(k)]
        for a in g:
            lens[a] = rng.randint(1, 4)
        total_axes += k
        left.append(g)
    axes = [a for g in left if g not in ('unit1', 'unit()') for a in g]
    # An ellipsis over a run of top-level single-axis dims (kept in order on the right).
    ell = []
    singles = [i for i, g in enumerate(left) if isinstance(g, list) and len(g) == 1]
    if singles and rng.random() < 0.25:
        i0 = rng.choice(singles)
        run = [i0]
        while run[-1] + 1 in singles and rng.random() < 0.6:
            run.append(run[-1] + 1)
        ell = [left[i][0] for i in run]
    # The right side: units of order (an ellipsis block moves as one).
    units = [[a] for a in axes if a not in ell]
    if ell:
        units.append(['...'])
    rng.shuffle(units)
    flat = [a for u in units for a in u]
    right = []
    i = 0
    while i < len(flat):
        remaining_groups = 4 - len(right)
        if remaining_groups <= 1:
            right.append(flat[i:])
            break
        k = rng.randint(1, 3) if rng.random() < 0.5 else 1
        right.append(flat[i:i + k])
        i += k
    # A top-level ellipsis expands into len(ell) dims: keep y within 4 dims.
    def right_ndim(groups):
        return sum(len(ell) if g == ['...'] else 1 for g in groups)
    if right_ndim(right) > 4 and ['...'] in right:
        j = right.index(['...'])
        right[j] = ['...', 'PAREN']  # force parentheses
    while right_ndim(right) < 4 and rng.random() < 0.15:
        right.insert(rng.randint(0, len(right)), 'unit1' if rng.random() < 0.5 else 'unit()')
    if right_ndim(right) > 4:
        return None
    # Pattern text.
    def side_text(groups, is_left):
        out = []
        ell_done = False
        for g in groups:
            if g in ('unit1', 'unit()'):
                out.append('1' if g == 'unit1' else '()')
            elif is_left and len(g) == 1 and g[0] in ell:
                if not ell_done:
                    out.append('...')
                    ell_done = True
            elif g == ['...', 'PAREN']:
                out.append('(...)')
            elif len(g) == 1:
                out.append(g[0])
            else:
                out.append('(' + ' '.join(g) + ')')
        return ' '.join(out)
    pattern = side_text(left, True) + ' -> ' + side_text(right, False)
    # Lengths to give: all but one per left group (sometimes all).
    given = []
    for g in left:
        if g in ('unit1', 'unit()') or (len(g) == 1 and g[0] in ell):
            continue
        keep = rng.randrange(len(g)) if rng.random() < 0.85 else -1
        given += [a for j, a in enumerate(g) if j != keep and (len(g) > 1 or rng.random() < 0.3)]
    sizes = ', '.join('%s=%d' % (a, lens[a]) for a in given)
    # The reference: shapes of x, the elementary axes, y.
    xshape = [1 if g in ('unit1', 'unit()') else prod(lens[a] for a in g) for g in left]
    order = []
    yshape = []
    for g in right:
        if g in ('unit1', 'unit()'):
            yshape.append(1)
            continue
        members = []
        for a in g:
            if a == '...':
                members += ell
            elif a != 'PAREN':
                members.append(a)
        order += members
        if g == ['...']:
            yshape += [lens[a] for a in ell]
        else:
            yshape.append(prod(lens[a] for a in members))
    return pattern, sizes, xshape, axes, [lens[a] for a in axes], [axes.index(a) for a in order], yshape


def prod(xs):
    p = 1
    for v in xs:
        p *= v
    return p


def fixed_case(spec):
    left, right, lens, given = spec
    axes = [a for g in left for a in g]
    order = [a for g in right for a in g]
    text = lambda gs: ' '.join(g[0] if len(g) == 1 else '(' + ' '.join(g) + ')' for g in gs)
    pattern = text(left) + ' -> ' + text(right)
    sizes = ','.join('%s=%d' % (a, lens[a]) for a in given)
    xshape = [prod(lens[a] for a in g) for g in left]
    yshape = [prod(lens[a] for a in g) for g in right]
    return pattern, sizes, xshape, axes, [lens[a] for a in axes], [axes.index(a) for a in order], yshape


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--cases', type=int, default=60)
    ap.add_argument('--seed', type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    for i in range(a.cases):
        if i < len(FIXED):
            spec = fixed_case(FIXED[i])
        else:
            spec = None
            while spec is None:
                spec = random_case(rng)
        pattern, sizes, xshape, axes, alens, perm, yshape = spec
        x = torch.randn(xshape, generator=gen).requires_grad_(True)
        y = x.reshape(alens).permute(perm).reshape(yshape)
        dout = torch.randn(yshape, generator=gen)
        (gx,) = torch.autograd.grad((y * dout).sum(), [x])
        t = {'x': x.detach(), 'y': y.detach().contiguous(), 'dout': dout, 'grad.x': gx}
        safetensors_io.save(os.path.join(a.out, 'case_%04d.safetensors' % i), t,
                            {'pattern': pattern, 'sizes': sizes})
    print(a.cases)


if __name__ == '__main__':
    main()
