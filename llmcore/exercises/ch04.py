"""Checkers for the exercises of chapter 04 (attention and the transformer).
Hand-written."""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)

Tensors = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _qkv(shape: tuple[int, ...], seed: int) -> Tensors:
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*shape, generator=gen) for _ in range(3))


def _close(got, expected, atol: float = 1e-5) -> bool:
    return (isinstance(got, torch.Tensor) and got.shape == expected.shape
            and bool(torch.isfinite(got).all())
            and torch.allclose(got, expected, atol=atol, rtol=1e-4))


@checker
def check_causal_attention(fn: Callable) -> Verdict:
    """`fn(q, k, v)` -> causal scaled dot-product attention, (batch, heads, seq,
    head_dim)."""
    def matches_reference(shape, seed):
        def test() -> bool:
            q, k, v = _qkv(shape, seed)
            expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return _close(fn(q.clone(), k.clone(), v.clone()), expected)
        return test

    def first_query_sees_only_itself() -> bool:
        q, k, v = _qkv((1, 2, 5, 8), 3)
        got = fn(q, k, v)
        return (isinstance(got, torch.Tensor)
                and torch.allclose(got[..., 0, :], v[..., 0, :], atol=1e-6))

    def future_does_not_leak() -> bool:
        q, k, v = _qkv((1, 1, 6, 8), 4)
        k2, v2 = k.clone(), v.clone()
        k2[..., -1, :] += 5.0  # change only the last token's key and value
        v2[..., -1, :] -= 5.0
        a, b = fn(q, k, v), fn(q, k2, v2)
        return torch.allclose(a[..., :-1, :], b[..., :-1, :], atol=1e-6)

    return report(run_checks("Exercise 4.1 (causal_attention)", [
        ("the output must have the shape of q, here (1, 1, 4, 8)",
         lambda: fn(*_qkv((1, 1, 4, 8), 0)).shape == (1, 1, 4, 8)),
        ("the first query may only see the first key, so its output must equal "
         "v[..., 0, :]", first_query_sees_only_itself),
        ("changing the last token's key and value must not change the earlier outputs "
         "(causal mask)", future_does_not_leak),
        ("outputs must match softmax(q k^T / sqrt(head_dim) + causal mask) v for "
         "head_dim 16 (did you scale by 1/sqrt(head_dim) and take the softmax over the "
         "keys?)", matches_reference((2, 3, 7, 16), 1)),
        ("outputs must match the reference for head_dim 64 and 12 tokens",
         matches_reference((1, 2, 12, 64), 2)),
    ]))


@checker
def check_repeat_kv(fn: Callable) -> Verdict:
    """`fn(x, n_rep)` -> (batch, n_kv * n_rep, seq, d) with query head h reading kv head
    h // n_rep."""
    def matches(shape, n_rep, seed):
        def test() -> bool:
            x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
            got = fn(x.clone(), n_rep)
            return (isinstance(got, torch.Tensor)
                    and torch.equal(got, x.repeat_interleave(n_rep, dim=1)))
        return test

    def head_order() -> bool:
        x = torch.arange(2.0).view(1, 2, 1, 1).expand(1, 2, 3, 4).contiguous()
        got = fn(x, 2)
        return (isinstance(got, torch.Tensor)
                and got[0, :, 0, 0].tolist() == [0.0, 0.0, 1.0, 1.0])

    return report(run_checks("Exercise 4.2 (repeat_kv)", [
        ("the result must have shape (batch, n_kv_heads * n_rep, seq, head_dim): "
         "(1, 6, 3, 4) here",
         lambda: tuple(fn(torch.zeros(1, 2, 3, 4), 3).shape) == (1, 6, 3, 4)),
        ("with 2 kv heads and n_rep=2, query heads 0, 1, 2, 3 must read kv heads 0, 0, "
         "1, 1 (copies of one kv head next to each other, not 0, 1, 0, 1)", head_order),
        ("n_rep=1 must return x unchanged", matches((2, 4, 5, 8), 1, 0)),
        ("a random (2, 2, 5, 8) tensor with n_rep=4 must match the reference",
         matches((2, 2, 5, 8), 4, 1)),
        ("a random (1, 8, 3, 16) tensor with n_rep=4 (Llama-3-8B's grouping) must "
         "match the reference", matches((1, 8, 3, 16), 4, 2)),
    ]))


def _reference_mask(lengths: list[int], total: int,
                    sliding_window: int | None) -> torch.Tensor:
    from llmcore.attention import build_attention_mask

    padding = torch.tensor([[0] * (total - n) + [1] * n for n in lengths])
    slots = torch.arange(total).expand(len(lengths), total)
    return build_attention_mask(slots, total, padding, sliding_window)[:, 0]


@checker
def check_padded_mask(fn: Callable) -> Verdict:
    """`fn(lengths, total, sliding_window)` -> bool (batch, total, total): causal, no
    padding keys, an optional window, and padding queries that see every key."""
    def matches(lengths, total, window) -> Callable[[], bool]:
        def test() -> bool:
            got = fn(list(lengths), total, window)
            return (isinstance(got, torch.Tensor) and got.dtype == torch.bool
                    and torch.equal(got, _reference_mask(lengths, total, window)))
        return test

    def shape() -> bool:
        got = fn([2, 4], 4, None)
        return isinstance(got, torch.Tensor) and tuple(got.shape) == (2, 4, 4)

    def no_empty_row() -> bool:
        got = fn([1, 3], 3, None)
        return isinstance(got, torch.Tensor) and bool(got.any(dim=-1).all())

    return report(run_checks("Exercise 4.3 (padded_mask)", [
        ("lengths [2, 4] padded to 4 must give a (2, 4, 4) tensor", shape),
        ("one prompt of 4 tokens, no padding: the lower triangle (a query sees itself "
         "and earlier keys) as a bool tensor", matches([4], 4, None)),
        ("lengths [3, 5] padded to 5: the 2 pad tokens sit on the left of the first "
         "prompt, and no real query may see them", matches([3, 5], 5, None)),
        ("a pad query would see nothing and get NaN from the softmax: its row must be "
         "all True (lengths [1, 3], total 3)", no_empty_row),
        ("sliding_window 2, lengths [4, 6], total 6: a query sees itself and the one "
         "key before it, never padding", matches([4, 6], 6, 2)),
        ("sliding_window 1: each real query sees only itself (the window counts the "
         "query's own token)", matches([2, 3], 3, 1)),
        ("sliding_window 3, lengths [5, 2, 7], total 7 must match",
         matches([5, 2, 7], 7, 3)),
    ]))


@checker
def check_block_parameters(fn: Callable) -> Verdict:
    """`fn(dim, n_heads, n_kv_heads, hidden_dim)` -> parameters of one TransformerBlock
    (no biases)."""
    from llmcore.model import ModelConfig, TransformerBlock

    def expected(dim, n_heads, n_kv_heads, hidden_dim):
        cfg = ModelConfig(vocab_size=8, dim=dim, n_layers=1, n_heads=n_heads,
                          n_kv_heads=n_kv_heads, hidden_dim=hidden_dim)
        with torch.device("meta"):  # shapes only, no memory
            return sum(p.numel() for p in TransformerBlock(cfg).parameters())

    shapes = [(64, 4, 4, 128), (64, 8, 2, 160), (576, 9, 3, 1536), (4096, 32, 8, 14336)]
    cases = [Case(s, expected(*s)) for s in shapes]
    return report(run_cases(
        "Exercise 4.4 (block_parameters)", fn, cases,
        hint="q and o: dim * n_heads * head_dim each; k and v: dim * n_kv_heads * "
             "head_dim each; SwiGLU: 3 * dim * hidden_dim; two RMSNorms: dim each."))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# never typed into the notebook.
# Question 4.1: Llama-3-70B, 2 (K, V) x layers x KV heads x head dim x 2 bytes, in KiB
check_q_kv_kib = number_question(
    "Question 4.1 (KV KiB)", 2 * 80 * 8 * 128 * torch.bfloat16.itemsize / 2**10,
    rel=0.05)
# Question 4.2: about 2 FLOPs per parameter per token, Llama-3.2-1B, 4,000 tokens, TFLOP
check_q_prefill_tflop = number_question(
    "Question 4.2 (prefill TFLOP)", 2 * 1_235_814_400 * 4_000 / 1e12, rel=0.05)

register_questions(globals())
