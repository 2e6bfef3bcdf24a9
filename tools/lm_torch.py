#!/usr/bin/python3
"""qkv's decoder-only language model (qkv_lm, src/models/lm.c) as a PyTorch
module with the same state_dict names, and its checkpoints read back
(run with /usr/bin/python3):

    tok_emb.weight (V,E), pos_emb.weight (max_len,E) when posenc=learned,
    blocks.layers.<i>.* and blocks.norm.* (nn.TransformerEncoder of
    nn.TransformerEncoderLayer(batch_first=True), a causal mask),
    lm_head.weight (V,E) unless tie_weights (then logits = h tok_emb.weight^T).

    cfg = parse_config("vocab_size=65 max_len=256 ...")   # a checkpoint's "lm.config"
    model = LM(cfg); logits = model(ids)                    # ids (N,T) int64
    model, cfg, tok = load_checkpoint("run/lm.ckpt")        # a qkv LM checkpoint

Used by tools/lm_oracle.py (parity), tools/lm_export.py and the PyTorch
peers in bench/.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

INTS = ('vocab_size', 'max_len', 'num_layers', 'd_model', 'nhead', 'dim_feedforward', 'norm_first',
        'bias', 'final_norm', 'scale_embedding', 'tie_weights', 'padding_idx')
FLOATS = ('dropout', 'layer_norm_eps')


def parse_config(text):
    """qkv_lm_opts_parse's "key=value" words as a dict."""
    cfg = {}
    for word in text.split(' '):
        k, v = word.split('=', 1)
        cfg[k] = int(v) if k in INTS else float(v) if k in FLOATS else v
    return cfg


def short_float(x):
    """qkv_lm_opts_format's float: the fewest digits (%.Ng) that read back as the same float32."""
    want = torch.tensor(x, dtype=torch.float32).item()
    for d in range(1, 10):
        s = '%.*g' % (d, want)
        if torch.tensor(float(s), dtype=torch.float32).item() == want:
            return s
    return s


def format_config(cfg):
    """qkv_lm_opts_format's line (the same keys, in its order)."""
    order = ('vocab_size', 'max_len', 'num_layers', 'd_model', 'nhead', 'dim_feedforward', 'dropout',
             'activation', 'layer_norm_eps', 'norm_first', 'bias', 'final_norm', 'posenc',
             'scale_embedding', 'tie_weights', 'padding_idx')
    return ' '.join('%s=%s' % (k, short_float(cfg[k]) if k in FLOATS else cfg[k]) for k in order)


def gpt_config(vocab_size, d_model=256, nhead=4, num_layers=4, max_len=256, dim_feedforward=None,
               dropout=0.0, tie_weights=1):
    """The configuration `qkv train lm` builds: pre-norm, GELU, final norm, learned positions."""
    return dict(vocab_size=vocab_size, max_len=max_len, num_layers=num_layers, d_model=d_model,
                nhead=nhead, dim_feedforward=dim_feedforward or 4 * d_model, dropout=dropout,
                activation='gelu', layer_norm_eps=1e-5, norm_first=1, bias=1, final_norm=1,
                posenc='learned', scale_embedding=0, tie_weights=tie_weights, padding_idx=-1)


def sinusoidal(max_len, d):
    """qkv_sinusoidal_fill's table: sin at even channels, cos at odd."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.float()


class LM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        if cfg['bias'] != 1:
            raise ValueError('torch 1.13 layers always have biases (bias=0 is PyTorch 2.1)')
        V, E, L = cfg['vocab_size'], cfg['d_model'], cfg['max_len']
        self.cfg = cfg
        pad = cfg['padding_idx'] if cfg['padding_idx'] >= 0 else None
        self.tok_emb = nn.Embedding(V, E, padding_idx=pad)
        if cfg['posenc'] == 'learned':
            self.pos_emb = nn.Embedding(L, E)
        elif cfg['posenc'] == 'sinusoidal':
            self.register_buffer('pe', sinusoidal(L, E), persistent=False)
        act = {'relu': 'relu', 'gelu': 'gelu'}.get(cfg['activation'])
        if act is None:
            raise ValueError('activation %s has no nn.TransformerEncoderLayer string' % cfg['activation'])
        layer = nn.TransformerEncoderLayer(E, cfg['nhead'], cfg['dim_feedforward'], cfg['dropout'], act,
                                           cfg['layer_norm_eps'], batch_first=True,
                                           norm_first=bool(cfg['norm_first']))
        norm = nn.LayerNorm(E, eps=cfg['layer_norm_eps']) if cfg['final_norm'] else None
        self.blocks = nn.TransformerEncoder(layer, cfg['num_layers'], norm, enable_nested_tensor=False)
        if not cfg['tie_weights']:
            self.lm_head = nn.Linear(E, V, bias=False)

    def embed(self, ids, start=0):
        x = self.tok_emb(ids)
        if self.cfg['scale_embedding']:
            x = x * math.sqrt(self.cfg['d_model'])
        T = ids.shape[1]
        if self.cfg['posenc'] == 'learned':
            x = x + self.pos_emb.weight[start:start + T]
        elif self.cfg['posenc'] == 'sinusoidal':
            x = x + self.pe[start:start + T].to(x.dtype)
        return x

    def head(self, h):
        w = self.tok_emb.weight if self.cfg['tie_weights'] else self.lm_head.weight
        return F.linear(h, w)

    def forward(self, ids):
        """ids (N,T) -> logits (N,T,V), position t seeing positions <= t."""
        T = ids.shape[1]
        mask = torch.triu(torch.full((T, T), float('-inf'), device=ids.device), diagonal=1)
        return self.head(self.blocks(self.embed(ids), mask=mask))


def load_checkpoint(path):
    """A qkv LM checkpoint (`qkv train lm --out DIR`: DIR/lm.ckpt) -> (LM in
    eval mode, config dict, metadata dict). Parameters are "param/<name>"."""
    tensors, meta = safetensors_io.load(path)
    if meta.get('format') != 'qkv-checkpoint' or 'lm.config' not in meta:
        raise ValueError('%s is not a qkv language model checkpoint' % path)
    cfg = parse_config(meta['lm.config'])
    model = LM(cfg)
    sd = {k[len('param/'):]: v for k, v in tensors.items() if k.startswith('param/')}
    model.load_state_dict(sd, strict=True)
    return model.eval(), cfg, meta
