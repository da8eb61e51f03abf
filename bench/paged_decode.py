"""Benchmark: one batched decode step through the paged KV cache, padded gather vs attention over the block table.

Run: python bench/paged_decode.py [--repeat 7] [--threads 2] [--smollm2] [--json FILE]

A decode step is one forward pass of the whole model (every layer, the LM head) with one new token per
row, through `llmcore.paged.PagedKVCache`, for a batch whose rows already hold some context. Two peers
on the same cache, the same inputs, in alternation within each round:

- "padded": `block_attention=False`, chapter 6's first reader: every layer gathers a (batch, longest)
  copy of all keys and values from the block pool and attends over it with a mask;
- "blocks": `block_attention=True` (the default): every layer attends over the block table, each row
  reading only its own blocks, so the step costs the batch's real context.

Batches: uniform (every row with the same context) over batch sizes 1..32 and contexts 64..768, and
mixed (one row of 768 tokens, the others of 32, as when one long request decodes among short ones).
The pool is filled with random keys and values (no prefill is run: a step's cost does not depend on
the values), and each configuration's logits are compared between the peers (max abs difference
printed; a difference above 1e-3 makes the exit status 1). Times are the median of `--repeat` steps
after a warm-up. The bundled tiny model in float32 by default; `--smollm2` adds the SmolLM2-135M shape
(llmcore.profile.MODEL_SHAPES, random weights) on a smaller grid. No target from an issue: the claim is
the shape of the curves (the padded step grows with batch x longest, the block step with the sum of
the rows' contexts).
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from llmcore.model import Transformer  # noqa: E402
from llmcore.paged import PagedKVCache  # noqa: E402
from llmcore.pretrained import load_model  # noqa: E402
from llmcore.profile import MODEL_SHAPES  # noqa: E402

BLOCK = 16


def step_times(model, contexts: list[int], repeat: int) -> dict:
    """Median seconds of one decode step, padded vs blocks, and the logits' max abs difference."""
    cfg = model.cfg
    blocks = sum(-(-(n + 1) // BLOCK) for n in contexts)
    cache = PagedKVCache(cfg, num_blocks=blocks, block_size=BLOCK, device="cpu", dtype=model.dtype)
    cache.pool.copy_(torch.randn(cache.pool.shape, generator=torch.Generator().manual_seed(0)))
    rows = list(range(len(contexts)))
    for row in rows:
        cache.add_sequence(row)
    tokens = torch.randint(0, cfg.vocab_size, (len(rows), 1), generator=torch.Generator().manual_seed(1))
    positions = torch.tensor(contexts)[:, None]  # the step writes position n after n tokens of context

    def step(block_attention: bool) -> torch.Tensor:
        cache.block_attention = block_attention
        cache.set_batch(rows)
        with torch.inference_mode():
            return model(tokens, positions=positions, kv_cache=cache)

    logits = {peer: step(peer == "blocks") for peer in ("padded", "blocks")}  # also the warm-up
    times = {"padded": [], "blocks": []}
    for _ in range(repeat):  # alternate, so both see the same background load
        for peer in times:
            start = time.perf_counter()
            step(peer == "blocks")
            times[peer].append(time.perf_counter() - start)
    return {"contexts": contexts, "padded_s": statistics.median(times["padded"]),
            "blocks_s": statistics.median(times["blocks"]),
            "max_abs_diff": float((logits["padded"] - logits["blocks"]).abs().max())}


def table(name: str, model, batches: list[int], contexts: list[int], repeat: int) -> list[dict]:
    records = []
    print(f"\n== {name}: decode step time, ms (median of {repeat}); padded gather / block table (ratio)")
    print(f"{'batch':>5} | " + " | ".join(f"{f'uniform {c}':>22}" for c in contexts)
          + f" | {'mixed 768 + 32s':>22}")
    for b in batches:
        cells = []
        for kind, contexts_ in [("uniform", [c] * b) for c in contexts] + [("mixed", [768] + [32] * (b - 1))]:
            r = step_times(model, contexts_, repeat)
            r.update(model=name, batch=b, kind=kind)
            records.append(r)
            cells.append(f"{r['padded_s'] * 1e3:6.2f} / {r['blocks_s'] * 1e3:6.2f} "
                         f"({r['padded_s'] / r['blocks_s']:4.1f}x)")
        print(f"{b:>5} | " + " | ".join(f"{c:>22}" for c in cells))
    worst = max(r["max_abs_diff"] for r in records)
    print(f"largest |logits padded - logits blocks| over the table: {worst:.2e}")
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--smollm2", action="store_true", help="also the SmolLM2-135M shape (random weights)")
    parser.add_argument("--json", type=Path, help="also write every figure to this JSON file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}; float32, block size {BLOCK}")
    records = table("tiny", load_model("tiny", device="cpu", dtype=torch.float32).eval(),
                    [1, 2, 4, 8, 16, 32], [64, 256, 768], args.repeat)
    if args.smollm2:
        torch.manual_seed(0)
        smol = Transformer(MODEL_SHAPES["SmolLM2-135M"]).float().eval()
        records += table("SmolLM2-135M shape", smol, [1, 8, 32], [64, 768], max(3, args.repeat // 2))
    if args.json:
        args.json.write_text(json.dumps(records, indent=1))
    if max(r["max_abs_diff"] for r in records) > 1e-3:
        print("MISMATCH: the two readers' logits differ by more than 1e-3")
        sys.exit(1)


if __name__ == "__main__":
    main()
