"""llmcore.quant (appendix C), the weights: int8 per row and int4 in groups, the packed
layout, QuantLinear's two products, quantize(model) in every loop, quantized checkpoints.
The int8 KV cache and the server entry point are tested in tests/test_quant_kv.py."""
import pytest
import torch
from torch import nn

from llmcore.engine import Engine
from llmcore.fast import FastDecoder
from llmcore.generate import generate
from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.pretrained import bundled_dir, load
from llmcore.quant import (QuantLinear, dequantize_int4, dequantize_int8, load_quantized,
                           quantize, quantize_int4, quantize_int8, save_quantized,
                           unpack_int4, weight_bytes)
from llmcore.request import Request
from llmcore.sampling import SamplingParams
from llmcore.speculative import speculative_generate


def _model(n_layers=2, bias=False, seed=0):
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=96, dim=64, n_layers=n_layers, n_heads=4, n_kv_heads=2,
                      hidden_dim=88, max_position_embeddings=128, attention_bias=bias,
                      tie_word_embeddings=True)
    model = Transformer(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3) if p.dim() > 1 else p.uniform_(0.5, 1.5)
    return model


def test_int8_codes_reconstruct_within_half_a_step_and_a_zero_row_stays_zero():
    w = torch.randn(16, 40)
    w[3] = 0.0
    codes, scale = quantize_int8(w)
    assert codes.dtype == torch.int8 and scale.shape == (16,)
    assert codes.abs().max() == 127  # each nonzero row uses its full range
    error = (dequantize_int8(codes, scale) - w).abs()
    assert (error <= scale[:, None] / 2 + 1e-7).all()
    assert (codes[3] == 0).all() and torch.isfinite(scale).all()


def test_int4_packs_code_j_low_and_code_j_plus_half_high_and_pads_to_groups():
    w = torch.randn(5, 40)  # 40 inputs: two groups of 32, the second padded
    packed, scale = quantize_int4(w, group_size=32)
    assert packed.dtype == torch.uint8 and packed.shape == (5, 32)
    assert scale.shape == (5, 2)
    codes = unpack_int4(packed, 2)  # (5, 2, 32), in input order
    first = packed.view(5, 2, 16)
    assert torch.equal(first & 15, codes[..., :16]) and torch.equal(first >> 4,
                                                                    codes[..., 16:])
    assert torch.equal(codes[:, 1, 8:], torch.full((5, 24), 8, dtype=torch.uint8))
    expect = torch.round(w[:, :32] / scale[:, :1]).clamp(-8, 7) + 8
    assert torch.equal(codes[:, 0].float(), expect)
    error = (dequantize_int4(packed, scale, 40) - w).abs()
    groups = torch.cat([scale[:, :1].expand(5, 32), scale[:, 1:].expand(5, 8)], dim=1)
    assert (error <= groups / 2 + 1e-6).all()


@pytest.mark.parametrize("bad", [0, 3, 33, -32, 32.0, "32", None])
def test_a_bad_group_size_is_refused(bad):
    with pytest.raises(ValueError, match="group_size must be an even int"):
        quantize_int4(torch.randn(4, 64), bad)
    with pytest.raises(ValueError, match="group_size"):
        quantize(_model(1), "int4", group_size=bad)


def test_bad_formats_and_models_are_refused():
    with pytest.raises(ValueError, match="fmt must be one of"):
        quantize(_model(1), "int3")
    with pytest.raises(ValueError, match="fmt must be one of"):
        QuantLinear(8, 8, "fp8")
    with pytest.raises(TypeError, match="Transformer"):
        quantize(nn.Linear(4, 4), "int8")
    with pytest.raises(ValueError, match="already quantized"):
        quantize(quantize(_model(1), "int8"), "int4")


@pytest.mark.parametrize("fmt,group", [("int8", 32), ("int4", 32), ("int4", 64),
                                       ("int4", 6)])
def test_quant_linear_kernel_and_dequantized_paths_agree(fmt, group):
    torch.manual_seed(1)
    linear = nn.Linear(88, 48, bias=True)
    layer = QuantLinear.from_linear(linear, fmt, group)
    x = torch.randn(3, 5, 88)
    plain = layer.dequantize_then_matmul(x)
    assert plain.shape == (3, 5, 48)
    # group 6 has no CPU kernel: the layer says so and forward takes the plain path
    assert (layer._kernel is not None) == (group != 6)
    out = layer(x)
    assert out.shape == plain.shape and out.dtype == x.dtype
    assert (out - plain).norm() <= 0.02 * plain.norm()  # bfloat16 inputs in the kernel
    assert torch.allclose(layer.weight, dequantize_int8(*quantize_int8(linear.weight))
                          if fmt == "int8" else
                          dequantize_int4(*quantize_int4(linear.weight, group), 88))


def test_quantize_returns_a_copy_and_leaves_the_model_alone():
    model = _model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    q = quantize(model, "int4")
    assert not any(isinstance(m, nn.Linear) for m in q.modules())
    assert sum(isinstance(m, QuantLinear) for m in q.modules()) == 2 * 7 + 1
    assert isinstance(q.lm_head, QuantLinear) and not isinstance(model.lm_head,
                                                                 QuantLinear)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert q.embed.weight is not model.embed.weight
    assert weight_bytes(q) < weight_bytes(quantize(model, "int8")) < weight_bytes(model)


def test_a_quantized_model_runs_in_every_loop():
    model, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    q = quantize(model, "int8")
    params = SamplingParams(temperature=0.0, max_tokens=12)
    reply = generate(q, tokenizer, "def main():\n", params)
    assert reply.usage.completion_tokens == 12 and reply.text
    # the engine's flat batches (many rows through the kernel) give each request the
    # tokens it gets alone
    prompts = [tokenizer.encode(p) for p in ("import os\n", "class A:\n", "x = [")]
    engine = Engine(q, num_blocks=32, block_size=16, max_batch=3)
    for i, ids in enumerate(prompts):
        engine.add_request(Request(f"r{i}", ids, SamplingParams(temperature=0.0,
                                                                max_tokens=8)))
    done = {c.request_id: c.output_ids for c in engine.run()}
    for i, ids in enumerate(prompts):
        cache = KVCache(q.cfg, 1, len(ids) + 8, device="cpu", dtype=torch.float32)
        alone = greedy_generate(q, torch.tensor([ids]), 8, cache)[0].tolist()
        assert done[f"r{i}"] == alone
    # speculative decoding with a quantized draft keeps the target's greedy reply
    result, stats = speculative_generate(model, quantize(model, "int4"), tokenizer,
                                         "def main():\n", params, k=3)
    assert result.token_ids == generate(model, tokenizer, "def main():\n",
                                        params).token_ids
    assert stats.accepted > 0


@pytest.mark.parametrize("fmt", ["int8", "int4"])
def test_the_compiled_step_of_a_quantized_model_matches_its_plain_forward(fmt):
    q = quantize(_model(1), fmt)
    prompt = torch.randint(0, 96, (1, 6), generator=torch.Generator().manual_seed(0))
    caches = [KVCache(q.cfg, 1, 20, device="cpu", dtype=torch.float32)
              for _ in range(2)]
    fast = FastDecoder(q)
    with _no_warning():
        got = greedy_generate(fast, prompt, 10, caches[0])
    assert fast.compile_steps  # compiled, not fallen back
    assert torch.equal(got, greedy_generate(q, prompt, 10, caches[1]))


class _no_warning:
    def __enter__(self):
        import warnings
        self._catch = warnings.catch_warnings(record=True)
        self.records = self._catch.__enter__()
        warnings.simplefilter("always", RuntimeWarning)

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        fallbacks = [r for r in self.records if "uncompiled" in str(r.message)]
        assert not fallbacks, fallbacks[0].message


def test_a_quantized_checkpoint_round_trips(tmp_path):
    model, _ = load("tiny", device="cpu", dtype=torch.float32)
    q = quantize(model, "int4", group_size=64)
    out = save_quantized(q, tmp_path / "tiny-int4", source="tiny")
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    back = load_quantized(out, device="cpu", dtype=torch.float32)
    ids = torch.tensor([[1, 2, 3, 4]])
    assert torch.equal(back(ids), q(ids))
    assert back.lm_head.group_size == 64 and back.lm_head._kernel is not None
    with pytest.raises(ValueError, match="no QuantLinear"):
        save_quantized(model, tmp_path / "plain", source="tiny")
    with pytest.raises(ValueError, match="quantization_config"):
        load_quantized(bundled_dir("tiny"))  # a checkpoint that is not quantized
    small = quantize(_model(1), "int8")
    with pytest.raises(ValueError, match="does not describe this model"):
        save_quantized(small, tmp_path / "wrong", source="tiny")
