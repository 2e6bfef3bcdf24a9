#!/usr/bin/python3
"""Exports a language model trained by `qkv train lm` to PyTorch (run with
/usr/bin/python3):

    tools/lm_export.py RUN/lm.ckpt --out model.pt
        writes torch.save({'config': cfg, 'state_dict': sd}): the parameters
        under qkv's names, which are tools/lm_torch.py's LM's, so
            ck = torch.load('model.pt'); m = lm_torch.LM(ck['config'])
            m.load_state_dict(ck['state_dict'])
        gives the same model (optimizer state and training position stay in
        the checkpoint: they are not the model's).
    tools/lm_export.py RUN/lm.ckpt --out model.pt --ids IDS.safetensors --logits OUT.safetensors
        then reloads model.pt into a fresh LM, runs it (eval mode, float32)
        on the tensor "ids" (N,T) of IDS (any dtype, read as int64) and writes its "logits" (N,T,V)
        to OUT: what tests/test_lm_cli.c compares with qkv's logits.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lm_torch  # noqa: E402
import safetensors_io  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('checkpoint')
    ap.add_argument('--out', required=True, help='the .pt file to write')
    ap.add_argument('--ids', help='a safetensors file with a tensor "ids" (N,T), read as int64')
    ap.add_argument('--logits', help='where to write the reloaded model\'s logits for --ids')
    a = ap.parse_args()
    if bool(a.ids) != bool(a.logits):
        ap.error('--ids and --logits go together')
    torch.set_num_threads(1)
    model, cfg, meta = lm_torch.load_checkpoint(a.checkpoint)
    torch.save({'config': cfg, 'state_dict': model.state_dict(), 'tokenizer': meta.get('lm.tokenizer'),
                'tokenizer_file': meta.get('lm.tokenizer_file')}, a.out)
    print('wrote %s: %d parameters (%s)' % (a.out, sum(p.numel() for p in model.parameters()),
                                             meta['lm.config']))
    if a.ids:
        ck = torch.load(a.out)
        fresh = lm_torch.LM(ck['config'])
        fresh.load_state_dict(ck['state_dict'], strict=True)
        fresh.eval()
        tensors, _ = safetensors_io.load(a.ids)
        with torch.no_grad():
            logits = fresh(tensors['ids'].long())
        safetensors_io.save(a.logits, {'logits': logits.float().contiguous()}, {'format': 'pt'})
        print('wrote %s: logits %s' % (a.logits, tuple(logits.shape)))


if __name__ == '__main__':
    main()
