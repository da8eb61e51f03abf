"""Train the book's tiny model and its draft model on the Python standard library. Seeded.

    python scripts/train_tiny.py                       # tokenizer + main + draft -> llmcore/data/
    python scripts/train_tiny.py --only tiny-draft     # retrain one model with the saved tokenizer
    python scripts/train_tiny.py --steps 20 --out /tmp/t   # a quick smoke run

The corpus is the standard library's source of the Python running this script (every reader
has it; no download). Top-level modules are split by name: every 20th in sorted order is
held out, and so are their tests. The tokenizer (byte-level BPE, 4,096 tokens, `<|endoftext|>`
between files) learns from the library's source; the models learn from the source and the test
suite (`Lib/test`; Debian-based Pythons ship it separately, as python3.X-testsuite). Both are
trained with llmcore's own code, then saved in the Hugging Face layout
(config.json + model.safetensors, bf16; tokenizer.json), which transformers and llmcore both
load. `training.json` beside each model records the corpus hash, Python version, schedule, the
loss curve and the held-out scores. The shipped run's times are in training.json (2-core CPU,
bf16 autocast); a GPU takes minutes, and more `steps` buy a better model.
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict
from pathlib import Path

import torch

from llmcore.device import pick_device
from llmcore.model import ModelConfig, Transformer
from llmcore.pretrained import (EOT, Recipe, bits_per_byte, cross_entropy, lzma_bits_per_byte, save_pretrained,
                                stdlib_corpus, train)
from llmcore.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parent.parent
STRIDE = 128  # held-out windows of 256 tokens overlap by half: every scored token has >= 128 tokens of context

# The two models of the book: same tokenizer and recipe, the draft about ten times smaller.

MODELS = {
    "tiny": (ModelConfig(vocab_size=4096, dim=256, n_layers=6, n_heads=8, n_kv_heads=2, hidden_dim=688,
                         tie_word_embeddings=True, max_position_embeddings=1024, rope_theta=10000.0,
                         norm_eps=1e-5), Recipe(steps=9000, warmup=200)),
    "tiny-draft": (ModelConfig(vocab_size=4096, dim=96, n_layers=2, n_heads=4, n_kv_heads=1, hidden_dim=256,
                               tie_word_embeddings=True, max_position_embeddings=1024, rope_theta=10000.0,
                               norm_eps=1e-5), Recipe(steps=9000, warmup=200)),
}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "llmcore" / "data")
    parser.add_argument("--only", choices=sorted(MODELS), default=None)
    parser.add_argument("--steps", type=int, default=None, help="override the recipe (smoke runs)")
    parser.add_argument("--vocab-size", type=int, default=4096)
    args = parser.parse_args(argv)
    device = pick_device()

    corpus = stdlib_corpus()
    meta = corpus["meta"]
    print(f"corpus: Python {meta['python']}, library {meta['train_bytes'] / 1e6:.1f} MB in "
          f"{meta['train_files']} files, tests {meta['tests_bytes'] / 1e6:.1f} MB in {meta['tests_files']} files, "
          f"held-out {meta['heldout_bytes'] / 1e6:.2f} MB", flush=True)
    if not meta["tests_files"]:
        print("warning: this Python has no Lib/test; the models will see less text than the shipped ones",
              flush=True)
    tok_path = args.out / "tokenizer.llmcore.json"
    if args.only and tok_path.exists():
        tokenizer = Tokenizer.load(tok_path)
    else:
        t = time.perf_counter()
        tokenizer = Tokenizer.train(corpus["train"], args.vocab_size, pattern="gpt4", special_tokens=[EOT])
        meta["tokenizer_seconds"] = round(time.perf_counter() - t, 1)
        args.out.mkdir(parents=True, exist_ok=True)
        tokenizer.save(tok_path)
    encode = lambda text: torch.tensor(tokenizer.encode(text, allowed_special={EOT}), dtype=torch.long)
    train_ids, heldout_ids = encode(corpus["train"] + EOT + corpus["tests"]), encode(corpus["heldout"])
    meta.update(train_tokens=len(train_ids), heldout_tokens=len(heldout_ids))
    meta["lzma_bits_per_byte"] = round(lzma_bits_per_byte(corpus["heldout"]), 4)
    print(f"tokens: train {len(train_ids):,}, held-out {len(heldout_ids):,}; "
          f"lzma -9e on held-out: {meta['lzma_bits_per_byte']:.3f} bits/byte", flush=True)

    for name in [args.only] if args.only else list(MODELS):
        cfg, recipe = MODELS[name]
        if args.steps:
            recipe = Recipe(**{**asdict(recipe), "steps": args.steps})
        print(f"\n== {name}: {sum(p.numel() for p in Transformer(cfg).parameters()) / 1e6:.2f} M parameters, "
              f"{recipe.steps} steps of {recipe.batch}x{recipe.seq_len} tokens", flush=True)
        heldout_ce = lambda model: cross_entropy(model, heldout_ids, recipe.seq_len, STRIDE)  # noqa: E731
        model, curve, seconds = train(cfg, recipe, train_ids, device, log=lambda line: print(line, flush=True),
                                      evaluate=heldout_ce, eval_every=1500)
        ce = curve[-1]["heldout"]
        bpb = bits_per_byte(ce, len(heldout_ids), meta["heldout_bytes"])
        print(f"{name}: held-out {ce:.4f} nats/token, {bpb:.3f} bits/byte "
              f"(lzma {meta['lzma_bits_per_byte']:.3f}) after {seconds / 60:.1f} min", flush=True)
        save_pretrained(model, tokenizer, args.out / name, {
            "model": name, "config": asdict(cfg), "recipe": asdict(recipe), "corpus": meta,
            "device": str(device), "torch": torch.__version__, "train_seconds": round(seconds, 1),
            "heldout_nats_per_token": round(ce, 4), "heldout_bits_per_byte": round(bpb, 4), "heldout_stride": STRIDE,
            "loss_curve": curve,
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
