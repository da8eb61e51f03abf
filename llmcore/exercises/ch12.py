"""Checkers for the exercises of chapter 12 (symptoms and fixes). Hand-written."""
from __future__ import annotations

from typing import Callable

from . import (Case, Verdict, approx_equal, checker, number_question,
               register_questions, report, run_cases)


def _replay(system, question, answer, turns):
    return sum(system + t * question + (t - 1) * answer for t in range(1, turns + 1))


def _kept(lengths, budget, pinned):
    kept, used = [], sum(lengths[:pinned])
    for i in range(len(lengths) - 1, pinned - 1, -1):
        if used + lengths[i] > budget:
            break
        kept.append(i)
        used += lengths[i]
    return list(range(pinned)) + kept[::-1]


def _ttft(prompt_len, shared, block_size, per_token, overhead):
    cached = min(shared, prompt_len - 1) // block_size * block_size
    return overhead + per_token * (prompt_len - cached)


@checker
def check_replay_input_tokens(fn: Callable) -> Verdict:
    """`fn(system, question, answer, turns)` -> input tokens billed over a stateless
    chat."""
    args = [(100, 40, 150, 1), (100, 40, 150, 2), (100, 40, 150, 30), (0, 10, 0, 5),
            (50, 0, 20, 4)]
    return report(run_cases(
        "Exercise 12.1 (replay_input_tokens)", fn, [Case(a, _replay(*a)) for a in args],
        compare=lambda got, exp: got == exp,
        hint="turn t sends the system prompt, t questions and t - 1 answers; add up "
             "the turns."))


@checker
def check_kept_messages(fn: Callable) -> Verdict:
    """`fn(lengths, budget, pinned)` -> indices sent: the pinned ones, then the newest
    that fit."""
    args = [([10, 20, 30, 40], 70, 0), ([10, 20, 30, 40], 70, 1),
            ([10, 20, 30, 40], 100, 1), ([50, 5, 5, 100, 5], 60, 1), ([5, 5, 5], 4, 0),
            ([30, 10, 10, 10], 55, 1)]
    cases = [Case((list(a[0]), *a[1:]), _kept(*a)) for a in args]
    return report(run_cases(
        "Exercise 12.2 (kept_messages)", fn, cases,
        compare=lambda got, exp: list(got) == exp,
        hint="start from the pinned messages' tokens, walk from the newest message "
             "back and stop at the first that would overflow; return sorted indices."))


@checker
def check_ttft_estimate(fn: Callable) -> Verdict:
    """`fn(prompt_len, shared, block_size, per_token, overhead)` -> seconds to the
    first token."""
    args = [(512, 460, 16, 1e-3, 0.01), (512, 0, 16, 1e-3, 0.01),
            (512, 512, 16, 1e-3, 0.01), (100, 15, 16, 2e-3, 0.0),
            (64, 64, 16, 1e-3, 0.005), (1000, 999, 1, 1e-4, 0.0)]
    return report(run_cases(
        "Exercise 12.3 (ttft_estimate)", fn, [Case(a, _ttft(*a)) for a in args],
        compare=approx_equal,
        hint="cached = whole blocks of the shared part, and never the last prompt "
             "token; the rest is prefilled at per_token seconds each, plus the "
             "overhead."))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 12.1: an 8,192-token window less 512 for the answer and a pinned 700-token
# system prompt, in whole turns of 400 tokens.
check_q_turns_that_fit = number_question(
    "Question 12.1 (turns that fit)", (8192 - 512 - 700) // 400, rel=1e-9)

# Question 12.2: the chapter's conversation (53, 21 and 138 tokens) replayed in full
# over 15 turns: turn t resends t questions and t - 1 answers.
check_q_replay_15_turns = number_question(
    "Question 12.2 (replay over 15 turns)", _replay(53, 21, 138, 15))

register_questions(globals())
