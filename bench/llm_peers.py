#!/usr/bin/env python3
"""llm_peers.py: qkv against llama.cpp on the same GGUF files, the same
threads, interleaved in one run: prompt processing of 512 tokens and
greedy generation of 128, tokens per second, and the memory-bandwidth
floor of generation.

  qkv:       build/qkv run MODEL --ctx-size 1024 -t 0 --repeat-penalty 1
             -n 128 -j T -p TEXT (its stderr line: the prompt's and the
             generation's tokens/s; the process's start and the model's
             mapping are outside both timings)
  llama.cpp: llama-cpp-python 0.3.36, Llama(n_ctx=1024, n_batch=512,
             n_threads=T, logits_all=False): eval of the 512 prompt ids
             timed, then 128 greedy steps (argmax, eval of one token) timed.
TEXT is the KJV's first 512 tokens as llama.cpp tokenizes them (BOS first
when the model adds one), detokenized: qkv's tokenizer gives the same ids
(tests/test_gguf_tokenizer.c). Rounds alternate qkv and llama.cpp; the
best of the rounds is reported for each.

The floor: a generated token reads every weight once (the quantized bytes
of the GGUF's tensors, the tied embedding's once for the output) plus
the KV cache; floor tokens/s = bandwidth / bytes per token, with the
bandwidth measured here by numpy summing a 1 GiB array (one core's
read bandwidth; also all-threads copies by numpy are not measured).
Run: data/venv/bin/python bench/llm_peers.py [--threads 2] [--rounds 3]
"""
import argparse
import re
import subprocess
import sys
import time

import numpy as np
import gguf
import llama_cpp

MODELS = [("smollm2", "data/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),
          ("gemma3", "data/gemma3/gemma-3-270m-q4_k_m.gguf")]


def prompt_text(llm, n=512):
    ids = llm.tokenize(open("data/kjv/kjv.txt", "rb").read()[:20000], add_bos=True, special=False)[:n]
    bos = ids[0] == llm.token_bos()
    text = llm.detokenize(ids[1:] if bos else ids).decode("utf-8", "replace")
    return ids, text


def run_llamacpp(llm, ids, n_gen):
    llm.reset()
    t0 = time.perf_counter()
    llm.eval(ids)
    tp = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(n_gen):
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        llm.eval([tok])
    tg = time.perf_counter() - t0
    return len(ids) / tp, n_gen / tg


def run_qkv(path, text, n_gen, threads):
    cmd = ["build/qkv", "run", path, "--ctx-size", "1024", "-t", "0", "--repeat-penalty", "1",
           "-n", str(n_gen), "-j", str(threads), "-p", text]
    r = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"prompt (\d+) tokens in [\d.]+ s \(([\d.]+) tokens/s\); (\d+) generated in [\d.]+ s "
                  r"\(([\d.]+) tokens/s", r.stderr)
    if r.returncode or not m:
        sys.exit("qkv run failed: %s" % r.stderr[-500:])
    return int(m.group(1)), float(m.group(2)), int(m.group(3)), float(m.group(4))


def weight_bytes(path):
    """Bytes of the file's tensors: what a decoding step reads (a tied
    embedding is the output projection, read once; the lookup reads a row)."""
    return sum(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)


def bandwidth():
    a = np.ones(1 << 28, dtype=np.float32)  # 1 GiB
    a.sum()
    best = 0
    for _ in range(3):
        t0 = time.perf_counter()
        a.sum()
        best = max(best, a.nbytes / (time.perf_counter() - t0))
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--gen", type=int, default=128)
    a = p.parse_args()
    bw = bandwidth()
    print("read bandwidth (numpy sum of 1 GiB, one core): %.2f GB/s" % (bw / 1e9))
    print("| model | who | prompt 512 tok/s | generation tok/s | tokens generated |")
    print("|---|---|---|---|---|")
    floors = []
    for name, path in MODELS:
        llm = llama_cpp.Llama(model_path=path, n_ctx=1024, n_batch=512, n_threads=a.threads,
                              n_threads_batch=a.threads, logits_all=False, verbose=False)
        ids, text = prompt_text(llm)
        best = {"qkv": (0, 0, 0, 0), "llama.cpp": (0, 0)}
        for _ in range(a.rounds):
            q = run_qkv(path, text, a.gen, a.threads)
            best["qkv"] = (q[0], max(best["qkv"][1], q[1]), q[2], max(best["qkv"][3], q[3]))
            l = run_llamacpp(llm, ids, a.gen)
            best["llama.cpp"] = (max(best["llama.cpp"][0], l[0]), max(best["llama.cpp"][1], l[1]))
        q, l = best["qkv"], best["llama.cpp"]
        print("| %s | qkv | %.1f (%d tokens) | %.1f | %d |" % (name, q[1], q[0], q[3], q[2]))
        print("| %s | llama.cpp | %.1f (%d tokens) | %.1f | %d |" % (name, l[0], len(ids), l[1], a.gen))
        total = weight_bytes(path)
        floors.append((name, total, bw / total))
        del llm
    for name, total, f in floors:
        print("%s: %.1f MB of weights per token (the tied embedding counted once): floor %.1f tokens/s at %.2f GB/s"
              % (name, total / 1e6, f, bw / 1e9))


if __name__ == "__main__":
    main()
