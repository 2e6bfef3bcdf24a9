#!/usr/bin/env python3
"""llama.cpp's logits, greedy continuations and perplexity on a GGUF file,
for tests/check_llm_llamacpp_*.c and `qkv perplexity` (docs/gguf.md).

llama.cpp itself (llama-cpp-python 0.3.36: Llama(model_path, n_ctx,
logits_all=True, n_threads, verbose=False), eval) runs the model; nothing
here is qkv's.

  logits OUT MODEL.gguf [--text FILE] [--chunks 4] [--ctx 512] [--top 256]
    The text's first chunks * ctx tokens (llama.cpp's tokenizer, BOS as the
    vocabulary adds it), cut into chunks of ctx tokens, each chunk's first
    token replaced by BOS when the model adds one (as llama-perplexity
    does), each chunk evaluated from an empty cache. Writes
      OUT/ids.i32     chunks * ctx token ids (int32)
      OUT/top_ids.i32 per position the top `top` ids of llama.cpp's
                      distribution, most likely first (int32)
      OUT/top_lp.f32  their log-probabilities (float32, log-softmax of
                      llama.cpp's logits in float64)
      OUT/meta.txt    "chunks ctx top vocab"
    The full distributions (2048 x 262144 floats for Gemma) are not
    written: the test computes KL(llama.cpp || qkv) over the top ids plus
    the rest of the mass as one bucket, a lower bound of the full KL that
    misses only what the rest's redistribution adds (the top 256 hold all
    but ~1e-4 of the mass on average: the test prints how much).
  greedy OUT MODEL.gguf [--n 64]
    Ten prompts (tokenized with BOS as the model adds it), each continued
    greedily (argmax of llama.cpp's logits) for n tokens, no stop on EOS.
    OUT/greedy.txt: per prompt one line "P N ids... | tokens... | gaps...":
    the P prompt ids, the N generated ids and at each step the gap between
    llama.cpp's best and second-best logits.
  perplexity MODEL.gguf FILE [--ctx 512] [--from F] [--to T] [--chunks N]
    llama-perplexity's method (tools/perplexity/perplexity.cpp, which
    llama-cpp-python does not build) over llama.cpp's logits: the bytes
    [F, T) of FILE (fractions of its size, default the whole file; the
    cut moved to the next line start) tokenized at once with BOS as the
    model adds it, n_ctx-token chunks (at most N), each chunk's first token
    replaced by BOS when the model adds one, only the second half scored
    (positions ctx/2 .. ctx-2 predicting the next token). Prints
    "[1]x,[2]y,..." and "Final estimate: PPL = P +/- E" as llama-perplexity
    does (E from the variance of the per-token NLL).
  f32 OUT MODEL.gguf
    OUT/model.gguf: the same model with every tensor dequantized to F32 by gguf-py
    (gguf.quants.dequantize), the metadata copied: llama.cpp then runs it
    without quantizing its activations, so qkv's dequantized model and
    llama.cpp can be compared where rounding is continuous (with Q8
    activations a 1e-7 difference flips a rounding and grows through the
    layers: see docs/gguf.md).
--kv f32|f16: llama.cpp's KV cache type (default f32, as qkv's cache;
llama.cpp's own default is f16). --threads N (default 2).
Run: data/venv/bin/python tools/llamacpp_oracle.py logits OUT MODEL.gguf
"""
import argparse
import math
import os
import sys

import numpy as np
import llama_cpp

PROMPTS = [
    "The capital of France is",
    "Once upon a time, there was a little girl who",
    "In the beginning God created",
    "def fibonacci(n):",
    "The three primary colors are",
    "Water boils at a temperature of",
    "A good way to learn a new language is",
    "The quick brown fox",
    "Photosynthesis is the process by which",
    "Here is a list of the planets in our solar system:",
]


KV = {"f32": 0, "f16": 1}  # ggml types of llama.cpp's KV cache (type_k, type_v)
kv_type = "f32"


def plain_cpu_buffers():
    """llama.cpp's weights in plain CPU buffers (llama_model_params.
    use_extra_bufts = false, what llama-cli's --no-repack does): on the Xeon
    with AMX, llama-cpp-python 0.3.36's extra buffer types (AMX, repacked
    blocks) crash in the first decode with a segmentation fault (seen
    2026-12-02, 1 and 2 threads, with and without flash attention). The plain
    path is llama.cpp's reference CPU kernels on every machine."""
    default = llama_cpp.llama_model_default_params

    def params():
        p = default()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama.llama_cpp.llama_model_default_params = params


def open_model(path, n_ctx, threads):
    """llama.cpp with its KV cache in kv_type: F32 by default here, where
    llama.cpp's own default is F16 (keys and values rounded to half
    precision: KL 0.0065 nats and 97.1% argmax agreement between llama.cpp's
    F16 and F32 caches on SmolLM2's first KJV chunk, measured), since qkv's
    cache is FP32."""
    plain_cpu_buffers()
    return llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_batch=n_ctx, logits_all=True,
                           n_threads=threads, n_threads_batch=threads, verbose=False,
                           type_k=KV[kv_type], type_v=KV[kv_type])


def adds_bos(llm):
    """Whether the vocabulary adds BOS (tokenize's add_bos is llama.cpp's add_special)."""
    return llm.tokenize(b"a", add_bos=True, special=False)[0] == llm.token_bos()


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def chunk_logits(llm, toks):
    """llama.cpp's logits (len(toks), vocab) for one chunk, from an empty cache."""
    llm.reset()
    llm.eval(toks)
    return np.array(llm.scores[:len(toks)], dtype=np.float32)


def chunks_of(llm, ids, ctx, limit):
    n = len(ids) // ctx
    if limit:
        n = min(n, limit)
    bos = adds_bos(llm)
    for i in range(n):
        c = list(ids[i * ctx:(i + 1) * ctx])
        if bos:
            c[0] = llm.token_bos()
        yield c


def cmd_logits(a):
    llm = open_model(a.model, a.ctx, a.threads)
    text = open(a.text, "rb").read()[: 400 * a.chunks * a.ctx]
    ids = llm.tokenize(text, add_bos=True, special=False)
    os.makedirs(a.out, exist_ok=True)
    all_ids, top_ids, top_lp = [], [], []
    for c in chunks_of(llm, ids, a.ctx, a.chunks):
        lp = log_softmax(chunk_logits(llm, c))
        part = np.argpartition(-lp, a.top, axis=-1)[:, : a.top]
        order = np.take_along_axis(part, np.argsort(-np.take_along_axis(lp, part, axis=-1), axis=-1), axis=-1)
        all_ids.append(np.array(c, dtype=np.int32))
        top_ids.append(order.astype(np.int32))
        top_lp.append(np.take_along_axis(lp, order, axis=-1).astype(np.float32))
    if len(all_ids) < a.chunks:
        sys.exit("the text gives only %d chunks of %d tokens" % (len(all_ids), a.ctx))
    np.concatenate(all_ids).tofile(os.path.join(a.out, "ids.i32"))
    np.concatenate(top_ids).tofile(os.path.join(a.out, "top_ids.i32"))
    np.concatenate(top_lp).tofile(os.path.join(a.out, "top_lp.f32"))
    with open(os.path.join(a.out, "meta.txt"), "w") as f:
        f.write("%d %d %d %d\n" % (a.chunks, a.ctx, a.top, llm.n_vocab()))


def cmd_greedy(a):
    llm = open_model(a.model, 256, a.threads)
    lines = []
    for p in PROMPTS:
        ids = llm.tokenize(p.encode(), add_bos=True, special=False)
        llm.reset()
        llm.eval(ids)
        out, gaps = [], []
        for _ in range(a.n):
            row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
            best = int(np.argmax(row))
            two = np.sort(row)[-2:]
            out.append(best)
            gaps.append(float(two[1] - two[0]))
            llm.eval([best])
        lines.append("%d %d %s | %s | %s" % (len(ids), len(out), " ".join(map(str, ids)),
                                             " ".join(map(str, out)), " ".join("%.6g" % g for g in gaps)))
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "greedy.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def span(path, lo, hi):
    data = open(path, "rb").read()
    def cut(frac):
        at = int(len(data) * frac)
        if 0 < at < len(data):
            nl = data.find(b"\n", at)
            at = len(data) if nl < 0 else nl + 1
        return at
    return data[cut(lo):cut(hi)]


def cmd_perplexity(a):
    llm = open_model(a.model, a.ctx, a.threads)
    ids = llm.tokenize(span(a.file, a.frm, a.to), add_bos=True, special=False)
    print("tokenized: %d tokens, %d chunks of %d" % (len(ids), len(ids) // a.ctx, a.ctx), file=sys.stderr)
    first = a.ctx // 2
    nll = nll2 = 0.0
    count = 0
    k = 0
    for c in chunks_of(llm, ids, a.ctx, a.chunks):
        lp = log_softmax(chunk_logits(llm, c))
        # the chunk's real tokens (c[0] may be BOS) from ids: llama-perplexity scores tokens[start+j+1]
        tgt = np.array(ids[k * a.ctx + first + 1:(k + 1) * a.ctx])
        v = -lp[np.arange(first, a.ctx - 1), tgt]
        nll += v.sum()
        nll2 += (v * v).sum()
        count += len(v)
        k += 1
        print("[%d]%.4f," % (k, math.exp(nll / count)), end="", flush=True)
    print()
    mean, mean2 = nll / count, nll2 / count
    var = mean2 - mean * mean
    err = math.sqrt(var / (count - 1)) * math.exp(mean) if var > 0 else 0.0
    print("Final estimate: PPL = %.4f +/- %.5f" % (math.exp(mean), err))


def cmd_f32(a):
    import gguf
    r = gguf.GGUFReader(a.model)
    os.makedirs(a.out, exist_ok=True)
    tmp = os.path.join(a.out, "model.gguf.tmp")
    w = gguf.GGUFWriter(tmp, arch=None)
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.file_type":
            continue
        vt = f.types[0]
        sub = f.types[-1] if vt == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), vt, sub_type=sub)
    w.add_key_value("general.file_type", 0, gguf.GGUFValueType.UINT32)  # all F32
    data = []
    for t in r.tensors:
        x = np.ascontiguousarray(gguf.quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        data.append(x)
        w.add_tensor_info(t.name, x.shape, x.dtype, x.nbytes, gguf.GGMLQuantizationType.F32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for x in data:
        w.write_tensor_data(x)
    w.close()
    os.replace(tmp, os.path.join(a.out, "model.gguf"))


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    q = sub.add_parser("logits")
    q.add_argument("out"); q.add_argument("model")
    q.add_argument("--text", default="data/kjv/kjv.txt")
    q.add_argument("--chunks", type=int, default=4)
    q.add_argument("--ctx", type=int, default=512)
    q.add_argument("--top", type=int, default=256)
    q = sub.add_parser("greedy")
    q.add_argument("out"); q.add_argument("model")
    q.add_argument("--n", type=int, default=64)
    q = sub.add_parser("f32")
    q.add_argument("out"); q.add_argument("model")
    q = sub.add_parser("perplexity")
    q.add_argument("model"); q.add_argument("file")
    q.add_argument("--ctx", type=int, default=512)
    q.add_argument("--from", dest="frm", type=float, default=0.0)
    q.add_argument("--to", type=float, default=1.0)
    q.add_argument("--chunks", type=int, default=0)
    for s in sub.choices.values():
        s.add_argument("--threads", type=int, default=2)
        s.add_argument("--kv", choices=sorted(KV), default="f32")
    a = p.parse_args()
    global kv_type
    kv_type = a.kv
    {"logits": cmd_logits, "greedy": cmd_greedy, "perplexity": cmd_perplexity, "f32": cmd_f32}[a.cmd](a)


if __name__ == "__main__":
    main()
