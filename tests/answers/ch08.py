"""Answers for the chapter 08 checkers: one correct, several wrong (used by tests/test_exercises.py)."""


def _safe(text, stops, mode="ok"):
    if mode == "fixed":  # vLLM's conservative rule: safe, but holds back more than needed
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
    held = max((k for s in stops for k in range(1, len(s.encode())) if data.endswith(s.encode()[:k])), default=0)
    return len(data) - held


def _latency(start, times, mode="ok"):
    ttft = times[0] - start
    if len(times) == 1:
        return ttft, None
    if mode == "over_n":
        return ttft, (times[-1] - times[0]) / len(times)
    if mode == "from_start":
        return ttft, (times[-1] - start) / len(times)
    return ttft, (times[-1] - times[0]) / (len(times) - 1)


def _bill(usages, pin, pout, mode="ok"):
    if mode == "swapped":
        pin, pout = pout, pin
    if mode == "total_at_input":
        return sum(u.total_tokens for u in usages) * pin / 1e6
    if mode == "per_thousand":
        return sum(u.prompt_tokens * pin + u.completion_tokens * pout for u in usages) / 1e3
    return sum(u.prompt_tokens * pin + u.completion_tokens * pout for u in usages) / 1e6


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch08.check_safe_release": (
        _safe,
        [lambda t, s: _safe(t, s, "fixed"), lambda t, s: _safe(t, s, "first_stop"),
         lambda t, s: _safe(t, s, "shortest"), _bytes_safe, lambda t, s: len(t)]),
    "ch08.check_latency": (
        _latency,
        [lambda a, t: _latency(a, t, "over_n"), lambda a, t: _latency(a, t, "from_start")]),
    "ch08.check_bill": (
        _bill,
        [lambda u, a, b: _bill(u, a, b, "swapped"), lambda u, a, b: _bill(u, a, b, "total_at_input"),
         lambda u, a, b: _bill(u, a, b, "per_thousand")]),
}
