"""Benchmark: greedy decode tokens/s at batch 1, llmcore vs transformers' `generate`, same weights.

Run: python bench/decode.py [--model tiny-shape --model smollm2-135m | --model DIR] [--new-tokens 128]
                            [--prompt-len 16] [--repeat 3] [--threads N] [--dtype float32|bfloat16]

For each model, transformers builds a random-initialised LlamaForCausalLM of that shape and saves
it with save_pretrained; llmcore loads the same files through `llmcore.hf.load_pretrained`.
"tiny-shape" is the shape of the book's tiny model (scripts/train_tiny.py); pass the trained
checkpoint's DIR (config.json + safetensors) to load the real weights into both instead.
Both run in `--dtype` (float32 by default) on the CPU with the same thread count, alternately, `--repeat` times; the
median wall time of a whole generation (a prompt of `--prompt-len` tokens, then `--new-tokens`
tokens) gives tokens/s. The bandwidth roofline is the copy bandwidth measured in the same run
divided by the bytes of weights a decode step reads (every matmul weight, once); the copy
bandwidth counts the bytes read and the bytes written (STREAM's convention).
"llmcore" is the model as loaded plus `llmcore.profile.prepare_for_decode` (chapter 5: q/k/v and
gate/up products fused, weights prepacked by oneDNN); "llmcore, split products" uses chapter 5's
first fix only (`split_matvec_linears`), and "llmcore, plain nn.Linear" is the model as loaded, so
the sources of the difference can be told apart.
Targets (issue "Chapters 05-06"): llmcore >= 2x transformers and >= 60% of the roofline.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from llmcore.hf import load_pretrained  # noqa: E402
from llmcore.kvcache import KVCache, greedy_generate  # noqa: E402
from llmcore.profile import (matmul_weights, measure_copy_bandwidth, prepare_for_decode,  # noqa: E402
                             split_matvec_linears)

SHAPES = {  # HF config.json fields of the random models
    "smollm2-135m": dict(vocab_size=49152, hidden_size=576, intermediate_size=1536, num_hidden_layers=30,
                         num_attention_heads=9, num_key_value_heads=3, rms_norm_eps=1e-5, rope_theta=100000.0,
                         max_position_embeddings=8192, tie_word_embeddings=True),
    "tiny-shape": dict(vocab_size=4096, hidden_size=256, intermediate_size=688, num_hidden_layers=6,
                       num_attention_heads=8, num_key_value_heads=2, rms_norm_eps=1e-5,
                       max_position_embeddings=1024, tie_word_embeddings=True),  # scripts/train_tiny.py
}


def checkpoint(name: str, workdir: Path) -> Path:
    """A checkpoint directory: `name` itself if it is one, else a random model of shape `name`."""
    if Path(name).is_dir():
        return Path(name)
    if name not in SHAPES:
        raise SystemExit(f"--model {name!r}: use a checkpoint directory or one of {sorted(SHAPES)}")
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SHAPES[name]))
    path = workdir / name
    model.save_pretrained(path, safe_serialization=True)
    return path


def run_llmcore(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    cache = KVCache(model.cfg, batch_size=1, max_len=prompt.shape[1] + new_tokens, device="cpu",
                    dtype=model.embed.weight.dtype)
    return greedy_generate(model, prompt, new_tokens, cache)


def run_transformers(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                             do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[:, prompt.shape[1]:]


def bench(name: str, args, workdir: Path, bandwidth: float) -> None:
    from transformers import AutoModelForCausalLM
    path = checkpoint(name, workdir)
    dtype = getattr(torch, args.dtype)
    ours = load_pretrained(path, device="cpu", dtype=dtype)
    theirs = AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
    theirs.generation_config.eos_token_id = None  # random weights: never stop early, on either side
    prompt = torch.randint(0, ours.cfg.vocab_size, (1, args.prompt_len), generator=torch.Generator().manual_seed(0))

    plain = load_pretrained(path, device="cpu", dtype=dtype)
    split = split_matvec_linears(load_pretrained(path, device="cpu", dtype=dtype))
    peers = [("transformers", run_transformers, theirs), ("llmcore, plain nn.Linear", run_llmcore, plain),
             ("llmcore, split products", run_llmcore, split), ("llmcore", run_llmcore, prepare_for_decode(ours))]
    for _, fn, model in peers:  # warm up
        fn(model, prompt, 8)
    times, tokens = {peer: [] for peer, _, _ in peers}, {}
    for _ in range(args.repeat):  # alternate, so all peers see the same background load
        for peer, fn, model in peers:
            start = time.perf_counter()
            tokens[peer] = fn(model, prompt, args.new_tokens)
            times[peer].append(time.perf_counter() - start)

    weight_bytes = matmul_weights(ours.cfg) * dtype.itemsize
    roofline = bandwidth / weight_bytes  # tokens/s if a step cost nothing but reading the weights
    rate = {peer: args.new_tokens / statistics.median(t) for peer, t in times.items()}
    print(f"\n== {name}: {ours.num_parameters() / 1e6:.1f}M parameters, {weight_bytes / 1e6:.0f} MB of "
          f"{args.dtype} weights read per step; prompt {args.prompt_len}, {args.new_tokens} new tokens, batch 1")
    for peer, _, _ in peers[1:]:
        same = torch.equal(tokens[peer], tokens["transformers"])
        diff = "" if same else f" (first difference at token {int((tokens[peer] != tokens['transformers']).int().argmax())})"
        print(f"{peer}: same greedy tokens as transformers: {same}{diff}")
    print(f"bandwidth roofline                       : {roofline:7.1f} tok/s")
    for peer, _, _ in peers:
        print(f"{peer:<25} (median of {args.repeat}) : {rate[peer]:7.1f} tok/s   "
              f"{rate[peer] / roofline:6.1%} of roofline   (best {args.new_tokens / min(times[peer]):.1f} tok/s)")
    ratio, frac = rate["llmcore"] / rate["transformers"], rate["llmcore"] / roofline
    print(f"llmcore / transformers                   : {ratio:.2f}x   target >= 2x: {'met' if ratio >= 2 else 'MISSED'}")
    print(f"llmcore / roofline                       : {frac:.0%}    target >= 60%: {'met' if frac >= 0.6 else 'MISSED'}")
    print(f"  llmcore streams its weights at {rate['llmcore'] * weight_bytes / 1e9:.1f} GB/s; the copy moved "
          f"{bandwidth / 1e9:.1f} GB/s counting what it read and wrote ({bandwidth / 2e9:.1f} GB/s of reads). "
          f"Weights that fit in the last-level cache can beat the roofline.")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", action="append", help="tiny-shape, smollm2-135m, or a checkpoint directory "
                        "(repeatable; default: tiny-shape and smollm2-135m)")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="weights and activations of both peers (the targets are stated for float32)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)  # one process: llmcore and transformers use the same threads
    warnings.filterwarnings("ignore")

    import transformers
    bandwidth = measure_copy_bandwidth("cpu", repeats=9)
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, "
          f"torch {torch.__version__}, transformers {transformers.__version__}")
    print(f"copy bandwidth (read + write counted): {bandwidth / 1e9:.1f} GB/s")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.model or ["tiny-shape", "smollm2-135m"]:
            bench(name, args, Path(tmp), bandwidth)


if __name__ == "__main__":
    main()
