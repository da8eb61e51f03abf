"""Tests for llmcore.server and llmcore.api: the OpenAI-compatible server, driven the
way its users drive it.

Black-box tests talk to ONE real server process (`python -m llmcore.server`) on an
ephemeral port of 127.0.0.1 through the official `openai` client (raw httpx2 where the
exact bytes or the error shape matter). Tests that must reach inside (fault injection,
stopping the engine thread, small pools and queues) run an in-process `OpenAIServer`.
Every client call has a timeout and every test runs under an alarm: a hung server fails
a test instead of hanging the suite.
"""
from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import httpx2 as httpx
import jsonschema
import openai
import pydantic
import pytest
import torch

from conftest import stop_process
from llmcore.api import Limits
from llmcore.chat import load_chat_template
from llmcore.constrained import JsonConstraint
from llmcore.generate import generate
from llmcore.pretrained import load
from llmcore.sampling import SamplingParams
from llmcore.server import OpenAIServer

# starts the server process and drives it with the openai client (the slow tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MODEL = "tiny"
KEY = "sk-llmcore-test"
TIMEOUT = 60          # seconds any one HTTP call may take
TEST_LIMIT = 150      # seconds any one test may take (SIGALRM)
CODE = "def add(a, b):\n"


# --- Fixtures -------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _deadline():
    """Fail (not hang) a test that runs past TEST_LIMIT seconds."""
    def expire(signum, frame):
        raise TimeoutError(f"the test ran past {TEST_LIMIT} s: the server hangs")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="module")
def tiny():
    """(model, tokenizer), loaded once. One torch thread: on a shared 2-core machine
    two threads per process are ten times slower, not faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load(MODEL, device="cpu", dtype=torch.float32)
    yield model, tokenizer
    torch.set_num_threads(threads)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def url():
    """The base URL of one `python -m llmcore.server` process for the whole module."""
    with _server_process("--max-batch", "8") as base:
        yield base


@contextlib.contextmanager
def _server_process(*options: str, module: str = "llmcore.server", model: str = MODEL):
    """Start `python -m llmcore.server --model MODEL` (or another `module` with its
    command line) with these options on a free port of 127.0.0.1; yield its base URL
    once /health answers; stop it afterwards."""
    port = _free_port()
    log = tempfile.TemporaryFile()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", module, "--model", model, "--host",
         "127.0.0.1", "--port", str(port), "--api-key", KEY, *options,
         "--device", "cpu", "--dtype", "float32"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                pytest.fail(f"the server exited ({proc.returncode}):\n"
                            + log.read().decode(errors="replace"))
            try:
                if httpx.get(base + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("the server did not answer /health within 120 s")
            time.sleep(0.2)
        yield base
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture(scope="module")
def client(url):
    return openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0,
                         timeout=TIMEOUT)


@pytest.fixture(scope="module")
def raw(url):
    """A plain HTTP client with the API key, for exact status codes and bodies."""
    with httpx.Client(base_url=url, timeout=TIMEOUT,
                      headers={"Authorization": f"Bearer {KEY}"}) as c:
        yield c


@pytest.fixture(scope="module")
def template():
    return load_chat_template(MODEL)


def _in_process(tiny, template, **kwargs) -> OpenAIServer:
    model, tokenizer = tiny
    return OpenAIServer(model, tokenizer, model_name=MODEL, chat_template=template,
                        **kwargs)


def _client(base: str, api_key: str = "-") -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=api_key, max_retries=0,
                         timeout=TIMEOUT)


# --- Helpers --------------------------------------------------------------------------
def _expected(tiny, prompt, **params):
    """What generate() says for this prompt: the reference every greedy reply meets."""
    model, tokenizer = tiny
    params.setdefault("temperature", 0.0)
    return generate(model, tokenizer, prompt, SamplingParams(**params))


def _metrics(base: str) -> dict[str, float]:
    """The Prometheus samples of /metrics: {'name{labels}': value}."""
    response = httpx.get(base + "/metrics", timeout=TIMEOUT)
    assert response.status_code == 200
    samples = {}
    for line in response.text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    return samples


def _wait_for(predicate, what: str, limit: float = 30.0):
    """Poll until predicate() is truthy (bounded); return its value or fail."""
    deadline = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"after {limit} s still not: {what}")
        time.sleep(0.05)


def _idle(base: str) -> bool:
    m = _metrics(base)
    return (m["llmcore_kv_blocks_free"] == m["llmcore_kv_blocks_total"]
            and m["llmcore_requests_running"] == 0
            and m["llmcore_requests_waiting"] == 0)


def _engine_idle(server: OpenAIServer) -> bool:
    engine = server.engine
    return (not engine.running and not engine.waiting
            and engine.blocks.num_free == engine.blocks.num_blocks)


def _raw_http(base: str, head: str, body: bytes = b"", wait: float = TIMEOUT
              ) -> tuple[int, dict, bytes]:
    """Send exactly these bytes on a new socket; read one response
    (status, headers, body)."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=wait) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"the server closed the connection without answering: {data}"
            data += chunk
        head_bytes, rest = data.split(b"\r\n\r\n", 1)
        lines = head_bytes.decode().split("\r\n")
        headers = dict(line.lower().split(": ", 1) for line in lines[1:])
        length = int(headers.get("content-length", 0))
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
    return int(lines[0].split()[1]), headers, rest


def _check_error_shape(response, status: int) -> dict:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param",
                                                            "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert body["error"]["type"] == ("server_error" if status >= 500
                                     else "invalid_request_error")
    return body["error"]


# --- 1. Endpoints ---------------------------------------------------------------------
def test_models_lists_and_describes_the_served_model(client, raw):
    assert [m.id for m in client.models.list().data] == [MODEL]
    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.object == "model"
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-4o")
    assert caught.value.status_code == 404 and caught.value.code == "model_not_found"
    error = _check_error_shape(raw.get("/v1/models/gpt-4o"), 404)
    assert error["code"] == "model_not_found" and "'gpt-4o'" in error["message"]


def test_tokenize_gives_the_ids_the_completions_endpoint_runs(raw, client, tiny):
    """vLLM's POST /tokenize with a prompt: {"count", "max_model_len", "tokens"}, the
    ids whose count the completions endpoint reports as prompt_tokens."""
    prompt = "def add(a, b):\n    return a + b  # é, 日本\n"
    reply = raw.post("/tokenize", json={"model": MODEL, "prompt": prompt})
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert set(body) == {"count", "max_model_len", "tokens", "token_strs"}
    assert body["tokens"] == tiny[1].encode(prompt)
    assert body["count"] == len(body["tokens"]) and body["max_model_len"] == 1024
    assert body["token_strs"] is None
    usage = client.completions.create(model=MODEL, prompt=prompt, max_tokens=1).usage
    assert usage.prompt_tokens == body["count"]
    same = raw.post("/tokenize", json={"prompt": prompt, "add_special_tokens": False,
                                       "model": None}).json()
    assert same == body  # no special tokens are added here either way; null = default
    strs = raw.post("/tokenize", json={"prompt": "import os",
                                       "return_token_strs": True})
    assert "".join(strs.json()["token_strs"]) == "import os"


def test_tokenize_messages_gives_the_chat_prompt(raw, client, tiny, template):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"}]
    body = raw.post("/tokenize", json={"model": MODEL, "messages": messages}).json()
    want = template.render(messages, add_generation_prompt=True)
    assert body["tokens"] == tiny[1].encode(want, allowed_special="all")
    usage = client.chat.completions.create(model=MODEL, messages=messages,
                                           max_completion_tokens=1).usage
    assert usage.prompt_tokens == body["count"]
    bare = raw.post("/tokenize", json={"messages": messages,
                                       "add_generation_prompt": False}).json()
    assert bare["tokens"] == tiny[1].encode(template.render(messages),
                                            allowed_special="all")
    assert bare["count"] < body["count"]


def test_detokenize_inverts_tokenize(raw, tiny):
    text = "class Stack:\n    def push(self, x):  # ü\n"
    tokens = raw.post("/tokenize", json={"prompt": text}).json()["tokens"]
    reply = raw.post("/detokenize", json={"model": MODEL, "tokens": tokens})
    assert reply.status_code == 200 and reply.json() == {"prompt": text}
    assert raw.post("/detokenize", json={"tokens": []}).json() == {"prompt": ""}
    assert raw.post("/detokenize", json={"tokens": [4095]}).json() == {
        "prompt": tiny[1].decode([4095])}


def test_health_answers_without_a_key(url):
    response = httpx.get(url + "/health", timeout=TIMEOUT)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_metrics_are_prometheus_text_and_count_each_request(url, client):
    response = httpx.get(url + "/metrics", timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name, kind in [("llmcore_kv_blocks_free", "gauge"),
                       ("llmcore_kv_blocks_total", "gauge"),
                       ("llmcore_requests_running", "gauge"),
                       ("llmcore_requests_waiting", "gauge"),
                       ("llmcore_prompt_tokens_total", "counter"),
                       ("llmcore_generation_tokens_total", "counter"),
                       ("llmcore_requests_finished_total", "counter"),
                       ("llmcore_time_to_first_token_seconds", "histogram"),
                       ("llmcore_time_per_output_token_seconds", "histogram"),
                       ("llmcore_e2e_request_latency_seconds", "histogram")]:
        assert f"# TYPE {name} {kind}\n" in text and f"# HELP {name} " in text
    before = _metrics(url)
    assert before["llmcore_kv_blocks_total"] == 8 * 1024 // 16  # max_batch contexts
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=7,
                                      temperature=0)
    after = _metrics(url)  # counted before the reply was sent

    def grew(name):
        return after.get(name, 0.0) - before.get(name, 0.0)
    assert grew("llmcore_prompt_tokens_total") == reply.usage.prompt_tokens
    assert grew("llmcore_generation_tokens_total") == reply.usage.completion_tokens
    finish = reply.choices[0].finish_reason
    assert grew(f'llmcore_requests_finished_total{{finish_reason="{finish}"}}') == 1
    assert grew("llmcore_time_to_first_token_seconds_count") == 1
    assert grew("llmcore_time_per_output_token_seconds_count") == 1
    assert grew("llmcore_e2e_request_latency_seconds_count") == 1
    assert grew('llmcore_time_to_first_token_seconds_bucket{le="+Inf"}') == 1
    assert after["llmcore_kv_blocks_free"] == after["llmcore_kv_blocks_total"]



class _NoEngine:
    """What the HTTP side gets for server.engine in the test below: any read fails."""

    def __getattr__(self, name):
        raise AssertionError(f"the HTTP side read engine.{name}")


def _reaches(root, target) -> bool:
    """Whether `target` is reachable from `root` through attributes, containers,
    bound methods and closures (not through modules, classes or a function's
    globals)."""
    seen, todo = set(), [root]
    while todo:
        obj = todo.pop()
        if obj is target:
            return True
        if id(obj) in seen or isinstance(obj, (type, types.ModuleType)):
            continue
        seen.add(id(obj))
        if isinstance(obj, types.FunctionType):
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    todo.append(cell.cell_contents)
        else:
            todo += gc.get_referents(obj)
    return False


def test_the_gauges_are_set_by_the_engine_thread_alone(tiny, template):
    """Only the engine thread reads the engine, /metrics included: Metrics holds no
    engine, the HTTP side is handed none (a read of server.engine fails), and still
    every gauge is right as soon as a reply has arrived, without waiting."""
    with _in_process(tiny, template, max_batch=2) as server:
        engine = server.engine
        total = engine.blocks.num_blocks  # fixed at construction
        assert _reaches(server.worker, engine)  # the walk finds an engine held
        assert not _reaches(server.metrics, engine)
        server.engine = _NoEngine()
        try:
            m = _metrics(server.url)
            assert m["llmcore_kv_blocks_total"] == m["llmcore_kv_blocks_free"] == total
            assert m["llmcore_requests_running"] == m["llmcore_preemptions"] == 0
            client = _client(server.url)
            stream = client.completions.create(model=MODEL, prompt=CODE,
                                               max_tokens=900, temperature=0,
                                               stream=True)
            chunks = iter(stream)
            next(chunks), next(chunks)
            m = _metrics(server.url)  # set before the chunk was sent
            assert m["llmcore_requests_running"] == 1
            assert m["llmcore_kv_blocks_free"] < total
            stream.close()  # the cancellation, too, is published by the engine thread
            _wait_for(lambda: _idle(server.url), "the gauges show the cancellation")
            for max_tokens in (3, 9):
                reply = client.completions.create(model=MODEL, prompt=CODE,
                                                  max_tokens=max_tokens, temperature=0)
                assert reply.choices[0].text == _expected(
                    tiny, CODE, max_tokens=max_tokens).text
                m = _metrics(server.url)  # no waiting: set before the reply left
                assert m["llmcore_kv_blocks_free"] == total
                assert m["llmcore_requests_running"] == 0
                assert m["llmcore_requests_waiting"] == 0
            assert httpx.get(server.url + "/health", timeout=TIMEOUT).status_code == 200
        finally:
            server.engine = engine

# --- 2. Completions -------------------------------------------------------------------
def test_greedy_completion_equals_generate(client, tiny):
    want = _expected(tiny, CODE, max_tokens=24)
    t0 = int(time.time())
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                      temperature=0)
    choice, = reply.choices
    assert choice.text == want.text and choice.index == 0
    assert choice.finish_reason == want.finish_reason
    assert reply.object == "text_completion" and reply.model == MODEL
    assert reply.id.startswith("cmpl-") and reply.system_fingerprint.startswith("fp_")
    assert isinstance(reply.created, int) and t0 - 1 <= reply.created
    usage = reply.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        want.usage.prompt_tokens, want.usage.completion_tokens)
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_streamed_chunks_join_to_the_same_text(client, tiny):
    want = _expected(tiny, CODE, max_tokens=24)
    chunks = list(client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                            temperature=0, stream=True))
    assert len(chunks) > 2 and len({c.id for c in chunks}) == 1
    assert "".join(c.choices[0].text for c in chunks) == want.text
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])
    assert chunks[-1].choices[0].finish_reason == want.finish_reason
    assert all(c.usage is None for c in chunks)


def test_stream_include_usage_adds_a_final_usage_chunk(client, tiny):
    want = _expected(tiny, CODE, max_tokens=12)
    chunks = list(client.completions.create(
        model=MODEL, prompt=CODE, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    *body, last = chunks
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (
        want.usage.prompt_tokens, want.usage.completion_tokens)
    assert last.usage.total_tokens == want.usage.total_tokens
    assert all(c.usage is None for c in body) and len(body) > 1
    assert "".join(c.choices[0].text for c in body) == want.text
    assert body[-1].choices[0].finish_reason == want.finish_reason


def test_prompt_forms_string_ids_and_lists(client, tiny):
    _, tokenizer = tiny
    prompts = [CODE, "import os\n"]
    wants = [_expected(tiny, p, max_tokens=8).text for p in prompts]
    ids = [tokenizer.encode(p) for p in prompts]
    for prompt in (prompts[0], ids[0]):
        reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                          temperature=0)
        assert [c.text for c in reply.choices] == wants[:1]
    for prompt in (prompts, ids):  # choices indexed prompt * n + j
        reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8,
                                          temperature=0, n=2)
        assert [c.index for c in reply.choices] == [0, 1, 2, 3]
        assert [c.text for c in reply.choices] == [wants[0]] * 2 + [wants[1]] * 2
        assert reply.usage.prompt_tokens == sum(map(len, ids))


def test_n_choices_with_a_seed_differ_and_reproduce(client):
    def ask():
        reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=12,
                                          temperature=1.0, n=3, seed=1234)
        assert [c.index for c in reply.choices] == [0, 1, 2]
        return [c.text for c in reply.choices]
    first = ask()
    assert ask() == first
    assert len(set(first)) > 1  # each choice draws its own sample


def test_echo_puts_the_prompt_first(client, tiny):
    want = _expected(tiny, CODE, max_tokens=6)
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=6,
                                      temperature=0, echo=True)
    assert reply.choices[0].text == CODE + want.text


def test_logprobs_are_consistent_and_greedy_picks_the_top(client, tiny):
    want = _expected(tiny, CODE, max_tokens=10)
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=10,
                                      temperature=0, logprobs=3)
    lp = reply.choices[0].logprobs
    n = reply.usage.completion_tokens
    assert n == len(want.token_ids)
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert len(lp.text_offset) == n and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == reply.choices[0].text
    for logprob, top in zip(lp.token_logprobs, lp.top_logprobs):
        assert 1 <= len(top) <= 3 and logprob <= 0
        assert sum(math.exp(v) for v in top.values()) <= 1 + 1e-4
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)  # greedy: top 1


def test_completions_top_logprobs_always_hold_the_chosen_token(client, tiny):
    # OpenAI: "the API will always return the logprob of the sampled token, so there may
    # be up to logprobs+1 elements"; with logprobs=0, the chosen token alone
    _, tokenizer = tiny
    zero = client.completions.create(model=MODEL, prompt=CODE, max_tokens=6,
                                     temperature=0, logprobs=0)
    lp = zero.choices[0].logprobs
    assert [list(top) for top in lp.top_logprobs] == [[t] for t in lp.tokens]
    assert [top[t] for top, t in zip(lp.top_logprobs, lp.tokens)] == pytest.approx(
        lp.token_logprobs)
    hot = client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                    temperature=2.0, seed=7, logprobs=1)
    lp = hot.choices[0].logprobs
    sizes = [len(top) for top in lp.top_logprobs]
    assert all(t in top and top[t] == pytest.approx(v)
               for t, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))
    assert set(sizes) <= {1, 2} and 2 in sizes  # some sampled token was not the top one


def test_with_chosen_adds_the_chosen_token_only_when_missing():
    from llmcore.api import with_chosen
    from llmcore.request import TokenLogprob

    assert with_chosen(TokenLogprob(5, -0.1, [(5, -0.1), (2, -3.0)])) == [(5, -0.1),
                                                                          (2, -3.0)]
    assert with_chosen(TokenLogprob(9, -4.0, [(5, -0.1)])) == [(5, -0.1), (9, -4.0)]
    assert with_chosen(TokenLogprob(9, -4.0, [])) == [(9, -4.0)]


def test_echo_with_logprobs_lists_the_prompt_tokens_first(client, tiny):
    _, tokenizer = tiny
    prompt_ids = tokenizer.encode(CODE)
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=4,
                                      temperature=0, echo=True, logprobs=1)
    lp = reply.choices[0].logprobs
    assert len(lp.tokens) == len(prompt_ids) + reply.usage.completion_tokens
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v is not None and v <= 0 for v in lp.token_logprobs[1:])
    assert "".join(lp.tokens) == reply.choices[0].text
    assert lp.text_offset[len(prompt_ids)] == len(CODE)


def test_streamed_echo_with_logprobs_matches_the_reply(client):
    kwargs = dict(model=MODEL, prompt=[CODE, "import os\n"], n=2, max_tokens=4,
                  temperature=0, echo=True, logprobs=1)
    whole = client.completions.create(**kwargs).choices
    chunks = list(client.completions.create(**kwargs, stream=True))
    for choice in whole:
        mine = [c.choices[0] for c in chunks if c.choices[0].index == choice.index]
        assert "".join(c.text for c in mine) == choice.text
        logprobs = [c.logprobs for c in mine if c.logprobs]
        for key in ("tokens", "token_logprobs", "text_offset"):
            streamed = [v for lp in logprobs for v in getattr(lp, key)]
            assert streamed == pytest.approx(getattr(choice.logprobs, key)), key


def test_stop_string_cuts_the_text(client, tiny):
    base = _expected(tiny, CODE, max_tokens=24).text
    stop = base.split()[2]  # a word from the middle of the greedy text
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                      temperature=0, stop=[stop, "@@never@@"])
    choice = reply.choices[0]
    assert choice.text == base[:base.index(stop)]
    assert choice.finish_reason == "stop"
    assert choice.model_extra["stop_reason"] == stop
    chunks = list(client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                            temperature=0, stop=stop, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == choice.text  # nothing leaks
    assert chunks[-1].choices[0].finish_reason == "stop"
    kept = client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                     temperature=0, stop=stop,
                                     extra_body={"include_stop_str_in_output": True})
    assert kept.choices[0].text == choice.text + stop


def test_penalties_and_logit_bias_change_the_output(client, tiny):
    base = _expected(tiny, CODE, max_tokens=24)

    def text(**kwargs):
        extra = kwargs.pop("extra_body", None)
        return client.completions.create(model=MODEL, prompt=CODE, max_tokens=24,
                                         temperature=0, extra_body=extra,
                                         **kwargs).choices[0].text
    assert text() == base.text
    for kwargs in ({"presence_penalty": 2.0}, {"frequency_penalty": 2.0}):
        got = text(**kwargs)
        assert got != base.text, kwargs
        assert got == _expected(tiny, CODE, max_tokens=24, **kwargs).text
    first = base.token_ids[0]
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=3,
                                      temperature=0, logit_bias={str(first): -100},
                                      logprobs=1)
    _, tokenizer = tiny
    assert reply.choices[0].logprobs.tokens[0] != tokenizer.decode([first])
    want = _expected(tiny, CODE, max_tokens=3, logit_bias={first: -100})
    assert reply.choices[0].text == want.text


def test_vllm_sampling_extras(client, tiny):
    base = _expected(tiny, CODE, max_tokens=16)

    def create(**extra):
        return client.completions.create(model=MODEL, prompt=CODE, max_tokens=16,
                                          temperature=extra.pop("temperature", 0),
                                          seed=extra.pop("seed", None),
                                          extra_body=extra).choices[0]
    # top_k=1 and min_p=1 keep only the most likely token: greedy at temperature 1
    assert create(temperature=1.0, seed=5, top_k=1).text == base.text
    assert create(temperature=1.0, seed=6, min_p=1.0).text == base.text
    # top_k -1 means off, like 0
    assert (create(temperature=1.0, seed=7, top_k=-1).text
            == create(temperature=1.0, seed=7, top_k=0).text)
    got = create(repetition_penalty=1.5).text
    assert got != base.text
    assert got == _expected(tiny, CODE, max_tokens=16, repetition_penalty=1.5).text
    first = base.token_ids[0]
    stopped = create(stop_token_ids=[first])
    assert stopped.text == "" and stopped.finish_reason == "stop"
    assert stopped.model_extra["stop_reason"] == first
    later = create(stop_token_ids=[first], min_tokens=4)
    want = _expected(tiny, CODE, max_tokens=16, stop_token_ids=[first], min_tokens=4)
    assert later.text == want.text and len(want.token_ids) >= 4



def test_ignore_eos_generates_max_tokens_past_the_end_of_text(client, tiny):
    """vLLM's ignore_eos (what guidellm and `vllm bench serve` send): EOS becomes an
    ordinary token, so a benchmark gets the output length it asked for."""
    _, tokenizer = tiny
    eos = tokenizer.special_tokens["<|endoftext|>"]

    def create(**extra):
        return client.completions.create(model=MODEL, prompt=CODE, max_tokens=5,
                                         temperature=0, logit_bias={str(eos): 100},
                                         extra_body=extra)
    for ended in (create(), create(ignore_eos=False), create(ignore_eos=None)):
        assert ended.choices[0].finish_reason == "stop"  # the bias makes EOS first
        assert ended.usage.completion_tokens == 1
    kept = create(ignore_eos=True)
    assert kept.choices[0].finish_reason == "length"
    assert kept.usage.completion_tokens == 5
    want = _expected(tiny, CODE, max_tokens=5, logit_bias={eos: 100}, ignore_eos=True)
    assert kept.choices[0].text == want.text and len(want.token_ids) == 5
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=6,
        temperature=0, logit_bias={str(eos): 100}, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == 6
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_request_id_names_the_reply_and_priority_is_first_come(client):
    kwargs = dict(model=MODEL, prompt=CODE, max_tokens=2, temperature=0)
    named = client.completions.create(**kwargs, extra_body={"request_id": "job-7"})
    assert named.id == "cmpl-job-7"
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        extra_body={"request_id": "job-7", "priority": 0})
    assert chat.id == "chatcmpl-job-7"
    # two requests in flight under one id: both served (the engine's ids are its own)
    streams = [client.completions.create(**kwargs, stream=True,
                                         extra_body={"request_id": "same"})
               for _ in range(2)]
    for stream in streams:
        chunks = list(stream)
        assert {c.id for c in chunks} == {"cmpl-same"}
        assert chunks[-1].choices[0].finish_reason == "length"
    unnamed = {client.completions.create(**kwargs).id for _ in range(2)}
    assert len(unnamed) == 2
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(**kwargs, extra_body={"priority": 1})
    assert "first come, first served" in err.value.body["message"]
    assert err.value.body["param"] == "priority"



def test_truncate_prompt_tokens_keeps_the_prompts_last_tokens(client, tiny):
    _, tokenizer = tiny
    ids = tokenizer.encode(CODE)
    kept = client.completions.create(model=MODEL, prompt=CODE, max_tokens=6,
                                     temperature=0, echo=True,
                                     extra_body={"truncate_prompt_tokens": 3})
    assert kept.usage.prompt_tokens == 3
    tail = tokenizer.decode(ids[-3:])
    want = _expected(tiny, ids[-3:], max_tokens=6)
    assert kept.choices[0].text == tail + want.text  # echo shows the kept prompt
    whole = client.completions.create(model=MODEL, prompt=CODE, max_tokens=6,
                                      extra_body={"truncate_prompt_tokens": 999})
    assert whole.usage.prompt_tokens == len(ids)  # shorter than k: unchanged
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello " * 40}],
        max_tokens=2, extra_body={"truncate_prompt_tokens": 10})
    assert chat.usage.prompt_tokens == 10
    for bad in (0, -2, 10**9, "3"):
        with pytest.raises(openai.BadRequestError) as err:
            client.completions.create(model=MODEL, prompt=CODE, max_tokens=2,
                                      extra_body={"truncate_prompt_tokens": bad})
        assert err.value.body["param"] == "truncate_prompt_tokens"


# Every optional field of each endpoint, for "null means the default".
COMPLETION_FIELDS = ["model", "max_tokens", "top_p", "n", "stream", "stream_options",
                     "stop", "seed", "presence_penalty", "frequency_penalty",
                     "logit_bias", "response_format", "top_k", "min_p",
                     "repetition_penalty", "min_tokens", "stop_token_ids",
                     "include_stop_str_in_output", "echo", "logprobs", "best_of",
                     "user", "suffix", "temperature", "ignore_eos", "priority",
                     "request_id", "truncate_prompt_tokens"]
CHAT_FIELDS = [f for f in COMPLETION_FIELDS
               if f not in ("echo", "best_of", "suffix")] + [
    "max_completion_tokens", "top_logprobs", "add_generation_prompt",
    "chat_template_kwargs", "tools", "tool_choice", "metadata"]


@pytest.mark.parametrize("path, fields, body", [
    ("/v1/completions", COMPLETION_FIELDS, {"prompt": CODE}),
    ("/v1/chat/completions", CHAT_FIELDS,
     {"messages": [{"role": "user", "content": "Write add(a, b)."}],
      "max_completion_tokens": 8})], ids=["completions", "chat"])
def test_null_fields_mean_the_defaults(raw, path, fields, body):
    for fixed in ({"temperature": 0}, {"seed": 99}):  # greedy, then seeded sampling
        plain = {**body, **fixed}
        nulls = {**{f: None for f in fields}, **plain}
        a, b = raw.post(path, json=plain), raw.post(path, json=nulls)
        assert a.status_code == b.status_code == 200, b.text
        ta, tb = a.json()["choices"], b.json()["choices"]
        assert len(ta) == len(tb) == 1
        key = "text" if path == "/v1/completions" else "message"
        assert ta[0][key] == tb[0][key]
        assert ta[0]["logprobs"] is None and tb[0]["logprobs"] is None
        assert a.json()["usage"] == b.json()["usage"]
    assert b.json()["model"] == MODEL


def test_json_object_response_parses(client):
    reply = client.completions.create(
        model=MODEL, prompt="x = {", max_tokens=48, temperature=0,
        extra_body={"response_format": {"type": "json_object"}})
    choice = reply.choices[0]
    assert choice.finish_reason == "stop"
    assert isinstance(json.loads(choice.text), dict)


WEATHER = {"type": "object", "properties": {
    "location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["location", "days"], "additionalProperties": False}


def _schema_format(schema: dict) -> dict:
    return {"response_format": {"type": "json_schema", "json_schema": {
        "name": "weather", "schema": schema, "strict": True}}}


@pytest.mark.parametrize("stream", [False, True])
def test_json_schema_replies_validate_on_both_endpoints(client, stream):
    texts = []
    for make in (lambda: client.completions.create(
            model=MODEL, prompt="weather = ", max_tokens=60, temperature=1.0, seed=5,
            n=3, stream=stream, extra_body=_schema_format(WEATHER)),
                 lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "The weather?"}],
            max_completion_tokens=60, temperature=1.0, seed=5, n=3, stream=stream,
            extra_body=_schema_format(WEATHER))):
        reply = make()
        if not stream:
            texts += [getattr(c, "text", None) or c.message.content
                      for c in reply.choices]
            assert all(c.finish_reason == "stop" for c in reply.choices)
            continue
        parts: dict[int, str] = {}
        for chunk in reply:
            for c in chunk.choices:
                piece = getattr(c, "text", None)
                piece = piece if piece is not None else (c.delta.content or "")
                parts[c.index] = parts.get(c.index, "") + piece
        texts += list(parts.values())
    assert len(texts) == 6
    for text in texts:
        jsonschema.validate(json.loads(text), WEATHER)


class Weather(pydantic.BaseModel):
    location: str
    unit: Optional[Literal["celsius", "fahrenheit"]]
    days: int


def test_the_official_parse_returns_a_pydantic_object(client):
    reply = client.beta.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "The weather in Paris?"}],
        response_format=Weather, max_completion_tokens=80, temperature=0.7, seed=1)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "stop"
    assert isinstance(message.parsed, Weather)
    assert Weather.model_validate_json(message.content) == message.parsed


def test_sampled_json_replies_parse_at_temperature_one(client):
    """JSON mode and json_schema at T = 1, max_tokens 200: every reply is whole."""
    for extra, schema in (({"response_format": {"type": "json_object"}}, None),
                          (_schema_format(WEATHER), WEATHER)):
        reply = client.completions.create(model=MODEL, prompt="x = {", max_tokens=200,
                                          temperature=1.0, seed=11, n=10,
                                          extra_body=extra)
        for choice in reply.choices:
            assert choice.finish_reason == "stop", choice.text
            value = json.loads(choice.text)
            assert isinstance(value, dict)
            if schema:
                jsonschema.validate(value, schema)


@pytest.mark.parametrize("fmt,keyword", [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "(a)\\1"}}}, "pattern"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "properties": {"a": {"type": "number", "multipleOf": 0.5}},
        "required": ["a"], "additionalProperties": False}}}, "multipleOf"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "allOf": [{"type": "integer"}]}}}, "allOf"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$ref": "#/$defs/Missing"}}}, "$ref"),
    ({"type": "json_schema", "json_schema": {"schema": {}}}, "name"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}}, "schema"),
    ({"type": "json_schema"}, "json_schema"),
    ({"type": "xml"}, "json_object"),
])
def test_bad_schemas_get_a_400_naming_the_keyword(client, fmt, keyword):
    for call in (lambda: client.completions.create(
            model=MODEL, prompt="x", max_tokens=20, extra_body={"response_format": fmt}),
                 lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}],
            max_completion_tokens=20, extra_body={"response_format": fmt})):
        with pytest.raises(openai.BadRequestError) as caught:
            call()
        assert caught.value.param == "response_format"
        assert keyword in caught.value.message


def test_max_tokens_too_few_to_close_the_schema_ends_with_length(client):
    """As OpenAI does: accepted, and the unfinished value ends with "length"."""
    reply = client.completions.create(model=MODEL, prompt="x", max_tokens=4,
                                      extra_body=_schema_format(WEATHER)).choices[0]
    assert reply.finish_reason == "length" and reply.text.startswith("{")
    with pytest.raises(ValueError):
        json.loads(reply.text)


# --- tools: tool_choice none / auto / required / named, and the round trip -----------
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city"], "additionalProperties": False}}}
TIME_TOOL = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {
        "zone": {"type": "string"}}, "required": ["zone"],
        "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _check_call(call, tools=(WEATHER_TOOL, TIME_TOOL)):
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments),
                        by_name[call.function.name])


@pytest.mark.parametrize("stream", [False, True])
def test_tool_choice_required_and_named_return_valid_calls(client, stream):
    for choice, finish in (("required", "tool_calls"),
                           ({"type": "function", "function": {"name": "get_time"}},
                            "stop")):
        reply = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL],
            tool_choice=choice, max_completion_tokens=80, temperature=0.8, seed=3,
            stream=stream)
        if stream:
            calls: dict[int, dict] = {}
            reasons = []
            for chunk in reply:
                for c in chunk.choices:
                    reasons.append(c.finish_reason)
                    for d in c.delta.tool_calls or []:
                        calls.setdefault(d.index, {"id": d.id, "name": d.function.name,
                                                   "arguments": ""})
                        calls[d.index]["arguments"] += d.function.arguments or ""
            assert reasons[-1] == finish and calls
            for got in calls.values():
                call = openai.types.chat.ChatCompletionMessageToolCall(
                    id=got["id"], type="function", function={
                        "name": got["name"], "arguments": got["arguments"]})
                _check_call(call)
            continue
        choice_ = reply.choices[0]
        assert choice_.finish_reason == finish, choice_
        assert choice_.message.tool_calls and choice_.message.content is None
        for call in choice_.message.tool_calls:
            _check_call(call)
        if finish == "stop":
            assert [c.function.name for c in choice_.message.tool_calls] == ["get_time"]


def test_a_tool_round_trip_with_the_official_client(client, template, tiny):
    first = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER_TOOL], tool_choice="required",
        max_completion_tokens=60, temperature=0)
    message = first.choices[0].message
    call = message.tool_calls[0]
    messages = ASK + [message.model_dump(exclude_none=True),
                      {"role": "tool", "tool_call_id": call.id,
                       "content": "22 degrees, sunny"}]
    second = client.chat.completions.create(
        model=MODEL, messages=messages, tools=[WEATHER_TOOL], max_completion_tokens=8,
        temperature=0)
    assert isinstance(second.choices[0].message.content, str)
    # the tool's result and the call reached the prompt, as the template writes them
    arguments = json.loads(call.function.arguments)
    prompt = template.render(
        [ASK[0], {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {
                "name": "get_weather", "arguments": arguments}}]},
         messages[2]], tools=[WEATHER_TOOL], add_generation_prompt=True)
    assert "<tool_response>\n22 degrees, sunny\n</tool_response>" in prompt
    assert second.usage.prompt_tokens == len(
        tiny[1].encode(prompt, allowed_special="all"))


def test_tool_choice_auto_and_none_answer_in_text(client):
    for choice in ("auto", "none"):
        reply = client.chat.completions.create(
            model=MODEL, messages=ASK, tools=[WEATHER_TOOL], tool_choice=choice,
            max_completion_tokens=12, temperature=0)
        message = reply.choices[0].message
        assert message.tool_calls is None and isinstance(message.content, str)
        assert reply.choices[0].finish_reason in ("stop", "length")


def test_parallel_tool_calls_false_returns_one_call(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=ASK, tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required", parallel_tool_calls=False, max_completion_tokens=80,
        temperature=1.0, seed=7)
    assert len(reply.choices[0].message.tool_calls) == 1


def test_response_ids_are_unique(client):
    ids = [client.completions.create(model=MODEL, prompt=CODE, max_tokens=1).id
           for _ in range(4)]
    ids += [client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}],
        max_completion_tokens=1).id for _ in range(2)]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("chatcmpl-") for i in ids[4:])


# --- 3. Chat --------------------------------------------------------------------------
CONVERSATION = [
    {"role": "system", "content": "You write short Python functions."},
    {"role": "user", "content": "Add two numbers."},
    {"role": "assistant", "content": "def add(a, b):\n    return a + b\n"},
    {"role": "user", "content": "Now subtract them."}]


def _chat_expected(tiny, template, messages, **params):
    _, tokenizer = tiny
    text = template.render(messages, add_generation_prompt=True)
    ids = tokenizer.encode(text, allowed_special="all")
    return ids, _expected(tiny, ids, **params)


def test_chat_greedy_equals_generate_on_the_chatml_prompt(client, tiny, template):
    ids, want = _chat_expected(tiny, template, CONVERSATION, max_tokens=20)
    assert template.render(CONVERSATION, add_generation_prompt=True).startswith(
        "<|im_start|>system\nYou write short Python functions.<|im_end|>\n")
    reply = client.chat.completions.create(model=MODEL, messages=CONVERSATION,
                                           max_completion_tokens=20, temperature=0)
    choice, = reply.choices
    assert choice.message.role == "assistant" and choice.message.content == want.text
    assert choice.finish_reason == want.finish_reason
    assert reply.object == "chat.completion" and reply.id.startswith("chatcmpl-")
    assert reply.usage.prompt_tokens == len(ids)
    assert reply.usage.completion_tokens == len(want.token_ids)
    # max_tokens is the older name of max_completion_tokens
    again = client.chat.completions.create(model=MODEL, messages=CONVERSATION,
                                           max_tokens=20, temperature=0)
    assert again.choices[0].message.content == want.text


def test_chat_streaming_role_first_then_deltas(client, tiny, template):
    _, want = _chat_expected(tiny, template, CONVERSATION, max_tokens=20)
    chunks = list(client.chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=20, temperature=0,
        stream=True, stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    *body, last = chunks
    assert last.choices == [] and last.usage.completion_tokens == len(want.token_ids)
    assert "".join(c.choices[0].delta.content or "" for c in body) == want.text
    assert body[-1].choices[0].finish_reason == want.finish_reason
    assert all(c.choices[0].finish_reason is None for c in body[:-1])


def test_chat_n_and_max_completion_tokens(client):
    reply = client.chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=5, n=3, seed=11,
        temperature=1.0)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.usage.completion_tokens <= 15
    assert all(c.finish_reason in ("length", "stop") for c in reply.choices)
    assert any(c.finish_reason == "length" for c in reply.choices)


def test_chat_logprobs_have_the_chat_shape(client, tiny, template):
    _, want = _chat_expected(tiny, template, CONVERSATION, max_tokens=8)
    reply = client.chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=8, temperature=0,
        logprobs=True, top_logprobs=2)
    content = reply.choices[0].logprobs.content
    assert len(content) == len(want.token_ids) == reply.usage.completion_tokens
    _, tokenizer = tiny
    for token_id, entry in zip(want.token_ids, content):
        assert bytes(entry.bytes) == tokenizer.decode_bytes([token_id])
        assert len(entry.top_logprobs) == 2
        assert entry.top_logprobs[0].token == entry.token  # greedy: the top one
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-5)
        assert entry.top_logprobs[1].logprob <= entry.logprob <= 0
    plain = client.chat.completions.create(
        model=MODEL, messages=CONVERSATION, max_completion_tokens=8, temperature=0,
        logprobs=True)
    assert all(e.top_logprobs == [] for e in plain.choices[0].logprobs.content)


def test_chat_invalid_message_names_it(client):
    bad = [{"role": "user", "content": "hi"}, {"role": "user"}]
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model=MODEL, messages=bad)
    assert "messages[1].content" in caught.value.message
    assert caught.value.param == "messages"


# --- 4. Errors ------------------------------------------------------------------------
@dataclass(frozen=True)
class Call:
    """One HTTP request: a JSON body, or raw bytes, with or without the API key."""
    path: str = "/v1/completions"
    body: object = None
    content: object = None  # bytes, or a function giving an iterator (chunked)
    method: str = "POST"
    key: str | None = KEY


def completion(**body) -> Call:
    return Call(body={"model": MODEL, "prompt": CODE, "max_tokens": 4, **body})


def chat(**body) -> Call:
    return Call("/v1/chat/completions", body={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 4, **body})


def without(call: Call, field: str) -> Call:
    return Call(call.path, {k: v for k, v in call.body.items() if k != field})


def tokenize(**body) -> Call:
    return Call("/tokenize", body={"model": MODEL, **body})


def detokenize(**body) -> Call:
    return Call("/detokenize", body={"model": MODEL, **body})


LONG_PROMPT = [11] * 1000  # token ids; the context is 1024 positions

# (name, request, expected status, what the message must say); each a distinct class.
BAD_INPUTS = [
    # wrong types
    ("prompt is a number", completion(prompt=5), 400, "'prompt' must be"),
    ("prompt list holds a number among strings", completion(prompt=["a", 5]), 400,
     "'prompt' must be"),
    ("max_tokens is a string", completion(max_tokens="10"), 400, "'max_tokens'"),
    ("max_tokens is a float", completion(max_tokens=10.0), 400, "'max_tokens'"),
    ("max_tokens is a bool", completion(max_tokens=True), 400, "'max_tokens'"),
    ("temperature is a string", completion(temperature="hot"), 400, "'temperature'"),
    ("stream is a string", completion(stream="yes"), 400, "'stream'"),
    ("echo is a string", completion(echo="yes"), 400, "'echo'"),
    ("stop is a number", completion(stop=5), 400, "'stop'"),
    ("logit_bias is a list", completion(logit_bias=[1, 2]), 400, "'logit_bias'"),
    ("chat logprobs is an int", chat(logprobs=3), 400, "'logprobs'"),
    ("messages is a string", chat(messages="hi"), 400, "'messages'"),
    ("message is not an object", chat(messages=["hi"]), 400, "messages[0]"),
    ("message without role", chat(messages=[{"content": "hi"}]), 400,
     "messages[0].role"),
    ("message without content", chat(messages=[{"role": "user"}]), 400,
     "messages[0].content"),
    # out of range
    ("max_tokens 0", completion(max_tokens=0), 400, "'max_tokens' must be an int >= 1"),
    ("max_completion_tokens 0", chat(max_completion_tokens=0), 400,
     "'max_completion_tokens'"),
    ("temperature below 0", completion(temperature=-0.5), 400, "[0, 2]"),
    ("temperature above 2", completion(temperature=2.5), 400, "'temperature'"),
    ("temperature NaN", Call(content=b'{"prompt": "a", "temperature": NaN}'), 400,
     "'temperature'"),
    ("temperature 10**400 (no float holds it)", completion(temperature=10**400), 400,
     "'temperature'"),
    ("repetition_penalty 10**400", completion(repetition_penalty=10**400), 400,
     "'repetition_penalty'"),
    ("logit_bias value 10**400", completion(logit_bias={"5": 10**400}), 400,
     "'logit_bias'"),
    ("top_p 0", completion(top_p=0), 400, "'top_p' must be a number in (0, 1]"),
    ("top_p above 1", completion(top_p=1.5), 400, "'top_p'"),
    ("top_k 10**20", completion(top_k=10**20), 400, "'top_k'"),
    ("top_k -2", completion(top_k=-2), 400, "'top_k'"),
    ("min_p above 1", completion(min_p=1.5), 400, "'min_p'"),
    ("repetition_penalty 0", completion(repetition_penalty=0), 400,
     "'repetition_penalty'"),
    ("presence_penalty above 2", completion(presence_penalty=2.5), 400,
     "'presence_penalty'"),
    ("frequency_penalty below -2", completion(frequency_penalty=-3), 400,
     "'frequency_penalty'"),
    # one step past each bound (a bug that moves a bound by one must fail here, not
    # later in the engine with param null)
    ("top_k one past the vocabulary", completion(top_k=4097), 400, "'top_k'"),
    ("temperature just above 2", completion(temperature=2.0001), 400, "'temperature'"),
    ("top_p just above 1", completion(top_p=1.0001), 400, "'top_p'"),
    ("top_p negative", completion(top_p=-0.1), 400, "'top_p'"),
    ("min_p negative", completion(min_p=-0.01), 400, "'min_p'"),
    ("presence_penalty below -2", completion(presence_penalty=-2.01), 400,
     "'presence_penalty'"),
    ("frequency_penalty above 2", completion(frequency_penalty=2.01), 400,
     "'frequency_penalty'"),
    ("repetition_penalty negative", completion(repetition_penalty=-1), 400,
     "'repetition_penalty'"),
    ("max_tokens -1", completion(max_tokens=-1), 400, "'max_tokens'"),
    ("min_tokens -1", completion(min_tokens=-1), 400, "'min_tokens'"),
    ("ignore_eos a string", completion(ignore_eos="yes"), 400, "'ignore_eos'"),
    ("request_id empty", completion(request_id=""), 400,
     "'request_id' must be a string of 1 to 256 printable characters"),
    ("request_id with a newline", completion(request_id="a\nb"), 400, "'request_id'"),
    ("priority a string", completion(priority="high"), 400, "'priority' must be an int"),
    ("logprobs -1", completion(logprobs=-1), 400, "'logprobs'"),
    ("top_logprobs -1", chat(logprobs=True, top_logprobs=-1), 400, "'top_logprobs'"),
    ("logit_bias value -100.5", completion(logit_bias={"5": -100.5}), 400,
     "[-100, 100]"),
    ("logit_bias value 100.0001", completion(logit_bias={"5": 100.0001}), 400,
     "[-100, 100]"),
    ("min_p just above 1", completion(min_p=1.0001), 400, "'min_p'"),
    ("min_tokens one past max_tokens", completion(min_tokens=5, max_tokens=4), 400,
     "'min_tokens' must be an int in [0, max_tokens=4]"),
    ("max_tokens one past the context", completion(prompt=LONG_PROMPT, max_tokens=25),
     400, ("1000 tokens", "(25)", "at most 24")),
    ("max_completion_tokens one past the context", chat(max_completion_tokens=999),
     400, ("(26 tokens)", "max_completion_tokens (999)", "at most 998")),
    ("top_k one past the vocabulary, chat", chat(top_k=4097), 400, "'top_k'"),
    ("stop_token_ids one past the vocabulary, chat", chat(stop_token_ids=[4096]), 400,
     "'stop_token_ids'"),
    ("logit_bias id one past the vocabulary, chat", chat(logit_bias={"4096": 1}), 400,
     "'logit_bias'"),
    ("max_completion_tokens 0 names that field", chat(max_completion_tokens=0), 400,
     "'max_completion_tokens' must be an int >= 1"),
    ("logit_bias id -1", completion(logit_bias={"-1": 1}), 400, "'logit_bias'"),
    ("stop_token_ids -1", completion(stop_token_ids=[-1]), 400, "'stop_token_ids'"),
    ("n 0", completion(n=0), 400, "'n' must be an int in [1, 16]"),
    ("n 17", completion(n=17), 400, "'n'"),
    ("logprobs 21", completion(logprobs=21), 400,
     "'logprobs' must be an int in [0, 20]"),
    ("top_logprobs 21", chat(logprobs=True, top_logprobs=21), 400, "'top_logprobs'"),
    ("seed -1", completion(seed=-1), 400, "'seed'"),
    ("seed 2**64", completion(seed=2**64), 400, "'seed'"),
    ("min_tokens > max_tokens", completion(min_tokens=10, max_tokens=4), 400,
     "'min_tokens'"),
    ("prompt + max_tokens > context", completion(prompt=LONG_PROMPT, max_tokens=100),
     400, ("1000", "100", "1024")),
    ("prompt alone fills the context", completion(prompt=[11] * 1024), 400,
     ("1024 tokens", "shorten the prompt")),
    ("too many prompts", completion(prompt=["a"] * 65), 400, "at most 64"),
    ("too many messages", chat(messages=[{"role": "user", "content": "a"}] * 1025),
     400, "'messages'"),
    # prompts
    ("missing prompt", without(completion(), "prompt"), 400, "'prompt' is required"),
    ("missing messages", without(chat(), "messages"), 400, "'messages' is required"),
    ("empty prompt string", completion(prompt=""), 400, "empty"),
    ("empty prompt list", completion(prompt=[]), 400, "'prompt' must be"),
    ("empty messages", chat(messages=[]), 400, "'messages'"),
    ("token id beyond the vocabulary", completion(prompt=[1, 4096]), 400,
     "[0, 4096)"),
    ("negative token id", completion(prompt=[[5], [-1]]), 400, "'prompt'"),
    # stop, logit_bias, stop ids
    ("17 stop strings", completion(stop=[f"s{i}" for i in range(17)]), 400,
     "at most 16"),
    ("empty stop string", completion(stop=[""]), 400, "'stop'"),
    ("stop string too long", completion(stop=["x" * 257]), 400, "256"),
    ("logit_bias with 1025 entries",
     completion(logit_bias={str(i): 1 for i in range(1025)}), 400, "at most 1024"),
    ("logit_bias key not an int", completion(logit_bias={"abc": 1}), 400,
     "keys must be token ids"),
    ("logit_bias value 200", completion(logit_bias={"5": 200}), 400, "[-100, 100]"),
    ("logit_bias id beyond the vocabulary", completion(logit_bias={"5000": 1}), 400,
     "'logit_bias'"),
    ("stop_token_ids beyond the vocabulary", completion(stop_token_ids=[4096]), 400,
     "'stop_token_ids'"),
    # vLLM's /tokenize and /detokenize
    ("tokenize prompt is a number", tokenize(prompt=5), 400,
     "'prompt' must be a string"),
    ("tokenize prompt is token ids", tokenize(prompt=[1, 2]), 400,
     "'prompt' must be a string"),
    ("tokenize neither prompt nor messages", tokenize(), 400,
     "'prompt' or 'messages' is required"),
    ("tokenize both prompt and messages",
     tokenize(prompt="a", messages=[{"role": "user", "content": "a"}]), 400,
     "not both"),
    ("tokenize messages is a string", tokenize(messages="hi"), 400, "'messages'"),
    ("tokenize message without content", tokenize(messages=[{"role": "user"}]), 400,
     "messages[0].content"),
    ("tokenize add_special_tokens is a string",
     tokenize(prompt="a", add_special_tokens="yes"), 400, "'add_special_tokens'"),
    ("tokenize return_token_strs is an int", tokenize(prompt="a", return_token_strs=1),
     400, "'return_token_strs'"),
    ("tokenize add_generation_prompt with a prompt",
     tokenize(prompt="a", add_generation_prompt=True), 400, "go with 'messages'"),
    ("tokenize unknown field", tokenize(prompt="a", add_special_token=True), 400,
     "did you mean 'add_special_tokens'"),
    ("tokenize unknown model", tokenize(prompt="a", model="gpt-4o"), 404,
     "does not exist"),
    ("tokenize without API key", Call("/tokenize", {"prompt": "a"}, key=None), 401,
     "API key"),
    ("GET on tokenize", Call("/tokenize", method="GET"), 405, "use POST"),
    ("tokenize invalid JSON", Call("/tokenize", content=b'{"prompt": '), 400,
     "not valid JSON"),
    ("detokenize token one past the vocabulary", detokenize(tokens=[1, 4096]), 400,
     "'tokens' must be a list of token ids in [0, 4096)"),
    ("detokenize negative token", detokenize(tokens=[-1]), 400, "'tokens'"),
    ("detokenize tokens is a string", detokenize(tokens="abc"), 400, "'tokens'"),
    ("detokenize token is a float", detokenize(tokens=[1.0]), 400, "'tokens'"),
    ("detokenize token is a bool", detokenize(tokens=[True]), 400, "'tokens'"),
    ("detokenize without tokens", detokenize(), 400, "'tokens' is required"),
    ("detokenize a prompt instead", detokenize(prompt="a"), 400,
     "unrecognized request argument 'prompt'"),
    # fields this server does not know or does not do
    ("unknown field", completion(max_token=5), 400,
     ("'max_token'", "did you mean 'max_tokens'")),
    ("unknown chat field", chat(max_completion_token=5), 400,
     "did you mean 'max_completion_tokens'"),
    ("tools: not a list", chat(tools={"type": "function"}), 400,
     "'tools' must be a non-empty list"),
    ("tools: a bad name", chat(tools=[{"type": "function", "function": {
        "name": "get weather"}}]), 400, "tools[0].function.name"),
    ("tools: a name twice", chat(tools=[WEATHER_TOOL, WEATHER_TOOL]), 400,
     "is used twice"),
    ("tools: parameters outside the subset", chat(tools=[{"type": "function",
     "function": {"name": "f", "parameters": {"type": "object", "properties": {
         "x": {"type": "string", "format": "uri"}}, "required": ["x"],
         "additionalProperties": False}}}]), 400, ("tools[0].function.parameters",
                                                   "format")),
    ("tool_choice: an unknown function", chat(tools=[WEATHER_TOOL], tool_choice={
        "type": "function", "function": {"name": "nope"}}), 400,
     "not among the tools"),
    ("tool_choice: required without tools", chat(tool_choice="required"), 400,
     "needs 'tools'"),
    ("tool_choice: a bad value", chat(tools=[WEATHER_TOOL], tool_choice="always"),
     400, ("tool_choice", "must be")),
    ("tool_choice required with response_format", chat(
        tools=[WEATHER_TOOL], tool_choice="required",
        response_format={"type": "json_object"}), 400, "cannot be combined"),
    ("tool call arguments that are not JSON", chat(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "c", "type": "function", "function": {
                "name": "get_weather", "arguments": "{city: Paris"}}]}]), 400,
     "function.arguments must be JSON"),
    ("parallel_tool_calls not a boolean", chat(tools=[WEATHER_TOOL],
                                               parallel_tool_calls="yes"), 400,
     "'parallel_tool_calls'"),
    ("suffix", completion(suffix="\n"), 400, "'suffix' is not supported"),
    ("best_of other than n", completion(best_of=3), 400, "'best_of'"),
    ("response_format json_schema without a name",
     completion(response_format={"type": "json_schema", "json_schema": {}}), 400,
     '"name": a string'),
    ("response_format json_schema with an unsupported keyword",
     chat(response_format={"type": "json_schema", "json_schema": {
         "name": "x", "schema": {"type": "string", "format": "uri"}}}), 400,
     ("response_format.json_schema.schema", "format \"uri\" is not supported")),
    ("response_format of unknown type", completion(response_format={"type": "xml"}),
     400, "'response_format'"),
    ("stream_options without stream", completion(stream_options={
        "include_usage": True}), 400, "only allowed with 'stream': true"),
    ("stream_options unknown key", completion(stream=True, stream_options={"x": 1}),
     400, "'stream_options'"),
    ("top_logprobs without logprobs", chat(top_logprobs=2), 400,
     "needs 'logprobs': true"),
    ("unknown model", completion(model="gpt-4o"), 404, ("'gpt-4o'", "does not exist")),
    # the body itself
    ("invalid JSON", Call(content=b'{"prompt": "a",'), 400, "not valid JSON"),
    ("body not UTF-8", Call(content=b'{"prompt": "\xff\xfe"}'), 400, "not valid JSON"),
    ("JSON not an object", Call(content=b'["prompt", "a"]'), 400,
     "must be a JSON object"),
    ("JSON null", Call(content=b"null"), 400, "must be a JSON object"),
    ("a 5000-digit number", Call(content=b'{"prompt": "a", "n": ' + b"9" * 5000
                                 + b"}"), 400, "not valid JSON"),
    ("JSON nested too deeply", Call(content=b"[" * 100_000), 400, "nested too deeply"),
    ("deep but valid JSON", Call(content=b'{"prompt": ' + b"[" * 40 + b"]" * 40
                                 + b"}"), 400, "nested too deeply"),
    ("body over 1 MB", Call(content=b'{"prompt": "' + b"a" * (1 << 20) + b'"}'), 413,
     "larger than 1048576 bytes"),
    ("body over 1 MB, chunked", Call(content=lambda: iter([b" " * (1 << 19)] * 3)), 413,
     "larger than 1048576 bytes"),
    # HTTP
    ("PUT on completions", Call(method="PUT"), 405, ("PUT", "use POST")),
    ("DELETE on completions", Call(method="DELETE"), 405, ("DELETE", "use POST")),
    ("PATCH on chat", Call("/v1/chat/completions", method="PATCH"), 405, "use POST"),
    ("GET on completions", Call(method="GET"), 405, "use POST"),
    ("unknown route", Call("/v1/engines", method="GET"), 404, "no route /v1/engines"),
    ("missing API key", Call(body={"prompt": "a"}, key=None), 401, "API key"),
    ("models without API key", Call("/v1/models", method="GET", key=None), 401,
     "API key"),
    ("wrong API key", Call(body={"prompt": "a"}, key="sk-wrong"), 401, "API key"),
]

_CLIENT_ERRORS = {400: openai.BadRequestError, 401: openai.AuthenticationError,
                  404: openai.NotFoundError, 413: openai.APIStatusError,
                  405: openai.APIStatusError}


def _send(base: str, call: Call) -> httpx.Response:
    headers = {}
    if call.key is not None:
        headers["Authorization"] = f"Bearer {call.key}"
    content = call.content() if callable(call.content) else call.content
    if call.body is not None:
        content = json.dumps(call.body).encode()
        headers["Content-Type"] = "application/json"
    return httpx.request(call.method, base + call.path, content=content,
                         headers=headers, timeout=TIMEOUT)


@pytest.mark.parametrize("name, call, status, says", BAD_INPUTS,
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_is_refused(url, name, call, status, says):
    response = _send(url, call)
    error = _check_error_shape(response, status)
    says = (says,) if isinstance(says, str) else says
    for part in says:
        assert part in error["message"], error
    field = re.match(r"'(\w+)'", says[0])
    if field:  # a refusal that starts with a field's name names it as the param
        assert error["param"] == field[1], error
    if status == 405:
        assert response.headers["allow"] == "POST"
    if status == 401:
        assert error["code"] == "invalid_api_key"
    if call.body is not None and call.key is not None and call.path.startswith("/v1"):
        # the same through the client (which has no method for /tokenize)
        client = _client(url, api_key=call.key)
        with pytest.raises(_CLIENT_ERRORS[status]) as caught:
            client.post(call.path.removeprefix("/v1"), body=call.body, cast_to=object)
        assert caught.value.status_code == status
        assert caught.value.body == error


BOUNDS_ACCEPTED = [
    ("top_k", 4096), ("top_k", -1), ("top_k", 0), ("temperature", 2),
    ("temperature", 0),
    ("top_p", 1), ("min_p", 1), ("min_p", 0), ("presence_penalty", -2),
    ("presence_penalty", 2), ("frequency_penalty", -2), ("frequency_penalty", 2),
    ("logprobs", 20), ("logprobs", 0), ("n", 16), ("seed", 2**64 - 1), ("seed", 0),
    ("logit_bias", {"4095": 100, "0": -100}), ("logit_bias", {"5": 100.0}),
    ("logit_bias", {str(i): -1 for i in range(1024)}), ("stop_token_ids", [0, 4095]),
    ("min_tokens", 4), ("stop", [f"s{i}" for i in range(16)]), ("stop", ["x" * 256]),
    ("prompt", ["a"] * 64)]


@pytest.mark.parametrize("field, value", BOUNDS_ACCEPTED,
                         ids=[f"{f}={str(v)[:20]}" for f, v in BOUNDS_ACCEPTED])
def test_each_bound_itself_is_accepted(url, field, value):
    # the other side of the boundary cases above: the last allowed value passes
    max_tokens = 1 if field == "prompt" else 4
    response = _send(url, completion(**{field: value, "max_tokens": max_tokens}))
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("call", [
    completion(prompt=LONG_PROMPT, max_tokens=24),  # prompt + max_tokens = context
    chat(logprobs=True, top_logprobs=20), chat(top_k=4096)],
    ids=["max_tokens fills the context", "top_logprobs 20", "chat top_k 4096"])
def test_each_bound_itself_is_accepted_beyond_sampling(url, call):
    response = _send(url, call)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("call, param", [
    (completion(prompt=LONG_PROMPT, max_tokens=25), "max_tokens"),
    (chat(max_completion_tokens=999), "max_completion_tokens"),
    (chat(max_tokens=999, max_completion_tokens=None), "max_tokens")])
def test_a_prompt_that_leaves_no_room_names_the_field_sent(url, call, param):
    assert _check_error_shape(_send(url, call), 400)["param"] == param


def test_bad_input_classes_are_many_and_distinct():
    names = [b[0] for b in BAD_INPUTS]
    assert len(set(names)) == len(names) >= 40


def test_after_the_bad_inputs_the_server_still_serves(url, client, tiny):
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=10,
                                      temperature=0)
    assert reply.choices[0].text == _expected(tiny, CODE, max_tokens=10).text
    m = _metrics(url)
    assert m["llmcore_kv_blocks_free"] == m["llmcore_kv_blocks_total"]
    assert m["llmcore_requests_running"] == m["llmcore_requests_waiting"] == 0


def test_content_length_is_checked_before_the_body_is_read(url):
    """A 2 MB Content-Length is refused at once, with only 10 bytes sent."""
    status, headers, body = _raw_http(
        url, f"POST /v1/completions HTTP/1.1\nHost: x\nAuthorization: Bearer {KEY}\n"
             "Content-Type: application/json\nContent-Length: 2000000\n",
        b'{"prompt":', wait=30)
    assert status == 413 and "larger than" in json.loads(body)["error"]["message"]


@pytest.mark.parametrize("length", ["abc", "-5", "1e3", "12 34", ""])
def test_a_malformed_content_length_gets_openais_error_shape(url, length):
    """h11 refuses the request before the app sees it; the protocol's 400 is JSON in
    OpenAI's shape (not uvicorn's plain text), and the connection is closed."""
    head = (f"POST /v1/completions HTTP/1.1\nHost: x\nAuthorization: Bearer {KEY}\n"
            f"Content-Type: application/json\nContent-Length: {length}\n")
    status, headers, body = _raw_http(url, head, b'{"prompt": "a"}')
    assert status == 400 and headers["content-type"] == "application/json"
    assert headers["connection"] == "close"
    error = json.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and "Content-Length" in error[
        "message"]
    assert httpx.get(url + "/health", timeout=TIMEOUT).status_code == 200


def test_the_uvicorn_seam_is_where_the_server_expects_it():
    """_HTTPProtocol changes uvicorn's private H11Protocol (no public hook sets a
    deadline for a request head or the body of h11's 400): the names it relies on."""
    import inspect

    from uvicorn.protocols.http.h11_impl import H11Protocol
    for hook, params in (("connection_made", ["self", "transport"]),
                         ("on_response_complete", ["self"]),
                         ("send_400_response", ["self", "msg"])):
        assert list(inspect.signature(getattr(H11Protocol, hook)).parameters) == params
    source = inspect.getsource(H11Protocol)
    for name in ("self.loop", "self.cycle", "self.conn", "self.transport",
                 "self.send_400_response("):
        assert name in source, name


def test_openai_client_raises_authentication_error(url):
    for key in ("sk-wrong", KEY + "x", KEY[:-1]):
        with pytest.raises(openai.AuthenticationError) as caught:
            _client(url, api_key=key).completions.create(model=MODEL, prompt="a",
                                                         max_tokens=1)
        assert caught.value.status_code == 401


# --- 5. Cancellation on hang-up (black box) -------------------------------------------
def _finished(m: dict) -> float:
    return sum(v for k, v in m.items()
               if k.startswith("llmcore_requests_finished_total"))


def test_closing_a_stream_cancels_the_request(url, client):
    before = _metrics(url)
    stream = client.completions.create(model=MODEL, prompt=CODE, max_tokens=900,
                                       temperature=0, stream=True)
    chunks = iter(stream)
    next(chunks), next(chunks)
    m = _metrics(url)
    assert m["llmcore_requests_running"] == 1
    assert m["llmcore_kv_blocks_free"] < m["llmcore_kv_blocks_total"]
    stream.close()
    _wait_for(lambda: _idle(url), "blocks free and nothing running after the close")
    assert _finished(_metrics(url)) == _finished(before)  # cancelled, never finished


def test_hanging_up_a_non_streaming_request_cancels_it(url):
    before = _metrics(url)
    body = json.dumps({"model": MODEL, "prompt": CODE, "max_tokens": 900,
                       "temperature": 0}).encode()
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                  f"{KEY}\r\nContent-Type: application/json\r\nContent-Length: "
                  f"{len(body)}\r\n\r\n".encode() + body)
        _wait_for(lambda: _metrics(url)["llmcore_requests_running"] == 1,
                  "the request is running")
    _wait_for(lambda: _idle(url), "blocks free and nothing running after the hang-up")
    assert _finished(_metrics(url)) == _finished(before)


def test_every_connection_sends_small_writes_at_once(tiny, template):
    # TCP_NODELAY: asyncio sets it only where a socket's proto is IPPROTO_TCP, and the
    # server's listening socket (socket.create_server) has proto 0, so its connections
    # ran Nagle's algorithm: a stream's small writes waited for the client's delayed
    # ACK, and a kept-alive connection saw every first token about 30 ms late
    body = json.dumps({"model": MODEL, "prompt": CODE, "max_tokens": 4,
                       "temperature": 0, "stream": True}).encode()
    with _in_process(tiny, template, num_blocks=64) as server:
        with pytest.raises(RuntimeError, match="started already"):
            server.start()
        host, port = server.url.removeprefix("http://").split(":")
        assert server.socket.proto == 0  # what asyncio's own check looks at
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
            for _ in range(2):  # two requests on one kept-alive connection
                s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                          f"application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                          .encode() + body)
                reply = b""
                while not reply.endswith(b"0\r\n\r\n"):  # the last chunk
                    reply += s.recv(65536)
                assert b"data: [DONE]" in reply
            connections = list(server._uvicorn.server_state.connections)
            assert len(connections) == 1
            sock = connections[0].transport.get_extra_info("socket")
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


# --- 6. Faults, shutdown, timeouts, limits, backpressure (in process) ----------------
def test_a_request_that_fails_in_a_step_fails_alone(tiny, template, monkeypatch):
    running = []  # requests in the engine when the fault struck

    def broken(self, state, piece):
        running.append(len(server.engine.running))
        raise RuntimeError("injected fault")
    monkeypatch.setattr(JsonConstraint, "advance", broken)  # Reply.add calls it
    want = _expected(tiny, CODE, max_tokens=200)
    json_only = {"response_format": {"type": "json_object"}}
    with _in_process(tiny, template, max_batch=4) as server:
        client = _client(server.url)
        stream = client.completions.create(model=MODEL, prompt=CODE, max_tokens=200,
                                           temperature=0, stream=True)
        chunks = iter(stream)
        text = next(chunks).choices[0].text
        with pytest.raises(openai.InternalServerError) as caught:
            client.completions.create(model=MODEL, prompt="x = {", max_tokens=40,
                                      extra_body=json_only)
        assert caught.value.status_code == 500
        assert "injected fault" in caught.value.message
        assert "other requests were not affected" in caught.value.message
        assert running == [2]  # it failed in a step shared with the stream
        text += "".join(c.choices[0].text for c in chunks)
        assert text == want.text  # the stream went on, undisturbed
        with pytest.raises(openai.APIError) as streamed:  # streaming: an error event
            list(client.completions.create(model=MODEL, prompt="x = {", max_tokens=40,
                                           stream=True, extra_body=json_only))
        assert "injected fault" in streamed.value.message
        again = client.completions.create(model=MODEL, prompt=CODE, max_tokens=40,
                                          temperature=0)
        assert again.choices[0].text == _expected(tiny, CODE, max_tokens=40).text
        _wait_for(lambda: _engine_idle(server), "every block back in the pool")
        assert server.worker.alive() and server._in_flight == 0
        finished = _metrics(server.url)
        assert finished['llmcore_requests_finished_total{finish_reason="error"}'] == 2


def test_stopped_engine_answers_503_not_a_hang(tiny, template):
    with _in_process(tiny, template, max_batch=2) as server:
        assert httpx.get(server.url + "/health", timeout=TIMEOUT).status_code == 200
        server.worker.stop()
        health = httpx.get(server.url + "/health", timeout=TIMEOUT)
        _check_error_shape(health, 503)
        assert health.headers["retry-after"] == "1"
        with pytest.raises(openai.InternalServerError) as caught:
            _client(server.url).completions.create(model=MODEL, prompt=CODE,
                                                   max_tokens=4)
        assert caught.value.status_code == 503
        assert "not running" in caught.value.message


def test_a_request_the_engine_cannot_take_fails_alone(tiny, template, monkeypatch):
    """add_request raising something else than ValueError (a bug) fails that request
    with 500; the engine thread goes on."""
    with _in_process(tiny, template, max_batch=2) as server:
        add = server.engine.add_request

        def broken(request):
            if request.params.max_tokens == 3:
                raise RuntimeError("injected fault")
            add(request)
        monkeypatch.setattr(server.engine, "add_request", broken)
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="-",
                               max_retries=0, timeout=20)
        with pytest.raises(openai.InternalServerError) as caught:
            client.completions.create(model=MODEL, prompt=CODE, max_tokens=3)
        assert caught.value.status_code == 500
        assert "injected fault" in caught.value.message
        assert server.worker.alive()
        reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=4,
                                          temperature=0)
        assert reply.choices[0].text == _expected(tiny, CODE, max_tokens=4).text
        assert server._in_flight == 0


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_crashed_engine_loop_fails_requests_instead_of_hanging(tiny, template,
                                                                  monkeypatch):
    """A bug in the engine loop itself ends the engine thread: the request it was
    handling gets 503 (not a hang), /health says so, and so do later requests."""
    with _in_process(tiny, template, max_batch=2) as server:
        def broken(*item):
            raise RuntimeError("injected loop fault")
        monkeypatch.setattr(server.worker, "_handle", broken)
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="-",
                               max_retries=0, timeout=20)
        for _ in range(2):
            with pytest.raises(openai.InternalServerError) as caught:
                client.completions.create(model=MODEL, prompt=CODE, max_tokens=3)
            assert caught.value.status_code == 503
        assert isinstance(server.worker.error, RuntimeError)
        _check_error_shape(httpx.get(server.url + "/health", timeout=TIMEOUT), 503)
        assert server._in_flight == 0


def test_a_body_shorter_than_its_content_length_gets_408(tiny, template):
    with _in_process(tiny, template, max_batch=1, read_timeout=1) as server:
        status, _, body = _raw_http(
            server.url, "POST /v1/completions HTTP/1.1\nHost: x\n"
                        "Content-Type: application/json\nContent-Length: 100\n",
            b'{"prompt":', wait=20)  # 10 of 100 bytes; the socket stays open
        assert status == 408
        assert "did not arrive within 1 s" in json.loads(body)["error"]["message"]
        reply = _client(server.url).completions.create(model=MODEL, prompt=CODE,
                                                       max_tokens=2)
        assert reply.usage.completion_tokens == 2


def test_hanging_up_during_the_body_is_not_a_server_error(tiny, template):
    """A client that leaves before its whole body arrived is no server error: no
    traceback in the log, and the server goes on serving."""
    records = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = records.append
    with _in_process(tiny, template, max_batch=1) as server:
        logging.getLogger("uvicorn.error").addHandler(handler)
        try:
            host, port = server.url.removeprefix("http://").split(":")
            with socket.create_connection((host, int(port)), timeout=20) as s:
                s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                          b"Content-Length: 100\r\n\r\n" + b'{"prompt":')
                _wait_for(lambda: server._uvicorn.server_state.connections,
                          "the server has the connection")
            reply = _client(server.url).completions.create(model=MODEL, prompt=CODE,
                                                           max_tokens=2)
            assert reply.usage.completion_tokens == 2
            assert [r.getMessage() for r in records] == []
        finally:
            logging.getLogger("uvicorn.error").removeHandler(handler)


def test_a_silent_connection_is_closed_after_read_timeout(tiny, template):
    with _in_process(tiny, template, max_batch=1, read_timeout=1) as server:
        host, port = server.url.removeprefix("http://").split(":")
        for sent in (b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"):
            with socket.create_connection((host, int(port)), timeout=20) as s:
                s.sendall(sent)  # nothing, or half a request head
                assert s.recv(1024) == b""  # closed by the server, not by timeout


def test_small_pool_and_limits(tiny, template):
    """An in-process server with 4 KV blocks (64 tokens) and tight Limits."""
    limits = Limits(max_body_bytes=2000, max_n=2, max_stop=1, max_prompts=2)
    with _in_process(tiny, template, max_batch=2, num_blocks=4, limits=limits
                     ) as server:
        client = _client(server.url)
        with pytest.raises(openai.BadRequestError) as caught:
            client.completions.create(model=MODEL, prompt=CODE, max_tokens=100)
        assert "KV blocks" in caught.value.message
        assert "pool has 4" in caught.value.message
        for kwargs, says in [({"n": 3}, "[1, 2]"), ({"stop": ["a", "b"]}, "at most 1"),
                             ({"prompt": ["a", "b", "c"]}, "at most 2")]:
            with pytest.raises(openai.BadRequestError) as caught:
                client.completions.create(**{"model": MODEL, "prompt": CODE,
                                             "max_tokens": 2, **kwargs})
            assert says in caught.value.message
        with pytest.raises(openai.APIStatusError) as caught:
            client.completions.create(model=MODEL, prompt="a" * 3000, max_tokens=2)
        assert caught.value.status_code == 413 and "2000 bytes" in caught.value.message
        reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=40,
                                          temperature=0)  # fits: 6 + 40 tokens
        assert reply.choices[0].text == _expected(tiny, CODE, max_tokens=40).text
        _wait_for(lambda: _engine_idle(server), "every block back in the pool")


def test_hanging_up_while_waiting_for_admission_dequeues(tiny, template):
    """max_batch=1: a long request runs, a second waits; the second hangs up."""
    with _in_process(tiny, template, max_batch=1) as server:
        engine, client = server.engine, _client(server.url)
        # min_tokens: no EOS may end the first stream before the check below
        stream = client.completions.create(model=MODEL, prompt=CODE, max_tokens=900,
                                           stream=True, extra_body={"min_tokens": 900})
        next(iter(stream))
        first = list(engine.running)
        body = json.dumps({"prompt": CODE, "max_tokens": 50}).encode()
        host, port = server.url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as s:
            s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                      + str(len(body)).encode() + b"\r\n\r\n" + body)
            _wait_for(lambda: len(engine.waiting) == 1, "the second request waits")
        _wait_for(lambda: not engine.waiting, "the waiting request is dropped")
        assert list(engine.running) == first  # dropped, not admitted after the first
        stream.close()
        _wait_for(lambda: _engine_idle(server), "every block back in the pool")
        assert server._in_flight == 0
        assert _finished(_metrics(server.url)) == 0  # both cancelled, none finished


def test_backpressure_answers_503_with_retry_after(tiny, template):
    with _in_process(tiny, template, max_batch=1, max_waiting=1) as server:
        client = _client(server.url)
        with pytest.raises(openai.BadRequestError) as caught:  # retrying cannot help
            client.completions.create(model=MODEL, prompt=["a", "b"], n=2, max_tokens=2)
        assert "4 completions" in caught.value.message
        assert "at most 2" in caught.value.message
        # min_tokens: no EOS can end a stream before the third request is refused
        streams = [client.completions.create(model=MODEL, prompt=CODE, max_tokens=900,
                                             stream=True,
                                             extra_body={"min_tokens": 900})
                   for _ in range(2)]
        _wait_for(lambda: server._in_flight == 2, "two requests in flight")
        third = httpx.post(server.url + "/v1/completions", timeout=TIMEOUT,
                           json={"prompt": CODE, "max_tokens": 4})
        error = _check_error_shape(third, 503)
        assert "at capacity" in error["message"]
        assert third.headers["retry-after"] == "1"
        with pytest.raises(openai.InternalServerError):
            client.completions.create(model=MODEL, prompt=CODE, max_tokens=4)
        for s in streams:
            s.close()
        _wait_for(lambda: _engine_idle(server) and server._in_flight == 0,
                  "the closed streams are cancelled")
        assert _finished(_metrics(server.url)) == 0
        reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=3)
        assert reply.usage.completion_tokens == 3


# --- 7. A small load test ------------------------------------------------------------
LOAD_PROMPTS = ["def add(a, b):\n", "import os\n", "class Stack:\n", "for i in range(",
                "# Read a file\n", "def main():\n", "x = [", "if __name__ == "]


def test_32_concurrent_streams_equal_their_serial_answers(url, tiny):
    jobs = [(LOAD_PROMPTS[i % 8], 8 + (i * 13) % 57) for i in range(32)]
    wants = [_expected(tiny, p, max_tokens=m).text for p, m in jobs]

    async def one(client, prompt, max_tokens):
        stream = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0,
            stream=True)
        return "".join([c.choices[0].text async for c in stream])

    async def run():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0,
                                    timeout=TIMEOUT)
        async with client:
            return await asyncio.wait_for(asyncio.gather(
                *(one(client, p, m) for p, m in jobs), return_exceptions=True),
                TEST_LIMIT - 30)
    got = asyncio.run(run())
    errors = [g for g in got if isinstance(g, BaseException)]
    assert errors == []
    assert got == wants
    _wait_for(lambda: _idle(url), "every block back in the pool")


def test_prefix_caching_chunks_and_preemption_behind_the_api(tiny):
    """A server with --prefix-caching, --token-budget and optimistic admission in a
    pool too small for its batch: 12 concurrent requests that share a long prefix get
    the texts they get alone, usage reports the prompt tokens served from the cache,
    and every block comes back."""
    shared = "".join(LOAD_PROMPTS) * 8 + "# task "
    jobs = [(f"{shared}{i}\n", 24 + (i * 7) % 33) for i in range(12)]
    wants = [_expected(tiny, p, max_tokens=m).text for p, m in jobs]

    async def one(client, prompt, max_tokens):
        return await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=max_tokens, temperature=0)

    async def run(base):
        client = openai.AsyncOpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                                    timeout=TIMEOUT)
        async with client:
            return await asyncio.wait_for(asyncio.gather(
                *(one(client, p, m) for p, m in jobs), return_exceptions=True),
                TEST_LIMIT - 40)
    with _server_process("--max-batch", "8", "--prefix-caching", "--token-budget",
                         "64", "--admission", "optimistic", "--num-blocks",
                         "40") as base:
        got = asyncio.run(run(base))
        assert [g for g in got if isinstance(g, BaseException)] == []
        assert [g.choices[0].text for g in got] == wants
        cached = [g.usage.prompt_tokens_details.cached_tokens for g in got]
        assert all(c % 16 == 0 and c < g.usage.prompt_tokens
                   for c, g in zip(cached, got))
        assert sum(cached) > 0  # later requests reuse the prefix's blocks
        metrics = _metrics(base)
        assert metrics["llmcore_prompt_tokens_cached_total"] == sum(cached)
        assert "llmcore_preemptions" in metrics
        _wait_for(lambda: _idle(base), "every block back in the pool")


def test_add_special_tokens_puts_the_tokenizers_bos_before_a_prompt(tmp_path):
    # tiny's files, with a tokenizer.json that adds a BOS as Llama 3's does
    import shutil
    from test_pretrained import BOS_TEMPLATE
    from llmcore.pretrained import bundled_dir
    path = tmp_path / "tiny-bos"
    shutil.copytree(bundled_dir("tiny"), path)
    spec = json.loads((path / "tokenizer.json").read_text())
    (path / "tokenizer.json").write_text(json.dumps({**spec,
                                                     "post_processor": BOS_TEMPLATE}))
    bos = 4095
    with _server_process(model=str(path)) as base:
        client = openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0)

        def tokens(**body):
            return httpx.post(base + "/tokenize", json={"model": str(path), **body},
                              headers={"Authorization": f"Bearer {KEY}"}).json()
        text = tokens(prompt="x = 1", add_special_tokens=False)["tokens"]
        assert tokens(prompt="x = 1")["tokens"] == [bos] + text  # vLLM's default
        usage = [client.completions.create(model=str(path), prompt="x = 1",
                                           max_tokens=1, extra_body=extra).usage
                 for extra in ({}, {"add_special_tokens": False})]
        assert [u.prompt_tokens for u in usage] == [len(text) + 1, len(text)]
        messages = [{"role": "user", "content": "hi"}]
        chat = tokens(messages=messages)["tokens"]  # chat's default: the template's
        assert chat[0] != bos
        assert tokens(messages=messages, add_special_tokens=True)["tokens"] == [
            bos] + chat
        replies = [client.chat.completions.create(model=str(path), messages=messages,
                                                  max_tokens=1, extra_body=extra)
                   for extra in ({}, {"add_special_tokens": True})]
        assert [r.usage.prompt_tokens for r in replies] == [len(chat), len(chat) + 1]
        with pytest.raises(openai.BadRequestError, match="add_special_tokens"):
            client.completions.create(model=str(path), prompt="x", max_tokens=1,
                                      extra_body={"add_special_tokens": "yes"})


def test_continue_final_message_and_echo_on_chat(client, raw, tiny):
    from transformers import PreTrainedTokenizerFast

    from llmcore.pretrained import bundled_dir
    messages = [{"role": "user", "content": "Write a function."},
                {"role": "assistant", "content": "def add(a, b):"}]
    reference = PreTrainedTokenizerFast.from_pretrained(bundled_dir("tiny"))
    rendered = reference.apply_chat_template(messages, tokenize=False,
                                             continue_final_message=True)
    assert rendered.endswith("def add(a, b):")  # no <|im_end|>: the turn goes on
    ids = raw.post("/tokenize", json={"model": MODEL, "messages": messages,
                                      "continue_final_message": True}).json()["tokens"]
    assert tiny[1].decode(ids) == rendered  # the text transformers renders

    def chat(stream=False, **extra):
        return client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=6, temperature=0,
            stream=stream, extra_body={"continue_final_message": True, **extra})
    reply = chat().choices[0].message.content
    assert reply == _expected(tiny, rendered, max_tokens=6).text
    echoed = chat(echo=True).choices[0].message.content
    assert echoed == "def add(a, b):" + reply  # vLLM's echo: the final message first
    streamed = "".join(c.choices[0].delta.content or "" for c in chat(True, echo=True)
                       if c.choices)
    assert streamed == echoed
    asked = client.chat.completions.create(  # echo after a user message: nothing
        model=MODEL, messages=messages[:1], max_tokens=3, temperature=0,
        extra_body={"echo": True})
    plain = client.chat.completions.create(model=MODEL, messages=messages[:1],
                                           max_tokens=3, temperature=0)
    assert asked.choices[0].message.content == plain.choices[0].message.content
    with pytest.raises(openai.BadRequestError, match="add_generation_prompt"):
        chat(add_generation_prompt=True)
    with pytest.raises(openai.BadRequestError, match="final message's text"):
        client.chat.completions.create(
            model=MODEL, messages=[messages[0], {"role": "assistant", "content": ""}],
            max_tokens=3, extra_body={"continue_final_message": True})


def test_prompt_logprobs_and_tokens_as_ids_through_extra_body(client, tiny):
    model, tok = tiny
    ids = tok.encode(CODE)
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids]))[0].float(), dim=-1)
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=1,
                                      temperature=0, extra_body={"prompt_logprobs": 2})
    got = reply.choices[0].prompt_logprobs  # vLLM's field, on each choice
    assert len(got) == len(ids) and got[0] is None
    for i in range(1, len(ids)):
        row = logp[i - 1]
        entry = got[i][str(ids[i])]
        assert math.isclose(entry["logprob"], row[ids[i]].item(), abs_tol=1e-4)
        assert entry["rank"] == int((row > row[ids[i]]).sum()) + 1
        assert entry["decoded_token"] == tok.decode([ids[i]])
        best = row.topk(2).indices.tolist()
        assert set(got[i]) == {str(ids[i])} | {str(t) for t in best}
        assert [got[i][str(t)]["rank"] for t in best] == [1, 2]
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=1,
        extra_body={"prompt_logprobs": 0})
    assert len(chat.prompt_logprobs) == chat.usage.prompt_tokens  # chat: top level
    assert all(len(e) == 1 for e in chat.prompt_logprobs[1:])
    with pytest.raises(openai.BadRequestError, match="prompt_logprobs"):
        client.completions.create(model=MODEL, prompt=CODE, max_tokens=1, stream=True,
                                  extra_body={"prompt_logprobs": 1})
    # return_tokens_as_token_ids: "token_id:<id>" for every token of the logprobs
    kw = dict(model=MODEL, prompt=CODE, max_tokens=4, temperature=0, logprobs=1)
    named = client.completions.create(**kw).choices[0].logprobs
    as_ids = client.completions.create(
        **kw, extra_body={"return_tokens_as_token_ids": True}).choices[0].logprobs
    assert [tok.decode([int(t.removeprefix("token_id:"))]) for t in as_ids.tokens] \
        == named.tokens
    assert as_ids.text_offset == named.text_offset  # offsets still count the text
    assert all(k.startswith("token_id:") for top in as_ids.top_logprobs for k in top)
    lp = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=3,
        temperature=0, logprobs=True, top_logprobs=1,
        extra_body={"return_tokens_as_token_ids": True}).choices[0].logprobs.content
    assert all(e.token.startswith("token_id:") and bytes(e.bytes) == e.token.encode()
               for e in lp)


@pytest.mark.parametrize("extra, message", [
    ({"structured_outputs": {"regex": "(a"}}, "structured_outputs: pattern '(a'"),
    ({"guided_regex": r"(a)\1"}, "backreference"),
    ({"guided_regex": ["a"]}, "regex must be a string"),
    ({"guided_grammar": "root ::= 'a'"}, "grammar constraint is not supported"),
    ({"structured_outputs": {"choice": ["a"], "json_object": True}}, "takes one of"),
    ({"structured_outputs": {"choise": ["a"]}}, "'choise' is not one"),
    ({"guided_choice": []}, "non-empty list"),
    ({"guided_json": "{not json"}, "JSON Schema"),
    ({"guided_json": {"type": "string", "format": "ipv9"}}, "guided_json: "),
    ({"guided_choice": ["a"], "response_format": {"type": "json_object"}},
     "both ask for an output format"),
])
def test_structured_outputs_refusals_name_the_field(client, extra, message):
    with pytest.raises(openai.BadRequestError, match=re.escape(message)):
        client.chat.completions.create(model=MODEL, max_tokens=8, extra_body=extra,
                                       messages=[{"role": "user", "content": "hi"}])


def test_structured_outputs_choice_and_regex_on_the_tiny_model(client):
    reply = client.completions.create(model=MODEL, prompt=CODE, max_tokens=8,
                                      temperature=0,
                                      extra_body={"guided_choice": ["True", "False"]})
    assert reply.choices[0].text in ("True", "False")
    assert reply.choices[0].finish_reason == "stop"
    pattern = r"[a-z_]+\([a-z, ]*\)"  # a call, written by a model trained on code
    for stream in (False, True):
        chunks = client.completions.create(
            model=MODEL, prompt=CODE, max_tokens=24, temperature=0, stream=stream,
            extra_body={"structured_outputs": {"regex": pattern}})
        text = chunks.choices[0].text if not stream else "".join(
            c.choices[0].text for c in chunks if c.choices)
        assert re.fullmatch(pattern, text), text  # the budget keeps it closable


def test_a_strict_tool_under_auto_leaves_text_free_and_refuses_a_format(client):
    weather = {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}},
        "required": ["city"], "additionalProperties": False}}
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]

    def ask(strict, **extra):
        return client.chat.completions.create(
            model=MODEL, messages=messages, max_tokens=12, temperature=0,
            tools=[{"type": "function", "function": {**weather, "strict": strict}}],
            tool_choice="auto", **extra)
    free, held = ask(False), ask(True)  # held: calls would fit get_weather
    assert held.choices[0].message.content == free.choices[0].message.content
    assert held.choices[0].finish_reason == free.choices[0].finish_reason
    with pytest.raises(openai.BadRequestError, match="strict tool"):
        ask(True, response_format={"type": "json_object"})


# --- /v1/responses: OpenAI's Responses API over the chat path --------------------------
def test_responses_create_is_the_chat_request_it_amounts_to(client):
    """input + instructions give the text chat gives system + user, greedy; the
    stream's deltas join to it, its events are numbered, and its last event carries
    the whole response."""
    ask = dict(model=MODEL, temperature=0, max_output_tokens=12)
    reply = client.responses.create(input=CODE, instructions="Write Python.", **ask)
    chat = client.chat.completions.create(
        model=MODEL, temperature=0, max_completion_tokens=12, messages=[
            {"role": "system", "content": "Write Python."},
            {"role": "user", "content": CODE}]).choices[0]
    assert reply.object == "response" and reply.id.startswith("resp_")
    assert reply.output_text == chat.message.content
    assert chat.finish_reason == "length" and reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"
    assert reply.usage.output_tokens == 12 and reply.instructions == "Write Python."
    assert reply.usage.total_tokens == reply.usage.input_tokens + 12
    events = list(client.responses.create(input=CODE, instructions="Write Python.",
                                          stream=True, **ask))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.incomplete"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == reply.output_text == events[-1].response.output_text
    done = client.responses.create(input=CODE, extra_body={"stop": ["\n"]},
                                   **{**ask, "max_output_tokens": 60})  # vLLM's
    assert done.status == "completed" and "\n" not in done.output_text


def test_responses_parse_returns_a_pydantic_object(client):
    class City(pydantic.BaseModel):
        name: str
        unit: Literal["celsius", "fahrenheit"]

    parsed = client.responses.parse(model=MODEL, input="Weather?", text_format=City,
                                    max_output_tokens=80, temperature=0.7,
                                    extra_body={"seed": 3})
    assert isinstance(parsed.output_parsed, City)
    assert parsed.text.format.type == "json_schema"


def test_responses_function_calls_round_trip_as_chat_would(client):
    """A function_call item per call; its output items sent back with a
    function_call_output give the prompt chat builds from the same turns (the same
    greedy reply)."""
    params = WEATHER_TOOL["function"]["parameters"]
    tools = [{"type": "function", "name": "get_weather", "parameters": params,
              "strict": True}]
    ask = "What is the weather in Paris?"
    first = client.responses.create(model=MODEL, input=ask, tools=tools,
                                    tool_choice="required", max_output_tokens=90,
                                    temperature=0)
    call = first.output[-1]
    assert all(o.type == "function_call" for o in first.output)
    assert call.name == "get_weather"
    jsonschema.validate(json.loads(call.arguments), params)
    items = [{"role": "user", "content": ask}, *[o.model_dump(exclude_none=True)
                                                for o in first.output],
             {"type": "function_call_output", "call_id": call.call_id,
              "output": "22 C"}]
    second = client.responses.create(model=MODEL, input=items, tools=tools,
                                     tool_choice="none", max_output_tokens=10,
                                     temperature=0)
    chat = client.chat.completions.create(
        model=MODEL, max_completion_tokens=10, temperature=0, tool_choice="none",
        tools=[{"type": "function", "function": {"name": "get_weather",
                                                 "parameters": params,
                                                 "strict": True}}],
        messages=[{"role": "user", "content": ask}, {
            "role": "assistant", "tool_calls": [{
                "id": c.call_id, "type": "function", "function": {
                    "name": c.name, "arguments": c.arguments}} for c in first.output]},
            {"role": "tool", "tool_call_id": call.call_id, "content": "22 C"}])
    assert second.output_text == chat.choices[0].message.content
    streamed = list(client.responses.create(model=MODEL, input=ask, tools=tools,
                                            tool_choice="required", stream=True,
                                            max_output_tokens=90, temperature=0))
    kinds = [e.type for e in streamed]
    assert "response.function_call_arguments.done" in kinds
    assert streamed[-1].type == "response.completed"
    assert streamed[-1].response.output[-1].arguments == call.arguments


def test_responses_logprobs_through_include(client):
    reply = client.responses.create(model=MODEL, input=CODE, max_output_tokens=4,
                                    temperature=0, top_logprobs=2,
                                    include=["message.output_text.logprobs"])
    logprobs = reply.output[0].content[0].logprobs
    assert len(logprobs) == 4 and all(len(lp.top_logprobs) == 2 for lp in logprobs)
    assert "".join(lp.token for lp in logprobs) == reply.output_text
    assert all(lp.top_logprobs[0].logprob == lp.logprob for lp in logprobs)  # greedy


@pytest.mark.parametrize("fields, param, says", [
    ({"previous_response_id": "resp_1"}, "previous_response_id", "stateless"),
    ({"conversation": "conv_1"}, "conversation", "stateless"),
    ({"background": True}, "background", "stateless"),
    ({"truncation": "auto"}, "truncation", "disabled"),
    ({"reasoning": {"effort": "high"}}, "reasoning", "no reasoning"),
    ({"max_output_tokens": 0}, "max_output_tokens", "'max_output_tokens' must be"),
    ({"max_output_tokens": 10**6}, "max_output_tokens", "lower max_output_tokens"),
    ({"input": []}, "input", "non-empty list"),
    ({"input": [{"role": "user", "content": [{"type": "input_image",
                                              "image_url": "x"}]}]}, "input",
     "text only"),
    ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input", "stateless"),
    ({"input": [{"type": "function_call", "name": "f"}]}, "input", "call_id"),
    ({"tools": [{"type": "web_search"}]}, "tools", "only function tools"),
    ({"tools": [{"type": "function", "name": "a b"}]}, "tools", "tools[0].name"),
    ({"tool_choice": {"type": "allowed_tools"}}, "tool_choice", "\"required\""),
    ({"text": {"format": {"type": "json_schema", "name": "e", "schema": {
        "type": "string", "format": "nonsense"}}}}, "text.format", "text.format"),
    ({"include": ["reasoning.encrypted_content"]}, "include", "logprobs"),
    ({"messages": []}, "messages", "unrecognized"),
])
def test_responses_refusals_name_the_field_as_sent(raw, fields, param, says):
    answer = raw.post("/v1/responses", json={"model": MODEL, "input": "hi", **fields})
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == param
    assert says in error["message"], error["message"]


def test_no_response_is_stored(client, raw):
    with pytest.raises(openai.NotFoundError, match="stateless"):
        client.responses.retrieve("resp_0")
    assert raw.delete("/v1/responses/resp_0").status_code == 404
    reply = client.responses.create(model=MODEL, input="x", max_output_tokens=1,
                                    store=True)
    assert reply.store is False  # accepted with no effect, and the reply says so


def test_constrained_json_is_compact_by_default(client, tiny, template):
    """The server's default: one space after ":" and ",", no other whitespace (the
    grammar XGrammar builds with any_whitespace=False); json_whitespace="any" gives
    the free form back."""
    ask = dict(model=MODEL, messages=[{"role": "user", "content": "The weather?"}],
               max_completion_tokens=80, temperature=1.0, seed=7)
    for fmt in (_schema_format(WEATHER)["response_format"], {"type": "json_object"}):
        text = client.chat.completions.create(response_format=fmt,
                                              **ask).choices[0].message.content
        value = json.loads(text)
        assert text == json.dumps(value, ensure_ascii=False), text  # ", " and ": "
    with _in_process(tiny, template, json_whitespace="any") as free:
        loose = _client(free.url)
        texts = [loose.chat.completions.create(
            response_format=_schema_format(WEATHER)["response_format"],
            **{**ask, "seed": seed}).choices[0].message.content for seed in range(4)]
    assert any(t != json.dumps(json.loads(t), ensure_ascii=False) for t in texts)
    with pytest.raises(ValueError, match="json_whitespace"):
        OpenAIServer(*tiny, json_whitespace="tabs")
