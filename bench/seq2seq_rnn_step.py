"""seq2seq_rnn_step.py: PyTorch's side of bench/seq2seq_rnn.sh.

    /usr/bin/python3 bench/seq2seq_rnn_step.py ATTN RNN B H V L STEPS THREADS

One training step (forward, F.cross_entropy(ignore_index=0), backward,
torch.optim.Adam) of tools/seq2seq_rnn_oracle.py's Seq2SeqRNN (the same
model as qkv_seq2seq_rnn, packed source sequences) in float32, on the same
shapes as build/bench/seq2seq_rnn_step (embedding = H, source lengths in
[L/2, L], targets of L+1 steps, teacher forcing 1). torch.set_num_threads
(THREADS). Prints "ROW torch<THREADS> <attn> <rnn> <median ms> <median CPU
ms>" over STEPS steps after 2 warm-up steps (CPU: time.process_time, all
threads).
"""
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'tools'))
from seq2seq_rnn_oracle import Seq2SeqRNN  # noqa: E402


def main():
    an, rn = sys.argv[1], sys.argv[2]
    B, H, V, L, steps, threads = (int(x) for x in sys.argv[3:9])
    torch.set_num_threads(threads)
    # TORCH_VARIANTS=bf16: the model under torch.autocast('cpu', bfloat16)
    autocast = os.environ.get('TORCH_VARIANTS', '') == 'bf16'
    torch.manual_seed(1)
    T = L + 1
    cfg = dict(attention=an, rnn=rn, bidirectional=0, num_layers=1, embed_dim=H, hidden_size=H,
               attn_rank=0, max_length=T, src_vocab=V, tgt_vocab=V)
    m = Seq2SeqRNN(cfg).train()
    opt = torch.optim.Adam(m.parameters())
    lengths = torch.randint(L // 2, L + 1, (B,))
    lengths[0] = L
    src = torch.randint(3, V, (B, L))
    src[torch.arange(L)[None, :] >= lengths[:, None]] = 0
    tout = torch.randint(3, V, (B, T))
    tout[B - 1, T // 2 + 1:] = 0
    tin = torch.cat([torch.ones(B, 1, dtype=torch.int64), tout[:, :-1]], 1)
    ms, cpu = [], []
    for _ in range(steps + 2):
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=autocast):
            logits, _ = m(src, lengths, tin, 1)
            loss = F.cross_entropy(logits.reshape(-1, V), tout.reshape(-1), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        ms.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    print('ROW torch%s%d %s %s %.2f %.2f' % ('bf16_' if autocast else '', threads, an, rn, statistics.median(ms[2:]),
                                         statistics.median(cpu[2:])))


if __name__ == '__main__':
    main()
