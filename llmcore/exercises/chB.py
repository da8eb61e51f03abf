"""Checkers for the exercises of appendix B (making CPU decode fast). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


def _layers(sizes, n_in, bias, seed):
    gen = torch.Generator().manual_seed(seed)
    weights = [torch.randn(n, n_in, generator=gen) for n in sizes]
    biases = [torch.randn(n, generator=gen) if bias else None for n in sizes]
    return weights, biases, torch.randn(3, n_in, generator=gen)


@checker
def check_stack_weights(fn: Callable) -> Verdict:
    """`fn(weights, biases)` -> (weight, bias): one product x @ weight.T + bias gives
    the outputs of every layer side by side, in order; bias is None when the layers
    have none."""
    def same_outputs(sizes, bias, seed):
        def test() -> bool:
            weights, biases, x = _layers(sizes, 8, bias, seed)
            weight, fused_bias = fn(weights, biases)
            if not bias and fused_bias is not None:
                return False
            expected = torch.cat([F.linear(x, w, b) for w, b in zip(weights, biases)],
                                 dim=-1)
            got = F.linear(x, weight, fused_bias)
            return (got.shape == expected.shape
                    and torch.allclose(got, expected, atol=1e-5))
        return test

    return report(run_checks("Exercise B.1 (stack_weights)", [
        ("q, k and v of sizes 8, 4, 4 with biases: one product, outputs in that order",
         same_outputs([8, 4, 4], True, 0)),
        ("gate and up of size 12 without bias: bias must be None",
         same_outputs([12, 12], False, 1)),
        ("a single layer stacks to itself", same_outputs([5], True, 2)),
    ]))


@checker
def check_attend_one_query(fn: Callable) -> Verdict:
    """`fn(q, keys, values)`: one token's attention, q (n_heads, hd) over keys and
    values (n_kv_heads, slots, hd); query head j reads key/value head
    j // (n_heads // n_kv_heads)."""
    def matches(n_heads, n_kv, slots, hd, seed):
        def test() -> bool:
            gen = torch.Generator().manual_seed(seed)
            q = torch.randn(n_heads, hd, generator=gen)
            keys = torch.randn(n_kv, slots, hd, generator=gen)
            values = torch.randn(n_kv, slots, hd, generator=gen)
            expected = F.scaled_dot_product_attention(q[:, None], keys, values,
                                                      enable_gqa=True)[:, 0]
            got = fn(q, keys, values)
            return (isinstance(got, torch.Tensor) and got.shape == expected.shape
                    and torch.allclose(got, expected, atol=1e-5))
        return test

    return report(run_checks("Exercise B.2 (attend_one_query)", [
        ("one head, one key/value head, 5 slots (plain attention)",
         matches(1, 1, 5, 8, 0)),
        ("4 heads, 4 key/value heads (multi-head)", matches(4, 4, 7, 8, 1)),
        ("8 heads sharing 2 key/value heads: heads 0-3 read kv head 0, 4-7 kv head 1",
         matches(8, 2, 6, 16, 2)),
        ("scores are scaled by 1 / sqrt(head_dim) before the softmax",
         matches(2, 1, 3, 64, 3)),
    ]))


@checker
def check_slots_attended(fn: Callable) -> Verdict:
    """`fn(position, sliding_window)` -> (start, stop): the earlier cache slots a
    decode step at `position` reads; its own key is not among them (the step computes
    it)."""
    cases = [
        Case((9, None), (0, 9)),
        Case((0, None), (0, 0)),
        Case((9, 4), (6, 9)),    # the window holds positions 6, 7, 8 and the new token
        Case((2, 4), (0, 2)),    # the window reaches before slot 0: start at 0
        Case((3, 4), (0, 3)),
        Case((100, 1), (100, 100)),
    ]
    return report(run_cases(
        "Exercise B.3 (slots_attended)", fn, cases,
        compare=lambda got, exp: isinstance(got, (tuple, list)) and tuple(got) == exp,
        hint="a window of w covers the new token and the w - 1 before it; never start "
             "below slot 0, and stop before the new position."))


# --- pen-and-paper questions ----------------------------------------------------------

SMOLLM2_FLOAT32_BYTES = 540e6  # the appendix's figure for SmolLM2-135M's weights
# Question B.1: bfloat16 halves the bytes; one read per step at 30 GB/s, in ms.
check_q_step_floor = number_question(
    "Question B.1 (step floor)", 1e3 * (SMOLLM2_FLOAT32_BYTES / 2) / 30e9)
# Question B.2: k = 4 guesses -> k + 1 rows, read in blocks of up to three rows.
check_q_verify_reads = number_question(
    "Question B.2 (verify reads)", math.ceil((4 + 1) / 3))

register_questions(globals())
