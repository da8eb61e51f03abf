"""Answers for the chapter 09 checkers: one correct, several wrong (used by tests/test_exercises.py)."""


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


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch09.check_static_steps": (
        _static,
        [lambda lengths, batch: -(-sum(lengths) // batch),          # as if batches never idled
         lambda lengths, batch: max(lengths) * -(-len(lengths) // batch)]),  # every batch as long as the longest
    "ch09.check_continuous_steps": (
        _continuous,
        [lambda lengths, batch: _continuous(lengths, batch, refill=False),  # that is static batching
         lambda lengths, batch: max(max(lengths), -(-sum(lengths) // batch))]),  # a bound, not the schedule
    "ch09.check_blocks_needed": (
        lambda p, m, bs: -(-(p + m) // bs),
        [lambda p, m, bs: (p + m) // bs,                 # rounds down
         lambda p, m, bs: -(-p // bs),                   # forgot the output tokens
         lambda p, m, bs: (p + m) / bs]),                # not a whole number of blocks
}
