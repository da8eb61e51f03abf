"""Every checker accepts a correct answer, rejects wrong ones, and never raises.

Answers live in tests/answers/chNN.py, one module per chapter, each defining ANSWERS.
"""
from __future__ import annotations

import importlib
import pkgutil

import pytest

import answers
import llmcore.exercises as ex
from llmcore.exercises import CHECKERS, FAILED, NOT_ATTEMPTED, PASSED

for info in pkgutil.iter_modules(ex.__path__):  # registers every chapter's checkers
    importlib.import_module(f"llmcore.exercises.{info.name}")

ANSWERS: dict = {}
for info in pkgutil.iter_modules(answers.__path__):
    ANSWERS.update(importlib.import_module(f"answers.{info.name}").ANSWERS)


def _skeleton(*args, **kwargs):
    raise NotImplementedError


def test_every_checker_has_answers_here():
    assert set(CHECKERS) == set(ANSWERS), "add a correct and a wrong answer for each new checker"


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_checker_accepts_correct_and_rejects_wrong(name, capsys):
    correct, wrongs = ANSWERS[name]
    assert CHECKERS[name](correct).status == PASSED
    for wrong in wrongs:
        verdict = CHECKERS[name](wrong)
        assert verdict.status == FAILED and not verdict, f"{name} accepted a wrong answer"
    assert CHECKERS[name](_skeleton).status == NOT_ATTEMPTED
    assert "passed" in capsys.readouterr().out  # verdicts are printed for the learner


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_checker_survives_a_crashing_answer(name):
    def crash(*args):
        raise ZeroDivisionError("boom")
    verdict = CHECKERS[name](crash)
    assert verdict.status == FAILED and "ZeroDivisionError: boom" in verdict.message


def test_verdict_text_names_the_failing_case():
    v = ex.run_cases("demo", lambda x: x + 1, [ex.Case((1,), 2), ex.Case((2,), 4)])
    assert v.status == FAILED and "case 2 (2): expected 4, got 3" in v.message


def test_non_callable_answer_fails_cleanly():
    assert ex.run_cases("demo", 3, [ex.Case((1,), 1)]).status == FAILED
