"""Tests for llmcore.paged: the block allocator, the paged cache, prefix caching."""
import pytest
import torch

import llmcore.paged as paged
from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.paged import (BlockAllocator, PagedKVCache, PoolExhaustedError, PrefixBlockAllocator,
                           PrefixCachingKVCache, block_hash)

TINY = dict(vocab_size=256, dim=64, n_layers=3, n_heads=4, n_kv_heads=2, hidden_dim=96)
CFG = ModelConfig(**TINY)


def _model():
    torch.manual_seed(0)
    return Transformer(CFG).eval()


def _ids(length, seed):
    return torch.randint(0, 256, (length,), generator=torch.Generator().manual_seed(seed)).tolist()


def _paged(num_blocks=32, block_size=4, prefix=False):
    cls = PrefixCachingKVCache if prefix else PagedKVCache
    return cls(CFG, num_blocks=num_blocks, block_size=block_size, device="cpu", dtype=torch.float32)


# The allocator

def test_allocator_allocates_frees_and_reports_exhaustion():
    alloc = BlockAllocator(num_blocks=3, block_size=16)
    blocks = [alloc.allocate() for _ in range(3)]
    assert sorted(blocks) == [0, 1, 2] and alloc.num_free == 0
    with pytest.raises(PoolExhaustedError, match="1 more block.*of 16 tokens needed, 0 of 3 free"):
        alloc.allocate()
    alloc.incref(blocks[0])
    alloc.decref(blocks[0])
    assert alloc.num_free == 0  # still used once
    alloc.decref(blocks[0])
    assert alloc.num_free == 1 and alloc.allocate() == blocks[0]
    alloc.decref(blocks[1])
    with pytest.raises(ValueError, match="freed twice"):
        alloc.decref(blocks[1])
    with pytest.raises(ValueError, match="is free; allocate"):
        alloc.incref(blocks[1])
    with pytest.raises(ValueError, match="num_blocks must be a positive int"):
        BlockAllocator(0, 16)


# The paged cache

def test_paged_cache_bytes_and_block_tables():
    cache = _paged(num_blocks=10, block_size=4)
    assert cache.nbytes == 10 * 4 * 2 * CFG.n_layers * CFG.n_kv_heads * CFG.head_dim * 4
    model = _model()
    for name, n in (("a", 6), ("b", 3)):
        cache.add_sequence(name)
    cache.set_batch(["a", "b"])
    prompt = torch.tensor([_ids(6, 1), _ids(6, 2)])
    greedy_generate(model, prompt, 4, cache)  # 9 positions written per sequence: 3 blocks of 4
    assert [len(cache.tables[s]) for s in "ab"] == [3, 3] and cache.lengths == {"a": 9, "b": 9}
    assert set(cache.tables["a"]).isdisjoint(cache.tables["b"])
    cache.free_sequence("a")
    assert cache.allocator.num_free == 7 and "a" not in cache.tables


def test_paged_greedy_matches_contiguous_token_for_token():
    model = _model()
    prompt = torch.tensor([_ids(11, 3), _ids(11, 4), _ids(11, 5)])
    contiguous = greedy_generate(model, prompt, 20, KVCache(CFG, 3, 31, device="cpu", dtype=torch.float32))
    cache = _paged(num_blocks=40, block_size=4)
    cache.add_sequence("busy")  # another sequence holds blocks, so ours are not contiguous
    cache.set_batch(["busy"])
    greedy_generate(model, torch.tensor([_ids(5, 6)]), 3, cache)
    for s in ("x", "y", "z"):
        cache.add_sequence(s)
    cache.set_batch(["x", "y", "z"])
    assert torch.equal(greedy_generate(model, prompt, 20, cache), contiguous)


def test_paged_sequences_of_different_lengths_in_one_batch():
    model = _model()
    a, b = _ids(7, 7), _ids(7, 8)
    expected_a = greedy_generate(model, torch.tensor([a]), 6, KVCache(CFG, 1, 13, device="cpu", dtype=torch.float32))
    cache = _paged(num_blocks=20, block_size=4)
    cache.add_sequence("a")
    cache.set_batch(["a"])
    greedy_generate(model, torch.tensor([a[:3]]), 1, cache)  # "a" has 3 tokens stored...
    cache.add_sequence("b")
    cache.set_batch(["b"])
    greedy_generate(model, torch.tensor([b]), 1, cache)      # ... "b" has 7
    # one forward pass with rows at different positions: "a" continues its prompt, "b" decodes
    cache.set_batch(["a", "b"])
    positions = torch.tensor([[3, 4, 5, 6], [7, 8, 9, 10]])
    ids = torch.tensor([a[3:7], [0, 1, 2, 3]])
    logits = model(ids, positions=positions, kv_cache=cache)
    assert logits[0, -1].argmax().item() == expected_a[0, 0].item()


def test_pool_exhaustion_is_a_clear_error_and_leaves_state_unchanged():
    model = _model()
    cache = _paged(num_blocks=3, block_size=4)
    cache.add_sequence("a")
    cache.set_batch(["a"])
    with pytest.raises(PoolExhaustedError, match="4 more block.*0 of 3|4 more block.*3 of 3 free"):
        greedy_generate(model, torch.tensor([_ids(13, 9)]), 2, cache)  # 13 tokens need 4 blocks
    assert cache.tables["a"] == [] and cache.allocator.num_free == 3
    with pytest.raises(KeyError, match="unknown sequence"):
        cache.set_batch(["nope"])
    with pytest.raises(ValueError, match="already exists"):
        cache.add_sequence("a")


# Prefix caching

def test_block_hash_is_chained_and_deterministic():
    h = block_hash(None, [1, 2, 3, 4])
    assert h == block_hash(None, (1, 2, 3, 4))
    assert block_hash(h, [5, 6, 7, 8]) != block_hash(None, [5, 6, 7, 8])
    assert block_hash(None, [1, 2, 3, 4]) != block_hash(None, [1, 2, 3, 5])


def _run(cache, model, seq_id, prompt, n=4):
    hit = cache.add_sequence(seq_id, prompt)
    cache.set_batch([seq_id])
    out = greedy_generate(model, torch.tensor([prompt]), n, cache, cached_len=hit)
    return hit, out


def test_prefix_hit_reuses_blocks_and_gives_the_same_tokens():
    model = _model()
    prompt = _ids(18, 10)
    reference = greedy_generate(model, torch.tensor([prompt]), 4, KVCache(CFG, 1, 22, device="cpu", dtype=torch.float32))
    cache = _paged(prefix=True)
    hit, out = _run(cache, model, "first", prompt)
    assert hit == 0 and torch.equal(out, reference)
    hit, out = _run(cache, model, "second", prompt)
    assert hit == 16 and torch.equal(out, reference)  # 4 full blocks of the 18-token prompt
    assert cache.tables["second"][:4] == cache.tables["first"][:4]
    assert all(cache.allocator.ref_count[b] == 2 for b in cache.tables["first"][:4])


def test_last_prompt_token_is_always_recomputed():
    model = _model()
    prompt = _ids(16, 11)  # exactly 4 blocks
    cache = _paged(prefix=True)
    _run(cache, model, "a", prompt)
    hit, _ = _run(cache, model, "b", prompt)
    assert hit == 12  # not 16: the last block holds the last token, whose logits we need


def test_partial_hit_stops_at_the_first_different_block():
    model = _model()
    shared = _ids(8, 12)
    a, b = shared + _ids(9, 13), shared + _ids(9, 14)
    cache = _paged(prefix=True)
    _run(cache, model, "a", a)
    hit, out = _run(cache, model, "b", b)
    assert hit == 8
    expected = greedy_generate(model, torch.tensor([b]), 4, KVCache(CFG, 1, 21, device="cpu", dtype=torch.float32))
    assert torch.equal(out, expected)


def test_no_reuse_when_the_same_block_follows_a_different_prefix():
    model = _model()
    common = _ids(8, 15)
    cache = _paged(prefix=True)
    _run(cache, model, "a", _ids(4, 16) + common + [1])
    hit, _ = _run(cache, model, "b", _ids(4, 17) + common + [1])  # blocks 2-3 equal, block 1 differs
    assert hit == 0


def test_hits_are_rechecked_against_the_tokens(monkeypatch):
    monkeypatch.setattr(paged, "block_hash", lambda parent, tokens: 42)  # every block collides
    model = _model()
    cache = _paged(prefix=True)
    _run(cache, model, "a", _ids(9, 18))
    hit, _ = _run(cache, model, "b", _ids(9, 19))
    assert hit == 0  # same key, different tokens: a miss, not a wrong reuse


def test_finished_prefix_is_kept_then_evicted_least_recently_used_first():
    model = _model()
    cache = _paged(num_blocks=8, block_size=4, prefix=True)
    p1, p2 = _ids(9, 20), _ids(9, 21)
    _run(cache, model, "a", p1, n=1)  # 9 tokens: 3 blocks, 2 full prompt blocks registered
    cache.free_sequence("a")
    alloc = cache.allocator
    assert len(alloc.evictable) == 2 and alloc.num_free == 8
    hit, _ = _run(cache, model, "b", p1, n=1)  # comes back from the evictable list
    assert hit == 8 and len(alloc.evictable) == 0
    cache.free_sequence("b")
    _run(cache, model, "c", p2, n=1)
    cache.free_sequence("c")
    assert len(alloc.evictable) == 4 and len(alloc.free_blocks) == 4
    # A long sequence needs 6 blocks: the 4 never-hashed free blocks first, then the 2 oldest cached
    _run(cache, model, "d", _ids(22, 22), n=1)
    assert alloc.evictions == 2
    assert alloc.lookup(block_hash(None, p1[:4]), p1[:4]) is None      # p1, used longest ago, was evicted
    assert alloc.lookup(block_hash(None, p2[:4]), p2[:4]) is not None  # p2 survived
    cache.free_sequence("d")
    assert _run(cache, model, "e", p2, n=1)[0] == 8


def test_two_sequences_share_prefix_blocks_concurrently():
    model = _model()
    shared = _ids(12, 23)
    cache = _paged(prefix=True)
    _run(cache, model, "a", shared + [5, 6])
    hit, _ = _run(cache, model, "b", shared + [7, 8, 9])
    assert hit == 12
    cache.free_sequence("a")
    assert all(cache.allocator.ref_count[b] == 1 for b in cache.tables["b"][:3])  # still used by "b"
    with pytest.raises(ValueError, match="needs the prompt's token ids"):
        cache.add_sequence("c")


def test_prefix_allocator_register_keeps_the_first_block_for_a_key():
    alloc = PrefixBlockAllocator(4, 2)
    a, b = alloc.allocate(), alloc.allocate()
    assert alloc.register(a, 7, [1, 2]) and not alloc.register(b, 7, [1, 2])
    assert alloc.lookup(7, [1, 2]) == a and alloc.lookup(7, [1, 3]) is None
    alloc.decref(b)
    assert list(alloc.free_blocks)[-1] == b  # an unhashed block goes straight back to the free list


def test_reserve_grows_tables_all_or_nothing():
    cache = _paged(num_blocks=5, block_size=4)
    cache.add_sequence("a")
    cache.add_sequence("b")
    cache.reserve({"a": 5, "b": 1})
    assert [len(cache.tables[s]) for s in "ab"] == [2, 1]
    cache.reserve({"a": 8})  # still two blocks
    assert len(cache.tables["a"]) == 2
    with pytest.raises(PoolExhaustedError, match="3 more block"):
        cache.reserve({"a": 12, "b": 9})  # 1 + 2 blocks needed, 2 free
    assert [len(cache.tables[s]) for s in "ab"] == [2, 1] and cache.allocator.num_free == 2


# Attention over the block table (PagedKVCache.attend) against the padded gather and a contiguous cache

def _three_ways(cfg, dtype, prompts, passes, block_size=4):
    """Logits of every pass through a paged cache that attends over its blocks, one that gathers a
    padded copy, and one contiguous KVCache per row; and whether each pass took the block path."""
    torch.manual_seed(0)
    model = Transformer(cfg).to(dtype).eval()
    caches = {flag: PagedKVCache(cfg, num_blocks=64, block_size=block_size, device="cpu", dtype=dtype,
                                 block_attention=flag) for flag in (True, False)}
    alone = [KVCache(cfg, 1, 64, device="cpu", dtype=dtype) for _ in prompts]
    logits, took = {True: [], False: [], "alone": []}, []
    with torch.inference_mode():
        for row, prompt in enumerate(prompts):  # prefill each row alone
            ids, pos = torch.tensor([prompt]), torch.arange(len(prompt))[None]
            for flag, cache in caches.items():
                cache.add_sequence(row)
                cache.set_batch([row])
                logits[flag].append(model(ids, positions=pos, kv_cache=cache))
            logits["alone"].append(model(ids, positions=pos, kv_cache=alone[row]))
        ends = [len(p) for p in prompts]
        for ids in passes:  # then passes over every row at its own positions
            pos = torch.tensor(ends)[:, None] + torch.arange(ids.shape[1])
            for flag, cache in caches.items():
                cache.set_batch(list(range(len(prompts))))
                logits[flag].append(model(ids, positions=pos, kv_cache=cache))
            took.append(caches[True]._pairs is not None)
            logits["alone"].append(torch.cat([model(ids[r:r + 1], positions=pos[r:r + 1], kv_cache=alone[r])
                                              for r in range(len(prompts))]))
            ends = [e + ids.shape[1] for e in ends]
    return logits, took


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("extra", [dict(n_kv_heads=2), dict(n_kv_heads=4), dict(n_kv_heads=1),
                                   dict(n_kv_heads=2, qk_norm=True)], ids=["gqa", "mha", "mqa", "qk-norm"])
def test_attention_over_the_block_table_equals_the_padded_copy_and_a_contiguous_cache(extra, dtype, tol):
    cfg = ModelConfig(**{**TINY, **extra})
    prompts = [_ids(45, 1), _ids(3, 2), _ids(17, 3), _ids(9, 4)]  # very different lengths
    gen = torch.Generator().manual_seed(5)
    passes = [torch.randint(0, 256, (4, 2), generator=gen)]            # two new tokens per row
    passes += [torch.randint(0, 256, (4, 1), generator=gen) for _ in range(4)]  # decode steps
    logits, took = _three_ways(cfg, dtype, prompts, passes)
    assert took == [True] * 5  # every batched pass here reads fewer blocks than the padded copy
    for blocks, padded, alone in zip(logits[True], logits[False], logits["alone"]):
        torch.testing.assert_close(blocks.float(), padded.float(), atol=tol, rtol=0)
        torch.testing.assert_close(blocks.float(), alone.float(), atol=tol, rtol=0)


def test_a_long_batched_prefill_stays_with_the_padded_copy():
    # Two rows of 16 new tokens from position 0: every query would read its row's blocks again.
    prompts = [_ids(2, 1), _ids(5, 2)]
    logits, took = _three_ways(CFG, torch.float32, prompts, [torch.randint(0, 256, (2, 16))])
    assert took == [False]
    torch.testing.assert_close(logits[True][-1], logits["alone"][-1], atol=1e-4, rtol=0)


def test_a_sliding_window_model_keeps_the_padded_path(monkeypatch):
    cfg = ModelConfig(**{**TINY, "sliding_window": 6})
    prompts = [_ids(20, 1), _ids(3, 2)]
    original, answers = PagedKVCache.attend, []

    def attend(self, *args):  # asked with the window, it must decline
        answers.append((args[-1], original(self, *args)))
        return answers[-1][1]
    monkeypatch.setattr(PagedKVCache, "attend", attend)
    logits, _ = _three_ways(cfg, torch.float32, prompts, [torch.randint(0, 256, (2, 1))] * 3)
    for paged_, alone in zip(logits[True], logits["alone"]):
        torch.testing.assert_close(paged_, alone, atol=1e-4, rtol=0)
    assert answers and all(window == 6 and out is None for window, out in answers)


def test_attend_declines_one_row_and_writes_nothing_when_it_declines():
    cache, model = _paged(), _model()
    cache.add_sequence("a")
    cache.set_batch(["a"])
    calls = []
    original = cache.update
    cache.update = lambda *a: calls.append(a) or original(*a)
    k = torch.randn(1, CFG.n_kv_heads, 3, CFG.head_dim)
    cache.begin_forward(torch.arange(3)[None])
    assert cache.attend(0, torch.arange(3)[None], torch.randn(1, CFG.n_heads, 3, CFG.head_dim), k, k) is None
    assert calls == [] and not cache.pool.any()
    model(torch.tensor([[1, 2, 3]]), positions=torch.arange(3)[None], kv_cache=cache)
    assert len(calls) == CFG.n_layers  # the model then wrote through update(), once per layer


def test_prefix_blocks_completed_in_a_block_table_pass_are_registered_after_the_last_layer():
    model = _model()
    cache = _paged(prefix=True)
    prompt, other = _ids(10, 1), _ids(30, 2)
    cache.add_sequence("a", prompt)
    cache.add_sequence("b", other)
    for seq, ids in (("a", prompt[:7]), ("b", other)):
        cache.set_batch([seq])
        model(torch.tensor([ids]), positions=torch.arange(len(ids))[None], kv_cache=cache)
    assert len(cache.keys["a"]) == 1  # positions 0..6: one full block of 4
    seen = []
    original = cache._register_full_blocks
    cache._register_full_blocks = lambda: seen.append(cache._pairs is not None) or original()
    cache.set_batch(["a", "b"])  # "a" continues its prompt (position 7) while "b" decodes
    model(torch.tensor([prompt[7:8], [7]]), positions=torch.tensor([[7], [30]]), kv_cache=cache)
    assert seen == [True] and len(cache.keys["a"]) == 2  # once per pass, the block of 4..7 too
    # a later prompt that starts the same way reuses both blocks, with the same next token
    cache.add_sequence("c", prompt[:8] + [9, 9])
    assert cache.lengths["c"] == 8
    cache.set_batch(["c"])
    warm = model(torch.tensor([[9, 9]]), positions=torch.tensor([[8, 9]]), kv_cache=cache)[0, -1]
    cold = model(torch.tensor([prompt[:8] + [9, 9]]))[0, -1]
    torch.testing.assert_close(warm, cold, atol=1e-4, rtol=0)
