"""Tests for llmcore.profile: counting FLOPs/bytes from a config, measuring ceilings, the roofline."""
import math

import matplotlib
import pytest
import torch
from torch import nn

from llmcore.model import ModelConfig, Transformer
from llmcore.profile import (ACCELERATORS, MODEL_SHAPES, Cost, DecodeBlock, DecodeLinear, FusedQKVAttention,
                             FusedSwiGLU, Roofline, SplitMatVecLinear, attention_flops, decode_cost, forward_cost,
                             fuse_linears, kv_bytes_per_token, matmul_weights, matvec_kernel, measure_copy_bandwidth,
                             measure_matmul_flops, measure_roofline, median_time, parameter_count, plot_roofline,
                             prefill_cost, prepare_for_decode, split_matvec_linears)

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
    assert 0 < flops < math.inf and 0 < bandwidth < math.inf


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
    monkeypatch.setattr(profile, "measure_copy_bandwidth", lambda device=None: 2e10)
    assert measure_roofline() == Roofline(4e10, 2e10)


@pytest.mark.parametrize("rows,bias", [(1, False), (3, True), (64, False), (65, False)])
def test_split_matvec_linear_matches_linear(rows, bias):
    torch.manual_seed(0)
    plain = nn.Linear(32, 48, bias=bias)
    split = nn.Linear(32, 48, bias=bias)
    split.load_state_dict(plain.state_dict())
    split.__class__ = SplitMatVecLinear
    x = torch.randn(1, rows, 32)
    before = torch.get_num_threads()
    try:
        for threads in (1, 2, 3, 4):  # 3 does not divide 48: falls back to F.linear
            torch.set_num_threads(threads)
            torch.testing.assert_close(split(x), plain(x), atol=1e-5, rtol=1e-5)
    finally:
        torch.set_num_threads(before)


def test_split_matvec_linears_keeps_weights_and_ties():
    from llmcore.kvcache import KVCache, greedy_generate
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, "tie_word_embeddings": True})
    model = Transformer(cfg).eval()
    prompt = torch.randint(0, 64, (2, 5), generator=torch.Generator().manual_seed(1))
    expected = greedy_generate(model, prompt, 6, KVCache(cfg, 2, 11, device="cpu", dtype=torch.float32))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert split_matvec_linears(model) is model
    assert all(type(m) is SplitMatVecLinear for m in model.modules() if isinstance(m, nn.Linear))
    assert model.lm_head.weight is model.embed.weight
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        got = greedy_generate(model, prompt, 6, KVCache(cfg, 2, 11, device="cpu", dtype=torch.float32))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(got, expected)


def _generate(model, cfg, prompt, n, dtype=torch.float32):
    from llmcore.kvcache import KVCache, greedy_generate
    cache = KVCache(cfg, prompt.shape[0], prompt.shape[1] + n, device="cpu", dtype=dtype)
    return greedy_generate(model, prompt, n, cache)


@pytest.mark.parametrize("overrides", VARIANTS + [{"sliding_window": 4}])
def test_prepare_for_decode_keeps_outputs_and_parameters(overrides):
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, **overrides})
    model = Transformer(cfg).eval()
    prompt = torch.randint(0, 64, (1, 5), generator=torch.Generator().manual_seed(1))
    batch = torch.randint(0, 64, (3, 4), generator=torch.Generator().manual_seed(2))
    ids = torch.randint(0, 64, (2, 70), generator=torch.Generator().manual_seed(3))  # > max_rows: plain path
    with torch.inference_mode():
        expected = [model(ids), _generate(model, cfg, prompt, 8), _generate(model, cfg, batch, 6)]
    state = {k: v.clone() for k, v in model.state_dict().items()}
    assert prepare_for_decode(model) is model
    assert isinstance(model.blocks[0].attn, FusedQKVAttention) and isinstance(model.blocks[0].mlp, FusedSwiGLU)
    assert all(type(m) is DecodeLinear for m in model.modules() if isinstance(m, nn.Linear))
    assert state.keys() == model.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    with torch.inference_mode():
        torch.testing.assert_close(model(ids), expected[0], atol=1e-5, rtol=1e-5)
        assert torch.equal(_generate(model, cfg, prompt, 8), expected[1])
        assert torch.equal(_generate(model, cfg, batch, 6), expected[2])


def test_prepared_model_follows_weight_changes():
    torch.manual_seed(0)
    cfg = ModelConfig(**TINY)
    model, reference = Transformer(cfg).eval(), Transformer(cfg).eval()
    reference.load_state_dict(model.state_dict())
    prepare_for_decode(model)
    x = torch.randint(0, 64, (1, 3))
    with torch.inference_mode():
        model(x)  # makes the fused and packed copies
    with torch.no_grad():  # in-place writes to weights that were fused or packed
        for m in (model, reference):
            m.blocks[0].attn.k_proj.weight.mul_(-2.0)
            m.blocks[1].mlp.up_proj.weight.add_(0.5)
            m.lm_head.weight.mul_(0.5)
    with torch.inference_mode():
        torch.testing.assert_close(model(x), reference(x), atol=1e-5, rtol=1e-5)
    model.to(torch.bfloat16)
    reference.to(torch.bfloat16)
    with torch.inference_mode():
        torch.testing.assert_close(model(x).float(), reference(x).float(), atol=2e-2, rtol=2e-2)


def _plain_and_decode_linear(*args, **kwargs):
    """An nn.Linear and a DecodeLinear with the same weights."""
    plain = nn.Linear(*args, **kwargs)
    fast = nn.Linear(*args, **kwargs)
    fast.load_state_dict(plain.state_dict())
    fast.__class__ = DecodeLinear
    return plain, fast


@pytest.mark.parametrize("rows", [1, 3])
def test_decode_linear_without_compiler_or_onednn_uses_the_split_product(monkeypatch, rows):
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    monkeypatch.setattr(DecodeLinear, "compile_matvec", False)
    torch.manual_seed(0)
    plain, fast = _plain_and_decode_linear(32, 48)
    x = torch.randn(1, rows, 32)
    torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
    assert fast._packed() is None and "_matvec_cache" not in fast.__dict__


def test_decode_linear_streams_one_row_through_a_compiled_kernel():
    torch.manual_seed(0)
    plain, fast = _plain_and_decode_linear(40, 24)
    x = torch.randn(1, 1, 40)
    with torch.inference_mode():
        torch.testing.assert_close(fast(x), plain(x), atol=1e-5, rtol=1e-5)
    assert DecodeLinear.compile_matvec, "compiling the kernel failed on this machine"
    key, kernel, *_ = fast.__dict__["_matvec_cache"]
    assert kernel is matvec_kernel((24, 40), torch.float32, True)  # one kernel per shape, reused


def test_a_failing_compiler_falls_back_with_a_warning(monkeypatch):
    def broken(*args, **kwargs):
        def kernel(*a):
            raise RuntimeError("no C++ compiler")
        return kernel
    import llmcore.profile as profile
    monkeypatch.setattr(profile, "matvec_kernel", broken)
    monkeypatch.setattr(DecodeLinear, "compile_matvec", True)
    torch.manual_seed(0)
    plain, fast = _plain_and_decode_linear(16, 8, bias=False)
    x = torch.randn(1, 16)
    with pytest.warns(RuntimeWarning, match="compiled matrix-vector kernels are off .*no C\\+\\+ compiler"):
        y = fast(x)
    torch.testing.assert_close(y, plain(x), atol=1e-5, rtol=1e-5)
    assert not DecodeLinear.compile_matvec


def test_fuse_linears_stacks_outputs_and_rejects_mismatches():
    torch.manual_seed(0)
    a, b = nn.Linear(8, 3), nn.Linear(8, 5)
    x = torch.randn(2, 8)
    torch.testing.assert_close(fuse_linears([a, b])(x), torch.cat([a(x), b(x)], dim=-1))
    with pytest.raises(ValueError, match="same input size and the same use of bias"):
        fuse_linears([a, nn.Linear(8, 2, bias=False)])
    with pytest.raises(ValueError, match="same input size"):
        fuse_linears([a, nn.Linear(9, 2)])


def test_decode_steps_of_one_sequence_run_the_compiled_block():
    from llmcore.kvcache import KVCache, decode_step, prefill
    import llmcore.profile as profile
    torch.manual_seed(0)
    cfg = ModelConfig(**{**TINY, "tie_word_embeddings": True})
    model, reference = Transformer(cfg).eval(), Transformer(cfg).eval()
    reference.load_state_dict(model.state_dict())
    prepare_for_decode(model)
    assert all(type(b) is DecodeBlock for b in model.blocks)
    prompt = torch.randint(0, 64, (1, 6), generator=torch.Generator().manual_seed(4))
    caches = [KVCache(cfg, 1, 12, device="cpu", dtype=torch.float32) for _ in range(2)]
    token = torch.tensor([5])
    for m, cache in zip((model, reference), caches):
        prefill(m, prompt, cache)
    for position in range(6, 12):
        got = decode_step(model, token, caches[0], position)
        expected = decode_step(reference, token, caches[1], position)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        token = expected.argmax(-1)
    torch.testing.assert_close(caches[0].k, caches[1].k, atol=1e-5, rtol=1e-5)
    assert DecodeLinear.compile_matvec
    assert any(key[0] == "_block_in" for key in profile._COMPILED)


def test_the_compiled_block_also_serves_a_single_token_without_cache():
    torch.manual_seed(0)
    cfg = ModelConfig(**TINY)
    model, reference = Transformer(cfg).eval(), Transformer(cfg).eval()
    reference.load_state_dict(model.state_dict())
    prepare_for_decode(model)
    token, position = torch.tensor([[7]]), torch.tensor([40])
    with torch.inference_mode():
        torch.testing.assert_close(model(token, positions=position), reference(token, positions=position),
                                   atol=1e-5, rtol=1e-5)
