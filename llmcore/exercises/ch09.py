"""Checkers for the exercises of chapter 09 (continuous batching). Hand-written."""
from __future__ import annotations

from typing import Callable

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases)


def _static(lengths, batch):
    return sum(max(lengths[i:i + batch]) for i in range(0, len(lengths), batch))


def _continuous(lengths, batch):
    queue, running, steps = list(lengths), [], 0
    while queue or running:
        while queue and len(running) < batch:
            running.append(queue.pop(0))
        running = [left - 1 for left in running if left > 1]
        steps += 1
    return steps


_WORKLOADS = [([5, 3, 8, 1], 2), ([100, 1, 1, 1] * 4, 4), ([4] * 8, 4), ([7], 3),
              ([2, 9, 4, 4, 1, 6, 3], 3), ([1, 1, 1, 1, 1], 1),
              ([10, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2)]


@checker
def check_static_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of static batching (each batch runs to its
    longest)."""
    cases = [Case((list(lengths), batch), _static(lengths, batch))
             for lengths, batch in _WORKLOADS]
    return report(run_cases(
        "Exercise 9.1 (static_steps)", fn, cases, compare=lambda got, exp: got == exp,
        hint="cut the list into consecutive groups of `batch`; each group costs its "
             "longest request (the last group may be smaller)."))


@checker
def check_continuous_steps(fn: Callable) -> Verdict:
    """`fn(lengths, batch)` -> decode steps of continuous batching (slots refilled every
    step)."""
    cases = [Case((list(lengths), batch), _continuous(lengths, batch))
             for lengths, batch in _WORKLOADS]
    return report(run_cases(
        "Exercise 9.2 (continuous_steps)", fn, cases,
        compare=lambda got, exp: got == exp,
        hint="simulate: fill free slots from the front of the queue, advance every "
             "running request by one step, drop the finished ones, count the steps."))


def _admit(waiting, running, num_free, max_batch, block_size):
    """How many requests the Scheduler admits from the front of the queue (reserve
    admission)."""
    free = num_free - sum(need - taken for need, taken in running)
    admitted = 0
    for prompt_len, max_tokens in waiting:
        need = -(-(prompt_len + max_tokens) // block_size)
        if len(running) + admitted >= max_batch or need > free:
            break
        free -= need
        admitted += 1
    return admitted


@checker
def check_admit(fn: Callable) -> Verdict:
    """`fn(waiting, running, num_free, max_batch, block_size)` -> how many waiting
    requests, from the front, one engine step admits."""
    args = [
        ([(10, 6)], [], 10, 4, 16),                    # 16 tokens: one block
        ([(10, 7)], [], 1, 4, 16),                     # 17 tokens need 2 blocks
        ([(4, 4)] * 5, [(1, 1), (1, 1)], 100, 4, 16),  # 2 slots left in the batch
        ([(100, 100), (4, 4)], [], 10, 8, 16),         # first come, first served
        ([(20, 12)], [(4, 1), (3, 3)], 4, 8, 16),      # 3 free blocks are promised
        ([(16, 16)] * 3, [], 5, 8, 16),                # each admission uses blocks
        ([(3, 5), (1, 1)], [(10, 4)], 20, 3, 1),
        ([], [(2, 2)], 50, 4, 16),                     # nothing waits
    ]
    cases = [Case((list(w), list(r), f, b, s), _admit(w, r, f, b, s))
             for w, r, f, b, s in args]
    return report(run_cases(
        "Exercise 9.3 (admit)", fn, cases,
        compare=lambda got, exp: type(got) is int and got == exp,
        hint="free = num_free minus what running requests were promised but have not "
             "taken; then, from the front of the queue, admit while the batch has a "
             "slot and the request's ceil((prompt_len + max_tokens) / block_size) "
             "blocks fit; stop at the first that does not (no later request may "
             "pass it)."))


def _raises(error: type[Exception], call: Callable) -> Callable:
    """`call` on a fresh copy of its list argument; a raised `error` becomes the text
    "raises <name>", a list or tuple it returns a list."""
    def run(items, *rest):
        try:
            got = call(list(items), *rest)
        except NotImplementedError:  # a RuntimeError too: the skeleton, not an answer
            raise
        except error:
            return f"raises {error.__name__}"
        return list(got) if isinstance(got, (list, tuple)) else got
    return run


@checker
def check_schedule_step(fn: Callable) -> Verdict:
    """`fn(needs, budget)` -> the tokens each request computes in one step (chunked
    prefill), as llmcore.scheduler.split_budget; ValueError when the decodes do not
    fit."""
    from llmcore.scheduler import split_budget as schedule

    args = [
        ([1, 1, 1], 8),              # decodes only
        ([1, 900, 1], 64),           # the decodes first, the prompt gets the rest
        ([300, 200, 1], 100),        # the oldest prompt first
        ([40, 30, 1, 1], 50),        # the next prompt takes what the first leaves
        ([5, 3, 1], 100),            # everything fits
        ([12, 1], 3),                # a chunk of 2
        ([900, 1], None),            # no budget: everything
        ([1, 1], 2),                 # exactly the decodes
        ([1, 1, 1], 2),              # too small for the decodes: ValueError
        ([], 16),
    ]
    cases = [Case((list(needs), budget), _raises(ValueError, schedule)(needs, budget))
             for needs, budget in args]
    return report(run_cases(
        "Exercise 9.4 (schedule_step)", _raises(ValueError, fn), cases,
        compare=lambda got, exp: got == exp,
        hint="with no budget return needs as they are; else give every decoding "
             "request (need 1) its token first, raise ValueError if the budget cannot "
             "cover them, then walk the prefilling requests oldest first, each taking "
             "min(need, what is left)."))


def _preempt(running, free):
    running, preempted = list(running), []
    while sum(new for _, _, new in running) > free:
        if len(running) == 1:
            raise RuntimeError("even the oldest request alone does not fit")
        request_id, held, _ = running.pop()  # the most recently admitted
        free += held
        preempted.append(request_id)
    return preempted


@checker
def check_preempt(fn: Callable) -> Verdict:
    """`fn(running, free)` -> the ids preempted, newest first, until the new blocks of
    the requests left fit in the free ones; RuntimeError if the oldest alone does not
    fit."""
    args = [
        ([("a", 3, 1), ("b", 2, 1)], 2),              # fits exactly: nobody
        ([("a", 3, 1), ("b", 2, 1)], 1),              # the newest goes
        ([("a", 4, 1), ("b", 1, 1), ("c", 5, 1)], 0),  # its 5 blocks cover the rest
        ([("a", 2, 1), ("b", 2, 2), ("c", 1, 1)], 1),  # newest, not the neediest
        ([("a", 1, 1), ("b", 1, 1), ("c", 1, 1)], 0),  # two go; the oldest stays
        ([("a", 1, 2), ("b", 1, 1)], 2),
        ([("a", 1, 3), ("b", 2, 1)], 1),              # a fits once b's blocks are back
        ([("a", 1, 4), ("b", 2, 1)], 1),              # a alone needs 4, 3 are free
        ([("a", 6, 3)], 2),                           # one request that cannot fit
        ([("x", 1, 1), ("y", 1, 0), ("z", 3, 0)], 0),  # z needs nothing, holds 3
        ([], 5),
    ]
    cases = [Case((list(running), free), _raises(RuntimeError, _preempt)(running, free))
             for running, free in args]
    return report(run_cases(
        "Exercise 9.5 (preempt)", _raises(RuntimeError, fn), cases,
        compare=lambda got, exp: got == exp,
        hint="loop while the new blocks of the requests still running exceed free: "
             "take the last of them (the most recently admitted, whatever it needs), "
             "add its held blocks to free, drop its new blocks from the sum; when only "
             "one is left and it still does not fit, raise RuntimeError."))


def _shared_blocks(first, second, block_size):
    common = 0
    while (common < min(len(first), len(second))
           and first[common] == second[common]):
        common += 1
    return min(common // block_size, len(first) // block_size,
               (len(second) - 1) // block_size)


@checker
def check_shared_blocks(fn: Callable) -> Verdict:
    """`fn(first, second, block_size)` -> how many of second's KV blocks a prefix cache
    holding first's full prompt blocks gives it."""
    a = list(range(10, 22))  # three blocks of 4
    args = [
        (a[:10], a[:10], 4),                      # the same prompt: 2 full blocks
        (a[:8], a[:8], 4),                        # the 2nd block holds the last token
        (a[:8], a[:8] + [40, 41, 42, 43, 44], 4),  # a longer second prompt
        (a, a[:9], 4),                            # second is a prefix of first
        (a, a[:8], 4),
        (a, a[:7] + [50] + a[8:], 4),             # differs in block 2's last token
        (a, [9] + a[1:], 4),                      # differs in the first token
        (a[:6], a[:6] + [40, 41, 42, 43, 44, 45], 4),  # first's 2nd block was partial
        (a[:7], a[:6] + [40, 41, 42, 43, 44, 45], 4),  # a partial common block
        (a, [9, 9, 9, 9] + a[4:], 4),             # blocks 2 and 3 equal, block 1 not
        (a, a + [7], 16),                         # no full block at all
        (a[:5], a[:5], 1),                        # block size 1: all but the last
        (a, a[:1], 4),                            # a one-token prompt
    ]
    cases = [Case((list(f), list(s), bs), _shared_blocks(f, s, bs))
             for f, s, bs in args]
    return report(run_cases(
        "Exercise 9.6 (shared_blocks)", fn, cases,
        compare=lambda got, exp: type(got) is int and got == exp,
        hint="count the tokens the two prompts share from the start; only whole "
             "blocks of that prefix match (a block's hash chains every block before "
             "it), only blocks first filled completely, and second looks up only "
             "(len(second) - 1) // block_size blocks: its last token is always "
             "computed."))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# never typed into the notebook.
# Question 9.1: continuous batching of 4 slots; the second long request waits for a slot
check_q_continuous_steps = number_question(
    "Question 9.1 (continuous steps)", _continuous([30, 2, 2, 2, 2, 2, 2, 30], 4),
    rel=0.01)
# Question 9.2: the chapter's chunked-prefill run: a budget of 64 tokens per step, 16
# requests decoding, a 900-token prompt prefilled in chunks of what the decodes leave
_BUDGET, _DECODES, _LONG_PROMPT = 64, 16, 900
check_q_prefill_steps = number_question(
    "Question 9.2 (prefill steps)", -(-_LONG_PROMPT // (_BUDGET - _DECODES)), rel=0.01)
# Question 9.3: reserve admission in a pool of 200 blocks of 16 tokens; each request has
# a 200-token prompt and max_tokens=1000, so it reserves ceil(1200 / 16) = 75 blocks
check_q_reserved_requests = number_question(
    "Question 9.3 (reserved requests)", 200 // -(-(200 + 1000) // 16), rel=0.01)

register_questions(globals())
