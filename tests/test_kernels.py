"""llmcore.kernels (appendix E, the teaching half): the online softmax against
torch.softmax, tiled attention against SDPA, the tile rule, the profiler's peak on
known allocations, the HBM traffic counts on a case worked by hand, and the refusals.

Policy under test: a row with no finite score (a query that sees no key) gets weights
of zero and an output of zero, as SDPA with a boolean mask gives such a query; where
torch.softmax gives nan.
"""
from __future__ import annotations

import ast
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from conftest import ROOT
from llmcore.attention import attention_explicit, causal_mask
from llmcore.kernels import (
    FULL,
    MASKED,
    SKIPPED,
    OnlineSoftmax,
    flash_attention_bytes,
    naive_attention_bytes,
    online_softmax,
    peak_bytes,
    tile_kind,
    tile_plan,
    tiled_attention,
)

NEG = float("-inf")


def _qkv(batch, n_heads, n_kv, seq_q, seq_k, d, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_heads, seq_q, d, generator=g).to(dtype)
    k = torch.randn(batch, n_kv, seq_k, d, generator=g).to(dtype)
    v = torch.randn(batch, n_kv, seq_k, d, generator=g).to(dtype)
    return q, k, v


def _sdpa(q, k, v, causal):
    """The reference: SDPA, queries aligned to the last keys, GQA by groups."""
    mask = causal_mask(q.shape[2], k.shape[2]) if causal else None
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


# --- the online softmax -------------------------------------------------------------

@pytest.mark.parametrize("chunk", [1, 3, 16, 50, 64])
def test_online_softmax_equals_torch_softmax(chunk):
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 50, generator=g) * 5
    scores[0, 1, 10:] = NEG  # masked keys
    scores[1, 0, ::2] = NEG
    out = online_softmax(scores, chunk)
    assert out.shape == scores.shape and out.dtype == scores.dtype
    torch.testing.assert_close(out, torch.softmax(scores, dim=-1), atol=1e-6, rtol=0)


def test_online_softmax_row_of_only_minus_inf_is_zeros_where_torch_gives_nan():
    scores = torch.randn(3, 10)
    scores[1] = NEG
    out = online_softmax(scores, 4)
    assert torch.isnan(torch.softmax(scores, dim=-1)[1]).all()
    assert torch.equal(out[1], torch.zeros(10))
    torch.testing.assert_close(out[[0, 2]], torch.softmax(scores[[0, 2]], dim=-1))
    # SDPA gives a query that sees no key an output of zeros: the same rule
    q, k, v = _qkv(1, 1, 1, 3, 10, 8)
    mask = torch.ones(3, 10, dtype=torch.bool)
    mask[1] = False
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0, 0, 1],
                       torch.zeros(8))


def test_online_softmax_keeps_a_low_precision_dtype():
    scores = torch.randn(4, 33).to(torch.bfloat16)
    out = online_softmax(scores, 8)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), torch.softmax(scores.float(), -1),
                               atol=4e-3, rtol=0)


def test_online_softmax_state_rescales_by_exp_of_the_old_minus_the_new_maximum():
    row = torch.tensor([[1.0, 0.5, -2.0, 0.3, 3.0, 1.2, -0.7, 2.2, 0.1, 4.5, -1.0,
                         2.8]])
    state = OnlineSoftmax((1,))
    factors = [state.update(row[:, i:i + 4])[1].item() for i in (0, 4, 8)]
    assert factors[0] == 0.0  # nothing was summed before the first chunk
    assert factors[1:] == pytest.approx([math.exp(1.0 - 3.0), math.exp(3.0 - 4.5)])
    assert state.max.item() == 4.5
    assert state.sum.item() == pytest.approx(torch.exp(row - 4.5).sum().item())
    weights, rescale = OnlineSoftmax((1,)).update(torch.full((1, 3), NEG))
    assert weights.eq(0).all() and rescale.eq(0).all()  # no nan from -inf - -inf


# --- tiled attention against SDPA ---------------------------------------------------

GRID = [  # (n_heads, n_kv_heads, seq_q, seq_k, head_dim)
    (2, 2, 1, 1, 64),      # a single token
    (2, 2, 7, 7, 64),      # shorter than one tile
    (4, 2, 64, 64, 64),    # tiles divide the length
    (4, 1, 129, 129, 64),  # a partial last tile, MQA
    (8, 2, 129, 129, 128),
    (4, 2, 37, 100, 64),   # a prefill chunk after 63 cached keys
    (4, 4, 1, 129, 128),   # one decode query over 129 keys
]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("blocks", [(16, 16), (32, 16), (16, 32)],
                         ids=lambda b: f"{b[0]}x{b[1]}")
@pytest.mark.parametrize("shape", GRID, ids=lambda s: "h{}kv{}q{}k{}d{}".format(*s))
def test_tiled_attention_equals_sdpa(shape, blocks, causal):
    n_heads, n_kv, seq_q, seq_k, d = shape
    q, k, v = _qkv(2, n_heads, n_kv, seq_q, seq_k, d)
    out = tiled_attention(q, k, v, causal, *blocks)
    assert out.shape == q.shape and out.dtype == q.dtype
    torch.testing.assert_close(out, _sdpa(q, k, v, causal), atol=1e-5, rtol=1e-5)


def test_tiled_attention_default_tiles_and_a_scale():
    q, k, v = _qkv(1, 4, 2, 150, 150, 64, seed=3)
    torch.testing.assert_close(tiled_attention(q, k, v), _sdpa(q, k, v, True),
                               atol=1e-5, rtol=1e-5)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3,
                                         enable_gqa=True)
    torch.testing.assert_close(tiled_attention(q, k, v, scale=0.3), ref, atol=1e-5,
                               rtol=1e-5)


def test_tiled_attention_equals_chapter_4_explicit_attention():
    q, k, v = _qkv(1, 2, 2, 100, 100, 64, seed=4)
    torch.testing.assert_close(tiled_attention(q, k, v, True, 32, 32),
                               attention_explicit(q, k, v, is_causal=True),
                               atol=1e-5, rtol=1e-5)


def test_tiled_attention_queries_that_see_no_key_get_zeros_as_in_sdpa():
    q, k, v = _qkv(1, 2, 1, 10, 4, 64, seed=5)  # causal, 10 queries over 4 keys
    out = tiled_attention(q, k, v, True, 4, 2)
    assert torch.equal(out[:, :, :6], torch.zeros(1, 2, 6, 64))  # they see nothing
    torch.testing.assert_close(out, _sdpa(q, k, v, True), atol=1e-5, rtol=1e-5)


def test_tiled_attention_bf16_keeps_the_dtype_and_accumulates_in_float32():
    q, k, v = _qkv(1, 4, 2, 70, 70, 64, seed=6, dtype=torch.bfloat16)
    out = tiled_attention(q, k, v, True, 32, 16)
    assert out.dtype == torch.bfloat16
    ref = _sdpa(q.float(), k.float(), v.float(), True)
    assert (out.float() - ref).abs().max() < 2e-2


# --- the tile rule ------------------------------------------------------------------

def test_tile_kind_by_hand():
    # a prompt (offset 0), tiles of 4: queries 4..7 against keys 0..3, 4..7, 8..11
    assert tile_kind(4, 8, 0, 4, 0) == FULL
    assert tile_kind(4, 8, 4, 8, 0) == MASKED
    assert tile_kind(4, 8, 8, 12, 0) == SKIPPED
    # the same queries after 4 cached keys see keys up to 8..11
    assert tile_kind(4, 8, 4, 8, 4) == FULL
    assert tile_kind(4, 8, 8, 12, 4) == MASKED
    assert tile_kind(4, 8, 12, 16, 4) == SKIPPED
    assert tile_kind(4, 8, 8, 12, 0, causal=False) == FULL


def test_tile_plan_counts_and_partial_tiles():
    kinds = [kind for row in tile_plan(512, 512, 64, 64) for kind in row]
    assert (len(kinds), kinds.count(MASKED), kinds.count(SKIPPED)) == (64, 8, 28)
    plan = tile_plan(200, 500, 64, 64)  # 4 query tiles (the last of 8), 8 key tiles
    assert len(plan) == 4 and all(len(row) == 8 for row in plan)
    assert sum(row.count(SKIPPED) for row in plan) == 3
    assert tile_plan(5, 5, 2, 2, causal=False) == [[FULL] * 3] * 3
    # every computed tile holds a visible score, every skipped one none
    for seq_q, seq_k, bq, bk in ((13, 13, 4, 3), (5, 17, 2, 4), (9, 4, 3, 2)):
        visible = causal_mask(seq_q, seq_k)
        for i, row in enumerate(tile_plan(seq_q, seq_k, bq, bk)):
            for j, kind in enumerate(row):
                tile = visible[i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]
                assert kind == (SKIPPED if not tile.any()
                                else FULL if tile.all() else MASKED)


# --- the peak, measured -------------------------------------------------------------

def test_peak_bytes_on_known_allocations():
    def three_buffers():
        a = torch.empty(1 << 20)
        b = torch.empty(1 << 20)
        del a
        c = torch.empty(1 << 19)
        return b, c

    (b, c), peak = peak_bytes(three_buffers)
    assert peak == 8 << 20 and b.numel() == 1 << 20 and c.numel() == 1 << 19
    x = torch.ones(1000, 1000)
    assert peak_bytes(lambda: x * x + x)[1] == 8_000_000
    assert peak_bytes(lambda: None) == (None, 0)


def test_peak_bytes_explicit_holds_the_scores_tiled_does_not():
    q, k, v = _qkv(1, 1, 1, 512, 512, 64, seed=7)
    naive, explicit = peak_bytes(attention_explicit, q, k, v, is_causal=True)
    tiled, tiles = peak_bytes(tiled_attention, q, k, v, True, 64, 64)
    torch.testing.assert_close(naive, tiled, atol=1e-5, rtol=1e-5)
    assert explicit >= 4 * 512 * 512  # at least the float32 scores
    assert tiles < 4 * 512 * 512 / 4


# --- bytes moved --------------------------------------------------------------------

def test_traffic_on_a_case_worked_by_hand():
    # one head, 4 queries and keys, head_dim 2, 2 bytes, tiles of 2 x 2:
    # explicit: Q, O 16 + K, V 16 + S, P written and read 4 x 16 = 96 numbers
    assert naive_attention_bytes(1, 1, 4, 4, 2, 2) == 96 * 2
    # tiled: Q, O 16 + 2 query tiles x K, V of 4 keys x 2 = 32: 48 numbers
    assert flash_attention_bytes(1, 1, 4, 4, 2, 2, block_q=2, block_k=2) == 48 * 2
    # causal: the first query tile reads keys 0-1 only: 16 + 2 x 2 x (2 + 4) = 40
    assert flash_attention_bytes(1, 1, 4, 4, 2, 2, 2, 2, causal=True) == 40 * 2
    # batch and heads multiply; partial tiles count the keys they hold
    assert naive_attention_bytes(3, 5, 4, 4, 2, 2) == 15 * 96 * 2
    assert flash_attention_bytes(1, 1, 3, 5, 2, 1, block_q=2, block_k=2) == (
        2 * 3 * 2 + 2 * 2 * 5 * 2)


def test_traffic_ratio_is_two_block_q_over_head_dim_at_long_lengths():
    for block_q in (64, 128, 256):
        naive = naive_attention_bytes(1, 32, 32768, 32768, 128, 2)
        tiled = flash_attention_bytes(1, 32, 32768, 32768, 128, 2, block_q, 64)
        assert naive / tiled == pytest.approx(2 * block_q / 128, rel=0.01)


# --- refusals -----------------------------------------------------------------------

def test_online_softmax_refusals():
    with pytest.raises(TypeError, match="floating-point"):
        online_softmax(torch.arange(4), 2)
    with pytest.raises(TypeError, match="floating-point"):
        online_softmax([1.0, 2.0], 2)
    with pytest.raises(ValueError, match="at least one score"):
        online_softmax(torch.zeros(3, 0), 2)
    with pytest.raises(ValueError, match="at least one score"):
        online_softmax(torch.tensor(1.0), 2)
    for chunk in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="chunk must be an int >= 1"):
            online_softmax(torch.zeros(4), chunk)
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="nan or \\+inf"):
            online_softmax(torch.tensor([0.0, bad]), 2)
    with pytest.raises(ValueError, match="expected \\(\\*rows, n\\)"):
        OnlineSoftmax((2,)).update(torch.zeros(3, 4))


@pytest.mark.parametrize("change, message", [
    (lambda q, k, v: (q[0], k, v), "q must be a 4-D tensor"),
    (lambda q, k, v: (q, k, v[..., :32]), "same shape"),
    (lambda q, k, v: (q, k[:1], v[:1]), "batch"),
    (lambda q, k, v: (q, k[..., :32], v[..., :32]), "head_dim"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of n_kv_heads"),
    (lambda q, k, v: (q[:, :, :0], k, v), "at least one query"),
    (lambda q, k, v: (q, k[:, :, :0], v[:, :, :0]), "at least one query"),
    (lambda q, k, v: (q.double(), k, v), "one dtype"),
])
def test_tiled_attention_refuses_mismatched_shapes(change, message):
    q, k, v = _qkv(2, 4, 2, 5, 5, 64)
    with pytest.raises(ValueError, match=message):
        tiled_attention(*change(q, k, v))


def test_tiled_attention_refuses_bad_tiles_scale_and_dtype():
    q, k, v = _qkv(1, 2, 2, 5, 5, 8)
    for name in ("block_q", "block_k"):
        for bad in (0, -4, 16.0, True):
            with pytest.raises(ValueError, match=f"{name} must be an int >= 1"):
                tiled_attention(q, k, v, **{name: bad})
    for bad in (0, -1.0, float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ValueError, match="scale must be a positive finite"):
            tiled_attention(q, k, v, scale=bad)
    with pytest.raises(TypeError, match="floating point"):
        tiled_attention(q.long(), k, v)


def test_traffic_and_peak_refusals():
    with pytest.raises(ValueError, match="seq_q must be an int >= 1"):
        naive_attention_bytes(1, 1, 0, 4, 2)
    with pytest.raises(ValueError, match="head_dim must be an int >= 1"):
        flash_attention_bytes(1, 1, 4, 4, 2.0)
    with pytest.raises(ValueError, match="block_q must be an int >= 1"):
        flash_attention_bytes(1, 1, 4, 4, 2, block_q=0)
    with pytest.raises(ValueError, match="seq_k must be an int >= 1"):
        tile_plan(4, -1, 2, 2)
    with pytest.raises(TypeError, match="callable"):
        peak_bytes(42)


# --- the module split ---------------------------------------------------------------

def test_the_teaching_module_never_imports_triton():
    tree = ast.parse((ROOT / "llmcore" / "kernels.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                for alias in node.names}
    imported |= {node.module for node in ast.walk(tree)
                 if isinstance(node, ast.ImportFrom) and node.module}
    assert not any("triton" in name for name in imported), imported
    # nor loads it: torch.profiler would, through torch._inductor, and then a later
    # TRITON_INTERPRET=1 (appendix E's Triton half on a CPU) would come too late
    code = ("import sys, torch, llmcore.kernels as K; K.peak_bytes(torch.ones, 3); "
            "print('triton' in sys.modules, 'torch._inductor' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                            text=True, cwd=ROOT, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False False"
