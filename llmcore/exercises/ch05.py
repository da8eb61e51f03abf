"""Checkers for the exercises of chapter 05 (prefill and decode). Hand-written."""
from __future__ import annotations

import copy
import math
from fractions import Fraction
from typing import Callable

from llmcore.profile import (ACCELERATORS, MODEL_SHAPES, attention_flops, decode_cost,
                             kv_bytes_per_token, matmul_weights)

from . import (Case, Verdict, approx_equal, checker, number_question,
               register_questions, report, run_cases)


def _shape(name: str):
    """MODEL_SHAPES[name], printed by name in a verdict rather than field by field."""
    cfg = MODEL_SHAPES[name]
    named = type("ModelShape", (type(cfg),),
                 {"__repr__": lambda self: f"MODEL_SHAPES[{name!r}]"})
    shape = copy.copy(cfg)
    object.__setattr__(shape, "__class__", named)
    return shape


def _ridge(gpu: str) -> float:
    return ACCELERATORS[gpu].peak_flops / ACCELERATORS[gpu].bandwidth


@checker
def check_decode_intensity(fn: Callable) -> Verdict:
    """`fn(cfg, context_len, batch, dtype_bytes)` -> FLOPs per byte of one decode step,
    KV cache reads and writes and attention FLOPs included (as decode_cost counts)."""
    cases = [Case((_shape(name), context, batch, 2),
                  decode_cost(MODEL_SHAPES[name], context, batch, dtype=2).intensity)
             for name, context, batch in [
                 ("Llama-3.1-8B", 0, 1), ("Llama-3.1-8B", 1000, 1),
                 ("Llama-3.1-8B", 1000, 64), ("Llama-2-7B", 4000, 16),
                 ("SmolLM2-135M", 100, 8), ("Qwen2.5-7B", 32000, 4)]]
    return report(run_cases(
        "Exercise 5.1 (decode_intensity)", fn, cases,
        compare=lambda got, exp: approx_equal(got, exp, rel=1e-9),
        hint="count what forward_cost counts for one new token per sequence: it sees "
             "context_len + 1 keys, itself included; the weights are read once per "
             "step, but each sequence reads its own cache and writes its new token's "
             "keys and values."))


def _batch_to_ridge(cfg, context_len: int, dtype_bytes: int, ridge: float):
    flops = 2 * matmul_weights(cfg) + attention_flops(cfg, 1, context_len)
    kv = (context_len + 1) * kv_bytes_per_token(cfg, dtype_bytes)
    weights, ridge = matmul_weights(cfg) * dtype_bytes, Fraction(ridge)
    if flops <= ridge * kv:
        return None
    return math.ceil(ridge * weights / (flops - ridge * kv))


@checker
def check_batch_to_ridge(fn: Callable) -> Verdict:
    """`fn(cfg, context_len, dtype_bytes, ridge)` -> the smallest batch whose decode
    step reaches `ridge` FLOP/byte, or None when no batch, however large, does."""
    specs = [("Llama-3.1-8B", 0, "H100"), ("Llama-3.1-8B", 100, "H100"),
             ("Llama-3.1-8B", 1000, "H100"), ("Qwen2.5-7B", 1000, "A100"),
             ("Llama-2-7B", 100, "H200"), ("SmolLM2-135M", 100, "A100"),
             ("Llama-3.1-70B", 1000, "L4")]
    cases = [Case((_shape(m), c, 2, _ridge(g)),
                  _batch_to_ridge(MODEL_SHAPES[m], c, 2, _ridge(g)))
             for m, c, g in specs]
    return report(run_cases(
        "Exercise 5.2 (batch_to_ridge)", fn, cases,
        compare=lambda got, exp: got == exp and type(got) is type(exp),
        hint="each sequence adds f FLOPs and k bytes of KV cache to a step that "
             "reads the weights once (W bytes): intensity(B) = B f / (W + B k) grows "
             "towards f / k. If f / k <= ridge, no batch gets there (None); else solve "
             "B f >= ridge (W + B k) for the smallest int B."))


@checker
def check_latency_floors(fn: Callable) -> Verdict:
    """`fn(n_params, bytes_per_param, prompt_len, peak_flops, bandwidth)` -> (ttft,
    tpot) lower bounds."""
    def compare(got, expected) -> bool:
        return (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(g, (int, float)) and math.isfinite(g) for g in got)
                and approx_equal(list(got), list(expected), rel=1e-9))

    def case(n, b, s, peak, bw):
        return Case((n, b, s, peak, bw), (2 * n * s / peak, n * b / bw))

    cases = [case(8e9, 2, 2000, 989e12, 3.35e12), case(1e9, 4, 100, 1e12, 1e11),
             case(70e9, 2, 8000, 312e12, 2.039e12), case(135e6, 4, 512, 7e10, 3.8e10)]
    return report(run_cases(
        "Exercise 5.3 (latency_floors)", fn, cases, compare=compare,
        hint="ttft = 2 * n_params * prompt_len / peak_flops (compute-bound prefill); "
             "tpot = n_params * bytes_per_param / bandwidth (memory-bound decode)."))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 5.1: in bfloat16 a decode step does 2 FLOPs per 2-byte weight per sequence,
# so its intensity is the batch itself; it reaches the A100's ridge at batch = ridge.
check_q_batch_to_ridge = number_question(
    "Question 5.1 (batch to ridge)", _ridge("A100") * 2 / 2)

register_questions(globals())
