#!/usr/bin/python3
"""qkv's language model against PyTorch, interleaved in one run (docs/lm.md):
training tokens/s of `qkv train lm`'s default model (build/bench/lm_bench
train against bench/lm_torch_peer.py train, PyTorch at 1 and 2 threads, its
best taken) and generation tokens/s after prompts of 64 and 1024 tokens with
the KV cache (qkv's against PyTorch's past keys/values concatenated).

    bench/lm_bench.py [--reps 3] [--steps 10] [--new 64] [--cache fp32|bf16] [--model D,L,H]
                      [--precision fp32|bf16] [--torch-bf16] [--wait-policy passive|default]

--cache bf16 keeps qkv's KV cache in bf16 (docs/bf16_decode.md); PyTorch's
stays FP32. --precision bf16 trains qkv with bf16 products (docs/bf16.md);
--torch-bf16 adds PyTorch's training under bf16 autocast, at 1 and 2
threads, to the configurations whose best is taken. --wait-policy default
runs every process without OMP_WAIT_POLICY (what a user gets: OpenMP's
threads spin a while between parallel regions) instead of PASSIVE.

Each repetition runs every measurement once, qkv then PyTorch, each in its
own process; the table gives the medians over repetitions and the ratios
qkv / PyTorch. qkv runs with OMP_NUM_THREADS as set (default: all cores);
OMP_WAIT_POLICY=PASSIVE for both unless --wait-policy default. Builds build/bench/lm_bench if needed.
"""
import argparse
import os
import statistics
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..')
PY = os.environ.get('TORCH_PY', '/usr/bin/python3')


WAIT = {'OMP_WAIT_POLICY': 'PASSIVE'}


def run(cmd, env_extra=None):
    env = dict(os.environ, **WAIT, **(env_extra or {}))
    out = subprocess.run(cmd, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith('RESULT '):
            _, k, v = line.split()
            res[k] = float(v)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--reps', type=int, default=3)
    ap.add_argument('--steps', type=int, default=10, help='timed training steps per measurement')
    ap.add_argument('--new', type=int, default=64, help='tokens generated per measurement')
    ap.add_argument('--cache', choices=('fp32', 'bf16'), default='fp32', help="qkv's KV cache")
    ap.add_argument('--model', default='128,4,4',
                    help="d_model,layers,heads (feed-forward 4 d_model); default: qkv train lm's default "
                         "model; the 30-minute run's is 192,5,6")
    ap.add_argument('--precision', choices=('fp32', 'bf16'), default='fp32', help="qkv's training products")
    ap.add_argument('--torch-bf16', action='store_true', help="also PyTorch's training under bf16 autocast")
    ap.add_argument('--wait-policy', choices=('passive', 'default'), default='passive')
    a = ap.parse_args()
    if a.wait_policy == 'default':
        WAIT.clear()
        os.environ.pop('OMP_WAIT_POLICY', None)
    subprocess.run(['make', '-s', '-j2', 'build/bench/lm_bench'], cwd=ROOT, check=True)
    qkv = os.path.join('build', 'bench', 'lm_bench')
    peer = [PY, os.path.join('bench', 'lm_torch_peer.py'), '--model', a.model]
    qkv = [qkv, '--model', a.model]
    rows = [('train', 'train_tokens_per_s', qkv + ['train', str(a.steps)], ['train', str(a.steps)]),
            ('generate after 64', 'generate_64_tokens_per_s', qkv + ['generate', '64', str(a.new), a.cache],
             ['generate', '64', str(a.new)]),
            ('generate after 1024', 'generate_1024_tokens_per_s', qkv + ['generate', '1024', str(a.new), a.cache],
             ['generate', '1024', str(a.new)])]
    # PyTorch's configurations: (column, extra arguments, rows it runs on)
    variants = [('PyTorch 1 thread', ['--threads', '1'], None), ('PyTorch 2 threads', ['--threads', '2'], None)]
    if a.torch_bf16:
        variants += [('PyTorch bf16 autocast, 1 thread', ['--threads', '1', '--bf16'], 'train'),
                     ('PyTorch bf16 autocast, 2 threads', ['--threads', '2', '--bf16'], 'train')]
    env_q = {'QKV_BENCH_PRECISION': a.precision}
    got = {name: {v[0]: [] for v in [('qkv',)] + variants} for name, *_ in rows}
    threads = None
    for rep in range(a.reps):
        for name, key, qcmd, pargs in rows:
            r = run(qcmd, env_q)
            threads = int(r['threads'])
            got[name]['qkv'].append(r[key])
            for col, extra, only in variants:
                if only in (None, name):
                    got[name][col].append(run(peer + pargs + extra)[key])
            print('rep %d %s: ' % (rep + 1, name) +
                  ', '.join('%s %.0f' % (k, v[-1]) for k, v in got[name].items() if v) + ' tokens/s', file=sys.stderr)
    cols = [v[0] for v in variants]
    print('| measurement | qkv tokens/s (%d threads, %s) | %s | qkv / best PyTorch |'
          % (threads, a.precision.upper(), ' | '.join(cols)))
    print('|---|---|' + '---|' * len(cols) + '---|')
    med = {}
    for name, *_ in rows:
        m = {k: statistics.median(v) for k, v in got[name].items() if v}
        med[name] = m
        best = max(v for k, v in m.items() if k != 'qkv')
        print('| %s | %.0f | %s | %.2f |' % (name, m['qkv'], ' | '.join('%.0f' % m[c] if c in m else '—' for c in cols),
                                            m['qkv'] / best))
    q64, q1024 = med['generate after 64']['qkv'], med['generate after 1024']['qkv']
    print('\nqkv: a token after 1024 costs %.2f times one after 64 (medians of %d repetitions, %d training steps, '
          '%d new tokens each, %s KV cache, model %s, OMP_WAIT_POLICY %s)' % (
              q64 / q1024, a.reps, a.steps, a.new, a.cache.upper(), a.model,
              'PASSIVE' if WAIT else 'unset'))


if __name__ == '__main__':
    main()
