"""Soak test: the OpenAI server over thousands of mixed requests, judged the way a
long-running server is judged (does its memory stay flat, does every KV block come back,
does anything fail that should not).

Run: .venv/bin/python bench/soak.py [--requests 5000] [--every 1000] [--concurrency 8]
         [--seed 0] [--num-blocks 512] [--max-batch 32] [--threads N] [--timeout 60]
         [--deadline 3600] [--no-trace-memory] [--json FILE]

The server is a black box: `python -m llmcore.server --model tiny --trace-memory` in its
own process on a free port of 127.0.0.1 (killed at the end, on an error, on SIGTERM and,
through PR_SET_PDEATHSIG, when this process dies), driven only through HTTP with the
official `openai` client, /metrics and /proc/<pid>/status. Nothing here imports llmcore,
so the engine behind the server can change without touching this file.

Load: a fixed, seeded list of --requests requests (the same on every run for a seed),
sent by --concurrency asyncio workers through one `openai.AsyncOpenAI` client
(max_retries=0, --timeout on every call, each request also bounded as a whole). The mix,
in shares of 100: plain completions 20 (greedy or seeded sampling, some with a stop
string or echo), streamed completions 15, chat 12, streamed chat 12, n = 2..4 choices 8
(half streamed), JSON mode (response_format json_object) 4, a JSON Schema
(response_format json_schema, sampled, half streamed) 4, tool calls (chat, tool_choice
"required" or a named function) 3, logprobs 8 (completion logprobs 0..5, some with echo;
chat logprobs with top_logprobs 0..5; half streamed), cancellations 8 (a stream of
64..128 tokens closed after 1..3 chunks), bad inputs 9 (a table of requests the server
must refuse with 400 and a message naming the field). Outputs are short (max_tokens
1..16; 48 for JSON mode, a schema and tool calls, so that the value can close).

Every reply is checked: the number of choices, each choice's finish reason, the usage,
logprobs where asked for, JSON that parses where the JSON-mode reply says "stop" (and
fits the schema for a json_schema reply), tool calls whose arguments fit the function's
parameters, a stream that ends with a finish reason for every choice. A bad input counts
as expected only if it got a 400 whose message says what the table says; anything else
(an exception, a wrong status, a reply that fails its checks, a traceback in the
server's log, a server that died) is an unexpected error.

Samples: the requests run in segments of --every (1000); after each segment the driver
waits (bounded) until the server is idle (no request running or waiting, every KV block
free) and reads the server's resident set size (VmRSS of /proc/<pid>/status) and
`llmcore_python_heap_bytes` (tracemalloc's traced size, from --trace-memory). Growth is
reported between the end of the first segment and the end of the last: the first
segment is the warm-up (lazy imports, the JSON constraint's vocabulary walk, allocator
pools, and the first write to each page of the KV pool: torch.zeros hands out untouched
zero pages, and the FIFO block allocator walks the whole pool, so the pool becomes
resident block by block; --num-blocks 512 (24 MiB on tiny) is walked several times
within the first thousand requests). Target from issue 27: RSS growth <= 5%, 0 errors,
every block back. The exit status is 1 on an unexpected error or a block not back; the
RSS target is printed, met or missed.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import httpx2  # the openai client's HTTP package
import jsonschema
import openai

ROOT = Path(__file__).resolve().parents[1]
MODEL = "tiny"
OPENINGS = [                       # chapter 9's code openings
    "import os\n", "def main():\n", "class Point:\n", "# Copyright",
    "for i in range(10):\n", "try:\n    import", "if __name__", "x = [", "def test_",
    "from . import", "with open(", "return ",
]
QUESTIONS = ["Add two numbers.", "Write a function that reverses a list.",
             "What does `yield` do?", "Sort a dict by value.", "hi"]
SYSTEM = "You write short Python functions."
FINISH = {"stop", "length", "tool_calls"}
SCHEMA = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 12},
    "kind": {"enum": ["function", "class", "module"]},
    "lines": {"type": "integer", "minimum": 1, "maximum": 500}},
    "required": ["name", "kind"], "additionalProperties": False}
TOOL = {"type": "function", "function": {
    "name": "run_tests", "description": "Run a test file",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "verbose": {"type": "boolean"}},
        "required": ["path"], "additionalProperties": False}}}
CONTEXT = 1024                     # tiny's positions

# (name, endpoint, body, what the 400's message must say): each refused by the server's
# validation before anything reaches the engine (tests/test_server.py's BAD_INPUTS has
# the full table).
BAD_INPUTS = [
    ("max_tokens 0", "completions", {"max_tokens": 0}, "'max_tokens'"),
    ("temperature above 2", "completions", {"temperature": 2.5}, "'temperature'"),
    ("top_p 0", "completions", {"top_p": 0}, "'top_p'"),
    ("n 17", "completions", {"n": 17}, "'n'"),
    ("logprobs 21", "completions", {"logprobs": 21}, "'logprobs'"),
    ("seed -1", "completions", {"seed": -1}, "'seed'"),
    ("empty prompt", "completions", {"prompt": ""}, "empty"),
    ("token id beyond the vocabulary", "completions", {"prompt": [1, 4096]},
     "[0, 4096)"),
    ("prompt + max_tokens > context", "completions",
     {"prompt": [11] * 1000, "max_tokens": 100}, "1024"),
    ("empty stop string", "completions", {"stop": [""]}, "'stop'"),
    ("unknown field", "completions", {"max_token": 5}, "'max_token'"),
    ("json_schema without a name", "completions",
     {"response_format": {"type": "json_schema", "json_schema": {}}},
     '"name": a string'),
    ("json_schema with allOf", "chat",
     {"response_format": {"type": "json_schema", "json_schema": {
         "name": "x", "schema": {"allOf": [{"type": "string"}]}}}}, "'allOf'"),
    ("tool_choice required without tools", "chat", {"tool_choice": "required"},
     "needs 'tools'"),
    ("streamed, min_tokens > max_tokens", "completions",
     {"stream": True, "min_tokens": 10, "max_tokens": 4}, "'min_tokens'"),
    ("empty messages", "chat", {"messages": []}, "'messages'"),
    ("message without content", "chat", {"messages": [{"role": "user"}]},
     "messages[0].content"),
    ("top_logprobs without logprobs", "chat", {"top_logprobs": 2},
     "needs 'logprobs': true"),
    ("streamed, max_completion_tokens 0", "chat",
     {"stream": True, "max_completion_tokens": 0}, "'max_completion_tokens'"),
]

# kind: share of 100
MIX = {"completion": 17, "completion-stream": 15, "chat": 12, "chat-stream": 12,
       "n": 8, "json": 4, "schema": 4, "tools": 3, "logprobs": 8, "cancel": 8, "bad": 9}


@dataclass
class Spec:
    """One request of the plan."""
    index: int
    kind: str
    endpoint: str                  # "completions" or "chat"
    body: dict                     # keyword arguments of create() (extra_body inside)
    expect: str | None = None      # a bad input: what the 400's message must say
    cancel_after: int | None = None  # a cancellation: chunks read before closing


@dataclass
class Outcome:
    index: int
    kind: str
    status: str                    # ok, cancelled, rejected (expected 400), error
    detail: str = ""


def _sampling(rng: random.Random) -> dict:
    if rng.random() < 0.5:
        return {"temperature": 0}
    return {"temperature": rng.choice([0.7, 1.0]), "seed": rng.randrange(2**32)}


def _messages(rng: random.Random) -> list[dict]:
    messages = [{"role": "user", "content": rng.choice(QUESTIONS)}]
    if rng.random() < 0.5:
        messages.insert(0, {"role": "system", "content": SYSTEM})
    return messages


def _request(rng: random.Random, endpoint: str, max_tokens: int) -> dict:
    if endpoint == "chat":
        return {"messages": _messages(rng), "max_completion_tokens": max_tokens}
    return {"prompt": rng.choice(OPENINGS), "max_tokens": max_tokens}


def plan(n: int, seed: int = 0) -> list[Spec]:
    """n requests, the same list for the same (n, seed); every segment of the run draws
    from the same mix."""
    rng = random.Random(seed)
    kinds, weights = zip(*MIX.items())
    specs = []
    for i in range(n):
        kind = rng.choices(kinds, weights)[0]
        endpoint = "chat" if kind.startswith("chat") or kind == "tools" or (
            kind in ("n", "json", "schema", "logprobs", "cancel")
            and rng.random() < 0.5) else "completions"
        body = {"model": MODEL, **_request(rng, endpoint, rng.randint(1, 16)),
                **_sampling(rng)}
        spec = Spec(i, kind, endpoint, body)
        if kind.endswith("-stream"):
            body["stream"] = True
            if rng.random() < 0.5:
                body["stream_options"] = {"include_usage": True}
        elif kind == "completion":
            if rng.random() < 0.2:
                body["stop"] = ["\n\n"]
            if rng.random() < 0.1:
                body["echo"] = True
        elif kind == "n":
            body.update(n=rng.randint(2, 4), temperature=0.8,
                        seed=rng.randrange(2**32), stream=rng.random() < 0.5)
        elif kind == "json":
            body.update(temperature=0, extra_body={
                "response_format": {"type": "json_object"}})
            body["max_tokens" if endpoint == "completions" else
                 "max_completion_tokens"] = 48
            if endpoint == "completions":
                body["prompt"] = rng.choice(["x = {", "config = ", "data = {\n"])
        elif kind == "schema":
            body.update(temperature=1.0, seed=rng.randrange(2**32),
                        stream=rng.random() < 0.5, extra_body={"response_format": {
                            "type": "json_schema", "json_schema": {
                                "name": "symbol", "schema": SCHEMA}}})
            body["max_tokens" if endpoint == "completions" else
                 "max_completion_tokens"] = 48
        elif kind == "tools":
            named = {"type": "function", "function": {"name": "run_tests"}}
            body.update(tools=[TOOL], tool_choice=rng.choice(["required", named]),
                        max_completion_tokens=48)
        elif kind == "logprobs":
            top = rng.randint(0, 5)
            if endpoint == "chat":
                body.update(logprobs=True, top_logprobs=top)
            else:
                body["logprobs"] = top
                if rng.random() < 0.2:
                    body["echo"] = True
            body["stream"] = rng.random() < 0.5
        elif kind == "cancel":
            body["stream"] = True
            body["max_tokens" if endpoint == "completions" else
                 "max_completion_tokens"] = rng.randint(64, 128)
            spec.cancel_after = rng.randint(1, 3)
        elif kind == "bad":
            name, spec.endpoint, bad, spec.expect = rng.choice(BAD_INPUTS)
            base = _request(rng, spec.endpoint, 4)
            spec.body = {"model": MODEL, **base}
            for key, value in bad.items():  # fields create() does not know go extra
                if key in ("prompt", "messages", "stream", "max_tokens", "n",
                           "max_completion_tokens", "temperature", "top_p", "seed",
                           "logprobs", "top_logprobs", "stop"):
                    spec.body[key] = value
                else:
                    spec.body.setdefault("extra_body", {})[key] = value
        if not body.get("stream"):
            body.pop("stream", None)
        specs.append(spec)
    return specs


# -- one request ----------------------------------------------------------------------
def _check_choices(spec: Spec, finishes: dict, texts: dict) -> str | None:
    """What is wrong with a reply's choices (None: nothing)."""
    n = spec.body.get("n", 1)
    if sorted(finishes) != list(range(n)):
        return f"choices {sorted(finishes)}, expected {n}"
    bad = {i: f for i, f in finishes.items() if f not in FINISH}
    if bad:
        return f"finish reasons {bad}"
    if spec.kind in ("json", "schema"):
        for i, finish in finishes.items():
            if finish == "stop":
                try:
                    value = json.loads(texts[i])
                    if spec.kind == "schema":
                        jsonschema.validate(value, SCHEMA)
                    elif not isinstance(value, dict):
                        return f"JSON mode gave {texts[i]!r}"
                except (ValueError, jsonschema.ValidationError):
                    return f"{spec.kind} gave {texts[i]!r}"
    return None


def _check_calls(reply) -> str | None:
    """What is wrong with a tool-call reply (None: nothing): tool_choice forced a
    call, so a reply that did not run out of tokens holds one whose arguments fit."""
    for choice in reply.choices:
        calls = choice.message.tool_calls or []
        if choice.finish_reason == "length":
            continue
        if not calls:
            return f"no tool call: {choice.message.content!r}"
        for call in calls:
            try:
                jsonschema.validate(json.loads(call.function.arguments),
                                    TOOL["function"]["parameters"])
            except (ValueError, jsonschema.ValidationError):
                return f"tool call arguments {call.function.arguments!r}"
            if call.function.name != "run_tests":
                return f"a call of {call.function.name!r}"
    return None


def _max_tokens(spec: Spec) -> int:
    return spec.body.get("max_tokens") or spec.body.get("max_completion_tokens")


async def _plain(api: openai.AsyncOpenAI, spec: Spec, timeout: float) -> Outcome:
    create = (api.chat.completions.create if spec.endpoint == "chat"
              else api.completions.create)
    reply = await create(**spec.body, timeout=timeout)
    chat = spec.endpoint == "chat"
    finishes = {c.index: c.finish_reason for c in reply.choices}
    texts = {c.index: (c.message.content if chat else c.text) or ""
             for c in reply.choices}
    problem = _check_choices(spec, finishes, texts)
    if problem is None and spec.kind == "tools":
        problem = _check_calls(reply)
    n = spec.body.get("n", 1)
    if problem is None and not (
            reply.usage is not None
            and 0 <= reply.usage.completion_tokens <= n * _max_tokens(spec)):
        problem = f"usage {reply.usage}"
    if problem is None and ("logprobs" in spec.body):
        for choice in reply.choices:
            if choice.logprobs is None:
                problem = f"choice {choice.index} has no logprobs"
    if problem:
        return Outcome(spec.index, spec.kind, "error", problem)
    return Outcome(spec.index, spec.kind, "ok")


async def _streamed(api: openai.AsyncOpenAI, spec: Spec, timeout: float) -> Outcome:
    create = (api.chat.completions.create if spec.endpoint == "chat"
              else api.completions.create)
    chat = spec.endpoint == "chat"
    stream = await create(**spec.body, timeout=timeout)
    finishes, texts, chunks, usage = {}, {}, 0, None
    try:
        async for chunk in stream:
            chunks += 1
            if chunk.usage is not None:
                usage = chunk.usage
            for c in chunk.choices:
                text = (c.delta.content if chat else c.text) or ""
                texts[c.index] = texts.get(c.index, "") + text
                if c.finish_reason is not None:
                    finishes[c.index] = c.finish_reason
            if spec.cancel_after is not None and chunks >= spec.cancel_after \
                    and not finishes:
                await stream.close()  # hang up: the server must cancel and free
                return Outcome(spec.index, spec.kind, "cancelled")
    finally:
        await stream.close()
    problem = _check_choices(spec, finishes, texts)
    if problem is None and (spec.body.get("stream_options") or {}).get(
            "include_usage") and usage is None:
        problem = "no usage chunk"
    if problem:
        return Outcome(spec.index, spec.kind, "error", problem)
    return Outcome(spec.index, spec.kind, "ok")


async def one(api: openai.AsyncOpenAI, spec: Spec, timeout: float) -> Outcome:
    """Send one request, check what came back; never raises (but for cancellation)."""
    try:
        run = _streamed if spec.body.get("stream") else _plain
        outcome = await asyncio.wait_for(run(api, spec, timeout), 2 * timeout)
    except openai.APIStatusError as err:
        if spec.expect is not None and err.status_code == 400:
            if spec.expect in err.message:
                return Outcome(spec.index, spec.kind, "rejected")
            return Outcome(spec.index, spec.kind, "error",
                           f"400 without {spec.expect!r}: {err.message[:200]}")
        return Outcome(spec.index, spec.kind, "error",
                       f"{err.status_code}: {err.message[:200]}")
    except Exception as err:  # noqa: BLE001 (recorded, never retried)
        return Outcome(spec.index, spec.kind, "error",
                       f"{type(err).__name__}: {str(err)[:200]}")
    if spec.expect is not None:
        return Outcome(spec.index, spec.kind, "error",
                       f"a bad input was accepted (expected a 400: {spec.expect})")
    return outcome


async def drive(api: openai.AsyncOpenAI, specs: list[Spec], concurrency: int,
                timeout: float) -> list[Outcome]:
    """Run specs with at most `concurrency` in flight; outcomes in spec order."""
    outcomes: list[Outcome | None] = [None] * len(specs)
    position = 0

    async def worker() -> None:
        nonlocal position
        while position < len(specs):
            i, position = position, position + 1
            outcomes[i] = await one(api, specs[i], timeout)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return outcomes


# -- the server process ---------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:
    """In the server's child process (Linux): be killed if the driver dies, even by
    SIGKILL, instead of serving on forever."""
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def rss_bytes(pid: int) -> int:
    """VmRSS of a process (Linux /proc), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


class Server:
    """`python -m llmcore.server` in a child process; stop() ends it."""

    def __init__(self, options: list[str], log):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "llmcore.server", "--model", MODEL, "--host",
             "127.0.0.1", "--port", str(self.port), "--device", "cpu", "--dtype",
             "float32", *options],
            cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent)

    def wait_healthy(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n"
                                   + self.log_text()[-3000:])
            try:
                if httpx2.get(self.url + "/health", timeout=2.0).status_code == 200:
                    return
            except httpx2.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"no /health within {seconds} s:\n"
                           + self.log_text()[-3000:])

    def log_text(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=15)


async def metrics(http: httpx2.AsyncClient, url: str) -> dict[str, float]:
    """The llmcore_* samples of /metrics (Prometheus text format)."""
    text = (await http.get(url + "/metrics", timeout=10.0)).text
    out = {}
    for line in text.splitlines():
        if line.startswith("llmcore_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def idle(m: dict) -> bool:
    return (m["llmcore_kv_blocks_free"] == m["llmcore_kv_blocks_total"]
            and m["llmcore_requests_running"] == 0
            and m["llmcore_requests_waiting"] == 0)


async def settle(http, url: str, seconds: float) -> tuple[bool, dict]:
    """Poll /metrics (bounded) until the server is idle: (idle, last sample)."""
    end = time.monotonic() + seconds
    while True:
        m = await metrics(http, url)
        if idle(m) or time.monotonic() > end:
            return idle(m), m
        await asyncio.sleep(0.05)


# -- the run --------------------------------------------------------------------------
@dataclass
class Sample:
    requests: int                  # requests sent so far (all answered)
    seconds: float                 # since the first request
    rss: int                       # bytes
    heap: int                      # tracemalloc's traced bytes (0 without tracing)
    idle: bool
    free: int
    total: int
    running: int
    waiting: int
    finished: int                  # llmcore_requests_finished_total, every reason
    failed: int                    # ... with finish_reason "error"


@dataclass
class Report:
    requests: int
    every: int
    concurrency: int
    seed: int
    options: list[str]
    seconds: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    outcomes: dict = field(default_factory=dict)       # kind -> {status: count}
    errors: list[str] = field(default_factory=list)    # unexpected, with details
    rejected: int = 0              # bad inputs answered 400 with the right message
    bad_inputs: int = 0            # bad inputs sent
    tracebacks: int = 0            # "Traceback" lines in the server's log
    answered: int = 0              # choices of the requests answered in full
    cancelled: int = 0             # streams closed early
    alive: bool = True             # the server still answered /health at the end

    def growth(self, what: str) -> tuple[int, float]:
        """(bytes, fraction) between the end of the first segment and the last."""
        first, last = self.samples[1], self.samples[-1]
        a, b = getattr(first, what), getattr(last, what)
        return b - a, (b - a) / a if a else float("nan")

    @property
    def blocks_back(self) -> bool:
        """Idle with every block free at every sample (each segment's end)."""
        return all(s.idle and s.free == s.total for s in self.samples)

    @property
    def ok(self) -> bool:
        return not self.errors and self.blocks_back and self.alive


def server_options(num_blocks: int, max_batch: int, threads: int | None,
                   trace_memory: bool) -> list[str]:
    options = ["--num-blocks", str(num_blocks), "--max-batch", str(max_batch)]
    if threads:
        options += ["--threads", str(threads)]
    if trace_memory:
        options.append("--trace-memory")
    return options


async def _soak(server: Server, specs: list[Spec], report: Report, timeout: float,
                settle_s: float, deadline: float, progress) -> None:
    limits = httpx2.Limits(max_connections=report.concurrency,
                           max_keepalive_connections=report.concurrency)
    async with httpx2.AsyncClient() as http, openai.AsyncOpenAI(
            base_url=server.url + "/v1", api_key="-", max_retries=0, timeout=timeout,
            http_client=openai.DefaultAsyncHttpxClient(limits=limits,
                                                       timeout=timeout)) as api:
        start = time.perf_counter()

        async def sample(done: int) -> Sample:
            back, m = await settle(http, server.url, settle_s)
            s = Sample(done, time.perf_counter() - start, rss_bytes(server.proc.pid),
                       int(m.get("llmcore_python_heap_bytes", 0)), back,
                       int(m["llmcore_kv_blocks_free"]),
                       int(m["llmcore_kv_blocks_total"]),
                       int(m["llmcore_requests_running"]),
                       int(m["llmcore_requests_waiting"]),
                       int(sum(v for k, v in m.items()
                               if k.startswith("llmcore_requests_finished_total"))),
                       int(m.get('llmcore_requests_finished_total{finish_reason='
                                 '"error"}', 0)))
            report.samples.append(s)
            progress(s)
            return s

        await sample(0)
        for begin in range(0, len(specs), report.every):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the soak ran past its --deadline")
            segment = specs[begin:begin + report.every]
            outcomes = await asyncio.wait_for(
                drive(api, segment, report.concurrency, timeout), left)
            for o in outcomes:
                if o.status == "ok":
                    report.answered += specs[o.index].body.get("n", 1)
                report.cancelled += o.status == "cancelled"
                counts = report.outcomes.setdefault(o.kind, Counter())
                counts[o.status] += 1
                if o.status == "error":
                    report.errors.append(f"request {o.index} ({o.kind}): {o.detail}")
            if server.proc.poll() is not None:
                raise RuntimeError(f"the server died ({server.proc.returncode})")
            await sample(begin + len(segment))
        report.seconds = time.perf_counter() - start
        try:
            report.alive = (await http.get(server.url + "/health", timeout=10.0)
                            ).status_code == 200
        except httpx2.TransportError:
            report.alive = False


def soak(requests: int = 5000, every: int = 1000, concurrency: int = 8, seed: int = 0,
         num_blocks: int = 512, max_batch: int = 32, threads: int | None = None,
         trace_memory: bool = True, timeout: float = 60.0, settle_s: float = 30.0,
         deadline_s: float = 3600.0, progress=lambda sample: None) -> Report:
    """Start a server, run the plan, stop the server: the Report."""
    if requests < 2 * every:
        raise ValueError("--requests must be at least two segments (2 x --every)")
    specs = plan(requests, seed)
    options = server_options(num_blocks, max_batch, threads, trace_memory)
    report = Report(requests, every, concurrency, seed, options)
    report.bad_inputs = sum(s.expect is not None for s in specs)
    deadline = time.monotonic() + deadline_s
    with tempfile.NamedTemporaryFile("w+b", suffix=".log") as log:
        server = Server(options, log)
        try:
            server.wait_healthy(min(180.0, deadline_s))
            asyncio.run(_soak(server, specs, report, timeout, settle_s, deadline,
                              progress))
        finally:
            server.stop()
        text = server.log_text()
    report.tracebacks = text.count("Traceback")
    if report.tracebacks:
        report.errors.append(f"{report.tracebacks} traceback(s) in the server's log:\n"
                             + text[text.index("Traceback"):][:2000])
    report.rejected = sum(c["rejected"] for c in report.outcomes.values())
    last = report.samples[-1] if report.samples else None
    if last is not None and last.failed:
        report.errors.append(f"{last.failed} engine requests finished with "
                             "finish_reason 'error'")
    if last is not None and last.finished < report.answered:
        report.errors.append(f"the server counts {last.finished} finished engine "
                             f"requests, fewer than the {report.answered} choices "
                             "answered")
    if last is not None and report.cancelled and \
            last.finished >= report.answered + report.cancelled:
        report.errors.append(f"none of the {report.cancelled} streams closed early was "
                             "cancelled in the engine: each ran to its end")
    return report


# -- printing -------------------------------------------------------------------------
def machine() -> str:
    model = platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        torch = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch = "?"
    return (f"{model}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch}, openai {openai.__version__}")


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                              capture_output=True, text=True, timeout=10).stdout
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "llmcore"],
                               cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "?"
    if not head.strip():
        return "? (not a git checkout)"
    return head.strip() + (" (llmcore/ modified)" if dirty.strip() else "")


MIB = 1 << 20


def print_report(r: Report) -> None:
    first, last = r.samples[1], r.samples[-1]
    print(f"\n{r.requests} requests in {r.seconds:.0f} s "
          f"({r.requests / r.seconds:.1f} requests/s), {r.concurrency} at a time")
    print("outcomes:", ", ".join(
        f"{kind} {dict(sorted(c.items()))}" for kind, c in sorted(r.outcomes.items())))
    rss, rss_f = r.growth("rss")
    verdict = "met" if rss_f <= 0.05 else "missed"
    print(f"RSS {first.rss / MIB:.1f} MiB after {first.requests} requests -> "
          f"{last.rss / MIB:.1f} MiB after {last.requests}: {rss / MIB:+.1f} MiB "
          f"({rss_f:+.1%}); target ≤ 5%: {verdict}")
    if last.heap:
        heap, heap_f = r.growth("heap")
        print(f"Python heap (tracemalloc) {first.heap / MIB:.2f} -> "
              f"{last.heap / MIB:.2f} MiB: {heap / MIB:+.2f} MiB ({heap_f:+.1%})")
    else:
        print("Python heap: not traced (--no-trace-memory)")
    print(f"KV blocks back: {'yes' if r.blocks_back else 'NO'} ({last.free}/"
          f"{last.total} free, {last.running} running, {last.waiting} waiting, "
          "once idle)")
    ran_on = last.finished - r.answered  # with no errors: cancelled, finished anyway
    print(f"cancellations: {r.cancelled} streams closed after 1-3 chunks; "
          f"{r.cancelled - ran_on} of them cancelled in the engine, {ran_on} finished "
          "before the hang-up reached it" + ("" if not r.errors else
                                             " (or choices of failed requests)"))
    print(f"bad inputs: {r.rejected}/{r.bad_inputs} refused with 400 and the "
          f"expected message; server tracebacks: {r.tracebacks}; server alive at the "
          f"end: {'yes' if r.alive else 'NO'}")
    print(f"unexpected errors: {len(r.errors)} (target 0: "
          f"{'met' if not r.errors else 'missed'})")
    for line in r.errors[:20]:
        print("  ", line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--every", type=int, default=1000,
                        help="requests per segment (a sample after each)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-blocks", type=int, default=512)
    parser.add_argument("--max-batch", type=int, default=32)
    parser.add_argument("--threads", type=int, help="the server's --threads "
                        "(default: the server's own default)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds one HTTP call may take")
    parser.add_argument("--deadline", type=float, default=3600.0,
                        help="seconds the whole soak may take")
    parser.add_argument("--no-trace-memory", action="store_true",
                        help="run the server without tracemalloc")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    print(f"machine: {machine()}")
    print(f"llmcore at {commit()}; {time.strftime('%Y-%m-%d %H:%M')}; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"{'requests':>8} {'seconds':>8} {'RSS MiB':>8} {'heap MiB':>9} "
          f"{'free/total':>11} {'idle':>5}", flush=True)

    def progress(s: Sample) -> None:
        print(f"{s.requests:>8} {s.seconds:>8.0f} {s.rss / MIB:>8.1f} "
              f"{s.heap / MIB:>9.2f} {f'{s.free}/{s.total}':>11} "
              f"{'yes' if s.idle else 'NO':>5}", flush=True)

    report = soak(args.requests, args.every, args.concurrency, args.seed,
                  args.num_blocks, args.max_batch, args.threads,
                  not args.no_trace_memory, args.timeout, deadline_s=args.deadline,
                  progress=progress)
    print(f"server: python -m llmcore.server --model {MODEL} "
          + " ".join(report.options))
    print_report(report)
    if args.json:
        Path(args.json).write_text(json.dumps(
            {**{k: v for k, v in vars(report).items() if k != "samples"},
             "samples": [vars(s) for s in report.samples],
             "machine": machine(), "commit": commit()}, indent=1, default=dict))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
