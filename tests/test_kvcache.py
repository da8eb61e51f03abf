"""Tests for llmcore.kvcache: size formula, the contiguous cache, generation with and without it."""
import pytest
import torch

from llmcore.kvcache import (KVCache, decode_step, greedy_generate, greedy_generate_uncached, kv_cache_bytes,
                             max_concurrent_sequences, prefill)
from llmcore.model import ModelConfig, Transformer
from llmcore.profile import MODEL_SHAPES

TINY = dict(vocab_size=256, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, hidden_dim=96)


def _model(**overrides):
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**TINY, **overrides})).eval()


def _prompt(batch=2, length=9, seed=1):
    return torch.randint(0, TINY["vocab_size"], (batch, length), generator=torch.Generator().manual_seed(seed))


def test_kv_cache_bytes_formula_and_allocation_agree():
    cfg = ModelConfig(**TINY)
    cache = KVCache(cfg, batch_size=3, max_len=40, device="cpu", dtype=torch.float32)
    assert cache.nbytes == kv_cache_bytes(cfg, 40, batch=3, dtype=torch.float32) == 2 * 3 * 2 * 16 * 40 * 3 * 4
    assert kv_cache_bytes(MODEL_SHAPES["Llama-3.1-8B"], 8192) == 8192 * 128 * 1024  # 1 GiB in bf16


def test_max_concurrent_sequences():
    cfg = MODEL_SHAPES["Llama-3.1-8B"]
    weights = 8_030_261_248 * 2
    per_seq = kv_cache_bytes(cfg, 8192)
    assert max_concurrent_sequences(cfg, 8192, 80e9) == int((0.9 * 80e9 - weights) // per_seq)
    assert max_concurrent_sequences(cfg, 8192, 80e9, dtype=1, weight_dtype=torch.bfloat16) == \
        int((0.9 * 80e9 - weights) // (per_seq // 2))  # an fp8 cache holds twice as many
    assert max_concurrent_sequences(MODEL_SHAPES["Llama-3.1-70B"], 8192, 80e9) == 0  # weights alone do not fit
    with pytest.raises(ValueError, match="utilization"):
        max_concurrent_sequences(cfg, 8192, 80e9, utilization=1.5)


def test_update_writes_by_position_and_returns_slots_so_far():
    cfg = ModelConfig(**TINY)
    cache = KVCache(cfg, batch_size=1, max_len=10, device="cpu", dtype=torch.float32)
    k = torch.arange(3.0).view(1, 1, 3, 1).expand(1, 2, 3, 16)
    positions = torch.tensor([[4, 2, 3]])  # out of order on purpose
    cache.begin_forward(positions)
    keys, values = cache.update(0, positions, k, -k)
    assert keys.shape == (1, 2, 5, 16)  # slots 0..4: up to the last position written
    assert keys[0, 0, :, 0].tolist() == [0.0, 0.0, 1.0, 2.0, 0.0]
    assert torch.equal(values, -keys)
    assert cache.k[1].abs().sum() == 0  # other layers untouched


def test_update_with_different_positions_per_row():
    cfg = ModelConfig(**TINY)
    cache = KVCache(cfg, batch_size=2, max_len=8, device="cpu", dtype=torch.float32)
    k = torch.ones(2, 2, 1, 16)
    cache.begin_forward(torch.tensor([[3], [5]]))
    keys, _ = cache.update(2, torch.tensor([[3], [5]]), k, k)
    assert keys.shape == (2, 2, 6, 16)
    assert keys[0, 0, :, 0].tolist() == [0, 0, 0, 1, 0, 0] and keys[1, 0, :, 0].tolist() == [0, 0, 0, 0, 0, 1]


def test_cache_errors_are_clear():
    cfg = ModelConfig(**TINY)
    cache = KVCache(cfg, batch_size=1, max_len=4, device="cpu", dtype=torch.float32)
    k = torch.zeros(1, 2, 1, 16)
    with pytest.raises(RuntimeError, match=r"update\(\) before begin_forward"):
        cache.update(0, torch.tensor([[0]]), k, k)
    with pytest.raises(ValueError, match="position 4 does not fit in a KVCache with max_len=4"):
        cache.begin_forward(torch.tensor([[4]]))
    with pytest.raises(ValueError, match="holds 1 sequences but the model was called with a batch of 2"):
        cache.begin_forward(torch.tensor([[0], [0]]))
    with pytest.raises(ValueError, match="batch_size and max_len must be >= 1"):
        KVCache(cfg, 0, 4)


@pytest.mark.parametrize("overrides", [{}, {"n_kv_heads": 1}, {"n_kv_heads": 4, "qk_norm": True},
                                       {"sliding_window": 5}, {"attn_impl": "explicit"}, {"tie_word_embeddings": True}])
def test_greedy_with_cache_matches_recomputing_token_for_token(overrides):
    model = _model(**overrides)
    prompt = _prompt()
    expected = greedy_generate_uncached(model, prompt, 16)
    cache = KVCache(model.cfg, batch_size=2, max_len=25, device="cpu", dtype=torch.float32)
    assert torch.equal(greedy_generate(model, prompt, 16, cache), expected)


def test_cached_logits_match_the_full_forward():
    model = _model()
    ids = _prompt(length=12)
    full = model(ids)
    cache = KVCache(model.cfg, batch_size=2, max_len=12, device="cpu", dtype=torch.float32)
    torch.testing.assert_close(prefill(model, ids[:, :8], cache), full[:, 7], atol=1e-5, rtol=0)
    for t in range(8, 12):
        torch.testing.assert_close(decode_step(model, ids[:, t], cache, t), full[:, t], atol=1e-5, rtol=0)


def test_reusing_a_cache_for_a_new_sequence_overwrites_it():
    model = _model()
    cache = KVCache(model.cfg, batch_size=2, max_len=30, device="cpu", dtype=torch.float32)
    greedy_generate(model, _prompt(length=14, seed=5), 10, cache)
    cache.reset()
    prompt = _prompt()
    assert torch.equal(greedy_generate(model, prompt, 8, cache), greedy_generate_uncached(model, prompt, 8))


def test_generate_argument_errors():
    model = _model()
    cache = KVCache(model.cfg, 2, 20, device="cpu", dtype=torch.float32)
    with pytest.raises(ValueError, match="cached_len=9 must be in"):
        greedy_generate(model, _prompt(), 3, cache, cached_len=9)
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        greedy_generate(model, _prompt(), 0, cache)


def test_max_tokens_is_the_third_argument_by_name_too():
    model = _model()
    prompt = _prompt()
    cache = KVCache(model.cfg, 2, 14, device="cpu", dtype=torch.float32)
    assert torch.equal(greedy_generate(model, prompt, max_tokens=5, kv_cache=cache),
                       greedy_generate_uncached(model, prompt, max_tokens=5))
