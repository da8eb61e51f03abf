"""Answers for the chapter 00 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""
import torch


def _choose(preferred, env, available, mode="ok"):
    if mode == "env_first":  # the variable beats the argument
        preferred = env or preferred
    else:
        preferred = preferred or env or None
    if preferred is None:
        return available[-1] if mode == "slowest" else available[0]
    kind = preferred.split(":")[0]
    if kind not in ("cuda", "mps", "cpu"):
        raise ValueError(f"{preferred!r} is not a device")
    if kind not in available:
        if mode == "fall_back":  # silently runs on the CPU
            return "cpu"
        raise (ValueError if mode == "value_error" else RuntimeError)(
            f"{preferred!r} is not on this machine")
    return kind if mode == "drop_index" else preferred


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


def _draws_private(probs, n, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.multinomial(probs, n, True, generator=gen).tolist()


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch00.check_choose_device": (
        _choose,
        [lambda p, e, a, mode=mode: _choose(p, e, a, mode)
         for mode in ("env_first", "slowest", "fall_back", "value_error", "drop_index")]),
    "ch00.check_stable_softmax": (
        lambda x: torch.softmax(x, -1),
        [_softmax_naive, _softmax_in_place, lambda x: torch.softmax(x, 0)]),
    "ch00.check_seeded_draws": (
        _draws_private,
        [_draws_global_rng, _draws_unseeded, lambda p, n, s: [0] * n]),
    # 125 tokens/s; wrong: 1 byte per weight, float32, seconds per token, GiB for GB
    "ch00.check_q_decode_ceiling": (125, [250, 62.5, 0.008, 134.2]),
}
