"""Checkers for the exercises of chapter 11 (speculative decoding). Hand-written."""
from __future__ import annotations

from typing import Callable

import torch

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases)


@checker
def check_expected_tokens_per_pass(fn: Callable) -> Verdict:
    """`fn(alpha, k)` -> expected tokens per target pass when each of k guesses is
    accepted with probability alpha, independently, until the first rejection (plus
    the target's own token)."""
    def expected(alpha, k):
        return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)

    args = [(0.0, 4), (0.5, 1), (0.5, 4), (0.8, 4), (0.8, 8), (0.95, 16), (1.0, 4),
            (0.3, 2)]
    return report(run_cases(
        "Exercise 11.1 (expected_tokens_per_pass)", fn,
        [Case(a, expected(*a)) for a in args],
        hint="guess i survives only if guesses 1..i all do: probability alpha**i; add "
             "the one token the target always contributes (alpha = 1: k + 1)."))


@checker
def check_greedy_accept(fn: Callable) -> Verdict:
    """`fn(target_choices, draft_tokens)` -> (accepted, next_token), with
    target_choices the target's argmax at each of the k + 1 positions and draft_tokens
    the k guesses."""
    cases = [
        Case(([5, 6, 7, 8], [5, 6, 7]), (3, 8)),  # every guess right: a bonus token
        Case(([5, 6, 7, 8], [5, 9, 7]), (1, 6)),  # 2nd guess wrong: the target's 6
        Case(([5, 6, 7, 8], [4, 6, 7]), (0, 5)),  # 1st wrong, though later ones match
        Case(([1, 2], [1]), (1, 2)),
        Case(([3, 3, 3, 3, 3], [3, 3, 0, 3]), (2, 3)),
    ]
    return report(run_cases(
        "Exercise 11.2 (greedy_accept)", fn, cases,
        compare=lambda got, exp: tuple(got) == exp,
        hint="walk the guesses in order and stop at the first one that differs from "
             "the target's choice; the next token is the target's choice at that "
             "position."))


@checker
def check_residual(fn: Callable) -> Verdict:
    """`fn(p, q)` -> max(0, p - q) normalised to sum to 1 (1-D tensors), or p itself
    when p == q."""
    def expected(p, q):
        r = (p - q).clamp(min=0)
        return r / r.sum() if r.sum() > 0 else p

    pairs = [
        ([0.5, 0.3, 0.2, 0.0], [0.2, 0.2, 0.2, 0.4]),
        ([0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]),
        ([0.0, 1.0], [1.0, 0.0]),
        ([0.25, 0.25, 0.5], [0.25, 0.25, 0.5]),  # an exact draft: nothing is rejected
    ]
    cases = [Case((torch.tensor(p), torch.tensor(q)),
                  expected(torch.tensor(p), torch.tensor(q))) for p, q in pairs]

    def compare(got, exp) -> bool:
        return (isinstance(got, torch.Tensor) and got.shape == exp.shape
                and torch.allclose(got.float(), exp, atol=1e-6))

    return report(run_cases(
        "Exercise 11.3 (residual)", fn, cases, compare=compare,
        hint="clamp p - q at 0, then divide by its sum; if the sum is 0 the two "
             "distributions are equal, so return p."))


@checker
def check_choose_k(fn: Callable) -> Verdict:
    """`fn(alpha, t_pass, t_draft=0.0)` -> the k in 0..K with the most expected tokens
    per second: t_pass[n] is a target pass over n tokens (n = 1..K + 1), t_draft a draft
    step (0 for prompt lookup), k = 0 plain decoding; the smallest k on a tie."""
    def expected(alpha, t_pass, t_draft=0.0):
        rates = [1 / t_pass[1]]  # k = 0: one token per step
        for k in range(1, max(t_pass)):
            tokens = (float(k + 1) if alpha == 1
                      else (1 - alpha ** (k + 1)) / (1 - alpha))
            rates.append(tokens / (k * t_draft + t_pass[k + 1]))
        return rates.index(max(rates))

    flat = {n: 1.0 for n in range(1, 10)}  # verifying costs one step (a GPU, decode)
    cpu = {1: 1.0} | {n: 1.5 + 0.3 * (n - 2) for n in range(2, 10)}  # it costs more
    linear = {n: float(n) for n in range(1, 10)}  # n tokens cost n steps
    args = [(0.8, flat, 0.1), (0.5, flat, 0.1), (0.9, cpu, 0.0), (0.7, cpu, 0.0),
            (0.3, cpu, 0.0), (0.6, cpu, 0.2), (0.9, flat, 0.3), (0.95, flat, 0.0),
            (1.0, linear, 0.0)]  # the last: every k as fast as plain decoding
    return report(run_cases(
        "Exercise 11.4 (choose_k)", fn, [Case(a, expected(*a)) for a in args],
        compare=lambda got, exp: got == exp,
        hint="for each k, expected tokens per round (1 + alpha + ... + alpha**k) "
             "divided by the round's time, k draft steps plus t_pass[k + 1]; k = 0 "
             "is one token per t_pass[1]; keep the smallest k among equal rates."))


# --- Check your understanding: pen-and-paper questions ------------------------------

def _tokens_per_pass(alpha: float, k: int) -> float:
    return (1 - alpha ** (k + 1)) / (1 - alpha)  # 1 + alpha + ... + alpha**k


# Question 11.1: a 20 ms target step and verify pass over 5 tokens, a 2 ms draft step,
# k = 4 at acceptance 0.8: tokens per round times a step, over 4 draft steps + a verify.
check_q_gpu_speedup = number_question(
    "Question 11.1 (GPU speed-up)", _tokens_per_pass(0.8, 4) * 20 / (4 * 2 + 20))

# Question 11.2: a verify pass over 9 tokens costs 5 steps; a round yields its kept
# guesses + 1, so it beats plain decoding when kept + 1 > 5.
check_q_break_even = number_question("Question 11.2 (kept guesses to break even)",
                                     5 - 1, rel=1e-9)

register_questions(globals())
