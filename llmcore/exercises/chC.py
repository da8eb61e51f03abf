"""Checkers for the exercises of appendix C (quantization). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)

# a group whose largest magnitude is negative: scale 2.1 / 7 = 0.3, and no value lands
# half-way between two codes (round and floor(x + 0.5) agree on it)
_GROUP = [0.52, -2.1, 1.33, 0.07, -0.61, 1.9, -0.26, 0.95]
_GROUP_CODES = [10, 1, 12, 8, 6, 14, 7, 11]
# quantized with a clipped scale of 0.25: 3.0 and -4.0 fall outside -8..7 steps
_CLIPPED = [3.0, 0.5, -0.2, -4.0, 1.1, -1.3]
_CLIPPED_CODES = [15, 10, 7, 0, 12, 3]


@checker
def check_quantize_group(fn: Callable) -> Verdict:
    """`fn(values, scale=None)` -> (codes, scale): one int4 group, codes
    round(v / scale) + 8 clamped to 0..15, scale max|v| / 7 unless given."""
    name = "Exercise C.1 (quantize_group)"
    if not callable(fn):  # run_cases words that verdict
        return report(run_cases(name, fn, []))

    def codes_of(values, scale=None):
        v = torch.tensor(values)
        codes, s = fn(v) if scale is None else fn(v, scale)
        return v, codes, float(s)

    def integer_codes() -> bool:
        v, codes, _ = codes_of(_GROUP)
        return (isinstance(codes, torch.Tensor) and not codes.is_floating_point()
                and codes.shape == v.shape)

    def codes_are(values, expected, scale=None):
        def test() -> bool:
            _, codes, _ = codes_of(values, scale)
            return torch.equal(torch.as_tensor(codes).long(), torch.tensor(expected))
        return test

    def reconstructs() -> bool:
        v = torch.randn(32, generator=torch.Generator().manual_seed(0))
        codes, s = fn(v)
        s = float(s)
        back = (torch.as_tensor(codes).float() - 8) * s
        return bool(((back - v).abs() <= s / 2 + 1e-6).all())

    def zero_group() -> bool:
        v, codes, s = codes_of([0.0] * 8)
        codes = torch.as_tensor(codes).long()
        return math.isfinite(s) and torch.equal(codes, torch.full((8,), 8))

    return report(run_checks(name, [
        ("codes are an integer tensor (e.g. torch.uint8), one code per value",
         integer_codes),
        ("the scale is the largest |value| / 7: 2.1 / 7 = 0.3 here, where the largest "
         "magnitude is negative", lambda: abs(codes_of(_GROUP)[2] - 0.3) < 1e-6),
        ("codes are round(v / scale) + 8, so that zero is code 8",
         codes_are(_GROUP, _GROUP_CODES)),
        ("(codes - 8) * scale is within scale / 2 of every value of a random group",
         reconstructs),
        ("an all-zero group divides by no zero: a finite scale and every code 8",
         zero_group),
        ("with a given scale of 0.25, 3.0 and -4.0 clip to codes 15 and 0 (codes stay "
         "in 0..15)", codes_are(_CLIPPED, _CLIPPED_CODES, 0.25)),
    ]))


def _layer_bytes(shapes, fmt, group_size=32, scale_bytes=2) -> int:
    """What llmcore.quant stores for these layers: real QuantLinear layers (codes and
    scales in the matching dtype), or bfloat16 weights."""
    from llmcore.quant import QuantLinear  # an appendix module: imported when needed

    dtype = {2: torch.bfloat16, 4: torch.float32}[scale_bytes]
    total = 0
    for out, n_in in shapes:
        linear = nn.Linear(n_in, out, bias=False, dtype=dtype)
        if fmt == "bf16":
            total += linear.weight.to(torch.bfloat16).nbytes
        else:
            total += QuantLinear.from_linear(linear, fmt, group_size).nbytes
    return total


_SHAPES = [(64, 48), (16, 96)]
_STEP_CASES = [  # (args, kwargs) of bytes_per_step
    (([(64, 48)], "bf16"), {}),
    ((_SHAPES, "int8"), {}),
    ((_SHAPES, "int4"), {}),
    (([(16, 100)], "int4"), {"group_size": 32}),  # 100 inputs: four groups of 32
    (([(16, 100)], "int4"), {"group_size": 128, "scale_bytes": 4}),
    (([(8, 40)], "int8"), {"scale_bytes": 4}),
]


@checker
def check_bytes_per_step(fn: Callable) -> Verdict:
    """`fn(shapes, fmt, group_size=32, scale_bytes=2)`: the bytes a decode step reads
    for the (out, in) linear layers `shapes` in "bf16", "int8" or "int4", compared
    with llmcore.quant's QuantLinear.nbytes."""
    cases = [Case(args, _layer_bytes(*args, **kwargs), kwargs)
             for args, kwargs in _STEP_CASES]
    return report(run_cases(
        "Exercise C.2 (bytes_per_step)", fn, cases,
        hint="int8 adds a scale per row; int4 is half a byte a weight over a row "
             "padded to whole groups, plus a scale per group of each row."))


@checker
def check_predicted_speedup(fn: Callable) -> Verdict:
    """`fn(bytes_before, bytes_after, bandwidth, fixed_s)`: time before over time
    after, each step costing fixed_s + bytes / bandwidth."""
    def speedup(before, after, bandwidth, fixed):
        return (fixed + before / bandwidth) / (fixed + after / bandwidth)

    args = [
        (14e9, 3.6e9, 4.8e12, 0.0),     # a 7B model, bf16 -> int4, no fixed cost
        (14e9, 3.6e9, 4.8e12, 2e-3),    # the same with 2 ms of fixed cost a step
        (21e6, 6e6, 30e9, 5e-3),        # a tiny model: the fixed cost dominates
        (1e9, 1e9, 1e12, 1e-3),         # nothing saved
        (2e9, 4e9, 1e12, 0.0),          # twice the bytes: half the speed
    ]
    cases = [Case(a, speedup(*a)) for a in args]
    return report(run_cases(
        "Exercise C.3 (predicted_speedup)", fn, cases,
        hint="each step takes fixed_s + bytes / bandwidth; the speed-up is the old "
             "step's time over the new one's."))


# --- pen-and-paper questions ----------------------------------------------------------

# Question C.1: int4 codes (4 bits) and one bfloat16 scale (16 bits) per 128 weights.
INT4_G128_BITS = 4 + 16 / 128
check_q_int4_bits = number_question("Question C.1 (int4 bits)", INT4_G128_BITS,
                                    rel=0.01)
# Question C.2: a key and a value per layer (32) and kv head (8) per token, each 128
# int8 codes and a float32 scale; whole 4,096-token sequences in 16 GiB.
KV_INT8_TOKEN_BYTES = 2 * 32 * 8 * (128 * 1 + 4)
check_q_kv_sequences = number_question(
    "Question C.2 (int8 sequences)", 16 * 2**30 // (KV_INT8_TOKEN_BYTES * 4096),
    rel=0.01)
# Question C.3: every weight of a 7B model read once a step, int4 with g128 scales,
# at 4.8 TB/s: steps (tokens) per second.
check_q_decode_ceiling = number_question(
    "Question C.3 (decode ceiling)", 4.8e12 / (7e9 * INT4_G128_BITS / 8), rel=0.01)

register_questions(globals())
