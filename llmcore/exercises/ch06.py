"""Checkers for the exercises of chapter 06 (the KV cache). Hand-written."""
from __future__ import annotations

from typing import Callable

import torch

from llmcore.paged import block_hash
from llmcore.profile import MODEL_SHAPES

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


@checker
def check_sequences_that_fit(fn: Callable) -> Verdict:
    """`fn(memory_bytes, weight_bytes, n_layers, n_kv_heads, head_dim, context_len,
    bytes_per_value)` -> how many whole sequences of context_len tokens fit in the
    memory left after the weights."""
    def expected(mem, weights, layers, kv, hd, ctx, b):
        return max(0, int((mem - weights) // (2 * layers * kv * hd * ctx * b)))

    args = [
        (80e9, 16.06e9, 32, 8, 128, 8192, 2),      # Llama-3.1-8B, bf16, 8K, one H100
        (80e9, 16.06e9, 32, 8, 128, 131072, 2),    # ... at 128K
        (80e9, 16.06e9, 32, 8, 128, 131072, 1),    # ... with an fp8 cache
        (24e9, 13.48e9, 32, 32, 128, 4096, 2),     # Llama-2-7B (MHA) on a 24 GB card
        (80e9, 141.1e9, 80, 8, 128, 8192, 2),      # Llama-3.1-70B: weights too large
    ]
    cases = [Case(a, expected(*a)) for a in args]
    return report(run_cases(
        "Exercise 6.1 (sequences_that_fit)", fn, cases,
        compare=lambda got, exp: type(got) is int and got == exp,
        hint="per sequence: 2 (K and V) * layers * kv heads * head_dim * tokens * "
             "bytes; divide what the weights leave, round down to a whole int, never "
             "below 0."))


@checker
def check_write_kv(fn: Callable) -> Verdict:
    """`fn(cache, positions, new)` writes new (batch, heads, seq, d) into cache (batch,
    heads, max_len, d) at `positions` (batch, seq), in place, and returns
    cache[:, :, :last position + 1]."""
    def setup(batch, heads, max_len, d, positions, seed):
        gen = torch.Generator().manual_seed(seed)
        cache = torch.randn(batch, heads, max_len, d, generator=gen)
        positions = torch.tensor(positions)
        new = torch.randn(batch, heads, positions.shape[1], d, generator=gen)
        expected = cache.clone()
        for row in range(batch):
            expected[row][:, positions[row]] = new[row]
        return cache, positions, new, expected[:, :, :int(positions.max()) + 1]

    def result_matches(*spec):
        def test() -> bool:
            cache, positions, new, expected = setup(*spec)
            got = fn(cache, positions, new)
            return (isinstance(got, torch.Tensor) and got.shape == expected.shape
                    and torch.equal(got, expected))
        return test

    def writes_in_place() -> bool:
        cache, positions, new, expected = setup(1, 2, 8, 4, [[3, 4]], 5)
        fn(cache, positions, new)
        return torch.equal(cache[:, :, :5], expected)

    return report(run_checks("Exercise 6.2 (write_kv)", [
        ("prefill at positions 0..3 of a 10-slot cache must return slots 0..3 holding "
         "the new keys", result_matches(1, 2, 10, 4, [[0, 1, 2, 3]], 0)),
        ("a decode step at position 6 must land in slot 6 and return slots 0..6 (not "
         "the whole cache)", result_matches(1, 2, 10, 4, [[6]], 1)),
        ("positions need not be in order: [[5, 2, 3]] writes slots 5, 2, 3",
         result_matches(1, 3, 8, 4, [[5, 2, 3]], 2)),
        ("each batch row has its own positions: [[2], [4]] writes row 0 at slot 2, "
         "row 1 at slot 4", result_matches(2, 2, 6, 4, [[2], [4]], 3)),
        ("the cache tensor itself must be updated (write in place, no copy)",
         writes_in_place),
    ]))


@checker
def check_reusable_prefix(fn: Callable) -> Verdict:
    """`fn(prompt, block_size, index)` -> how many leading prompt tokens a prefix cache
    can reuse.

    index maps block_hash(parent key, block tokens) -> the tuple of tokens stored in
    that block."""
    bs = 4

    def index_of(*prompts, collide_with=None):
        index = {}
        for prompt in prompts:
            parent = None
            for i in range(len(prompt) // bs):
                tokens = tuple(prompt[i * bs:(i + 1) * bs])
                parent = block_hash(parent, tokens)
                index[parent] = tokens
        if collide_with is not None:  # a block under the right key, other tokens
            key, tokens = collide_with
            index[key] = tokens
        return index

    a = list(range(100, 114))                     # 14 tokens: 3 full blocks and 2 more
    b = a[:8] + [7, 7, 7, 7, 1]                   # shares 2 blocks with a
    c = [9, 9, 9, 9] + a[4:12] + [1]              # blocks 2-3 equal a's, 1 differs
    first_key = block_hash(None, tuple(a[:4]))

    def case(prompt, index, expected):
        return lambda: fn(list(prompt), bs, index) == expected

    return report(run_checks("Exercise 6.3 (reusable_prefix)", [
        ("an empty index reuses nothing", case(a, {}, 0)),
        ("the same 14-token prompt again reuses its 3 full blocks: 12 tokens",
         case(a, index_of(a), 12)),
        ("a prompt sharing 2 blocks, then differing, reuses 8 tokens",
         case(b, index_of(a), 8)),
        ("equal blocks after a different first block are not reusable (chain the hash "
         "over the parent)", case(c, index_of(a), 0)),
        ("a 12-token prompt cached whole reuses 8 tokens: its last token must always "
         "be recomputed", case(a[:12], index_of(a), 8)),
        ("a key whose stored tokens differ from the prompt's (a hash collision) is a "
         "miss", case(a, index_of(collide_with=(first_key, (0, 0, 0, 0))), 0)),
    ]))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 6.1: 20 Mistral-7B-v0.3 conversations of 8,000 tokens, bfloat16 cache, in
# GiB: a key and a value per layer and key/value head per token.
_MISTRAL = MODEL_SHAPES["Mistral-7B-v0.3"]
check_q_kv_gib = number_question(
    "Question 6.1 (KV GiB)",
    2 * _MISTRAL.n_layers * _MISTRAL.n_kv_heads * _MISTRAL.head_dim * 2  # bytes a token
    * 8000 * 20 / 2**30)

# Question 6.2: a 1,000-token system prompt in 16-token blocks leaves 1000 // 16 full
# blocks cached; the rest of the 1,030-token prompt is prefilled.
check_q_prefilled = number_question(
    "Question 6.2 (tokens prefilled)", 1030 - (1000 // 16) * 16, rel=1e-9)

register_questions(globals())
