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
