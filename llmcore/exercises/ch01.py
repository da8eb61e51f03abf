"""Checkers for the exercises of chapter 01 (the map: one request, end to end). Hand-written."""
from __future__ import annotations

from typing import Callable

from . import Case, Verdict, approx_equal, checker, report, run_cases


def _pair_equal(got, expected) -> bool:
    """(ttft, tpot) with tpot possibly None: None must match None exactly, floats approximately."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    if expected[1] is None or got[1] is None:
        return got[1] is expected[1] and approx_equal(got[0], expected[0])
    return approx_equal(tuple(got), expected)


@checker
def check_ttft_and_tpot(fn: Callable) -> Verdict:
    """`fn(start, token_times)` -> (TTFT, TPOT): seconds to the first token, and the mean gap
    between consecutive tokens after the first (None when only one token came)."""
    cases = [
        Case((10.0, [10.5, 10.6, 10.7, 10.8]), (0.5, 0.1)),
        Case((0.0, [0.2, 0.25]), (0.2, 0.05)),
        Case((2.0, [2.3]), (0.3, None)),
        Case((0.0, [1.0, 1.1, 1.5, 1.6, 2.0]), (1.0, 0.25)),
        Case((100.0, [100.04] + [100.04 + 0.01 * i for i in range(1, 50)]), (0.04, 0.01)),
    ]
    return report(run_cases("Exercise 1.1 (ttft_and_tpot)", fn, cases, compare=_pair_equal,
                            hint="TTFT = first token time - start; TPOT = (last - first) / (number of "
                                 "tokens - 1): n tokens have n - 1 gaps, and the first token's wait is "
                                 "TTFT, not a gap. With one token there is no TPOT (None)."))


@checker
def check_total_latency(fn: Callable) -> Verdict:
    """`fn(ttft, tpot, n_tokens)` -> seconds from the request to its last token."""
    cases = [
        Case((0.5, 0.1, 1), 0.5),
        Case((0.5, 0.1, 2), 0.6),
        Case((0.2, 0.02, 101), 2.2),
        Case((1.5, 0.05, 500), 1.5 + 499 * 0.05),
        Case((0.0, 0.03, 10), 0.27),
    ]
    return report(run_cases("Exercise 1.2 (total_latency)", fn, cases,
                            hint="the first token arrives after TTFT; each of the other n_tokens - 1 "
                                 "tokens adds one TPOT."))


@checker
def check_tokens_processed(fn: Callable) -> Verdict:
    """`fn(prompt_len, n_new, kv_cache)` -> token positions the model runs through its layers to
    produce `n_new` tokens, with (prefill + decode steps) or without a KV cache (re-run everything)."""
    cases = [
        Case((10, 1, True), 10),
        Case((10, 1, False), 10),
        Case((10, 2, True), 11),
        Case((10, 2, False), 21),
        Case((4, 3, True), 6),
        Case((4, 3, False), 4 + 5 + 6),
        Case((100, 100, True), 199),
        Case((100, 100, False), sum(100 + t for t in range(100))),
        Case((1, 1000, False), sum(1 + t for t in range(1000))),
    ]
    return report(run_cases("Exercise 1.3 (tokens_processed)", fn, cases,
                            hint="the prompt is processed once by prefill, which already yields the first "
                                 "new token; each later token needs the previous one fed back. The last "
                                 "token sampled is never fed to the model. Without a cache, the step that "
                                 "makes token t (from 0) runs prompt_len + t positions."))
