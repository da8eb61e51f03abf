"""Checkers for the exercises of chapter 00 (how to use this book). Hand-written."""
from __future__ import annotations

from typing import Callable

import torch

from . import (Verdict, approx_equal, checker, number_question, register_questions,
               report, run_checks)


def _device_checks(fn: Callable) -> list[tuple[str, Callable[[], bool]]]:
    """(what must hold, test) for choose_device(preferred, env, available)."""
    def gives(preferred, env, available, expected) -> Callable[[], bool]:
        return lambda: fn(preferred, env, list(available)) == expected

    def raises(preferred, env, available, error) -> Callable[[], bool]:
        def test() -> bool:
            try:
                fn(preferred, env, list(available))
            except NotImplementedError:
                raise  # the skeleton: "not attempted"
            except error:
                return True
            except Exception:
                return False
            return False
        return test

    gpu, mac, cpu = ["cuda", "cpu"], ["mps", "cpu"], ["cpu"]
    return [
        ("nothing asked for on a CUDA machine: 'cuda'", gives(None, "", gpu, "cuda")),
        ("nothing asked for on a Mac: 'mps'", gives(None, "", mac, "mps")),
        ("nothing asked for, CPU only: 'cpu'", gives(None, "", cpu, "cpu")),
        ("LLMCORE_DEVICE=cpu on a CUDA machine: 'cpu' (the variable overrides the "
         "fastest device)", gives(None, "cpu", gpu, "cpu")),
        ("preferred='cuda' with LLMCORE_DEVICE=cpu: 'cuda' (the argument beats the "
         "variable)", gives("cuda", "cpu", gpu, "cuda")),
        ("LLMCORE_DEVICE=cuda:1 on a CUDA machine: 'cuda:1' (the index is kept)",
         gives(None, "cuda:1", gpu, "cuda:1")),
        ("LLMCORE_DEVICE=tpu must raise ValueError: not a device llmcore supports",
         raises(None, "tpu", cpu, ValueError)),
        ("LLMCORE_DEVICE=cuda on a CPU-only machine must raise RuntimeError, not fall "
         "back to the CPU", raises(None, "cuda", cpu, RuntimeError)),
        ("preferred='mps' on a CUDA machine must raise RuntimeError",
         raises("mps", "", gpu, RuntimeError)),
    ]


@checker
def check_choose_device(fn: Callable) -> Verdict:
    """`fn(preferred, env, available)` -> the device pick_device would choose, as a
    string; ValueError for an unknown name, RuntimeError for a device the machine
    lacks."""
    return report(run_checks("Exercise 0.1 (choose_device)", _device_checks(fn)))


@checker
def check_stable_softmax(fn: Callable) -> Verdict:
    """`fn(logits)` -> softmax over the last dim, finite for huge logits, input left
    unchanged."""
    def matches(logits: torch.Tensor) -> Callable[[], bool]:
        def test() -> bool:
            got = fn(logits.clone())
            return isinstance(got, torch.Tensor) and approx_equal(
                got, torch.softmax(logits, -1), 1e-5, 1e-6)
        return test

    def input_unchanged() -> bool:
        logits = torch.tensor([3.0, 1.0, 2.0])
        fn(logits)
        return torch.equal(logits, torch.tensor([3.0, 1.0, 2.0]))

    return report(run_checks("Exercise 0.2 (stable_softmax)", [
        ("softmax([0, 0]) must be [0.5, 0.5]", matches(torch.tensor([0.0, 0.0]))),
        ("softmax([1, 2, 3]) must match torch.softmax",
         matches(torch.tensor([1.0, 2.0, 3.0]))),
        ("softmax([1000, 1001, 1002]) must be finite and equal softmax([0, 1, 2]): "
         "subtract the maximum before exp()",
         matches(torch.tensor([1000.0, 1001.0, 1002.0]))),
        ("a 2-D input must be normalized along its last dimension",
         matches(torch.tensor([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]]))),
        ("the input tensor must not be modified in place", input_unchanged),
    ]))


@checker
def check_seeded_draws(fn: Callable) -> Verdict:
    """`fn(probs, n, seed)` -> n ints, reproducible per seed, independent of the global
    RNG."""
    probs = torch.tensor([0.7, 0.2, 0.1])
    uniform = torch.full((10,), 0.1)

    def same_seed_same_list():
        return list(fn(probs, 50, 7)) == list(fn(probs, 50, 7))

    def global_rng_cannot_disturb():
        torch.manual_seed(1)
        first = list(fn(uniform, 50, 3))
        torch.manual_seed(2)
        torch.rand(100)
        return first == list(fn(uniform, 50, 3))

    def global_rng_left_alone():
        state = torch.get_rng_state()
        fn(uniform, 20, 5)
        return torch.equal(state, torch.get_rng_state())

    def different_seeds_differ():
        return list(fn(uniform, 50, 1)) != list(fn(uniform, 50, 2))

    def follows_probs():
        draws = list(fn(probs, 4000, 0))
        freq = [draws.count(i) / len(draws) for i in range(3)]
        return len(draws) == 4000 and all(abs(f - p) < 0.04
                                          for f, p in zip(freq, probs.tolist()))

    def ints_in_range():
        draws = list(fn(uniform, 30, 9))
        return all(isinstance(d, int) and 0 <= d < 10 for d in draws)

    return report(run_checks("Exercise 0.3 (seeded_draws)", [
        ("the same seed must give the same list", same_seed_same_list),
        ("draws must not depend on torch's global generator (use a torch.Generator)",
         global_rng_cannot_disturb),
        ("the function must not change torch's global generator state",
         global_rng_left_alone),
        ("different seeds should give different draws", different_seeds_differ),
        ("frequencies of 4,000 draws must follow probs within 0.04", follows_probs),
        ("draws must be Python ints in range(len(probs))", ints_in_range),
    ]))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# from the chapter's own numbers, never typed into the notebook.
_GPU_BYTES_PER_S = 2e12  # the question's GPU: 2 TB/s
_PARAMS_8B = 8e9
# Question 0.1: decode reads every weight once per token, 2 bytes each in bfloat16
check_q_decode_ceiling = number_question(
    "Question 0.1 (decode ceiling)",
    _GPU_BYTES_PER_S / (_PARAMS_8B * torch.bfloat16.itemsize), rel=0.05)

register_questions(globals())
