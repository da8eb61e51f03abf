"""Every checker accepts a correct answer, rejects a wrong one, and never raises."""
from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import llmcore.exercises as ex
from llmcore.exercises import CHECKERS, FAILED, NOT_ATTEMPTED, PASSED

for info in pkgutil.iter_modules(ex.__path__):  # registers every chapter's checkers
    importlib.import_module(f"llmcore.exercises.{info.name}")


def _skeleton(*args, **kwargs):
    raise NotImplementedError


def _softmax_naive(x):
    return x.exp() / x.exp().sum(-1, keepdim=True)  # overflows on large logits


def _softmax_in_place(x):
    x -= x.max(-1, keepdim=True).values
    x.exp_()
    return x.div_(x.sum(-1, keepdim=True))


def _draws_global_rng(probs, n, seed):
    torch.manual_seed(seed)  # reproducible, but clobbers the caller's global generator
    return torch.multinomial(probs, n, replacement=True).tolist()


def _draws_unseeded(probs, n, seed):
    return torch.multinomial(probs, n, replacement=True).tolist()


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch00.check_weights_gib": (
        lambda n, dt: n * dt.itemsize / 2**30,
        [lambda n, dt: n * dt.itemsize / 1e9, lambda n, dt: n * 4 / 2**30]),
    "ch00.check_stable_softmax": (
        lambda x: torch.softmax(x, -1),
        [_softmax_naive, _softmax_in_place, lambda x: torch.softmax(x, 0)]),
    "ch00.check_seeded_draws": (
        lambda p, n, s: torch.multinomial(p, n, True, generator=torch.Generator().manual_seed(s)).tolist(),
        [_draws_global_rng, _draws_unseeded, lambda p, n, s: [0] * n]),
}


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
