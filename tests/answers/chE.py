"""Answers for the appendix E checkers: one correct, several wrong
(tests/test_exercises.py)."""
import torch


def _update(m, l, acc, scores, values, rescale_l=True, rescale_acc=True,
            subtract_max=True, block_max=False, guard=True, inverted=False,
            normalize=False):
    m_new = scores.max() if block_max else torch.maximum(m, scores.max())
    if guard and m_new == float("-inf"):  # nothing visible yet: keep the empty state
        return m, l, acc
    alpha = torch.exp(m_new - m) if inverted else torch.exp(m - m_new)
    if not subtract_max:  # exp(scores) as they are: overflows near 710 in float64
        alpha, p = torch.ones(()), torch.exp(scores)
    else:
        p = torch.exp(scores - m_new)
    l_new = (l * alpha if rescale_l else l) + p.sum()
    acc_new = (acc * alpha if rescale_acc else acc) + p @ values
    if normalize:  # the output normalized at each step, not the unnormalized sum
        acc_new = acc_new / l_new
    return m_new, l_new, acc_new


def _mask(q_start, k_start, block_q, block_k, seq_q, seq_k, shift=0, offset=True,
          partial_q=True, partial_k=True, invert=False, as_int=False):
    q = torch.arange(q_start, q_start + block_q)[:, None]
    k = torch.arange(k_start, k_start + block_k)[None, :]
    off = seq_k - seq_q if offset else 0
    mask = k <= q + off + shift
    if partial_q:
        mask &= q < seq_q
    if partial_k:
        mask &= k < seq_k
    mask = ~mask if invert else mask
    return mask.int() if as_int else mask


def _bytes(batch, heads, seq, head_dim, dtype_bytes, block_q, sp_trips=4,
           flash_kv_reads=None, ceil=True, o_write=True, per_batch_head=True):
    io = (3 + o_write) * seq * head_dim
    naive = io + sp_trips * seq * seq
    tiles = -(-seq // block_q) if ceil else seq // block_q
    if flash_kv_reads is not None:
        tiles = flash_kv_reads
    flash = (1 + o_write) * seq * head_dim + tiles * 2 * seq * head_dim
    scale = dtype_bytes * (batch * heads if per_batch_head else 1)
    return naive * scale, flash * scale


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "chE.check_online_softmax_update": (
        _update,
        [lambda *a: _update(*a, rescale_acc=False),  # acc not rescaled
         lambda *a: _update(*a, rescale_l=False, rescale_acc=False),  # neither
         lambda *a: _update(*a, rescale_l=False),  # acc rescaled, l not
         lambda *a: _update(*a, subtract_max=False),  # exp(scores): overflow
         lambda *a: _update(*a, block_max=True),   # the block's max, not the running
         lambda *a: _update(*a, guard=False),      # nan after a block of only -inf
         lambda *a: _update(*a, inverted=True),    # exp(m' - m), upside down
         lambda *a: _update(*a, normalize=True)]),  # acc divided by l every step
    "chE.check_tile_mask": (
        _mask,
        [lambda *a: _mask(*a, shift=-1),           # the diagonal left out (j < i)
         lambda *a: _mask(*a, shift=1),            # one key too many
         lambda *a: _mask(*a, offset=False),       # queries aligned to the start
         lambda *a: _mask(*a, partial_q=False),    # queries past seq_q kept
         lambda *a: _mask(*a, partial_q=False, partial_k=False),  # neither end
         lambda *a: _mask(*a, invert=True),        # True where masked
         lambda *a: _mask(*a, as_int=True)]),      # 0/1 integers, not booleans
    "chE.check_attention_bytes": (
        _bytes,
        [lambda *a: _bytes(*a, sp_trips=2),        # P's round trip forgotten
         lambda *a: _bytes(*a, sp_trips=3),        # S written, never read back
         lambda *a: _bytes(*a, flash_kv_reads=1),  # flash reads K and V once
         lambda *a: _bytes(*a, ceil=False),        # floor: the partial tile left out
         lambda *a: _bytes(*a, o_write=False),     # O never written
         lambda *a: _bytes(*a, per_batch_head=False),  # one head of one sequence
         lambda *a: tuple(reversed(_bytes(*a)))]),  # (flash, naive)
    "chE.check_q_score_bytes": (268435456, [134217728,   # bfloat16
                                            67108864,    # scores, not bytes
                                            256,         # MiB, not bytes
                                            536870912,   # S and P
                                            262144]),    # KiB, not bytes
    "chE.check_q_causal_tiles": (36, [64,          # the whole grid
                                      28,          # strictly below the diagonal
                                      32,          # half the grid
                                      8]),         # the diagonal only
    "chE.check_q_partitions": (32, [31,            # one fewer
                                    16384,         # tokens, not partitions
                                    512,           # the partition size
                                    64]),          # partitions of 256
}
