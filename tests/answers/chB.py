"""Answers for the appendix B checkers: one correct, several wrong (tests/test_exercises.py)."""
import torch


def _stack(weights, biases, dim=0, order=1, zero_bias=False):
    weight = torch.cat(weights[::order], dim=dim)
    if biases[0] is None:
        return weight, (torch.zeros(weight.shape[0]) if zero_bias else None)
    return weight, torch.cat(biases[::order])


def _attend(q, keys, values, layout="grouped", scale=True):
    n_heads, hd = q.shape
    n_kv = keys.shape[0]
    if layout == "grouped":
        kv_of = [j // (n_heads // n_kv) for j in range(n_heads)]
    else:  # interleaved: the wrong repeat
        kv_of = [j % n_kv for j in range(n_heads)]
    k, v = keys[kv_of], values[kv_of]                       # (n_heads, slots, hd)
    scores = (q[:, None] * k).sum(-1) * (hd ** -0.5 if scale else 1.0)
    return (scores.softmax(-1)[..., None] * v).sum(-2)


def _slots(position, window, clamp=True, own=False, off=0):
    stop = position + 1 if own else position
    if window is None:
        return 0, stop
    start = position + 1 - window + off
    return (max(0, start) if clamp else start), stop


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "chB.check_stack_weights": (
        _stack,
        [lambda w, b: _stack(w, b, dim=1),                     # side by side in columns
         lambda w, b: _stack(w, b, order=-1),                  # layers in reverse order
         lambda w, b: _stack(w, b, zero_bias=True)]),          # a zero bias instead of None
    "chB.check_attend_one_query": (
        _attend,
        [lambda q, k, v: _attend(q, k, v, layout="interleaved"),
         lambda q, k, v: _attend(q, k, v, scale=False)]),
    "chB.check_slots_attended": (
        _slots,
        [lambda p, w: _slots(p, w, clamp=False),               # negative slots
         lambda p, w: _slots(p, w, own=True),                  # reads its own slot
         lambda p, w: _slots(p, w, off=-1)]),                  # one slot too many
    "chB.check_q_step_floor": (9.0, [18.0,      # float32's bytes
                                     4.5,       # halved twice
                                     0.009,     # seconds, not ms
                                     9000.0,    # microseconds
                                     111.0]),   # tokens per second
    "chB.check_q_verify_reads": (2, [5,         # once per row
                                     4,         # k rows, not k + 1
                                     1,         # all rows in one read
                                     5 / 3]),   # no rounding up
}
