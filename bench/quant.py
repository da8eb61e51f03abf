"""Benchmark: batch-1 greedy decode of weight-only quantized models (appendix C),
llmcore float32 / bfloat16 / int8 / int4 through FastDecoder vs torchao's int8.

Run: python bench/quant.py [--shape tiny|smollm2-135m-instruct|qwen2.5-0.5b ...]
                           [--new-tokens 64] [--prompt-len 16] [--repeat 3]
                           [--threads N] [--quick] [--transformers] [--json FILE]

"smollm2-135m-instruct" is the real model: SmolLM2-135M-Instruct's GGUF file (found by
`llmcore.pretrained.locate`, installed by `make`), dequantized to float32 by appendix C's
reader, decoding a real chat prompt (bench/decode.py's), so that the tokens compared
below are the real model's and a quantized peer's agreement with float32 means what it
says. Every other shape is an llmcore `Transformer` built from its `ModelConfig` (the HF
config.json fields of bench/decode.py, or the bundled tiny model's config.json) with
random weights (torch.manual_seed(0)) and a random prompt; "smollm2-135m" is the random
model of the real one's shape. Every peer is made from that one model:

- llmcore float32, bfloat16 (a cast copy), int8 (`llmcore.quant.quantize(model,
  "int8")`: a scale per output row) and int4 (`quantize(model, "int4", 32)`), each
  wrapped in `llmcore.fast.FastDecoder`, whose compiled decode step calls
  `QuantLinear.streamed`; plus int8 quantized from the bfloat16 copy (bfloat16 scales
  and activations), the like-for-like peer of torchao's bfloat16 path;
- torchao int8 weight-only (`quantize_(copy, Int8WeightOnlyConfig())`: per-row
  symmetric int8, llmcore's int8 scheme) on a float32 copy and on the bfloat16 copy,
  each run through the same FastDecoder graph (the quantized layers call `F.linear` on
  torchao's weight inside it), so that only the linear layers differ from llmcore's.
  With bfloat16 activations the compiler rewrites torchao's product into
  `aten._weight_int8pack_mm` (its CPU int8 kernel); with float32 activations it has no
  such rewrite and converts the weight to float32 before a matmul at every step;
- `--transformers`: transformers' quantized loading, `from_pretrained(...,
  quantization_config=TorchAoConfig(Int8WeightOnlyConfig()))` of the same weights,
  eager `generate` (transformers leaves the tied output layer unquantized).

Each peer lives in its own process (spawned, one after the other, each building the
same model from the same seed and compiling its own step), as a user who loads one
model gets it: in one process, every compiled model of the same shape and dtype adds an
entry to one compiled function, and each step pays the guard checks of the entries
before its own. All peers decode the same random prompt (`--prompt-len` tokens), then
`--new-tokens` tokens, greedy, in `--repeat` rounds; each round measures the read
bandwidth (`llmcore.profile.measure_read_bandwidth`, a sum over 512 MiB, in the parent
while the peers wait) and then times every peer in turn, so that all of them and their
ceiling see the same background load. For each peer it prints tok/s (median of
rounds), the bytes a step reads (`llmcore.quant.weight_bytes`; the same count from the
tensors for torchao's layers), the roofline (read bandwidth / bytes), the % of it, and
the speed-up over llmcore float32 beside the roofline's prediction (the bytes ratio);
ratios are taken within a round, then the median. Tokens are compared with llmcore
float32's (quantization may change them) and torchao's with llmcore int8's of the same
activations (the same rounding).
Targets (issue 30, SmolLM2-135M, the real weights or the shape): int8 >= 1.7x and int4 >= 2.5x llmcore float32
tok/s, each >= 70% of its own roofline; llmcore int8 ahead of torchao int8.
torchao is the bench's extra: `pip install --no-deps torchao==0.18.0` (bench/README.md);
without it the torchao rows are skipped, and the output says so.
"""
from __future__ import annotations

import argparse
import copy
import importlib.metadata
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from decode import ARCHITECTURES, SHAPES as HF_SHAPES, real_prompt  # noqa: E402
from llmcore.gguf_file import open_gguf  # noqa: E402
from llmcore.fast import FastDecoder  # noqa: E402
from llmcore.hf import config_from_hf  # noqa: E402
from llmcore.kvcache import KVCache, greedy_generate  # noqa: E402
from llmcore.model import Transformer  # noqa: E402
from llmcore.generate import default_eos_ids  # noqa: E402
from llmcore.pretrained import hf_config, load_model, load_tokenizer, locate  # noqa: E402
from llmcore.profile import measure_read_bandwidth, parameter_count  # noqa: E402
from llmcore.quant import quantize, weight_bytes  # noqa: E402
from tokenizer_train import cpu_name  # noqa: E402

TORCHAO_PIN = "0.18.0"
TARGET_SHAPES = ("smollm2-135m-instruct", "smollm2-135m")  # the real model, its shape
REAL = "smollm2-135m-instruct"
TARGETS = {"int8": 1.7, "int4": 2.5}  # x llmcore float32 tok/s
ROOF_TARGET = 0.70


def shapes() -> dict[str, dict]:
    """HF config.json fields of each shape (architectures included)."""
    tiny = json.loads((ROOT / "llmcore" / "data" / "tiny" / "config.json").read_text())
    out = {"tiny": tiny}
    for name in ("smollm2-135m", "qwen2.5-0.5b"):
        arch = ARCHITECTURES.get(name, "Llama")
        out[name] = {**HF_SHAPES[name], "architectures": [f"{arch}ForCausalLM"],
                     "model_type": arch.lower()}
    return {REAL: None, **out}  # the real model's config comes from its file


def real_config(name: str) -> dict:
    """The HF config.json fields of a real model, from its GGUF header (no weights)."""
    eos = max(default_eos_ids(load_tokenizer(name)))  # config.json's; never stops a run
    return {**hf_config(open_gguf(locate(name)).config, eos), "llmcore_real": name}


class TorchaoLinear(nn.Module):
    """A torchao-quantized nn.Linear, called by FastDecoder's compiled step through
    `streamed`, like a QuantLinear: F.linear on torchao's weight inside the graph.
    Not an nn.Linear, so FastDecoder's few-rows path calls it as it is, too."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.linear = linear

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)

    def streamed(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.linear.weight, self.linear.bias)


def torchao_int8(model: nn.Module) -> nn.Module:
    """A copy of `model` with torchao's int8 weight-only layers, for FastDecoder.
    set_inductor_config=False: torchao would otherwise change the compiler's global
    settings (Triton tuning options) for every peer compiled after it."""
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    out = copy.deepcopy(model)
    quantize_(out, Int8WeightOnlyConfig(set_inductor_config=False))
    for parent in list(out.modules()):
        for name, child in parent.named_children():
            if isinstance(child, nn.Linear):
                setattr(parent, name, TorchaoLinear(child))
    return out


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes a product reads of a weight: torchao's int8 tensors, codes and scales."""
    if hasattr(t, "qdata"):
        return t.qdata.nbytes + t.scale.nbytes
    return t.nbytes


def read_bytes(model: nn.Module) -> int:
    """weight_bytes' count for any module tree: every linear layer, one row of each
    embedding, every parameter of the other leaf modules (norms)."""
    total = 0
    for m in model.modules():
        if isinstance(m, nn.Linear):
            total += tensor_bytes(m.weight) + (0 if m.bias is None else m.bias.nbytes)
        elif isinstance(m, nn.Embedding):
            total += m.weight[0].nbytes
        elif not list(m.children()):
            total += sum(p.nbytes for p in m.parameters(recurse=False))
    return total


def run_llmcore(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    cache = KVCache(model.cfg, batch_size=1, max_len=prompt.shape[1] + new_tokens,
                    dtype=model.dtype)
    return greedy_generate(model, prompt, new_tokens, cache)


def run_transformers(model, prompt: torch.Tensor, new_tokens: int) -> torch.Tensor:
    with torch.inference_mode():
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                             max_new_tokens=new_tokens, do_sample=False,
                             eos_token_id=None, pad_token_id=0)
    return out[:, prompt.shape[1]:]


def transformers_torchao(model: Transformer, hf: dict, dtype: torch.dtype,
                         workdir: Path):
    """transformers' model of the same weights, loaded with TorchAoConfig (int8)."""
    from safetensors.torch import save_file
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import AutoModelForCausalLM, TorchAoConfig

    from transformers.utils import logging as hf_logging

    from llmcore.pretrained import hf_name

    hf_logging.disable_progress_bar()
    if not (workdir / "model.safetensors").is_file():  # once per shape
        workdir.mkdir(parents=True, exist_ok=True)
        state = {hf_name(k): v.detach().contiguous()
                 for k, v in model.state_dict().items()
                 if not (model.cfg.tie_word_embeddings and k == "lm_head.weight")}
        save_file(state, str(workdir / "model.safetensors"), metadata={"format": "pt"})
        (workdir / "config.json").write_text(json.dumps(hf) + "\n")
    config = TorchAoConfig(Int8WeightOnlyConfig(set_inductor_config=False))
    theirs = AutoModelForCausalLM.from_pretrained(workdir, dtype=dtype,
                                                  quantization_config=config).eval()
    theirs.generation_config.eos_token_id = None  # a fixed count of tokens, as ours
    return theirs


# key: (label, the peer whose tokens it is compared with, needs torchao, --transformers)
PEERS = {
    "fp32": ("llmcore float32", None, False, False),
    "bf16": ("llmcore bfloat16", "fp32", False, False),
    "int8": ("llmcore int8", "fp32", False, False),
    "int4": ("llmcore int4 (group 32)", "fp32", False, False),
    "int8-bf16": ("llmcore int8, bf16 activations", "fp32", False, False),
    "torchao": ("torchao int8", "int8", True, False),
    "torchao-bf16": ("torchao int8, bf16 activations", "int8-bf16", True, False),
    "hf-torchao": ("transformers + TorchAoConfig int8", "torchao", True, True),
    "hf-torchao-bf16": ("transformers + TorchAoConfig int8, bf16 act.", "torchao-bf16",
                        True, True),
}


def make_peer(key: str, hf: dict, workdir: Path):
    """The model of peer `key`, its runner, the bytes a step reads and a checksum of
    the float32 weights it was made from (every process must build the same)."""
    torch.manual_seed(0)
    if "llmcore_real" in hf:  # the real weights, dequantized from the GGUF file
        model = load_model(hf["llmcore_real"], device="cpu", dtype=torch.float32)
    else:
        model = Transformer(config_from_hf(hf)).eval()
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    if key == "fp32":
        return FastDecoder(model), run_llmcore, weight_bytes(model), checksum
    if key.startswith("hf-"):
        dtype = torch.bfloat16 if key.endswith("bf16") else torch.float32
        theirs = transformers_torchao(model, hf, dtype, workdir / "hf")
        return theirs, run_transformers, read_bytes(theirs), checksum
    if key.endswith("bf16"):
        model = model.to(torch.bfloat16)
    if key.startswith("torchao"):
        ao = torchao_int8(model)
        return FastDecoder(ao), run_llmcore, read_bytes(ao), checksum
    if key.startswith("int"):
        model = quantize(model, key[:4], group_size=32)
    return FastDecoder(model), run_llmcore, weight_bytes(model), checksum


def worker(conn, key: str, hf: dict, prompt: torch.Tensor, threads: int,
           workdir: Path) -> None:
    """One peer's process: build and warm up (the compiled step compiles here), say
    so, then time one generation of n tokens for every n received, until None."""
    torch.set_num_threads(threads)
    warnings.filterwarnings("ignore")
    try:
        peer, fn, nbytes, checksum = make_peer(key, hf, workdir)
        start = time.perf_counter()
        fn(peer, prompt, 8)
        warm = time.perf_counter() - start
        compiled = not isinstance(peer, FastDecoder) or peer.compile_steps
        conn.send(("ready", nbytes, checksum, warm, compiled))
        while (n := conn.recv()) is not None:
            start = time.perf_counter()
            tokens = fn(peer, prompt, n)
            conn.send((time.perf_counter() - start, tokens))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        return  # the parent has gone
    except Exception as err:  # reported by the parent, which goes on without this peer
        conn.send(("error", f"{type(err).__name__}: {err}"))


def first_difference(a: torch.Tensor, b: torch.Tensor) -> str:
    if torch.equal(a, b):
        return f"all {a.shape[1]}"
    return f"first {int((a != b).int().argmax())}"


def bench(name: str, hf: dict, args, have_torchao: bool, workdir: Path) -> dict:
    cfg = config_from_hf(hf)
    if "llmcore_real" in hf:
        prompt = torch.tensor([real_prompt(hf["llmcore_real"], args.prompt_len)])
    else:
        prompt = torch.randint(0, cfg.vocab_size, (1, args.prompt_len),
                               generator=torch.Generator().manual_seed(0))
    keys = [k for k, (_, _, ao, hf_peer) in PEERS.items()
            if (have_torchao or not ao) and (args.transformers or not hf_peer)]
    context = multiprocessing.get_context("spawn")
    procs, conns, nbytes, warm, failed, checksums = {}, {}, {}, {}, {}, set()
    for key in keys:  # one at a time: compiles and peaks of memory do not overlap
        conns[key], child = context.Pipe()
        procs[key] = context.Process(target=worker, daemon=True, args=(
            child, key, hf, prompt, args.threads, workdir / name))
        procs[key].start()
        child.close()
        try:
            reply = conns[key].recv()
        except EOFError:
            procs[key].join()
            reply = ("error", f"its process ended (exit code {procs[key].exitcode})")
        if reply[0] != "ready":
            failed[key] = reply[1]
            print(f"WARNING: {PEERS[key][0]}: {reply[1]}; left out")
            continue
        _, nbytes[key], checksum, warm[key], compiled = reply
        checksums.add(round(checksum, 3))
        if not compiled:
            print(f"WARNING: {PEERS[key][0]}: the compiled step failed and is off; its "
                  "figures are of the uncompiled path")
    if len(checksums) > 1:
        raise SystemExit(f"{name}: the peers' processes built different weights "
                         f"(checksums {sorted(checksums)})")
    keys = [k for k in keys if k not in failed]
    if "fp32" not in keys:
        raise SystemExit(f"{name}: llmcore float32 failed ({failed['fp32']})")

    labels = {k: PEERS[k][0] for k in keys}
    times, tokens, bandwidths = {k: [] for k in keys}, {}, []
    try:
        for _ in range(args.repeat):  # rounds: the ceiling, then every peer in turn
            bandwidths.append(measure_read_bandwidth("cpu", repeats=5))
            for key in keys:
                conns[key].send(args.new_tokens)
                reply = conns[key].recv()
                if reply[0] == "error":
                    raise SystemExit(f"{name}: {labels[key]} failed: {reply[1]}")
                times[key].append(reply[0])
                tokens[key] = reply[1]
    finally:
        for key, proc in procs.items():
            if proc.is_alive():
                try:
                    conns[key].send(None)
                except (BrokenPipeError, OSError):
                    pass
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()  # a child of this bench, by its own handle

    median = statistics.median
    rates = {k: [args.new_tokens / t for t in ts] for k, ts in times.items()}
    roof = {k: [bw / nbytes[k] for bw in bandwidths] for k in keys}
    frac = {k: median(r / c for r, c in zip(rates[k], roof[k])) for k in keys}
    speedup = {k: median(a / b for a, b in zip(rates[k], rates["fp32"])) for k in keys}

    def ratio(a: str, b: str) -> float | None:
        if a not in rates or b not in rates:
            return None
        return median(x / y for x, y in zip(rates[a], rates[b]))

    def show(value: float | None) -> str:
        return "n/a" if value is None else f"{value:.2f}x"

    print(f"\n== {name}: {parameter_count(cfg) / 1e6:.1f}M parameters "
          f"({'the real weights' if 'llmcore_real' in hf else 'random'}); prompt "
          f"{args.prompt_len}, {args.new_tokens} new tokens, batch 1, "
          f"greedy, median of {args.repeat} round(s)")
    print("read bandwidth per round (512 MiB sum): "
          + ", ".join(f"{bw / 1e9:.1f}" for bw in bandwidths) + " GB/s")
    print(f"{'peer':<46}{'MB/token':>9}{'tok/s':>8}{'roofline':>9}{'% roof':>7}"
          f"{'x fp32':>7}{'bytes x':>8}  same tokens as")
    for key in keys:
        same = PEERS[key][1]
        compared = "" if same is None or same not in tokens else (
            f"{labels[same].replace('llmcore ', '')}: "
            f"{first_difference(tokens[key], tokens[same])}")
        print(f"{labels[key]:<46}{nbytes[key] / 1e6:>9.1f}{median(rates[key]):>8.1f}"
              f"{median(roof[key]):>9.1f}{frac[key]:>7.0%}{speedup[key]:>6.2f}x"
              f"{nbytes['fp32'] / nbytes[key]:>7.2f}x  {compared}")
    print("(roofline: tok/s if a step only read its weights at the measured bandwidth; "
          "x fp32: tok/s over llmcore float32's; bytes x: the roofline's prediction)")
    print("compile + first 8 tokens: " + ", ".join(
        f"{k} {s:.0f} s" for k, s in warm.items()))
    if have_torchao:
        print(f"llmcore int8 / torchao int8, float32 activations : "
              f"{show(ratio('int8', 'torchao'))}")
        print(f"llmcore int8 / torchao int8, bf16 activations    : "
              f"{show(ratio('int8-bf16', 'torchao-bf16'))}")
        print(f"llmcore int8 (float32) / torchao's fastest (bf16): "
              f"{show(ratio('int8', 'torchao-bf16'))}")
        if args.transformers:
            print(f"llmcore int8 / transformers + TorchAoConfig      : "
                  f"{show(ratio('int8', 'hf-torchao'))} (float32), "
                  f"{show(ratio('int8-bf16', 'hf-torchao-bf16'))} (bf16)")
    else:
        print(f"torchao: SKIPPED (not installed: pip install --no-deps "
              f"torchao=={TORCHAO_PIN}); no torchao rows")

    verdicts = {}
    if name in TARGET_SHAPES:
        print(f"Targets (issue 30, {name}):")
        for fmt, target in TARGETS.items():
            if fmt not in rates:
                print(f"  {fmt}: NOT CHECKED (the peer failed)")
                continue
            for what, value, goal, shown in (
                    (f"{fmt} >= {target}x llmcore float32", speedup[fmt], target,
                     f"{speedup[fmt]:.2f}x"),
                    (f"{fmt} >= 70% of its roofline", frac[fmt], ROOF_TARGET,
                     f"{frac[fmt]:.0%}")):
                verdicts[what] = value >= goal
                verdict = "met" if value >= goal else "NOT MET"
                print(f"  {what:<40}: {shown:>6}  {verdict}")
        what = "llmcore int8 ahead of torchao int8"
        pairs = (ratio("int8", "torchao"), ratio("int8-bf16", "torchao-bf16"))
        if None not in pairs:
            verdicts[what] = min(pairs) > 1
            print(f"  {what:<40}: {pairs[0]:.2f}x (float32), {pairs[1]:.2f}x (bf16)  "
                  f"{'met' if min(pairs) > 1 else 'NOT MET'}")
        else:
            print(f"  {what:<40}: NOT CHECKED (no torchao figures)")
    else:
        print(f"(the targets are set for {' and '.join(TARGET_SHAPES)})")
    return {"shape": name, "prompt_len": args.prompt_len, "new_tokens": args.new_tokens,
            "repeat": args.repeat, "bandwidths_Bps": bandwidths, "bytes": nbytes,
            "labels": labels, "tok_s": rates, "rooflines_tok_s": roof,
            "fraction_of_roofline": frac, "speedup_over_fp32": speedup,
            "warm_s": warm, "failed": failed, "targets": verdicts,
            "same_tokens": {k: torch.equal(tokens[k], tokens[PEERS[k][1]])
                            for k in keys if PEERS[k][1] in tokens}}


def main() -> None:
    all_shapes = shapes()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", action="append", choices=sorted(all_shapes),
                        help="repeatable; default: tiny, smollm2-135m-instruct (the "
                        "real weights), qwen2.5-0.5b")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--quick", action="store_true",
                        help="the tiny shape, one round, 16 new tokens (a check that "
                        "it all runs)")
    parser.add_argument("--transformers", action="store_true",
                        help="add transformers + TorchAoConfig (eager generate)")
    parser.add_argument("--json", type=Path,
                        help="also write every figure to this file")
    args = parser.parse_args()
    if args.quick:
        args.shape, args.repeat, args.new_tokens = args.shape or ["tiny"], 1, 16
    for flag in ("new_tokens", "prompt_len", "repeat", "threads"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    torch.set_num_threads(args.threads)  # the bandwidth here; each peer sets its own
    warnings.filterwarnings("ignore")
    try:  # imported by the peers' processes only (a failed import leaves a peer out)
        ao_version, have_torchao = importlib.metadata.version("torchao"), True
    except importlib.metadata.PackageNotFoundError:
        ao_version, have_torchao = "not installed", False
    print(f"machine: {cpu_name()}, {torch.get_num_threads()} threads, torch "
          f"{torch.__version__}, torchao {ao_version}")
    if not have_torchao:
        print(f"torchao: SKIPPED, its rows and the 'ahead of torchao' target (install "
              f"the bench's extra: pip install --no-deps torchao=={TORCHAO_PIN})")
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.shape or ["tiny", REAL, "qwen2.5-0.5b"]:
            hf = all_shapes[name] or real_config(name)
            records.append(bench(name, hf, args, have_torchao, Path(tmp)))
    if args.json:
        meta = {"machine": cpu_name(), "threads": torch.get_num_threads(),
                "torch": torch.__version__, "torchao": ao_version}
        args.json.write_text(json.dumps({**meta, "results": records}, indent=1)
                             + "\n")


if __name__ == "__main__":
    main()
