"""`python -m llmcore.server --tensor-parallel-size 2` (appendix D) the way its users
call it: the official `openai` client against a real server process on 127.0.0.1,
whose rank 1 is a child process. Its greedy replies equal a single-process server's;
a rank that dies stops the server; Ctrl-C or SIGTERM leave no process behind.

One tensor-parallel server serves the client tests; the crash and shutdown tests start
short-lived ones of their own. Every wait is bounded and every test runs under an alarm.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
import torch

from conftest import stop_process
from llmcore.chat import load_chat_template
from llmcore.pretrained import load
from llmcore.server import OpenAIServer
from test_server import KEY, MODEL, TIMEOUT, _free_port, _server_process

# starts a server over several rank processes (the slow tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
TEST_LIMIT = 150  # seconds any one test may take (SIGALRM)
EXIT_WAIT = 15    # seconds the server and its ranks have to go away
PROMPTS = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n",
           "import os\n\n\ndef walk(path):\n"]
CHATS = ["Write a function that adds two numbers.", "What is a stack?"]


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


def _client(base: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key=KEY, max_retries=0,
                         timeout=TIMEOUT)


@pytest.fixture(scope="module")
def tp():
    """A client of one `--tensor-parallel-size 2` server for the module."""
    with _server_process("--tensor-parallel-size", "2", "--max-batch", "4") as base:
        yield _client(base)


@pytest.fixture(scope="module")
def single():
    """A client of a single-process server (in this process) of the same model."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    model, tokenizer = load(MODEL, device="cpu", dtype=torch.float32)
    with OpenAIServer(model, tokenizer, model_name=MODEL, max_batch=4, api_key=KEY,
                      chat_template=load_chat_template(MODEL)) as server:
        yield _client(server.url)
    torch.set_num_threads(threads)


# --- Replies --------------------------------------------------------------------------
def _complete(client: openai.OpenAI, prompt: str) -> str:
    reply = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12,
                                      temperature=0)
    return reply.choices[0].text


def _chat(client: openai.OpenAI, content: str) -> str:
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=12,
        temperature=0)
    return reply.choices[0].message.content


def test_completions_equal_the_single_process_servers(tp, single):
    got = [_complete(tp, p) for p in PROMPTS]  # one at a time: the same batches
    want = [_complete(single, p) for p in PROMPTS]
    assert got == want
    assert all(got)


def test_chat_completions_equal_the_single_process_servers(tp, single):
    got = [_chat(tp, c) for c in CHATS]
    want = [_chat(single, c) for c in CHATS]
    assert got == want
    assert all(got)


def test_a_streamed_completion_equals_the_whole_one(tp):
    whole = _complete(tp, PROMPTS[0])
    stream = tp.completions.create(model=MODEL, prompt=PROMPTS[0], max_tokens=12,
                                   temperature=0, stream=True)
    pieces = [chunk.choices[0].text for chunk in stream if chunk.choices]
    assert len(pieces) > 1
    assert "".join(pieces) == whole


# --- A rank that dies; stopping the server --------------------------------------------
def _children(pid: int) -> list[int]:
    """The pids of `pid`'s children (from /proc: no psutil)."""
    pids = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(FileNotFoundError):
            pids += map(int, (task / "children").read_text().split())
    return pids


def _cmdline(pid: int) -> str:
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, exited but not yet reaped, does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: list[int]) -> list[int]:
    """Wait up to EXIT_WAIT seconds for `pids` to exit; return those still running."""
    deadline = time.monotonic() + EXIT_WAIT
    while any(map(_alive, pids)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@contextlib.contextmanager
def _tp_server():
    """A `--tensor-parallel-size 2` server of its own, once /health answers:
    yield (process, pid of rank 1, every child's pid, output()), output() being
    what it printed so far."""
    port = _free_port()
    log = tempfile.TemporaryFile()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "llmcore.server", "--model", MODEL, "--host",
         "127.0.0.1", "--port", str(port), "--tensor-parallel-size", "2",
         "--max-batch", "4", "--device", "cpu", "--dtype", "float32"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)  # its own process group, as in a terminal

    def output() -> str:
        log.seek(0)
        return log.read().decode(errors="replace")

    children = []
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the server exited ({proc.returncode}):\n{output()}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"http://127.0.0.1:{port}/health",
                             timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not answer /health within 120 s:\n"
                            f"{output()}")
            time.sleep(0.2)
        children = _children(proc.pid)
        ranks = [c for c in children if "spawn_main" in _cmdline(c)]
        assert len(ranks) == 1, [_cmdline(c) for c in children]
        yield proc, ranks[0], children, output
    finally:
        if proc.poll() is None:
            stop_process(proc)
        for pid in _wait_gone(children):  # leave nothing behind, whatever failed
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        log.close()


def test_a_rank_that_dies_stops_the_server():
    with _tp_server() as (proc, rank1, children, output):
        os.kill(rank1, signal.SIGKILL)
        try:
            code = proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server outlived its rank 1 by {EXIT_WAIT} s:\n"
                        f"{output()}")
        assert code != 0
        assert "tensor-parallel rank 1 of 2 exited" in output()
        assert _wait_gone(children) == []


@pytest.mark.parametrize("sig, group", [(signal.SIGINT, False), (signal.SIGINT, True),
                                        (signal.SIGTERM, False)],
                         ids=["INT", "INT-to-the-group", "TERM"])
def test_a_signal_stops_the_server_and_its_ranks(sig, group):
    """SIGINT or SIGTERM to the server, or SIGINT to its whole process group (Ctrl-C
    in a terminal: rank 1 gets it too)."""
    with _tp_server() as (proc, rank1, children, output):
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=EXIT_WAIT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server ran on {EXIT_WAIT} s after {sig.name}:\n"
                        f"{output()}")
        assert _wait_gone([rank1]) == []
        assert _wait_gone(children) == [], [_cmdline(c) for c in children]
