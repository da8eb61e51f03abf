"""Checkers for the exercises of appendix D (tensor and pipeline parallelism).
Hand-written."""
from __future__ import annotations

import json
from typing import Callable

import torch
import torch.nn.functional as F

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


def _mlp_case(hidden: int = 12, seed: int = 0):
    """An up layer (hidden, dim), a down layer (out, hidden) and a batch x (3, dim),
    float64 so that sums in another order agree to 1e-9."""
    gen = torch.Generator().manual_seed(seed)
    w_up = torch.randn(hidden, 8, generator=gen, dtype=torch.float64)
    w_down = torch.randn(6, hidden, generator=gen, dtype=torch.float64)
    x = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    return w_up, w_down, x


def _whole(w_up, w_down, x):
    return F.silu(x @ w_up.T) @ w_down.T


@checker
def check_shard_columns_rows(fn: Callable) -> Verdict:
    """`fn(w_up, w_down, x, world)` -> the `world` partial outputs of
    silu(x @ w_up.T) @ w_down.T: rank r holds the r-th contiguous block of w_up's
    output rows (column-parallel) and the same block of w_down's input columns
    (row-parallel); their sum is the all-reduce."""
    name = "Exercise D.1 (shard_columns_rows)"
    if not callable(fn):  # run_cases words that verdict
        return report(run_cases(name, fn, []))

    def partials(world: int) -> list[torch.Tensor]:
        w_up, w_down, x = _mlp_case()
        return [torch.as_tensor(p) for p in fn(w_up, w_down, x, world)]

    def shapes() -> bool:
        parts = partials(3)
        return len(parts) == 3 and all(tuple(p.shape) == (3, 6) for p in parts)

    def sums_to_whole(world: int) -> Callable[[], bool]:
        def test() -> bool:
            whole = _whole(*_mlp_case())
            return torch.allclose(sum(partials(world)), whole, atol=1e-9)
        return test

    def contiguous_blocks() -> bool:
        w_up, w_down, x = _mlp_case()
        parts = partials(3)
        return all(torch.allclose(parts[r], _whole(w_up[4 * r:4 * r + 4],
                                                   w_down[:, 4 * r:4 * r + 4], x),
                                  atol=1e-9) for r in range(3))

    def refuses_uneven() -> bool:
        try:
            fn(*_mlp_case(), 5)
        except ValueError:
            return True
        return False

    def inputs_untouched() -> bool:
        w_up, w_down, x = _mlp_case()
        fn(w_up, w_down, x, 2)
        return all(torch.equal(a, b) for a, b in zip((w_up, w_down, x), _mlp_case()))

    return report(run_checks(name, [
        ("world=3 gives a list of 3 partial outputs, each (batch, out) = (3, 6)",
         shapes),
        ("the partial outputs of 2 ranks add up to the unsharded silu(x @ w_up.T) @ "
         "w_down.T", sums_to_whole(2)),
        ("the partial outputs of 3 ranks add up to the unsharded product",
         sums_to_whole(3)),
        ("rank r holds rows 4r .. 4r + 3 of w_up and the same columns of w_down (a "
         "contiguous block each, as llmcore's shard_slice cuts them)",
         contiguous_blocks),
        ("one rank's only partial output is the whole product", sums_to_whole(1)),
        ("world=5 does not divide the 12 hidden units: raise ValueError",
         refuses_uneven),
        ("w_up, w_down and x are left as they were", inputs_untouched),
    ]))


def _llmcore_allreduce_bytes(n_layers, dim, dtype_bytes, batch):
    # two all-reduces per block and the vocabulary-parallel embedding's, dim values a
    # token each
    return (2 * n_layers + 1) * batch * dim * dtype_bytes


@checker
def check_allreduce_bytes_per_token(fn: Callable) -> Verdict:
    """`fn(n_layers, dim, dtype_bytes, batch)`: the bytes each rank hands to
    all-reduce in one decode step of `batch` sequences in llmcore's tensor-parallel
    model, the embedding's all-reduce included."""
    args = [
        (6, 256, 2, 1),       # the tiny model in bfloat16, one sequence
        (6, 256, 4, 4),       # float32, a batch of 4 (the measured run)
        (80, 8192, 2, 1),     # Llama-3-70B's shape
        (32, 4096, 2, 64),    # Llama-3-8B's shape, a batch of 64
        (1, 16, 1, 3),        # one layer, one byte a value
    ]
    cases = [Case(a, _llmcore_allreduce_bytes(*a)) for a in args]
    return report(run_cases(
        "Exercise D.2 (allreduce_bytes_per_token)", fn, cases,
        hint="each block all-reduces twice (after attention, after the MLP) and the "
             "embedding once more, dim values per sequence each time, dtype_bytes a "
             "value."))


def _world_size_or_error(fn):
    def call(*args):
        try:
            return fn(*args)
        except ValueError:
            return "ValueError"
    return call


@checker
def check_pick_world_size(fn: Callable) -> Verdict:
    """`fn(params_billion, n_kv_heads, gpu_gb, dtype_bytes, kv_reserve_gb)`: the
    smallest tensor-parallel size N (1 to 8) that divides the KV heads and leaves
    kv_reserve_gb per GPU beside 1/N of the weights; ValueError if none does."""
    def pick(params_billion, n_kv_heads, gpu_gb, dtype_bytes, kv_reserve_gb):
        for n in range(1, 9):
            weights = params_billion * dtype_bytes / n
            if n_kv_heads % n == 0 and weights + kv_reserve_gb <= gpu_gb:
                return n
        return "ValueError"

    args = [
        (8, 8, 80, 2, 20),       # an 8B model fits one GPU
        (70, 8, 80, 2, 20),      # 140 GB of weights: 4 GPUs leave 45 GB each
        (70, 8, 80, 2, 10),      # 70 + 10 = 80 GB on 2 GPUs: exactly full fits
        (70, 8, 80, 1, 20),      # int8 weights
        (30, 6, 24, 2, 2),       # 6 KV heads: 3 GPUs, not 4
        (40, 12, 24, 2, 6),      # 5 GPUs would fit, but 5 does not divide 12
        (70, 2, 80, 2, 20),      # 2 KV heads: TP 4 would fit, but is not allowed
        (600, 16, 80, 2, 5),     # needs 16 GPUs: more than 8
        (3, 1, 24, 2, 4),        # one KV head (multi-query): TP 1 only
    ]
    cases = [Case(a, pick(*a)) for a in args]
    return report(run_cases(
        "Exercise D.3 (pick_world_size)", _world_size_or_error(fn), cases,
        hint="try N = 1, 2, ..., 8 in order; skip an N that does not divide the KV "
             "heads; N fits when params_billion * dtype_bytes / N + kv_reserve_gb <= "
             "gpu_gb; raise ValueError when no N up to 8 fits."))


# --- pen-and-paper questions ----------------------------------------------------------

def _tiny_config() -> dict:
    from llmcore.pretrained import bundled_dir

    return json.loads((bundled_dir("tiny") / "config.json").read_text())


_TINY = _tiny_config()
# Question D.1: the two all-reduces of each block, dim bfloat16 values each, for one
# decode token; at TP 2 a ring sends 2 (N - 1) / N = 1 times that.
check_q_tiny_allreduce = number_question(
    "Question D.1 (block all-reduce bytes)",
    2 * _TINY["num_hidden_layers"] * _TINY["hidden_size"] * 2, rel=0.01)
# Question D.2: the bubble of 4 stages and 12 micro-batches.
check_q_bubble = number_question("Question D.2 (bubble)", (4 - 1) / (12 + 4 - 1),
                                 rel=0.01)
# Question D.3: whole KV heads per rank: the largest divisor of 8 KV heads.
check_q_max_tp = number_question("Question D.3 (largest TP)", 8, rel=0.01)

register_questions(globals())
