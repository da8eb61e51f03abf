"""bench/cpu_peer.py's plumbing, without llama.cpp and without timing anything: the
CMake options it builds llama.cpp with, the notice when llama.cpp is missing, and one
llmcore worker process answering the bench's commands (decode, logits, prefill, rss, and
the prompt-lookup run's generate) with consistent tokens."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

# runs the benchmark's worker processes (the slow tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return _load("bench_cpu_peer", ROOT / "bench" / "cpu_peer.py")


def test_llama_cpp_is_built_for_the_extensions_the_cpu_lists():
    flags = _load("llama_cpp_flags", ROOT / "scripts" / "llama_cpp_flags.py")
    args = flags.cmake_args("processor\t: 0\nflags\t\t: fpu avx avx2 fma f16c sse4_2\n")
    assert args.startswith("-DGGML_NATIVE=OFF ")
    assert "-DGGML_AVX2=ON" in args and "-DGGML_AVX512=OFF" in args
    assert "-DGGML_AMX_INT8=OFF" in args
    assert flags.cmake_args("no flags here") == ""


def test_without_llama_cpp_the_bench_says_so_and_exits_0(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "LLMCORE_PEER_PYTHON"}
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_peer.py"),
                          "--peer-python", str(tmp_path / "no-python")],
                         capture_output=True, text=True, env=env, timeout=120)
    if "NOTICE" not in out.stdout:
        pytest.skip("llama-cpp-python is installed in this environment")
    assert out.returncode == 0
    assert "llama-cpp-python is not installed" in out.stdout


def test_an_llmcore_worker_answers_the_benchs_commands(bench):
    from llmcore.pretrained import locate
    peer = bench.Peer("fp32", sys.executable, str(locate(bench.MODEL)), 1)
    try:
        assert peer.info["weight_mb"] > 500  # the file dequantized to float32
        ids = list(range(100, 132))
        reply = peer.ask(op="decode", ids=ids, n=4)
        tokens = reply["tokens"]
        assert len(tokens) == 4 and reply["seconds"] > 0
        # the logits after prefill + two steps pick the third token decode picked
        third, other = tokens[2], (tokens[2] + 1) % 49152
        logits = peer.ask(op="logits", ids=ids, steps=tokens[:2],
                          tokens=[third, other])["logits"]
        assert logits[0] >= logits[1]
        assert peer.ask(op="prefill", ids=ids)["seconds"] > 0
        assert peer.ask(op="rss")["mb"] > 100
        # a whole greedy reply: plain and with prompt lookup, the same tokens (the
        # other peers stopped meanwhile, and continued after)
        held = []

        class Other:
            def hold(self, on):
                held.append(on)

        copy = ids + ids[:8]  # a prompt that repeats itself: lookup has guesses
        plain = bench.ask_alone({"fp32": peer, "other": Other()}, "fp32",
                                op="generate", ids=copy, n=12, eos=[], k=0)
        lookup = peer.ask(op="generate", ids=copy, n=12, eos=[], k=4)
        assert held == [True, False]
        assert plain["tokens"] == lookup["tokens"] and len(plain["tokens"]) == 12
        ended = peer.ask(op="generate", ids=copy, n=12, eos=plain["tokens"][3:4], k=0)
        assert ended["tokens"] == plain["tokens"][:4]  # ends at (and keeps) the EOS
    finally:
        peer.close()
    assert peer.proc.returncode == 0


def test_chapter_11s_lookup_runs_plain_and_lookup_per_request(bench, monkeypatch):
    """quick_llama_cpp_lookup's loop, with an llmcore worker standing in for llama.cpp
    (the loop is the same for any peer); None where llama-cpp-python is missing."""
    monkeypatch.setattr(bench, "peer_python", lambda arg: None)
    assert bench.quick_llama_cpp_lookup(1, {"a": [1, 2]}, [0], 4) is None

    class StandIn(bench.Peer):
        def __init__(self, key, python, path, threads):
            super().__init__("fp32", python, path, threads)
            self.info = {**self.info, "version": "stand-in", "system": "-"}

    monkeypatch.setattr(bench, "peer_python", lambda arg: sys.executable)
    monkeypatch.setattr(bench, "Peer", StandIn)
    ids = list(range(100, 116))
    out = bench.quick_llama_cpp_lookup(1, {"copy": ids + ids[:6], "other": ids[:9]},
                                       [], 4, rounds=1, n=5)
    assert out["version"] == "stand-in"
    assert set(out["tokens/s"]) == {("copy", 0), ("copy", 4), ("other", 0),
                                    ("other", 4)}
    assert all(rate > 0 for rate in out["tokens/s"].values())
    assert out["tokens"]["copy", 0] == out["tokens"]["copy", 4]  # greedy, float32
    assert all(len(t) == 5 for t in out["tokens"].values())
