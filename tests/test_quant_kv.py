"""Tests for appendix C's int8 KV cache (llmcore.quant.Int8KVPool), the hooks of
chapter 9's pool it uses (KVPool._write, _read, bytes_per_token; Engine(kv_pool=)) and
`python -m llmcore.quant`."""
from __future__ import annotations

import json

import openai
import pytest
import torch

from llmcore.engine import Engine
from llmcore.model import ModelConfig
from llmcore.model_runner import KVPool, ModelRunner
from llmcore.pretrained import load
from llmcore.quant import Int8KVPool, QuantLinear, quantize, save_quantized
from llmcore.request import Request
from llmcore.sampling import SamplingParams
from test_server import KEY, MODEL, TIMEOUT, _metrics, _server_process

PROMPTS = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n",
           "import os\n\n\ndef walk(path):\n", "def is_prime(n):\n"]


@pytest.fixture(scope="module")
def tiny():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load(MODEL, device="cpu", dtype=torch.float32)
    torch.set_num_threads(threads)


def _cfg(head_dim: int = 16) -> ModelConfig:
    return ModelConfig(vocab_size=97, dim=4 * head_dim, n_layers=2, n_heads=4,
                       n_kv_heads=2, hidden_dim=48, max_position_embeddings=128)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_pool_reads_back_within_half_a_step(dtype):
    cfg, slots = _cfg(), torch.tensor([5, 0, 17, 9, 30])
    pool = Int8KVPool(cfg, num_blocks=8, block_size=4, device="cpu", dtype=dtype)
    g = torch.Generator().manual_seed(0)
    k, v = (torch.randn(2, 5, 16, generator=g) * 3 for _ in range(2))
    k[0, 1, 3] = 40.0  # an outlier sets its token's scale alone
    k, v = k.to(dtype), v.to(dtype)
    pool._write(1, slots, k, v)
    keys, values = pool._read(1, slots.flip(0))  # any order of slots
    assert keys.shape == values.shape == (2, 5, 16) and keys.dtype == dtype
    for want, got in ((k.flip(1), keys), (v.flip(1), values)):
        want, got = want.float(), got.float()
        step = want.abs().amax(-1, keepdim=True) / 127  # one scale per head and token
        slack = 0 if dtype == torch.float32 else want.abs() * 2**-8  # bf16's rounding
        assert ((got - want).abs() <= step / 2 + slack + 1e-6).all()
    assert (pool._read(0, slots)[0] == 0).all()  # other layers untouched
    assert pool.nbytes == pool.codes.nbytes + pool.scales.nbytes \
        == 8 * 4 * Int8KVPool.bytes_per_token(cfg, dtype)
    assert Int8KVPool.bytes_per_token(cfg, dtype) == 2 * 2 * 2 * (16 + 4)


def test_kv_memory_buys_about_twice_the_blocks_less_the_scales():
    model, _ = load(MODEL, device="cpu", dtype=torch.bfloat16)
    memory = 3 * 2**20
    bf16 = Engine(model, kv_memory=memory)
    int8 = Engine(model, kv_memory=memory, kv_pool=Int8KVPool)
    cfg = model.cfg  # 6 layers, 2 kv heads of 32
    assert int8.blocks.num_blocks == memory // (16 * 2 * 6 * 2 * (32 + 4))
    assert bf16.blocks.num_blocks == memory // (16 * 2 * 6 * 2 * 32 * 2)
    ratio = int8.blocks.num_blocks / bf16.blocks.num_blocks
    assert 1.75 <= ratio <= 2 * cfg.head_dim / (cfg.head_dim + 4)  # 1.78x at 32
    assert isinstance(int8.runner.kv, Int8KVPool)
    assert int8.runner.kv.nbytes <= memory < int8.runner.kv.nbytes + 16 * 864
    wide = _cfg(head_dim=128)  # wider heads: the scales weigh less
    assert KVPool.bytes_per_token(wide, torch.bfloat16) \
        / Int8KVPool.bytes_per_token(wide, torch.bfloat16) >= 1.9


def _replies(tiny, pool, **options) -> dict:
    """Greedy replies to PROMPTS from an Engine with this pool: {i: completion}."""
    model, tokenizer = tiny
    engine = Engine(model, num_blocks=64, max_batch=8, kv_pool=pool, **options)
    for i, text in enumerate(PROMPTS):
        engine.add_request(Request(i, tokenizer.encode(text),
                                   SamplingParams(temperature=0.0, max_tokens=32),
                                   logprobs=2))
    done = {c.request_id: c for c in engine.run()}
    assert engine.blocks.num_free == 64  # every block came back
    assert all(len(c.output_ids) == 32 for c in done.values())
    return done


@pytest.mark.parametrize("options", [{}, {"token_budget": 8, "prefix_caching": True}],
                         ids=["whole-prompts", "chunked-and-cached"])
def test_the_engine_with_an_int8_pool_tips_only_near_ties(tiny, options):
    """Free-running greedy replies part ways at a near-tie and then go on from a
    different text, so token counts after it say little. What holds: up to a reply's
    first difference the tokens are the same, and there the exact pool ranks the int8
    pool's token second, within a small log probability of its own."""
    exact = _replies(tiny, KVPool, **options)
    int8 = _replies(tiny, Int8KVPool, **options)
    same = 0
    for i, want in exact.items():
        got = int8[i].output_ids
        j = next((j for j, (a, b) in enumerate(zip(want.output_ids, got)) if a != b),
                 None)
        if j is None:
            same += 1
            continue
        assert j > 0  # the first token comes from the prompt's own (exact) keys
        rivals = dict(want.logprobs[j].top)
        assert got[j] in rivals, f"reply {i}: token {j} is not a near-tie"
        assert want.logprobs[j].logprob - rivals[got[j]] < 0.5, f"reply {i}, token {j}"
    assert same >= 1


@pytest.mark.parametrize("bad", [Int8KVPool, "int8", dict, None])
def test_a_kv_pool_that_is_not_a_pool_class_is_a_type_error(tiny, bad):
    model = tiny[0]
    if bad is Int8KVPool:  # an instance, not the class
        bad = Int8KVPool(model.cfg, 4, 16, "cpu", torch.float32)
    with pytest.raises(TypeError, match="kv_pool must be KVPool or a subclass"):
        Engine(model, num_blocks=8, kv_pool=bad)
    with pytest.raises(TypeError, match="pool must be KVPool or a subclass"):
        ModelRunner(model, 8, 16, pool=bad)


def test_main_serves_a_saved_quantized_checkpoint_as_saved(tiny, tmp_path,
                                                           monkeypatch):
    import llmcore.server
    from llmcore.quant import main

    save_quantized(quantize(tiny[0], "int4"), tmp_path, MODEL)
    calls = []
    monkeypatch.setattr(llmcore.server, "run", lambda args, **kw: calls.append(kw))
    main(["--model", str(tmp_path), "--kv-cache-dtype", "int8"])
    kw, = calls
    assert kw["kv_pool"] is Int8KVPool
    model = kw["load_model"](tmp_path, device="cpu", dtype=torch.float32)
    assert {m.fmt for m in model.modules() if isinstance(m, QuantLinear)} == {"int4"}
    assert json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    main(["--model", str(tmp_path)])
    assert calls[-1]["kv_pool"] is None  # auto: the model's dtype
    main(["--model", str(tmp_path), "--quantization", "int8"])
    with pytest.raises(SystemExit):  # already quantized: refused, not quantized twice
        calls[-1]["load_model"](tmp_path, device="cpu", dtype=torch.float32)
    with pytest.raises(SystemExit):
        main(["--quantization", "int4", "--group-size", "3"])


@pytest.mark.slow
def test_python_m_llmcore_quant_serves_the_openai_api():
    with _server_process("--quantization", "int8", "--kv-cache-dtype", "int8",
                         "--kv-memory", "4M", module="llmcore.quant") as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                               timeout=TIMEOUT)
        reply = client.completions.create(model=MODEL, prompt=PROMPTS[0],
                                          max_tokens=16, temperature=0)
        assert reply.choices[0].finish_reason == "length" and reply.choices[0].text
        assert reply.usage.completion_tokens == 16
        chat = client.chat.completions.create(
            model=MODEL, max_tokens=8,
            messages=[{"role": "user", "content": "Write a function."}])
        assert chat.choices[0].message.role == "assistant"
        # the pool is int8: 4 MiB holds 4M // (16 tokens x 864 bytes) blocks
        assert _metrics(base)["llmcore_kv_blocks_total"] == 4 * 2**20 // (16 * 864)
