"""Benchmark: speculative decoding, llmcore against transformers' assisted generation.

Run: python bench/speculative.py [--new-tokens 128] [--k 4] [--lookup-k 8] [--repeat 5]
                                 [--threads N] [--skip-verify-shape]

Models: the book's bundled `tiny` (target) and `tiny-draft` (draft, same tokenizer),
float32 on the CPU, loaded by both libraries from the same files (llmcore/data/tiny*,
Hugging Face layout). Greedy decoding throughout, `--new-tokens` tokens per prompt, no
EOS stop; every variant's tokens are compared with llmcore's plain decoding.

Prompts: ordinary code continuation (the opening of three standard-library modules held
out of the tiny model's training text, appendix A) and copy-heavy tasks (a table whose
next lines repeat the pattern of the earlier ones; a function to re-emit with a small
edit: a held-out function's source, then its `def` line with a new name, so the model
copies the body).

Variants, in one interleaved run (each round runs every variant once; the median over
rounds):
- llmcore plain: `generate` on `FastDecoder(target)` (appendix B's compiled decode
  step);
- llmcore draft: `speculative_generate` with `FastDecoder(draft)` guessing k tokens, the
  target verifying them in one compiled pass (`llmcore.fast.verify_graph`);
- llmcore lookup: `speculative_generate` with `PromptLookup()` (no draft model), up to
  `--lookup-k` guesses a round;
- transformers plain / assisted (`assistant_model=`, k constant guesses) / lookup
  (`prompt_lookup_num_tokens=` the same `--lookup-k`): `model.generate` on the same
  weights.

Each method has its own k. A draft model pays for every guess it makes (k draft steps,
or one call of its draft graph), so a few guesses suit it (`--k`, 4). Prompt lookup's
guesses cost a search, nothing against a step; a longer guess costs only a slightly
longer verify pass, and on copied text it is kept whole, so it gets more (`--lookup-k`,
8: in chapter 11 its speed-up on copied text grows with every k up to 8).
transformers gets the same k for each method.

Also measured in the same run: what a verify pass costs against one decode step, for
1..9 tokens, on the tiny model and on the SmolLM2-135M shape (random weights), and the
speed-up the cost model of chapter 11 predicts for the draft model from measured times
(tokens per round x target step / (the draft's k guesses + one verify pass), summed over
the rounds the run made).

Targets (issue 16; float32 CPU): prompt lookup >= 1.8x llmcore plain on the copy-heavy
prompts; the draft model >= 1.0x and within 15% of the cost model's prediction; every
llmcore variant >= 2x the transformers variant; verifying 5 tokens <= 1.5x one decode
step on the SmolLM2-135M shape.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from llmcore.fast import FastDecoder  # noqa: E402
from llmcore.generate import generate  # noqa: E402
from llmcore.kvcache import KVCache  # noqa: E402
from llmcore.model import Transformer  # noqa: E402
from llmcore.pretrained import bundled_dir, load  # noqa: E402
from llmcore.profile import MODEL_SHAPES  # noqa: E402
from llmcore.sampling import SamplingParams  # noqa: E402
from llmcore.speculative import PromptLookup, speculative_generate  # noqa: E402


def prompts(tokenizer) -> dict[str, tuple[str, list[int]]]:
    """name -> (kind, token ids)."""
    import json
    import sysconfig

    out = {}
    record = json.loads((bundled_dir("tiny") / "training.json").read_text())
    held_out = record["corpus"]["heldout_modules"]
    std = Path(sysconfig.get_paths()["stdlib"])
    for module in [m for m in ("colorsys", "hmac", "shelve") if m in held_out]:
        path = std / f"{module}.py"
        if not path.exists():
            path = std / module / "__init__.py"
        if path.exists():
            text = path.read_text(encoding="utf-8", errors="replace")
            out[f"continue {module}"] = ("ordinary", tokenizer.encode(text)[:192])
    table = "".join(f"    {name!r:<14}: {value:>5},\n" for name, value in [
        ("HTTP_OK", 200), ("CREATED", 201), ("ACCEPTED", 202), ("NO_CONTENT", 204),
        ("MOVED", 301), ("FOUND", 302), ("NOT_MODIFIED", 304), ("BAD_REQUEST", 400),
        ("UNAUTHORIZED", 401), ("FORBIDDEN", 403), ("NOT_FOUND", 404)])
    out["repeat a table"] = ("copy-heavy", tokenizer.encode("STATUS = {\n" + table))
    import colorsys  # held out of the tiny model's training text

    source = inspect.getsource(colorsys.rgb_to_hls)
    head = source.split("\n", 1)[0].replace("def rgb_to_hls(", "def rgb_to_hls_v2(")
    head += "\n"
    out["re-emit a function"] = ("copy-heavy",
                                 tokenizer.encode(source + "\n\n" + head))
    return out


def hf_models(dtype: torch.dtype):
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        target = AutoModelForCausalLM.from_pretrained(bundled_dir("tiny"), dtype=dtype)
        draft = AutoModelForCausalLM.from_pretrained(bundled_dir("tiny-draft"),
                                                     dtype=dtype)
    for model in (target, draft):
        model.eval()
        model.generation_config.eos_token_id = None  # no EOS stop, as llmcore's runs
        model.generation_config.pad_token_id = 0
    return target, draft


def median_seconds(call, reps: int, warmup: int = 3) -> float:
    """Median wall-clock seconds of call() over `reps` calls, after `warmup` ones."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def verify_costs(model, context: int = 256, reps: int = 15) -> dict[int, float]:
    """Median seconds of one FastDecoder pass over n = 1..9 new tokens after
    `context` cached ones."""
    fast = FastDecoder(model)
    cfg = model.cfg
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, cfg.vocab_size, (1, context + 9), generator=gen)
    cache = KVCache(cfg, 1, context + 9, dtype=model.dtype)
    out = {}
    with torch.inference_mode():
        fast(ids[:, :context], positions=torch.arange(context), kv_cache=cache)
        for n in range(1, 10):
            out[n] = median_seconds(
                lambda n=n: fast(ids[:, context:context + n],
                                 positions=torch.arange(context, context + n),
                                 kv_cache=cache), reps)
    return out


def guesses_cost(model, k: int, context: int = 256, reps: int = 15) -> float:
    """Median seconds of k greedy draft guesses after `context` cached tokens, as the
    loop makes them: one call of FastDecoder's draft graph (k steps for k = 1)."""
    fast = FastDecoder(model)
    cfg = model.cfg
    ids = torch.randint(0, cfg.vocab_size, (1, context + 1),
                        generator=torch.Generator().manual_seed(1))
    cache = KVCache(cfg, 1, context + k + 1, dtype=model.dtype)
    with torch.inference_mode():
        fast(ids[:, :context], positions=torch.arange(context), kv_cache=cache)

        def call():
            if k > 1:
                return fast.greedy_guesses(ids[0, context:], context, cache, k)
            return fast(ids[:, context:], positions=torch.tensor([context]),
                        kv_cache=cache)

        return median_seconds(call, reps)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--k", type=int, default=4, help="draft model's guesses a round")
    ap.add_argument("--lookup-k", type=int, default=8,
                    help="prompt lookup's guesses a round")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--skip-verify-shape", action="store_true",
                    help="skip the SmolLM2-135M-shape verify costs (saves a compile)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    dtype, k, lookup_k, n_new = torch.float32, args.k, args.lookup_k, args.new_tokens
    target, tokenizer = load("tiny", dtype=dtype)
    draft, _ = load("tiny-draft", dtype=dtype)
    fast_target, fast_draft = FastDecoder(target), FastDecoder(draft)
    hf_target, hf_draft = hf_models(dtype)
    params = SamplingParams(temperature=0.0, max_tokens=n_new)
    lookup = PromptLookup()
    cases = prompts(tokenizer)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"greedy, {n_new} new tokens, k = {k} (draft), {lookup_k} (lookup); "
          f"target {target.num_parameters() / 1e6:.1f}M, "
          f"draft {draft.num_parameters() / 1e6:.1f}M parameters")

    def hf(ids, **extra):
        with torch.inference_mode():
            out = hf_target.generate(torch.tensor([ids]), max_new_tokens=n_new,
                                     min_new_tokens=n_new, do_sample=False, **extra)
        return out[0, len(ids):].tolist()

    hf_target.generation_config.num_assistant_tokens = k
    hf_target.generation_config.num_assistant_tokens_schedule = "constant"
    hf_target.generation_config.assistant_confidence_threshold = 0.0
    variants = {
        "llmcore plain": lambda ids: (generate(fast_target, None, ids, params,
                                               eos_token_ids=[]).token_ids, None),
        "llmcore draft": lambda ids: speculative_generate(
            fast_target, fast_draft, None, ids, params, k=k, eos_token_ids=[]),
        "llmcore lookup": lambda ids: speculative_generate(
            fast_target, lookup, None, ids, params, k=lookup_k, eos_token_ids=[]),
        "transformers plain": lambda ids: (hf(ids), None),
        "transformers draft": lambda ids: (hf(ids, assistant_model=hf_draft), None),
        "transformers lookup": lambda ids: (hf(ids, prompt_lookup_num_tokens=lookup_k),
                                            None),
    }
    seconds = {(c, v): [] for c in cases for v in variants}
    tokens, stats = {}, {}
    for round_ in range(args.repeat + 1):  # round 0 warms up (and compiles)
        for case, (_, ids) in cases.items():
            for name, run in variants.items():
                start = time.perf_counter()
                out = run(ids)
                elapsed = time.perf_counter() - start
                result, st = out
                ids_out = result.token_ids if hasattr(result, "token_ids") else result
                tokens[case, name] = ids_out
                if st is not None:
                    stats[case, name] = st
                if round_:
                    seconds[case, name].append(elapsed)
    rate = {key: n_new / statistics.median(s) for key, s in seconds.items()}

    # the cost model of chapter 11, from step times measured now
    costs = verify_costs(target)
    t_draft, t_guesses = verify_costs(draft)[1], guesses_cost(draft, k)
    print("\nverify pass against one decode step (tiny, 256 tokens cached): "
          + ", ".join(f"{n} tokens {costs[n] / costs[1]:.2f}x" for n in (2, 3, 5, 9))
          + f" (one step {costs[1] * 1e3:.2f} ms, a draft step {t_draft * 1e3:.2f} ms, "
          f"{k} draft guesses in one call {t_guesses * 1e3:.2f} ms)")
    if not args.skip_verify_shape:
        big = Transformer(MODEL_SHAPES["SmolLM2-135M"]).to(dtype).eval()
        big_costs = verify_costs(big, reps=7)
        print("verify pass against one decode step (SmolLM2-135M shape, float32): "
              + ", ".join(f"{n} tokens {big_costs[n] / big_costs[1]:.2f}x"
                          for n in (2, 3, 5, 9))
              + f" (one step {big_costs[1] * 1e3:.1f} ms); target: 5 tokens <= 1.5x")

    print("\ncase | kind | variant | tok/s | vs llmcore plain | llmcore / transformers "
          "| same tokens as llmcore plain | guesses kept per round")
    checks = {"lookup": [], "draft": [], "vs transformers": [], "model": []}
    for case, (kind, _) in cases.items():
        plain = tokens[case, "llmcore plain"]
        for name in variants:
            key = (case, name)
            ratio = rate[key] / rate[case, "llmcore plain"]
            peer = ""
            if name.startswith("llmcore"):
                other = rate[case, name.replace("llmcore", "transformers")]
                peer = f"{rate[key] / other:.2f}x"
                checks["vs transformers"].append(rate[key] / other)
            kept = ""
            if key in stats:
                st = stats[key]
                most = lookup_k if name == "llmcore lookup" else k
                kept = f"{st.tokens_per_pass - 1:.2f} of {most}"
                if name == "llmcore draft":
                    rounds = st.proposed_per_pass
                    cost = sum(t_guesses + costs[g + 1] for g in rounds)
                    predicted = n_new * costs[1] / cost
                    checks["model"].append(ratio / predicted)
                    kept += f" (cost model: {predicted:.2f}x)"
            if name == "llmcore lookup" and kind == "copy-heavy":
                checks["lookup"].append(ratio)
            if name == "llmcore draft":
                checks["draft"].append(ratio)
            print(f"{case} | {kind} | {name} | {rate[key]:.0f} | {ratio:.2f}x | "
                  f"{peer} | {tokens[key] == plain} | {kept}")
    print("\nsummary")
    print(f"prompt lookup on copy-heavy prompts: {min(checks['lookup']):.2f}x to "
          f"{max(checks['lookup']):.2f}x llmcore plain (target >= 1.8x)")
    print(f"draft model: {min(checks['draft']):.2f}x to {max(checks['draft']):.2f}x "
          f"llmcore plain (target >= 1.0x); measured / cost model "
          f"{min(checks['model']):.2f} to {max(checks['model']):.2f} "
          "(target within 15%)")
    peers = checks["vs transformers"]
    print(f"llmcore / transformers, same variant: {min(peers):.2f}x to "
          f"{max(peers):.2f}x (target >= 2x)")
    same = all(tokens[c, v] == tokens[c, "llmcore plain"]
               for c in cases for v in variants if v.startswith("llmcore"))
    print(f"every llmcore variant gave llmcore plain's tokens: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
