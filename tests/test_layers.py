"""Tests for llmcore.layers: embeddings, norms, RoPE and SwiGLU, against definitions and HF's code."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import (
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)

from llmcore.layers import (
    LayerNorm,
    RMSNorm,
    SwiGLU,
    apply_rope,
    embedding_by_matmul,
    embedding_lookup,
    rope_cos_sin,
    rope_frequencies,
)

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 8192}


# Embeddings

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_embedding_lookup_equals_one_hot_matmul_exactly(dtype):
    torch.manual_seed(0)
    weight = torch.randn(50, 16).to(dtype)
    ids = torch.randint(0, 50, (3, 7))
    looked_up = embedding_lookup(ids, weight)
    assert looked_up.shape == (3, 7, 16)
    assert torch.equal(looked_up, embedding_by_matmul(ids, weight))
    assert torch.equal(looked_up, torch.nn.functional.embedding(ids, weight))


# Norms

def test_rmsnorm_matches_torch_rmsnorm_fp32():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 32) * 3
    ours = RMSNorm(32, eps=1e-5)
    ref = torch.nn.RMSNorm(32, eps=1e-5)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.3)
        ref.weight.copy_(ours.weight)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)


def test_rmsnorm_matches_hf_order_in_bf16_exactly():
    torch.manual_seed(0)
    x = (torch.randn(4, 9, 64) * 5).to(torch.bfloat16)
    ours, hf = RMSNorm(64, eps=1e-6).to(torch.bfloat16), LlamaRMSNorm(64, eps=1e-6).to(torch.bfloat16)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.3)
        hf.weight.copy_(ours.weight)
    out = ours(x)
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, hf(x))
    # The order is observable: multiplying by the weight in fp32 before casting gives other bf16 values.
    x32 = x.float()
    other_order = (ours.weight.float() * x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(torch.bfloat16)
    assert not torch.equal(out, other_order)


def test_rmsnorm_uses_eps():
    x = torch.full((1, 4), 1e-3)
    assert RMSNorm(4, eps=1e-6)(x).mean() > 2 * RMSNorm(4, eps=1e-4)(x).mean()


def test_layernorm_matches_torch():
    torch.manual_seed(0)
    x = torch.randn(3, 6, 24) * 2 + 1
    ours, ref = LayerNorm(24), torch.nn.LayerNorm(24)
    with torch.no_grad():
        ours.weight.normal_(1.0, 0.2)
        ours.bias.normal_(0.0, 0.2)
        ref.weight.copy_(ours.weight)
        ref.bias.copy_(ours.bias)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


# RoPE frequencies

def _hf_config(head_dim, theta, scaling):
    params = {"rope_theta": theta, **(scaling or {"rope_type": "default"})}
    return LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                       rope_parameters=params, max_position_embeddings=131072)


@pytest.mark.parametrize("head_dim,theta,scaling", [
    (64, 10000.0, None),
    (128, 500000.0, LLAMA3_SCALING),
    (16, 500000.0, LLAMA3_SCALING),
    (32, 10000.0, {"rope_type": "linear", "factor": 4.0}),
])
def test_rope_frequencies_match_hf(head_dim, theta, scaling):
    cfg = _hf_config(head_dim, theta, scaling)
    if scaling is None:
        expected, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(cfg)
    else:
        expected, _ = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg)
    ours = rope_frequencies(head_dim, theta, scaling)
    assert ours.dtype == torch.float32 and ours.shape == (head_dim // 2,)
    torch.testing.assert_close(ours, expected, atol=0, rtol=1e-6)


def test_llama3_scaling_keeps_high_frequencies_and_slows_low_ones():
    plain = rope_frequencies(128, 500000.0)
    scaled = rope_frequencies(128, 500000.0, LLAMA3_SCALING)
    wavelength = 2 * torch.pi / plain
    short, long = wavelength < 8192 / 4, wavelength > 8192 / 1
    assert short.any() and long.any() and (~short & ~long).any()  # all three bands exist at head_dim 128
    assert torch.equal(scaled[short], plain[short])
    torch.testing.assert_close(scaled[long], plain[long] / 8.0)
    middle = ~short & ~long
    assert ((scaled[middle] < plain[middle]) & (scaled[middle] > plain[middle] / 8.0)).all()


def test_old_type_key_and_unknown_rope_type():
    torch.testing.assert_close(rope_frequencies(32, 1e4, {"type": "linear", "factor": 2.0}),
                               rope_frequencies(32, 1e4) / 2.0)
    with pytest.raises(ValueError, match="yarn.*'default', 'linear' and 'llama3'"):
        rope_frequencies(32, 1e4, {"rope_type": "yarn", "factor": 4.0})
    with pytest.raises(ValueError, match="even head_dim"):
        rope_frequencies(33, 1e4)


# Applying RoPE

def test_rope_cos_sin_match_hf_rotary_embedding():
    cfg = _hf_config(16, 500000.0, LLAMA3_SCALING)
    positions = torch.tensor([[0, 1, 2, 2047, 2048, 5000], [3000, 3001, 3002, 3003, 3004, 3005]])
    hf_cos, hf_sin = LlamaRotaryEmbedding(cfg)(torch.zeros(1, dtype=torch.float32), positions)
    cos, sin = rope_cos_sin(positions, rope_frequencies(16, 500000.0, LLAMA3_SCALING))
    assert torch.equal(cos, hf_cos) and torch.equal(sin, hf_sin)


def test_apply_rope_matches_hf_rotate_half_layout():
    torch.manual_seed(0)
    q, k = torch.randn(2, 7, 4, 32), torch.randn(2, 7, 2, 32)  # (batch, seq, heads, head_dim)
    positions = torch.arange(100, 107).expand(2, 7)
    cos, sin = rope_cos_sin(positions, rope_frequencies(32, 10000.0))
    hf_q, hf_k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    assert torch.equal(apply_rope(q, cos, sin), hf_q.transpose(1, 2))
    assert torch.equal(apply_rope(k, cos, sin), hf_k.transpose(1, 2))


def _rotated(x, position, inv_freq):
    cos, sin = rope_cos_sin(torch.tensor([[position]]), inv_freq)
    return apply_rope(x.view(1, 1, 1, -1), cos, sin).flatten()


@settings(max_examples=30, deadline=None, database=None)
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(1, 2000), seed=st.integers(0, 10_000))
def test_rope_score_depends_only_on_relative_offset(m, n, shift, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(64, generator=gen), torch.randn(64, generator=gen)
    inv_freq = rope_frequencies(64, 10000.0)
    score = _rotated(q, m, inv_freq) @ _rotated(k, n, inv_freq)
    shifted = _rotated(q, m + shift, inv_freq) @ _rotated(k, n + shift, inv_freq)
    torch.testing.assert_close(score, shifted, atol=2e-3, rtol=1e-4)  # fp32 angles up to ~2500 rad


def test_rope_is_a_rotation_and_position_matters():
    torch.manual_seed(1)
    q, k = torch.randn(64), torch.randn(64)
    inv_freq = rope_frequencies(64, 10000.0)
    torch.testing.assert_close(_rotated(q, 1234, inv_freq).norm(), q.norm())  # lengths are preserved
    torch.testing.assert_close(_rotated(q, 0, inv_freq), q)                    # position 0 is the identity
    near = _rotated(q, 10, inv_freq) @ _rotated(k, 9, inv_freq)
    far = _rotated(q, 10, inv_freq) @ _rotated(k, 2, inv_freq)
    assert (near - far).abs() > 1e-3  # a different offset gives a different score


# SwiGLU

def test_swiglu_matches_hf_llama_mlp():
    torch.manual_seed(0)
    hf = LlamaMLP(LlamaConfig(hidden_size=32, intermediate_size=80, hidden_act="silu"))
    ours = SwiGLU(32, 80)
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(2, 5, 32)
    assert torch.equal(ours(x), hf(x))
