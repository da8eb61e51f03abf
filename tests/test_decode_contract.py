"""One decode-loop contract: every loop that turns tokens into text stops the same way.

Each rule of llmcore.generate.Reply is one test, run against every loop: generate(),
generate() under a JSON constraint (where the rule applies), the Engine with a
tokenizer, speculative_generate() with a draft model and with prompt lookup, and the
HTTP server. Stop ids and stop strings are chosen from what the same loop produces
without them, so that each rule is exercised, never passed vacuously.
"""
import json
from dataclasses import dataclass

import openai
import pytest
import torch

from llmcore.constrained import JsonConstraint
from llmcore.engine import Engine, Request
from llmcore.generate import generate
from llmcore.pretrained import load
from llmcore.sampling import SamplingParams
from llmcore.server import OpenAIServer
from llmcore.speculative import PromptLookup, speculative_generate

CODE = "class Point:\n    def __init__(self, x, y):\n"
JSON = "config = json.loads('"
ENDING = 'if __name__ == "__main__":\n    unittest.main()\n'  # then the tiny model ends


@dataclass
class Outcome:
    text: str
    token_ids: list[int] | None  # None: the server does not return token ids
    finish_reason: str
    stop_reason: str | int | None
    completion_tokens: int


@pytest.fixture(scope="module")
def world():
    model, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    draft, _ = load("tiny-draft", device="cpu", dtype=torch.float32)
    with OpenAIServer(model, tokenizer, num_blocks=64, max_batch=4) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="-",
                               max_retries=0, timeout=60)
        yield dict(model=model, tokenizer=tokenizer, draft=draft, client=client,
                   constraint=JsonConstraint(tokenizer))


def _from_result(r) -> Outcome:
    return Outcome(r.text, r.token_ids, r.finish_reason, r.stop_reason,
                   r.usage.completion_tokens)


def _generate(w, prompt, params):
    return _from_result(generate(w["model"], w["tokenizer"], prompt, params))


def _generate_json(w, prompt, params):
    return _from_result(generate(w["model"], w["tokenizer"], prompt, params,
                                 constraint=w["constraint"]))


def _engine(w, prompt, params):
    tokenizer = w["tokenizer"]
    engine = Engine(w["model"], num_blocks=32, block_size=16, max_batch=4,
                    tokenizer=tokenizer)
    engine.add_request(Request("other", tokenizer.encode("import os\n"),  # a second row
                               SamplingParams(temperature=0.0, max_tokens=6)))
    engine.add_request(Request("it", tokenizer.encode(prompt), params))
    return _from_completion(next(c for c in engine.run() if c.request_id == "it"))


def _from_completion(c) -> Outcome:
    return Outcome(c.text, c.output_ids, c.finish_reason, c.stop_reason,
                   len(c.output_ids))


def _speculative(w, prompt, params):
    result, _ = speculative_generate(w["model"], w["draft"], w["tokenizer"], prompt,
                                     params, k=3)
    return _from_result(result)


def _prompt_lookup(w, prompt, params):
    result, _ = speculative_generate(w["model"], PromptLookup(), w["tokenizer"], prompt,
                                     params, k=3)
    return _from_result(result)


def _server(w, prompt, params):
    """Through the official client, as a user of the server calls it."""
    answer = w["client"].completions.create(
        model="llmcore", prompt=prompt, max_tokens=params.max_tokens,
        temperature=params.temperature, top_p=params.top_p, seed=params.seed,
        stop=params.stop, extra_body={
            "min_tokens": params.min_tokens, "stop_token_ids": params.stop_token_ids,
            "include_stop_str_in_output": params.include_stop_str_in_output,
            "skip_special_tokens": params.skip_special_tokens})
    choice = answer.choices[0]
    return Outcome(choice.text, None, choice.finish_reason, choice.stop_reason,
                   answer.usage.completion_tokens)


LOOPS = {"generate": (_generate, CODE), "generate+json": (_generate_json, JSON),
         "engine": (_engine, CODE), "speculative": (_speculative, CODE),
         "prompt lookup": (_prompt_lookup, CODE),
         "server": (_server, CODE)}
TEXT_LOOPS = [name for name in LOOPS if name != "generate+json"]  # JSON bans EOS


def _run(w, loop, prompt=None, **params) -> Outcome:
    run, default = LOOPS[loop]
    params = SamplingParams(**{"temperature": 0.0, "max_tokens": 16, **params})
    return run(w, default if prompt is None else prompt, params)


def _base(w, loop) -> Outcome:
    """What the loop writes greedily without any stop: the reference the rules cut."""
    base = _run(w, loop)
    if base.token_ids is None:  # the server: the same greedy tokens as generate()
        base.token_ids = _run(w, "generate").token_ids
    # under a JSON constraint the last tokens close the value: "stop" at max_tokens
    assert base.finish_reason == ("stop" if loop == "generate+json" else "length")
    assert len(base.token_ids) == 16
    return base


def _first_new(ids: list[int], at: int) -> int:
    """The first index >= at whose token does not occur before it."""
    return next(i for i in range(at, len(ids)) if ids[i] not in ids[:i])


def _same_tokens(r: Outcome, ids: list[int]) -> bool:
    return r.token_ids is None or r.token_ids == ids


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_id_ends_the_reply_and_is_counted(world, loop, include):
    base, decode = _base(world, loop), world["tokenizer"].decode
    i = _first_new(base.token_ids, 2)
    stop = base.token_ids[i]
    r = _run(world, loop, stop_token_ids=[stop], include_stop_str_in_output=include)
    assert (r.finish_reason, r.stop_reason) == ("stop", stop)
    assert r.completion_tokens == i + 1
    assert _same_tokens(r, base.token_ids[:i + 1])  # the stop id is in token_ids
    assert r.text == decode(base.token_ids[:i + 1 if include else i])  # text if asked


@pytest.mark.parametrize("include, skip", [(False, True), (True, True), (True, False)])
@pytest.mark.parametrize("loop", TEXT_LOOPS)
def test_eos_is_a_stop_id(world, loop, include, skip):
    eos = world["tokenizer"].special_tokens["<|endoftext|>"]
    r = _run(world, loop, prompt=ENDING, include_stop_str_in_output=include,
             skip_special_tokens=skip)
    assert (r.finish_reason, r.stop_reason, r.completion_tokens) == ("stop", eos, 1)
    # its text only if asked for and special tokens are kept (vLLM skips them)
    want = "<|endoftext|>" if include and not skip else ""
    assert _same_tokens(r, [eos]) and r.text == want


@pytest.mark.parametrize("loop", LOOPS)
def test_min_tokens_holds_off_stop_ids(world, loop):
    base = _base(world, loop)
    i = _first_new(base.token_ids, 1)
    stop = base.token_ids[i]  # the loop draws it as token i when nothing bans it
    r = _run(world, loop, stop_token_ids=[stop], min_tokens=i + 2)
    assert r.completion_tokens > i + 2
    if r.token_ids is not None:
        assert stop not in r.token_ids[:i + 2] and r.token_ids[:i] == base.token_ids[:i]
    if r.finish_reason == "stop" and r.stop_reason is None:  # a JSON value closed
        assert loop == "generate+json" and isinstance(json.loads(r.text), dict)
    elif r.finish_reason == "stop":
        assert r.stop_reason == stop
        assert r.token_ids is None or r.token_ids[-1] == stop


@pytest.mark.parametrize("loop", TEXT_LOOPS)
def test_min_tokens_holds_off_eos(world, loop):
    eos = world["tokenizer"].special_tokens["<|endoftext|>"]
    r = _run(world, loop, prompt=ENDING, min_tokens=3, max_tokens=40)
    assert r.completion_tokens > 3 and "<|endoftext|>" not in r.text
    if r.token_ids is not None:
        assert eos not in r.token_ids[:3]
    reference = _run(world, "generate", prompt=ENDING, min_tokens=3, max_tokens=40)
    assert r.text == reference.text
    assert r.finish_reason == reference.finish_reason
    assert r.stop_reason == reference.stop_reason


@pytest.mark.parametrize("loop", LOOPS)
def test_min_tokens_holds_off_stop_strings(world, loop):
    base, decode = _base(world, loop), world["tokenizer"].decode
    stop = decode(base.token_ids[1:2])  # completes with token 1
    assert stop and base.text.find(stop) < len(decode(base.token_ids[:2]))
    early = _run(world, loop, stop=[stop])
    assert early.finish_reason == "stop" and early.completion_tokens <= 2
    r = _run(world, loop, stop=[stop], min_tokens=3)
    assert r.completion_tokens > 3
    assert _same_tokens(r, base.token_ids[:r.completion_tokens])
    assert r.text.startswith(decode(base.token_ids[:3]).split(stop)[0])


@pytest.mark.parametrize("include", [False, True])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_stop_string_cuts_the_text(world, loop, include):
    base, decode = _base(world, loop), world["tokenizer"].decode
    text = decode(base.token_ids)
    for a in range(2, 10):  # two tokens' text that occurs there first
        stop, start = decode(base.token_ids[a:a + 2]), len(decode(base.token_ids[:a]))
        if stop.strip() and text.find(stop) == start:
            break
    else:
        pytest.fail("no usable stop string in the reference text")
    r = _run(world, loop, stop=[stop], include_stop_str_in_output=include)
    assert (r.finish_reason, r.stop_reason) == ("stop", stop)
    assert r.completion_tokens == a + 2
    assert r.text == text[:start + len(stop) if include else start]
    assert _same_tokens(r, base.token_ids[:a + 2])


@pytest.mark.parametrize("loop", LOOPS)
def test_max_tokens_ends_with_length(world, loop):
    r = _run(world, loop, max_tokens=5)
    if loop == "generate+json":  # the constraint closes the value within max_tokens
        assert (r.finish_reason, r.completion_tokens) == ("stop", 5)
        assert isinstance(json.loads(r.text), dict)
    else:
        assert (r.finish_reason, r.stop_reason, r.completion_tokens) == ("length", None, 5)
    if r.token_ids is not None:
        assert r.text == world["tokenizer"].decode(r.token_ids)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_seed_gives_the_same_reply_twice(world, loop):
    first = _run(world, loop, temperature=0.9, top_p=0.95, seed=11, max_tokens=12)
    again = _run(world, loop, temperature=0.9, top_p=0.95, seed=11, max_tokens=12)
    assert first == again
    assert first.completion_tokens == 12 or first.finish_reason == "stop"  # JSON closed


def _json_engine(w, params):
    engine = Engine(w["model"], num_blocks=32, block_size=16, tokenizer=w["tokenizer"])
    engine.add_request(Request("it", w["tokenizer"].encode(JSON), params,
                               w["constraint"]))
    (c,) = engine.run()
    return _from_completion(c)


@pytest.mark.parametrize("loop", ["generate", "engine"])
def test_a_closed_json_value_ends_with_stop_after_min_tokens(world, loop):
    def run(**extra):
        params = SamplingParams(temperature=0.9, top_p=0.95, seed=11, max_tokens=12,
                                **extra)
        if loop == "engine":
            return _json_engine(world, params)
        return _generate_json(world, JSON, params)

    closed = run()  # this seed closes a small object early
    assert closed.finish_reason == "stop" and closed.completion_tokens < 6
    assert isinstance(json.loads(closed.text), dict)
    held = run(min_tokens=6)  # the same draws, then whitespace until token 7 ends it
    assert (held.finish_reason, held.completion_tokens) == ("stop", 7)
    assert held.token_ids[:closed.completion_tokens] == closed.token_ids
    assert json.loads(held.text) == json.loads(closed.text)
