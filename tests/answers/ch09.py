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


def _schedule(needs, budget, mode="ok"):
    if budget is None or mode == "no_budget":
        return list(needs)
    plan = [1 if n == 1 else 0 for n in needs]
    left = budget - sum(plan)
    if left < 0 and mode != "no_raise":  # no_raise: the decodes overrun the budget
        raise ValueError("the budget cannot cover the decodes")
    if mode == "prefill_first":  # the budget walked in order, decodes included
        plan, left = [], budget
        for n in needs:
            plan.append(min(n, left))
            left -= plan[-1]
        return plan
    order = range(len(needs) - 1, -1, -1) if mode == "youngest_first" else range(
        len(needs))
    for i in order:
        if needs[i] > 1 and left > 0:
            plan[i] = min(needs[i], left)
            left -= plan[i]
    return plan


def _preempt(running, free, mode="ok"):
    original, running, preempted = list(running), list(running), []
    while True:
        need = sum(new for _, _, new in running)
        if mode == "keeps_new_blocks":  # the preempted still counted as needing theirs
            need += sum(new for rid, _, new in original if rid in preempted)
        if not (need >= free if mode == "one_too_many" else need > free):
            return preempted
        if len(running) == (2 if mode == "one_too_few" else 1):
            if mode == "no_raise":
                return preempted
            raise RuntimeError("the oldest request alone does not fit")
        if mode == "oldest":
            victim = running.pop(0)
        elif mode == "neediest":
            victim = running.pop(max(range(len(running)),
                                     key=lambda i: (running[i][2], i)))
        else:
            victim = running.pop()
        if mode != "keeps_held_blocks":
            free += victim[1]
        preempted.append(victim[0])


def _shared_blocks(first, second, block_size, mode="ok"):
    n = min(len(first), len(second))
    common = next((i for i in range(n) if first[i] != second[i]), n)
    looked_up = (len(second) - 1) // block_size
    if mode == "partial_block":  # a block counts when its tokens so far match
        return min(-(-common // block_size), looked_up)
    if mode == "no_last_token_rule":
        return min(common, len(first)) // block_size
    if mode == "skips_last_block":  # the block holding the last token, always
        return min(common // block_size, len(second) // block_size - 1)
    if mode == "independent_blocks":  # each block compared on its own, no chain
        return sum(first[i * block_size:(i + 1) * block_size]
                   == second[i * block_size:(i + 1) * block_size]
                   for i in range(min(len(first) // block_size, looked_up)))
    return min(common // block_size, len(first) // block_size, looked_up)


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
    "ch09.check_schedule_step": (
        _schedule,
        [lambda needs, budget, mode=mode: _schedule(needs, budget, mode)
         for mode in ("no_budget", "no_raise", "prefill_first", "youngest_first")]),
    "ch09.check_preempt": (
        _preempt,
        [lambda running, free, mode=mode: _preempt(running, free, mode)
         for mode in ("oldest", "neediest", "keeps_held_blocks", "keeps_new_blocks",
                      "one_too_many", "one_too_few", "no_raise")]),
    "ch09.check_shared_blocks": (
        _shared_blocks,
        [lambda first, second, block_size, mode=mode: _shared_blocks(
            first, second, block_size, mode)
         for mode in ("partial_block", "no_last_token_rule", "skips_last_block",
                      "independent_blocks")]),
    # 34 steps; wrong: both long requests from the start (30), static batching (60),
    # the long request plus one short batch (32), one request at a time (72)
    "ch09.check_q_continuous_steps": (34, [30, 60, 32, 72]),
    # 19 steps; wrong: the whole budget for the chunk (15), rounded down (18, 14), one
    # pass
    "ch09.check_q_prefill_steps": (19, [15, 18, 14, 1]),
    # 2 requests; wrong: 200 * 16 / 1200 rounded up (3), the prompt's blocks only (15),
    # what optimistic admission fits with 300-token replies (6), one
    "ch09.check_q_reserved_requests": (2, [3, 15, 6, 1]),
}
