"""Checkers for the exercises of chapter 08 (stopping and streaming). Hand-written."""
from __future__ import annotations

from typing import Callable

from llmcore.generate import Reply, Usage
from llmcore.sampling import SamplingParams

from . import (Case, Verdict, approx_equal, checker, number_question,
               register_questions, report, run_cases)


@checker
def check_safe_release(fn: Callable) -> Verdict:
    """`fn(text, stops)` -> how many leading characters of `text` can be streamed now:
    all but the longest ending of `text` that is the beginning of some stop string (no
    stop string is complete)."""
    cases = [
        Case(("hello wor", ["world"]), 6),        # 'wor' may become 'world'
        Case(("hello", ["world"]), 5),            # a fixed hold-back would keep 4
        Case(("x = 1\n", ["\n\n"]), 5),
        Case(("abab", ["abc"]), 2),
        Case(("aaa", ["aab"]), 1),                # the longest matching ending
        Case(("total =", ["\n\n", " = 0"]), 5),   # any of the stop strings
        Case(("print(x)<|", ["<|endoftext|>"]), 8),
        Case(("abc", []), 3),                     # no stop strings: everything goes
        Case(("", ["stop"]), 0),
        Case(("ab", ["abcd"]), 0),                # the whole text may start the stop
        Case(("我们的数", ["数据"]), 3),              # characters, not bytes
    ]
    return report(run_cases(
        "Exercise 8.1 (safe_release)", fn, cases,
        hint="for every stop string s and every k from 1 to len(s) - 1, does text end "
             "with s[:k]? hold back the largest such k."))


def _reply_end(draws: list[int], stop_ids: list[int], min_tokens: int,
               max_tokens: int) -> tuple[int, str, int | None]:
    """What chapter 8's Reply decides when the sampler draws `draws` in turn."""
    params = SamplingParams(max_tokens=max_tokens, min_tokens=min_tokens,
                            stop_token_ids=list(stop_ids))
    reply = Reply(None, params, prompt_tokens=0)
    for token in draws:
        reply.add(token, 0.0)
        if reply.done:
            break
    return len(reply.token_ids), reply.finish_reason, reply.stop_reason


@checker
def check_reply_end(fn: Callable) -> Verdict:
    """`fn(draws, stop_ids, min_tokens, max_tokens)` -> (completion_tokens,
    finish_reason, stop_reason) as Reply decides them token by token."""
    args = [
        ([5, 6, 7, 2, 8, 9], [2], 0, 10),   # a stop id ends it, and counts
        ([5, 6, 7, 8, 9], [2], 0, 3),       # max_tokens: "length"
        ([2, 5, 2, 6], [2], 1, 10),         # the first 2 falls within min_tokens
        ([5, 2, 6, 7, 8], [2], 2, 4),       # token 2 of min_tokens=2 may not stop yet
        ([5, 6, 0, 7], [2, 0], 0, 3),       # the last allowed token is a stop id
        ([1, 0, 4], [0, 1], 0, 5),          # any of the stop ids
        ([3, 3, 3, 3], [], 0, 4),           # no stop ids
        ([2, 2, 2, 2], [2], 3, 3),          # min_tokens = max_tokens
    ]
    cases = [Case((list(d), list(s), m, x), _reply_end(d, s, m, x))
             for d, s, m, x in args]
    return report(run_cases(
        "Exercise 8.2 (reply_end)", fn, cases,
        compare=lambda got, exp: isinstance(got, (tuple, list)) and tuple(got) == exp,
        hint="take the draws in order; a stop id ends the reply ('stop', the id) only "
             "once more than min_tokens tokens have come, and it is one of the "
             "completion tokens; otherwise the max_tokens-th token ends it ('length', "
             "None). A stop id wins over max_tokens."))


@checker
def check_bill(fn: Callable) -> Verdict:
    """`fn(usages, input_per_million, output_per_million)` -> dollars for a list of
    Usage records."""
    day = [Usage(1200, 300), Usage(5000, 150), Usage(800, 800)]
    cases = [
        Case(([Usage(1_000_000, 0)], 0.5, 1.5), 0.5),
        Case(([Usage(0, 1_000_000)], 0.5, 1.5), 1.5),
        Case((day, 0.5, 1.5), (7000 * 0.5 + 1250 * 1.5) / 1e6),
        Case((day, 3.0, 15.0), (7000 * 3.0 + 1250 * 15.0) / 1e6),
        Case(([], 3.0, 15.0), 0.0),
    ]
    return report(run_cases(
        "Exercise 8.3 (bill)", fn, cases,
        compare=lambda got, exp: (isinstance(got, (int, float))
                                  and approx_equal(got, exp, 1e-9, 1e-12)),
        hint="prompt tokens at the input price, completion tokens at the output price, "
             "prices are per million tokens."))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 8.1: StopChecker holds back len(longest stop) - 1 characters; the longest of
# "</answer>" and "\n\n" has 9, so 40 - 8 characters are released.
check_q_released = number_question(
    "Question 8.1 (characters released)", 40 - (len("</answer>") - 1), rel=1e-9)

# Question 8.2: turn k re-sends k user messages of 100 tokens and the k - 1 replies of
# 50 before it; the prompt tokens of turns 1 to 4 added up.
check_q_prompt_tokens = number_question(
    "Question 8.2 (prompt tokens billed)",
    sum(100 * k + 50 * (k - 1) for k in range(1, 5)), rel=1e-9)

register_questions(globals())
