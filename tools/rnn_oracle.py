#!/usr/bin/python3
"""PyTorch oracle for qkv's recurrent layers (run with /usr/bin/python3).

For random configurations of nn.GRU and nn.LSTM (num_layers 1-2,
bidirectional, batch_first, bias, h0/c0 given or not, unbatched input,
variable lengths through pack_padded_sequence(enforce_sorted=False) and
pad_packed_sequence(total_length=L), dropout > 0 run in eval mode), runs the
module in float64 on float32 values, takes the backward of
sum(output * dout) + sum(h_n * dh_n) (+ sum(c_n * dc_n)) and writes one
safetensors file per case (tools/safetensors_io.py):

  - "x", "h0", "c0" (when given), "lengths" (I64, when given),
  - the parameters as "rnn." + their state_dict names,
  - "output", "h_n", "c_n", "dout", "dh_n", "dc_n",
  - "grad.<name>" for x, h0, c0 and every parameter (name without "rnn."),
  - __metadata__: mode (gru/lstm), input_size, hidden_size, num_layers,
    bias, batch_first, bidirectional, dropout, unbatched.

Usage: rnn_oracle.py --out DIR --cases N [--seed 1].
"""
import os
import sys

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def case(rng, gen, i):
    mode = 'lstm' if i % 2 else 'gru'
    In, H = rng.randint(1, 5), rng.randint(1, 5)
    nl = rng.randint(1, 2)
    bias = rng.random() < 0.8
    bf = rng.random() < 0.5
    bi = rng.random() < 0.5
    dropout = rng.choice([0.0, 0.0, 0.3]) if nl > 1 else 0.0
    unbatched = rng.random() < 0.2
    L, N = rng.randint(1, 6), rng.randint(1, 4)
    D = 2 if bi else 1
    cls = torch.nn.LSTM if mode == 'lstm' else torch.nn.GRU
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = cls(In, H, num_layers=nl, bias=bias, batch_first=bf, dropout=dropout, bidirectional=bi)
    m = m.double().eval()  # float32 values, computed in float64
    xs = (L, In) if unbatched else ((N, L, In) if bf else (L, N, In))
    x = torch.randn(xs, generator=gen).double().requires_grad_(True)
    ss = (D * nl, H) if unbatched else (D * nl, N, H)
    h0 = torch.randn(ss, generator=gen).double().requires_grad_(True) if rng.random() < 0.6 else None
    c0 = None
    if mode == 'lstm' and rng.random() < 0.6:
        c0 = torch.randn(ss, generator=gen).double().requires_grad_(True)
    lengths = None
    if not unbatched and rng.random() < 0.6:
        lengths = torch.tensor([rng.randint(1, L) for _ in range(N)], dtype=torch.int64)
        lengths[rng.randrange(N)] = L  # pad_packed_sequence pads to total_length anyway
    if mode == 'lstm':
        state = None
        if h0 is not None or c0 is not None:
            state = (h0 if h0 is not None else torch.zeros(ss, dtype=torch.float64),
                     c0 if c0 is not None else torch.zeros(ss, dtype=torch.float64))
    else:
        state = h0
    inp = x if lengths is None else pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=False)
    out, st = m(inp, state)
    if lengths is not None:
        out, _ = pad_packed_sequence(out, batch_first=bf, total_length=L)
    hn, cn = (st if mode == 'lstm' else (st, None))
    dout = torch.randn(out.shape, generator=gen).double()
    dhn = torch.randn(hn.shape, generator=gen).double()
    loss = (out * dout).sum() + (hn * dhn).sum()
    dcn = None
    if cn is not None:
        dcn = torch.randn(cn.shape, generator=gen).double()
        loss = loss + (cn * dcn).sum()
    leaves = {'x': x}
    if h0 is not None:
        leaves['h0'] = h0
    if c0 is not None:
        leaves['c0'] = c0
    params = dict(m.named_parameters())
    leaves.update(params)
    grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    t = {}
    for k, v in leaves.items():
        t[('rnn.' + k) if k in params else k] = v.detach()
    for k, g in zip(leaves, grads):
        t['grad.' + k] = torch.zeros_like(leaves[k]) if g is None else g
    t.update(output=out.detach(), h_n=hn.detach(), dout=dout, dh_n=dhn)
    if cn is not None:
        t.update(c_n=cn.detach(), dc_n=dcn)
    t = {k: v.float().contiguous() for k, v in t.items()}
    if lengths is not None:
        t['lengths'] = lengths
    meta = dict(mode=mode, input_size=In, hidden_size=H, num_layers=nl, bias=int(bias),
                batch_first=int(bf), bidirectional=int(bi), dropout=dropout, unbatched=int(unbatched))
    return t, {k: str(v) for k, v in meta.items()}


def main():
    safetensors_io.write_cases(case, 40)


if __name__ == '__main__':
    main()
