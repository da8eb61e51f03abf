"""Tests for llmcore.kvcache: size formula, the contiguous cache, generation with and without it."""
import pytest
import torch

from llmcore.kvcache import (CompiledDecodeTransformer, KVCache, compile_decode_steps, decode_step, greedy_generate,
                             greedy_generate_uncached, kv_cache_bytes, max_concurrent_sequences, prefill)
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
    with pytest.raises(ValueError, match="max_new_tokens must be >= 1"):
        greedy_generate(model, _prompt(), 0, cache)


# --- one compiled graph per decode step (compile_decode_steps) ---------------------------------------

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 16}


def _count_ordinary_decode_steps(monkeypatch) -> list:
    """Record the sequence length of every call that reaches the ordinary Transformer.forward."""
    calls, ordinary = [], Transformer.forward

    def spy(self, input_ids, *args, **kwargs):
        calls.append(input_ids.shape[1])
        return ordinary(self, input_ids, *args, **kwargs)
    monkeypatch.setattr(Transformer, "forward", spy)
    return calls


@pytest.mark.parametrize("overrides", [
    {},
    {"n_kv_heads": 4, "qk_norm": True, "attention_bias": True, "attention_out_bias": True, "mlp_bias": True,
     "sliding_window": 5, "rope_scaling": LLAMA3_SCALING, "tie_word_embeddings": True},
])
def test_compiled_decode_steps_match_the_ordinary_forward(overrides, monkeypatch):
    reference, model = _model(**overrides), compile_decode_steps(_model(**overrides))
    prompt = _prompt(batch=1)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    caches = [KVCache(model.cfg, 1, 24, device="cpu", dtype=torch.float32) for _ in range(2)]
    calls = _count_ordinary_decode_steps(monkeypatch)
    expected = [prefill(reference, prompt, caches[0])]
    got = [prefill(model, prompt, caches[1])]
    for p in range(prompt.shape[1], 24):
        expected.append(decode_step(reference, expected[-1].argmax(-1), caches[0], p))
        got.append(decode_step(model, expected[-2].argmax(-1), caches[1], p))
    assert calls.count(1) == len(got) - 1, "the reference's steps only: the compiled model never ran them"
    torch.testing.assert_close(torch.stack(got), torch.stack(expected), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[1].k, caches[0].k, atol=1e-5, rtol=0)  # the same cache contents
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())  # nothing written to weights
    assert torch.equal(greedy_generate(model, prompt, 12, caches[1]), greedy_generate_uncached(reference, prompt, 12))


def test_compiled_decode_steps_read_the_current_weights():
    reference, model = _model(), compile_decode_steps(_model())
    prompt = _prompt(batch=1)
    caches = [KVCache(model.cfg, 1, 12, device="cpu", dtype=torch.float32) for _ in range(2)]
    token = prefill(reference, prompt, caches[0]).argmax(-1)
    prefill(model, prompt, caches[1])
    decode_step(model, token, caches[1], 9)  # compiles
    with torch.no_grad():
        for m in (reference, model):
            m.blocks[1].mlp.down_proj.weight.mul_(3.0)  # in place
            m.blocks[0].attn.q_proj.weight = torch.nn.Parameter(m.blocks[0].attn.q_proj.weight.flip(0))  # replaced
    for position in (9, 10):
        torch.testing.assert_close(decode_step(model, token, caches[1], position),
                                   decode_step(reference, token, caches[0], position), atol=1e-5, rtol=1e-5)


def test_compiled_decode_steps_leave_other_calls_and_bad_input_to_the_ordinary_path(monkeypatch):
    model = compile_decode_steps(_model())
    assert compile_decode_steps(model) is model and type(model).__name__ == "CompiledDecodeTransformer"
    cache = KVCache(model.cfg, 1, 12, device="cpu", dtype=torch.float32)
    prefill(model, _prompt(batch=1), cache)
    with pytest.raises(ValueError, match="position 12 does not fit in a KVCache with max_len=12"):
        decode_step(model, torch.tensor([3]), cache, 12)
    with pytest.raises(IndexError):  # a token id outside the vocabulary, as in the ordinary forward pass
        decode_step(model, torch.tensor([TINY["vocab_size"]]), cache, 9)
    calls = _count_ordinary_decode_steps(monkeypatch)
    batch_cache = KVCache(model.cfg, 2, 12, device="cpu", dtype=torch.float32)
    prefill(model, _prompt(batch=2), batch_cache)
    decode_step(model, torch.tensor([3, 4]), batch_cache, 9)  # two sequences
    with torch.no_grad():
        model(torch.tensor([[3]]), positions=torch.tensor([9]))  # no cache
    with torch.enable_grad():
        model(torch.tensor([[3]]), positions=torch.tensor([9]), kv_cache=cache)  # autograd wants the modules
    assert calls == [9, 1, 1, 1]
    with pytest.raises(TypeError, match="needs an llmcore Transformer"):
        compile_decode_steps(torch.nn.Linear(2, 2))


def test_a_failing_compiler_turns_compiled_decode_steps_off_with_a_warning(monkeypatch):
    from llmcore import kvcache

    def broken(*key, dynamic=False, options=None):
        def step(*args):
            raise RuntimeError("no C++ compiler")
        return step
    monkeypatch.setattr(kvcache, "_compiled", broken)
    monkeypatch.setattr(CompiledDecodeTransformer, "compile_steps", True)
    reference, model = _model(), compile_decode_steps(_model())
    caches = [KVCache(model.cfg, 1, 12, device="cpu", dtype=torch.float32) for _ in range(2)]
    token = prefill(reference, _prompt(batch=1), caches[0]).argmax(-1)
    prefill(model, _prompt(batch=1), caches[1])
    with pytest.warns(RuntimeWarning, match="compiled decode steps are off .*no C\\+\\+ compiler"):
        got = decode_step(model, token, caches[1], 9)
    assert not CompiledDecodeTransformer.compile_steps
    torch.testing.assert_close(got, decode_step(reference, token, caches[0], 9), atol=1e-6, rtol=0)


def test_compiled_decode_steps_compile_once_per_kind_of_cache():
    from torch._dynamo.utils import counters
    reference, model = _model(n_layers=2), compile_decode_steps(_model(n_layers=2))
    prompt = _prompt(batch=1)
    before = counters["stats"]["unique_graphs"]
    for max_len in (20, 27, 33, 41, 50, 58, 64, 71, 80, 96):  # more caches than torch.compile keeps graphs
        if max_len % 2:
            cache = KVCache(model.cfg, 1, max_len, device="cpu", dtype=torch.float32)
        else:
            with torch.inference_mode():  # a cache of inference tensors is another kind of input
                cache = KVCache(model.cfg, 1, max_len, device="cpu", dtype=torch.float32)
        got = greedy_generate(model, prompt, max_len - prompt.shape[1], cache)
        assert torch.equal(got, greedy_generate_uncached(reference, prompt, max_len - prompt.shape[1]))
    assert counters["stats"]["unique_graphs"] - before <= 2, "a new cache length must not compile a new graph"
