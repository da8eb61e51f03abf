"""Answers for the chapter 04 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""
import math

import torch


def _attention(q, k, v, scale=True, diagonal=0, softmax_dim=-1):
    seq = q.shape[-2]
    scores = q @ k.transpose(-2, -1)
    if scale:
        scores = scores / math.sqrt(q.shape[-1])
    allowed = torch.ones(seq, seq, dtype=torch.bool).tril(diagonal=diagonal)
    scores = scores.masked_fill(~allowed, float("-inf"))
    return torch.softmax(scores, dim=softmax_dim).nan_to_num() @ v


def _attention_no_mask(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def _mask(lengths, total, sliding_window=None, mode="ok"):
    i = torch.arange(total)[:, None]
    j = torch.arange(total)[None, :]
    allowed = (j <= i).expand(len(lengths), total, total)
    if sliding_window is not None:
        window = (i - j <= sliding_window) if mode == "window_off_by_one" else (
            i - j < sliding_window)
        allowed = allowed & window
    if mode == "right_padding":
        real = torch.tensor([[1] * n + [0] * (total - n) for n in lengths]).bool()
    else:
        real = torch.tensor([[0] * (total - n) + [1] * n for n in lengths]).bool()
    if mode != "causal_only":
        allowed = allowed & real[:, None, :]
    if mode != "empty_rows":
        allowed = allowed | ~allowed.any(dim=-1, keepdim=True)
    return allowed


def _block_parameters(dim, n_heads, n_kv_heads, hidden_dim, gqa=True, norms=True,
                      mlp_mats=3):
    head_dim = dim // n_heads
    kv = n_kv_heads if gqa else n_heads
    return (2 * dim * n_heads * head_dim + 2 * dim * kv * head_dim
            + mlp_mats * dim * hidden_dim + (2 * dim if norms else 0))


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch04.check_causal_attention": (
        _attention,
        [lambda q, k, v: _attention(q, k, v, scale=False),      # forgot 1/sqrt(d)
         lambda q, k, v: _attention(q, k, v, diagonal=1),       # sees the next token
         lambda q, k, v: _attention(q, k, v, diagonal=-1),      # cannot see itself
         lambda q, k, v: _attention(q, k, v, softmax_dim=-2),  # over the queries
         _attention_no_mask]),
    "ch04.check_repeat_kv": (
        lambda x, n: x.repeat_interleave(n, dim=1),
        [lambda x, n: x.repeat(1, n, 1, 1),                     # 0, 1, 0, 1
         lambda x, n: x.repeat_interleave(n, dim=2),            # along the sequence
         lambda x, n: x[:, :1].expand(-1, x.shape[1] * n, -1, -1)]),  # all read head 0
    "ch04.check_padded_mask": (
        _mask,
        [lambda n, t, w, mode=mode: _mask(n, t, w, mode)
         for mode in ("right_padding", "causal_only", "empty_rows",
                      "window_off_by_one")]),
    "ch04.check_block_parameters": (
        _block_parameters,
        [lambda *a: _block_parameters(*a, gqa=False),  # k, v with n_heads heads
         lambda *a: _block_parameters(*a, norms=False),  # no norm weights
         lambda *a: _block_parameters(*a, mlp_mats=2)]),  # not SwiGLU
    # 320 KiB; wrong: keys only, query heads instead of KV heads, float32, bytes
    "ch04.check_q_kv_kib": (320, [160, 2560, 640, 327680]),
    # 9.9 TFLOP; wrong: 1 FLOP per parameter, 4 per parameter, one token, GFLOP
    "ch04.check_q_prefill_tflop": (9.886, [4.94, 19.77, 0.00247, 9886]),
}
