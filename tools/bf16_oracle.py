#!/usr/bin/python3
"""PyTorch oracle for qkv's BF16 precision mode (run with /usr/bin/python3).

Writes safetensors files (tools/safetensors_io.py) into --out DIR for
tests/test_bf16.c:

  convert.safetensors  "x" (F32): float32 values chosen to test rounding to
      bf16 (ties to even at every exponent, one ulp either side of a tie,
      subnormals and their ties, the largest finite floats (which round to
      inf), +-inf, NaNs with several payloads, +-0, random bit patterns);
      "y" (F32): x.to(torch.bfloat16).to(torch.float32) (exact: every bf16
      is a float32); "y_scalar": the same one element at a time (c10's
      scalar conversion rather than the vectorised one).
  linear_K.safetensors (K < linear.count)  F.linear under
      torch.autocast("cpu", dtype=torch.bfloat16) on float32 leaves "x"
      (N,T,in), "w" (out,in), "b" (out) (absent when bias is off):
      "y" = the bf16 output as float32, "dout" (N,T,out) float32, and the
      backward of sum(y.float() * dout): "grad.x", "grad.w", "grad.b"
      (float32, as autocast hands them to the float32 leaves). Products
      of at least 16*16*16 multiply-adds only: smaller ones take torch
      1.13's bf16 fallback gemm, which sums in bf16.

Usage: bf16_oracle.py --out DIR [--seed 1]
"""
import argparse
import os
import random
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def bits_to_f32(bits):
    return torch.tensor([b - (1 << 32) if b >= (1 << 31) else b for b in bits],
                        dtype=torch.int32).view(torch.float32)


def conversion_bits(rng):
    bits = []
    for e in [0, 1, 2, 0x3f, 0x7f, 0x80, 0xfd, 0xfe]:  # biased exponents: subnormal .. largest
        for m_hi in [0x00, 0x01, 0x3e, 0x7f]:  # the 7 kept mantissa bits (even and odd)
            for low in [0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff]:  # the dropped 16 bits
                for sign in [0, 1]:
                    bits.append((sign << 31) | (e << 23) | (m_hi << 16) | low)
    bits += [0x7f800000, 0xff800000,  # +-inf
             0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0xff812345, 0x7fffffff,  # NaNs
             0x00000000, 0x80000000, 0x7f7fffff, 0xff7fffff, 0x7f7f7fff, 0x7f7f8000]
    bits += [rng.getrandbits(32) for _ in range(4000)]
    return bits


def backward_sums_fp32():
    """Whether autocast's bf16 F.linear backward sums in FP32 here: dx and
    dW each summed over 4096 ones, which a bf16 sum stops at 256. On CPUs
    without AVX-512 (Zen 3) torch 1.13 sums them in bf16."""
    x = torch.ones(4096, 16, requires_grad=True)
    w = torch.ones(4096, 16, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w)
    y.float().sum().backward()
    return bool((x.grad == 4096).all() and (w.grad == 4096).all())


def linear_case(rng, gen, i):
    # Every product of the step (M x in x out for y, dx and dW) above
    # 16*16*16 elements: below that, torch 1.13 skips oneDNN for bf16 and its
    # own fallback gemm sums in bf16 (errors of 10-100% were seen on such
    # shapes); above, it runs oneDNN's bf16 matmul with FP32 sums, the
    # arithmetic qkv's BF16 mode promises.
    while True:
        N, T = rng.randint(1, 3), rng.randint(1, 9)
        fin, fout = rng.randint(1, 70), rng.randint(1, 40)
        if N * T * fin * fout > 16 * 16 * 16:
            break
    bias = i % 3 != 2
    x = torch.randn(N, T, fin, generator=gen).requires_grad_(True)
    w = (torch.randn(fout, fin, generator=gen) / fin ** 0.5).requires_grad_(True)
    b = torch.randn(fout, generator=gen).requires_grad_(True) if bias else None
    dout = torch.randn(N, T, fout, generator=gen)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = F.linear(x, w, b)
    assert y.dtype == torch.bfloat16
    (y.float() * dout).sum().backward()
    gx, gw = x.grad, w.grad
    if not backward_sums_fp32():
        # This CPU's torch 1.13 sums the bf16 backward in bf16 (its own
        # fallback gemm, as below 16^3 elements): the products autocast's
        # backward stands for, computed explicitly instead: dy, w and x
        # rounded to bf16, FP32 sums, the result rounded to bf16.
        d = dout.bfloat16().float().reshape(-1, fout)
        gx = (d @ w.detach().bfloat16().float()).bfloat16().float().reshape(x.shape)
        gw = (d.t() @ x.detach().bfloat16().float().reshape(-1, fin)).bfloat16().float()
    t = {"x": x.detach(), "w": w.detach(), "y": y.detach().float(), "dout": dout,
         "grad.x": gx, "grad.w": gw}
    if bias:
        t["b"] = b.detach()
        t["grad.b"] = b.grad
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(1)
    x = bits_to_f32(conversion_bits(rng))
    y = x.to(torch.bfloat16).to(torch.float32)
    ys = torch.stack([v.to(torch.bfloat16).to(torch.float32) for v in x])
    safetensors_io.save(os.path.join(a.out, "convert.safetensors"), {"x": x, "y": y, "y_scalar": ys})
    count = 12
    for i in range(count):
        safetensors_io.save(os.path.join(a.out, "linear_%d.safetensors" % i), linear_case(rng, gen, i))
    with open(os.path.join(a.out, "linear.count"), "w") as f:
        f.write("%d\n" % count)
    return 0


if __name__ == "__main__":
    sys.exit(main())
