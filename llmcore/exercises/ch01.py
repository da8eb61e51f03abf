"""Checkers for the exercises of chapter 01 (the map: one request, end to end).
Hand-written."""
from __future__ import annotations

from typing import Callable

import torch

from . import (Case, Verdict, approx_equal, checker, number_question,
               register_questions, report, run_cases, run_checks)


def _pair_equal(got, expected) -> bool:
    """(ttft, tpot) with tpot possibly None: None must match None exactly, floats
    approximately."""
    if not isinstance(got, (tuple, list)) or len(got) != 2:
        return False
    if expected[1] is None or got[1] is None:
        return got[1] is expected[1] and approx_equal(got[0], expected[0])
    return approx_equal(tuple(got), expected)


@checker
def check_ttft_and_tpot(fn: Callable) -> Verdict:
    """`fn(start, token_times)` -> (TTFT, TPOT): seconds to the first token, and the
    mean gap between consecutive tokens after the first (None when only one came)."""
    steady = [100.04 + 0.01 * i for i in range(50)]
    cases = [
        Case((10.0, [10.5, 10.6, 10.7, 10.8]), (0.5, 0.1)),
        Case((0.0, [0.2, 0.25]), (0.2, 0.05)),
        Case((2.0, [2.3]), (0.3, None)),
        Case((0.0, [1.0, 1.1, 1.5, 1.6, 2.0]), (1.0, 0.25)),
        Case((100.0, steady), (0.04, 0.01)),
    ]
    return report(run_cases(
        "Exercise 1.1 (ttft_and_tpot)", fn, cases, compare=_pair_equal,
        hint="TTFT = first token time - start; TPOT = (last - first) / (number of "
             "tokens - 1): n tokens have n - 1 gaps, and the first token's wait is "
             "TTFT, not a gap. With one token there is no TPOT (None)."))


class StepModel:
    """A stand-in for the model and its KV cache.

    ``model_step(ids, positions)`` runs the tokens ``ids`` at ``positions``, stores them
    in its cache, and returns the logits (a 1-D tensor over a vocabulary of 50) of the
    last one; they depend on every token cached so far, as a real model's do. Feeding a
    position other than the next free ones raises ValueError: in a real cache it would
    overwrite or skip a slot."""

    vocab = 50

    def __init__(self):
        self.cached: list[int] = []
        self.calls: list[tuple[list[int], list[int]]] = []

    def __call__(self, ids, positions) -> torch.Tensor:
        ids = [int(i) for i in torch.as_tensor(ids).flatten().tolist()]
        positions = [int(p) for p in torch.as_tensor(positions).flatten().tolist()]
        self.calls.append((ids, positions))
        if not ids or len(ids) != len(positions):
            raise ValueError(f"ids {ids} and positions {positions} must have the "
                             "same, non-zero length")
        free = list(range(len(self.cached), len(self.cached) + len(ids)))
        if positions != free:
            raise ValueError(f"positions {positions}: the cache holds positions "
                             f"0..{len(self.cached) - 1}, so these tokens go at {free}")
        self.cached += ids
        history = sum((i + 1) * t for i, t in enumerate(self.cached))
        gen = torch.Generator().manual_seed(history)
        return torch.randn(self.vocab, generator=gen)


def _reference_decode(step: Callable, prompt_ids: list[int], n_new: int) -> list[int]:
    logits = step(prompt_ids, list(range(len(prompt_ids))))
    out = []
    for i in range(n_new):
        out.append(int(logits.argmax()))
        if i < n_new - 1:
            logits = step([out[-1]], [len(prompt_ids) + i])
    return out


@checker
def check_decode_greedy(fn: Callable) -> Verdict:
    """`fn(model_step, prompt_ids, n_new)` -> the n_new greedy tokens of a prefill and
    decode steps over a StepModel (each position fed exactly once)."""
    prompt = [3, 1, 4, 1, 5]

    def run(n_new: int) -> tuple[list, StepModel]:
        model = StepModel()
        return fn(model, list(prompt), n_new), model

    def tokens_match(n_new: int) -> Callable[[], bool]:
        def test() -> bool:
            got, _ = run(n_new)
            return (isinstance(got, (list, tuple)) and len(got) == n_new
                    and all(isinstance(t, int) for t in got)
                    and list(got) == _reference_decode(StepModel(), prompt, n_new))
        return test

    def prefill_first() -> bool:
        _, model = run(4)
        return model.calls[0] == (prompt, list(range(len(prompt))))

    def one_token_per_step() -> bool:
        got, model = run(4)
        return all(call == ([got[i]], [len(prompt) + i])
                   for i, call in enumerate(model.calls[1:]))

    def calls(n_new: int) -> Callable[[], bool]:
        def test() -> bool:
            _, model = run(n_new)
            return len(model.calls) == n_new
        return test

    return report(run_checks("Exercise 1.2 (decode_greedy)", [
        ("4 new tokens after the prompt [3, 1, 4, 1, 5] must be a list of 4 ints, "
         "the argmax of each step's logits", tokens_match(4)),
        ("the first call must be the prefill: the whole prompt at positions 0..4",
         prefill_first),
        ("each later call must feed one token, the one just chosen, at the next "
         "position (5, 6, ...)", one_token_per_step),
        ("4 new tokens take 4 calls: the prefill gives the first, and the last "
         "token is never fed back", calls(4)),
        ("1 new token takes the prefill alone", calls(1)),
        ("12 new tokens must match too", tokens_match(12)),
    ]))


@checker
def check_tokens_processed(fn: Callable) -> Verdict:
    """`fn(prompt_len, n_new, kv_cache)` -> token positions the model runs through its
    layers to produce `n_new` tokens, with (prefill + decode steps) or without a KV
    cache (re-run everything)."""
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
    return report(run_cases(
        "Exercise 1.3 (tokens_processed)", fn, cases,
        hint="the prompt is processed once by prefill, which already yields the first "
             "new token; each later token needs the previous one fed back. The last "
             "token sampled is never fed to the model. Without a cache, the step that "
             "makes token t (from 0) runs prompt_len + t positions."))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# never typed into the notebook.
_TTFT_MS, _TPOT_MS, _REPLY_TOKENS = 60, 4, 21
# Question 1.1: the first token at TTFT, each of the others one TPOT later
check_q_last_token = number_question(
    "Question 1.1 (last token)", _TTFT_MS + (_REPLY_TOKENS - 1) * _TPOT_MS, rel=0.02)
# Question 1.2: byte fallback, one token per UTF-8 byte
check_q_chinese_tokens = number_question(
    "Question 1.2 (Chinese tokens)", len("你好世界".encode("utf-8")), rel=0.01)

register_questions(globals())
