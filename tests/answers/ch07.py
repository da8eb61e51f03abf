"""Answers for the chapter 07 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""
import torch


def _top_p(logits, temperature, top_p, order="temperature_first", crossing=True,
           renormalise=True, inplace=False, ties=True):
    if inplace:
        logits /= temperature
        z = logits
    else:
        z = logits / temperature
    probs = z.softmax(-1) if order == "temperature_first" else logits.softmax(-1)
    sorted_probs, idx = probs.sort(descending=True)
    cum = sorted_probs.cumsum(-1)
    keep_sorted = (cum - sorted_probs) < top_p if crossing else cum <= top_p
    keep_sorted[0] = True
    if ties:  # every token as likely as the least likely one kept
        keep = probs >= sorted_probs[keep_sorted][-1]
    else:  # which of two equal tokens survives depends on the sort
        keep = torch.zeros_like(keep_sorted).scatter(0, idx, keep_sorted)
    if order == "top_p_first":  # filters the T = 1 distribution, then applies T
        probs = torch.where(keep, (logits / temperature).softmax(-1),
                            torch.zeros_like(probs))
    else:
        probs = torch.where(keep, probs, torch.zeros_like(probs))
    return probs / probs.sum() if renormalise else probs


def _penalty(logits, seen, penalty, mode="ok"):
    out = logits if mode == "inplace" else logits.clone()
    ids = list(seen) if mode == "per_occurrence" else sorted(set(seen))
    for i in ids:
        if mode == "divide_all":
            out[i] = out[i] / penalty
        else:
            out[i] = out[i] / penalty if out[i] > 0 else out[i] * penalty
    return out


def _distinct(completions, n, mode="ok"):
    if mode == "joined":  # n-grams across completion boundaries
        completions = [[t for c in completions for t in c]]
    grams = [tuple(c[i:i + n]) for c in completions for i in range(len(c) - n + 1)]
    if mode == "per_completion":
        scores = [len(set(tuple(c[i:i + n]) for i in range(len(c) - n + 1)))
                  / max(1, len(c) - n + 1) for c in completions]
        return sum(scores) / len(scores)
    return len(set(grams)) / len(grams) if grams else 0.0


def _viable(text, lo, hi, mode="ok"):
    neg, digits = text.startswith("-"), text.lstrip("-")
    if mode != "zeros" and digits.startswith("0"):
        return digits == "0" and not neg and (lo is None or lo <= 0) and (
            hi is None or hi >= 0)
    if mode == "value":  # only the number written so far, never its extensions
        value = -int(digits) if digits else -1
        return (lo is None or lo <= value) and (hi is None or value <= hi)
    for k in range(0, 25):
        if digits:
            low, high = int(digits) * 10**k, (int(digits) + 1) * 10**k - 1
        elif k:
            low, high = 10 ** (k - 1), 10**k - 1
        else:
            continue
        if neg and mode != "sign":
            low, high = -high, -low
        if (lo is None or high >= lo) and (hi is None or low <= hi):
            return True
    return False


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch07.check_temperature_top_p": (
        _top_p,
        [lambda z, t, p: _top_p(z, t, p, order="top_p_first"),
         lambda z, t, p: _top_p(z, t, p, crossing=False),
         lambda z, t, p: _top_p(z, t, p, renormalise=False),
         lambda z, t, p: _top_p(z, t, p, inplace=True),
         lambda z, t, p: _top_p(z, t, p, ties=False)]),
    "ch07.check_repetition_penalty": (
        _penalty,
        [lambda z, s, p: _penalty(z, s, p, "divide_all"),
         lambda z, s, p: _penalty(z, s, p, "per_occurrence"),
         lambda z, s, p: _penalty(z, s, p, "inplace")]),
    "ch07.check_int_viable": (
        _viable,
        [lambda t, lo, hi: _viable(t, lo, hi, "zeros"),
         lambda t, lo, hi: _viable(t, lo, hi, "value"),
         lambda t, lo, hi: _viable(t, lo, hi, "sign")]),
    "ch07.check_distinct_n": (
        _distinct,
        [lambda c, n: _distinct(c, n, "joined"),
         lambda c, n: _distinct(c, n, "per_completion")]),
    # three tokens kept (0.85); 0.5 renormalised by 0.85
    "ch07.check_q_top_p": (
        0.5 / 0.85,
        [0.5,          # not renormalised
         0.5 / 0.7,    # two tokens kept (stops before reaching p)
         0.5 / 0.8,    # divided by p
         0.5 / 0.95]), # four tokens kept
    # softmax of (4, 2): 1 / (1 + e^-2)
    "ch07.check_q_temperature": (
        0.8808,
        [0.7311,       # temperature ignored (T = 1)
         0.6225,       # logits multiplied by T (T = 2)
         2 / 3,        # logits divided by their sum, no exponential
         0.5]),        # as if T made them equal
}
