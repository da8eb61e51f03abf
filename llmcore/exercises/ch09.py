"""Checkers for the exercises of chapter 09 (continuous batching). Hand-written."""
from __future__ import annotations

from typing import Callable

from . import Case, Verdict, checker, report, run_cases


def _static(lengths, batch):
    return sum(max(lengths[i:i + batch]) for i in range(0, len(lengths), batch))


def _continuous(lengths, batch):
    queue, running, steps = list(lengths), [], 0
    while queue or running:
        while queue and len(running) < batch:
            running.append(queue.pop(0))
        running = [left - 1 for left in running if left > 1]
        steps += 1
    return steps


_WORKLOADS = [([5, 3, 8, 1], 2), ([100, 1, 1, 1] * 4, 4), ([4] * 8, 4), ([7], 3), ([2, 9, 4, 4, 1, 6, 3], 3),
              ([1, 1, 1, 1, 1], 1), ([10, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2)]


@checker
def check_static_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of static batching (each batch runs to its longest)."""
    return report(run_cases("Exercise 9.1 (static_steps)", fn,
                            [Case((list(lengths), batch), _static(lengths, batch)) for lengths, batch in _WORKLOADS],
                            compare=lambda got, exp: got == exp,
                            hint="cut the list into consecutive groups of `batch`; each group costs its longest "
                                 "request (the last group may be smaller)."))


@checker
def check_continuous_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of continuous batching (slots refilled every step)."""
    return report(run_cases("Exercise 9.2 (continuous_steps)", fn,
                            [Case((list(lengths), batch), _continuous(lengths, batch))
                             for lengths, batch in _WORKLOADS],
                            compare=lambda got, exp: got == exp,
                            hint="simulate: fill free slots from the front of the queue, advance every running "
                                 "request by one step, drop the finished ones, count the steps."))


@checker
def check_blocks_needed(fn: Callable) -> Verdict:
    """`fn(prompt_len, max_tokens, block_size)` -> ceil((prompt_len + max_tokens) / block_size)."""
    args = [(10, 6, 16), (10, 7, 16), (1, 0, 16), (100, 156, 16), (3, 5, 4), (1000, 24, 1)]
    return report(run_cases("Exercise 9.3 (blocks_needed)", fn,
                            [Case(a, -(-(a[0] + a[1]) // a[2])) for a in args],
                            compare=lambda got, exp: type(got) is int and got == exp,
                            hint="every prompt and output token needs a slot; round the number of blocks up, as "
                                 "an int."))
