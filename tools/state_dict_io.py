#!/usr/bin/python3
"""Move any torch.nn.Module's state_dict to and from safetensors, for qkv.

Python API (run with /usr/bin/python3, Debian's torch):

    from state_dict_io import export_state_dict, import_state_dict
    export_state_dict(model, "model.safetensors", metadata={"note": "..."})
    import_state_dict(fresh_model, "model.safetensors")          # strict
    missing, unexpected = import_state_dict(m, path, strict=False)

export_state_dict(module_or_state_dict, path, metadata=None,
                  keep_dtypes=False, dedupe=False)
  - writes module.state_dict(): parameters and persistent buffers (BatchNorm's
    running_mean and num_batches_tracked, ...), under their state_dict names,
    which are the names qkv's parameters use;
  - floating-point tensors are written as contiguous float32 (qkv's dtype)
    unless keep_dtypes=True; integer and bool tensors keep their dtype;
  - shared tensors (tied weights: one tensor under two names, or two names
    viewing the same storage) are written once per name, so a reader that
    looks tensors up by name (qkv) finds them all; the aliases are listed in
    the metadata ("qkv.shared", JSON). With dedupe=True only the first name
    of each group of identical aliases is written and import_state_dict
    restores the others;
  - metadata: "format": "pt", "qkv.source": the module's class, and the
    caller's string pairs.

import_state_dict(module, path, strict=True) reads the file and calls
module.load_state_dict (values are cast to each parameter's dtype); returns
its (missing_keys, unexpected_keys).

Command line:

    state_dict_io.py export MODULE_SPEC OUT.safetensors [--seed N]
                     [--keep-dtypes] [--dedupe] [--meta KEY=VALUE ...]
    state_dict_io.py load MODULE_SPEC IN.safetensors [--seed N] [--non-strict]
    state_dict_io.py --selftest [--qkv PATH_TO_QKV_BINARY]

MODULE_SPEC is either a file saved with torch.save (.pt, .pth, .bin: a
module, a state_dict, or a dict holding one under "state_dict" or "model"),
or a Python expression that builds a module, such as
"torch.nn.Transformer(d_model=32, nhead=4)" or "mypkg.models.Net(3)" (the
modules it names are imported first; --seed seeds torch before building).
`load` checks that a safetensors file (e.g. one qkv wrote) loads into the
module and reports missing and unexpected keys.

--selftest exports an nn.Transformer(d_model=32, nhead=4, 2 + 2 layers,
dim_feedforward=64), imports it into a freshly initialised one, checks every
tensor and the forward outputs are equal, also checks buffers, tied weights
(with and without dedupe), kept dtypes and non-contiguous tensors, and runs
`qkv inspect` on the file (the binary from --qkv, else build/qkv if it
exists) checking its tensor count and totals.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402

SHARED_KEY = "qkv.shared"
ALIASES_KEY = "qkv.aliases"


# ---- export ----------------------------------------------------------------

def _state_dict_of(obj):
    if isinstance(obj, nn.Module):
        return obj.state_dict(), type(obj).__module__ + "." + type(obj).__qualname__
    if isinstance(obj, dict) and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj, "state_dict"
    raise TypeError("expected an nn.Module or a dict of name -> tensor, got %s" % type(obj).__name__)


def _storage_ptr(t):
    return t.untyped_storage().data_ptr() if hasattr(t, "untyped_storage") else t.storage().data_ptr()


def _alias_key(t):
    """Tensors with the same key are the same elements (tied weights)."""
    return (t.device.type, _storage_ptr(t), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def shared_groups(sd):
    """Lists of names that share storage, each list in state_dict order; the
    ones whose tensors are identical (same offset, shape and strides) are
    exact aliases. Returns (groups, exact): two lists of name lists."""
    by_storage, by_alias = {}, {}
    for name, t in sd.items():
        if t.numel() == 0:
            continue
        by_storage.setdefault((t.device.type, _storage_ptr(t)), []).append(name)
        by_alias.setdefault(_alias_key(t), []).append(name)
    groups = [g for g in by_storage.values() if len(g) > 1]
    exact = [g for g in by_alias.values() if len(g) > 1]
    return groups, exact


def _prepare(t, keep_dtypes):
    t = t.detach().cpu()
    if t.is_complex():
        raise ValueError("complex tensors have no safetensors dtype")
    if t.is_floating_point() and not keep_dtypes:
        t = t.to(torch.float32)
    return t.contiguous()


def export_state_dict(module, path, metadata=None, keep_dtypes=False, dedupe=False):
    """Writes module's state_dict (or a state_dict) to path; returns the
    dict of tensors written."""
    sd, source = _state_dict_of(module)
    groups, exact = shared_groups(sd)
    drop = {}
    if dedupe:
        for g in exact:
            for alias in g[1:]:
                drop[alias] = g[0]
    tensors = {name: _prepare(t, keep_dtypes) for name, t in sd.items() if name not in drop}
    meta = {"format": "pt", "qkv.source": source}
    if groups:
        meta[SHARED_KEY] = json.dumps(groups)
    if drop:
        meta[ALIASES_KEY] = json.dumps(drop, sort_keys=True)
    for k, v in (metadata or {}).items():
        if not isinstance(k, str) or not isinstance(v, str):
            raise ValueError("metadata must map str to str")
        meta[k] = v
    safetensors_io.save(path, tensors, meta)
    return tensors


# ---- import ----------------------------------------------------------------

def read_state_dict(path):
    """The file's tensors as a state_dict (aliases dropped by dedupe
    restored) and its metadata."""
    tensors, meta = safetensors_io.load(path)
    meta = meta or {}
    for alias, kept in json.loads(meta.get(ALIASES_KEY, "{}")).items():
        if kept not in tensors:
            raise ValueError("%s: alias %r refers to missing tensor %r" % (path, alias, kept))
        tensors[alias] = tensors[kept]
    return tensors, meta


def import_state_dict(module, path, strict=True):
    """Loads path into module with load_state_dict; returns its
    (missing_keys, unexpected_keys)."""
    tensors, _ = read_state_dict(path)
    result = module.load_state_dict(tensors, strict=strict)
    return result.missing_keys, result.unexpected_keys


# ---- command line ----------------------------------------------------------

def _import_names(expr):
    """Imports the dotted module prefixes an expression names (torch.nn for
    'torch.nn.Transformer(...)'); returns a namespace for eval."""
    ns = {"torch": torch, "nn": nn, "math": math}
    for dotted in re.findall(r"\b([A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)+)", expr):
        parts = dotted.split(".")
        for i in range(len(parts) - 1, 0, -1):
            try:
                __import__(".".join(parts[:i]))
            except ImportError:
                continue
            top = parts[0]
            ns[top] = sys.modules[top]
            break
    return ns


def build_module(spec, seed=None):
    """A module (or state_dict) from a torch.save file or a Python expression."""
    if seed is not None:
        torch.manual_seed(seed)
    if os.path.splitext(spec)[1] in (".pt", ".pth", ".bin") and os.path.exists(spec):
        obj = torch.load(spec, map_location="cpu")
        if isinstance(obj, dict) and not all(isinstance(v, torch.Tensor) for v in obj.values()):
            for key in ("state_dict", "model"):
                if isinstance(obj.get(key), (dict, nn.Module)):
                    return obj[key]
        return obj
    obj = eval(spec, _import_names(spec))  # a developer's tool: the spec is code
    if not isinstance(obj, nn.Module):
        raise TypeError("%r built a %s, not an nn.Module" % (spec, type(obj).__name__))
    return obj


def _parse_meta(pairs):
    meta = {}
    for p in pairs or []:
        if "=" not in p:
            raise ValueError("--meta %r: expected KEY=VALUE" % p)
        k, v = p.split("=", 1)
        meta[k] = v
    return meta


def cmd_export(args):
    obj = build_module(args.spec, args.seed)
    tensors = export_state_dict(obj, args.path, _parse_meta(args.meta), args.keep_dtypes, args.dedupe)
    n = sum(t.numel() for t in tensors.values())
    print("wrote %s: %d tensors, %d elements" % (args.path, len(tensors), n))
    return 0


def cmd_load(args):
    m = build_module(args.spec, args.seed)
    if not isinstance(m, nn.Module):
        print("load: %r is not a module" % args.spec, file=sys.stderr)
        return 2
    try:
        missing, unexpected = import_state_dict(m, args.path, strict=not args.non_strict)
    except (RuntimeError, ValueError) as e:
        print("load: %s" % e, file=sys.stderr)
        return 1
    print("loaded %s into %s: %d missing keys%s, %d unexpected keys%s"
          % (args.path, type(m).__name__, len(missing), (" " + ", ".join(missing)) if missing else "",
             len(unexpected), (" " + ", ".join(unexpected)) if unexpected else ""))
    return 0


# ---- self-test -------------------------------------------------------------

def _transformer(seed):
    torch.manual_seed(seed)
    return nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                          dim_feedforward=64)


class _Tied(nn.Module):
    """Tied embedding and output weights, a BatchNorm's buffers, a float64
    parameter and a non-contiguous buffer."""

    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(7, 4)
        self.out = nn.Linear(4, 7, bias=False)
        self.out.weight = self.emb.weight
        self.norm = nn.BatchNorm1d(4)
        self.scale = nn.Parameter(torch.randn(3, dtype=torch.float64))
        self.register_buffer("table", torch.randn(4, 6).t())  # (6,4), not contiguous


def _problem(problems, ok, msg):
    if not ok:
        problems.append(msg)


def _check_inspect(problems, qkv, path, tensors):
    """Runs `qkv inspect path`; checks the count and totals it prints."""
    r = subprocess.run([qkv, "inspect", path], capture_output=True, text=True)
    _problem(problems, r.returncode == 0, "qkv inspect %s: exit %d: %s" % (path, r.returncode, r.stderr))
    if r.returncode:
        return
    n = len(tensors)
    numel = sum(t.numel() for t in tensors.values())
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    want = "total: %d tensors, %d parameters (elements), %d bytes" % (n, numel, nbytes)
    _problem(problems, want in r.stdout, "qkv inspect: expected %r in:\n%s" % (want, r.stdout))
    for name in tensors:
        _problem(problems, re.search(r"^%s\s" % re.escape(name), r.stdout, re.M) is not None,
                 "qkv inspect does not list %s" % name)


def selftest(qkv=None):
    problems = []
    if qkv is None:
        guess = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "qkv")
        qkv = guess if os.access(guess, os.X_OK) else None
    with tempfile.TemporaryDirectory() as d:
        # nn.Transformer: export, import into a differently initialised one
        src, dst = _transformer(0).eval(), _transformer(1).eval()
        path = os.path.join(d, "transformer.safetensors")
        written = export_state_dict(src, path, {"note": "selftest"})
        sd0, sd1 = src.state_dict(), dst.state_dict()
        _problem(problems, any(not torch.equal(sd0[k], sd1[k]) for k in sd0),
                 "the two Transformers start equal: the test would prove nothing")
        missing, unexpected = import_state_dict(dst, path)
        _problem(problems, not missing and not unexpected, "missing %s unexpected %s" % (missing, unexpected))
        sd1 = dst.state_dict()
        _problem(problems, list(sd0) == list(written) or sorted(sd0) == sorted(written),
                 "written names differ from the state_dict's")
        for k in sd0:
            _problem(problems, torch.equal(sd0[k], sd1[k]), "%s differs after the round trip" % k)
        torch.manual_seed(2)
        s, t = torch.randn(5, 2, 32), torch.randn(4, 2, 32)
        with torch.no_grad():
            _problem(problems, torch.equal(src(s, t), dst(s, t)), "forward outputs differ after import")
        _, meta = safetensors_io.load(path)
        _problem(problems, meta.get("note") == "selftest" and meta.get("format") == "pt",
                 "metadata %r" % meta)
        if qkv:
            _check_inspect(problems, qkv, path, written)
        # buffers, tied weights, dtypes, non-contiguous tensors
        torch.manual_seed(3)
        tied = _Tied()
        tied.norm(torch.randn(8, 4))  # running stats and num_batches_tracked move
        for dedupe in (False, True):
            for keep in (False, True):
                p = os.path.join(d, "tied_%d_%d.safetensors" % (dedupe, keep))
                w = export_state_dict(tied, p, keep_dtypes=keep, dedupe=dedupe)
                _problem(problems, ("out.weight" in w) != dedupe, "dedupe=%s: out.weight written: %s"
                         % (dedupe, "out.weight" in w))
                _problem(problems, w["scale"].dtype == (torch.float64 if keep else torch.float32),
                         "keep_dtypes=%s: scale is %s" % (keep, w["scale"].dtype))
                _problem(problems, w["norm.num_batches_tracked"].dtype == torch.int64,
                         "num_batches_tracked must stay int64")
                torch.manual_seed(4)
                fresh = _Tied()
                import_state_dict(fresh, p)
                a, b = tied.state_dict(), fresh.state_dict()
                for k in a:
                    same = torch.equal(a[k], b[k]) if keep or not a[k].is_floating_point() else \
                        torch.equal(a[k].float(), b[k].float())
                    _problem(problems, same, "tied (dedupe=%s keep=%s): %s differs" % (dedupe, keep, k))
                _, meta = safetensors_io.load(p)
                _problem(problems, json.loads(meta.get(SHARED_KEY, "[]")) == [["emb.weight", "out.weight"]],
                         "shared groups %r" % meta.get(SHARED_KEY))
                if qkv and not dedupe:
                    _check_inspect(problems, qkv, p, w)
        # strict import reports a wrong module
        try:
            import_state_dict(nn.Linear(4, 7), path)
            problems.append("strict import into the wrong module did not fail")
        except RuntimeError:
            pass
    for p in problems:
        print("state_dict_io selftest: " + p, file=sys.stderr)
    print("state_dict_io selftest: %s (qkv inspect: %s)"
          % ("FAILED" if problems else "ok", qkv if qkv else "skipped, no binary"))
    return 1 if problems else 0


def main(argv):
    if len(argv) > 1 and argv[1] == "--selftest":
        ap = argparse.ArgumentParser(prog="state_dict_io.py --selftest")
        ap.add_argument("--qkv", help="the qkv binary to run inspect with")
        args = ap.parse_args(argv[2:])
        if args.qkv and not os.access(args.qkv, os.X_OK):
            print("state_dict_io selftest: %s is not an executable" % args.qkv, file=sys.stderr)
            return 1
        return selftest(args.qkv)
    ap = argparse.ArgumentParser(description="state_dict <-> safetensors for qkv")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("export", help="write a module's state_dict to safetensors")
    ex.add_argument("spec", metavar="MODULE_SPEC")
    ex.add_argument("path", metavar="OUT.safetensors")
    ex.add_argument("--seed", type=int)
    ex.add_argument("--keep-dtypes", action="store_true")
    ex.add_argument("--dedupe", action="store_true")
    ex.add_argument("--meta", action="append", metavar="KEY=VALUE")
    ld = sub.add_parser("load", help="load a safetensors file into a module (a check)")
    ld.add_argument("spec", metavar="MODULE_SPEC")
    ld.add_argument("path", metavar="IN.safetensors")
    ld.add_argument("--seed", type=int)
    ld.add_argument("--non-strict", action="store_true")
    args = ap.parse_args(argv[1:])
    return cmd_export(args) if args.cmd == "export" else cmd_load(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
