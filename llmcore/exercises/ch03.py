"""Checkers for the exercises of chapter 03 (embeddings, positions and the residual
stream). Hand-written."""
from __future__ import annotations

import math
from typing import Callable

import torch

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases, run_checks)


def _same_tensor(rel: float = 1e-5, abs_: float = 1e-6) -> Callable:
    """Compare a tensor answer with the expected tensor: same shape, values within
    tolerance."""
    def compare(got, expected) -> bool:
        if not isinstance(got, torch.Tensor):
            got = torch.as_tensor(got)
        return got.shape == expected.shape and torch.allclose(
            got.float(), expected.float(), rtol=rel, atol=abs_)
    return compare


@checker
def check_embed_one_hot(fn: Callable) -> Verdict:
    """`fn(ids, table)` -> one_hot(ids) @ table: equal to table[ids], same dtype as the
    table."""
    gen = torch.Generator().manual_seed(3)
    table = torch.randn(10, 4, generator=gen)
    ids_1d = torch.tensor([2, 0, 2, 5])  # the largest id is below vocab - 1 on purpose
    ids_2d = torch.tensor([[1, 9, 3], [3, 3, 0]])
    table_bf16 = torch.randn(7, 6, generator=gen).to(torch.bfloat16)
    ids_bf16 = torch.tensor([6, 1, 4])

    def exact(ids: torch.Tensor, tab: torch.Tensor) -> Callable[[], bool]:
        def test() -> bool:
            got = fn(ids.clone(), tab.clone())
            return (isinstance(got, torch.Tensor)
                    and got.shape == (*ids.shape, tab.shape[1])
                    and torch.equal(got.float(), tab[ids].float()))
        return test

    def keeps_dtype() -> bool:
        got = fn(ids_bf16.clone(), table_bf16.clone())
        return (isinstance(got, torch.Tensor) and got.dtype == torch.bfloat16
                and torch.equal(got, table_bf16[ids_bf16]))

    return report(run_checks("Exercise 3.1 (embed_one_hot)", [
        ("ids [2, 0, 2, 5] into a (10, 4) table must give rows 2, 0, 2, 5 exactly, "
         "shape (4, 4); the one-hot width is the vocabulary size table.shape[0], not "
         "ids.max() + 1", exact(ids_1d, table)),
        ("a (2, 3) batch of ids must give shape (2, 3, 4), rows of the table exactly",
         exact(ids_2d, table)),
        ("a bfloat16 table must give a bfloat16 result equal to table[ids] "
         "(cast the one-hot matrix to table.dtype before the matmul)", keeps_dtype),
    ]))


@checker
def check_rotate_pair(fn: Callable) -> Verdict:
    """`fn(x, y, angle)` -> (x', y'): the point (x, y) turned counter-clockwise by
    `angle` radians."""
    def rotated(x, y, a):
        return (x * math.cos(a) - y * math.sin(a), x * math.sin(a) + y * math.cos(a))

    def compare(got, expected) -> bool:
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            return False
        return all(torch.allclose(torch.as_tensor(g, dtype=torch.float64),
                                  torch.as_tensor(e, dtype=torch.float64),
                                  rtol=1e-5, atol=1e-6) for g, e in zip(got, expected))

    xs, ys = torch.tensor([1.0, 0.5, -2.0]), torch.tensor([0.0, 2.0, 1.0])
    angles = torch.tensor([0.1, 1.0, -2.5])
    tensor_expected = (xs * angles.cos() - ys * angles.sin(),
                       xs * angles.sin() + ys * angles.cos())
    cases = [
        Case((1.0, 0.0, math.pi / 2), rotated(1.0, 0.0, math.pi / 2)),
        Case((0.0, 1.0, math.pi / 2), rotated(0.0, 1.0, math.pi / 2)),
        Case((1.0, 2.0, 0.3), rotated(1.0, 2.0, 0.3)),
        Case((3.0, -1.0, -1.0), rotated(3.0, -1.0, -1.0)),
        Case((xs, ys, angles), tensor_expected),
    ]
    return report(run_cases(
        "Exercise 3.2 (rotate_pair)", fn, cases, compare=compare,
        hint="counter-clockwise by `angle` radians: x' = x cos - y sin, y' = x sin + "
             "y cos; (1, 0) turned by pi/2 is (0, 1)."))


@checker
def check_rope_angles(fn: Callable) -> Verdict:
    """`fn(head_dim, theta, positions)` -> angles (len(positions), head_dim // 2):
    p * theta**(-2i/head_dim)."""
    def angles(head_dim: int, theta: float, positions: torch.Tensor) -> torch.Tensor:
        i = torch.arange(head_dim // 2, dtype=torch.float64)
        return (positions.double()[:, None] * theta ** (-2 * i / head_dim)).float()

    def matches(head_dim: int, theta: float,
                positions: torch.Tensor) -> Callable[[], bool]:
        def test() -> bool:
            return _same_tensor()(fn(head_dim, theta, positions.clone()),
                                  angles(head_dim, theta, positions))
        return test

    def shape() -> bool:
        got = fn(8, 10000.0, torch.arange(5))
        return isinstance(got, torch.Tensor) and tuple(got.shape) == (5, 4)

    return report(run_checks("Exercise 3.3 (rope_angles)", [
        ("the result must be a tensor of shape (len(positions), head_dim // 2): one "
         "angle per pair, not the doubled cos/sin layout", shape),
        ("position 1 with head_dim 8 and theta 10000 must give [1, 0.1, 0.01, 0.001]: "
         "pair i turns by theta**(-2*i/head_dim) radians per position, so pair 0 turns "
         "by exactly 1 radian", matches(8, 10000.0, torch.tensor([1]))),
        ("position 0 must give all zeros, and angles must grow in proportion to the "
         "position", matches(8, 10000.0, torch.tensor([0, 1, 2, 5]))),
        ("head_dim 4, theta 100, positions [3, 7] must match",
         matches(4, 100.0, torch.tensor([3, 7]))),
        ("head_dim 16, theta 500000, positions 0..5 must match",
         matches(16, 500000.0, torch.arange(6))),
    ]))


@checker
def check_rms_norm(fn: Callable) -> Verdict:
    """`fn(x, weight, eps)` -> x / sqrt(mean(x**2, last dim) + eps) * weight, input
    unchanged."""
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        x64 = x.double()
        rms = torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
        return (x64 / rms * weight.double()).float()

    gen = torch.Generator().manual_seed(5)
    ones4 = torch.ones(4)
    x_simple = torch.tensor([[3.0, -4.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    x_offset = torch.randn(3, 8, generator=gen) + 4.0  # a mean LayerNorm would remove
    w8 = torch.rand(8, generator=gen) + 0.5
    x_3d = torch.randn(2, 3, 5, generator=gen) * 10
    w5 = torch.rand(5, generator=gen) + 0.5
    x_small = torch.full((2, 4), 0.1)

    def matches(x, w, eps) -> Callable[[], bool]:
        def test() -> bool:
            return _same_tensor()(fn(x.clone(), w.clone(), eps), rms_norm(x, w, eps))
        return test

    def input_unchanged() -> bool:
        x = x_offset.clone()
        fn(x, w8.clone(), 1e-6)
        return torch.equal(x, x_offset)

    return report(run_checks("Exercise 3.4 (rms_norm)", [
        ("with weight 1 and eps 0, rows [3, -4, 0, 0] and [1, 1, 1, 1] must become "
         "[1.2, -1.6, 0, 0] and [1, 1, 1, 1]: divide each row by the square root of "
         "the mean of its squares", matches(x_simple, ones4, 0.0)),
        ("inputs with a large mean must keep it (RMSNorm does not subtract the mean, "
         "LayerNorm does), and the result must be multiplied by weight",
         matches(x_offset, w8, 1e-6)),
        ("a (2, 3, 5) input must be normalized over its last dimension",
         matches(x_3d, w5, 1e-6)),
        ("eps goes inside the square root: x / sqrt(mean(x**2) + eps); check with "
         "eps = 0.01 on x = 0.1", matches(x_small, ones4, 0.01)),
        ("the input tensor must not be modified in place", input_unchanged),
    ]))


# Pen-and-paper questions ("Check your understanding"): the answers are worked out here,
# never typed into the notebook.
# Question 3.1: vocab x d_model numbers of 2 bytes (bfloat16), in MiB
check_q_table_mib = number_question(
    "Question 3.1 (table MiB)", 256_000 * 2_304 * 2 / 2**20, rel=0.05)
# Question 3.2: positions per turn of pair i = 32 at d = 128, theta = 10,000
check_q_wavelength = number_question(
    "Question 3.2 (wavelength)", 2 * math.pi / 10_000.0 ** (-2 * 32 / 128), rel=0.05)

register_questions(globals())
