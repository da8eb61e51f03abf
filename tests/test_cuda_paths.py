"""llmcore on a CUDA GPU (issue 17): the paths where a CPU-only assumption can hide.

Every test here is marked `cuda`: skipped on a machine without a CUDA GPU (conftest.py),
run by `scripts/gpu_check.py` on one. What they catch: a tensor, a generator or a mask
made on the CPU inside a path that runs on the GPU (a device-mismatch error, or a silent
copy back and forth); a dtype policy that picks emulated bfloat16; sampling whose seeded
rows depend on the batch on the GPU; a server that ignores --device. Models are
built on the CPU from a seed and moved, so the CPU and GPU copies have the same weights
and float32 results can be compared across devices.
"""
from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch

from conftest import stop_process
from llmcore.constrained import OBJECT_START, JsonConstraint, json_state
from llmcore.device import DEVICE_ENV, DTYPE_ENV, default_dtype, pick_device
from llmcore.engine import Engine, Request
from llmcore.fast import FastDecoder
from llmcore.generate import generate, stream
from llmcore.kvcache import KVCache, greedy_generate, greedy_generate_uncached
from llmcore.model import ModelConfig, Transformer
from llmcore.paged import PagedKVCache, PrefixCachingKVCache
from llmcore.pretrained import load, load_tokenizer
from llmcore.sampling import Sampler, SamplingParams, make_generator, sample
from llmcore.speculative import PromptLookup, accept_sampled, speculative_generate

pytestmark = pytest.mark.cuda

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48,
            max_position_embeddings=256)


def _model(device="cuda", dtype=torch.float32, seed=0, **overrides):
    """The same random weights on any device: built on the CPU, then moved."""
    torch.manual_seed(seed)
    return Transformer(ModelConfig(**{**TINY, **overrides})).to(device, dtype).eval()


def _prompt(length=9, vocab=64, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (length,), generator=gen).tolist()


def _on_cuda(*tensors):
    return all(t.device.type == "cuda" for t in tensors)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


@pytest.fixture(scope="module")
def tiny_cuda():
    model, _ = load("tiny", device="cuda", dtype=torch.float32)
    return model


# ----------------------------------------------------------- device and dtype policy
def test_default_dtype_is_bfloat16_exactly_where_the_gpu_has_it_natively():
    major, _ = torch.cuda.get_device_capability()
    native = torch.cuda.is_bf16_supported(including_emulation=False)
    assert native == (major >= 8)  # Ampere and later; a T4 (7.5) only emulates it
    assert default_dtype("cuda") == (torch.bfloat16 if major >= 8 else torch.float16)


def test_loading_follows_the_device_and_dtype_defaults(monkeypatch):
    monkeypatch.delenv(DEVICE_ENV, raising=False)
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    model, _ = load("tiny")  # CUDA is the fastest device here
    assert model.device.type == "cuda" and model.dtype == default_dtype("cuda")
    assert all(_on_cuda(t) for t in [*model.parameters(), *model.buffers()])
    monkeypatch.setenv(DTYPE_ENV, "float32")
    assert load("tiny")[0].dtype == torch.float32
    monkeypatch.setenv(DEVICE_ENV, "cpu")
    assert load("tiny")[0].device.type == "cpu"


def test_caches_default_to_the_env_device(monkeypatch):
    monkeypatch.setenv(DEVICE_ENV, "cuda")
    monkeypatch.delenv(DTYPE_ENV, raising=False)
    cfg = ModelConfig(**TINY)
    assert pick_device().type == "cuda"
    contiguous = KVCache(cfg, batch_size=1, max_len=8)
    paged = PagedKVCache(cfg, num_blocks=4, block_size=4)
    assert _on_cuda(contiguous.k, contiguous.v, paged.pool)
    assert contiguous.k.dtype == paged.pool.dtype == default_dtype("cuda")


# ------------------------------------------------------------------ model and KV cache
def test_forward_on_cuda_matches_the_cpu():
    cpu, gpu = _model("cpu"), _model("cuda")
    ids = torch.tensor([_prompt(12), _prompt(12, seed=2)])
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, :4] = 0  # left padding
    with torch.inference_mode():
        for kwargs in ({}, {"attention_mask": mask}):
            on_gpu = gpu(ids.cuda(), **{k: v.cuda() for k, v in kwargs.items()})
            assert _on_cuda(on_gpu)
            torch.testing.assert_close(on_gpu.cpu(), cpu(ids, **kwargs), atol=1e-4,
                                       rtol=1e-4)


def test_cached_greedy_on_cuda_equals_uncached_and_the_cpu():
    cpu, gpu = _model("cpu"), _model("cuda")
    prompt = torch.tensor([_prompt(9), _prompt(9, seed=3)])
    cache = KVCache(gpu.cfg, 2, 9 + 20, device="cuda", dtype=torch.float32)
    out = greedy_generate(gpu, prompt.cuda(), 20, cache)
    assert _on_cuda(out)
    assert torch.equal(out, greedy_generate_uncached(gpu, prompt.cuda(), 20))
    reference = greedy_generate(cpu, prompt, 20, KVCache(cpu.cfg, 2, 29, device="cpu",
                                                         dtype=torch.float32))
    assert torch.equal(out.cpu(), reference)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_models_run_and_stay_close_to_float32(dtype):
    ref, low = _model("cuda"), _model("cuda", dtype)
    ids = torch.tensor([_prompt(16)], device="cuda")
    with torch.inference_mode():
        out = low(ids)
        assert out.dtype == dtype and torch.isfinite(out).all()
        scale = ref(ids).abs().max()
        assert (out.float() - ref(ids)).abs().max() < 0.05 * scale


def test_fast_decoder_passes_cuda_calls_to_the_model():
    gpu = _model("cuda")
    fast = FastDecoder(gpu)
    prompt = torch.tensor([_prompt(7)], device="cuda")
    caches = [KVCache(gpu.cfg, 1, 7 + 12, device="cuda", dtype=torch.float32)
              for _ in range(2)]
    assert torch.equal(greedy_generate(fast, prompt, 12, caches[0]),
                       greedy_generate(gpu, prompt, 12, caches[1]))


def test_paged_cache_on_cuda_matches_the_contiguous_cache():
    gpu = _model("cuda")
    prompts = [_prompt(11, seed=4), _prompt(5, seed=5)]
    cache = PagedKVCache(gpu.cfg, num_blocks=16, block_size=4, device="cuda",
                         dtype=torch.float32)
    for seq, prompt in enumerate(prompts):
        cache.add_sequence(seq)
        cache.set_batch([seq])
        with torch.inference_mode():
            gpu(torch.tensor([prompt], device="cuda"),
                positions=torch.arange(len(prompt), device="cuda")[None],
                kv_cache=cache)
    cache.set_batch([0, 1])  # one batched decode step for both
    tokens = torch.tensor([[3], [7]], device="cuda")
    positions = torch.tensor([[len(prompts[0])], [len(prompts[1])]], device="cuda")
    with torch.inference_mode():
        batched = gpu(tokens, positions=positions, kv_cache=cache)[:, -1]
    assert _on_cuda(cache.pool, cache._write_slots, cache._read_slots, batched)
    for row, (prompt, token) in enumerate(zip(prompts, [3, 7])):
        with torch.inference_mode():
            alone = gpu(torch.tensor([prompt + [token]], device="cuda"))[0, -1]
        torch.testing.assert_close(batched[row], alone, atol=1e-4, rtol=1e-4)


def test_prefix_cache_hit_on_cuda_gives_the_same_tokens():
    gpu = _model("cuda")
    prompt = _prompt(18, seed=10)
    reference = greedy_generate(gpu, torch.tensor([prompt], device="cuda"), 4,
                                KVCache(gpu.cfg, 1, 22, device="cuda",
                                        dtype=torch.float32))
    cache = PrefixCachingKVCache(gpu.cfg, num_blocks=32, block_size=4, device="cuda",
                                 dtype=torch.float32)
    hits = []
    for seq in ("first", "second"):
        hit = cache.add_sequence(seq, prompt)
        cache.set_batch([seq])
        out = greedy_generate(gpu, torch.tensor([prompt], device="cuda"), 4, cache,
                              cached_len=hit)
        hits.append(hit)
        assert torch.equal(out, reference)
    assert hits == [0, 16]


# -------------------------------------------------------------- generators and sampling
def test_request_generators_live_on_the_gpu_and_rows_do_not_depend_on_the_batch():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(0)).cuda()
    params = SamplingParams(temperature=1.0, seed=7)
    g = make_generator(7, "cuda")
    assert g.device.type == "cuda"
    alone = [int(Sampler()(logits[:1], [params], [make_generator(7, "cuda")])[0])
             for _ in range(3)]
    assert len(set(alone)) == 1  # the same seed, the same token
    others = SamplingParams(temperature=1.0)
    for size in (2, 4):  # the seeded row among unseeded ones
        batch = Sampler()(logits[:size], [params] + [others] * (size - 1),
                          [make_generator(7, "cuda")] + [None] * (size - 1))
        assert _on_cuda(batch) and int(batch[0]) == alone[0]


def test_seeded_sampling_on_cuda_logits_reproduces():
    logits = torch.randn(64, generator=torch.Generator().manual_seed(1)).cuda()
    params = SamplingParams(temperature=1.0, top_p=0.9, seed=3)
    draws = {sample(logits, params) for _ in range(3)}
    assert len(draws) == 1
    shared = [Sampler(seed=5)(logits[None].expand(3, -1),
                              [SamplingParams(temperature=1.0)] * 3).tolist()
              for _ in range(2)]
    assert shared[0] == shared[1]  # Sampler(seed) keeps one generator per device
    assert Sampler(seed=5).shared_generator(logits.device).device.type == "cuda"


def test_every_processor_gives_the_same_logits_on_cuda_as_on_the_cpu():
    params = [SamplingParams(temperature=0.7, top_k=5, repetition_penalty=1.3,
                             logit_bias={3: 2.0, 9: -5.0}),
              SamplingParams(temperature=1.2, top_p=0.8, min_p=0.05,
                             presence_penalty=0.5, frequency_penalty=0.3)]
    logits = torch.randn(2, 64, generator=torch.Generator().manual_seed(2))
    prompts, outputs = [[1, 2, 3], [4, 5]], [[3, 3, 7], [9]]
    results = []
    for device in ("cpu", "cuda"):
        penalties, warpers = Sampler().processors(params, 64, torch.device(device),
                                                  prompts, outputs)
        x = logits.to(device)
        for processor in penalties + warpers:
            x = processor(x)
        results.append(x.cpu())
    assert len(penalties) == 3 and len(warpers) == 4
    torch.testing.assert_close(results[1], results[0])  # same -inf pattern, same values


def test_greedy_and_seeded_generate_on_cuda(tokenizer, tiny_cuda):
    cpu, _ = load("tiny", device="cpu", dtype=torch.float32)
    greedy = SamplingParams(temperature=0.0, max_tokens=24)
    on_gpu = generate(tiny_cuda, tokenizer, "def add(a, b):\n", greedy)
    assert on_gpu.token_ids == generate(cpu, tokenizer, "def add(a, b):\n",
                                        greedy).token_ids
    seeded = SamplingParams(temperature=0.8, max_tokens=24, seed=11, stop=["\n\n"])
    runs = [generate(tiny_cuda, tokenizer, "import os\n", seeded) for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids
    events = list(stream(tiny_cuda, tokenizer, "import os\n", seeded))
    assert "".join(e.text for e in events[:-1]) == events[-1].text == runs[0].text


# ------------------------------------------------------------------------------ engine
def test_engine_on_cuda_gives_each_request_its_own_greedy_tokens():
    gpu = _model("cuda")
    requests = [Request(f"r{i}", _prompt(3 + i, seed=20 + i),
                        SamplingParams(temperature=0.0, max_tokens=5 + 3 * i))
                for i in range(6)]
    engine = Engine(gpu, num_blocks=64, block_size=4, max_batch=4)
    assert engine.device.type == "cuda" and _on_cuda(engine.runner.kv.pool)
    for r in requests:
        engine.add_request(r)
    done = {c.request_id: c for c in engine.run()}
    for r in requests:
        alone = greedy_generate(
            gpu, torch.tensor([r.prompt_ids], device="cuda"), r.params.max_tokens,
            KVCache(gpu.cfg, 1, len(r.prompt_ids) + r.params.max_tokens,
                    device="cuda", dtype=torch.float32))
        assert done[r.request_id].output_ids == alone[0].tolist()
        assert done[r.request_id].finish_reason == "length"
    assert max(engine.batch_sizes) == 4


def test_engine_on_cuda_seeded_requests_do_not_depend_on_the_batch():
    gpu = _model("cuda")
    params = SamplingParams(temperature=1.0, max_tokens=15, seed=7)
    outputs = []
    for others in (0, 3):
        engine = Engine(gpu, num_blocks=64, block_size=4, max_batch=4)
        for i in range(others):
            engine.add_request(Request(f"o{i}", _prompt(5, seed=i),
                                       SamplingParams(temperature=1.0, max_tokens=9)))
        engine.add_request(Request("seeded", [4, 5, 6], params))
        outputs.append(next(c for c in engine.run()
                            if c.request_id == "seeded").output_ids)
    assert outputs[0] == outputs[1]


def test_engine_on_cuda_logprobs_json_and_bfloat16(tokenizer):
    model, _ = load("tiny", device="cuda", dtype=torch.bfloat16)
    engine = Engine(model, num_blocks=64, block_size=16, max_batch=4,
                    tokenizer=tokenizer)
    prompt = tokenizer.encode("data = ")
    engine.add_request(Request("lp", prompt, SamplingParams(temperature=0.0,
                                                            max_tokens=8),
                               logprobs=2, prompt_logprobs=True))
    engine.add_request(Request("json", prompt, SamplingParams(temperature=1.0,
                                                              max_tokens=40, seed=1),
                               constraint=JsonConstraint(tokenizer)))
    done = {c.request_id: c for c in engine.run()}
    lp = done["lp"]
    assert lp.error is None and len(lp.logprobs) == len(lp.output_ids)
    for x in lp.logprobs:  # greedy: the chosen token is (one of) the most likely
        assert math.isfinite(x.logprob) and x.top[0][1] == pytest.approx(x.logprob)
    js = done["json"]
    assert js.error is None
    if js.finish_reason == "stop":
        json.loads(js.text)
    else:
        assert json_state(js.text.encode(), OBJECT_START) is not None


# ------------------------------------------------------------------ constrained masks
def test_json_mask_on_cuda_logits_is_the_cpu_mask(tokenizer):
    constraint = JsonConstraint(tokenizer)
    logits = torch.randn(tokenizer.vocab_size + 3,
                         generator=torch.Generator().manual_seed(0))
    for state in (OBJECT_START, json_state(b'{"a": [1, "x', OBJECT_START)):
        on_gpu = constraint.mask_logits(logits.cuda(), state)
        assert _on_cuda(on_gpu)
        assert torch.equal(on_gpu.cpu(), constraint.mask_logits(logits, state))


def test_constrained_generate_on_cuda_parses(tokenizer):
    gpu = _model("cuda", vocab_size=tokenizer.vocab_size)
    constraint = JsonConstraint(tokenizer)
    finished = 0
    for seed in range(12):
        result = generate(gpu, tokenizer, [1, 2, 3],
                          SamplingParams(temperature=1.0, max_tokens=40, seed=seed),
                          constraint=constraint)
        if result.finish_reason == "stop":
            assert isinstance(json.loads(result.text), dict)
            finished += 1
        else:
            assert json_state(result.text.encode(), OBJECT_START) is not None
    assert finished > 0


# ------------------------------------------------------------------------ speculative
def test_speculative_greedy_on_cuda_gives_the_targets_tokens():
    target, draft = _model("cuda", seed=0), _model("cuda", seed=1, n_layers=1)
    prompt = _prompt(8, seed=30)
    params = SamplingParams(temperature=0.0, max_tokens=20)
    expected = greedy_generate(target, torch.tensor([prompt], device="cuda"), 20,
                               KVCache(target.cfg, 1, 28, device="cuda",
                                       dtype=torch.float32))[0].tolist()
    for drafter in (draft, PromptLookup(2)):
        result, stats = speculative_generate(target, drafter, None, prompt, params, k=3)
        assert result.token_ids == expected and stats.target_passes >= 1


def test_speculative_sampling_on_cuda_reproduces_with_a_seed():
    target, draft = _model("cuda", seed=0), _model("cuda", seed=1, n_layers=1)
    params = SamplingParams(temperature=1.0, max_tokens=16, seed=4)
    runs = [speculative_generate(target, draft, None, _prompt(6), params, k=3)[0]
            for _ in range(2)]
    assert runs[0].token_ids == runs[1].token_ids and len(runs[0].token_ids) == 16
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]], device="cuda")
    q = torch.tensor([[0.1, 0.1, 0.4, 0.4]], device="cuda")
    accepted, extra = accept_sampled(p, q, torch.tensor([3], device="cuda"),
                                     make_generator(0, "cuda"))
    assert accepted == 0 and extra != 3  # the target never picks token 3


# ------------------------------------------------------------------------------ server
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_server_with_device_cuda_serves_what_generate_gives(tokenizer, tiny_cuda):
    import openai
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmcore.server", "--model", "tiny", "--host",
         "127.0.0.1", "--port", str(port), "--device", "cuda", "--dtype", "float32"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        client = openai.OpenAI(base_url=base + "/v1", api_key="-", max_retries=0,
                               timeout=60)
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, "the server exited"
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                assert time.monotonic() < deadline, "no answer within 120 s"
                time.sleep(0.3)
        log.seek(0)
        assert "serving" in log.read().decode(errors="replace")
        reply = client.completions.create(model="tiny", prompt="def add(a, b):\n",
                                          max_tokens=24, temperature=0)
        expected = generate(tiny_cuda, tokenizer, "def add(a, b):\n",
                            SamplingParams(temperature=0.0, max_tokens=24))
        assert reply.choices[0].text == expected.text
        chunks = client.completions.create(model="tiny", prompt="import os\n",
                                           max_tokens=16, temperature=0.7, seed=3,
                                           stream=True)
        assert "".join(c.choices[0].text for c in chunks if c.choices)
    finally:
        stop_process(proc)
        if proc.returncode not in (0, -15):
            log.seek(0)
            print(log.read().decode(errors="replace")[-4000:])
        log.close()


# ----------------------------------------------------------------- measurement helpers
def test_ceilings_and_timers_on_cuda():
    from llmcore.profile import (measure_copy_bandwidth, measure_matmul_flops,
                                 median_time)
    assert measure_copy_bandwidth("cuda", nbytes=2**26) > 1e11  # > 100 GB/s on any GPU
    assert measure_matmul_flops("cuda", torch.float32, size=2048) > 1e12
    a = torch.randn(4096, 4096, device="cuda")
    # synchronising: a queued product is timed, not just its launch
    assert median_time(lambda: a @ a, repeats=3, device="cuda") > 1e-5


def test_a_few_training_steps_on_cuda():
    from llmcore.pretrained import Recipe, train
    cfg = ModelConfig(**TINY)
    ids = torch.randint(0, 64, (4096,), generator=torch.Generator().manual_seed(0))
    model, curve, _ = train(cfg, Recipe(steps=4, batch=4, seq_len=32, warmup=1), ids,
                            torch.device("cuda"), log_every=1, log=lambda s: None)
    assert model.device.type == "cuda" and len(curve) == 4
    assert all(math.isfinite(p["loss"]) for p in curve)
