"""Checkers for the exercises of chapter 05 (prefill and decode). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

from . import Case, Verdict, approx_equal, checker, report, run_cases


@checker
def check_decode_intensity(fn: Callable) -> Verdict:
    """`fn(n_params, batch, bytes_per_param)` -> FLOPs per byte of a decode step: 2 * batch / bytes_per_param."""
    cases = [
        Case((1_000_000, 1, 4), 0.5),
        Case((8_000_000_000, 1, 2), 1.0),
        Case((8_000_000_000, 64, 2), 64.0),
        Case((70_000_000_000, 16, 1), 32.0),
        Case((135_000_000, 3, 4), 1.5),
    ]
    return report(run_cases("Exercise 5.1 (decode_intensity)", fn, cases,
                            hint="FLOPs = 2 * n_params * batch (every sequence's token meets every weight); "
                                 "bytes = n_params * bytes_per_param (the weights are read once per step)."))


@checker
def check_attainable(fn: Callable) -> Verdict:
    """`fn(peak_flops, bandwidth, intensity)` -> min(peak_flops, bandwidth * intensity)."""
    cases = [
        Case((100e12, 1e12, 1.0), 1e12),        # memory-bound: bandwidth x intensity
        Case((100e12, 1e12, 1000.0), 100e12),   # compute-bound: the flat roof
        Case((100e12, 1e12, 100.0), 100e12),    # exactly at the ridge
        Case((989e12, 3.35e12, 0.5), 1.675e12),
        Case((80e9, 40e9, 8.0), 80e9),
    ]
    return report(run_cases("Exercise 5.2 (attainable)", fn, cases,
                            hint="below the ridge, memory delivers bandwidth * intensity FLOP/s; "
                                 "above it, the arithmetic peak caps it: take the smaller of the two."))


@checker
def check_latency_floors(fn: Callable) -> Verdict:
    """`fn(n_params, bytes_per_param, prompt_len, peak_flops, bandwidth)` -> (ttft, tpot) lower bounds."""
    def compare(got, expected) -> bool:
        return (isinstance(got, (tuple, list)) and len(got) == 2
                and all(isinstance(g, (int, float)) and math.isfinite(g) for g in got)
                and approx_equal(list(got), list(expected), rel=1e-9))

    def case(n, b, s, peak, bw):
        return Case((n, b, s, peak, bw), (2 * n * s / peak, n * b / bw))

    cases = [case(8e9, 2, 2000, 989e12, 3.35e12), case(1e9, 4, 100, 1e12, 1e11),
             case(70e9, 2, 8000, 312e12, 2.039e12), case(135e6, 4, 512, 7e10, 3.8e10)]
    return report(run_cases("Exercise 5.3 (latency_floors)", fn, cases, compare=compare,
                            hint="ttft = 2 * n_params * prompt_len / peak_flops (compute-bound prefill); "
                                 "tpot = n_params * bytes_per_param / bandwidth (memory-bound decode)."))
