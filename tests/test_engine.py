"""Tests for llmcore.engine: the continuous-batching engine over the paged KV cache."""
import pytest
import torch

from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams
from llmcore.engine import Engine, Request


def _model():
    torch.manual_seed(0)
    return Transformer(ModelConfig(vocab_size=64, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48,
                                   max_position_embeddings=256)).eval()


def _requests(n=9, seed=0):
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = torch.randint(0, 64, (int(torch.randint(1, 12, (1,), generator=gen)),), generator=gen).tolist()
        out.append(Request(f"r{i}", prompt, SamplingParams(temperature=0.0,
                                                            max_tokens=int(torch.randint(1, 30, (1,), generator=gen)))))
    return out


def _alone(model, request):
    cache = KVCache(model.cfg, 1, len(request.prompt_ids) + request.params.max_tokens, device="cpu",
                    dtype=torch.float32)
    return greedy_generate(model, torch.tensor([request.prompt_ids]), request.params.max_tokens, cache)[0].tolist()


@pytest.mark.parametrize("kw", [dict(max_batch=1), dict(max_batch=4, static=True), dict(max_batch=4),
                                dict(max_batch=16), dict(max_batch=3, num_blocks=12)])
def test_every_policy_gives_each_request_its_own_tokens(kw):
    model, requests = _model(), _requests()
    engine = Engine(model, **{"num_blocks": 64, "block_size": 4, **kw})
    for r in requests:
        engine.add_request(r)
    done = engine.run()
    assert sorted(c.request_id for c in done) == sorted(r.request_id for r in requests)
    for c in done:
        request = next(r for r in requests if r.request_id == c.request_id)
        assert c.output_ids == _alone(model, request) and c.finish_reason == "length"
        assert 0 <= c.ttft and c.first_token <= c.finished
    assert engine.cache.allocator.num_free == engine.cache.allocator.num_blocks  # every block came back
    assert max(engine.batch_sizes) <= kw["max_batch"]


def test_continuous_batching_takes_fewer_steps_than_static():
    model, requests = _model(), _requests(12, seed=3)
    steps = {}
    for static in (True, False):
        engine = Engine(model, num_blocks=128, block_size=4, max_batch=4, static=static)
        for r in requests:
            engine.add_request(r)
        engine.run()
        steps[static] = len(engine.batch_sizes)
    assert steps[False] < steps[True]


def test_admission_waits_for_blocks_and_stop_tokens_end_requests():
    model = _model()
    first = _alone(model, Request("x", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=20)))
    engine = Engine(model, num_blocks=6, block_size=4, max_batch=8)  # room for one 23-token request at a time
    engine.add_request(Request("a", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=20)))
    engine.add_request(Request("b", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=20,
                                                              stop_token_ids=[first[5]])))
    engine.step()
    assert list(engine.running) == ["a"] and len(engine.waiting) == 1  # b waits for a's blocks
    done = {c.request_id: c for c in engine.run()}
    assert done["a"].output_ids == first
    assert done["b"].finish_reason == "stop" and done["b"].output_ids == first[:first.index(first[5]) + 1]


def test_seeded_sampling_does_not_depend_on_the_batch():
    model = _model()
    params = SamplingParams(temperature=1.0, max_tokens=15, seed=7)
    outputs = []
    for others in (0, 5):
        engine = Engine(model, num_blocks=64, block_size=4, max_batch=8)
        for r in _requests(others, seed=1):
            engine.add_request(r)
        engine.add_request(Request("seeded", [4, 5, 6], params))
        outputs.append(next(c for c in engine.run() if c.request_id == "seeded").output_ids)
    assert outputs[0] == outputs[1]


def test_bad_requests_are_refused_with_a_reason():
    model = _model()
    engine = Engine(model, num_blocks=4, block_size=4)
    with pytest.raises(ValueError, match="empty prompt"):
        engine.add_request(Request("e", []))
    with pytest.raises(ValueError, match="needs 6 KV blocks but the pool has 4"):
        engine.add_request(Request("big", [1] * 4, SamplingParams(temperature=0.0, max_tokens=20)))
    with pytest.raises(ValueError, match="positions"):
        engine.add_request(Request("long", [1] * 200, SamplingParams(temperature=0.0, max_tokens=100)))
    engine.add_request(Request("ok", [1], SamplingParams(temperature=0.0, max_tokens=3)))
    with pytest.raises(ValueError, match="already queued"):
        engine.add_request(Request("ok", [2], SamplingParams(temperature=0.0, max_tokens=3)))
    with pytest.raises(ValueError, match="max_batch >= 1"):
        Engine(model, num_blocks=4, max_batch=0)


def test_json_constrained_requests_finish_as_valid_json_next_to_free_ones():
    import json

    from llmcore.constrained import JsonConstraint
    from llmcore.pretrained import load_tokenizer
    tokenizer = load_tokenizer("tiny")
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                    hidden_dim=48, max_position_embeddings=256)).eval()
    constraint = JsonConstraint(tokenizer)
    engine = Engine(model, num_blocks=64, block_size=16, max_batch=8, tokenizer=tokenizer,
                    eos_token_ids=[])
    for i in range(6):
        engine.add_request(Request(f"json{i}", [1, 2, 3], SamplingParams(temperature=1.0, max_tokens=40, seed=i),
                                   constraint=constraint))
    engine.add_request(Request("free", [1, 2, 3], SamplingParams(temperature=0.0, max_tokens=12)))
    done = {c.request_id: c for c in engine.run()}
    assert done["free"].output_ids == _alone(model, Request("free", [1, 2, 3],
                                                            SamplingParams(temperature=0.0, max_tokens=12)))
    finished = [c for c in done.values() if c.request_id != "free" and c.finish_reason == "stop"]
    assert finished
    for c in finished:
        assert c.text == tokenizer.decode(c.output_ids) and isinstance(json.loads(c.text), dict)


@pytest.fixture(scope="module")
def tiny():
    from llmcore.pretrained import load
    return load("tiny", device="cpu", dtype=torch.float32)


@pytest.mark.parametrize("at", [1, 3])  # in the prefill step, in a batched decode step
def test_a_request_that_raises_fails_alone(tiny, at):
    from llmcore.constrained import JsonConstraint
    model, tokenizer = tiny
    constraint = JsonConstraint(tokenizer)
    calls, mask = [], constraint.mask_logits

    def exploding(logits, state):  # the request's mask raises at its at-th step
        calls.append(1)
        if len(calls) == at:
            raise RuntimeError("boom")
        return mask(logits, state)
    constraint.mask_logits = exploding
    engine = Engine(model, num_blocks=64, block_size=16, max_batch=4,
                    tokenizer=tokenizer)
    others = [Request(f"r{i}", tokenizer.encode(p), SamplingParams(temperature=0.0,
                                                                  max_tokens=12))
              for i, p in enumerate(["import os\n", "class A:\n", "def f(x):"])]
    bad = Request("bad", tokenizer.encode("x = {"), SamplingParams(
        temperature=0.0, max_tokens=10), constraint=constraint)
    for r in others[:1] + [bad] + others[1:]:
        engine.add_request(r)
    done = {c.request_id: c for c in engine.run()}
    assert done["bad"].finish_reason == "error" and "boom" in done["bad"].error
    assert len(done["bad"].output_ids) == at - 1
    for r in others:  # the others: exactly what they produce alone
        alone = Engine(model, num_blocks=64, block_size=16, tokenizer=tokenizer)
        alone.add_request(r)
        assert done[r.request_id].output_ids == alone.run()[0].output_ids
        assert done[r.request_id].error is None
    assert engine.cache.allocator.num_free == engine.cache.allocator.num_blocks


def test_logprobs_are_the_models_log_softmax():
    model = _model()
    engine = Engine(model, num_blocks=64, block_size=4, max_batch=4)
    prompt = [5, 9, 2, 7]
    engine.add_request(Request("a", prompt, SamplingParams(temperature=0.0,
                                                           max_tokens=6),
                               logprobs=3, prompt_logprobs=True))
    engine.add_request(Request("b", [1, 2], SamplingParams(temperature=0.0,
                                                           max_tokens=6)))
    done = {c.request_id: c for c in engine.run()}
    a = done["a"]
    assert done["b"].logprobs is None and done["b"].prompt_logprobs is None
    ids = prompt + a.output_ids
    with torch.inference_mode():
        positions = torch.arange(len(ids))[None]
        logp = torch.log_softmax(model(torch.tensor([ids]), positions=positions)[0], -1)
    assert len(a.logprobs) == len(a.output_ids) and len(a.prompt_logprobs) == len(prompt)
    assert a.prompt_logprobs[0] is None
    for i, lp in enumerate(a.prompt_logprobs[1:] + a.logprobs, start=1):
        assert lp.token_id == ids[i]
        assert lp.logprob == pytest.approx(logp[i - 1, ids[i]].item(), abs=1e-4)
        assert len(lp.top) == 3 and [v for _, v in lp.top] == sorted(
            [v for _, v in lp.top], reverse=True)
    for lp in a.logprobs:  # greedy: the chosen token is the most likely one
        assert lp.top[0][0] == lp.token_id


@pytest.mark.parametrize("change, message", [
    (dict(top_k=65), "top_k=65 is larger than the vocabulary"),
    (dict(logit_bias={64: 1.0}), "logit_bias token id 64"),
    (dict(stop_token_ids=[99]), "stop token id 99"),
])
def test_values_beyond_the_vocabulary_are_refused_before_any_step(change, message):
    engine = Engine(_model(), num_blocks=16, block_size=4)
    with pytest.raises(ValueError, match=message):
        engine.add_request(Request("x", [1, 2], SamplingParams(max_tokens=8,
                                                               **change)))
    assert not engine.has_work()
