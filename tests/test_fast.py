"""Tests for llmcore.fast: FastDecoder gives the model's results on every path it takes."""
import re
from pathlib import Path

import pytest
import torch

import llmcore.fast as fast
from llmcore.fast import FastDecoder
from llmcore.kvcache import (KVCache, decode_step, greedy_generate, greedy_generate_uncached,
                             prefill)
from llmcore.model import ModelConfig, Transformer
from llmcore.paged import PagedKVCache

TINY = dict(vocab_size=256, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, hidden_dim=96)
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
VARIANTS = [{}, {"tie_word_embeddings": True}, {"attention_bias": True},
            {"attention_bias": True, "attention_out_bias": True, "mlp_bias": True},
            {"qk_norm": True, "head_dim": 32}, {"n_kv_heads": 1}, {"sliding_window": 5},
            {"attn_impl": "explicit"}]
EVERYTHING = {"n_kv_heads": 4, "qk_norm": True, "attention_bias": True,
              "attention_out_bias": True, "mlp_bias": True, "sliding_window": 5,
              "rope_scaling": LLAMA3_SCALING, "tie_word_embeddings": True}


def _model(**overrides):
    torch.manual_seed(0)
    return Transformer(ModelConfig(**{**TINY, **overrides})).eval()


def _prompt(batch=1, length=9, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, TINY["vocab_size"], (batch, length), generator=gen)


def _cache(cfg, max_len, batch=1):
    return KVCache(cfg, batch, max_len, device="cpu", dtype=torch.float32)


def _count_model_calls(monkeypatch) -> list:
    """Record the sequence length of every call that reaches Transformer.forward."""
    calls, ordinary = [], Transformer.forward

    def spy(self, input_ids, *args, **kwargs):
        calls.append(input_ids.shape[1])
        return ordinary(self, input_ids, *args, **kwargs)
    monkeypatch.setattr(Transformer, "forward", spy)
    return calls


@pytest.mark.parametrize("overrides", [{}, EVERYTHING])
def test_compiled_decode_steps_match_the_model(overrides, monkeypatch):
    model = _model(**overrides)
    fast_model = FastDecoder(model)
    prompt = _prompt()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    caches = [_cache(model.cfg, 24) for _ in range(2)]
    calls = _count_model_calls(monkeypatch)
    expected = [prefill(model, prompt, caches[0])]
    got = [prefill(fast_model, prompt, caches[1])]
    for p in range(prompt.shape[1], 24):
        expected.append(decode_step(model, expected[-1].argmax(-1), caches[0], p))
        got.append(decode_step(fast_model, expected[-2].argmax(-1), caches[1], p))
    assert calls == [9] + [1] * (len(got) - 1), "FastDecoder never called the model"
    torch.testing.assert_close(torch.stack(got), torch.stack(expected), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[1].k, caches[0].k, atol=1e-5, rtol=0)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert torch.equal(greedy_generate(fast_model, prompt, 12, caches[1]),
                       greedy_generate_uncached(model, prompt, 12))
    assert any(key[0] == "decode_graph" for key in fast._COMPILED)


@pytest.mark.parametrize("overrides", VARIANTS + [EVERYTHING])
def test_few_rows_match_the_model_with_and_without_a_cache(overrides):
    model = _model(**overrides)
    fast_model = FastDecoder(model, compile=False)
    ids = _prompt(length=12)
    with torch.inference_mode():
        full = model(ids)
        torch.testing.assert_close(fast_model(ids), full, atol=1e-5, rtol=1e-5)
        positions = torch.arange(20, 32)[None]
        torch.testing.assert_close(fast_model(ids, positions=positions),
                                   model(ids, positions=positions), atol=1e-5, rtol=1e-5)
        cache = _cache(model.cfg, 12)
        got = [fast_model(ids[:, :4], positions=torch.arange(4), kv_cache=cache)]
        got += [fast_model(ids[:, 4:9], positions=torch.arange(4, 9), kv_cache=cache)]
        got += [decode_step(fast_model, ids[:, p], cache, p)[:, None] for p in (9, 10, 11)]
    torch.testing.assert_close(torch.cat(got, dim=1), full, atol=1e-5, rtol=1e-5)
    assert torch.equal(greedy_generate(fast_model, ids[:, :5], 10, _cache(model.cfg, 15)),
                       greedy_generate_uncached(model, ids[:, :5], 10))


def test_the_model_is_wrapped_not_changed():
    model = _model(tie_word_embeddings=True)
    types_before = [type(m) for m in model.modules()]
    fast_model = FastDecoder(model)
    greedy_generate(fast_model, _prompt(), 6, _cache(model.cfg, 15))
    assert [type(m) for m in model.modules()] == types_before
    assert fast_model.model is model and fast_model.cfg is model.cfg
    assert fast_model.device == model.device and fast_model.dtype == model.dtype
    assert list(fast_model.state_dict()) == [f"model.{k}" for k in model.state_dict()]
    assert all(a is b for a, b in zip(fast_model.parameters(), model.parameters()))
    with pytest.raises(TypeError, match="wraps an llmcore Transformer"):
        FastDecoder(torch.nn.Linear(2, 2))


@pytest.mark.parametrize("compile", [True, False])
def test_fast_paths_read_the_current_weights(compile):
    reference, model = _model(), _model()
    fast_model = FastDecoder(model, compile=compile)
    prompt = _prompt()
    caches = [_cache(model.cfg, 12) for _ in range(2)]
    token = prefill(reference, prompt, caches[0]).argmax(-1)
    prefill(fast_model, prompt, caches[1])
    decode_step(fast_model, token, caches[1], 9)  # compiles, or makes the stacked copies
    with torch.no_grad():
        for m in (reference, model):
            m.blocks[1].mlp.down_proj.weight.mul_(3.0)  # in place
            m.blocks[0].attn.k_proj.weight.mul_(-2.0)  # in place, in a stacked group
            q = m.blocks[0].attn.q_proj
            q.weight = torch.nn.Parameter(q.weight.flip(0))  # replaced
    for position in (9, 10):
        torch.testing.assert_close(decode_step(fast_model, token, caches[1], position),
                                   decode_step(reference, token, caches[0], position),
                                   atol=1e-5, rtol=1e-5)
    with torch.inference_mode():
        ids = prompt[:, :4]
        torch.testing.assert_close(fast_model(ids), reference(ids), atol=1e-5, rtol=1e-5)
        model.to(torch.bfloat16)
        reference.to(torch.bfloat16)
        torch.testing.assert_close(fast_model(ids).float(), reference(ids).float(),
                                   atol=2e-2, rtol=2e-2)


def test_other_calls_and_bad_input_take_the_models_path(monkeypatch):
    model = _model()
    fast_model = FastDecoder(model)
    cache = _cache(model.cfg, 12)
    prefill(fast_model, _prompt(), cache)
    with pytest.raises(ValueError, match="position 12 does not fit in a KVCache"):
        decode_step(fast_model, torch.tensor([3]), cache, 12)
    with pytest.raises(IndexError):  # a token outside the vocabulary, as in the model
        decode_step(fast_model, torch.tensor([TINY["vocab_size"]]), cache, 9)
    calls = _count_model_calls(monkeypatch)
    batch_cache = _cache(model.cfg, 12, batch=2)
    prefill(fast_model, _prompt(batch=2), batch_cache)  # two sequences
    with torch.no_grad():
        fast_model(_prompt(length=40))  # more rows than max_rows
        fast_model(_prompt(), attention_mask=torch.ones(1, 9))  # a padding mask
        fast_model(_prompt(), return_hidden_states=True)
        paged = PagedKVCache(model.cfg, num_blocks=4, block_size=4, device="cpu",
                             dtype=torch.float32)
        paged.add_sequence(0)
        paged.set_batch([0])
        fast_model(_prompt(length=3), positions=torch.arange(3), kv_cache=paged)
    with torch.enable_grad():  # autograd wants the modules
        fast_model(torch.tensor([[3]]), positions=torch.tensor([9]), kv_cache=cache)
    assert calls == [9, 40, 9, 9, 3, 1]


def test_a_failing_compiler_turns_this_decoders_compiled_steps_off(monkeypatch):
    def broken(*key, dynamic=False, options=None):
        def step(*args):
            raise RuntimeError("no C++ compiler")
        return step
    monkeypatch.setattr(fast, "compiled", broken)
    reference, model = _model(), _model()
    fast_model, other = FastDecoder(model), FastDecoder(model)
    caches = [_cache(model.cfg, 12) for _ in range(2)]
    token = prefill(reference, _prompt(), caches[0]).argmax(-1)
    prefill(fast_model, _prompt(), caches[1])
    with pytest.warns(RuntimeWarning, match="compiled decode steps are off .*no C\\+\\+ compiler"):
        got = decode_step(fast_model, token, caches[1], 9)
    assert not fast_model.compile_steps and other.compile_steps  # per instance, not a global switch
    # the switch does not shadow nn.Module.compile
    assert "compile" not in vars(fast_model) and callable(fast_model.compile)
    torch.testing.assert_close(got, decode_step(reference, token, caches[0], 9),
                               atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(caches[1].k, caches[0].k, atol=1e-5, rtol=0)


def test_compiled_steps_compile_once_per_kind_of_cache():
    from torch._dynamo.utils import counters
    reference = _model(n_layers=2)
    fast_model = FastDecoder(_model(n_layers=2))
    prompt = _prompt()
    before = counters["stats"]["unique_graphs"]
    for max_len in (20, 27, 33, 41, 50, 58, 64, 71, 80, 96):  # more than compile keeps
        if max_len % 2:
            cache = _cache(reference.cfg, max_len)
        else:
            with torch.inference_mode():  # a cache of inference tensors is another kind
                cache = _cache(reference.cfg, max_len)
        n = max_len - prompt.shape[1]
        got = greedy_generate(fast_model, prompt, n, cache)
        assert torch.equal(got, greedy_generate_uncached(reference, prompt, n))
    assert counters["stats"]["unique_graphs"] - before <= 2, "a new length compiled again"


FORBIDDEN = r"torch\.compile|torch\._dynamo|torch\._inductor|mkldnn"


def test_only_the_fast_path_compiles_and_nothing_imports_it():
    package = Path(fast.__file__).parent
    for path in package.glob("*.py"):
        text = path.read_text()
        if path.name != "fast.py":
            assert not re.search(FORBIDDEN, text), path
        if path.stem in ("kvcache", "profile", "model", "attention"):
            assert "llmcore.fast" not in text and "from .fast" not in text, path


def test_loops_that_take_a_model_take_a_fast_decoder():
    from llmcore.sampling import SamplingParams
    from llmcore.speculative import speculative_generate
    target, draft = _model(), _model(n_layers=1)
    prompt = _prompt()[0].tolist()
    params = SamplingParams(temperature=0.0, max_tokens=12)
    plain = speculative_generate(target, draft, None, prompt, params, k=3)[0]
    fast_result = speculative_generate(FastDecoder(target), FastDecoder(draft), None, prompt,
                                       params, k=3)[0]
    assert fast_result.token_ids == plain.token_ids


def test_the_engine_runs_on_a_fast_decoder_as_on_its_model():
    """The Engine's paged passes ask for logits at chosen positions (`logits_at`): a
    FastDecoder takes every argument its model takes and gives the same tokens."""
    from llmcore.engine import Engine
    from llmcore.request import Request
    from llmcore.sampling import SamplingParams
    model = _model()

    def run(decoder):
        engine = Engine(decoder, num_blocks=64, block_size=4, max_batch=4)
        for i, length in enumerate((5, 9, 3)):
            prompt = _prompt(length=length, seed=i)[0].tolist()
            engine.add_request(Request(f"r{i}", prompt,
                                       SamplingParams(temperature=0.0, max_tokens=6)))
        return {c.request_id: c.output_ids for c in engine.run()}

    assert run(FastDecoder(model)) == run(model)


CASES = ((2, 2), (6, 5), (11, 9), (20, 3), (23, 8), (31, 4))  # (cached tokens, new)


@pytest.mark.parametrize("overrides", [{}, {"qk_norm": True, "head_dim": 32},
                                       {"n_kv_heads": 1}, EVERYTHING])
def test_compiled_verify_passes_match_the_model(overrides, monkeypatch):
    """Speculative decoding's verify pass: n consecutive tokens after the cached ones, one
    compiled graph for every n and every cache length, the model's logits and keys."""
    from torch._dynamo.utils import counters

    model = _model(**overrides)
    fast_model = FastDecoder(model)
    ids = _prompt(length=40, seed=3)
    before = counters["stats"]["unique_graphs"]
    calls = _count_model_calls(monkeypatch)
    with torch.inference_mode():
        for start, n in CASES:
            caches = [_cache(model.cfg, 40) for _ in range(2)]
            for cache in caches:
                model(ids[:, :start], positions=torch.arange(start), kv_cache=cache)
            positions = torch.arange(start, start + n)
            got = fast_model(ids[:, start:start + n], positions=positions,
                             kv_cache=caches[1])
            want = model(ids[:, start:start + n], positions=positions, kv_cache=caches[0])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(caches[1].k, caches[0].k, atol=1e-5, rtol=0)
            torch.testing.assert_close(caches[1].v, caches[0].v, atol=1e-5, rtol=0)
    # Transformer.forward ran only where this test called the model itself
    assert calls == [c for start, n in CASES for c in (start, start, n)]
    assert any(key[0] == "verify_graph" for key in fast._COMPILED)
    if model.cfg.sliding_window is None:
        assert counters["stats"]["unique_graphs"] - before <= 2, "recompiled for a new n"


def test_verify_passes_on_one_cache_reuse_one_graph_as_it_grows():
    """The loop's pattern: many verify passes of varying n on one growing cache, each
    after a rejection; each pass equals the model's, and none compiles again."""
    from torch._dynamo.utils import counters

    model = _model()
    fast_model = FastDecoder(model)
    ids = _prompt(length=60, seed=5)
    caches = [_cache(model.cfg, 60) for _ in range(2)]
    with torch.inference_mode():
        for cache in caches:
            model(ids[:, :4], positions=torch.arange(4), kv_cache=cache)
        fast_model(ids[:, 4:7], positions=torch.arange(4, 7), kv_cache=caches[1])
        before = counters["stats"]["unique_graphs"]
        start = 4
        for n in (3, 5, 2, 9, 4, 6, 2, 8, 5):
            positions = torch.arange(start, start + n)
            got = fast_model(ids[:, start:start + n], positions=positions,
                             kv_cache=caches[1])
            want = model(ids[:, start:start + n], positions=positions,
                         kv_cache=caches[0])
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
            start += n - 1  # the next pass rewrites the last slot, as a rejection does
        torch.testing.assert_close(caches[1].k[..., :start, :],
                                   caches[0].k[..., :start, :], atol=1e-5, rtol=0)
    assert counters["stats"]["unique_graphs"] == before, "a later pass compiled again"


def test_verify_passes_give_speculative_decoding_the_same_tokens():
    from llmcore.sampling import SamplingParams
    from llmcore.speculative import PromptLookup, speculative_generate

    target, draft = _model(), _model(n_layers=1)
    prompt = [5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7]  # repeats: prompt lookup guesses
    params = SamplingParams(temperature=0.0, max_tokens=24)
    want = greedy_generate_uncached(target, torch.tensor([prompt]), 24)[0]
    for guesser in (FastDecoder(draft), PromptLookup()):
        for k in (1, 4):
            result, stats = speculative_generate(FastDecoder(target), guesser, None,
                                                 prompt, params, k=k)
            assert result.token_ids == want.tolist(), (guesser, k)
            assert stats.proposed > 0  # passes over guesses + 1 tokens: the verify graph


@pytest.mark.slow
def test_greedy_guesses_in_one_call_match_k_steps(monkeypatch):
    """A draft's k greedy guesses in one compiled call (draft_graph): the guesses and the
    cache contents of k ordinary steps, and the model itself never called."""
    model = _model(qk_norm=True, head_dim=32)
    fast_model = FastDecoder(model)
    ids = _prompt(length=30, seed=5)
    calls = _count_model_calls(monkeypatch)
    with torch.inference_mode():
        for start, n, k in ((9, 1, 4), (12, 2, 4), (20, 3, 4)):  # one graph per k
            caches = [_cache(model.cfg, 40) for _ in range(2)]
            for cache in caches:
                model(ids[:, :start], positions=torch.arange(start), kv_cache=cache)
            calls.clear()
            got = fast_model.greedy_guesses(ids[0, start:start + n], start, caches[1], k)
            assert calls == []
            logits = model(ids[:, start:start + n], torch.arange(start, start + n),
                           caches[0])[0, -1]
            want = [int(logits.argmax())]
            for p in range(start + n, start + n + k - 1):
                logits = model(torch.tensor([[want[-1]]]), torch.tensor([p]), caches[0])
                want.append(int(logits[0, -1].argmax()))
            assert got == want, (start, n, k)
            end = start + n + k - 1
            torch.testing.assert_close(caches[1].k[..., :end, :], caches[0].k[..., :end, :],
                                       atol=1e-5, rtol=0)
    # where it does not apply it says so, and the caller takes ordinary steps
    assert fast_model.greedy_guesses(ids[0, :2], 1, _cache(model.cfg, 40), 4) is None
    assert fast_model.greedy_guesses(ids[0, 9:10], 9, _cache(model.cfg, 40), 1) is None
    assert FastDecoder(model, compile=False).greedy_guesses(
        ids[0, 9:10], 9, _cache(model.cfg, 40), 4) is None
