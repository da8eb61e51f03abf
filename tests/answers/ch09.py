"""Answers for the chapter 09 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""


def _static(lengths, batch):
    return sum(max(lengths[i:i + batch]) for i in range(0, len(lengths), batch))


def _continuous(lengths, batch, refill=True):
    queue, running, steps = list(lengths), [], 0
    while queue or running:
        if refill or not running:
            while queue and len(running) < batch:
                running.append(queue.pop(0))
        running = [left - 1 for left in running if left > 1]
        steps += 1
    return steps


def _admit(waiting, running, num_free, max_batch, block_size, mode="ok"):
    free = num_free
    if mode != "ignores_promises":
        free -= sum(need - taken for need, taken in running)
    admitted = 0
    for prompt_len, max_tokens in waiting:
        tokens = prompt_len if mode == "prompt_only" else prompt_len + max_tokens
        need = tokens // block_size if mode == "floor" else -(-tokens // block_size)
        if mode != "no_batch_cap" and len(running) + admitted >= max_batch:
            break
        if need > free:
            if mode == "skips_ahead":  # a later, smaller request passes the blocked one
                continue
            break
        if mode != "never_subtracts":
            free -= need
        admitted += 1
    return admitted


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
    "ch09.check_static_steps": (
        _static,
        [lambda lengths, batch: -(-sum(lengths) // batch),  # as if batches never idled
         lambda lengths, batch: max(lengths) * -(-len(lengths) // batch)]),  # longest
    "ch09.check_continuous_steps": (
        _continuous,
        [lambda lengths, batch: _continuous(lengths, batch, refill=False),  # static
         lambda lengths, batch: max(max(lengths), -(-sum(lengths) // batch))]),
    "ch09.check_admit": (
        _admit,
        [lambda w, r, f, b, s, mode=mode: _admit(w, r, f, b, s, mode)
         for mode in ("ignores_promises", "prompt_only", "floor", "no_batch_cap",
                      "skips_ahead", "never_subtracts")]),
    "ch09.check_read_top_k": (
        _read_top_k,
        [lambda body, v, mode=mode: _read_top_k(body, v, mode)
         for mode in ("null_refused", "bool_passes", "float_passes", "no_upper_bound",
                      "minus_one_refused", "minus_one_kept")]
        + [lambda body, v: max(int(body.get("top_k") or 0), 0)]),  # no checks at all
}
