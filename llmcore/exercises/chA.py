"""Checkers for the exercises of appendix A (the tiny model). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


def _windows(n_ids: int, seq_len: int, stride: int) -> list[tuple[int, int, int]]:
    """The windows cross_entropy runs: (start, end, first scored index)."""
    n_targets, windows, scored = n_ids - 1, [], 0
    while scored < n_targets:
        end = min(scored + (stride if scored else seq_len), n_targets)
        start = max(0, end - seq_len)
        windows.append((start, end, scored - start))
        scored = end
    return windows


@checker
def check_score_windows(fn: Callable) -> Verdict:
    """`fn(n_ids, seq_len, stride)` -> cross_entropy's windows as (start, end, first):
    every target scored once, each with as much context as seq_len allows."""
    args = [(9, 4, 4), (9, 4, 2), (12, 4, 3), (3, 8, 8), (2, 4, 1), (20, 6, 1),
            (257, 256, 128), (1000, 256, 100)]
    return report(run_cases(
        "Exercise A.1 (score_windows)", fn, [Case(a, _windows(*a)) for a in args],
        compare=lambda got, exp: (isinstance(got, (list, tuple))
                                  and [tuple(w) for w in got] == exp),
        hint="keep a count `scored` of the targets done (ids[1:scored + 1]); the next "
             "window ends at end = min(scored + seq_len for the first window, else "
             "scored + stride, n_ids - 1), starts at max(0, end - seq_len), and scores "
             "from index scored - start on."))


@checker
def check_schedule(fn: Callable) -> Verdict:
    """`fn(step, steps, peak, warmup, min_ratio)` -> learning rate (linear warm-up,
    cosine decay)."""
    def ref(step, steps, peak, warmup, min_ratio):
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        cosine = 0.5 * (1 + math.cos(math.pi * progress))
        return peak * (min_ratio + (1 - min_ratio) * cosine)

    args = [(0, 100, 1e-3, 10, 0.1), (9, 100, 1e-3, 10, 0.1), (10, 100, 1e-3, 10, 0.1),
            (55, 100, 1e-3, 10, 0.1), (99, 100, 1e-3, 10, 0.1),
            (100, 100, 1e-3, 10, 0.1), (0, 1200, 3e-3, 50, 0.0),
            (700, 1200, 3e-3, 50, 0.0)]
    return report(run_cases(
        "Exercise A.2 (schedule)", fn, [Case(a, ref(*a)) for a in args],
        hint="warm-up reaches peak at step warmup-1; progress = "
             "(step-warmup)/(steps-warmup)."))


@checker
def check_heldout_modules(fn: Callable) -> Verdict:
    """`fn(modules, every)` -> set of every `every`-th name of the sorted list, from the
    first."""
    names = ["zipfile", "abc", "json", "os", "re", "ast", "csv", "email", "http",
             "typing", "uuid", "xml"]

    def is_set_equal(expected):
        return lambda: set(fn(list(names), 5)) == expected

    def input_unchanged() -> bool:
        given = list(names)
        fn(given, 3)
        return given == names

    return report(run_checks("Exercise A.3 (heldout_modules)", [
        ("every 5th of the sorted names, starting with the first: "
         "{'abc', 'json', 'xml'}", is_set_equal({"abc", "json", "xml"})),
        ("the answer must not depend on the input order",
         lambda: set(fn(list(reversed(names)), 5)) == set(fn(list(names), 5))),
        ("every=1 holds out everything", lambda: set(fn(list(names), 1)) == set(names)),
        ("the input list must not be modified", input_unchanged),
    ]))


# --- pen-and-paper questions ----------------------------------------------------------

# Question A.1: 4.0 nats per token at 5.2 bytes per token, in bits per byte
# (llmcore.pretrained.bits_per_byte's conversion).
check_q_bits_per_byte = number_question(
    "Question A.1 (bits per byte)", 4.0 / (5.2 * math.log(2)), rel=0.02)


def _tokens_run(n_ids: int, seq_len: int, stride: int) -> int:
    return sum(end - start for start, end, _ in _windows(n_ids, seq_len, stride))


# Question A.3: tokens run with stride 128 over those with stride 256 (1,025 tokens).
check_q_overlap_cost = number_question(
    "Question A.3 (overlap cost)",
    _tokens_run(1025, 256, 128) / _tokens_run(1025, 256, 256))

register_questions(globals())
