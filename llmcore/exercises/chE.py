"""Checkers for the exercises of appendix E (attention kernels: the online softmax,
the masking rule of a causal tile, the bytes moved by explicit and tiled attention).
Hand-written."""
from __future__ import annotations

import math
from typing import Callable

import torch

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)

_NEG_INF = float("-inf")


def _stream(scores: list[list[float]], d: int, seed: int = 0):
    """The score blocks of one query as float64 tensors and a (block, d) block of
    values for each."""
    gen = torch.Generator().manual_seed(seed)
    blocks = [torch.tensor(b, dtype=torch.float64) for b in scores]
    values = [torch.randn(len(b), d, generator=gen, dtype=torch.float64)
              for b in scores]
    return blocks, values


def _run_online(fn: Callable, scores: list[list[float]], d: int, seed: int = 0):
    """Feed the blocks to fn in order from the empty state (m = -inf, l = 0, acc = 0);
    returns the final (m, l, acc) as float64 tensors, and the blocks and values."""
    blocks, values = _stream(scores, d, seed)
    m = torch.tensor(_NEG_INF, dtype=torch.float64)
    l = torch.tensor(0.0, dtype=torch.float64)
    acc = torch.zeros(d, dtype=torch.float64)
    for s, v in zip(blocks, values):
        m, l, acc = fn(m, l, acc, s.clone(), v.clone())
    as_t = lambda x: torch.as_tensor(x, dtype=torch.float64)  # noqa: E731
    return (as_t(m), as_t(l), as_t(acc)), blocks, values


def _online_matches(fn: Callable, scores: list[list[float]], d: int,
                    seed: int = 0) -> Callable[[], bool]:
    """After the last block: m is the largest score, l = sum exp(s - m), and
    acc / l = softmax(all scores) @ values."""
    def test() -> bool:
        (m, l, acc), blocks, values = _run_online(fn, scores, d, seed)
        s, v = torch.cat(blocks), torch.cat(values)
        want_m = s.max()
        if m.shape != () or l.shape != () or tuple(acc.shape) != (d,):
            return False
        if not torch.isfinite(l) or not torch.isfinite(acc).all():
            return False
        return (m.item() == want_m.item()
                and math.isclose(l.item(), torch.exp(s - want_m).sum().item(),
                                 rel_tol=1e-9)
                and torch.allclose(acc / l, torch.softmax(s, 0) @ v, atol=1e-9))
    return test


def _stays_empty(fn: Callable) -> bool:
    """A block of only -inf scores from the empty state keeps it empty, with no nan:
    m = -inf, l = 0, acc = 0."""
    (m, l, acc), _, _ = _run_online(fn, [[_NEG_INF, _NEG_INF, _NEG_INF]], 3)
    return (m.item() == _NEG_INF and l.item() == 0.0
            and bool((acc == 0).all()) and tuple(acc.shape) == (3,))


@checker
def check_online_softmax_update(fn: Callable) -> Verdict:
    """`fn(m, l, acc, scores, values)` -> (m', l', acc'): one step of the online
    softmax of one query over a new block of scores (block,) and values (block, d),
    acc the unnormalized sum of exp(score - m) * value."""
    name = "Exercise E.1 (online_softmax_update)"
    if not callable(fn):  # run_cases words that verdict
        return report(run_cases(name, fn, []))
    return report(run_checks(name, [
        ("one block from the empty state: m is its largest score, l = sum exp(s - m) "
         "and acc / l = softmax(scores) @ values",
         _online_matches(fn, [[0.5, 1.0, -0.3, 2.0]], 4)),
        ("three blocks, each with a larger maximum than the last: acc / l = "
         "softmax(all scores) @ values (rescale l and acc by exp(m - m'))",
         _online_matches(fn, [[0.5, 1.0, -0.3], [2.0, 0.1, 3.5], [5.0, 4.0]], 4, 1)),
        ("a block whose maximum is lower than the running one: the running maximum "
         "stays, and the new terms are taken against it",
         _online_matches(fn, [[4.0, 2.0], [-1.0, 0.5, 1.0], [3.0, 3.9]], 3, 2)),
        ("blocks with -inf (masked) scores among finite ones: a masked score adds "
         "nothing", _online_matches(fn, [[1.0, _NEG_INF, 0.5],
                                         [_NEG_INF, _NEG_INF, 2.0]], 4, 3)),
        ("a block of only -inf scores from the empty state leaves it as it was: "
         "m = -inf, l = 0, acc = 0 (no nan)", lambda: _stays_empty(fn)),
        ("a block of only -inf scores first, then a finite one: the result is the "
         "softmax over the finite scores",
         _online_matches(fn, [[_NEG_INF, _NEG_INF], [0.3, -1.2, 0.8]], 2, 4)),
        ("scores near 1000 (exp(1000) overflows): subtract the running maximum "
         "before exp", _online_matches(fn, [[1000.0, 998.0, 990.0], [1003.0, 995.0],
                                           [1001.0]], 4, 5)),
        ("blocks of one score each, the largest in the middle",
         _online_matches(fn, [[0.2], [-0.4], [1.7], [0.9], [1.1]], 1, 6)),
    ]))


def _tile_mask(q_start, k_start, block_q, block_k, seq_q, seq_k):
    q = torch.arange(q_start, q_start + block_q)[:, None]
    k = torch.arange(k_start, k_start + block_k)[None, :]
    return (k <= q + (seq_k - seq_q)) & (q < seq_q) & (k < seq_k)


def _mask_matches(fn: Callable, *args) -> Callable[[], bool]:
    def test() -> bool:
        got = torch.as_tensor(fn(*args))
        want = _tile_mask(*args)
        return (got.dtype == torch.bool and got.shape == want.shape
                and torch.equal(got, want))
    return test


@checker
def check_tile_mask(fn: Callable) -> Verdict:
    """`fn(q_start, k_start, block_q, block_k, seq_q, seq_k)` -> the boolean
    (block_q, block_k) mask of a causal tile: query i sees key j iff j <= i + seq_k -
    seq_q, i < seq_q and j < seq_k."""
    name = "Exercise E.2 (tile_mask)"
    if not callable(fn):  # run_cases words that verdict
        return report(run_cases(name, fn, []))
    return report(run_checks(name, [
        ("the diagonal tile of 8 queries and 8 keys in tiles of 4, at (0, 0): a "
         "(4, 4) bool tensor, query i sees keys 0 .. i (its own key included)",
         _mask_matches(fn, 0, 0, 4, 4, 8, 8)),
        ("the second diagonal tile, at (4, 4): the same lower triangle",
         _mask_matches(fn, 4, 4, 4, 4, 8, 8)),
        ("the tile below the diagonal, at (4, 0): every query sees every key",
         _mask_matches(fn, 4, 0, 4, 4, 8, 8)),
        ("the tile above the diagonal, at (0, 4): no query sees any key",
         _mask_matches(fn, 0, 4, 4, 4, 8, 8)),
        ("4 queries that are the last of 10 keys (offset 6), keys 4 .. 7: query i "
         "sees key j when j <= i + 6", _mask_matches(fn, 0, 4, 4, 4, 4, 10)),
        ("6 queries and 6 keys in tiles of 4, at (4, 4): the rows of queries 6 and 7 "
         "and the columns of keys 6 and 7 are past the ends, all False",
         _mask_matches(fn, 4, 4, 4, 4, 6, 6)),
        ("2 queries that are the last of 13 keys, tiles of 2 x 8 at (0, 8): query 0 "
         "sees keys 8 .. 11, query 1 keys 8 .. 12, keys 13 .. 15 do not exist",
         _mask_matches(fn, 0, 8, 2, 8, 2, 13)),
        ("one decode query after 5 keys, a tile of 4 x 4 at (0, 0): row 0 all True, "
         "rows 1 .. 3 (no such queries) all False",
         _mask_matches(fn, 0, 0, 4, 4, 1, 5)),
    ]))


def _bytes(batch, heads, seq, head_dim, dtype_bytes, block_q):
    per_head_naive = 4 * seq * head_dim + 4 * seq * seq  # Q, K, V, O; S and P twice
    query_tiles = -(-seq // block_q)
    per_head_flash = 2 * seq * head_dim + query_tiles * 2 * seq * head_dim
    scale = batch * heads * dtype_bytes
    return scale * per_head_naive, scale * per_head_flash


@checker
def check_attention_bytes(fn: Callable) -> Verdict:
    """`fn(batch, heads, seq, head_dim, dtype_bytes, block_q)` -> (naive_bytes,
    flash_bytes): the HBM traffic of unfused attention and of the tiled loop, by the
    model the exercise defines."""
    args = [
        (1, 1, 4, 2, 2, 2),          # the section's example by hand
        (1, 1, 1024, 64, 2, 128),    # 8 query tiles
        (2, 8, 1000, 128, 2, 128),   # 1000 is not a multiple of 128: 8 tiles
        (1, 32, 8192, 128, 2, 128),  # Llama-3-8B's heads at 8k
        (3, 2, 100, 16, 4, 256),     # one query tile holds every query, float32
        (1, 1, 1, 8, 1, 16),         # a single token
    ]
    cases = [Case(a, _bytes(*a)) for a in args]
    return report(run_cases(
        "Exercise E.3 (attention_bytes)", fn, cases,
        hint="per head, naive moves Q, K, V and O (seq x head_dim each) and S and P "
             "(seq x seq each) twice, written then read; flash moves Q and O once "
             "and K and V once per query tile, ceil(seq / block_q) tiles; all times "
             "batch * heads * dtype_bytes."))


# --- pen-and-paper questions ----------------------------------------------------------

# Question E.1: one head's float32 score matrix at 8192 tokens.
check_q_score_bytes = number_question("Question E.1 (score matrix bytes)",
                                      8192 * 8192 * 4, rel=0.01)
# Question E.2: a causal pass over 1024 tokens in 128 x 128 tiles computes the tiles
# on and below the diagonal: query tile q needs key tiles 0 .. q.
check_q_causal_tiles = number_question(
    "Question E.2 (causal tiles)", sum(q + 1 for q in range(1024 // 128)), rel=0.01)
# Question E.3: split-K partitions of 512 tokens over a 16,384-token context.
check_q_partitions = number_question("Question E.3 (split-K partitions)",
                                     -(-16384 // 512), rel=0.01)

register_questions(globals())
