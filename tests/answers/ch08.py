"""Answers for the chapter 08 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""


def _safe(text, stops, mode="ok"):
    if mode == "fixed":  # vLLM's conservative rule: safe, but holds back too much
        return max(0, len(text) - (max(map(len, stops), default=1) - 1))
    if mode == "first_stop":
        stops = stops[:1]
    held = 0
    for stop in stops:
        ks = [k for k in range(1, len(stop)) if text.endswith(stop[:k])]
        if ks:
            held = max(held, min(ks) if mode == "shortest" else max(ks))
    return len(text) - held


def _bytes_safe(text, stops):
    data = text.encode()
    held = max((k for s in stops for k in range(1, len(s.encode()))
                if data.endswith(s.encode()[:k])), default=0)
    return len(data) - held


def _reply_end(draws, stop_ids, min_tokens, max_tokens, mode="ok"):
    for n, token in enumerate(draws, 1):
        if mode == "length_first" and n >= max_tokens:
            return n, "length", None
        may_stop = n >= min_tokens if mode == "min_off_by_one" else n > min_tokens
        if mode == "no_min_tokens":
            may_stop = True
        if token in stop_ids and may_stop:
            if mode == "stop_not_counted":
                return n - 1, "stop", token
            return n, "stop", None if mode == "no_stop_reason" else token
        if n >= max_tokens:
            return n, "length", None
    return len(draws), None, None


def _bill(usages, pin, pout, mode="ok"):
    if mode == "swapped":
        pin, pout = pout, pin
    if mode == "total_at_input":
        return sum(u.total_tokens for u in usages) * pin / 1e6
    total = sum(u.prompt_tokens * pin + u.completion_tokens * pout for u in usages)
    return total / (1e3 if mode == "per_thousand" else 1e6)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch08.check_safe_release": (
        _safe,
        [lambda t, s: _safe(t, s, "fixed"), lambda t, s: _safe(t, s, "first_stop"),
         lambda t, s: _safe(t, s, "shortest"), _bytes_safe, lambda t, s: len(t)]),
    "ch08.check_reply_end": (
        _reply_end,
        [lambda d, s, m, x, mode=mode: _reply_end(d, s, m, x, mode)
         for mode in ("length_first", "min_off_by_one", "no_min_tokens",
                      "stop_not_counted", "no_stop_reason")]),
    "ch08.check_bill": (
        _bill,
        [lambda u, a, b, mode=mode: _bill(u, a, b, mode)
         for mode in ("swapped", "total_at_input", "per_thousand")]),
    # "</answer>" (9 characters) is the longest stop string: 8 held back of 40
    "ch08.check_q_released": (32, [31, 39, 40, 38, 8]),
    # 100 + 250 + 400 + 550
    "ch08.check_q_prompt_tokens": (
        1300,
        [400,     # nothing re-sent: only each turn's new text
         1000,    # the replies not re-sent: 100 + 200 + 300 + 400
         1500,    # the current reply counted too
         600]),   # prompt plus replies of one pass, no history
}
