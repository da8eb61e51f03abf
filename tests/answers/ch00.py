"""Answers for the chapter 00 checkers: one correct, several wrong (used by tests/test_exercises.py)."""
import torch


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
