"""Checkers for the exercises of chapter 07 (sampling). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

import torch

from llmcore.constrained import int_prefix
from llmcore.sampling import TopP

from . import (FAILED, Case, Verdict, approx_equal, checker, number_question,
               register_questions, report, run_cases, run_checks)


def _reference_top_p(logits: torch.Tensor, temperature: float,
                     top_p: float) -> torch.Tensor:
    """Temperature, then llmcore's TopP (ties with the least likely kept token stay)."""
    return TopP(top_p)(logits / temperature).softmax(-1)


@checker
def check_temperature_top_p(fn: Callable) -> Verdict:
    """`fn(logits, temperature, top_p)` -> renormalised probabilities after temperature,
    then top-p; tokens tied with the least likely kept one are kept too."""
    gen = torch.Generator().manual_seed(7)
    random_logits = torch.randn(50, generator=gen) * 2
    four = [2.0, 1.0, 0.0, -1.0]
    args = [
        (torch.tensor(four), 1.0, 1.0),    # p = 1 keeps everything
        (torch.tensor(four), 1.0, 0.5),    # the top token alone (0.64) reaches 0.5
        (torch.tensor(four), 1.0, 0.7),    # the 2nd token crosses 0.7: it is kept
        (torch.tensor(four), 2.0, 0.7),    # temperature first: the T = 2 weights
        (torch.tensor([0.5, 3.0, -2.0, 1.0, 2.5]), 0.5, 0.9),
        (random_logits.clone(), 1.3, 0.8),
        (random_logits.clone(), 0.7, 0.95),
        # ties: a sort puts equal probabilities in some order, the set must not care
        (torch.tensor([2.0, 1.0, 1.0, 0.0]), 1.0, 0.7),   # the cut falls in a tie
        (torch.tensor([0.0, 0.0, 0.0, 0.0]), 1.0, 0.3),   # all tied: all kept
        (torch.tensor([3.0, 1.0, 1.0, 0.0]), 1.0, 0.5),   # a tie below the cut: dropped
        (torch.tensor([1.0, 2.0, 2.0, 2.0, 0.0]), 1.0, 0.5),  # three tied on top
    ]
    cases = [Case(a, _reference_top_p(*a)) for a in args]

    def compare(got, expected):
        return (isinstance(got, torch.Tensor) and got.shape == expected.shape
                and approx_equal(got, expected, 1e-4, 1e-6))

    verdict = run_cases(
        "Exercise 7.1 (temperature_top_p)", fn, cases, compare=compare,
        hint="divide by the temperature before the softmax; keep a token while the "
             "tokens ranked above it hold less than top_p (the one that crosses top_p "
             "stays), and keep every token as likely as the least likely one kept; "
             "renormalise what is kept.")
    if verdict:
        logits = torch.tensor([1.0, 3.0, 2.0])
        try:
            fn(logits, 0.5, 0.6)
            if not torch.equal(logits, torch.tensor([1.0, 3.0, 2.0])):
                verdict = Verdict(verdict.exercise, FAILED,
                                  "check of the input: the logits were modified in "
                                  "place.")
        except Exception as e:  # the learner's bug is reported, never raised
            verdict = Verdict(verdict.exercise, FAILED,
                              f"check of the input raised {type(e).__name__}: {e}")
    return report(verdict)


@checker
def check_repetition_penalty(fn: Callable) -> Verdict:
    """`fn(logits, seen_ids, penalty)` -> new logits: seen positive / penalty, seen
    negative * penalty."""
    def matches(logits, seen, penalty, expected):
        def test() -> bool:
            got = fn(logits.clone(), list(seen), penalty)
            return (isinstance(got, torch.Tensor)
                    and approx_equal(got, torch.tensor(expected), 1e-6, 1e-7))
        return test

    def input_unchanged() -> bool:
        logits = torch.tensor([2.0, -2.0, 1.0])
        fn(logits, [0, 1], 2.0)
        return torch.equal(logits, torch.tensor([2.0, -2.0, 1.0]))

    x = torch.tensor([2.0, -2.0, 4.0, -1.0, 0.0])
    return report(run_checks("Exercise 7.2 (repetition_penalty)", [
        ("a seen positive logit is divided: [2, -2, 4, -1, 0] with seen [0], penalty 2 "
         "-> [1, -2, 4, -1, 0]", matches(x, [0], 2.0, [1.0, -2.0, 4.0, -1.0, 0.0])),
        ("a seen negative logit is multiplied (dividing would raise it): seen [1] -> "
         "[2, -4, 4, -1, 0]", matches(x, [1], 2.0, [2.0, -4.0, 4.0, -1.0, 0.0])),
        ("unseen tokens keep their logits: seen [2, 3], penalty 1.25 -> "
         "[2, -2, 3.2, -1.25, 0]",
         matches(x, [2, 3], 1.25, [2.0, -2.0, 3.2, -1.25, 0.0])),
        ("a token seen three times is penalised once: seen [2, 2, 2], penalty 2 -> "
         "[2, -2, 2, -1, 0]", matches(x, [2, 2, 2], 2.0, [2.0, -2.0, 2.0, -1.0, 0.0])),
        ("nothing seen, nothing changes", matches(x, [], 3.0, x.tolist())),
        ("the input tensor must not be modified in place", input_unchanged),
    ]))


@checker
def check_distinct_n(fn: Callable) -> Verdict:
    """`fn(completions, n)` -> distinct n-grams / all n-grams over all completions; 0.0
    if none."""
    cases = [
        Case(([[1, 2, 3], [1, 2, 3]], 2), 2 / 4),
        Case(([[1, 2, 3], [4, 5, 6]], 2), 4 / 4),
        Case(([[1, 2], [3, 4]], 2), 2 / 2),   # (2, 3) spans two completions: no n-gram
        Case(([[1, 1, 1, 1]], 1), 1 / 4),
        Case(([[1, 2, 1, 2, 1]], 2), 2 / 4),
        Case(([[1, 2, 3, 4], [2, 3, 4, 5], [9]], 3), 3 / 4),
        Case(([[1], [2]], 2), 0.0),
    ]
    return report(run_cases(
        "Exercise 7.3 (distinct_n)", fn, cases,
        hint="collect the n-grams of every completion separately into one list; divide "
             "the size of its set by its length."))


@checker
def check_int_viable(fn: Callable) -> Verdict:
    """`fn(text, lo, hi)` -> whether some integer in [lo, hi] (None: no bound) is
    written starting with `text` (JSON's integers: no leading zeros, no "-0")."""
    table = [("1", 18, 120), ("12", 18, 120), ("121", 18, 120), ("9", 18, 120),
             ("0", 18, 120), ("3", 250, 300), ("-", -40, 7), ("-4", -40, 7),
             ("-41", -40, 7), ("-5", -40, 7), ("-0", -40, 7), ("0", -40, 7),
             ("8", -40, 7), ("07", None, None), ("1000", None, None), ("-", 0, None),
             ("99", None, 100), ("100", None, 100), ("-", None, -3), ("-2", None, -3),
             ("-20", None, -3)]
    cases = [Case(args, int_prefix(*args)[0]) for args in table]
    return report(run_cases(
        "Exercise 7.4 (int_viable)", fn, cases,
        hint="the integers written as text and k more digits form one range, "
             "[t * 10**k, (t + 1) * 10**k - 1] for t = int(text), negated after a "
             "minus; text is viable if, for some k, that range meets [lo, hi]. A text "
             "starting with 0 is viable only as 0 itself, and never after a minus."))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 7.1: top-p 0.8 over 0.5, 0.2, 0.15, 0.1, 0.05 keeps the first three (0.85);
# the most likely is renormalised by their sum.
check_q_top_p = number_question("Question 7.1 (top-p)", 0.5 / (0.5 + 0.2 + 0.15))

# Question 7.2: logits 2 and 1 at T = 0.5 become 4 and 2; a two-way softmax.
check_q_temperature = number_question(
    "Question 7.2 (temperature)", 1 / (1 + math.exp(-(2.0 - 1.0) / 0.5)), rel=0.01)

register_questions(globals())
