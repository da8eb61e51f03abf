"""Answers for the appendix A checkers: one correct, several wrong (used by tests/test_exercises.py)."""
import math


def _schedule(step, steps, peak, warmup, min_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _schedule_decays_to_zero(step, steps, peak, warmup, min_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    return peak * 0.5 * (1 + math.cos(math.pi * progress))


def _schedule_warmup_from_zero(step, steps, peak, warmup, min_ratio):
    if step < warmup:
        return peak * step / warmup
    return _schedule(step, steps, peak, warmup, min_ratio)


def _heldout_in_place(modules, every):
    modules.sort()
    return set(modules[::every])


ANSWERS = {
    "chA.check_bits_per_byte": (
        lambda ce, n_tok, n_bytes: ce * n_tok / (n_bytes * math.log(2)),
        [lambda ce, n_tok, n_bytes: ce * n_tok / n_bytes,               # forgot ln 2
         lambda ce, n_tok, n_bytes: ce / math.log(2),                   # bits per token, not per byte
         lambda ce, n_tok, n_bytes: ce * n_bytes / (n_tok * math.log(2))]),
    "chA.check_schedule": (
        _schedule, [_schedule_decays_to_zero, _schedule_warmup_from_zero,
                    lambda step, steps, peak, warmup, min_ratio: peak]),
    "chA.check_heldout_modules": (
        lambda modules, every: set(sorted(set(modules))[::every]),
        [lambda modules, every: set(modules[::every]),                  # not sorted
         lambda modules, every: set(sorted(modules)[every - 1::every]),  # starts at the every-th
         _heldout_in_place]),
}
