"""Checkers for the exercises of appendix A (the tiny model). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

from . import Case, Verdict, checker, report, run_cases, run_checks


@checker
def check_bits_per_byte(fn: Callable) -> Verdict:
    """`fn(nats_per_token, n_tokens, n_bytes)` -> bits per byte."""
    cases = [
        Case((math.log(2), 1, 1), 1.0),
        Case((2.0, 1000, 3500), 2.0 * 1000 / (3500 * math.log(2))),
        Case((1.5, 125_937, 440_000), 1.5 * 125_937 / (440_000 * math.log(2))),
        Case((0.0, 10, 40), 0.0),
    ]
    return report(run_cases("Exercise A.1 (to_bits_per_byte)", fn, cases,
                            hint="total nats = nats_per_token * n_tokens; bits = nats / ln 2; divide by bytes."))


@checker
def check_schedule(fn: Callable) -> Verdict:
    """`fn(step, steps, peak, warmup, min_ratio)` -> learning rate (linear warm-up, cosine decay)."""
    def ref(step, steps, peak, warmup, min_ratio):
        if step < warmup:
            return peak * (step + 1) / warmup
        progress = (step - warmup) / max(1, steps - warmup)
        return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    args = [(0, 100, 1e-3, 10, 0.1), (9, 100, 1e-3, 10, 0.1), (10, 100, 1e-3, 10, 0.1),
            (55, 100, 1e-3, 10, 0.1), (99, 100, 1e-3, 10, 0.1), (100, 100, 1e-3, 10, 0.1),
            (0, 1200, 3e-3, 50, 0.0), (700, 1200, 3e-3, 50, 0.0)]
    return report(run_cases("Exercise A.2 (schedule)", fn, [Case(a, ref(*a)) for a in args],
                            hint="warm-up reaches peak at step warmup-1; progress = (step-warmup)/(steps-warmup)."))


@checker
def check_heldout_modules(fn: Callable) -> Verdict:
    """`fn(modules, every)` -> set of every `every`-th name of the sorted list, from the first."""
    names = ["zipfile", "abc", "json", "os", "re", "ast", "csv", "email", "http", "typing", "uuid", "xml"]

    def is_set_equal(expected):
        return lambda: set(fn(list(names), 5)) == expected

    return report(run_checks("Exercise A.3 (heldout_modules)", [
        ("every 5th of the sorted names, starting with the first: {'abc', 'json', 'xml'}",
         is_set_equal({"abc", "json", "xml"})),
        ("the answer must not depend on the input order",
         lambda: set(fn(list(reversed(names)), 5)) == set(fn(list(names), 5))),
        ("every=1 holds out everything", lambda: set(fn(list(names), 1)) == set(names)),
        ("the input list must not be modified",
         lambda: (lambda lst: (fn(lst, 3), lst == names)[1])(list(names))),
    ]))
