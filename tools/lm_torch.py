#!/usr/bin/python3
"""qkv's decoder-only language model (qkv_lm, src/models/lm.c) as a PyTorch
module with the same state_dict names, and its checkpoints read back
(run with /usr/bin/python3):

    tok_emb.weight (V,E), pos_emb.weight (max_len,E) when posenc=learned,
    blocks.layers.<i>.* and blocks.norm.* (nn.TransformerEncoder of
    nn.TransformerEncoderLayer(batch_first=True), a causal mask),
    lm_head.weight (V,E) unless tie_weights (then logits = h tok_emb.weight^T).

posenc=rotary (no position table): every layer's self-attention rotates
q and k, GPT-NeoX / Hugging Face's way (RotaryEncoderLayer below: the same
parameters as nn.TransformerEncoderLayer, whose MultiheadAttention has no
place for a rotation), a token's position being the number of non-padding
tokens before it in its row.

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
FLOATS = ('dropout', 'layer_norm_eps', 'rotary_base')


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


def format_float(k, x):
    """qkv_lm_opts_format's float; a whole rotary_base as such (10000, not 1e+04)."""
    if k == 'rotary_base' and float(x) == int(x) and x < 1e9:
        return '%d' % x
    return short_float(x)


def format_config(cfg):
    """qkv_lm_opts_format's line (the same keys, in its order)."""
    order = ('vocab_size', 'max_len', 'num_layers', 'd_model', 'nhead', 'dim_feedforward', 'dropout',
             'activation', 'layer_norm_eps', 'norm_first', 'bias', 'final_norm', 'posenc',
             'scale_embedding', 'tie_weights', 'padding_idx')
    if cfg['posenc'] == 'rotary':  # its last word, with rotary positions only
        order += ('rotary_base',)
    return ' '.join('%s=%s' % (k, format_float(k, cfg[k]) if k in FLOATS else cfg[k]) for k in order)


def gpt_config(vocab_size, d_model=256, nhead=4, num_layers=4, max_len=256, dim_feedforward=None,
               dropout=0.0, tie_weights=1, posenc='learned'):
    """The configuration `qkv train lm` builds: pre-norm, GELU, final norm, learned
    positions (or posenc='rotary', `--pos rotary`)."""
    cfg = dict(vocab_size=vocab_size, max_len=max_len, num_layers=num_layers, d_model=d_model,
               nhead=nhead, dim_feedforward=dim_feedforward or 4 * d_model, dropout=dropout,
               activation='gelu', layer_norm_eps=1e-5, norm_first=1, bias=1, final_norm=1,
               posenc=posenc, scale_embedding=0, tie_weights=tie_weights, padding_idx=-1)
    if posenc == 'rotary':
        cfg['rotary_base'] = 10000.0
    return cfg


def sinusoidal(max_len, d):
    """qkv_sinusoidal_fill's table: sin at even channels, cos at odd."""
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    div = torch.exp(torch.arange(0, d, 2, dtype=torch.float64) * (-math.log(10000.0) / d))
    pe = torch.zeros(max_len, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe.float()


def rotate_half(x):
    """GPT-NeoX's rotate_half: (x1, x2) -> (-x2, x1), the halves of the last dim."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def rotary_tables(positions, hd, base, dtype):
    """cos, sin (N,1,T,hd) of positions (N,T): angle(p, i) = p * base^(-2i/hd),
    i < hd/2, repeated for both halves (cat(freqs, freqs)), in float64."""
    inv_freq = 1.0 / (base ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    freqs = positions.to(torch.float64)[..., None] * inv_freq       # (N,T,hd/2)
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]                 # (N,1,T,hd)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def token_positions(ids, key_padding_mask=None):
    """(N,T): the number of non-padding tokens before each token in its row."""
    if key_padding_mask is None:
        return torch.arange(ids.shape[1]).expand(ids.shape)
    real = (~key_padding_mask).long()
    return real.cumsum(-1) - real


class RotaryEncoderLayer(nn.TransformerEncoderLayer):
    """nn.TransformerEncoderLayer (batch_first) whose self-attention rotates q
    and k of every head to their positions after the in-projection and head
    split: x' = x cos + rotate_half(x) sin; v untouched. Same parameters."""

    rotary_base = 10000.0

    def forward(self, x, mask=None, key_padding_mask=None, positions=None):
        if self.norm_first:
            x = x + self._rotary_sa(self.norm1(x), mask, key_padding_mask, positions)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._rotary_sa(x, mask, key_padding_mask, positions))
        return self.norm2(x + self._ff_block(x))

    def _rotary_sa(self, x, mask, key_padding_mask, positions):
        a = self.self_attn
        N, T, E = x.shape
        H = a.num_heads
        hd = E // H
        q, k, v = F.linear(x, a.in_proj_weight, a.in_proj_bias).chunk(3, dim=-1)
        q, k, v = (t.reshape(N, T, H, hd).transpose(1, 2) for t in (q, k, v))   # (N,H,T,hd)
        cos, sin = rotary_tables(positions, hd, self.rotary_base, x.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-2, -1) / math.sqrt(hd)                      # (N,H,T,T)
        masked = torch.zeros(scores.shape, dtype=torch.bool)
        if mask is not None:
            masked = masked | torch.isneginf(mask)
        if key_padding_mask is not None:
            masked = masked | key_padding_mask[:, None, None, :]
        # qkv's rule where PyTorch gives NaN: a query whose keys are all
        # masked (a left pad under the causal mask) attends to nothing: 0
        dead = masked.all(-1, keepdim=True)                                   # (N,H,T,1)
        scores = scores.masked_fill(masked & ~dead, float('-inf')).masked_fill(dead, 0.0)
        p = F.dropout(scores.softmax(-1), a.dropout, self.training)
        o = (p @ v).masked_fill(dead, 0.0).transpose(1, 2).reshape(N, T, E)
        return self.dropout1(a.out_proj(o))


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
        kind = RotaryEncoderLayer if cfg['posenc'] == 'rotary' else nn.TransformerEncoderLayer
        layer = kind(E, cfg['nhead'], cfg['dim_feedforward'], cfg['dropout'], act, cfg['layer_norm_eps'],
                     batch_first=True, norm_first=bool(cfg['norm_first']))
        if cfg['posenc'] == 'rotary':
            layer.rotary_base = cfg['rotary_base']
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

    def forward(self, ids, key_padding_mask=None):
        """ids (N,T) -> logits (N,T,V), position t seeing positions <= t;
        key_padding_mask (N,T) bool (True = padding), rotary positions only."""
        T = ids.shape[1]
        mask = torch.triu(torch.full((T, T), float('-inf'), device=ids.device), diagonal=1)
        if self.cfg['posenc'] != 'rotary':
            return self.head(self.blocks(self.embed(ids), mask=mask))
        x, pos = self.embed(ids), token_positions(ids, key_padding_mask)
        for layer in self.blocks.layers:
            x = layer(x, mask, key_padding_mask, pos)
        if self.blocks.norm is not None:
            x = self.blocks.norm(x)
        return self.head(x)


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
