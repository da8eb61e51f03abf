"""Answers for the appendix A checkers: one correct, several wrong (used by
tests/test_exercises.py)."""
import math


def _windows(n_ids, seq_len, stride, mode="ok"):
    n_targets = n_ids if mode == "targets_off_by_one" else n_ids - 1
    windows, scored = [], 0
    while scored < n_targets:
        first_window = scored == 0 and mode != "stride_first"
        end = min(scored + (seq_len if first_window else stride), n_targets)
        if mode == "short_last":  # keeps seq_len - stride of context, even at the end
            start = max(0, scored - (seq_len - stride))
        else:
            start = max(0, end - seq_len)
        windows.append((start, end, 0 if mode == "double_count" else scored - start))
        scored = end
    return windows


def _schedule(step, steps, peak, warmup, min_ratio):
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup)
    cosine = 0.5 * (1 + math.cos(math.pi * progress))
    return peak * (min_ratio + (1 - min_ratio) * cosine)


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


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "chA.check_score_windows": (
        _windows,
        [lambda n, s, k, mode=mode: _windows(n, s, k, mode)
         for mode in ("double_count", "short_last", "stride_first",
                      "targets_off_by_one")]),
    "chA.check_schedule": (
        _schedule, [_schedule_decays_to_zero, _schedule_warmup_from_zero,
                    lambda step, steps, peak, warmup, min_ratio: peak]),
    "chA.check_heldout_modules": (
        lambda modules, every: set(sorted(set(modules))[::every]),
        [lambda modules, every: set(modules[::every]),                   # not sorted
         lambda modules, every: set(sorted(modules)[every - 1::every]),  # starts late
         _heldout_in_place]),
    "chA.check_q_bits_per_byte": (1.11, [4.0 / 5.2,                    # no ln 2
                                         4.0 / math.log(2),            # bits per token
                                         4.0 * math.log(2) / 5.2,      # times ln 2
                                         4.0 * 5.2 / math.log(2)]),    # times the bytes
    "chA.check_q_overlap_cost": (1.75, [2.0,     # every window scores only the stride
                                        1.0,     # the same windows
                                        1.5,     # one window short
                                        7.0]),   # windows, not a ratio
}
