"""Tests for llmcore.model_runner (one flat pass per step over the paged KV pool) and
llmcore.block_manager: the flat pass gives each request the logits it gets alone."""
import pytest
import torch

from llmcore.block_manager import BlockManager
from llmcore.engine import Engine, StepStats
from llmcore.model import ModelConfig, Transformer
from llmcore.model_runner import (
    Chunk, ModelRunner, blocks_for_memory, kv_bytes_per_token,
)
from llmcore.request import Request
from llmcore.sampling import SamplingParams

SHAPES = {"gqa": dict(n_heads=4, n_kv_heads=2), "mha": dict(n_heads=4, n_kv_heads=4),
          "mqa": dict(n_heads=4, n_kv_heads=1),
          "window": dict(n_heads=4, n_kv_heads=2, sliding_window=5)}


def _model(shape="gqa", dtype=torch.float32, **extra):
    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=97, dim=32, n_layers=2, hidden_dim=48,
                      max_position_embeddings=128, **SHAPES[shape], **extra)
    return Transformer(cfg).to(dtype).eval()


def _steps(rng, lengths, block_size):
    """A schedule of chunks per request: (request, start, n) per step, mixing prompt
    chunks of random size with one-token decodes, several requests per step."""
    done = {r: 0 for r in lengths}
    steps = []
    while any(done[r] < lengths[r] for r in lengths):
        step = []
        for r in lengths:
            left = lengths[r] - done[r]
            if left and rng.random() < 0.8:
                n = 1 if rng.random() < 0.4 else int(rng.integers(1, left + 1))
                step.append((r, done[r], n))
                done[r] += n
        if step:
            steps.append(step)
    return steps


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.bfloat16, 0.1)])
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_flat_pass_gives_each_request_its_own_logits(shape, dtype, atol):
    import numpy as np
    model, bs = _model(shape, dtype), 4
    rng = np.random.default_rng(len(shape))
    lengths = {"a": 23, "b": 9, "c": 1, "d": 17}
    tokens = {r: rng.integers(0, 97, n).tolist() for r, n in lengths.items()}
    with torch.inference_mode():  # today's path: each request alone, no cache
        alone = {r: model(torch.tensor([t]))[0].float() for r, t in tokens.items()}
    runner, blocks = ModelRunner(model, 32, bs), BlockManager(32, bs)
    for r in lengths:
        blocks.add(r)
    passes = 0
    for step in _steps(rng, lengths, bs):
        blocks.grow({r: start + n for r, start, n in step})
        chunks = [Chunk(tokens[r][start:start + n], start, blocks.tables[r],
                        "all" if n > 1 and rng.random() < 0.5 else "last")
                  for r, start, n in step]
        outs = runner.run(chunks)
        passes += 1
        for (r, start, n), chunk, logits in zip(step, chunks, outs):
            want = alone[r][start:start + n]
            if chunk.logits == "last":
                want = want[-1:]
            torch.testing.assert_close(logits.float(), want, atol=atol, rtol=0)
    assert passes >= 3


def test_logits_only_where_asked_equal_the_full_rows():
    model = _model()
    ids = torch.randint(0, 97, (2, 9))
    with torch.inference_mode():
        full = model(ids)
        some = model(ids, logits_at=torch.tensor([8, 3]))
    assert some.shape == (2, 2, 97)
    torch.testing.assert_close(some, full[:, [8, 3]], atol=1e-6, rtol=0)


def test_the_pool_is_sized_from_a_memory_budget():
    model = _model()
    per_token = kv_bytes_per_token(model.cfg, torch.float32)
    assert per_token == 2 * 2 * 2 * 8 * 4  # K and V, 2 layers, 2 kv heads, 8 dims, fp32
    assert blocks_for_memory(model.cfg, torch.float32, 16, 10 * 16 * per_token + 5,
                             torch.device("cpu")) == 10
    engine = Engine(model, kv_memory=7 * 16 * per_token)
    assert engine.blocks.num_blocks == 7
    assert engine.runner.kv.nbytes == 7 * 16 * per_token
    with pytest.raises(TypeError, match="bytes .int. or a fraction"):
        Engine(model, kv_memory="1G")


def test_every_full_block_is_hashed_generated_ones_too_and_found_again():
    blocks = BlockManager(8, 4, prefix_caching=True)
    tokens = list(range(10, 21))  # 11 tokens: 2 full blocks and 3 more
    assert blocks.add("a", tokens) == 0
    blocks.grow({"a": 11})
    blocks.cache_full_blocks("a", tokens)
    assert len(blocks.hashes["a"]) == 2
    blocks.cache_full_blocks("a", tokens + [7])  # a generated token fills block 3
    assert len(blocks.hashes["a"]) == 3
    table = list(blocks.tables["a"])
    blocks.free("a")
    assert blocks.num_free == 8  # hashed blocks are evictable, so they count as free
    # the same tokens and one more: the three full blocks come back, not the last one
    assert blocks.add("b", tokens + [7, 1]) == 12 and blocks.tables["b"] == table[:3]
    blocks.free("b")
    # a different first token: nothing is shared (the hash chains every block before)
    assert blocks.add("c", [0] + tokens[1:] + [7, 1]) == 0
    # LRU eviction: allocating every block evicts the cached ones, oldest first
    blocks.grow({"c": 32})
    assert blocks.num_free == 0 and not blocks.allocator.by_hash
    with pytest.raises(ValueError, match="already has blocks"):
        blocks.add("c")


def test_a_preempted_request_finds_its_own_blocks_again():
    computed = {}
    for caching in (False, True):
        engine = Engine(_model(), num_blocks=64, block_size=4, max_batch=2,
                        prefix_caching=caching, admission="optimistic")
        engine.add_request(Request("a", list(range(1, 14)),
                                   SamplingParams(temperature=0.0, max_tokens=12)))
        for _ in range(6):
            engine.step()
        st = engine.running["a"]
        before = st.computed
        engine.scheduler._preempt(st)
        (done,) = engine.run()
        assert done.preemptions == 1
        assert done.cached_tokens == 0  # the client's prompt found nothing on arrival
        computed[caching] = engine.stats.tokens
    # the recompute skips every full block of prompt and output computed before
    assert computed[False] - computed[True] == (before - 1) // 4 * 4 > 13

def test_step_statistics_stay_bounded():
    stats = StepStats(history=3)
    for i in range(10):
        stats.add(i % 4, 10 + i)
    assert stats.steps == 10 and len(stats.recent) == 3
    assert stats.decode_steps == 7 and stats.decodes == 1 + 2 + 3 + 1 + 2 + 3 + 1
    assert stats.batch_histogram == {1: 3, 2: 2, 3: 2}
    assert stats.mean_batch == pytest.approx(13 / 7)
    with pytest.raises(ValueError, match="history must be an int >= 1"):
        StepStats(history=0)


def test_the_servers_kv_memory_flag_reads_bytes_and_fractions():
    import argparse

    from llmcore.server import _memory
    assert _memory("4G") == 4 * 2**30 and _memory("512M") == 512 * 2**20
    assert _memory("1048576") == 2**20 and _memory("0.9") == 0.9
    with pytest.raises(argparse.ArgumentTypeError, match="give bytes"):
        _memory("lots")


def test_decode_rows_are_grouped_by_context_so_a_long_one_pads_no_short_one():
    model = _model()
    runner = ModelRunner(model, 64, 4)
    # one row at position 90 among rows at 2..9: grouped apart from the short ones
    positions = [90, 3, 2, 9, 5, 4]
    tables, first = [], 0
    for p in positions:
        n = p // 4 + 1
        tables.append(list(range(first, first + n)))
        first += n
    groups = runner.kv._decode_plan([(i, p, t) for i, (p, t)
                                     in enumerate(zip(positions, tables))])
    assert 1 <= len(groups) <= 3
    rows_of = {tuple(sorted(rows.tolist())): slots.shape[1]
               for rows, slots, _ in groups}
    assert rows_of[(0,)] == 91  # the long row alone, its 91 keys
    assert sum(len(rows) * width for rows, width in rows_of.items()) < 91 + 6 * 10
    for rows, slots, visible in groups:  # each row sees exactly its own positions
        for row, seen in zip(rows.tolist(), visible[:, 0, 0]):
            assert seen.sum() == positions[row] + 1


def test_planning_a_large_decode_batch_stays_exact():
    runner = ModelRunner(_model(), 4096, 4)
    positions = [3 + (i * 37) % 120 for i in range(300)]  # 300 rows, mixed contexts
    tables, first = [], 0
    for p in positions:
        tables.append(list(range(first, first + p // 4 + 1)))
        first += p // 4 + 1
    groups = runner.kv._decode_plan([(i, p, t) for i, (p, t)
                                     in enumerate(zip(positions, tables))])
    assert 1 <= len(groups) <= 3
    assert sorted(r for rows, _, _ in groups for r in rows.tolist()) == list(range(300))
    for rows, slots, visible in groups:
        for row, seen in zip(rows.tolist(), visible[:, 0, 0]):
            assert seen.sum() == positions[row] + 1
