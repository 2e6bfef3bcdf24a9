#!/usr/bin/python3
"""PyTorch oracle for qkv's recurrent encoder-decoder (run with /usr/bin/python3).

Seq2SeqRNN below is the model of src/models/seq2seq_rnn*.c written as a
torch module with the same parameter names: an embedding + GRU/LSTM encoder
(packed sequences, optionally bidirectional with a tanh bridge), and a
decoder with Luong's attention (dot, scaled_dot, cosine, general,
reduced_rank, additive score; h~ = tanh(concat([c; h]))), the no-attention
baseline (c = the last encoder state), or the location attention of
PyTorch's translation tutorial (AttnDecoderRNN). Before writing anything the
script checks that its location decoder equals a transcription of the
tutorial's AttnDecoderRNN (one sentence, 1 layer, GRU, no dropout).

For each case (every attention kind x GRU/LSTM x uni/bidirectional where
allowed, some with 2 layers, some fed their own argmax instead of the
target), it runs the model in float64 on float32 values and writes
case_NNNN.safetensors (tools/safetensors_io.py) with:
  - "src", "src_lengths", "tgt_in", "tgt_out" (I64),
  - the parameters as "model." + their names,
  - "logits" (N,T,V), "weights" (N,T,S) (not for none), "loss" (1):
    F.cross_entropy(logits.reshape(-1,V), tgt_out.reshape(-1), ignore_index=0),
  - "grad.<name>" for every parameter: d(loss)/d(parameter),
  - __metadata__: attention, rnn, bidirectional, num_layers, embed_dim,
    hidden_size, attn_rank, max_length, src_vocab, tgt_vocab, forcing (1 or 0).

Usage: seq2seq_rnn_oracle.py --out DIR [--cases N] [--seed 1] (31 configurations).
"""
import argparse
import math
import os
import random
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

KINDS = ['dot', 'scaled_dot', 'cosine', 'general', 'reduced_rank', 'additive', 'location', 'none']


class Score(nn.Module):
    """The score functions of src/attention/score.c, with its parameter names."""

    def __init__(self, kind, dq, dk, r):
        super().__init__()
        self.kind = kind
        if kind == 'general':
            self.W_a = nn.Parameter(torch.randn(dq, dk) / math.sqrt(dk))
        elif kind == 'reduced_rank':
            self.U_a = nn.Parameter(torch.randn(r, dq) / math.sqrt(dq))
            self.V_a = nn.Parameter(torch.randn(r, dk) / math.sqrt(dk))
        elif kind == 'additive':
            self.W_a = nn.Parameter(torch.randn(r, dk) / math.sqrt(dk))
            self.V_a = nn.Parameter(torch.randn(r, dq) / math.sqrt(dq))
            self.v_a = nn.Parameter(torch.randn(r) / math.sqrt(r))

    def forward(self, q, k):  # q (N,T,Dq), k (N,S,Dk) -> (N,T,S)
        if self.kind == 'dot':
            return q @ k.transpose(1, 2)
        if self.kind == 'scaled_dot':
            return q @ k.transpose(1, 2) / math.sqrt(q.shape[-1])
        if self.kind == 'cosine':
            return F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(1, 2)
        if self.kind == 'general':
            return q @ F.linear(k, self.W_a).transpose(1, 2)
        if self.kind == 'reduced_rank':
            return F.linear(q, self.U_a) @ F.linear(k, self.V_a).transpose(1, 2)
        u = torch.tanh(F.linear(q, self.V_a).unsqueeze(2) + F.linear(k, self.W_a).unsqueeze(1))
        return (u * self.v_a).sum(-1)


class Seq2SeqRNN(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = c = cfg
        E, H, nl = c['embed_dim'], c['hidden_size'], c['num_layers']
        D = 2 if c['bidirectional'] else 1
        K = D * H
        rnn = nn.LSTM if c['rnn'] == 'lstm' else nn.GRU
        self.encoder = nn.Module()
        self.encoder.embedding = nn.Embedding(c['src_vocab'], E, padding_idx=0)
        self.encoder.rnn = rnn(E, H, nl, batch_first=True, bidirectional=D == 2)
        if D == 2:
            self.bridge = nn.Linear(K, H)
            if c['rnn'] == 'lstm':
                self.bridge_c = nn.Linear(K, H)
        self.decoder = nn.Module()
        self.decoder.embedding = nn.Embedding(c['tgt_vocab'], E, padding_idx=0)
        self.decoder.rnn = rnn(E, H, nl, batch_first=True)
        a = c['attention']
        if a == 'location':
            self.decoder.attn = nn.Linear(E + H, c['max_length'])
            self.decoder.attn_combine = nn.Linear(E + K, E)
        else:
            if a != 'none':
                self.decoder.attn = Score(a, H, K, c['attn_rank'] or H)
            self.decoder.concat = nn.Linear(K + H, H)
        self.decoder.out = nn.Linear(H, c['tgt_vocab'])

    def layer_states(self, h, nl, D):  # (nl*D,N,H) -> (nl,N,D*H)
        if D == 1:
            return h
        N, H = h.shape[1], h.shape[2]
        return h.view(nl, 2, N, H).permute(0, 2, 1, 3).reshape(nl, N, 2 * H)

    def encode(self, src, lengths):
        c = self.cfg
        nl, D = c['num_layers'], 2 if c['bidirectional'] else 1
        S = src.shape[1]
        x = self.encoder.embedding(src)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, st = self.encoder.rnn(packed)
        enc, _ = pad_packed_sequence(out, batch_first=True, total_length=S)
        hn, cn = st if c['rnn'] == 'lstm' else (st, None)
        hl = self.layer_states(hn, nl, D)
        last = hl[-1].unsqueeze(1)
        if D == 2:
            h0 = torch.tanh(self.bridge(hl))
            c0 = self.bridge_c(self.layer_states(cn, nl, D)) if cn is not None else None
        else:
            h0, c0 = hn, cn
        state = (h0, c0) if c['rnn'] == 'lstm' else h0
        mask = torch.arange(S)[None, :] >= lengths[:, None]
        return enc, mask, last, state

    def top(self, state):
        h = state[0] if isinstance(state, tuple) else state
        return h[-1].unsqueeze(1)

    def block(self, ids, enc, mask, last, state):
        """T steps of the Luong decoder, or one of the location decoder."""
        a = self.cfg['attention']
        x = self.decoder.embedding(ids)
        if a == 'location':
            S = enc.shape[1]
            q = torch.cat([x, self.top(state)], -1)
            sc = F.linear(q, self.decoder.attn.weight[:S], self.decoder.attn.bias[:S])
            w = sc.masked_fill(mask.unsqueeze(1), float('-inf')).softmax(-1)
            ctx = w @ enc
            z = F.relu(self.decoder.attn_combine(torch.cat([x, ctx], -1)))
            y, state = self.decoder.rnn(z, state)
            return self.decoder.out(y), w, state
        y, state = self.decoder.rnn(x, state)
        if a == 'none':
            ctx, w = last.expand(-1, y.shape[1], -1), None
        else:
            sc = self.decoder.attn(y, enc)
            w = sc.masked_fill(mask.unsqueeze(1), float('-inf')).softmax(-1)
            ctx = w @ enc
        ht = torch.tanh(self.decoder.concat(torch.cat([ctx, y], -1)))
        return self.decoder.out(ht), w, state

    def forward(self, src, lengths, tgt_in, forcing):
        enc, mask, last, state = self.encode(src, lengths)
        if forcing and self.cfg['attention'] != 'location':
            logits, w, _ = self.block(tgt_in, enc, mask, last, state)
            return logits, w
        ls, ws = [], []
        ids = tgt_in[:, :1]
        for t in range(tgt_in.shape[1]):
            if t > 0:
                ids = tgt_in[:, t:t + 1] if forcing else ls[-1].argmax(-1)
            lg, w, state = self.block(ids, enc, mask, last, state)
            ls.append(lg)
            ws.append(w)
        return torch.cat(ls, 1), (torch.cat(ws, 1) if ws[0] is not None else None)


class AttnDecoderRNN(nn.Module):
    """PyTorch's translation tutorial's decoder (one sentence at a time),
    transcribed: embedding, dropout, attn over max_length, attn_combine,
    relu, GRU, log_softmax(out)."""

    def __init__(self, hidden_size, output_size, dropout_p=0.1, max_length=10):
        super().__init__()
        self.hidden_size, self.output_size = hidden_size, output_size
        self.dropout_p, self.max_length = dropout_p, max_length
        self.embedding = nn.Embedding(self.output_size, self.hidden_size)
        self.attn = nn.Linear(self.hidden_size * 2, self.max_length)
        self.attn_combine = nn.Linear(self.hidden_size * 2, self.hidden_size)
        self.dropout = nn.Dropout(self.dropout_p)
        self.gru = nn.GRU(self.hidden_size, self.hidden_size)
        self.out = nn.Linear(self.hidden_size, self.output_size)

    def forward(self, input, hidden, encoder_outputs):
        embedded = self.embedding(input).view(1, 1, -1)
        embedded = self.dropout(embedded)
        attn_weights = F.softmax(self.attn(torch.cat((embedded[0], hidden[0]), 1)), dim=1)
        attn_applied = torch.bmm(attn_weights.unsqueeze(0), encoder_outputs.unsqueeze(0))
        output = torch.cat((embedded[0], attn_applied[0]), 1)
        output = self.attn_combine(output).unsqueeze(0)
        output = F.relu(output)
        output, hidden = self.gru(output, hidden)
        output = F.log_softmax(self.out(output[0]), dim=1)
        return output, hidden, attn_weights


def check_tutorial(gen):
    """Seq2SeqRNN's location decoder equals the tutorial's AttnDecoderRNN."""
    H, V, L = 5, 9, 6
    cfg = dict(attention='location', rnn='gru', bidirectional=0, num_layers=1, embed_dim=H,
               hidden_size=H, attn_rank=0, max_length=L, src_vocab=V, tgt_vocab=V)
    m = Seq2SeqRNN(cfg).double().eval()
    tut = AttnDecoderRNN(H, V, max_length=L).double().eval()
    tut.embedding.weight.data.copy_(m.decoder.embedding.weight)
    for name in ('attn', 'attn_combine', 'out'):
        getattr(tut, name).load_state_dict(getattr(m.decoder, name).state_dict())
    tut.gru.load_state_dict(m.decoder.rnn.state_dict())
    src = torch.randint(1, V, (1, L), generator=gen)
    enc, mask, last, hidden = m.encode(src, torch.tensor([L]))
    ids = torch.tensor([[3]])
    with torch.no_grad():
        for _ in range(3):
            lg, w, h2 = m.block(ids, enc, mask, last, hidden)
            out, th, tw = tut(ids[0], hidden, enc[0])
            assert torch.allclose(F.log_softmax(lg[:, 0], -1), out, atol=1e-12), 'tutorial logits'
            assert torch.allclose(w[:, 0], tw, atol=1e-12), 'tutorial attention weights'
            assert torch.allclose(h2, th, atol=1e-12), 'tutorial hidden state'
            hidden, ids = h2, lg.argmax(-1)


def configs():
    out = []
    for kind in KINDS:
        for rnn in ('gru', 'lstm'):
            for bi in ((0,) if kind in ('dot', 'scaled_dot', 'cosine') else (0, 1)):
                out.append(dict(attention=kind, rnn=rnn, bidirectional=bi, forcing=1))
    # two layers, and decoders fed their own argmax
    out.append(dict(attention='additive', rnn='gru', bidirectional=1, forcing=1, num_layers=2))
    out.append(dict(attention='location', rnn='lstm', bidirectional=1, forcing=1, num_layers=2))
    out.append(dict(attention='general', rnn='lstm', bidirectional=0, forcing=0))
    out.append(dict(attention='location', rnn='gru', bidirectional=0, forcing=0))
    out.append(dict(attention='none', rnn='gru', bidirectional=1, forcing=0))
    return out


def case(rng, gen, base):
    cfg = dict(num_layers=1, embed_dim=rng.randint(3, 5), hidden_size=rng.randint(3, 5),
               attn_rank=rng.choice([0, 2, 3]), max_length=7, src_vocab=8, tgt_vocab=7)
    cfg.update(base)
    torch.manual_seed(rng.randint(0, 1 << 30))
    m = Seq2SeqRNN(cfg).double().eval()
    with torch.no_grad():  # float32 values, computed in float64
        for p in m.parameters():
            p.copy_(p.float().double())
    N, S, T = 3, 5, 4
    lengths = torch.tensor([S, rng.randint(1, S), rng.randint(1, S)], dtype=torch.int64)
    src = torch.randint(1, cfg['src_vocab'], (N, S), generator=gen)
    for n in range(N):
        src[n, lengths[n]:] = 0
    tgt = torch.randint(1, cfg['tgt_vocab'], (N, T + 1), generator=gen)
    tgt[1, T - 1:] = 0  # a shorter target, padded with 0 (ignored by the loss)
    tgt_in, tgt_out = tgt[:, :T].clone(), tgt[:, 1:].clone()
    logits, w = m(src, lengths, tgt_in, cfg['forcing'])
    V = cfg['tgt_vocab']
    loss = F.cross_entropy(logits.reshape(-1, V), tgt_out.reshape(-1), ignore_index=0)
    params = dict(m.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    t = {'model.' + k: v.detach() for k, v in params.items()}
    for k, g in zip(params, grads):
        t['grad.' + k] = torch.zeros_like(params[k]) if g is None else g
    t.update(logits=logits.detach(), loss=loss.detach().reshape(1))
    if w is not None:
        t['weights'] = w.detach()
    t = {k: v.float().contiguous() for k, v in t.items()}
    t.update(src=src, src_lengths=lengths, tgt_in=tgt_in, tgt_out=tgt_out)
    return t, {k: str(v) for k, v in cfg.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--out', required=True)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--cases', type=int, default=0, help='the first N configurations (0: all)')
    a = ap.parse_args()
    rng = random.Random(a.seed)
    gen = torch.Generator().manual_seed(a.seed)
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    check_tutorial(gen)
    cs = configs()
    cs = cs[:a.cases] if a.cases else cs
    for i, base in enumerate(cs):
        t, meta = case(rng, gen, base)
        safetensors_io.save(os.path.join(a.out, 'case_%04d.safetensors' % i), t, meta)
    print(len(cs))


if __name__ == '__main__':
    main()
