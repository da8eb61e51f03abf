"""Benchmark: time to first token with a prefix cache, warm vs cold, 90% of the prompt shared.

Run: python bench/prefix_cache.py [--model smollm2-135m|tiny-shape|DIR] [--prompt-len 1024] [--shared 0.9]
                                  [--block-size 16] [--repeat 5] [--threads N]

Every request is a prompt of `--prompt-len` tokens whose first `--shared` fraction is a system
prompt and the rest a user message of its own. TTFT = prefix lookup + prefill of what is not
cached + the greedy first token, through `llmcore.paged.PrefixCachingKVCache`. Cold requests
bring a system prompt the cache has never seen; warm ones share the system prompt of an
earlier, finished request. Cold and warm requests alternate; medians of `--repeat` are
compared, and the first tokens are checked against a cold run without prefix caching.
Target (issue "Chapters 05-06"): warm >= 5x faster than cold.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from llmcore.hf import config_from_hf, load_pretrained  # noqa: E402
from llmcore.kvcache import KVCache, greedy_generate  # noqa: E402
from llmcore.model import Transformer  # noqa: E402
from llmcore.paged import PrefixCachingKVCache  # noqa: E402

SHAPES = {  # HF config.json fields of the random models (as in bench/decode.py)
    "smollm2-135m": dict(architectures=["LlamaForCausalLM"], vocab_size=49152, hidden_size=576,
                         intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                         num_key_value_heads=3, rms_norm_eps=1e-5, rope_theta=100000.0,
                         max_position_embeddings=8192, tie_word_embeddings=True),
    "tiny-shape": dict(architectures=["LlamaForCausalLM"], vocab_size=4096, hidden_size=256,
                       intermediate_size=688, num_hidden_layers=6, num_attention_heads=8, num_key_value_heads=2,
                       rms_norm_eps=1e-5, max_position_embeddings=1024, tie_word_embeddings=True),
}


def build(name: str):
    if Path(name).is_dir():
        return load_pretrained(name, device="cpu", dtype=torch.float32)
    if name not in SHAPES:
        raise SystemExit(f"--model {name!r}: use a checkpoint directory or one of {sorted(SHAPES)}")
    torch.manual_seed(0)
    return Transformer(config_from_hf(SHAPES[name])).eval()  # random weights: speed does not depend on them


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--shared", type=float, default=0.9)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    model = build(args.model)
    cfg = model.cfg
    system_len = int(args.prompt_len * args.shared)
    gen = torch.Generator().manual_seed(0)

    def tokens(n: int) -> list[int]:
        return torch.randint(0, cfg.vocab_size, (n,), generator=gen).tolist()

    blocks = 4 * (-(-args.prompt_len // args.block_size) + 1)
    cache = PrefixCachingKVCache(cfg, num_blocks=blocks, block_size=args.block_size, device="cpu",
                                 dtype=torch.float32)

    def request(seq_id: str, system: list[int]) -> tuple[float, int, int]:
        prompt = system + tokens(args.prompt_len - system_len)
        start = time.perf_counter()
        hit = cache.add_sequence(seq_id, prompt)
        cache.set_batch([seq_id])
        first = greedy_generate(model, torch.tensor([prompt]), 1, cache, cached_len=hit)
        elapsed = time.perf_counter() - start
        cache.free_sequence(seq_id)
        plain = KVCache(cfg, 1, args.prompt_len, device="cpu", dtype=torch.float32)
        assert torch.equal(first, greedy_generate(model, torch.tensor([prompt]), 1, plain)), "wrong first token"
        return elapsed, hit, int(first)

    shared_system = tokens(system_len)
    request("warmup", shared_system)  # also puts the shared system prompt in the cache
    cold, warm, hits = [], [], []
    for i in range(args.repeat):  # alternate, so both see the same background load
        cold.append(request(f"cold{i}", tokens(system_len))[0])
        elapsed, hit, _ = request(f"warm{i}", shared_system)
        warm.append(elapsed)
        hits.append(hit)

    t_cold, t_warm = statistics.median(cold), statistics.median(warm)
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}")
    print(f"model {args.model}: {model.num_parameters() / 1e6:.1f}M parameters; prompts of {args.prompt_len} "
          f"tokens, first {system_len} shared; blocks of {args.block_size}")
    print(f"warm requests reuse {hits[0]} prompt tokens and prefill {args.prompt_len - hits[0]}; "
          f"first tokens identical to a run without prefix caching: True")
    print(f"TTFT cold (median of {args.repeat}) : {t_cold * 1e3:8.1f} ms")
    print(f"TTFT warm (median of {args.repeat}) : {t_warm * 1e3:8.1f} ms")
    ratio = t_cold / t_warm
    print(f"warm speed-up          : {ratio:.1f}x   target >= 5x: {'met' if ratio >= 5 else 'MISSED'}")


if __name__ == "__main__":
    main()
