"""Tests for llmcore.profile: counting FLOPs/bytes from a config, measuring ceilings, the roofline."""
import math

import matplotlib
import pytest
import torch
from torch import nn

from llmcore.model import ModelConfig, Transformer
from llmcore.profile import (ACCELERATORS, MODEL_SHAPES, Cost, Roofline, attention_flops, decode_cost,
                             forward_cost, kv_bytes_per_token, matmul_weights, measure_copy_bandwidth,
                             measure_read_bandwidth,
                             measure_matmul_flops, measure_roofline, median_time, parameter_count, plot_roofline,
                             prefill_cost)

matplotlib.use("Agg")

TINY = dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48)
VARIANTS = [{}, {"tie_word_embeddings": True}, {"attention_bias": True}, {"attention_bias": True,
            "attention_out_bias": True, "mlp_bias": True}, {"qk_norm": True, "head_dim": 16}, {"n_kv_heads": 1}]


@pytest.mark.parametrize("overrides", VARIANTS)
def test_counts_match_a_built_model(overrides):
    cfg = ModelConfig(**{**TINY, **overrides})
    with torch.device("meta"):
        model = Transformer(cfg)
    assert parameter_count(cfg) == model.num_parameters()
    assert matmul_weights(cfg) == sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


@pytest.mark.parametrize("name,published", [
    ("SmolLM2-135M", 134.5e6), ("Llama-2-7B", 6.74e9), ("Mistral-7B-v0.3", 7.25e9),
    ("Qwen2.5-7B", 7.62e9), ("Llama-3.1-8B", 8.03e9), ("Llama-3.1-70B", 70.55e9)])
def test_model_shapes_have_their_published_sizes(name, published):
    assert parameter_count(MODEL_SHAPES[name]) == pytest.approx(published, rel=0.002)


def test_kv_bytes_per_token():
    cfg = MODEL_SHAPES["Llama-3.1-8B"]
    assert kv_bytes_per_token(cfg, torch.bfloat16) == 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert kv_bytes_per_token(cfg, 1) == 64 * 1024  # an int is bytes per value (e.g. fp8)
    with pytest.raises(TypeError, match="torch.dtype or a positive number of bytes"):
        kv_bytes_per_token(cfg, "bf16")


def test_flops_agree_with_the_models_per_token_count():
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**TINY))
    cfg = model.cfg
    # prefill of S tokens = sum over tokens of flops_per_token(keys it sees); decode sees context + 1 keys
    assert prefill_cost(cfg, 7).flops == sum(model.flops_per_token(i) for i in range(1, 8))
    assert decode_cost(cfg, 10).flops == model.flops_per_token(11)
    assert decode_cost(cfg, 10, batch=3).flops == 3 * model.flops_per_token(11)
    assert forward_cost(cfg, 4, context_len=6).flops == sum(model.flops_per_token(i) for i in range(7, 11))
    lm_head = cfg.vocab_size * cfg.dim
    assert prefill_cost(cfg, 7).flops - prefill_cost(cfg, 7, all_logits=False).flops == 2 * lm_head * 6


def test_attention_flops_count_causal_pairs():
    cfg = ModelConfig(**TINY)
    per_pair = 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim
    assert attention_flops(cfg, 3) == per_pair * (1 + 2 + 3)
    assert attention_flops(cfg, 2, context_len=5) == per_pair * (6 + 7)


def test_bytes_and_intensity():
    cfg = MODEL_SHAPES["Llama-3.1-8B"]
    weights = matmul_weights(cfg) * 2
    kv = kv_bytes_per_token(cfg, torch.bfloat16)
    d = decode_cost(cfg, 1000, batch=4, dtype=torch.bfloat16)
    assert d.bytes == weights + 4 * 1001 * kv
    assert d.intensity == d.flops / d.bytes
    # decode at batch 1 does ~1 FLOP per byte in bf16; prefill of 1,000 tokens ~1,000
    assert 0.9 < decode_cost(cfg, 0, dtype=torch.bfloat16).intensity < 1.1
    assert 800 < prefill_cost(cfg, 1000, dtype=torch.bfloat16, all_logits=False).intensity < 1100
    with pytest.raises(ValueError, match="n_new >= 1"):
        forward_cost(cfg, 0)


def test_roofline():
    roof = Roofline(peak_flops=100e12, bandwidth=1e12)
    assert roof.ridge == 100
    assert roof.attainable(10) == 10e12 and roof.attainable(1000) == 100e12
    assert roof.bound(10) == "memory" and roof.bound(1000) == "compute"
    assert roof.min_time(Cost(flops=1e12, bytes=1e9)) == pytest.approx(0.01)
    assert roof.min_time(Cost(flops=1e9, bytes=1e11)) == pytest.approx(0.1)
    h100 = ACCELERATORS["H100"]
    assert Roofline(h100.peak_flops, h100.bandwidth).ridge == pytest.approx(295, rel=0.01)


def test_median_time_ignores_outliers_and_counts_calls():
    calls = []
    assert median_time(lambda: calls.append(1), repeats=3, warmup=2) >= 0
    assert len(calls) == 5
    with pytest.raises(ValueError, match="repeats must be >= 1"):
        median_time(lambda: None, repeats=0)


def test_measured_ceilings_are_positive_and_finite():
    flops = measure_matmul_flops("cpu", torch.float32, size=128, repeats=2)
    bandwidth = measure_copy_bandwidth("cpu", nbytes=2**22, repeats=2)
    read = measure_read_bandwidth("cpu", nbytes=2**22, repeats=2)
    assert 0 < flops < math.inf and 0 < bandwidth < math.inf and 0 < read < math.inf


def test_read_bandwidth_refuses_a_buffer_too_small_to_time():
    with pytest.raises(ValueError, match="nbytes must be at least 1024"):
        measure_read_bandwidth("cpu", nbytes=16)


def test_plot_roofline_draws_ceiling_and_points():
    roof = Roofline(1e11, 2e10)
    ax = plot_roofline(roof, {"decode": [(0.5, 5e9), (2.0, 2e10)]}, title="t")
    labels = [line.get_label() for line in ax.get_lines()]
    assert "roofline" in labels and "decode" in labels
    assert ax.get_xscale() == "log" and ax.get_title() == "t"
    matplotlib.pyplot.close("all")


def test_measure_roofline_returns_a_roofline(monkeypatch):
    import llmcore.profile as profile
    monkeypatch.setattr(profile, "measure_matmul_flops", lambda device=None, dtype=None: 4e10)
    monkeypatch.setattr(profile, "measure_copy_bandwidth", lambda device=None: 1e10)
    monkeypatch.setattr(profile, "measure_read_bandwidth", lambda device=None: 2e10)
    assert measure_roofline() == Roofline(4e10, 2e10)  # the roof is the read bandwidth
