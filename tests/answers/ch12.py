"""Answers for the chapter 12 checkers: one correct, several wrong (used by tests/test_exercises.py)."""
from llmcore.exercises.ch12 import _kept, _replay, _ttft


def _kept_skipping(lengths, budget, pinned):  # keeps looking past a message that does not fit
    kept, used = [], sum(lengths[:pinned])
    for i in range(len(lengths) - 1, pinned - 1, -1):
        if used + lengths[i] <= budget:
            kept.append(i)
            used += lengths[i]
    return list(range(pinned)) + kept[::-1]


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch12.check_replay_input_tokens": (
        _replay,
        [lambda s, q, a, n: s + n * (q + a),                     # billed only the last turn
         lambda s, q, a, n: n * s + n * q + (n - 1) * a,         # as if only new messages were sent
         lambda s, q, a, n: sum(s + t * (q + a) for t in range(1, n + 1))]),  # counted the answer being written
    "ch12.check_kept_messages": (
        _kept,
        [_kept_skipping,
         lambda lengths, budget, pinned: _kept(lengths, budget, 0),           # forgot the pinned messages
         lambda lengths, budget, pinned: _kept(lengths, budget, pinned)[::-1]]),  # newest first
    "ch12.check_ttft_estimate": (
        _ttft,
        [lambda p, s, bs, c, o: o + c * (p - s),                             # partial blocks and the last token
         lambda p, s, bs, c, o: o + c * (p - min(s, p - 1)),                  # partial blocks reused
         lambda p, s, bs, c, o: o + c * (p - s // bs * bs)]),                 # may reuse the last token
}

# Question 12.1: (8,192 - 512 - 700) // 400 whole turns
ANSWERS["ch12.check_q_turns_that_fit"] = (
    17, [18, 19, 20, 17.45, 15])  # rounded up; no answer room; nothing pinned; a fraction
# Question 12.2: 17,805, a quarter of the 30-turn bill (it grows with the square)
ANSWERS["ch12.check_q_replay_15_turns"] = (
    17805, [71385 / 2, 71385, 15 * (53 + 21 + 138), 15 * 53 + 15 * 21 + 14 * 138])

