"""bench/serving.py on a very small workload: every section runs, and its token
comparisons are made and pass. Times are printed by the bench, never asserted here."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch

# runs the serving benchmark's mechanisms (the slow tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_serving",
                                                  ROOT / "bench" / "serving.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def setup(bench):
    sizes = bench.Sizes(n=6, prompt_lens=(4, 40), output_lens=(2, 12), max_batch=4,
                        loads=(0.8,), chunk_running=3, chunk_running_prompt=8,
                        chunk_running_tokens=10, chunk_after=2, chunk_prompt=96,
                        chunk_tokens=2, chunk_budget=16, prefix_n=5, prefix_len=40,
                        prefix_prompt_lens=(2, 10), prefix_output_lens=(2, 6),
                        repeat=1)
    model, hf_model = bench.tiny_pair()
    requests = bench.synthetic_requests(sizes.n, model.cfg.vocab_size,
                                        prompt_lens=sizes.prompt_lens,
                                        output_lens=sizes.output_lens, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the bench does: steadier on a shared machine
    yield sizes, model, hf_model, requests
    torch.set_num_threads(threads)


def test_engine_and_transformers_agree_token_for_token(bench, setup):
    sizes, model, hf_model, requests = setup
    row = bench.bench_peer("tiny", model, hf_model, requests, sizes.max_batch, 1)
    assert row["same"] and row["lengths"] and row["differ"] == 0
    assert row["tokens"] == sum(r.params.max_tokens for r in requests)
    theirs, _ = bench.hf_burst(hf_model, requests[:2], 2)
    assert sorted(theirs) == [r.request_id for r in requests[:2]]


def test_every_mechanism_keeps_the_tokens(bench, setup):
    sizes, model, _, requests = setup
    trace = bench.bench_trace(model, requests, sizes.max_batch, sizes.loads, 1,
                              capacity_runs=[1.0])
    assert trace["same"] and len(trace["rows"]) == 1
    assert trace["rows"][0]["static"]["requests"] == len(requests)
    chunked = bench.bench_chunked(model, sizes, 1)
    assert chunked["same"] and chunked["steps_before"] == sizes.chunk_after
    prefix = bench.bench_prefix(model, sizes, 1)
    assert prefix["same"] and prefix["cached"] > 0
    tight = bench.bench_tight(model, requests, sizes.tight_fraction, 1)
    assert tight["same"] and tight["pool"] < tight["need"]
