"""Checkers for chapter 10 (the server): reading an API field by one rule."""
from __future__ import annotations

from typing import Callable

from . import Case, Verdict, checker, report, run_cases


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
        "Exercise 10.1 (read_top_k)", outcome(fn), cases,
        compare=lambda got, exp: type(got) is type(exp) and got == exp,
        hint="absent or null means the default (0, off); -1 also means off; accept "
             "only a real int (True is an int in Python, 5.0 is not) in [0, "
             "vocab_size]; anything else raises APIError(400, message, "
             "param='top_k')."))
