"""Checkers for the exercises of chapter 08 (stopping and streaming). Hand-written."""
from __future__ import annotations

from typing import Callable

from llmcore.generate import Usage

from . import Case, Verdict, approx_equal, checker, report, run_cases


@checker
def check_safe_release(fn: Callable) -> Verdict:
    """`fn(text, stops)` -> how many leading characters of `text` can be streamed now: all but the
    longest ending of `text` that is the beginning of some stop string (no stop string is complete)."""
    cases = [
        Case(("hello wor", ["world"]), 6),           # 'wor' may become 'world'
        Case(("hello", ["world"]), 5),               # nothing to hold: a fixed hold-back would keep 4
        Case(("x = 1\n", ["\n\n"]), 5),
        Case(("abab", ["abc"]), 2),
        Case(("aaa", ["aab"]), 1),                   # the longest matching ending, not the shortest
        Case(("total =", ["\n\n", " = 0"]), 5),       # any of the stop strings, not only the first
        Case(("print(x)<|", ["<|endoftext|>"]), 8),
        Case(("abc", []), 3),                        # no stop strings: everything goes
        Case(("", ["stop"]), 0),
        Case(("ab", ["abcd"]), 0),                   # the whole text may be the start of the stop
        Case(("我们的数", ["数据"]), 3),                 # characters, not bytes
    ]
    return report(run_cases("Exercise 8.1 (safe_release)", fn, cases,
                            hint="for every stop string s and every k from 1 to len(s) - 1, does text end "
                                 "with s[:k]? hold back the largest such k."))


@checker
def check_latency(fn: Callable) -> Verdict:
    """`fn(start, token_times)` -> (ttft, tpot): first token time - start, and the mean gap between
    consecutive tokens after the first (None when there is only one token)."""
    cases = [
        Case((10.0, [10.5, 10.6, 10.7, 10.8]), (0.5, 0.1)),
        Case((0.0, [2.0, 2.5]), (2.0, 0.5)),
        Case((0.0, [0.25, 0.5, 1.5]), (0.25, 0.625)),
        Case((3.0, [3.2]), (0.2, None)),
    ]

    def compare(got, expected):
        return (isinstance(got, tuple) and len(got) == 2 and approx_equal(got[0], expected[0], 1e-9, 1e-9)
                and (got[1] is None if expected[1] is None else approx_equal(got[1], expected[1], 1e-9, 1e-9)))

    return report(run_cases("Exercise 8.2 (latency)", fn, cases, compare=compare,
                            hint="TPOT leaves the first token out: (last - first) / (number of tokens - 1)."))


@checker
def check_bill(fn: Callable) -> Verdict:
    """`fn(usages, input_per_million, output_per_million)` -> dollars for a list of Usage records."""
    day = [Usage(1200, 300), Usage(5000, 150), Usage(800, 800)]
    cases = [
        Case(([Usage(1_000_000, 0)], 0.5, 1.5), 0.5),
        Case(([Usage(0, 1_000_000)], 0.5, 1.5), 1.5),
        Case((day, 0.5, 1.5), (7000 * 0.5 + 1250 * 1.5) / 1e6),
        Case((day, 3.0, 15.0), (7000 * 3.0 + 1250 * 15.0) / 1e6),
        Case(([], 3.0, 15.0), 0.0),
    ]
    return report(run_cases("Exercise 8.3 (bill)", fn, cases,
                            compare=lambda got, exp: isinstance(got, (int, float)) and approx_equal(got, exp, 1e-9, 1e-12),
                            hint="prompt tokens at the input price, completion tokens at the output price, "
                                 "prices are per million tokens."))
