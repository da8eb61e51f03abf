"""Answers for the chapter 03 checkers: one correct, several wrong (used by tests/test_exercises.py)."""
import math

import torch
import torch.nn.functional as F


def _embed_one_hot(ids, table):
    return F.one_hot(ids, num_classes=table.shape[0]).to(table.dtype) @ table


def _embed_width_from_ids(ids, table):
    return F.one_hot(ids).to(table.dtype) @ table  # width ids.max() + 1, not the vocabulary size


def _embed_float_one_hot(ids, table):
    return F.one_hot(ids, num_classes=table.shape[0]).float() @ table.float()  # returns float32 for a bf16 table


def _embed_transposed(ids, table):
    return F.one_hot(ids, num_classes=table.shape[1]).to(table.dtype) @ table.T


def _rotate(x, y, a):
    if isinstance(a, torch.Tensor):
        return x * a.cos() - y * a.sin(), x * a.sin() + y * a.cos()
    return x * math.cos(a) - y * math.sin(a), x * math.sin(a) + y * math.cos(a)


def _rotate_clockwise(x, y, a):
    return _rotate(x, y, -a)


def _rotate_degrees(x, y, a):
    return _rotate(x, y, a * math.pi / 180)


def _rotate_swapped(x, y, a):
    nx, ny = _rotate(x, y, a)
    return ny, nx


def _angles(head_dim, theta, positions, exponent):
    i = torch.arange(head_dim // 2, dtype=torch.float32)
    return positions.float()[:, None] * theta ** exponent(i, head_dim)


def _rms(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def _rms_in_place(x, w, eps):
    return x.div_(torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps)).mul_(w)


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch03.check_embed_one_hot": (
        _embed_one_hot,
        [_embed_width_from_ids, _embed_float_one_hot, _embed_transposed]),
    "ch03.check_rotate_pair": (
        _rotate,
        [_rotate_clockwise, _rotate_degrees, _rotate_swapped,
         lambda x, y, a: (x * math.cos(a), y * math.cos(a))]),
    "ch03.check_rope_angles": (
        lambda d, t, p: _angles(d, t, p, lambda i, d: -2 * i / d),
        [lambda d, t, p: _angles(d, t, p, lambda i, d: -i / d),              # forgot the factor 2
         lambda d, t, p: _angles(d, t, p, lambda i, d: -2 * (i + 1) / d),    # off by one: pair 0 must turn 1 rad
         lambda d, t, p: _angles(d, t, p, lambda i, d: 2 * i / d),           # sign: frequencies must fall
         lambda d, t, p: _angles(d, t, p + 1, lambda i, d: -2 * i / d),      # positions counted from 1
         lambda d, t, p: torch.cat([_angles(d, t, p, lambda i, d: -2 * i / d)] * 2, -1)]),  # cos/sin table layout
    "ch03.check_rms_norm": (
        _rms,
        [lambda x, w, e: x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + e) * w,      # sum, not mean
         lambda x, w, e: x / (x.abs().mean(-1, keepdim=True) + e) * w,                # mean |x|, not RMS
         lambda x, w, e: x / (x.pow(2).mean(-1, keepdim=True) + e) * w,               # forgot the square root
         lambda x, w, e: x / (torch.sqrt(x.pow(2).mean(-1, keepdim=True)) + e) * w,   # eps outside the root
         lambda x, w, e: F.layer_norm(x, x.shape[-1:], w, None, e),                   # LayerNorm: subtracts the mean
         lambda x, w, e: x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + e),         # forgot the weight
         lambda x, w, e: x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + e) * w,      # wrong dimension
         _rms_in_place]),
    # 1,125 MiB; wrong: 1 byte per number, 4 bytes (or counted twice), MB read as GiB
    "ch03.check_q_table_mib": (1125, [562.5, 2250, 1.1]),
    # 628 positions; wrong: 1 / omega (no 2 pi), pair 0's 2 pi, omega itself
    "ch03.check_q_wavelength": (628.3, [100, 6.28, 0.01]),
}
