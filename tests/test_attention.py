"""Tests for llmcore.attention: explicit vs fused math, GQA/MQA, masks and the Attention module."""

import pytest
import torch

from llmcore.attention import (
    Attention,
    attention_explicit,
    attention_fused,
    build_attention_mask,
    causal_mask,
    repeat_kv,
)
from llmcore.model import ModelConfig


def _qkv(batch, n_heads, n_kv_heads, q_len, kv_len, head_dim=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_heads, q_len, head_dim, generator=gen)
    k = torch.randn(batch, n_kv_heads, kv_len, head_dim, generator=gen)
    v = torch.randn(batch, n_kv_heads, kv_len, head_dim, generator=gen)
    return q, k, v


def test_repeat_kv_matches_repeat_interleave():
    x = torch.randn(2, 3, 5, 8)
    assert torch.equal(repeat_kv(x, 4), x.repeat_interleave(4, dim=1))
    assert repeat_kv(x, 1) is x


# Explicit vs fused

MASKS = ["none", "causal", "padding", "sliding"]


def _mask(kind, batch, q_len, kv_len):
    if kind == "none":
        return None
    slots = torch.arange(kv_len - q_len, kv_len).expand(batch, q_len)
    padding = torch.ones(batch, kv_len, dtype=torch.long)
    padding[-1, : kv_len // 2] = 0  # last row is left-padded
    return build_attention_mask(slots, kv_len, key_padding=padding if kind == "padding" else None,
                                sliding_window=3 if kind == "sliding" else None)


@pytest.mark.parametrize("n_kv_heads", [8, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("mask_kind", MASKS)
@pytest.mark.parametrize("q_len,kv_len", [(9, 9), (1, 9), (4, 9)], ids=["prefill", "decode", "chunk"])
def test_explicit_and_fused_attention_agree(n_kv_heads, mask_kind, q_len, kv_len):
    q, k, v = _qkv(2, 8, n_kv_heads, q_len, kv_len)
    k, v = repeat_kv(k, 8 // n_kv_heads), repeat_kv(v, 8 // n_kv_heads)
    mask = _mask(mask_kind, 2, q_len, kv_len)
    explicit, fused = attention_explicit(q, k, v, mask=mask), attention_fused(q, k, v, mask=mask)
    assert explicit.shape == (2, 8, q_len, 16)
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=0)


def test_is_causal_flag_equals_explicit_causal_mask():
    q, k, v = _qkv(2, 4, 4, 7, 7)
    mask = causal_mask(7, 7)
    torch.testing.assert_close(attention_fused(q, k, v, is_causal=True), attention_explicit(q, k, v, mask=mask),
                               atol=1e-5, rtol=0)
    torch.testing.assert_close(attention_explicit(q, k, v, is_causal=True), attention_explicit(q, k, v, mask=mask))


def test_is_causal_with_cached_prefix_and_conflicting_arguments():
    q, k, v = _qkv(1, 4, 4, 3, 8)  # 3 new queries after 5 cached keys
    torch.testing.assert_close(attention_fused(q, k, v, is_causal=True), attention_explicit(q, k, v, is_causal=True),
                               atol=1e-5, rtol=0)
    for attend in (attention_explicit, attention_fused):
        with pytest.raises(ValueError, match="either mask= or is_causal=True"):
            attend(q, k, v, mask=causal_mask(3, 8), is_causal=True)


def test_masks_change_the_result():
    q, k, v = _qkv(2, 4, 4, 6, 6)
    full, causal = attention_explicit(q, k, v), attention_explicit(q, k, v, is_causal=True)
    assert not torch.allclose(full[:, :, :-1], causal[:, :, :-1], atol=1e-3)
    torch.testing.assert_close(full[:, :, -1], causal[:, :, -1])  # the last query sees everything anyway


# Masks

def test_causal_mask_with_cached_prefix():
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(causal_mask(3, 5), expected)


def test_build_attention_mask_sliding_window_and_padding():
    mask = build_attention_mask(torch.arange(5).expand(1, 5), 5, sliding_window=2)[0, 0]
    expected = torch.tensor([[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 1, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 0, 1, 1]])
    assert torch.equal(mask, expected.bool())
    padding = torch.tensor([[0, 0, 1, 1, 1]])
    mask = build_attention_mask(torch.arange(5).expand(1, 5), 5, key_padding=padding)[0, 0]
    assert mask[:2].all()  # pad queries would see nothing: they see everything instead of producing NaN
    assert torch.equal(mask[2:], torch.tensor([[0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]).bool())


def test_fully_masked_rows_do_not_produce_nan():
    q, k, v = _qkv(1, 2, 2, 4, 4)
    mask = build_attention_mask(torch.arange(4).expand(1, 4), 4, key_padding=torch.tensor([[0, 0, 0, 1]]))
    for attend in (attention_explicit, attention_fused):
        assert torch.isfinite(attend(q, k, v, mask=mask)).all()


# The Attention module

def _cfg(**overrides):
    fields = dict(vocab_size=32, dim=64, n_layers=1, n_heads=4, n_kv_heads=2, hidden_dim=96)
    return ModelConfig(**{**fields, **overrides})


@pytest.mark.parametrize("overrides", [{}, {"qk_norm": True, "attention_bias": True}, {"n_kv_heads": 1}])
def test_attention_module_is_causal(overrides):
    torch.manual_seed(0)
    attn = Attention(_cfg(**overrides))
    x = torch.randn(2, 8, 64)
    positions = torch.arange(8).expand(2, 8)
    changed = x.clone()
    changed[:, 5:] = torch.randn(2, 3, 64)  # rewrite the future of position 4
    out, out_changed = attn(x, positions), attn(changed, positions)
    torch.testing.assert_close(out[:, :5], out_changed[:, :5])
    assert not torch.allclose(out[:, 5:], out_changed[:, 5:])


def test_attention_module_explicit_and_sdpa_agree_with_padding_and_window():
    torch.manual_seed(0)
    explicit, fused = Attention(_cfg(attn_impl="explicit", sliding_window=3)), Attention(_cfg(sliding_window=3))
    fused.load_state_dict(explicit.state_dict())
    x = torch.randn(2, 7, 64)
    positions = torch.arange(7).expand(2, 7)
    mask = torch.tensor([[1] * 7, [0, 0, 1, 1, 1, 1, 1]])
    torch.testing.assert_close(explicit(x, positions, attention_mask=mask), fused(x, positions, attention_mask=mask),
                               atol=1e-5, rtol=0)


class RecordingCache:
    """Minimal cache honouring the contract (KVCacheProtocol): slot j holds position j;
    attend() leaves attention to the layer."""

    def __init__(self):
        self.k = self.v = None
        self.calls = []

    def begin_forward(self, positions):
        pass

    def attend(self, layer_idx, positions, q, k, v, window=None):
        return None

    def update(self, layer_idx, positions, k, v):
        self.calls.append((layer_idx, positions.clone(), k.shape))
        self.k = k if self.k is None else torch.cat([self.k, k], dim=2)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=2)
        return self.k, self.v


def test_attention_kv_cache_hook_is_called_and_gives_same_outputs():
    torch.manual_seed(0)
    attn = Attention(_cfg(qk_norm=True))
    x = torch.randn(1, 6, 64)
    positions = torch.arange(6).expand(1, 6)
    full = attn(x, positions)
    cache = RecordingCache()
    first = attn(x[:, :4], positions[:, :4], kv_cache=cache, layer_idx=3)
    rest = [attn(x[:, i:i + 1], positions[:, i:i + 1], kv_cache=cache, layer_idx=3) for i in (4, 5)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), full, atol=1e-5, rtol=0)
    assert [c[0] for c in cache.calls] == [3, 3, 3]
    assert cache.calls[0][2] == (1, 2, 4, 16)  # (batch, n_kv_heads, new tokens, head_dim), after RoPE
    assert torch.equal(cache.calls[2][1], torch.tensor([[5]]))


def test_attention_mask_of_wrong_shape_is_rejected():
    attn = Attention(_cfg())
    with pytest.raises(ValueError, match="attention_mask has shape"):
        attn(torch.randn(2, 4, 64), torch.arange(4).expand(2, 4), attention_mask=torch.ones(2, 6))


@pytest.mark.cuda
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_explicit_and_fused_attention_agree_on_cuda(dtype, atol):
    q, k, v = (t.to("cuda", dtype) for t in _qkv(2, 8, 2, 64, 64, head_dim=64))
    k, v = repeat_kv(k, 4), repeat_kv(v, 4)
    padding_mask = _mask("padding", 2, 64, 64).cuda()
    for mask, is_causal in ((None, True), (padding_mask, False)):  # flash-eligible path, then masked path
        explicit = attention_explicit(q, k, v, mask=mask, is_causal=is_causal)
        fused = attention_fused(q, k, v, mask=mask, is_causal=is_causal)
        assert fused.dtype == dtype
        torch.testing.assert_close(explicit.float(), fused.float(), atol=atol, rtol=0)
