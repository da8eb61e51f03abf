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


_WORKLOADS = [([5, 3, 8, 1], 2), ([100, 1, 1, 1] * 4, 4), ([4] * 8, 4), ([7], 3),
              ([2, 9, 4, 4, 1, 6, 3], 3), ([1, 1, 1, 1, 1], 1),
              ([10, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2)]


@checker
def check_static_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of static batching (each batch runs to its
    longest)."""
    cases = [Case((list(lengths), batch), _static(lengths, batch))
             for lengths, batch in _WORKLOADS]
    return report(run_cases(
        "Exercise 9.1 (static_steps)", fn, cases, compare=lambda got, exp: got == exp,
        hint="cut the list into consecutive groups of `batch`; each group costs its "
             "longest request (the last group may be smaller)."))


@checker
def check_continuous_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of continuous batching (slots refilled every
    step)."""
    cases = [Case((list(lengths), batch), _continuous(lengths, batch))
             for lengths, batch in _WORKLOADS]
    return report(run_cases(
        "Exercise 9.2 (continuous_steps)", fn, cases,
        compare=lambda got, exp: got == exp,
        hint="simulate: fill free slots from the front of the queue, advance every "
             "running request by one step, drop the finished ones, count the steps."))


def _admit(waiting, running, num_free, max_batch, block_size):
    """How many requests Engine._admit takes from the front of the queue."""
    free = num_free - sum(need - taken for need, taken in running)
    admitted = 0
    for prompt_len, max_tokens in waiting:
        need = -(-(prompt_len + max_tokens) // block_size)
        if len(running) + admitted >= max_batch or need > free:
            break
        free -= need
        admitted += 1
    return admitted


@checker
def check_admit(fn: Callable) -> Verdict:
    """`fn(waiting, running, num_free, max_batch, block_size)` -> how many waiting
    requests, from the front, one engine step admits."""
    args = [
        ([(10, 6)], [], 10, 4, 16),                    # 16 tokens: one block
        ([(10, 7)], [], 1, 4, 16),                     # 17 tokens need 2 blocks
        ([(4, 4)] * 5, [(1, 1), (1, 1)], 100, 4, 16),  # 2 slots left in the batch
        ([(100, 100), (4, 4)], [], 10, 8, 16),         # first come, first served
        ([(20, 12)], [(4, 1), (3, 3)], 4, 8, 16),      # 3 free blocks are promised
        ([(16, 16)] * 3, [], 5, 8, 16),                # each admission uses blocks
        ([(3, 5), (1, 1)], [(10, 4)], 20, 3, 1),
        ([], [(2, 2)], 50, 4, 16),                     # nothing waits
    ]
    cases = [Case((list(w), list(r), f, b, s), _admit(w, r, f, b, s))
             for w, r, f, b, s in args]
    return report(run_cases(
        "Exercise 9.3 (admit)", fn, cases,
        compare=lambda got, exp: type(got) is int and got == exp,
        hint="free = num_free minus what running requests were promised but have not "
             "taken; then, from the front of the queue, admit while the batch has a "
             "slot and the request's ceil((prompt_len + max_tokens) / block_size) "
             "blocks fit; stop at the first that does not (no later request may "
             "pass it)."))


def _read_top_k(body: dict, vocab_size: int) -> int:
    from llmcore.api import APIError
    value = body.get("top_k")
    if value is None:
        return 0
    if type(value) is not int or not (value == -1 or 0 <= value <= vocab_size):
        raise APIError(400, f"'top_k' must be -1 or 0 (off), or an int in [1, "
                            f"{vocab_size}], got {value!r}", param="top_k")
    return max(value, 0)


@checker
def check_read_top_k(fn: Callable) -> Verdict:
    """`fn(body, vocab_size)` -> the top_k for SamplingParams (0 = off), or raises
    APIError(400, ..., param="top_k")."""
    from llmcore.api import APIError

    def outcome(call):
        def run(body, vocab_size):
            try:
                return call(body, vocab_size)
            except APIError as err:
                return ("APIError", err.status, err.param)
        return run
    bodies = [{}, {"top_k": None}, {"top_k": -1}, {"top_k": 0}, {"top_k": 1},
              {"top_k": 40}, {"top_k": 4096}, {"top_k": 4097}, {"top_k": 10**20},
              {"top_k": -2}, {"top_k": True}, {"top_k": 5.0}, {"top_k": "5"},
              {"top_k": [5]}, {"top_k": 40, "top_p": 0.9}]
    cases = [Case((dict(body), 4096), outcome(_read_top_k)(body, 4096))
             for body in bodies]
    return report(run_cases(
        "Exercise 9.4 (read_top_k)", outcome(fn), cases,
        compare=lambda got, exp: type(got) is type(exp) and got == exp,
        hint="absent or null means the default (0, off); -1 also means off; accept "
             "only a real int (True is an int in Python, 5.0 is not) in [0, "
             "vocab_size]; anything else raises APIError(400, message, "
             "param='top_k')."))
