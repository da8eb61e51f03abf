"""Benchmark: the serving engine under traffic, and llmcore's `Engine` against
transformers' continuous batching.

Run: python bench/serving.py [--quick] [--only SECTION ...] [--repeat 3] [--threads N]
                             [--max-batch 32]

Every run is float32 on the CPU, greedy, with random prompt token ids from
`llmcore.traffic.synthetic_requests` (lengths log-uniform between the stated bounds, a
fixed seed). The engine has no tokenizer and so no stop ids: every request makes exactly
its max_tokens tokens, and the bench checks that it did. Sections (`--only` takes any of
them; all by default):

- peer: the same requests (64 on the bundled tiny model: prompts 16-512 tokens, outputs
  4-256, each with its own max_tokens) as one burst through `Engine` and through
  transformers' continuous batching, same weights, `max_batch` requests at a time on
  both sides, KV blocks of 16 tokens on both, every request's tokens compared.
  `model.generate_batch` takes one `max_new_tokens` for all its inputs, so the bench
  makes the calls it makes itself: `model.continuous_batching_context_manager(...)`,
  then one `manager.add_request(ids, max_new_tokens=n, eos_token_id=-1)` per request,
  then `manager.get_result()` until every request has finished. The model is loaded
  with attn_implementation="paged|sdpa", which transformers 5.24 reads as "sdpa" (its
  continuous batching runs SDPA over its paged cache; there is no other paged kernel on
  a CPU but "paged|eager"). Timed on both sides from the first request added to the last
  one finished (transformers' manager is made, and its cache allocated, before the
  clock starts). SmolLM2-135M-Instruct (the real weights: its GGUF file, installed by `make`,
  dequantized to float32 by llmcore's reader and by transformers' `gguf_file=`) runs
  a smaller set, so that the section stays affordable on two cores; the bench prints
  the set it used. Targets (issue 27): >= 3x on tiny, >= 1.3x on SmolLM2-135M-Instruct.
  Also, on both models, the share of the machine's matmul FLOP/s the engine reaches in
  the burst's prefill-heavy steps (goal >= 70%, issue 27): the engine's burst runs
  `engine.run()`'s loop with a clock read around each `engine.step()`, and the
  scheduler's plans logged; a step is prefill-heavy when prompt tokens are more than
  half of the tokens it computes (on these bursts: the first step, which prefills
  `max_batch` prompts whole, and the steps that admit a request in place of one that
  finished, a prompt of 16-512 tokens next to up to 31 decodes). Their FLOPs (2 per
  matmul weight per token, lm_head only at the rows sampled, attention over causal
  pairs; decodes in them included) over their summed step times, against a
  1024 x 1024 float32 product (`llmcore.profile.measure_matmul_flops`) timed in the
  same round, right after the engine's burst; the model's own (512 x dim) @
  (dim x hidden_dim) product is printed next to it.
- trace: capacity = requests/s of the continuous engine on a burst of the peer's tiny
  requests; the same requests then arrive as a Poisson trace (`poisson_arrivals`,
  `replay`) at 50%, 80% and 100% of that rate, through the continuous engine and the
  static one (`Engine(static=True)`: refills only an empty batch). Target: continuous's
  p99 TTFT <= 1/3 of static's at 80% load.
- chunked: 16 requests decode on SmolLM2-135M-Instruct (the tiny model has only 1,024
  positions) when a 2,048-token prompt arrives; prefilled whole (token_budget=None)
  or in chunks that share steps with the decodes (token_budget=256). Target: the 16
  running requests' p99 inter-token gap >= 3x lower with chunks, throughput (output
  tokens over the run's wall time) less than 10% lower; tokens identical.
- prefix: 64 chat-like requests on tiny (a shared 512-token system prompt, then 16-256
  tokens of their own, 4-64 output tokens) in one burst, all admitted in one step, into
  an engine that has served one earlier request with that system prompt (a prefix
  cache learns a block only once it is computed, so requests admitted in the same step
  cannot share with each other); `prefix_caching=True` against False. Target: mean
  TTFT >= 5x lower, tokens identical.
- tight: the peer's tiny burst, all requests admitted at once if they fit, in a pool of
  half the KV blocks the burst needs (prompt + max_tokens of every request):
  admission="optimistic" (admit when the prompt fits, preempt the newest request when
  the pool runs dry) against "reserve" (admit only when prompt + max_tokens fit).
  Throughput, preemptions, and tokens against a run with an ample pool.

Each section warms up first, then takes the median of `--repeat` rounds; within a round
the two sides run back to back and ratios are taken within the round. A trace is run
once per load and policy (it is a run of seconds whose p99 is the figure).
`torch.set_num_threads(--threads)` holds for both libraries (one process; transformers'
loop runs in a thread of it). The default is 1 thread: on the book's shared 2-core VM,
with other jobs running, 2 threads made the same Engine burst take anywhere from 12 to
74 s (1.3 s with 1 thread), the OpenMP workers waiting for a core held by another
process; pass `--threads 2` on a quiet machine. The exit status is 1 if any tokens
differ.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmcore.engine import Engine  # noqa: E402
from llmcore.request import Request  # noqa: E402
from llmcore.traffic import (  # noqa: E402
    percentile,
    poisson_arrivals,
    replay,
    summarize,
    synthetic_requests,
)
from llmcore.pretrained import bundled_dir, load, load_model, locate  # noqa: E402
from llmcore.profile import (  # noqa: E402
    attention_flops,
    matmul_weights,
    measure_matmul_flops,
    median_time,
)
from llmcore.sampling import SamplingParams  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tokenizer_train import cpu_name  # noqa: E402  (bench/ holds the one copy)

SECTIONS = ("peer", "trace", "chunked", "prefix", "tight")
BLOCK = 16  # tokens per KV block (page), both libraries
REAL = "smollm2-135m-instruct"  # llmcore.pretrained.KNOWN: the real model's GGUF file


@dataclass(frozen=True)
class Sizes:
    """What each section runs; `FULL` is the issue's workload, `QUICK` a smaller one."""
    n: int = 64                                 # requests on tiny (peer, trace, tight)
    prompt_lens: tuple[int, int] = (16, 512)
    output_lens: tuple[int, int] = (4, 256)
    max_batch: int = 32
    big_n: int = 16                             # requests on SmolLM2-135M-Instruct
    big_prompt_lens: tuple[int, int] = (16, 256)
    big_output_lens: tuple[int, int] = (4, 64)
    loads: tuple[float, ...] = (0.5, 0.8, 1.0)
    chunk_running: int = 16                     # decoding when the long one comes
    chunk_running_prompt: int = 32
    chunk_running_tokens: int = 48
    chunk_after: int = 8                        # their decode steps before it arrives
    chunk_prompt: int = 2048
    chunk_tokens: int = 4
    chunk_budget: int = 256
    prefix_n: int = 64
    prefix_len: int = 512
    prefix_prompt_lens: tuple[int, int] = (16, 256)
    prefix_output_lens: tuple[int, int] = (4, 64)
    tight_fraction: float = 0.5
    repeat: int = 3


FULL = Sizes()
QUICK = Sizes(n=32, prompt_lens=(16, 256), output_lens=(4, 128), big_n=8,
              big_prompt_lens=(16, 128), big_output_lens=(4, 32),
              chunk_running_tokens=32, chunk_prompt=1024, chunk_budget=128,
              prefix_n=32, prefix_output_lens=(4, 32), repeat=1)



def verdict(ok: bool) -> str:
    return "met" if ok else "missed"


def blocks_needed(requests: list[Request]) -> int:
    """KV blocks to hold every request's prompt + max_tokens at once."""
    return sum(-(-(len(r.prompt_ids) + r.params.max_tokens) // BLOCK) for r in requests)


def describe(requests: list[Request]) -> str:
    prompts = [len(r.prompt_ids) for r in requests]
    outs = [r.params.max_tokens for r in requests]
    return (f"{len(requests)} requests, prompts {min(prompts)}-{max(prompts)} tokens "
            f"({sum(prompts)} in all), outputs {min(outs)}-{max(outs)} "
            f"({sum(outs)} in all)")


def fresh(requests: list[Request]) -> list[Request]:
    """Copies, so that no run shares a Request object with another."""
    return [Request(r.request_id, list(r.prompt_ids), r.params) for r in requests]


def lengths_ok(requests: list[Request], outputs: dict) -> bool:
    """Every request made exactly its max_tokens tokens (no stop ids on either side)."""
    return all(len(outputs[r.request_id]) == r.params.max_tokens for r in requests)


# -- the models ------------------------------------------------------------------------

def tiny_pair(with_hf: bool = True):
    """(llmcore model, transformers model or None): the bundled tiny, float32."""
    model, _ = load("tiny", dtype=torch.float32)
    return model.eval(), (hf_load(bundled_dir("tiny")) if with_hf else None)


def smollm_pair(with_hf: bool = True):
    """SmolLM2-135M-Instruct, the real weights: its GGUF file (installed by `make`),
    dequantized to float32 by llmcore's reader and by transformers' (gguf_file=)."""
    path = locate(REAL)
    model = load_model(path, dtype=torch.float32).eval()
    return model, (hf_load(path.parent, gguf_file=path.name) if with_hf else None)


def hf_load(path: Path, **where):
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation="paged|sdpa", **where).eval()
    model.generation_config.eos_token_id = None  # never stop early, as llmcore's runs
    model.generation_config.pad_token_id = 0
    return model


# -- one run of each side --------------------------------------------------------------

def record_plans(engine: Engine) -> list[list[tuple[int, int, int, bool]]]:
    """Log every step the engine schedules from now on: one list per step, of (start,
    tokens, prompt tokens, sampled) for each request in it (start: tokens already in
    its cache; sampled: the chunk ends where a token is drawn, so its last row gets
    logits). Wraps the scheduler's `schedule`; costs microseconds a step."""
    plans = []
    schedule = engine.scheduler.schedule

    def logged():
        plan = schedule()
        plans.append([(st.computed, n,
                       max(0, min(n, len(st.request.prompt_ids) - st.computed)),
                       st.computed + n == st.length) for st, n in plan.scheduled])
        return plan

    engine.scheduler.schedule = logged
    return plans


def engine_burst(model, requests: list[Request], max_batch: int,
                 num_blocks: int | None = None, warm: list[Request] = (),
                 steps: list | None = None, **engine_kw):
    """All requests added at once, run to the end: (completions by id, seconds, engine).
    Timed from the first add_request to the last step's return; `warm` requests are
    served first, untimed (they leave their prompts in a prefix cache). Given a list,
    `steps` receives (seconds, plan as record_plans logs it) for each step of the
    burst: `engine.run()`'s loop, with a clock read around each `engine.step()`."""
    num_blocks = num_blocks or blocks_needed(list(requests) + list(warm)) + 1
    engine = Engine(model, num_blocks, BLOCK, max_batch=max_batch, **engine_kw)
    for r in fresh(warm):
        engine.add_request(r)
    engine.run()
    plans = record_plans(engine) if steps is not None else None
    start = time.perf_counter()
    for r in fresh(requests):
        engine.add_request(r)
    if steps is None:
        done = engine.run()
    else:
        done, clock = [], time.perf_counter
        while engine.has_work():
            t0 = clock()
            done += engine.step()
            steps.append(clock() - t0)
    seconds = time.perf_counter() - start
    if steps is not None:
        steps[:] = list(zip(steps, plans))
    return {c.request_id: c for c in done}, seconds, engine


def hf_burst(hf_model, requests: list[Request], max_batch: int):
    """The same burst through transformers' continuous batching, each request with its
    own max_new_tokens: (token lists by id, seconds from the first add_request to the
    last result)."""
    from transformers import GenerationConfig
    from transformers.generation import ContinuousBatchingConfig

    gen = GenerationConfig(do_sample=False, eos_token_id=-1, pad_token_id=0,
                           max_new_tokens=max(r.params.max_tokens for r in requests))
    cb = ContinuousBatchingConfig(page_size=BLOCK,
                                  num_blocks=blocks_needed(requests) + 1,
                                  max_requests_per_batch=max_batch,
                                  auto_switch_to_flash=False)
    names = {f"r{i}": r.request_id for i, r in enumerate(requests)}
    results = {}
    with torch.inference_mode(), hf_model.continuous_batching_context_manager(
            generation_config=gen, continuous_batching_config=cb, block=True,
            timeout=30) as manager:
        start = time.perf_counter()
        for name, r in zip(names, requests):
            manager.add_request(list(r.prompt_ids), request_id=name,
                                max_new_tokens=r.params.max_tokens, eos_token_id=-1)
        while len(results) < len(names):
            out = manager.get_result(timeout=1)
            if out is not None and out.is_finished():
                if out.error is not None:
                    raise RuntimeError(f"transformers failed {out.request_id}: "
                                       f"{out.error}")
                results[names[out.request_id]] = list(out.generated_tokens)
            elif out is None and not manager.is_running():
                raise RuntimeError("transformers' generation thread stopped")
        seconds = time.perf_counter() - start
    return results, seconds


# -- the sections ----------------------------------------------------------------------

def step_flops(cfg, plan) -> int:
    """FLOPs a step computes: 2 per matmul weight per token for the layers' matmuls,
    2 per lm_head weight per logits row (only sampled rows get logits), and attention
    over the causal pairs (`attention_flops`: each token with the keys before it and
    itself)."""
    lm_head = cfg.vocab_size * cfg.dim
    body = matmul_weights(cfg) - lm_head
    return sum(2 * body * n + 2 * lm_head * sampled + attention_flops(cfg, n, start)
               for start, n, _, sampled in plan)


def prefill_heavy(cfg, steps) -> dict:
    """The burst's prefill-heavy steps: those in which prompt tokens are more than half
    of the tokens computed. Their FLOPs (every token of theirs, decodes included) over
    their summed step times."""
    chosen = [(t, plan) for t, plan in steps
              if 2 * sum(p for _, _, p, _ in plan) > sum(n for _, n, _, _ in plan)]
    seconds = sum(t for t, _ in chosen)
    flops = sum(step_flops(cfg, plan) for _, plan in chosen)
    return {"steps": len(chosen), "of": len(steps), "seconds": seconds,
            "share": seconds / sum(t for t, _ in steps),
            "tokens": sum(n for _, plan in chosen for _, n, _, _ in plan),
            "prompt": sum(p for _, plan in chosen for _, _, p, _ in plan),
            "flops_per_s": flops / seconds if seconds else 0.0}


def shape_matmul_flops(cfg, rows: int = 512) -> float:
    """FLOP/s of the model's own MLP product, (rows x dim) @ (dim x hidden_dim),
    float32: the ceiling as this model's matrices see it."""
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(rows, cfg.dim, generator=gen)
    b = torch.randn(cfg.dim, cfg.hidden_dim, generator=gen)
    return 2 * rows * cfg.dim * cfg.hidden_dim / median_time(lambda: a @ b, 5, 2)


def bench_peer(label: str, model, hf_model, requests: list[Request], max_batch: int,
               repeat: int) -> dict:
    """Engine vs transformers' continuous batching on one burst; rounds after a warm-up
    round, the ratio taken within each round. In each round, after the engine's burst,
    the machine's matmul FLOP/s (a 1024 x 1024 product, float32, and the model's own
    (512 x dim) @ (dim x hidden_dim)), against which the engine's prefill-heavy steps
    of that burst are judged."""
    tokens = sum(r.params.max_tokens for r in requests)
    ours_s, theirs_s, same, lengths = [], [], [], []
    heavy, peak, shape_peak = [], [], []
    for round_ in range(repeat + 1):
        steps = []
        ours, t_ours, _ = engine_burst(model, requests, max_batch, steps=steps)
        square = measure_matmul_flops("cpu", torch.float32, 1024)
        own = shape_matmul_flops(model.cfg)
        theirs, t_theirs = hf_burst(hf_model, requests, max_batch)
        ours = {k: c.output_ids for k, c in ours.items()}
        same.append(all(ours[r.request_id] == theirs.get(r.request_id)
                        for r in requests))
        lengths.append(lengths_ok(requests, ours) and lengths_ok(requests, theirs))
        if round_:
            ours_s.append(t_ours)
            theirs_s.append(t_theirs)
            heavy.append(prefill_heavy(model.cfg, steps))
            peak.append(square)
            shape_peak.append(own)
    differ = sum(ours[r.request_id] != theirs.get(r.request_id) for r in requests)
    med = statistics.median
    return {"label": label, "requests": describe(requests), "tokens": tokens,
            "ours": tokens / med(ours_s),
            "theirs": tokens / med(theirs_s),
            "ratio": med(b / a for a, b in zip(ours_s, theirs_s)),
            "same": all(same), "lengths": all(lengths), "differ": differ,
            "heavy": heavy[len(heavy) // 2], "prefill_flops": med(
                h["flops_per_s"] for h in heavy),
            "peak": med(peak), "shape_peak": med(shape_peak),
            "share": med(h["flops_per_s"] / p for h, p in zip(heavy, peak)),
            "shape_share": med(h["flops_per_s"] / p
                               for h, p in zip(heavy, shape_peak))}


def bench_trace(model, requests: list[Request], max_batch: int, loads, repeat: int,
                capacity_runs: list[float] | None = None) -> dict:
    """Capacity from bursts, then a Poisson trace per load, continuous vs static."""
    if capacity_runs is None:
        engine_burst(model, requests, max_batch)  # warm-up
        capacity_runs = [engine_burst(model, requests, max_batch)[1]
                         for _ in range(repeat)]
    capacity = len(requests) / statistics.median(capacity_runs)
    reference, _, _ = engine_burst(model, requests, max_batch)
    rows, same = [], True
    for load_ in loads:
        arrivals = poisson_arrivals(fresh(requests), load_ * capacity, seed=0)
        row = {"load": load_, "rate": load_ * capacity}
        for policy, static in (("continuous", False), ("static", True)):
            engine = Engine(model, blocks_needed(requests) + 1, BLOCK,
                            max_batch=max_batch, static=static)
            done, seconds = replay(engine, arrivals)
            same &= all(c.output_ids == reference[c.request_id].output_ids
                        for c in done) and len(done) == len(requests)
            row[policy] = summarize(done, seconds)
        rows.append(row)
    return {"capacity": capacity, "rows": rows, "same": same,
            "requests": describe(requests)}


def chunked_requests(sizes: Sizes, vocab_size: int):
    running = synthetic_requests(
        sizes.chunk_running, vocab_size, prompt_lens=(sizes.chunk_running_prompt,) * 2,
        output_lens=(sizes.chunk_running_tokens,) * 2, seed=3)
    gen = torch.Generator().manual_seed(4)
    prompt = torch.randint(0, vocab_size, (sizes.chunk_prompt,), generator=gen).tolist()
    long = Request("long", prompt,
                   SamplingParams(temperature=0.0, max_tokens=sizes.chunk_tokens))
    return running, long


def chunked_run(model, running: list[Request], long: Request, after: int,
                token_budget: int | None):
    """`running` decode; after `after` pure decode steps the long prompt arrives.
    Returns (completions by id, output tok/s over the run, the running requests'
    inter-token gaps, decode steps before it arrived)."""
    everyone = running + [long]
    engine = Engine(model, blocks_needed(everyone) + 1, BLOCK,
                    max_batch=len(everyone), token_budget=token_budget)
    start = time.perf_counter()
    for r in fresh(running):
        engine.add_request(r)
    done, decode_steps = [], 0
    while decode_steps < after and engine.has_work():
        done += engine.step()
        if engine.step_tokens[-1] == len(running):  # a step of decodes only
            decode_steps += 1
    engine.add_request(fresh([long])[0])
    done += engine.run()
    seconds = time.perf_counter() - start
    by_id = {c.request_id: c for c in done}
    gaps = [g for r in running for g in by_id[r.request_id].itl]
    tokens = sum(len(c.output_ids) for c in done)
    return by_id, tokens / seconds, gaps, decode_steps


def bench_chunked(model, sizes: Sizes, repeat: int) -> dict:
    running, long = chunked_requests(sizes, model.cfg.vocab_size)
    budgets = {"whole": None, "chunked": sizes.chunk_budget}
    p99, mean_gap, thr, outputs, steps = ({k: [] for k in budgets} for _ in range(5))
    for round_ in range(repeat + 1):
        for name, budget in budgets.items():
            by_id, rate, gaps, before = chunked_run(model, running, long,
                                                    sizes.chunk_after, budget)
            outputs[name] = {k: c.output_ids for k, c in by_id.items()}
            steps[name].append(before)
            if round_:
                p99[name].append(percentile(gaps, 99))
                mean_gap[name].append(statistics.mean(gaps))
                thr[name].append(rate)
    med = statistics.median
    everyone = running + [long]
    same = all(outputs["whole"][r.request_id] == outputs["chunked"][r.request_id]
               for r in everyone)
    return {"p99": {k: med(v) for k, v in p99.items()},
            "mean": {k: med(v) for k, v in mean_gap.items()},
            "throughput": {k: med(v) for k, v in thr.items()},
            "gap_ratio": med(a / b for a, b in zip(p99["whole"], p99["chunked"])),
            "thr_ratio": med(b / a for a, b in zip(thr["whole"], thr["chunked"])),
            "same": same and lengths_ok(everyone, outputs["whole"]),
            "steps_before": steps["whole"][0], "budget": sizes.chunk_budget,
            "gaps": len(running) * (sizes.chunk_running_tokens - 1)}


def prefix_requests(sizes: Sizes, vocab_size: int):
    """(the system prompt, chat requests that start with it)."""
    gen = torch.Generator().manual_seed(5)
    system = torch.randint(0, vocab_size, (sizes.prefix_len,), generator=gen).tolist()
    return system, synthetic_requests(sizes.prefix_n, vocab_size,
                                      prompt_lens=sizes.prefix_prompt_lens,
                                      output_lens=sizes.prefix_output_lens, seed=6,
                                      prefix=system)


def bench_prefix(model, sizes: Sizes, repeat: int) -> dict:
    """One burst into an engine that has served one request with the system prompt
    before (so a prefix cache holds it), all requests admitted in one step."""
    system, requests = prefix_requests(sizes, model.cfg.vocab_size)
    warm = [Request("earlier", system + [0],
                    SamplingParams(temperature=0.0, max_tokens=1))]
    ttft, outputs, cached = {False: [], True: []}, {}, {}
    for round_ in range(repeat + 1):
        for caching in (False, True):
            done, _, _ = engine_burst(model, requests, len(requests), warm=warm,
                                      prefix_caching=caching)
            outputs[caching] = {k: c.output_ids for k, c in done.items()}
            cached[caching] = statistics.mean(c.cached_tokens for c in done.values())
            if round_:
                ttft[caching].append(statistics.mean(c.ttft for c in done.values()))
    med = statistics.median
    return {"requests": describe(requests),
            "ttft": {k: med(v) for k, v in ttft.items()},
            "ratio": med(a / b for a, b in zip(ttft[False], ttft[True])),
            "cached": cached[True],
            "same": outputs[False] == outputs[True]
            and lengths_ok(requests, outputs[False])}


def bench_tight(model, requests: list[Request], fraction: float, repeat: int) -> dict:
    need = blocks_needed(requests)
    pool = int(need * fraction)
    reference, _, _ = engine_burst(model, requests, len(requests))
    seconds, preempted, same = {"reserve": [], "optimistic": []}, {}, True
    batch = {}
    for round_ in range(repeat + 1):
        for admission in seconds:
            done, t, engine = engine_burst(model, requests, len(requests), pool,
                                           admission=admission)
            same &= all(done[k].output_ids == c.output_ids
                        for k, c in reference.items()) and len(done) == len(reference)
            preempted[admission] = engine.preemptions
            batch[admission] = statistics.mean(engine.batch_sizes)
            if round_:
                seconds[admission].append(t)
    tokens = sum(r.params.max_tokens for r in requests)
    med = statistics.median
    return {"need": need, "pool": pool,
            "throughput": {k: tokens / med(v) for k, v in seconds.items()},
            "ratio": med(a / b for a, b in zip(seconds["reserve"],
                                               seconds["optimistic"])),
            "preemptions": preempted, "batch": batch, "same": same}


# -- the report ------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="smaller workloads, one round (a check that it all runs)")
    ap.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    ap.add_argument("--repeat", type=int, default=None,
                    help="rounds after the warm-up (default 3; 1 with --quick)")
    ap.add_argument("--threads", type=int, default=1,
                    help="intra-op threads, both libraries (default 1; see above)")
    ap.add_argument("--max-batch", type=int, default=None,
                    help="requests decoding at once, both libraries (default 32)")
    args = ap.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.repeat is not None:
        sizes = replace(sizes, repeat=args.repeat)
    if args.max_batch is not None:
        sizes = replace(sizes, max_batch=args.max_batch)
    torch.set_num_threads(args.threads)  # one process: both libraries use these threads
    torch.manual_seed(0)
    import transformers

    print(f"machine: {cpu_name()}, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}, "
          f"transformers {transformers.__version__}; float32, greedy, KV blocks of "
          f"{BLOCK} tokens, median of {sizes.repeat} rounds after a warm-up")
    started = time.perf_counter()
    ok, lines = True, []
    need_hf = "peer" in args.only
    tiny, hf_tiny = tiny_pair(with_hf=need_hf)
    requests = synthetic_requests(sizes.n, prompt_lens=sizes.prompt_lens,
                                  output_lens=sizes.output_lens,
                                  vocab_size=tiny.cfg.vocab_size, seed=0)
    big = hf_big = None
    if "peer" in args.only or "chunked" in args.only:
        big, hf_big = smollm_pair(with_hf=need_hf)
    if "peer" in args.only:
        big_requests = synthetic_requests(
            sizes.big_n, prompt_lens=sizes.big_prompt_lens,
            output_lens=sizes.big_output_lens, vocab_size=big.cfg.vocab_size,
            seed=1)
        print("\n== llmcore Engine vs transformers continuous batching "
              f"(max_batch {sizes.max_batch} on both sides)")
        print("model | requests | llmcore tok/s | transformers tok/s | ratio | "
              "target | same tokens")
        for label, model, hf_model, reqs, target in (
                ("tiny", tiny, hf_tiny, requests, 3.0),
                ("SmolLM2-135M-Instruct", big, hf_big, big_requests, 1.3)):
            row = bench_peer(label, model, hf_model, reqs, sizes.max_batch,
                             sizes.repeat)
            ok &= row["same"] and row["lengths"]
            same = ("yes" if row["same"] else f"NO ({row['differ']} requests "
                    "differ)")
            print(f"{label} | {row['requests']} | {row['ours']:.0f} | "
                  f"{row['theirs']:.0f} | {row['ratio']:.2f}x | target >= "
                  f"{target}x: {verdict(row['ratio'] >= target)} | {same}, "
                  f"lengths = max_tokens: {row['lengths']}")
            lines.append(f"Engine vs transformers, {label}: {row['ratio']:.2f}x "
                         f"(target >= {target}x: "
                         f"{verdict(row['ratio'] >= target)})")
            h, share = row["heavy"], row["share"]
            print(f"  {label}, prefill-heavy steps (prompt tokens > half the "
                  f"step's; a middle round): {h['steps']} of {h['of']} steps, "
                  f"{h['seconds']:.2f} s = {h['share']:.0%} of the burst, "
                  f"{h['tokens']} tokens of which {h['prompt']} prompt; "
                  f"{row['prefill_flops'] / 1e9:.1f} GFLOP/s against "
                  f"{row['peak'] / 1e9:.1f} GFLOP/s for a 1024x1024 product and "
                  f"{row['shape_peak'] / 1e9:.1f} for the model's (512 x "
                  f"{model.cfg.dim}) @ ({model.cfg.dim} x "
                  f"{model.cfg.hidden_dim}), measured in the same rounds")
            print(f"  {label}, prefill FLOP/s: {share:.0%} of measured matmul "
                  f"FLOP/s (goal >= 70%: {verdict(share >= 0.7)}); "
                  f"{row['shape_share']:.0%} of the model-shape product's")
            lines.append(f"prefill FLOP/s, {label}: {share:.0%} of measured "
                         f"matmul FLOP/s (goal >= 70%: {verdict(share >= 0.7)})")
    if "chunked" in args.only:
        row = bench_chunked(big, sizes, sizes.repeat)
        ok &= row["same"]
        print(f"\n== chunked prefill (SmolLM2-135M-Instruct): a {sizes.chunk_prompt}"
              f"-token prompt arrives after {row['steps_before']} decode steps "
              f"of {sizes.chunk_running} requests ({sizes.chunk_running_prompt}-"
              f"token prompts, {sizes.chunk_running_tokens} tokens each; "
              f"p99 over their {row['gaps']} gaps)")
        print("token_budget | p99 gap | mean gap | output tok/s")
        for name, budget in (("whole", None), ("chunked", row["budget"])):
            print(f"{budget} | {row['p99'][name] * 1e3:.0f} ms | "
                  f"{row['mean'][name] * 1e3:.0f} ms | "
                  f"{row['throughput'][name]:.1f}")
        thr = row["thr_ratio"]
        print(f"p99 gap {row['gap_ratio']:.1f}x lower with chunks (target >= 3x: "
              f"{verdict(row['gap_ratio'] >= 3)}); throughput with chunks "
              f"{thr:.2f}x that without (target > 0.90x: {verdict(thr > 0.9)}); "
              f"tokens identical: {row['same']}")
        lines.append(f"chunked prefill: p99 gap {row['gap_ratio']:.1f}x lower "
                     f"(target >= 3x: {verdict(row['gap_ratio'] >= 3)}), "
                     f"throughput {thr:.2f}x (target > 0.90x: "
                     f"{verdict(thr > 0.9)})")
    del big, hf_big, hf_tiny
    if "trace" in args.only:
        row = bench_trace(tiny, requests, sizes.max_batch, sizes.loads, sizes.repeat)
        ok &= row["same"]
        print(f"\n== Poisson arrivals, tiny, {row['requests']}, max_batch "
              f"{sizes.max_batch}; capacity (burst) {row['capacity']:.1f} requests/s")
        print("load | rate req/s | p99 TTFT continuous | p99 TTFT static | ratio | "
              "tok/s continuous | tok/s static")
        for r in row["rows"]:
            c, s = r["continuous"], r["static"]
            ratio = c["ttft_p99"] / s["ttft_p99"]
            mark = ""
            if r["load"] == 0.8:
                mark = f" (target <= 0.33: {verdict(ratio <= 1 / 3)})"
                lines.append(f"Poisson at 80%: continuous p99 TTFT = {ratio:.2f} of "
                             f"static's (target <= 1/3: {verdict(ratio <= 1 / 3)})")
            print(f"{r['load']:.0%} | {r['rate']:.1f} | {c['ttft_p99'] * 1e3:.0f} ms | "
                  f"{s['ttft_p99'] * 1e3:.0f} ms | {ratio:.2f}{mark} | "
                  f"{c['throughput']:.0f} | {s['throughput']:.0f}")
        print(f"tokens identical to a burst, every request, both policies: "
              f"{row['same']}")
    if "prefix" in args.only:
        row = bench_prefix(tiny, sizes, sizes.repeat)
        ok &= row["same"]
        print(f"\n== prefix caching, tiny: {row['requests']} (a shared "
              f"{sizes.prefix_len}-token system prompt included), one burst")
        print(f"mean TTFT without {row['ttft'][False] * 1e3:.0f} ms, with "
              f"{row['ttft'][True] * 1e3:.0f} ms: {row['ratio']:.1f}x lower (target "
              f">= 5x: {verdict(row['ratio'] >= 5)}); {row['cached']:.0f} prompt "
              f"tokens per request from the cache; tokens identical: {row['same']}")
        lines.append(f"prefix caching: mean TTFT {row['ratio']:.1f}x lower (target "
                     f">= 5x: {verdict(row['ratio'] >= 5)})")
    if "tight" in args.only:
        row = bench_tight(tiny, requests, sizes.tight_fraction, sizes.repeat)
        ok &= row["same"]
        print(f"\n== tight pool, tiny: the {len(requests)}-request burst needs "
              f"{row['need']} blocks, the pool has {row['pool']}")
        for name in ("reserve", "optimistic"):
            print(f"{name}: {row['throughput'][name]:.0f} tok/s, "
                  f"{row['preemptions'][name]} preemptions, "
                  f"{row['batch'][name]:.1f} requests per decode pass on average")
        print(f"optimistic / reserve throughput {row['ratio']:.2f}x; tokens identical "
              f"to an ample pool's, both admissions: {row['same']}")
        lines.append(f"tight pool: optimistic {row['ratio']:.2f}x reserve's "
                     f"throughput, {row['preemptions']['optimistic']} preemptions")
    print("\nsummary")
    for line in lines:
        print(line)
    print(f"every token comparison passed: {ok}; bench ran "
          f"{time.perf_counter() - started:.0f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
