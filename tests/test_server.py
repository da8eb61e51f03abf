"""Tests for llmcore.server: the OpenAI-style completions endpoint over the engine."""
import json
import socket
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from llmcore.generate import generate
from llmcore.pretrained import load
from llmcore.sampling import SamplingParams
from llmcore.server import CompletionServer, parse_completion_request


@pytest.fixture(scope="module")
def served():
    model, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    with CompletionServer(model, tokenizer, num_blocks=128, max_batch=4, model_name="tiny") as server:
        yield server, model, tokenizer


def _post(url, body, raw=None):
    data = raw if raw is not None else json.dumps(body).encode()
    request = urllib.request.Request(url + "/v1/completions", data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.headers.get("Content-Type"), response.read().decode()


def _expected(model, tokenizer, prompt, **params):
    return generate(model, tokenizer, prompt, SamplingParams(temperature=0.0, **params))


def test_json_completion_matches_generate(served):
    server, model, tokenizer = served
    status, kind, text = _post(server.url, {"prompt": "def add(a, b):\n", "max_tokens": 24, "temperature": 0})
    answer = json.loads(text)
    expected = _expected(model, tokenizer, "def add(a, b):\n", max_tokens=24)
    assert status == 200 and kind == "application/json" and answer["object"] == "text_completion"
    assert answer["choices"][0]["text"] == expected.text
    assert answer["choices"][0]["finish_reason"] == expected.finish_reason
    assert answer["usage"] == {"prompt_tokens": expected.usage.prompt_tokens,
                               "completion_tokens": expected.usage.completion_tokens,
                               "total_tokens": expected.usage.prompt_tokens + expected.usage.completion_tokens}


def test_streamed_events_add_up_to_the_completion(served):
    server, model, tokenizer = served
    body = {"prompt": "import os\n", "max_tokens": 30, "temperature": 0, "stream": True}
    status, kind, text = _post(server.url, body)
    events = [e for e in text.split("\n\n") if e]
    assert status == 200 and kind == "text/event-stream" and events[-1] == "data: [DONE]"
    chunks = [json.loads(e.removeprefix("data: ")) for e in events[:-1]]
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])
    assert chunks[-1]["choices"][0]["finish_reason"] in ("length", "stop") and "usage" in chunks[-1]
    assert "".join(c["choices"][0]["text"] for c in chunks) == _expected(model, tokenizer, "import os\n",
                                                                          max_tokens=30).text


def test_stop_strings_cut_the_text_and_free_the_request(served):
    server, model, tokenizer = served
    expected = _expected(model, tokenizer, "class Point:\n", max_tokens=60)
    stop = expected.text[10:14]  # a string the greedy text is known to contain
    _, _, text = _post(server.url, {"prompt": "class Point:\n", "max_tokens": 60, "temperature": 0, "stop": stop})
    answer = json.loads(text)
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["choices"][0]["text"] == _expected(model, tokenizer, "class Point:\n", max_tokens=60,
                                                     stop=[stop]).text
    assert not server.busy()  # the cut request was cancelled before the answer was sent
    assert server.engine.cache.allocator.num_free == server.engine.cache.allocator.num_blocks


def test_concurrent_clients_share_steps_and_get_their_own_text(served):
    server, model, tokenizer = served
    prompts = ["import sys\n", "def main():\n", "x = [", "for i in range(", "class A:\n", "# a comment"]
    before = len(server.engine.batch_sizes)
    with ThreadPoolExecutor(len(prompts)) as pool:
        texts = list(pool.map(lambda p: json.loads(_post(server.url, {"prompt": p, "max_tokens": 20,
                                                                       "temperature": 0})[2])["choices"][0]["text"],
                              prompts))
    assert texts == [_expected(model, tokenizer, p, max_tokens=20).text for p in prompts]
    assert max(server.engine.batch_sizes[before:]) > 1


@pytest.mark.parametrize("body, message", [
    (None, "JSON object"),
    ({"max_tokens": 3}, '"prompt"'),
    ({"prompt": "x", "temperature": -1}, "temperature"),
    ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ({"prompt": "x", "stop": 5}, '"stop"'),
    ({"prompt": "x", "stream": "yes"}, '"stream"'),
    ({"prompt": "x", "logprobs": 3}, "unsupported field"),
    ({"prompt": [1, 2, 99999]}, "token ids must be in"),
    ({"prompt": "x", "max_tokens": 5000}, "positions"),
])
def test_bad_requests_get_400_and_a_reason(served, body, message):
    server = served[0]
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(server.url, body)
    assert err.value.code == 400
    assert message in json.loads(err.value.read())["error"]["message"]


def test_invalid_json_and_unknown_routes(served):
    server = served[0]
    with pytest.raises(urllib.error.HTTPError) as err:
        _post(server.url, None, raw=b"{not json")
    assert err.value.code == 400
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(server.url + "/v1/chat", timeout=10)
    assert err.value.code == 404
    with urllib.request.urlopen(server.url + "/v1/models", timeout=10) as response:
        assert json.loads(response.read())["data"][0]["id"] == "tiny"


def test_a_client_that_hangs_up_frees_its_request(served):
    server = served[0]
    host, port = server.httpd.server_address[:2]
    before = len(server.engine.batch_sizes)
    body = json.dumps({"prompt": "import os\n", "max_tokens": 900, "temperature": 0, "stream": True}).encode()
    with socket.create_connection((host, port), timeout=10) as conn:
        conn.sendall(b"POST /v1/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: "
                     + str(len(body)).encode() + b"\r\n\r\n" + body)
        conn.recv(64)  # the response has started
    deadline = time.monotonic() + 30
    while server.busy() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not server.busy()
    assert len(server.engine.batch_sizes) - before < 899  # cancelled, not run to its 900 tokens
    assert server.engine.cache.allocator.num_free == server.engine.cache.allocator.num_blocks


def test_cancel_frees_a_request_at_once(served):
    server = served[0]
    request_id, _ = server.submit([1, 2, 3], SamplingParams(temperature=0.0, max_tokens=900))
    server.cancel(request_id)
    assert not server.busy()
    assert server.engine.cache.allocator.num_free == server.engine.cache.allocator.num_blocks


def test_json_object_responses_always_parse(served):
    server = served[0]
    for seed in range(3):
        _, _, text = _post(server.url, {"prompt": "config = json.loads('", "max_tokens": 80, "temperature": 0.9,
                                        "seed": seed, "response_format": {"type": "json_object"}})
        answer = json.loads(text)
        if answer["choices"][0]["finish_reason"] == "stop":
            assert isinstance(json.loads(answer["choices"][0]["text"]), dict)


def test_parse_completion_request_defaults():
    prompt, params, stream, json_only = parse_completion_request({"prompt": "hi"})
    assert prompt == "hi" and not stream and not json_only
    assert parse_completion_request({"prompt": "hi", "response_format": {"type": "json_object"}})[3]
    with pytest.raises(ValueError, match="response_format"):
        parse_completion_request({"prompt": "hi", "response_format": {"type": "xml"}})
    assert params.max_tokens == 16 and params.temperature == 1.0 and params.stop_token_ids == []
    params = parse_completion_request({"prompt": "hi", "min_tokens": 2, "stop_token_ids": [7],
                                       "include_stop_str_in_output": True})[1]
    assert (params.min_tokens, params.stop_token_ids, params.include_stop_str_in_output) == (2, [7], True)
