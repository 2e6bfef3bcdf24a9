#!/usr/bin/python3
"""PyTorch oracle for qkv's state_dict loader (tests/test_state_dict.c);
run with /usr/bin/python3 (Debian's torch).

Mode 1, files to load:

    state_dict_oracle.py --out DIR [--seed 1]

writes, with tools/state_dict_io.py's export_state_dict (PyTorch's own
state_dict keys), seeded modules whose every parameter is perturbed (so no
bias is left at its zero init and the two encoder layers differ):

  mha.safetensors        nn.MultiheadAttention(16, 4)
  mha_kv.safetensors     nn.MultiheadAttention(16, 4, kdim=8, vdim=12)
  mha_f16.safetensors    mha's parameters as F16 (keep_dtypes)
  enc.safetensors        nn.TransformerEncoder(TransformerEncoderLayer(16, 4,
                         dim_feedforward=32, dropout=0), num_layers=2)
  transposed.safetensors enc with layers.1.linear1.weight stored transposed,
                         (16,32) instead of (32,16)
  keys.safetensors       enc.layers[1]'s state_dict without norm2.bias, with
                         a BatchNorm's extra.running_mean (F32) and
                         extra.num_batches_tracked (I64)
  bool.safetensors       enc.layers[1]'s state_dict with norm1.weight a BOOL
                         tensor of the same shape
  io.safetensors         inputs and PyTorch's outputs, computed in float64 on
                         the float32 values: mha.{query,key,value,out},
                         mha_kv.{query,key,value,out}, mha_f16.out (the F16
                         weights), enc.x, enc.out (the stack), enc.out1
                         (layers[1] alone)

Mode 2, a file qkv wrote:

    state_dict_oracle.py --check-encoder DIR

loads DIR/qkv_enc.safetensors (qkv_params_save_safetensors under the prefix
"encoder.") with safetensors_io, strips the prefix, loads it strictly into a
freshly seeded nn.TransformerEncoder of the same configuration, runs it on
enc.x of DIR/io.safetensors, and compares with enc.out there (within 1e-5).
Exit status 0 when it matches.
"""
import argparse
import copy
import os
import sys

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402
from state_dict_io import export_state_dict  # noqa: E402

E, H, FF = 16, 4, 32


def perturb(m, gen):
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=gen))
    return m.eval()


def encoder():
    layer = nn.TransformerEncoderLayer(E, H, dim_feedforward=FF, dropout=0.0)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def f64(m):
    """A float64 copy of module m, for references free of float32 rounding."""
    return copy.deepcopy(m).double()


def mha_out(m, q, k, v):
    with torch.no_grad():
        return f64(m)(q.double(), k.double(), v.double(), need_weights=False)[0].float()


def write(d, seed):
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    io = {}
    # MultiheadAttention, packed (in_proj_weight) and with kdim/vdim.
    for name, kw, kd, vd in (("mha", {}, E, E), ("mha_kv", {"kdim": 8, "vdim": 12}, 8, 12)):
        m = perturb(nn.MultiheadAttention(E, H, **kw), gen)
        export_state_dict(m, os.path.join(d, name + ".safetensors"))
        q, k, v = (torch.randn(5, 2, E, generator=gen), torch.randn(6, 2, kd, generator=gen),
                   torch.randn(6, 2, vd, generator=gen))
        io.update({name + ".query": q, name + ".key": k, name + ".value": v,
                   name + ".out": mha_out(m, q, k, v)})
        if name == "mha":
            half = {n: t.half() for n, t in m.state_dict().items()}
            export_state_dict(half, os.path.join(d, "mha_f16.safetensors"), keep_dtypes=True)
            m.load_state_dict({n: t.float() for n, t in half.items()})
            io["mha_f16.out"] = mha_out(m, q, k, v)
    # TransformerEncoder: the stack, and its second layer alone.
    enc = perturb(encoder(), gen)
    export_state_dict(enc, os.path.join(d, "enc.safetensors"))
    x = torch.randn(5, 2, E, generator=gen)
    with torch.no_grad():
        e64 = f64(enc)
        io.update({"enc.x": x, "enc.out": e64(x.double()).float(),
                   "enc.out1": e64.layers[1](x.double()).float()})
    sd = {n: t.detach().clone() for n, t in enc.state_dict().items()}
    bad = dict(sd)
    bad["layers.1.linear1.weight"] = sd["layers.1.linear1.weight"].t().contiguous()
    assert tuple(bad["layers.1.linear1.weight"].shape) == (E, FF)
    export_state_dict(bad, os.path.join(d, "transposed.safetensors"))
    layer1 = {n: t.detach().clone() for n, t in enc.layers[1].state_dict().items()}
    keys = {n: t for n, t in layer1.items() if n != "norm2.bias"}
    keys["extra.running_mean"] = torch.randn(E, generator=gen)
    keys["extra.num_batches_tracked"] = torch.tensor(7, dtype=torch.int64)
    export_state_dict(keys, os.path.join(d, "keys.safetensors"))
    boo = dict(layer1)
    boo["norm1.weight"] = torch.ones(E, dtype=torch.bool)
    export_state_dict(boo, os.path.join(d, "bool.safetensors"))
    safetensors_io.save(os.path.join(d, "io.safetensors"),
                        {n: t.contiguous() for n, t in io.items()}, {"format": "pt"})


def check_encoder(d):
    tensors, meta = safetensors_io.load(os.path.join(d, "qkv_enc.safetensors"))
    io, _ = safetensors_io.load(os.path.join(d, "io.safetensors"))
    bad = [n for n in tensors if not n.startswith("encoder.")]
    if bad or (meta or {}).get("format") != "pt":
        print("check-encoder: keys outside 'encoder.' %s, metadata %r" % (bad, meta), file=sys.stderr)
        return 1
    torch.manual_seed(12345)  # a different init: the file must supply every value
    enc = encoder().eval()
    enc.load_state_dict({n[len("encoder."):]: t for n, t in tensors.items()}, strict=True)
    with torch.no_grad():
        got = enc.double()(io["enc.x"].double()).float()
    want = io["enc.out"]
    err = ((got - want).abs().max() / want.abs().max()).item()
    if not err <= 1e-5:
        print("check-encoder: PyTorch's output from qkv's file is off by %.3g" % err, file=sys.stderr)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--check-encoder")
    a = ap.parse_args()
    if a.check_encoder:
        return check_encoder(a.check_encoder)
    if not a.out:
        ap.error("--out DIR or --check-encoder DIR")
    write(a.out, a.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
