"""torch_peer.py: PyTorch's side of the benchmark suite (bench/suite.sh).

    python3 bench/torch_peer.py --one CONFIG [--threads N] [--bf16]

Takes the configuration names of build/bench/layers_bench (see there) and
prints the same lines, one per row:

    ROW <label> <median ms> <flops per iteration> <peak RSS growth MiB>

with the same FLOP formulas (2 per multiply-add):
    attention forward  4*B*H*L*S*D, halved when causal; backward 2.5x that
    MHA forward        4 * 2*B*L*E*E + attention forward
    encoder step       3 * (2*B*L*(4*E*E + 2*E*F) + 4*B*L*L*E)

PyTorch 1.13 has no scaled_dot_product_attention, so attention is the
explicit q @ k^T * scale, masked_fill(causal, -inf), softmax, @ v.
MultiheadAttention runs in eval() under torch.no_grad() with
need_weights=False (and a bool (L,L) causal attn_mask). The encoder layer is
nn.TransformerEncoderLayer(512, 8, 2048, dropout=0.0) in train() with
torch.optim.AdamW; with --bf16 its forward runs under
torch.autocast("cpu", dtype=torch.bfloat16) (mixed precision: bf16 matrix
products, which qkv does not have; not one of suite.sh's default variants).
--threads N calls torch.set_num_threads(N); without it
PyTorch keeps its own default. Peak RSS growth is VmHWM minus VmRSS after
import (and after the threads are set), before the configuration's first
allocation; the attention forward row reads VmHWM after the first forward.
Each run warms up once, then times iterations until 0.5 s have passed (at
least 1, at most 10) and reports the median.
"""
import math
import re
import statistics
import sys
import time

import torch

MAXIT, MIN_TIME = 10, 0.5


def status_mib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def timed(fn):
    """Warm-up excluded; returns the list of times in ms."""
    ts, total = [], 0.0
    while len(ts) < MAXIT and (not ts or total < MIN_TIME):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        ts.append(dt * 1e3)
        total += dt
    return ts


def run_attention(name, L, D, causal, backward, base):
    B, H = 1, 8
    g = torch.Generator().manual_seed(1)
    q, k, v, dout = (torch.randn(B, H, L, D, generator=g) for _ in range(4))
    for t in (q, k, v):
        t.requires_grad_(backward)
    mask = torch.ones(L, L, dtype=torch.bool).triu_(1) if causal else None
    scale = 1.0 / math.sqrt(D)

    def fwd():
        s = torch.matmul(q, k.transpose(-2, -1)) * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        return torch.matmul(torch.softmax(s, dim=-1), v)

    def clear():
        for t in (q, k, v):
            t.grad = None

    with torch.set_grad_enabled(backward):
        out = fwd()  # warm-up
        fwd_mib = status_mib("VmHWM") - base
        if backward:
            out.backward(dout)
            clear()
        del out
        tf, tb, total = [], [], 0.0
        while len(tf) < MAXIT and (not tf or total < MIN_TIME):
            t0 = time.perf_counter()
            out = fwd()
            t1 = time.perf_counter()
            if backward:
                out.backward(dout)
            t2 = time.perf_counter()
            del out
            clear()
            tf.append((t1 - t0) * 1e3)
            tb.append((t2 - t1) * 1e3)
            total += t2 - t0
    fl = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0)
    print(f"ROW {name}_fwd {statistics.median(tf):.4f} {fl:.6g} {fwd_mib:.1f}")
    if backward:
        all_mib = status_mib("VmHWM") - base
        print(f"ROW {name}_bwd {statistics.median(tb):.4f} {2.5 * fl:.6g} {all_mib:.1f}")


def run_mha(name, B, L, causal, base):
    E, H = 512, 8
    torch.manual_seed(1)
    m = torch.nn.MultiheadAttention(E, H).eval()
    x = torch.randn(L, B, E)
    mask = torch.ones(L, L, dtype=torch.bool).triu_(1) if causal else None
    with torch.no_grad():
        def step():
            m(x, x, x, need_weights=False, attn_mask=mask)
        step()
        ts = timed(step)
    fl = 4 * 2.0 * B * L * E * E + 4.0 * B * L * L * E * (0.5 if causal else 1.0)
    print(f"ROW {name} {statistics.median(ts):.4f} {fl:.6g} {status_mib('VmHWM') - base:.1f}")


def run_encoder(name, B, L, base, bf16=False):
    E, H, F = 512, 8, 2048
    torch.manual_seed(1)
    layer = torch.nn.TransformerEncoderLayer(E, H, F, dropout=0.0).train()
    opt = torch.optim.AdamW(layer.parameters())
    x, dout = torch.randn(L, B, E), torch.randn(L, B, E)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            y = layer(x)
        y.float().backward(dout)
        opt.step()

    step()
    ts = timed(step)
    fl = 3 * (2.0 * B * L * (4 * E * E + 2 * E * F) + 4.0 * B * L * L * E)
    print(f"ROW {name} {statistics.median(ts):.4f} {fl:.6g} {status_mib('VmHWM') - base:.1f}")


def main(argv):
    if len(argv) < 3 or argv[1] != "--one":
        print("usage: torch_peer.py --one CONFIG [--threads N]", file=sys.stderr)
        return 2
    cfg = argv[2]
    if "--threads" in argv:
        torch.set_num_threads(int(argv[argv.index("--threads") + 1]))
    causal = "_causal" in cfg
    base = status_mib("VmRSS")
    m = re.match(r"attn(fwd)?_L(\d+)_D(\d+)", cfg)
    if m:
        run_attention(cfg, int(m[2]), int(m[3]), causal, m[1] is None, base)
        return 0
    m = re.match(r"mha_B(\d+)_L(\d+)", cfg)
    if m:
        run_mha(cfg, int(m[1]), int(m[2]), causal, base)
        return 0
    m = re.match(r"enc_B(\d+)_L(\d+)", cfg)
    if m:
        run_encoder(cfg, int(m[1]), int(m[2]), base, "--bf16" in argv)
        return 0
    print(f"torch_peer.py: unknown configuration '{cfg}'", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
