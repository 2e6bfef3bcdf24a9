#!/usr/bin/python3
"""PyTorch oracle for qkv's bf16 conversions (src/kernels/half.c), run
with /usr/bin/python3 by tests/test_bf16_decode.c.

Writes --out DIR/bf16.safetensors:
  "x"     F32 (n): special values (signed zeros, infinities, NaNs with
          several payloads and signs, the largest floats, values exactly
          halfway between two bf16 numbers with even and odd lower
          neighbours, subnormals and halfway subnormals), then random bit
          patterns (every exponent, NaNs among them) and random normals.
  "bits"  I32 (n): x.to(torch.bfloat16) viewed as int16, as unsigned.
  "all"   I32 (65536): every bf16 bit pattern; "wide" F32 (65536) what
          torch's bf16 -> float32 gives for each.

Usage: bf16_convert_oracle.py --out DIR [--seed 1]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def from_bits(words):
    return torch.tensor(words, dtype=torch.int64).to(torch.int32).view(torch.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    special = [
        0x00000000, 0x80000000, 0x7F800000, 0xFF800000,              # zeros, infinities
        0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF,  # NaNs
        0x7FA00000, 0x7F8F0000, 0xFFC12345,
        0x7F7FFFFF, 0xFF7FFFFF, 0x7F7F7FFF, 0x7F7F8000, 0x7F7F8001,  # largest, to inf or not
        0x3F808000, 0x3F818000, 0xBF808000, 0xBF818000,              # halfway: to even
        0x3F807FFF, 0x3F808001, 0x3F80FFFF,                          # just below / above
        0x00000001, 0x80000001, 0x00008000, 0x00018000, 0x00007FFF,  # subnormals, halfway
        0x007FFFFF, 0x007F8000, 0x00800000, 0x3F800000, 0x40490FDB,
    ]
    x = torch.cat([
        from_bits(special),
        torch.randint(-2**31, 2**31, (20000,), dtype=torch.int64).to(torch.int32).view(torch.float32),
        torch.randn(4000) * 10.0 ** torch.randint(-30, 30, (4000,)).float(),
    ])
    bits = x.to(torch.bfloat16).view(torch.int16).to(torch.int32) & 0xFFFF
    allb = torch.arange(65536, dtype=torch.int32)
    wide = allb.to(torch.int16).view(torch.bfloat16).to(torch.float32)
    os.makedirs(a.out, exist_ok=True)
    safetensors_io.save(os.path.join(a.out, "bf16.safetensors"),
                        {"x": x.contiguous(), "bits": bits.contiguous(), "all": allb,
                         "wide": wide.contiguous()}, {"format": "pt"})


if __name__ == "__main__":
    main()
