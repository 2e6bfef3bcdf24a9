#!/usr/bin/python3
"""score_oracle.py OUT: PyTorch reference values for qkv's score functions.

For each score kind (dot, scaled_dot, cosine, general, reduced_rank,
additive) and two cases, writes random inputs and parameters, the scores,
the softmax weights, the attention output out = weights @ values, and the
autograd gradients of loss = sum(dout * out), where dout is random too.

  case "q3": query (N,T,Dq), keys (N,S,Dk), values (N,S,Dv), with a
             key_padding_mask (N,S) (true = masked; no row fully masked)
  case "q2": query (N,Dq): scores (N,S), out (N,Dv), no mask

Inputs are drawn in float64, rounded to float32, and everything is computed
in float64 from the rounded values, then stored as float32, so the C side
sees exactly the inputs the reference used.

File format: one record per tensor, a text line
    "NAME NDIM D0 D1 ...\\n"
followed by prod(D) float32 little-endian values. Booleans (the mask) are
stored as 0.0 / 1.0. Names are "KIND.CASE.TENSOR", e.g. "additive.q3.dW_a".

SCORE_ORACLE_SEED in the environment changes the seed (default 20240611).
Exits 77 when torch cannot be imported (run it as /usr/bin/python3; install it with tools/setup.sh --test).
"""
import math
import os
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # the C test fails on any nonzero exit
    sys.stderr.write("score_oracle: cannot import torch/numpy: %s\n" % e)
    sys.exit(77)

KINDS = ["dot", "scaled_dot", "cosine", "general", "reduced_rank", "additive"]
DT = torch.float64


def rnd(*shape, scale=1.0):
    """U(-scale, scale) in float64, rounded through float32."""
    x = (torch.rand(*shape, dtype=DT) * 2 - 1) * scale
    return x.float().double().requires_grad_(True)


def params_for(kind, dq, dk, r):
    """The kind's parameters, named as in qkv (shapes from include/qkv.h)."""
    if kind == "general":
        return {"W_a": rnd(dq, dk, scale=1 / math.sqrt(dk))}
    if kind == "reduced_rank":
        return {"U_a": rnd(r, dq, scale=1 / math.sqrt(dq)),
                "V_a": rnd(r, dk, scale=1 / math.sqrt(dk))}
    if kind == "additive":
        return {"W_a": rnd(r, dk, scale=1 / math.sqrt(dk)),
                "V_a": rnd(r, dq, scale=1 / math.sqrt(dq)),
                "v_a": rnd(r, scale=1 / math.sqrt(r))}
    return {}


def scores_of(kind, q3, k, P):
    """q3 (N,T,Dq), k (N,S,Dk) -> (N,T,S), written from the formulas."""
    dq = q3.shape[-1]
    if kind == "dot":
        return torch.einsum("nti,nsi->nts", q3, k)
    if kind == "scaled_dot":
        return torch.einsum("nti,nsi->nts", q3, k) / math.sqrt(dq)
    if kind == "cosine":
        num = torch.einsum("nti,nsi->nts", q3, k)
        qn = q3.norm(dim=-1)  # (N,T)
        kn = k.norm(dim=-1)   # (N,S)
        return num / (qn[:, :, None] * kn[:, None, :])
    if kind == "general":  # s^T W_a h
        return torch.einsum("nti,ij,nsj->nts", q3, P["W_a"], k)
    if kind == "reduced_rank":  # (U_a s) . (V_a h)
        us = torch.einsum("ri,nti->ntr", P["U_a"], q3)
        vh = torch.einsum("rj,nsj->nsr", P["V_a"], k)
        return torch.einsum("ntr,nsr->nts", us, vh)
    if kind == "additive":  # v_a^T tanh(W_a h + V_a s)
        wh = torch.einsum("rj,nsj->nsr", P["W_a"], k)   # (N,S,r)
        vs = torch.einsum("ri,nti->ntr", P["V_a"], q3)  # (N,T,r)
        return torch.tanh(wh[:, None, :, :] + vs[:, :, None, :]) @ P["v_a"]
    raise ValueError(kind)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write("usage: score_oracle.py OUT\n")
        return 2
    torch.manual_seed(int(os.environ.get("SCORE_ORACLE_SEED", "20240611")))
    records = []

    def put(name, t):
        a = t.detach().to(torch.float64).numpy().astype("<f4")
        records.append((name, a))

    for kind in KINDS:
        same = kind in ("dot", "scaled_dot", "cosine")
        dq, r, dv = 4, 3, 3
        dk = dq if same else 6
        for case, N, T, S in (("q3", 2, 3, 5), ("q2", 3, None, 4)):
            pre = "%s.%s." % (kind, case)
            q = rnd(N, T, dq) if T else rnd(N, dq)
            k = rnd(N, S, dk)
            v = rnd(N, S, dv)
            P = params_for(kind, dq, dk, r)
            q3 = q if T else q[:, None, :]
            sc = scores_of(kind, q3, k, P)  # (N,T,S)
            if not T:
                sc = sc[:, 0]                # (N,S)
            sc.retain_grad()
            if T:
                mask = torch.zeros(N, S, dtype=torch.bool)
                mask[1, S - 2:] = True   # batch 1: its last two keys are padding
                mask[0, 0] = True
                w = sc.masked_fill(mask[:, None, :], -math.inf).softmax(-1)
                out = w @ v              # (N,T,Dv)
            else:
                mask = None
                w = sc.softmax(-1)
                out = (w[:, None, :] @ v)[:, 0]  # (N,Dv)
            dout = (torch.rand(out.shape, dtype=DT) * 2 - 1).float().double()
            (out * dout).sum().backward()
            put(pre + "query", q)
            put(pre + "keys", k)
            put(pre + "values", v)
            if mask is not None:
                put(pre + "mask", mask.double())
            for name, t in P.items():
                put(pre + name, t)
            put(pre + "dout", dout)
            put(pre + "scores", sc)
            put(pre + "weights", w)
            put(pre + "out", out)
            put(pre + "dscores", sc.grad)
            put(pre + "dquery", q.grad)
            put(pre + "dkeys", k.grad)
            put(pre + "dvalues", v.grad)
            for name, t in P.items():
                put(pre + "d" + name, t.grad)

    with open(sys.argv[1], "wb") as f:
        for name, a in records:
            dims = " ".join(str(d) for d in a.shape)
            f.write(("%s %d %s\n" % (name, a.ndim, dims)).encode("ascii"))
            f.write(a.tobytes())
    return 0


if __name__ == "__main__":
    sys.exit(main())
