"""vit_peer.py: PyTorch's side of bench/vit_step.c (run with /usr/bin/python3).

    python3 bench/vit_peer.py --batch B --patch P --d-model D --layers L
        --heads H --ff F --steps S [--threads N]

The same model as qkv_vit (docs/vision.md's module: Conv2d patch embedding,
class token, learned positions, pre-norm nn.TransformerEncoderLayers with
GELU and eps 1e-6, final LayerNorm, head on the class token) on 28x28 grey
images and 10 classes, in train() with dropout 0, F.cross_entropy and
torch.optim.AdamW. Times S steps (forward, loss, backward, step, zero_grad)
after 2 warm-up steps and prints one line: "MEDIAN_MS <ms>".
"""
import argparse
import statistics
import time

import torch
from torch import nn
import torch.nn.functional as F


class ViT(nn.Module):
    def __init__(self, C, H, W, P, D, nhead, layers, ff, K):
        super().__init__()
        S = (H // P) * (W // P) + 1
        self.conv_proj = nn.Conv2d(C, D, kernel_size=P, stride=P)
        self.class_token = nn.Parameter(torch.zeros(1, 1, D))
        self.pos_embedding = nn.Parameter(torch.empty(1, S, D).normal_(std=0.02))
        layer = nn.TransformerEncoderLayer(D, nhead, ff, dropout=0.0, activation='gelu',
                                           layer_norm_eps=1e-6, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(D, eps=1e-6),
                                             enable_nested_tensor=False)
        self.head = nn.Linear(D, K)

    def forward(self, x):
        t = self.conv_proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.class_token.expand(t.shape[0], -1, -1), t], dim=1)
        t = self.encoder(t + self.pos_embedding)
        return self.head(t[:, 0])


def main():
    ap = argparse.ArgumentParser()
    for name, default in [('batch', 128), ('patch', 4), ('d-model', 64), ('layers', 4),
                          ('heads', 4), ('ff', 256), ('steps', 10), ('threads', 0)]:
        ap.add_argument('--' + name, type=int, default=default)
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    m = ViT(1, 28, 28, a.patch, a.d_model, a.heads, a.layers, a.ff, 10).train()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.rand(a.batch, 1, 28, 28)
    y = torch.randint(0, 10, (a.batch,))
    ts = []
    for s in range(a.steps + 2):
        t0 = time.perf_counter()
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)
        if s >= 2:
            ts.append((time.perf_counter() - t0) * 1e3)
    print('MEDIAN_MS %.3f' % statistics.median(ts))


if __name__ == '__main__':
    main()
