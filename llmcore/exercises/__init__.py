"""Exercise checkers for the book (hand-written, not exported from a chapter).

A checker runs a learner's function against reference cases and prints one clear
verdict:

- ``passed``        every case gave the expected answer;
- ``failed``        the first case that went wrong, what was expected and what came back
                    (or the exception it raised);
- ``not attempted`` the function still raises ``NotImplementedError`` (the skeleton).

Checkers never raise, so an unfinished exercise never stops a notebook. Each checker is
registered in :data:`CHECKERS`; ``tests/test_exercises.py`` proves every one of them
rejects the plausible wrong answers in ``tests/answers/``, and that the exercise number
it prints (``Exercise 7.1``) is the one the chapter's page shows.

Usage in a chapter::

    from llmcore.exercises import ch00
    ch00.check_weights_gib(weights_gib)

Verdicts speak the reader's language: English by default, Chinese in the book's Chinese
edition, whose setup cell sets ``LLMCORE_LANG=zh`` (or call :func:`set_language`). Each
checker writes its hints in English; :mod:`llmcore.exercises.zh` holds their Chinese,
and ``tests/test_exercises.py`` fails when a hint has none.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted"
_SKELETON = "Replace the `raise NotImplementedError` with your code."
_NO_NUMBER = "Replace None with the number you worked out."
LANGUAGES = ("en", "zh")
_language: str | None = None


def set_language(lang: str | None) -> None:
    """Make every verdict speak ``lang`` ("en" or "zh"); None goes back to
    ``$LLMCORE_LANG`` (default "en")."""
    global _language
    if lang is not None and lang not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {lang!r}")
    _language = lang


def language() -> str:
    """The verdicts' language: :func:`set_language`'s, else ``$LLMCORE_LANG``, else
    "en"."""
    if _language is not None:
        return _language
    lang = os.environ.get("LLMCORE_LANG", "en") or "en"
    if lang not in LANGUAGES:
        raise ValueError(f"$LLMCORE_LANG must be one of {LANGUAGES} (the language of "
                         f"the exercise checkers), got {lang!r}")
    return lang


@dataclass(frozen=True)
class Case:
    """One reference case: call ``fn(*args, **kwargs)``, compare with ``expected``."""
    args: tuple
    expected: Any
    kwargs: dict = field(default_factory=dict)

    def call_text(self) -> str:
        parts = [_short(a) for a in self.args]
        parts += [f"{k}={_short(v)}" for k, v in self.kwargs.items()]
        return "(" + ", ".join(parts) + ")"


@dataclass(frozen=True)
class Verdict:
    """The outcome of a checker. ``bool(verdict)`` is True only when it passed."""
    exercise: str
    status: str
    message: str

    def __bool__(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        return self.render(language())

    def render(self, lang: str = "en") -> str:
        """The verdict's line in ``lang``: "✅ Exercise 7.1 (name): passed. ..." or
        "✅ 练习 7.1 (name)：通过。..."."""
        mark = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "✏️"}[self.status]
        if lang == "zh":
            exercise = re.sub(r"^Exercise ", "练习 ", self.exercise)
            exercise = re.sub(r"^Question ", "问题 ", exercise)
            return (f"{mark} {exercise}：{_ZH_STATUS[self.status]}。"
                    f"{zh_message(self.message)}")
        return f"{mark} {self.exercise}: {self.status}. {self.message}"

    def _ipython_display_(self) -> None:
        # the checker already printed the verdict; showing it again would repeat it
        pass


_ZH_STATUS = {PASSED: "通过", FAILED: "未通过", NOT_ATTEMPTED: "尚未作答"}


def _zh(text: str) -> str:
    """The Chinese of one checker's hint or check (:mod:`.zh`), else the English."""
    from .zh import MESSAGES

    return MESSAGES.get(text, text)


def _zh_hint(rest: str) -> str:
    return f"提示：{_zh(rest)}" if rest else ""


# The shapes of every message this module builds, English -> Chinese.
_ZH_MESSAGES: list[tuple[re.Pattern, Callable[[re.Match], str]]] = [
    (re.compile(re.escape(_SKELETON) + "$"),
     lambda m: "把 `raise NotImplementedError` 换成你的代码。"),
    (re.compile(re.escape(_NO_NUMBER) + "$"),
     lambda m: "把 None 换成你算出的数。"),
    (re.compile(r"matches the answer \(within (.*)\)\.$"),
     lambda m: f"与答案相符（误差在 {m[1]} 以内）。"),
    (re.compile(r"check 1: (.*) is not within (.*) of the answer; redo the arithmetic "
                r"and check the units\.$"),
     lambda m: f"检查 1 不成立：{m[1]} 与答案相差超过 {m[2]}；重算一遍并核对单位。"),
    (re.compile(r"check 1 \(the function that works out the number\) raised (\w+): "
                r"(.*)$", re.S),
     lambda m: f"检查 1（算出这个数的函数）抛出了 {m[1]}: {m[2]}"),
    (re.compile(r"check 1: expected a number, got (\S+)\.$"),
     lambda m: f"检查 1 不成立：应当是一个数，得到的是 {m[1]}。"),
    (re.compile(r"all (\d+) cases match\.$"), lambda m: f"全部 {m[1]} 个用例都对。"),
    (re.compile(r"all (\d+) checks hold\.$"), lambda m: f"全部 {m[1]} 项检查都成立。"),
    (re.compile(r"expected a function, got (\S+)\.$"),
     lambda m: f"应当传入一个函数，传入的是 {m[1]}。"),
    (re.compile(r"case (\d+) (\(.*\)): expected (.*), got (.*?)\.(?: Hint: (.*))?$",
                re.S),
     lambda m: (f"用例 {m[1]} {m[2]}：应为 {m[3]}，得到 {m[4]}。"
                f"{_zh_hint(m[5] or '')}")),
    (re.compile(r"case (\d+) (\(.*\)) raised (.*)$", re.S),
     lambda m: f"用例 {m[1]} {m[2]} 抛出了 {m[3]}"),
    (re.compile(r"check (\d+) \((.*)\) raised (\w+): (.*)$", re.S),
     lambda m: f"检查 {m[1]}（{_zh(m[2])}）抛出了 {m[3]}: {m[4]}"),
    (re.compile(r"check (\d+): (.*)\.$", re.S),
     lambda m: f"检查 {m[1]} 不成立：{_zh(m[2])}。"),
]


def zh_message(message: str) -> str:
    """The Chinese of a verdict's message (English if no rule or catalog entry knows
    it)."""
    for pattern, render in _ZH_MESSAGES:
        m = pattern.match(message)
        if m:
            return render(m)
    return _zh(message)


_VERDICT_LINE = re.compile(r"^(✅|❌|✏️) ((?:Exercise|Question) [0-9A-Z]+\.\d+ "
                           r"\([^)]*\)): (passed|failed|not attempted)\. (.*)$", re.M)


def translate_verdicts(text: str, lang: str) -> str:
    """Every verdict line in printed ``text`` rewritten in ``lang`` (the Chinese edition
    shows the English notebooks' outputs with their verdicts in Chinese)."""
    if lang == "en":
        return text
    return _VERDICT_LINE.sub(lambda m: Verdict(m[2], m[3], m[4]).render(lang), text)


def _short(x: Any, limit: int = 60) -> str:
    text = repr(x)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def approx_equal(got: Any, expected: Any, rel: float = 1e-6,
                 abs_: float = 1e-9) -> bool:
    """Equality that tolerates float rounding, elementwise for sequences and tensors."""
    if hasattr(got, "tolist") and not isinstance(got, (int, float)):
        got = got.tolist()
    if hasattr(expected, "tolist") and not isinstance(expected, (int, float)):
        expected = expected.tolist()
    if isinstance(expected, bool) or isinstance(got, bool):
        return got is expected or got == expected
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return math.isclose(got, expected, rel_tol=rel, abs_tol=abs_)
    if isinstance(expected, (list, tuple)) and isinstance(got, (list, tuple)):
        return len(got) == len(expected) and all(
            approx_equal(g, e, rel, abs_) for g, e in zip(got, expected))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(
            approx_equal(got[k], expected[k], rel, abs_) for k in expected)
    return got == expected


def run_cases(exercise: str, fn: Callable, cases: list[Case],
              compare: Callable[[Any, Any], bool] = approx_equal,
              hint: str = "") -> Verdict:
    """Run ``fn`` on every case and return (without printing) the verdict."""
    if not callable(fn):
        return Verdict(exercise, FAILED,
                       f"expected a function, got {type(fn).__name__}.")
    for i, case in enumerate(cases, 1):
        try:
            got = fn(*case.args, **case.kwargs)
        except NotImplementedError:
            return Verdict(exercise, NOT_ATTEMPTED, _SKELETON)
        except Exception as e:  # the learner's bug is reported, never raised
            return Verdict(exercise, FAILED, f"case {i} {case.call_text()} raised "
                                             f"{type(e).__name__}: {e}")
        try:
            ok = compare(got, case.expected)
        except Exception as e:
            ok, got = False, f"{_short(got)} (could not be compared: {e})"
        if not ok:
            msg = (f"case {i} {case.call_text()}: expected {_short(case.expected)}, "
                   f"got {_short(got)}.")
            return Verdict(exercise, FAILED, msg + (f" Hint: {hint}" if hint else ""))
    return Verdict(exercise, PASSED, f"all {len(cases)} cases match.")


def run_checks(exercise: str, checks: list[tuple[str, Callable[[], bool]]]) -> Verdict:
    """Run property checks in order; each is (what must hold, a thunk returning True
    if it does)."""
    for i, (what, test) in enumerate(checks, 1):
        try:
            ok = bool(test())
        except NotImplementedError:
            return Verdict(exercise, NOT_ATTEMPTED, _SKELETON)
        except Exception as e:  # the learner's bug is reported, never raised
            return Verdict(exercise, FAILED,
                           f"check {i} ({what}) raised {type(e).__name__}: {e}")
        if not ok:
            return Verdict(exercise, FAILED, f"check {i}: {what}.")
    return Verdict(exercise, PASSED, f"all {len(checks)} checks hold.")


def report(verdict: Verdict) -> Verdict:
    """Print ``verdict`` and return it (the return value does not display again in
    Jupyter)."""
    print(verdict)
    return verdict


#: every checker of the book, by name, so tests can prove each rejects wrong answers
CHECKERS: dict[str, Callable[[Callable], Verdict]] = {}


def checker(fn: Callable[[Callable], Verdict]) -> Callable[[Callable], Verdict]:
    """Register a checker in :data:`CHECKERS` under ``<module>.<function name>``."""
    CHECKERS[f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"] = fn
    return fn


def number_question(name: str, answer: float, rel: float = 0.05
                    ) -> Callable[[Any], Verdict]:
    """A checker for a pen-and-paper question whose answer is a number: `name` is
    "Question N.k (what)", `answer` the number (computed in the chapter's checker
    module, not typed into the notebook) and `rel` the relative tolerance. The learner
    passes the number (None: not attempted); a function is called with no arguments, so
    that the answer may be the code that works it out. Register it in the chapter's
    module: ``check_q_kv = number_question("Question 6.1 (KV bytes)", 2 * 30 * 576)``
    and ``register_questions(globals())`` at the end of the module.
    """
    if not re.match(r"^Question [0-9A-Z]+\.\d+ \(", name):
        raise ValueError(f"a question's name reads 'Question N.k (what)', got {name!r}")
    if isinstance(answer, bool) or not isinstance(answer, (int, float)) or rel <= 0:
        raise ValueError(f"answer must be a number and rel > 0, got {answer!r}, "
                         f"{rel!r}")

    def check(got: Any) -> Verdict:
        if callable(got):
            try:
                got = got()
            except NotImplementedError:
                return report(Verdict(name, NOT_ATTEMPTED, _NO_NUMBER))
            except Exception as e:  # the learner's bug is reported, never raised
                return report(Verdict(name, FAILED, f"check 1 (the function that "
                                      f"works out the number) raised "
                                      f"{type(e).__name__}: {e}"))
        if got is None:
            return report(Verdict(name, NOT_ATTEMPTED, _NO_NUMBER))
        if hasattr(got, "item") and getattr(got, "ndim", 1) == 0:
            got = got.item()
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            return report(Verdict(name, FAILED, f"check 1: expected a number, got "
                                  f"{type(got).__name__}."))
        tolerance = f"{rel:.0%}" if rel >= 0.01 else f"{rel:g}"
        if math.isclose(got, answer, rel_tol=rel):
            return report(Verdict(name, PASSED, f"matches the answer (within "
                                  f"{tolerance})."))
        return report(Verdict(name, FAILED, f"check 1: {_short(got)} is not within "
                              f"{tolerance} of the answer; redo the arithmetic and "
                              f"check the units."))

    check.answer, check.rel = answer, rel
    return check


def register_questions(module_globals: dict) -> None:
    """Register every `check_q_*` question checker of a chapter module in
    :data:`CHECKERS` (call it at the end of the module with ``globals()``)."""
    module = module_globals["__name__"].rsplit(".", 1)[-1]
    for var, fn in module_globals.items():
        if var.startswith("check_q_") and hasattr(fn, "answer"):
            CHECKERS[f"{module}.{var}"] = fn


__all__ = ["Case", "Verdict", "set_language", "language", "translate_verdicts",
           "approx_equal", "run_cases", "run_checks", "report",
           "checker", "number_question", "register_questions",
           "CHECKERS", "PASSED", "FAILED", "NOT_ATTEMPTED"]
