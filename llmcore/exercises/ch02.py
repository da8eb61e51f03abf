"""Checkers for the exercises of chapter 02 (the tokenizer: from text to token ids).
Hand-written."""
from __future__ import annotations

from typing import Callable

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


@checker
def check_count_pairs(fn: Callable) -> Verdict:
    """`fn(chunks)` -> {(a, b): count} of adjacent pairs inside each chunk, never across
    two chunks."""
    def same_counts(got, expected) -> bool:
        return isinstance(got, dict) and {k: v for k, v in got.items() if v} == expected

    cases = [
        Case(([[1, 2, 3]],), {(1, 2): 1, (2, 3): 1}),
        Case(([[1, 2], [3, 4]],), {(1, 2): 1, (3, 4): 1}),
        Case(([[1, 2], [1, 2], [2, 1]],), {(1, 2): 2, (2, 1): 1}),
        Case(([[7], [], [1, 2, 1, 2]],), {(1, 2): 2, (2, 1): 1}),
        Case(([[5, 5, 5]],), {(5, 5): 2}),
        Case(([[104, 105], [32, 104, 105], [33]],), {(104, 105): 2, (32, 104): 1}),
    ]
    return report(run_cases(
        "Exercise 2.1 (count_pairs)", fn, cases, compare=same_counts,
        hint="count (ids[i], ids[i+1]) for every i inside each chunk, in order (a, b); "
             "the last id of one chunk and the first of the next are not a pair."))


@checker
def check_merge(fn: Callable) -> Verdict:
    """`fn(ids, pair, new_id)` -> a new list: each occurrence of `pair`, left to right,
    replaced by `new_id`."""
    def gives(ids: list, pair: tuple, new_id: int,
              expected: list) -> Callable[[], bool]:
        def test() -> bool:
            original = list(ids)
            got = fn(original, pair, new_id)
            return isinstance(got, list) and got == expected and original == ids
        return test

    return report(run_checks("Exercise 2.2 (merge)", [
        ("merge([1, 2, 3, 1, 2], (1, 2), 9) must give [9, 3, 9]",
         gives([1, 2, 3, 1, 2], (1, 2), 9, [9, 3, 9])),
        ("merge([1, 1, 1], (1, 1), 9) must give [9, 1]: occurrences do not overlap, "
         "and the scan goes left to right", gives([1, 1, 1], (1, 1), 9, [9, 1])),
        ("merge([1, 1, 1, 1], (1, 1), 9) must give [9, 9]",
         gives([1, 1, 1, 1], (1, 1), 9, [9, 9])),
        ("the order inside the pair matters: merge([2, 1, 2, 1], (1, 2), 7) must give "
         "[2, 7, 1]", gives([2, 1, 2, 1], (1, 2), 7, [2, 7, 1])),
        ("ids without the pair come back unchanged, the last id included: "
         "merge([3, 4, 1], (1, 2), 9) must give [3, 4, 1]",
         gives([3, 4, 1], (1, 2), 9, [3, 4, 1])),
        ("ids must be compared as whole numbers, not digits of a string: "
         "merge([11, 2, 1, 12], (1, 2), 9) must give [11, 2, 1, 12]",
         gives([11, 2, 1, 12], (1, 2), 9, [11, 2, 1, 12])),
        ("an empty list gives an empty list", gives([], (1, 2), 9, [])),
        ("the input list must not be modified (return a new list)",
         gives([4, 1, 2, 4], (1, 2), 5, [4, 5, 4])),
    ]))


class _ByteTokenizer:
    """A stand-in tokenizer: one token per UTF-8 byte."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))


class _WordTokenizer:
    """A stand-in tokenizer: one token per space-separated word or per CJK character."""

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in text.split():
            if all(ord(c) > 0x2E80 for c in word):
                ids += [ord(c) for c in word]
            else:
                ids += [sum(map(ord, word)) % 1000]
        return ids


@checker
def check_zh_en_token_ratio(fn: Callable) -> Verdict:
    """`fn(tokenizer, pairs)` -> total Chinese tokens / total English tokens over
    (english, chinese) pairs."""
    pairs = [("I like tea.", "我喜欢茶。"),
             ("The train leaves at eight tomorrow morning.", "火车明天早上八点出发。"),
             ("OK", "好的")]
    words = [("good morning", "早 上 好"), ("thank you very much", "谢 谢"),
             ("see you", "再 见 了")]

    def ratio(tok, ps) -> float:
        zh = sum(len(tok.encode(zh)) for _, zh in ps)
        return zh / sum(len(tok.encode(en)) for en, _ in ps)

    cases = [Case((_ByteTokenizer(), pairs), ratio(_ByteTokenizer(), pairs)),
             Case((_WordTokenizer(), words), ratio(_WordTokenizer(), words)),
             Case((_WordTokenizer(), words[:1]), ratio(_WordTokenizer(), words[:1]))]
    return report(run_cases(
        "Exercise 2.3 (zh_en_token_ratio)", fn, cases,
        hint="sum the token counts of all Chinese sentences and of all English "
             "sentences, then divide (Chinese / English); count tokens with "
             "tokenizer.encode, not characters or bytes, and do not average per-pair "
             "ratios."))


@checker
def check_stream_utf8(fn: Callable) -> Verdict:
    """`fn(pieces)` -> one str per piece of bytes: every character whose last byte has
    arrived, nothing else."""
    ni, hao = "你".encode("utf-8"), "好".encode("utf-8")
    rocket = "🚀".encode("utf-8")
    cases = [
        Case(([b"ab", b"c"],), ["ab", "c"]),
        Case(([ni[:2], ni[2:] + hao],), ["", "你好"]),
        Case(([b"a" + ni[:1], ni[1:] + b"b"],), ["a", "你b"]),
        Case(([rocket[:1], rocket[1:2], rocket[2:3], rocket[3:] + b"!"],),
             ["", "", "", "🚀!"]),
        Case(([b"\xe5\xbe", b"\x88\xe5\xbf", b"\xab"],), ["", "很", "快"]),
        Case(([ni + hao[:1], hao[1:], b""],), ["你", "好", ""]),
    ]
    return report(run_cases(
        "Exercise 2.4 (stream_utf8)", fn, cases,
        hint="keep the bytes of an unfinished character at the end of the buffer for "
             "the next step, and decode everything before them now: never emit U+FFFD, "
             "never drop bytes, never wait longer than needed."))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# never typed into the notebook.
# Question 2.1: byte fallback spends one token per UTF-8 byte of a Chinese character
check_q_window_characters = number_question(
    "Question 2.1 (window characters)", 8192 / len("很".encode("utf-8")), rel=0.05)
# Question 2.2: the chapter's toy string after merging l + o, then 256 + w
_TOY = "low lower lowest slow slower"
_after_lo = len(_TOY.encode("utf-8")) - _TOY.count("lo")
check_q_tokens_after_merge = number_question(
    "Question 2.2 (tokens after merge)", _after_lo - _TOY.count("low"), rel=0.01)

register_questions(globals())
