"""Tests for appendix D's tensor parallelism (llmcore.parallel): sharded logits, greedy
tokens and the Engine over several ranks against the single-process model, how weights
are split, and what launch() refuses or reports.

The ranks are real processes (launch: spawn + gloo on 127.0.0.1). A spawn costs a few
seconds, so each world size is launched once (`_batch` runs several of llmcore's rank
functions in one process group) and the tests read that launch's results. Every launch
has a timeout, every test runs under an alarm, and no process is left behind.
"""
from __future__ import annotations

import multiprocessing
import signal
import time
import types

import pytest
import torch

from llmcore import parallel
from llmcore.parallel import (RowParallelLinear, VocabParallelEmbedding,
                              VocabParallelLMHead, launch, load_sharded,
                              shard_config, shard_model, shard_slice, take_shard)

# spawns gloo rank processes (the slow tier)
pytestmark = pytest.mark.slow

MODEL = "tiny"        # 8 query heads, 2 KV heads, tied embeddings, vocabulary 4096
LAUNCH_TIMEOUT = 120  # seconds any one launch may take
TEST_LIMIT = 150      # seconds any one test may take (SIGALRM)
IDS = [[3, 17, 4095, 0, 256, 1000, 42], [9, 8, 7, 2048, 5, 4000, 1]]
GQA_IDS = [[3, 17, 509, 0, 256, 384, 42], [508, 8, 7, 383, 5, 127, 128]]  # all shards
TEXTS = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n"]
MAX_TOKENS = 12
ENGINE_ARGS = dict(num_blocks=32, block_size=8, max_batch=4, token_budget=16)
# different lengths: 5 and 9 fit one step's budget, 21 and 37 are prefilled in chunks
ENGINE_PROMPTS = [[(7 * i + 3 * n) % 4000 + 1 for i in range(n)]
                  for n in (5, 21, 37, 9)]


@pytest.fixture(autouse=True)
def _deadline():
    """Fail (not hang) a test that runs past TEST_LIMIT seconds."""
    def expire(signum, frame):
        raise TimeoutError(f"the test ran past {TEST_LIMIT} s: a rank hangs")
    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(TEST_LIMIT)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One torch thread for the single-process references (a shared 2-core machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# --- Rank functions (module level: the spawned ranks import this module) -------------
def _batch(rank: int, world_size: int, jobs: list[tuple[str, tuple]]) -> list:
    """Several of llmcore.parallel's rank functions, one after the other, in one
    process group: jobs is [(name, args)], the result [fn(rank, world_size, *args)]."""
    return [getattr(parallel, name)(rank, world_size, *args) for name, args in jobs]


def _fail_on_rank_1(rank: int, world_size: int) -> str:
    """Rank 1 raises; the others stay busy (no collective), so launch must stop them."""
    if rank == 1:
        raise ValueError("rank one's deliberate failure")
    time.sleep(LAUNCH_TIMEOUT)
    return "rank 0 was not stopped"


# --- Fixtures -------------------------------------------------------------------------
@pytest.fixture(scope="module")
def gqa_dir(tmp_path_factory):
    """A random-init Qwen2 checkpoint (transformers' save_pretrained): 8 query heads,
    4 KV heads, q/k/v biases, untied embeddings, a vocabulary of 510 (not a multiple
    of 4, so world 4 pads the last rank's rows); weights 5x the default scale and
    random biases, so that logits are a few units and a misplaced share shows."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=510, hidden_size=64, intermediate_size=96,
                      num_hidden_layers=2, num_attention_heads=8,
                      num_key_value_heads=4, max_position_embeddings=128,
                      tie_word_embeddings=False, initializer_range=0.1)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # biases are zero at init: make them count
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    path = tmp_path_factory.mktemp("qwen2-gqa")
    model.save_pretrained(path, safe_serialization=True)
    return str(path)


def _full(path) -> torch.nn.Module:
    from llmcore.chat import model_dir
    from llmcore.hf import load_pretrained
    return load_pretrained(model_dir(path), device="cpu", dtype="float32")


@pytest.fixture(scope="module")
def tiny_full():
    return _full(MODEL)


@pytest.fixture(scope="module")
def gqa_full(gqa_dir):
    return _full(gqa_dir)


def _launch(world_size: int, jobs) -> list:
    results = launch(_batch, world_size, jobs, timeout=LAUNCH_TIMEOUT)
    assert multiprocessing.active_children() == []
    return results


@pytest.fixture(scope="module")
def world1(gqa_dir):
    return _launch(1, [("tp_logits", (MODEL, IDS)), ("tp_logits", (gqa_dir, GQA_IDS))])


@pytest.fixture(scope="module")
def world2(gqa_dir):
    return _launch(2, [("tp_logits", (MODEL, IDS)), ("tp_logits", (gqa_dir, GQA_IDS)),
                       ("tp_greedy", (MODEL, TEXTS, MAX_TOKENS)),
                       ("tp_engine", (MODEL, ENGINE_PROMPTS, MAX_TOKENS, ENGINE_ARGS))])


@pytest.fixture(scope="module")
def world4(gqa_dir):
    return _launch(4, [("tp_logits", (gqa_dir, GQA_IDS))])


# --- Many processes against one -------------------------------------------------------
@pytest.mark.parametrize("world_size, which", [(1, "tiny"), (1, "gqa"), (2, "tiny"),
                                               (2, "gqa"), (4, "gqa")])
def test_logits_equal_the_single_process_model(request, world_size, which):
    runs = request.getfixturevalue(f"world{world_size}")
    model = request.getfixturevalue(f"{which}_full")
    ids, job = (IDS, 0) if which == "tiny" else (GQA_IDS, 1 if world_size < 4 else 0)
    with torch.inference_mode():
        want = model(torch.tensor(ids))
    assert want.shape[-1] == model.cfg.vocab_size  # padding rows cut off
    for rank, results in enumerate(runs):  # every rank holds every logit
        got = results[job]
        assert got.shape == want.shape and got.dtype == torch.float32, rank
        # the row-parallel sums add in another order: a few float32 steps apart (the
        # tiny model at world 2: 8.3e-6 at logits up to 13.4)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_greedy_tokens_equal_the_single_process_generate(world2, tiny_full):
    from llmcore.generate import generate
    from llmcore.pretrained import load_tokenizer
    from llmcore.sampling import SamplingParams

    tokenizer = load_tokenizer(MODEL)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    want = [generate(tiny_full, tokenizer, t, params, eos_token_ids=[]).token_ids
            for t in TEXTS]
    assert all(len(w) == MAX_TOKENS for w in want)
    assert world2[0][2] == world2[1][2] == want


def test_engine_over_two_ranks_equals_the_single_process_engine(world2, tiny_full):
    from llmcore.engine import Engine
    from llmcore.request import Request
    from llmcore.sampling import SamplingParams

    engine = Engine(tiny_full, **ENGINE_ARGS)
    params = SamplingParams(temperature=0.0, max_tokens=MAX_TOKENS)
    for i, prompt in enumerate(ENGINE_PROMPTS):
        engine.add_request(Request(i, prompt, params))
    done = {c.request_id: c.output_ids for c in engine.run()}
    want = [done[i] for i in range(len(ENGINE_PROMPTS))]
    # the workload exercises what it should: chunked prefill and batched decodes
    assert max(map(len, ENGINE_PROMPTS)) > ENGINE_ARGS["token_budget"]
    assert max(engine.stats.batch_histogram) > 1
    assert world2[0][3] == want
    assert world2[1][3] == engine.stats.steps  # rank 1 ran every step rank 0 ran


# --- Refusals and failures ------------------------------------------------------------
def test_shard_config_refuses_sizes_that_split_a_kv_head(tiny_full):
    with pytest.raises(ValueError, match=r"2 KV heads.*Use one of \[1, 2\]"):
        shard_config(tiny_full.cfg, 4)
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        shard_config(tiny_full.cfg, 0)
    local = shard_config(tiny_full.cfg, 2)
    assert (local.n_heads, local.n_kv_heads, local.hidden_dim, local.head_dim,
            local.dim) == (4, 1, 344, 32, 256)


def test_launch_refuses_a_function_of_main():
    fn = types.FunctionType(_batch.__code__, {}, "in_a_notebook")
    fn.__module__ = "__main__"
    with pytest.raises(TypeError, match="in_a_notebook.*__main__.*cannot import"):
        launch(fn, 2, timeout=LAUNCH_TIMEOUT)
    with pytest.raises(ValueError, match="world_size must be an int >= 1"):
        launch(_batch, 0, [], timeout=LAUNCH_TIMEOUT)
    assert multiprocessing.active_children() == []


def test_a_rank_that_raises_fails_the_launch_and_stops_the_others():
    # the alarm (TEST_LIMIT) bounds it: launch must not wait for rank 0 to finish
    with pytest.raises(RuntimeError) as info:
        launch(_fail_on_rank_1, 2, timeout=LAUNCH_TIMEOUT)
    message = str(info.value)
    assert "rank 1 of 2 failed in _fail_on_rank_1" in message
    assert "ValueError: rank one's deliberate failure" in message  # its traceback
    assert multiprocessing.active_children() == []


# --- How weights are split (one process, no process group) ----------------------------
@pytest.mark.parametrize("world_size", [2, 4])
def test_shards_put_together_give_the_full_weights(tiny_full, world_size):
    state = tiny_full.state_dict()
    for name, dim in [("blocks.0.attn.q_proj.weight", 0),
                      ("blocks.3.attn.k_proj.weight", 0),
                      ("blocks.5.mlp.up_proj.weight", 0),
                      ("blocks.0.attn.o_proj.weight", 1),
                      ("blocks.2.mlp.down_proj.weight", 1)]:
        full = state[name]
        parts = [take_shard(name, full, r, world_size) for r in range(world_size)]
        size = full.shape[dim] // world_size
        assert [shard_slice(name, tuple(full.shape), r, world_size)
                for r in range(world_size)] == [(dim, r * size, (r + 1) * size)
                                                for r in range(world_size)]
        assert all(p.shape[dim] == size for p in parts), name
        assert torch.equal(torch.cat(parts, dim), full), name
    for name in ["blocks.0.attn_norm.weight", "norm.weight",
                 "blocks.0.attn.o_proj.bias", "blocks.1.mlp.down_proj.bias"]:
        full = torch.randn(256)  # whole on every rank: norms, row-parallel biases
        assert shard_slice(name, (256,), 1, world_size) is None
        assert all(torch.equal(take_shard(name, full, r, world_size), full)
                   for r in range(world_size))
    bias = torch.randn(64)  # a column-parallel bias is split with its weight's rows
    parts = [take_shard("blocks.0.attn.k_proj.bias", bias, r, world_size)
             for r in range(world_size)]
    assert torch.equal(torch.cat(parts), bias) and len(parts[0]) == 64 // world_size


def test_the_vocabulary_is_padded_with_zero_rows():
    table = torch.randn(510, 8)
    for name in ("embed.weight", "lm_head.weight"):
        parts = [take_shard(name, table, r, 4) for r in range(4)]
        assert [tuple(p.shape) for p in parts] == [(128, 8)] * 4
        assert shard_slice(name, (510, 8), 3, 4) == (0, 384, 512)  # past the end
        assert torch.equal(torch.cat(parts)[:510], table)
        assert torch.equal(parts[3][-2:], torch.zeros(2, 8))
    with pytest.raises(ValueError, match="cannot share equally"):
        take_shard("blocks.0.mlp.gate_proj.weight", torch.zeros(10, 4), 0, 4)


def test_shard_model_of_world_one_is_the_model(tiny_full):
    one = shard_model(tiny_full, 0, 1)
    assert one.lm_head.weight is one.embed.weight  # tied again after assign=True
    ids = torch.tensor(IDS)
    with torch.inference_mode():
        torch.testing.assert_close(one(ids), tiny_full(ids), rtol=0, atol=1e-5)


@pytest.mark.parametrize("which, world_size", [("tiny", 2), ("gqa", 4)])
def test_shard_model_holds_each_ranks_part(request, which, world_size):
    full = request.getfixturevalue(f"{which}_full")
    state, cfg = full.state_dict(), full.cfg
    rows = -(-cfg.vocab_size // world_size)
    for rank in range(world_size):
        part = shard_model(full, rank, world_size)
        assert (part.tp_rank, part.tp_size, part.full_cfg) == (rank, world_size, cfg)
        assert part.cfg == shard_config(cfg, world_size)
        assert isinstance(part.embed, VocabParallelEmbedding)
        assert (part.embed.start, part.embed.rows) == (rank * rows, rows)
        assert isinstance(part.lm_head, VocabParallelLMHead)
        assert part.lm_head.vocab_size == cfg.vocab_size
        assert (part.lm_head.weight is part.embed.weight) == cfg.tie_word_embeddings
        for block in part.blocks:
            assert isinstance(block.attn.o_proj, RowParallelLinear)
            assert isinstance(block.mlp.down_proj, RowParallelLinear)
        got = part.state_dict()
        assert got.keys() == state.keys()
        for name, tensor in got.items():
            assert torch.equal(tensor, take_shard(name, state[name], rank,
                                                  world_size)), name
        assert part.blocks[0].attn.q_proj.weight.shape[0] \
            == cfg.n_heads * cfg.head_dim // world_size


@pytest.mark.parametrize("which, world_size", [("tiny", 2), ("gqa", 4)])
def test_load_sharded_reads_what_shard_model_takes(request, which, world_size):
    path = MODEL if which == "tiny" else request.getfixturevalue("gqa_dir")
    full = request.getfixturevalue(f"{which}_full")
    for rank in range(world_size):
        want = shard_model(full, rank, world_size).state_dict()
        got = load_sharded(path, rank, world_size, "cpu", "float32").state_dict()
        assert got.keys() == want.keys()
        for name in want:
            assert torch.equal(got[name], want[name]), name
