"""Appendix E's Triton kernels (llmcore.triton_attention) through Triton's interpreter
on the CPU: FlashAttention's forward against SDPA, the paged decode kernel and its
split-K variant against the blocks gathered through the table then SDPA and against
chapter 6's PagedKVCache.attend, the engine decoding through the kernel (TritonKVPool)
against KVPool, and the wrappers' refusals. Small shapes that still cover the edges
(partial tiles, shuffled block tables with holes, one-token contexts, GQA groups 1 and
4, head dims 64, 80 and 128, empty split-K partitions): the interpreter runs every
program in Python. Skipped, saying why, where triton is not installed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

# runs Triton kernels through its interpreter (the slow tier)
pytestmark = pytest.mark.slow

if not torch.cuda.is_available():  # the interpreter, set before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton", reason='triton is not installed (an optional '
                    'dependency: pip install "llmcore-book[triton]")')

from llmcore import triton_attention as ta  # noqa: E402
from llmcore.model import ModelConfig  # noqa: E402
from llmcore.paged import PagedKVCache  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVICE = "cpu" if ta.INTERPRETED else "cuda"
ATOL = 1e-4  # float32
STEP16 = {torch.bfloat16: 2**-7, torch.float16: 2**-10}  # grid step in [1, 2)


def _randn(gen, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(dtype).to(DEVICE)


def sdpa_reference(q, k, v, causal):
    """SDPA in float32, the queries aligned to the last keys."""
    m, n = q.shape[-2], k.shape[-2]
    mask = (torch.ones(m, n, dtype=torch.bool, device=q.device).tril(n - m)
            if causal else None)
    return F.scaled_dot_product_attention(q.float(), k.float(), v.float(),
                                          attn_mask=mask, enable_gqa=True)


def _close(got, want, dtype):
    """float32 within ATOL; 16-bit within two steps of its grid (|out| < 4) of the
    float32 reference rounded to that dtype."""
    if dtype == torch.float32:
        return float((got - want).abs().max())
    err = float((got.float() - want.to(dtype).float()).abs().max())
    assert err <= 4 * STEP16[dtype], err
    return 0.0


# (batch, n_heads, n_kv_heads, q_len, kv_len, head_dim, causal, dtype, block_m, block_n)
FLASH = [
    (1, 2, 2, 37, 37, 64, True, torch.float32, None, None),
    (2, 4, 1, 19, 53, 128, True, torch.float32, None, None),  # the last 19 of 53
    (1, 2, 2, 70, 45, 64, False, torch.float32, None, None),
    (1, 4, 1, 1, 33, 64, True, torch.float32, None, None),  # one query
    (1, 2, 1, 16, 24, 80, False, torch.float32, None, None),  # head_dim 80
    (1, 4, 4, 50, 50, 64, True, torch.float32, 16, 16),  # many tiles; skipped ones
    (1, 4, 1, 33, 33, 64, True, torch.bfloat16, None, None),
    (1, 2, 2, 40, 40, 128, True, torch.float16, None, None),
]


@pytest.mark.parametrize("case", FLASH, ids=lambda c: "-".join(map(str, c[:8])))
def test_flash_forward_equals_sdpa(case):
    b, h, hk, m, n, d, causal, dtype, bm, bn = case
    gen = torch.Generator().manual_seed(m * n + d)
    q = _randn(gen, b, h, m, d, dtype=dtype)
    k, v = (_randn(gen, b, hk, n, d, dtype=dtype) for _ in "kv")
    got = ta.flash_attention(q, k, v, causal=causal, block_m=bm, block_n=bn)
    assert got.dtype == dtype and got.shape == q.shape
    assert _close(got, sdpa_reference(q, k, v, causal), dtype) < ATOL


def test_flash_forward_takes_strided_heads_and_a_scale():
    """q as a view of a (batch, seq, heads, head_dim) projection, as the model has it;
    and an explicit scale."""
    gen = torch.Generator().manual_seed(1)
    q = _randn(gen, 1, 21, 4, 64).transpose(1, 2)  # not contiguous: strides passed
    k, v = (_randn(gen, 1, 21, 2, 64).transpose(1, 2) for _ in "kv")
    got = ta.flash_attention(q, k, v, causal=True, scale=0.05)
    want = sdpa_reference(q * (0.05 * 64**0.5), k, v, True)
    assert float((got - want).abs().max()) < ATOL


def paged_case(gen, lens, n_heads, n_kv, head_dim, block_size, dtype, num_blocks=None):
    """A pool of random keys; the tables' blocks shuffled (out of order, with holes:
    blocks no sequence owns), each row one block wider than its context needs."""
    width = max(-(-n // block_size) for n in lens) + 1
    num_blocks = num_blocks or len(lens) * width + 4
    k_cache, v_cache = (_randn(gen, n_kv, num_blocks * block_size, head_dim,
                               dtype=dtype) for _ in "kv")
    owned = torch.randperm(num_blocks, generator=gen)[:len(lens) * width]
    tables = owned.view(len(lens), width).int().to(DEVICE)
    q = _randn(gen, len(lens), n_heads, head_dim, dtype=dtype)
    return q, k_cache, v_cache, tables, torch.tensor(lens, device=DEVICE)


def paged_reference(q, k_cache, v_cache, tables, lens, block_size):
    """Each sequence's keys gathered through its table, then SDPA in float32."""
    rows = []
    for i, n in enumerate(lens.tolist()):
        pos = torch.arange(n, device=q.device)
        slots = tables[i, pos // block_size].long() * block_size + pos % block_size
        k, v = k_cache[:, slots].float(), v_cache[:, slots].float()
        rows.append(F.scaled_dot_product_attention(
            q[i, :, None].float()[None], k[None], v[None], enable_gqa=True)[0, :, 0])
    return torch.stack(rows)


# (context lengths, n_heads, n_kv_heads, head_dim, block_size, dtype)
PAGED = [
    ([1, 37, 80], 4, 1, 64, 16, torch.float32),  # a one-token context, group 4
    ([5, 64, 17], 2, 2, 128, 8, torch.float32),  # group 1, head_dim 128
    ([1], 4, 4, 64, 16, torch.float32),  # a batch of one one-token context
    ([30, 9], 8, 2, 64, 5, torch.float32),  # block_size 5: tiles straddle blocks
    ([100, 3], 8, 2, 64, 16, torch.bfloat16),
]


@pytest.mark.parametrize("partition", [None, 16, 32], ids=["one-pass", "split16",
                                                            "split32"])
@pytest.mark.parametrize("case", PAGED, ids=lambda c: "-".join(map(str, c)))
def test_paged_decode_equals_the_gathered_reference(case, partition):
    lens, h, hk, d, bs, dtype = case
    gen = torch.Generator().manual_seed(sum(lens) + d + bs)
    q, kc, vc, tables, lens_t = paged_case(gen, lens, h, hk, d, bs, dtype)
    got = ta.paged_decode(q, kc, vc, tables, lens_t, bs, partition_size=partition)
    assert got.dtype == dtype and got.shape == q.shape
    want = paged_reference(q, kc, vc, tables, lens_t, bs)
    assert _close(got, want, dtype) < ATOL


def test_split_k_partitions_past_a_short_context_are_empty_and_harmless():
    """Contexts 1 and 70 in partitions of 16: the first sequence's partitions 1 .. 4
    hold nothing (max -inf, weight 0); int64 tables and max_context given."""
    gen = torch.Generator().manual_seed(7)
    q, kc, vc, tables, lens = paged_case(gen, [1, 70], 4, 2, 64, 16, torch.float32)
    got = ta.paged_decode(q, kc, vc, tables.long(), lens, 16, partition_size=16,
                          max_context=70)
    want = paged_reference(q, kc, vc, tables, lens, 16)
    assert float((got - want).abs().max()) < ATOL
    # the one-token context's answer is its only value, for every head
    only = vc[:, tables[0, 0].long() * 16].float()  # (n_kv, d)
    assert torch.allclose(got[0].float(), only.repeat_interleave(2, 0), atol=ATOL)


def chapter6_attend(q, k_cache, v_cache, tables, lens, block_size):
    """Chapter 6's PagedKVCache.attend over the same pool and tables."""
    (b, h, d), hk = q.shape, k_cache.shape[0]
    cfg = ModelConfig(vocab_size=8, dim=h * d, n_layers=1, n_heads=h, n_kv_heads=hk,
                      hidden_dim=8, max_position_embeddings=4096)
    cache = PagedKVCache(cfg, k_cache.shape[1] // block_size, block_size,
                         device=q.device, dtype=q.dtype)
    cache.pool[0, 0], cache.pool[0, 1] = k_cache, v_cache
    for i, n in enumerate(lens.tolist()):  # the tables as they are (no allocation)
        cache.add_sequence(i)
        cache.tables[i] = tables[i, :-(-n // block_size)].tolist()
    cache.set_batch(list(range(b)))
    positions = (lens - 1)[:, None]
    cache.begin_forward(positions)
    slots = (tables.long().gather(1, positions // block_size) * block_size
             + positions % block_size)[:, 0]  # the last token, written again
    k_new = k_cache[:, slots].transpose(0, 1)[:, :, None]
    v_new = v_cache[:, slots].transpose(0, 1)[:, :, None]
    return cache.attend(0, positions, q[:, :, None], k_new, v_new)[:, :, 0]


@pytest.mark.parametrize("partition", [None, 32])
def test_paged_decode_equals_chapter_6s_attend(partition):
    gen = torch.Generator().manual_seed(3)
    q, kc, vc, tables, lens = paged_case(gen, [1, 37, 80], 8, 2, 64, 16,
                                         torch.float32)
    got = ta.paged_decode(q, kc, vc, tables, lens, 16, partition_size=partition)
    twin = chapter6_attend(q, kc, vc, tables, lens, 16)
    assert float((got - twin).abs().max()) < ATOL


def test_the_engine_decodes_through_the_kernel_with_kvpools_tokens():
    """Engine(kv_pool=TritonKVPool): the one-token rows through paged_decode (one pass,
    and split-K with chunked prefill and prefix caching) give KVPool's greedy tokens on
    the tiny model."""
    from llmcore.engine import Engine
    from llmcore.model_runner import KVPool
    from llmcore.pretrained import load
    from llmcore.request import Request
    from llmcore.sampling import SamplingParams
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        model, tokenizer = load("tiny", device=DEVICE, dtype=torch.float32)
        prompts = ["def fibonacci(n):\n", "class Stack:\n    def __init__(self):\n",
                   "import os\n"]

        def replies(pool, **options):
            engine = Engine(model, num_blocks=32, block_size=4, max_batch=4,
                            kv_pool=pool, **options)
            for i, text in enumerate(prompts):
                engine.add_request(Request(i, tokenizer.encode(text), SamplingParams(
                    temperature=0.0, max_tokens=5)))
            done = {c.request_id: c.output_ids for c in engine.run()}
            assert isinstance(engine.runner.kv, pool)
            assert engine.blocks.num_free == 32
            return done

        class Split(ta.TritonKVPool):
            partition_size = 16

        plain = replies(KVPool)
        assert replies(ta.TritonKVPool) == plain
        assert replies(Split, token_budget=8, prefix_caching=True) == plain
    finally:
        torch.set_num_threads(threads)


# ----------------------------------------------------------------------- refusals
def _flash_args(**changes):
    gen = torch.Generator().manual_seed(0)
    args = {"q": _randn(gen, 1, 4, 8, 16), "k": _randn(gen, 1, 2, 8, 16),
            "v": _randn(gen, 1, 2, 8, 16)}
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, message", [
    ({"q": torch.zeros(4, 8, 16)}, "q must be a 4-d tensor"),
    ({"k": torch.zeros(1, 2, 8, 16, dtype=torch.float64)}, "share one dtype"),
    ({"k": torch.zeros(1, 2, 8, 32)}, "k and v must be"),
    ({"k": torch.zeros(1, 3, 8, 16), "v": torch.zeros(1, 3, 8, 16)}, "multiple of"),
    ({"q": torch.zeros(1, 4, 8, 32)[..., ::2]}, "must be contiguous"),
    ({"q": torch.zeros(1, 4, 9, 16), "causal": True}, "fewer keys"),
    ({"block_m": 24}, "power of two"),
])
def test_flash_forward_refuses_bad_input(changes, message):
    args = _flash_args(**{k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v)
                          for k, v in changes.items()})
    with pytest.raises(ValueError, match=message):
        ta.flash_attention(**args)


def _paged_args(**changes):
    gen = torch.Generator().manual_seed(0)
    q, kc, vc, tables, lens = paged_case(gen, [5, 20], 4, 2, 16, 4, torch.float32,
                                         num_blocks=12)
    args = {"q": q, "k_cache": kc, "v_cache": vc, "block_tables": tables,
            "context_lens": lens, "block_size": 4}
    args.update(changes)
    return args


@pytest.mark.parametrize("changes, message", [
    ({"q": torch.zeros(2, 4, 1, 16)}, "one query per sequence"),
    ({"k_cache": torch.zeros(2, 48)}, "one layer of the pool"),
    ({"v_cache": torch.zeros(2, 48, 16, dtype=torch.bfloat16)}, "share one dtype"),
    ({"block_tables": torch.zeros(2, 6)}, "int32 or int64"),
    ({"block_tables": torch.zeros(6, dtype=torch.int32)}, "2-d int32"),
    ({"context_lens": torch.tensor([5, 20, 3])}, "one row per sequence"),
    ({"context_lens": torch.tensor([0, 20])}, "context_lens must lie in"),
    ({"context_lens": torch.tensor([5, 99])}, "context_lens must lie in"),
    ({"block_size": 5}, "block_size must be a positive int dividing"),
    ({"block_tables": torch.tensor([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, 12, 0]],
                                   dtype=torch.int32)}, r"block_tables\[1, 4\] = 12"),
    ({"block_tables": torch.tensor([[0, -1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 0]],
                                   dtype=torch.int32)}, r"block_tables\[0, 1\] = -1"),
    ({"q": torch.zeros(2, 4, 32)[..., ::2]}, "must be contiguous"),
    ({"partition_size": 24}, "multiple of the key tile"),
    ({"k_cache": torch.zeros(3, 48, 16), "v_cache": torch.zeros(3, 48, 16)},
     "multiple of n_kv_heads"),
])
def test_paged_decode_refuses_bad_input(changes, message):
    args = _paged_args(**{k: (v.to(DEVICE) if isinstance(v, torch.Tensor) else v)
                          for k, v in changes.items()})
    with pytest.raises(ValueError, match=message):
        ta.paged_decode(**args)


def test_a_table_entry_past_the_context_is_never_read():
    """Only the blocks a context covers are checked (and read): the rest of a row
    may hold anything, e.g. an engine's padding."""
    args = _paged_args()
    tables = args["block_tables"].clone()
    tables[0, 2:] = 999  # context 5 in blocks of 4 uses entries 0 and 1
    got = ta.paged_decode(**{**args, "block_tables": tables})
    want = paged_reference(args["q"], args["k_cache"], args["v_cache"],
                           args["block_tables"], args["context_lens"], 4)
    assert float((got - want).abs().max()) < ATOL


@pytest.mark.skipif(not ta.INTERPRETED, reason="on a GPU the CPU check does not apply")
def test_cpu_tensors_without_the_interpreter_are_refused(monkeypatch):
    monkeypatch.setattr(ta, "INTERPRETED", False)
    with pytest.raises(ValueError, match="TRITON_INTERPRET=1"):
        ta.flash_attention(**_flash_args())


def test_without_triton_the_import_says_how_to_install_it():
    code = ("import sys; sys.modules['triton'] = None\n"
            "try:\n    import llmcore.triton_attention\n"
            "except ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert 'pip install "llmcore-book[triton]"' in out.stdout, out.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter is for CPUs")
def test_switching_the_interpreter_on_after_triton_was_imported_is_refused():
    code = ("import os, triton\nos.environ['TRITON_INTERPRET'] = '1'\n"
            "try:\n    import llmcore.triton_attention\n"
            "except RuntimeError as err:\n    print(err)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**env, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert "before anything imports triton" in out.stdout, out.stderr


def test_only_triton_attention_imports_triton():
    importers = sorted(p.name for p in (ROOT / "llmcore").rglob("*.py")
                       if "import triton" in p.read_text())
    assert importers == ["triton_attention.py"]
