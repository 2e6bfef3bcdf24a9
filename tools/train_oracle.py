#!/usr/bin/python3
"""PyTorch oracle for qkv's training code (run with /usr/bin/python3).

Writes safetensors files (tools/safetensors_io.py) into --out DIR for
tests/test_train_oracle.c:

  loss_NNN.safetensors   F.cross_entropy / F.mse_loss cases, and
                         F.cross_entropy(F.linear(x, weight, bias)) ones
                         (kind "lce"): the inputs (logits or input, target;
                         x, weight, bias), the upstream gradient "dloss", the
                         loss and the gradients ("grad.logits", "grad.input",
                         "grad.target", "grad.x", ...); the options in
                         __metadata__ (kind, reduction, ignore_index,
                         label_smoothing, target_grad).
  optim_NAME.safetensors an optimizer run: initial parameters "p<k>", 20
                         gradient sets "g<t>.<k>", the parameters after each
                         step "p<t>.<k>" (and "norm<t>", the total norm
                         clip_grad_norm_ returned, when clipping); the
                         hyper-parameters in __metadata__.
  sched.safetensors      learning rates of PyTorch schedulers, "lr.<i>" (F64,
                         one per step), with the qkv schedule each should
                         equal in metadata "sched.<i>" and the scheduler's
                         name in "ref.<i>".

Cases where PyTorch 1.13 gives NaN (a mean cross entropy whose every target
is ignored) are left out: qkv defines those as 0 and the C test checks that
on its own.

Usage: train_oracle.py --out DIR [--seed 1]
"""
import argparse
import math
import os
import random
import sys
import warnings

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

REDUCTIONS = ["mean", "sum", "none"]  # qkv_reduction order
STEPS = 20


def fmt(x):
    return repr(float(x))


# ---- losses -----------------------------------------------------------------

def random_targets(C, shape, ignore_index, reduction):
    """Labels in [0,C) of the given shape, about a quarter of them
    ignore_index (with a mean, not all: then the first counts), or None
    where no label can count (C == 1 and ignore_index 0)."""
    target = torch.randint(0, C, shape, dtype=torch.int64)
    ign = torch.rand(shape) < 0.25
    target = torch.where(ign, torch.full_like(target, ignore_index), target)
    if reduction == "mean" and bool((target == ignore_index).all()):
        label = 1 if ignore_index == 0 else 0
        if label >= C:
            return None
        target.view(-1)[0] = label
    return target


def ce_case(rng, i):
    layout = ["nc", "nc", "ncd", "ncdd", "c"][i % 5]
    C = rng.randint(1, 7)
    N = rng.randint(1, 6)
    if layout == "nc":
        shape, tshape = (N, C), (N,)
    elif layout == "ncd":
        d1 = rng.randint(1, 4)
        shape, tshape = (N, C, d1), (N, d1)
    elif layout == "ncdd":
        d1, d2 = rng.randint(1, 3), rng.randint(1, 3)
        shape, tshape = (N, C, d1, d2), (N, d1, d2)
    else:
        shape, tshape = (C,), ()
    reduction = REDUCTIONS[(i // 5) % 3]
    ignore_index = rng.choice([-100, -100, -1, min(2, C - 1)])
    label_smoothing = rng.choice([0.0, 0.0, 0.1, 0.37, 1.0])
    scale = rng.choice([1.0, 3.0, 30.0])
    logits = (torch.randn(shape) * scale).requires_grad_(True)
    target = random_targets(C, tshape, ignore_index, reduction)
    if target is None:
        return None
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)
    dloss = torch.randn(loss.shape)
    loss.backward(dloss)
    if not bool(torch.isfinite(loss).all()):
        return None
    tensors = {"logits": logits.detach(), "target": target, "loss": loss.detach(),
               "dloss": dloss, "grad.logits": logits.grad}
    meta = {"kind": "ce", "reduction": str(REDUCTIONS.index(reduction)),
            "ignore_index": str(ignore_index), "label_smoothing": fmt(label_smoothing)}
    return tensors, meta


def mse_case(rng, i):
    ndim = rng.randint(0, 4)
    shape = tuple(rng.randint(1, 5) for _ in range(ndim))
    reduction = REDUCTIONS[i % 3]
    target_grad = i % 2
    x = torch.randn(shape).requires_grad_(True)
    t = torch.randn(shape).requires_grad_(bool(target_grad))
    loss = F.mse_loss(x, t, reduction=reduction)
    dloss = torch.randn(loss.shape)
    loss.backward(dloss)
    tensors = {"input": x.detach(), "target": t.detach(), "loss": loss.detach(),
               "dloss": dloss, "grad.input": x.grad}
    if target_grad:
        tensors["grad.target"] = t.grad
    meta = {"kind": "mse", "reduction": str(REDUCTIONS.index(reduction)),
            "target_grad": str(target_grad)}
    return tensors, meta


def lce_case(rng, i):
    """F.cross_entropy(F.linear(x, W, b)) for qkv_linear_cross_entropy: x
    (N,K), (N,T,K) or (K,), the target shaped like x's leading dims."""
    layout = ["n", "nt", "n", "unbatched"][i % 4]
    K, V = rng.randint(1, 9), rng.randint(1, 40)
    N, T = rng.randint(1, 6), rng.randint(1, 4)
    lead = {"n": (N,), "nt": (N, T), "unbatched": ()}[layout]
    reduction = REDUCTIONS[(i // 4) % 3]
    ignore_index = rng.choice([-100, -100, -1, min(2, V - 1)])
    label_smoothing = rng.choice([0.0, 0.0, 0.1, 0.37, 1.0])
    has_bias = i % 5 != 3
    x = (torch.randn(lead + (K,)) * rng.choice([1.0, 3.0])).requires_grad_(True)
    w = torch.randn(V, K).requires_grad_(True)
    b = torch.randn(V).requires_grad_(True) if has_bias else None
    target = random_targets(V, lead, ignore_index, reduction)
    if target is None:
        return None
    logits = F.linear(x, w, b).reshape(-1, V)
    loss = F.cross_entropy(logits, target.reshape(-1), ignore_index=ignore_index,
                           label_smoothing=label_smoothing, reduction=reduction)
    if reduction == "none":
        loss = loss.reshape(lead)
    dloss = torch.randn(loss.shape)
    loss.backward(dloss)
    if not bool(torch.isfinite(loss).all()):
        return None
    tensors = {"x": x.detach(), "weight": w.detach(), "target": target, "loss": loss.detach(),
               "dloss": dloss, "grad.x": x.grad, "grad.weight": w.grad}
    if has_bias:
        tensors["bias"] = b.detach()
        tensors["grad.bias"] = b.grad
    meta = {"kind": "lce", "reduction": str(REDUCTIONS.index(reduction)),
            "ignore_index": str(ignore_index), "label_smoothing": fmt(label_smoothing)}
    return tensors, meta


def write_losses(out, rng, n_ce, n_mse, n_lce=36):
    k = 0
    for i in range(n_ce):
        case = ce_case(rng, i)
        if case is None:
            continue
        safetensors_io.save(os.path.join(out, "loss_%03d.safetensors" % k), *case)
        k += 1
    for i in range(n_mse):
        safetensors_io.save(os.path.join(out, "loss_%03d.safetensors" % k), *mse_case(rng, i))
        k += 1
    for i in range(n_lce):
        case = lce_case(rng, i)
        if case is None:
            continue
        safetensors_io.save(os.path.join(out, "loss_%03d.safetensors" % k), *case)
        k += 1
    return k


# ---- optimizers ----------------------------------------------------------------

SHAPES = [(5, 3), (7,), (2, 3, 4), (1,), (33,)]

# The schedule of the run with one: (base, W, start, decay, total, min_lr),
# applied through LambdaLR(qkv_lambda(...)) here and qkv_optim_set_lr with
# qkv_schedule_lr_at in C.
RUN_SCHEDULE = (1e-2, 5, 0.0, "cosine", 15, 1e-4)

# name: (kind, hyper-parameters, clip max_norm or None, schedule or None)
OPTIMS = {
    "sgd": ("sgd", dict(lr=0.1), None, None),
    "sgd_momentum": ("sgd", dict(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=1e-2),
                     None, None),
    "sgd_nesterov": ("sgd", dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
                     None, None),
    "sgd_maximize": ("sgd", dict(lr=0.01, momentum=0.5, maximize=True), None, None),
    "sgd_nesterov_clip": ("sgd", dict(lr=0.02, momentum=0.8, nesterov=True), 5.0, None),
    "adam": ("adam", dict(), None, None),
    "adam_wd": ("adam", dict(lr=3e-3, betas=(0.8, 0.99), weight_decay=0.1), None, None),
    "adam_amsgrad": ("adam", dict(lr=1e-2, amsgrad=True, weight_decay=1e-2), None, None),
    "adam_clip": ("adam", dict(lr=1e-2), 1.0, None),
    "adamw": ("adamw", dict(), None, None),
    "adamw_amsgrad": ("adamw", dict(lr=2e-3, weight_decay=0.05, eps=1e-6, amsgrad=True,
                                    maximize=True), None, None),
    "adamw_schedule_clip": ("adamw", dict(lr=RUN_SCHEDULE[0]), 2.0, RUN_SCHEDULE),
}

TORCH_OPTIMS = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}


def optim_meta(kind, hp, clip):
    """The hyper-parameters with PyTorch's defaults filled in, as strings."""
    defaults = {"sgd": dict(momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
                            maximize=False),
                "adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                             amsgrad=False, maximize=False),
                "adamw": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                              amsgrad=False, maximize=False)}[kind]
    full = dict(defaults, **hp)
    meta = {"kind": kind, "clip": fmt(clip) if clip is not None else ""}
    for k, v in full.items():
        if k == "betas":
            meta["beta1"], meta["beta2"] = fmt(v[0]), fmt(v[1])
        elif isinstance(v, bool):
            meta[k] = str(int(v))
        else:
            meta[k] = fmt(v)
    return meta


def write_optim(out, name, kind, hp, clip, sched):
    params = [torch.randn(s) for s in SHAPES]
    tensors = {"p%d" % k: p.clone() for k, p in enumerate(params)}
    params = [torch.nn.Parameter(p) for p in params]
    opt = TORCH_OPTIMS[kind](params, **hp)
    lr_sched = None
    if sched is not None:
        lr_sched = torch.optim.lr_scheduler.LambdaLR(opt, qkv_lambda(*sched))
    for t in range(STEPS):
        # Gradient scales vary so that clipping acts on some steps only.
        scale = [0.05, 1.0, 4.0][t % 3]
        for k, p in enumerate(params):
            g = torch.randn(p.shape) * scale
            if t == 7 and k == 1:
                g.zero_()  # a zero gradient still moves Adam's state
            tensors["g%d.%d" % (t, k)] = g.clone()
            p.grad = g
        if clip is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            tensors["norm%d" % t] = norm.reshape(1).clone()
        opt.step()
        if lr_sched is not None:
            lr_sched.step()
        for k, p in enumerate(params):
            tensors["p%d.%d" % (t, k)] = p.detach().clone()
    meta = optim_meta(kind, hp, clip)
    meta["schedule"] = sched_str(sched) if sched is not None else ""
    meta["nparams"] = str(len(params))
    meta["steps"] = str(STEPS)
    safetensors_io.save(os.path.join(out, "optim_%s.safetensors" % name), tensors, meta)


# ---- schedules ------------------------------------------------------------------

def qkv_lambda(base, W, start, decay, total, min_lr):
    """qkv_schedule_lr_at / base, written out (docs/training.md)."""
    def f(step):
        if step < W:
            return start + (1.0 - start) * step / W
        if decay == "constant":
            return 1.0
        if step >= total:
            return min_lr / base
        t = (step - W) / (total - W)
        if decay == "cosine":
            return (min_lr + (base - min_lr) * (1.0 + math.cos(math.pi * t)) / 2.0) / base
        return (base + (min_lr - base) * t) / base
    return f


def scheduler_lrs(make, base, steps):
    """lr for updates 0..steps-1: after k scheduler.step() calls."""
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=base)
    sched = make(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def schedules():
    S = torch.optim.lr_scheduler
    cases = []  # (qkv config, steps, pytorch name, factory)
    b, m = 0.1, 1e-5
    cases.append(((b, 0, 0.0, "cosine", 50, m), 51, "CosineAnnealingLR(T_max=50, eta_min=1e-5)",
                  lambda o: S.CosineAnnealingLR(o, T_max=50, eta_min=m)))
    cases.append(((b, 10, 0.1, "cosine", 60, m), 61,
                  "SequentialLR([LinearLR(0.1, 1, 10), CosineAnnealingLR(T_max=50, eta_min=1e-5)], [10])",
                  lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 10),
                                               S.CosineAnnealingLR(o, T_max=50, eta_min=m)], [10])))
    cases.append(((b, 8, 0.25, "constant", 0, 0.0), 40, "LinearLR(0.25, 1, total_iters=8)",
                  lambda o: S.LinearLR(o, 0.25, 1.0, total_iters=8)))
    cases.append(((b, 0, 0.0, "linear", 30, 1e-3), 40, "LinearLR(1, 0.01, total_iters=30)",
                  lambda o: S.LinearLR(o, 1.0, 1e-3 / b, total_iters=30)))
    cases.append(((b, 5, 0.5, "linear", 25, 0.0), 40,
                  "SequentialLR([LinearLR(0.5, 1, 5), LinearLR(1, 0, 20)], [5])",
                  lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.5, 1.0, 5),
                                               S.LinearLR(o, 1.0, 0.0, 20)], [5])))
    for cfg, steps in [((3e-4, 10, 0.0, "cosine", 100, 3e-5), 120),
                       ((1.0, 4, 0.0, "linear", 12, 0.1), 20),
                       ((0.5, 3, 0.0, "constant", 0, 0.0), 10),
                       ((0.5, 0, 0.0, "constant", 0, 0.0), 5)]:
        cases.append((cfg, steps, "LambdaLR(qkv_lambda%r)" % (cfg,),
                      lambda o, cfg=cfg: S.LambdaLR(o, qkv_lambda(*cfg))))
    return cases


def sched_str(cfg):
    """'base W start decay total min_lr', decay as qkv_schedule_decay's value."""
    base, W, start, decay, total, min_lr = cfg
    return "%s %d %s %d %d %s" % (fmt(base), W, fmt(start),
                                  ["constant", "cosine", "linear"].index(decay), total,
                                  fmt(min_lr))


def write_schedules(out):
    tensors, meta = {}, {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, (cfg, steps, name, make) in enumerate(schedules()):
            lrs = scheduler_lrs(make, cfg[0], steps)
            tensors["lr.%d" % i] = torch.tensor(lrs, dtype=torch.float64)
            meta["sched.%d" % i] = sched_str(cfg)
            meta["ref.%d" % i] = name
    meta["count"] = str(len(schedules()))
    safetensors_io.save(os.path.join(out, "sched.safetensors"), tensors, meta)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ce-cases", type=int, default=90)
    ap.add_argument("--mse-cases", type=int, default=12)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    n = write_losses(a.out, rng, a.ce_cases, a.mse_cases)
    for name, (kind, hp, clip, sched) in OPTIMS.items():
        write_optim(a.out, name, kind, hp, clip, sched)
    write_schedules(a.out)
    with open(os.path.join(a.out, "index.txt"), "w") as f:
        f.write("losses %d\n" % n)
        for name in OPTIMS:
            f.write("optim %s\n" % name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
