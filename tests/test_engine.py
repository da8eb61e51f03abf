"""Tests for llmcore.engine and its parts (scheduler, block manager, model runner,
request state) and llmcore.traffic."""
import pytest
import torch

from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams
from llmcore.engine import Engine
from llmcore.request import Request
from llmcore.scheduler import split_budget


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
        assert 0 <= c.ttft and c.first_token_time <= c.finished_time
    assert engine.blocks.num_free == engine.blocks.num_blocks  # every block came back
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
    with pytest.raises(ValueError, match="max_batch must be an int >= 1"):
        Engine(model, num_blocks=4, max_batch=0)
    with pytest.raises(ValueError, match="num_blocks must be an int >= 1"):
        Engine(model, num_blocks=0)
    with pytest.raises(ValueError, match="as num_blocks or as kv_memory"):
        Engine(model)
    with pytest.raises(ValueError, match="as num_blocks or as kv_memory"):
        Engine(model, num_blocks=4, kv_memory=2**20)
    with pytest.raises(ValueError, match="on cpu give bytes"):
        Engine(model, kv_memory=0.5)
    with pytest.raises(ValueError, match="holds no block"):
        Engine(model, kv_memory=100)


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

    def exploding(logits, state, left=None):  # the mask raises at its at-th step
        calls.append(1)
        if len(calls) == at:
            raise RuntimeError("boom")
        return mask(logits, state, left)
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
    assert engine.blocks.num_free == engine.blocks.num_blocks


@pytest.mark.parametrize("temperature", [0.0, 0.5])
def test_logprobs_are_the_models_log_softmax(temperature):
    # At 0.5, logprobs taken after the temperature (log_softmax(logits / 0.5)) differ
    # from the raw logits' ones: greedy alone cannot tell the two apart.
    model = _model()
    engine = Engine(model, num_blocks=64, block_size=4, max_batch=4)
    prompt = [5, 9, 2, 7]
    engine.add_request(Request("a", prompt, SamplingParams(temperature=temperature,
                                                           max_tokens=6, seed=3),
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
    if temperature == 0:
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


# --- issue 15: chunked prefill, preemption, prefix caching, traffic --------------------

from llmcore.traffic import (Arrival, percentile, poisson_arrivals, replay,  # noqa: E402
                             summarize, synthetic_requests)


def _long_requests(n=8, seed=0, prefix=()):
    """Prompts of 3..40 tokens after `prefix`, outputs of 1..24 tokens."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        size = int(torch.randint(3, 41, (1,), generator=gen))
        prompt = list(prefix) + torch.randint(0, 64, (size,), generator=gen).tolist()
        out.append(Request(f"q{i}", prompt, SamplingParams(
            temperature=0.0, max_tokens=int(torch.randint(1, 25, (1,), generator=gen)))))
    return out


def _serve(model, requests, **kw):
    engine = Engine(model, **{"num_blocks": 96, "block_size": 4, "max_batch": 4, **kw})
    for r in requests:
        engine.add_request(r)
    done = {c.request_id: c for c in engine.run()}
    assert sorted(done) == sorted(r.request_id for r in requests)
    return engine, done


def _all_blocks_back(engine):
    blocks = engine.blocks
    assert blocks.num_free == blocks.num_blocks
    assert not any(blocks.allocator.ref_count) and not blocks.tables


def test_schedule_decodes_first_then_fills_the_budget_oldest_first():
    assert split_budget([1, 30, 1, 7], None) == [1, 30, 1, 7]
    assert split_budget([1, 30, 1, 7], 10) == [1, 8, 1, 0]
    assert split_budget([1, 5, 1, 7], 10) == [1, 5, 1, 3]
    assert split_budget([1, 1], 2) == [1, 1]
    with pytest.raises(ValueError, match="cannot decode 3 requests; raise it to at least 3"):
        split_budget([1, 1, 1, 9], 2)


@pytest.mark.parametrize("budget", [4, 5, 9, 16])
def test_chunked_prefill_gives_the_same_tokens_and_keeps_to_the_budget(budget):
    model, requests = _model(), _long_requests()
    engine, done = _serve(model, requests, token_budget=budget)
    for r in requests:
        assert done[r.request_id].output_ids == _alone(model, r)
    assert max(engine.step_tokens) <= budget
    # a 40-token prompt cannot be prefilled in one step of this budget: it took chunks
    assert len(engine.step_tokens) > len(_serve(model, requests)[0].step_tokens)
    _all_blocks_back(engine)


def test_decoding_requests_advance_in_every_step_while_a_long_prompt_is_chunked():
    model = _model()
    engine = Engine(model, num_blocks=96, block_size=4, max_batch=4, token_budget=8)
    for i in range(3):
        engine.add_request(Request(f"d{i}", [1, 2, 3], SamplingParams(temperature=0.0,
                                                                      max_tokens=40)))
    engine.step()  # the three short prompts: 9 tokens, so two steps
    engine.step()
    engine.add_request(Request("long", list(range(60)), SamplingParams(temperature=0.0,
                                                                       max_tokens=2)))
    before = {s: len(engine.running[s].reply.token_ids) for s in ("d0", "d1", "d2")}
    for step in range(1, 13):  # 60 prompt tokens at 5 a step
        engine.step()
        for s in before:  # one new token each, in every step
            assert len(engine.running[s].reply.token_ids) == before[s] + step
        assert engine.step_tokens[-1] <= 8
    assert engine.running["long"].reply.token_ids  # its prompt is done: first token out


def test_prompt_logprobs_are_the_same_in_chunks_and_with_a_prefix_cache():
    model = _model()
    prompt = list(range(3, 30))

    def served(**kw):
        engine = Engine(model, num_blocks=64, block_size=4, max_batch=2, **kw)
        engine.add_request(Request("warm", prompt[:21] + [1, 1], SamplingParams(
            temperature=0.0, max_tokens=2)))
        engine.run()  # fills the prefix cache, when there is one
        engine.add_request(Request("a", prompt, SamplingParams(temperature=0.0,
                                                               max_tokens=3),
                                   logprobs=1, prompt_logprobs=True))
        return engine.run()[0]
    plain = served()
    for kw in (dict(token_budget=5), dict(prefix_caching=True),
               dict(prefix_caching=True, token_budget=3)):
        other = served(**kw)
        assert other.output_ids == plain.output_ids
        assert len(other.prompt_logprobs) == len(prompt)
        for a, b in zip(plain.prompt_logprobs[1:], other.prompt_logprobs[1:]):
            assert a.token_id == b.token_id
            assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert other.cached_tokens == 0  # its prompt was computed, not reused


def _tight_requests():
    gen = torch.Generator().manual_seed(5)
    return [Request(f"t{i}", torch.randint(0, 64, (6,), generator=gen).tolist(),
                    SamplingParams(temperature=0.0, max_tokens=30)) for i in range(8)]


def test_optimistic_admission_preempts_the_newest_and_recomputes_the_same_tokens():
    model, requests = _model(), _tight_requests()
    # 8 requests of 36 tokens need 72 blocks of 4; the pool has 24
    engine = Engine(model, num_blocks=24, block_size=4, max_batch=8,
                    admission="optimistic")
    preempt, victims = engine.scheduler._preempt, []

    def watched(st):  # the oldest running request is never the one preempted
        order = list(engine.running)
        seq = st.request_id
        assert seq == order[-1] and (len(order) == 1 or seq != order[0])
        victims.append(seq)
        return preempt(st)
    engine.scheduler._preempt = watched
    for r in requests:
        engine.add_request(r)
    done = {}
    for _ in range(2000):  # bounded: everyone finishes
        done.update((c.request_id, c) for c in engine.step())
        if not engine.has_work():
            break
    assert sorted(done) == sorted(r.request_id for r in requests)
    assert engine.preemptions == len(victims) > 0
    assert sum(c.preemptions for c in done.values()) == engine.preemptions
    for r in requests:
        assert done[r.request_id].output_ids == _alone(model, r)
    reserve, _ = _serve(model, requests, num_blocks=24, max_batch=8)
    assert reserve.preemptions == 0
    assert max(engine.batch_sizes) > max(reserve.batch_sizes)  # more ran at once
    _all_blocks_back(engine)


def test_a_preempted_seeded_request_keeps_its_random_stream():
    model = _model()
    requests = [Request(f"s{i}", [i + 1, 2, 3, 4], SamplingParams(
        temperature=1.0, max_tokens=30, seed=i)) for i in range(8)]
    _, roomy = _serve(model, requests, num_blocks=96, max_batch=8)
    tight, cramped = _serve(model, requests, num_blocks=20, max_batch=8,
                            admission="optimistic", token_budget=12)
    assert tight.preemptions > 0
    assert {k: c.output_ids for k, c in cramped.items()} == {
        k: c.output_ids for k, c in roomy.items()}


def test_requests_sharing_a_prefix_share_its_blocks_and_nothing_else():
    model = _model()
    system = list(range(10, 22))  # 3 full blocks of 4
    # adversarial: the same prompt but for the last token of block 4 (index 15), or of
    # the prompt's last full block; and one that differs from the first token on
    variants = [system + [40, 41, 42, 43, 44, 45],
                system + [40, 41, 42, 50, 44, 45],
                system + [40, 41, 42, 43, 44, 46],
                [9] + system[1:] + [40, 41, 42, 43, 44, 45]]
    requests = [Request(f"p{i}", v, SamplingParams(temperature=0.0, max_tokens=9))
                for i, v in enumerate(variants)]
    engine = Engine(model, num_blocks=64, block_size=4, max_batch=4,
                    prefix_caching=True)
    engine.add_request(requests[0])
    engine.run()  # now the cache holds request p0's four full prompt blocks
    for r in requests[1:]:
        engine.add_request(r)
    engine.step()
    cache = engine.blocks
    prompts = {r.request_id: r.prompt_ids for r in requests}
    shared = set(cache.tables["p1"]) & set(cache.tables["p2"])
    for a in ("p1", "p2", "p3"):  # a block in two tables holds the same tokens in both
        for b in ("p1", "p2", "p3"):
            for i, block in enumerate(cache.tables[a]):
                if a != b and block in cache.tables[b]:
                    j = cache.tables[b].index(block)
                    assert i == j
                    assert prompts[a][:4 * (i + 1)] == prompts[b][:4 * (i + 1)]
    assert len(shared) == 3  # p1 and p2 share the 3 system blocks, not the 4th
    assert not set(cache.tables["p3"]) & (set(cache.tables["p1"]) | set(cache.tables["p2"]))
    done = {c.request_id: c for c in engine.run()}
    assert [done[f"p{i}"].cached_tokens for i in (1, 2, 3)] == [12, 16, 0]
    for r in requests[1:]:
        assert done[r.request_id].output_ids == _alone(model, r)
    _all_blocks_back(engine)


def test_prefix_caching_with_chunks_and_preemption_gives_the_same_tokens():
    model = _model()
    system = list(range(5, 25))
    requests = _long_requests(10, seed=4, prefix=system)
    engine, done = _serve(model, requests, num_blocks=40, max_batch=6,
                          prefix_caching=True, admission="optimistic", token_budget=10)
    assert sum(c.cached_tokens for c in done.values()) > 0
    for r in requests:
        assert done[r.request_id].output_ids == _alone(model, r)
    _all_blocks_back(engine)


def test_engine_settings_are_checked():
    model = _model()
    with pytest.raises(ValueError, match="token_budget must be None or an int >= max_batch"):
        Engine(model, num_blocks=8, max_batch=4, token_budget=3)
    with pytest.raises(ValueError, match="admission must be 'reserve' or 'optimistic'"):
        Engine(model, num_blocks=8, admission="lazy")


def test_traffic_is_seeded_and_replayed_by_the_clock():
    requests = synthetic_requests(200, vocab_size=64, prompt_lens=(2, 20),
                                  output_lens=(1, 8), seed=3, prefix=[7, 7])
    assert requests == synthetic_requests(200, vocab_size=64, prompt_lens=(2, 20),
                                          output_lens=(1, 8), seed=3, prefix=[7, 7])
    lengths = [len(r.prompt_ids) - 2 for r in requests]
    assert all(r.prompt_ids[:2] == [7, 7] for r in requests)
    assert min(lengths) == 2 and max(lengths) == 20
    assert sorted(lengths)[100] < 11  # log-uniform: the median sits below the middle
    assert {r.params.max_tokens for r in requests} == set(range(1, 9))
    arrivals = poisson_arrivals(requests, rate=50.0, seed=1)
    gaps = [b.time - a.time for a, b in zip(arrivals, arrivals[1:])]
    assert all(g >= 0 for g in gaps) and 0.014 < sum(gaps) / len(gaps) < 0.026
    with pytest.raises(ValueError, match="rate must be > 0"):
        poisson_arrivals(requests, rate=0)
    with pytest.raises(ValueError, match="1 <= low <= high"):
        synthetic_requests(1, 64, prompt_lens=(5, 2))

    class Clock:  # a fake clock: steps take no time, sleeping moves it on
        t = 0.0  # exact in binary floating point: 0.3 - 0 + 0 is 0.3

        def now(self):
            return self.t

        def sleep(self, seconds):
            assert seconds > 0  # replay sleeps only while idle, until the next arrival
            self.t += seconds
    clock = Clock()
    engine = Engine(_model(), num_blocks=64, block_size=4, max_batch=4,
                    clock=clock.now)
    trace = [Arrival(0.0, Request("a", [1, 2, 3], SamplingParams(temperature=0.0,
                                                                   max_tokens=3))),
             Arrival(0.3, Request("b", [4, 5], SamplingParams(temperature=0.0,
                                                                max_tokens=2)))]
    done, seconds = replay(engine, trace, sleep=clock.sleep)
    by_id = {c.request_id: c for c in done}
    assert [c.request_id for c in done] == ["a", "b"]
    # a is served at once (its tokens all at 0.0); the engine idles until b's arrival
    assert by_id["a"].submitted == by_id["a"].finished_time == 0.0
    assert by_id["b"].submitted == pytest.approx(0.3)
    assert by_id["b"].first_token_time == pytest.approx(0.3)  # at once: no queue
    assert seconds == pytest.approx(0.3)
    summary = summarize(done, seconds)
    assert summary["requests"] == 2 and summary["output_tokens"] == 5
    assert summary["ttft_p99"] == summary["ttft_p50"] == 0.0  # no time passes in steps
    assert len(by_id["a"].itl) == 2


def test_percentile_interpolates_like_numpy():
    import numpy as np
    values = [0.3, 1.0, 7.5, 2.2, 9.1, 4.4, 0.0]
    for q in (0, 10, 50, 90, 99, 100):
        assert percentile(values, q) == pytest.approx(float(np.percentile(values, q)))
    assert percentile([], 50) != percentile([], 50)  # nan


def test_compute_clock_skips_idle_gaps_and_counts_this_threads_work():
    import threading
    import time

    from llmcore.engine import ComputeClock

    clock = ComputeClock("cpu")
    start = clock()
    time.sleep(0.2)  # waiting is not computing: a CPU clock barely moves
    assert clock() - start < 0.1
    clock.sleep(5.0)  # replay's idle gaps pass at once
    assert 5.0 <= clock() - start < 5.1
    clock.sleep(-1.0)  # never backwards
    assert clock() - start >= 5.0
    busy = threading.Thread(target=lambda: sum(i * i for i in range(3_000_000)))
    mark = clock()
    busy.start()
    busy.join()  # another thread's work is not this thread's time
    assert clock() - mark < 0.1
    mark = clock()
    sum(i * i for i in range(3_000_000))
    assert clock() - mark > 0.01
    engine = Engine(_model(), num_blocks=8, block_size=4, clock=clock)
    assert engine.clock is clock
    trace = [Arrival(0.0, Request("a", [1, 2], SamplingParams(temperature=0.0,
                                                                max_tokens=2))),
             Arrival(100.0, Request("b", [3], SamplingParams(temperature=0.0,
                                                             max_tokens=2)))]
    wall = time.perf_counter()
    done, seconds = replay(engine, trace, sleep=clock.sleep)
    assert time.perf_counter() - wall < 20 and seconds >= 100.0  # skipped, not slept
    assert [c.request_id for c in done] == ["a", "b"]


# --- the decode contract (llmcore.model_runner.Decoder): every decoder, one engine ----
def _decoder(kind):
    from llmcore.fast import FastDecoder
    from llmcore.quant import quantize
    model = _model()
    return {"transformer": lambda: model, "fast-decoder": lambda: FastDecoder(model),
            "int8": lambda: quantize(model, "int8"),
            "int4": lambda: quantize(model, "int4", group_size=16)}[kind]()


@pytest.mark.parametrize("kind", ["transformer", "fast-decoder", "int8", "int4"])
def test_the_engine_runs_every_decoder_as_the_decoder_runs_alone(kind):
    # Transformer, appendix B's FastDecoder and appendix C's quantized copies satisfy
    # the Decoder protocol; appendix D's rank 0 is a Transformer under ParallelRunner
    # (tests/test_parallel.py serves it through this engine)
    from llmcore.model_runner import Decoder
    decoder, requests = _decoder(kind), _requests()
    assert isinstance(decoder, Decoder)
    engine = Engine(decoder, num_blocks=64, block_size=4, max_batch=4)
    for r in requests:
        engine.add_request(r)
    done = {c.request_id: c.output_ids for c in engine.run()}
    assert done == {r.request_id: _alone(decoder, r) for r in requests}


class _NoLogitsAt(torch.nn.Module):  # chapter 6's shape of a model: no logits_at
    def __init__(self, model):
        super().__init__()
        self.cfg, self.device, self.dtype = model.cfg, model.device, model.dtype

    def forward(self, input_ids, positions=None, kv_cache=None):
        raise AssertionError("the engine must refuse this model before it runs")


@pytest.mark.parametrize("model, says", [
    (lambda: _NoLogitsAt(_model()), "its call takes no logits_at="),
    (lambda: object(), "it has no cfg, device, dtype"),
    (lambda: _model().state_dict(), "it has no cfg, device, dtype")])
def test_the_engine_refuses_a_model_that_is_not_a_decoder_when_it_is_built(model, says):
    with pytest.raises(TypeError, match="not a decoder the engine can drive") as err:
        Engine(model(), num_blocks=8)
    assert says in str(err.value) and "llmcore.model_runner.Decoder" in str(err.value)
