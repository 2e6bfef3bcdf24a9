#!/usr/bin/python3
"""cnn_torch.py: PyTorch's side of build/bench/cnn_bench (the same shapes,
timed the same way: a warm-up, then iterations filling 0.5 s, 3 to 20, the
median). Run with /usr/bin/python3.

    bench/cnn_torch.py [--threads T] [--cpu] [N]

--cpu times with the process's CPU time (time.process_time) instead of
the wall clock, for one-thread runs on a shared machine.
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F


CLOCK = time.perf_counter


def timeit(name, fn):
    fn()
    ts, total = [], 0.0
    while len(ts) < 20 and (len(ts) < 3 or total < 0.5):
        t0 = CLOCK()
        fn()
        ts.append(CLOCK() - t0)
        total += ts[-1]
    print("ROW %s %.4f" % (name, 1e3 * statistics.median(ts)), flush=True)


def main(argv):
    global CLOCK
    args = argv[1:]
    if args[:1] == ['--threads']:
        torch.set_num_threads(int(args[1]))
        args = args[2:]
    if args[:1] == ['--cpu']:
        CLOCK = time.process_time
        args = args[1:]
    N = int(args[0]) if args else 64
    torch.manual_seed(1)
    for name, cin, cout, hw, gx in (('conv1_fwd_bwd', 1, 32, 28, False), ('conv2_fwd_bwd', 32, 64, 14, True)):
        x = torch.randn(N, cin, hw, hw).requires_grad_(gx)
        conv = torch.nn.Conv2d(cin, cout, 3, padding=1)
        dy = torch.randn(N, cout, hw, hw)

        def step():
            y = conv(x)
            y.backward(dy)
        timeit(name, step)
    layers = []
    cin, hw = 1, 28
    for c in (32, 64):
        layers += [torch.nn.Conv2d(cin, c, 3, padding=1), torch.nn.BatchNorm2d(c), torch.nn.ReLU(),
                   torch.nn.MaxPool2d(2)]
        cin, hw = c, hw // 2
    layers += [torch.nn.Flatten(), torch.nn.Linear(cin * hw * hw, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)]
    net = torch.nn.Sequential(*layers).train()
    x = torch.randn(N, 1, 28, 28)
    dl = torch.randn(N, 10)

    def step():
        net(x).backward(dl)
    timeit('cnn_fwd_bwd', step)


if __name__ == '__main__':
    main(sys.argv)
