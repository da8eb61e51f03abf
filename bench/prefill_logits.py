"""Benchmark: prefill of one prompt with logits at every position vs at the last one.

Run: python bench/prefill_logits.py [--prompt 512] [--repeat 5] [--memory-runs 3]
                                    [--threads 1]

The SmolLM2-135M shape (`llmcore.profile.MODEL_SHAPES`, random weights, float32, the
CPU), one prompt of random token ids, no KV cache: `model(ids)` (logits for every
position, (1, 512, 49152), as `Transformer.forward` gives by default) against
`model(ids, logits_at=torch.tensor([511]))` (the last position only, what a server
samples from; the engine's ModelRunner asks for exactly that).

- Time: one untimed call of each, then `--repeat` rounds, each timing both variants
  back to back (the order alternating from round to round); the median of each, and
  the ratio within each round (median).
- Peak memory: each variant in `--memory-runs` fresh subprocesses (interleaved). A
  subprocess builds the model, runs one untimed prefill of its variant, then writes
  "5" to /proc/self/clear_refs (which resets the kernel's peak resident set size,
  VmHWM, to the current RSS), reads VmRSS, runs the same prefill again and reads
  VmHWM: the difference is the resident memory the prefill added at its peak, as the
  kernel saw it. Everything torch allocates on the CPU comes from malloc, so it is in
  the RSS once touched; the subprocesses run with MALLOC_MMAP_THRESHOLD_=131072
  (glibc's default threshold, made fixed) so that every block of 128 KiB or more is
  its own mapping, returned to the kernel when torch frees it. Without it glibc raises
  the threshold after the first large free and keeps freed blocks in its heap, and the
  peak then depends on how the heap happened to fragment (the same run gave 180 and
  216 MiB). Median of the runs.
- The last row of the full logits and the last-only logits are compared (largest
  absolute difference; exit status 1 above 1e-3).

Same intra-op thread count in every run (`--threads`, default 1, as bench/serving.py).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmcore.model import Transformer  # noqa: E402
from llmcore.profile import MODEL_SHAPES  # noqa: E402

SHAPE = "SmolLM2-135M"
VARIANTS = ("all", "last")


def build(prompt: int):
    """(model, ids): the shape with seeded random weights, a seeded random prompt."""
    cfg = MODEL_SHAPES[SHAPE]
    torch.manual_seed(0)
    model = Transformer(cfg).to(torch.float32).eval()
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt), generator=gen)
    return model, ids


def prefill(model, ids, variant: str) -> torch.Tensor:
    with torch.inference_mode():
        if variant == "all":
            return model(ids)
        return model(ids, logits_at=torch.tensor([ids.shape[1] - 1]))


def _status_kb(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.M).group(1))


def child(variant: str, prompt: int, threads: int) -> None:
    """A prefill in this fresh process after a first one; prints the peak RSS the
    second one added, as JSON."""
    torch.set_num_threads(threads)
    model, ids = build(prompt)
    prefill(model, ids, variant)  # the first call makes one-time allocations
    gc.collect()
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS
    before = _status_kb("VmRSS")
    logits = prefill(model, ids, variant)
    peak = _status_kb("VmHWM")
    print(json.dumps({"variant": variant, "rss_before_kb": before, "hwm_kb": peak,
                      "added_kb": peak - before, "logits_shape": list(logits.shape)}))


def measure_memory(variant: str, prompt: int, threads: int) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    out = subprocess.run([sys.executable, __file__, "--child", variant, "--prompt",
                          str(prompt), "--threads", str(threads)],
                         capture_output=True, text=True, check=True, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompt", type=int, default=512, help="prompt tokens")
    ap.add_argument("--repeat", type=int, default=5, help="timed rounds (median)")
    ap.add_argument("--memory-runs", type=int, default=3,
                    help="fresh subprocesses per variant for peak memory (median)")
    ap.add_argument("--threads", type=int, default=1, help="intra-op threads")
    ap.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.prompt, args.threads)
        return 0
    torch.set_num_threads(args.threads)
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    print(f"machine: {cpu}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}; {SHAPE} shape (random weights), float32, one "
          f"{args.prompt}-token prompt")
    started = time.perf_counter()
    model, ids = build(args.prompt)
    outputs = {v: prefill(model, ids, v) for v in VARIANTS}  # warm-up, and compared
    diff = (outputs["all"][0, -1] - outputs["last"][0, -1]).abs().max().item()
    shapes = {v: tuple(o.shape) for v, o in outputs.items()}
    del outputs
    times = {v: [] for v in VARIANTS}
    for round_ in range(args.repeat):
        for variant in (VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]):
            start = time.perf_counter()
            prefill(model, ids, variant)
            times[variant].append(time.perf_counter() - start)
    del model
    memory = {v: [] for v in VARIANTS}
    for _ in range(args.memory_runs):
        for variant in VARIANTS:
            memory[variant].append(measure_memory(variant, args.prompt, args.threads))
    med = statistics.median
    logits_mb = args.prompt * MODEL_SHAPES[SHAPE].vocab_size * 4 / 2**20
    print("\nlogits | output shape | prefill time (median) | peak RSS added (median)"
          " | runs")
    for v in VARIANTS:
        added = [m["added_kb"] / 1024 for m in memory[v]]
        print(f"{v} | {shapes[v]} | {med(times[v]) * 1e3:.0f} ms | "
              f"{med(added):.1f} MiB | times "
              f"{', '.join(f'{t * 1e3:.0f}' for t in times[v])} ms; memory "
              f"{', '.join(f'{a:.1f}' for a in added)} MiB")
    ratio = med(a / b for a, b in zip(times["all"], times["last"]))
    saved = med(m["added_kb"] for m in memory["all"]) - med(
        m["added_kb"] for m in memory["last"])
    print(f"\nlast position only: {ratio:.2f}x faster (ratio within each round, "
          f"median), {saved / 1024:.1f} MiB less peak memory (one "
          f"{args.prompt} x {MODEL_SHAPES[SHAPE].vocab_size} float32 logits tensor is "
          f"{logits_mb:.1f} MiB); largest |difference| of the last row: {diff:.1e}")
    print(f"bench ran {time.perf_counter() - started:.0f} s")
    return 0 if diff <= 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
