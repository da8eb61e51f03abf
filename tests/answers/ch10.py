"""Answers for the chapter 10 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""


def _read_top_k(body, vocab_size, mode="ok"):
    from llmcore.api import APIError
    value = body.get("top_k")
    if value is None and not (mode == "null_refused" and "top_k" in body):
        return 0
    ok_type = (isinstance(value, int) if mode == "bool_passes"
               else isinstance(value, (int, float)) if mode == "float_passes"
               else type(value) is int)
    upper = 10**30 if mode == "no_upper_bound" else vocab_size
    lower = 0 if mode == "minus_one_refused" else -1
    if not ok_type or not lower <= value <= upper:
        raise APIError(400, "bad top_k", param="top_k")
    if mode == "minus_one_kept":
        return value
    return max(int(value), 0)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch10.check_read_top_k": (
        _read_top_k,
        [lambda body, v, mode=mode: _read_top_k(body, v, mode)
         for mode in ("null_refused", "bool_passes", "float_passes", "no_upper_bound",
                      "minus_one_refused", "minus_one_kept")]
        + [lambda body, v: max(int(body.get("top_k") or 0), 0)]),  # no checks at all
}
