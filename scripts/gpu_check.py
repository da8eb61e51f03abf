"""Run the book on a CUDA GPU in one command and keep every result (issue 17).

    python scripts/gpu_check.py                  # on a CUDA machine: under 10 minutes
    python scripts/gpu_check.py --dry-run        # the same steps, CPU, tiny shapes
    python scripts/gpu_check.py --steps env,measure --archive /tmp/gpu.tar.gz

Steps, each a subprocess with its own time budget (a failure or a timeout is recorded
and the next step runs; the whole run stops starting steps at --total-budget):

  env         versions (Python, torch, CUDA, transformers, llmcore, git commit), the
              packages the other steps import, the GPU's name, memory and bfloat16
              support, `nvidia-smi -q`
  measure     device copy bandwidth (several sizes) and matmul FLOP/s (fp32, tf32,
              bf16, fp16), then, on a 0.5B-class shape (Qwen2.5-0.5B's config, random
              weights): decode and prefill as points under the measured roofline
              (ch05), decode tok/s against the bandwidth floor as the context grows
              (ch06), bit differences and greedy flips between batch sizes (ch07), and
              the cost of a pass over n tokens relative to one (ch11)
  bench       bench/decode.py on the device in bfloat16 and float32 for the
              qwen2.5-0.5b and smollm2-135m shapes (llmcore vs transformers, the copy
              bandwidth measured in the same rounds)
  parallel    appendix D's tensor parallelism over NCCL on min(2, GPUs) ranks: the
              tiny model's logits against the single-process model (max |diff| < 1e-4),
              decode steps (batch 8, prompt 64, 32 steps) with every collective
              recorded: median step and collective time, their share, and the bytes
              of a step against 2 x n_layers x batch x dim x itemsize (+ the
              embedding's all-reduce and the logits' all-gather); with one GPU, NCCL
              cannot form 2 ranks, so the same runs also go over gloo on 2 CPU ranks
  kernels     appendix E's Triton kernels against PyTorch, bfloat16, 32 query heads
              over 8 kv heads of 128: flash_attention against SDPA's flash backend
              (causal, 1k-16k tokens) as FLOP/s, and paged_decode (one pass and
              split-K) against KVPool.attend (batch 16 and 64, contexts 1k-16k in
              shuffled blocks of 16) as bytes of K/V read per second, each against
              the device's measured peaks, outputs checked against the reference;
              --dry-run: the same through Triton's interpreter on tiny shapes
  cuda_tests  the `cuda`-marked tests
  tests       the test suite (all but the site build) with LLMCORE_DEVICE set
  notebooks   every chapter executed on the device into <results>/notebooks/ (the
              committed CPU outputs are never touched); errors listed per notebook;
              the outputs of the GPU-guarded cells copied to gpu_cells.json and PNGs

env, measure, bench, parallel and kernels run one at a time, so their timings see an
idle GPU; then cuda_tests, tests and notebooks run side by side (--jobs > 1).
Everything lands in one folder, printed at the end: summary.json and summary.md (each
step's status, seconds and headline figures), one JSON per figure, PNG plots, logs/,
junit XML. --archive writes that folder as one .tar.gz as well (the device tool brings
back at most 8 files).

--dry-run runs the same script on the CPU (LLMCORE_DEVICE=cpu, one thread, tiny shapes,
two notebooks, two test files) in under 3 minutes, so a GPU minute is never spent on a
bug of this script. The GPU machine needs nbclient, nbformat, ipykernel, nbval, fastapi,
uvicorn and openai besides torch and transformers; `env` lists what is missing.
"""
from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import traceback
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

STEPS = ("env", "measure", "bench", "parallel", "kernels", "cuda_tests", "tests",
         "notebooks")
# timings: the GPU to themselves
EXCLUSIVE = ("env", "measure", "bench", "parallel", "kernels")
BUDGETS = {  # seconds per step on a GPU machine
    "env": 30, "measure": 75, "bench": 180, "parallel": 45, "kernels": 60,
    "cuda_tests": 150, "tests": 330, "notebooks": 330,
}
DRY_BUDGETS = {
    "env": 60, "measure": 60, "bench": 90, "parallel": 60, "kernels": 60,
    "cuda_tests": 60, "tests": 90, "notebooks": 150,
}
DRY_NOTEBOOKS = ("00_setup", "03_embeddings")
DRY_TESTS = ("tests/test_device.py", "tests/test_cuda_paths.py")
# modules the steps import (the GPU image may lack some): import name -> package
NEEDED = {
    "torch": "torch", "transformers": "transformers", "safetensors": "safetensors",
    "numpy": "numpy", "matplotlib": "matplotlib", "regex": "regex",
    "nbformat": "nbformat", "nbclient": "nbclient", "ipykernel": "ipykernel",
    "nbval": "nbval", "pytest": "pytest", "hypothesis": "hypothesis",
    "fastapi": "fastapi", "uvicorn": "uvicorn", "openai": "openai",
    "httpx2": "httpx2", "prometheus_client": "prometheus-client", "jinja2": "jinja2",
    "tiktoken": "tiktoken", "tokenizers": "tokenizers", "xdist": "pytest-xdist",
}
# the 0.5B-class shape of `measure` (Qwen2.5-0.5B's config.json), and the dry run's
MEASURE_SHAPE = dict(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                     num_hidden_layers=24, num_attention_heads=14,
                     num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1e6,
                     max_position_embeddings=32768, tie_word_embeddings=True,
                     attention_bias=True, architectures=["Qwen2ForCausalLM"])
# the parallel step's sizes: the parity prompts (rows, tokens) and the decode run
PARALLEL_SIZES = dict(parity=(4, 64), batch=8, prompt_len=64, steps=32, warm=4)
DRY_PARALLEL_SIZES = dict(parity=(2, 16), batch=2, prompt_len=8, steps=8, warm=2)
PARALLEL_TOLERANCE = 1e-4  # max |logit difference| in float32
# the kernels step's shapes: H200-class attention (Llama-3-8B's heads) in bfloat16;
# flash: (batch, tokens), causal; decode: (batch, context) in blocks of block_size
KERNEL_SIZES = dict(heads=32, kv_heads=8, head_dim=128, dtype="bfloat16",
                    block_size=16, partition=512, repeats=10,
                    flash=[[4, 1024], [2, 4096], [1, 16384]],
                    decode=[[16, 1024], [64, 1024], [16, 4096], [64, 4096],
                            [16, 16384], [64, 16384]])
DRY_KERNEL_SIZES = dict(heads=4, kv_heads=2, head_dim=64, dtype="float32",
                        block_size=16, partition=32, repeats=1,
                        flash=[[1, 40]], decode=[[2, 40], [3, 70]])
KERNEL_TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2}  # max |triton - reference|
DRY_SHAPE = dict(vocab_size=512, hidden_size=64, intermediate_size=128,
                 num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                 rms_norm_eps=1e-6, rope_theta=1e6, max_position_embeddings=4096,
                 tie_word_embeddings=True, architectures=["LlamaForCausalLM"])


@dataclass
class Plan:
    """What one run does: which steps, on which device, with what sizes and budgets."""
    device: str
    dry_run: bool
    out: Path
    steps: list[str]
    budgets: dict[str, float]
    total_budget: float
    jobs: int
    notebooks: list[str]
    tests: list[str]
    bench: list[list[str]] = field(default_factory=list)  # one argv per bench run
    python: str = sys.executable

    def env(self, side_by_side: bool = False) -> dict[str, str]:
        """The environment of every subprocess; `side_by_side`: of a check that runs
        beside others (two CPU threads each, so a dozen processes share the cores)."""
        env = {**os.environ, "LLMCORE_DEVICE": self.device, "PYTHONUNBUFFERED": "1",
               "MPLBACKEND": "Agg", "TOKENIZERS_PARALLELISM": "false"}
        env["PYTHONPATH"] = os.pathsep.join(
            [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        if self.dry_run:  # a shared CPU: one thread each
            env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        elif side_by_side and self.jobs > 1:
            env.update(OMP_NUM_THREADS="2", MKL_NUM_THREADS="2")
        return env


def gpu_slug() -> str:
    """'nvidia-h200' style name of GPU 0, for the results folder."""
    import torch
    if not torch.cuda.is_available():
        return "no-gpu"
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(0).lower()).strip("-")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true",
                        help="on the CPU with tiny shapes: prove the script works")
    parser.add_argument("--device", help="default: cuda (cpu with --dry-run)")
    parser.add_argument("--out", type=Path, help="results folder (default: "
                        "results/gpu/<UTC time>-<gpu>/, or results/gpu-dry-run/...)")
    parser.add_argument("--steps", default=",".join(STEPS),
                        help=f"comma-separated subset of {','.join(STEPS)}")
    parser.add_argument("--total-budget", type=float,
                        help="seconds after which no step starts or runs on "
                        "(default: 570; 180 with --dry-run)")
    parser.add_argument("--budget", action="append", default=[], metavar="STEP=S",
                        help="override one step's budget in seconds (repeatable)")
    parser.add_argument("--jobs", type=int, help="parallel notebooks, and whether "
                        "the checks run side by side (default: 4; 1 with --dry-run)")
    parser.add_argument("--notebooks", nargs="*", help="chapter stems or paths "
                        "(default: every chapter; two with --dry-run)")
    parser.add_argument("--tests", nargs="*", help="pytest paths of the `tests` step "
                        "(default: tests/, without the site build)")
    parser.add_argument("--archive", type=Path, help="also write the results "
                        "folder as this .tar.gz")
    parser.add_argument("--worker", choices=["env", "measure", "parallel", "kernels"],
                        help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def make_plan(args: argparse.Namespace, slug: str | None = None,
              now: dt.datetime | None = None) -> Plan:
    """The Plan for parsed arguments; `slug` names the GPU (asked of torch if None)."""
    dry = args.dry_run
    device = args.device or ("cpu" if dry else "cuda")
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        raise SystemExit(f"--steps: unknown step(s) {unknown}; choose from {STEPS}")
    budgets = dict(DRY_BUDGETS if dry else BUDGETS)
    for item in args.budget:
        name, _, seconds = item.partition("=")
        if name not in STEPS or not seconds:
            raise SystemExit(f"--budget {item!r}: use STEP=SECONDS, STEP in {STEPS}")
        budgets[name] = float(seconds)
    now = now or dt.datetime.now(dt.timezone.utc)
    if args.out is None:
        stamp = now.strftime("%Y-%m-%d-%H%M")
        name = "gpu-dry-run" if dry else "gpu"
        slug = slug if slug is not None else ("cpu" if dry else gpu_slug())
        out = ROOT / "results" / name / f"{stamp}-{slug}"
    else:
        out = args.out
    if args.notebooks:
        notebooks = [str(_notebook(n)) for n in args.notebooks]
    elif dry:
        notebooks = [str(_notebook(n)) for n in DRY_NOTEBOOKS]
    else:
        notebooks = [str(p) for p in sorted((ROOT / "chapters").glob("*.ipynb"))]
    if args.tests:
        tests = list(args.tests)
    else:
        tests = list(DRY_TESTS) if dry else ["tests"]
    py = sys.executable
    if dry:
        bench = [[py, "bench/decode.py", "--device", device, "--dtype", d,
                  "--model", "tiny-shape", "--new-tokens", "8", "--prompt-len", "8",
                  "--repeat", "1", "--threads", "1", "--no-fast"]
                 for d in ("bfloat16", "float32")]
    else:
        bench = [[py, "bench/decode.py", "--device", device, "--dtype", d,
                  "--model", "qwen2.5-0.5b", "--model", "smollm2-135m",
                  "--new-tokens", "128", "--repeat", "3"]
                 for d in ("bfloat16", "float32")]
    jobs = args.jobs or (1 if dry else 4)
    total = args.total_budget or (180.0 if dry else 570.0)
    return Plan(device, dry, Path(out), steps, budgets, total, jobs, notebooks, tests,
                bench)


def _notebook(name: str) -> Path:
    path = Path(name)
    if path.suffix == ".ipynb":
        return path if path.is_absolute() else ROOT / path
    found = sorted((ROOT / "chapters").glob(f"{name}*.ipynb"))
    if len(found) != 1:
        raise SystemExit(f"--notebooks {name!r} matches {len(found)} chapters")
    return found[0]


# ----------------------------------------------------------------------- running steps
@dataclass
class StepResult:
    name: str
    status: str = "not run"    # ok | failed | timeout | skipped | error
    seconds: float = 0.0
    budget: float = 0.0
    detail: dict = field(default_factory=dict)
    error: str | None = None


def run_command(cmd: list[str], log: Path, timeout: float, env: dict,
                cwd: Path = ROOT) -> tuple[int | None, float]:
    """Run `cmd`, output appended to `log`; (exit code or None on timeout, seconds).
    On timeout the whole process group is killed (a notebook's kernel too)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=f,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            code = proc.wait(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            f.write(f"\n[gpu_check] killed after {timeout:.0f} s (its budget)\n")
            code = None
    return code, time.perf_counter() - start


def _kill_group(proc: subprocess.Popen) -> None:
    import signal
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue


class Runner:
    """Runs steps within their budgets and the run's deadline; never raises."""

    def __init__(self, plan: Plan):
        self.plan = plan
        self.deadline = time.monotonic() + plan.total_budget
        self.results: dict[str, StepResult] = {}
        self.lock = threading.Lock()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def run(self, name: str, fn) -> StepResult:
        budget = min(self.plan.budgets[name], self.left())
        result = StepResult(name, budget=round(budget, 1))
        if budget < 5:
            result.status = "skipped"
            result.error = "out of time: the run's --total-budget was spent"
        else:
            start = time.perf_counter()
            print(f"[gpu_check] {name}: start (budget {budget:.0f} s)", flush=True)
            try:
                fn(result, time.monotonic() + budget)
            except Exception as err:  # a bug in a step is that step's failure only
                result.status = "error"
                result.error = f"{type(err).__name__}: {err}"
                log = self.plan.out / "logs" / f"{name}.log"
                log.parent.mkdir(parents=True, exist_ok=True)
                with log.open("a") as f:
                    f.write(traceback.format_exc())
            result.seconds = round(time.perf_counter() - start, 1)
        print(f"[gpu_check] {name}: {result.status} in {result.seconds:.0f} s"
              + (f" ({result.error})" if result.error else ""), flush=True)
        with self.lock:
            self.results[name] = result
        return result


def _status(code: int | None) -> tuple[str, str | None]:
    if code is None:
        return "timeout", "ran past its budget and was killed"
    return ("ok", None) if code == 0 else ("failed", f"exit code {code}")


def step_worker(plan: Plan, name: str):
    """A step that runs this script's own worker (env, measure, parallel, kernels) in
    a subprocess."""
    def fn(result: StepResult, deadline: float):
        cmd = [plan.python, str(Path(__file__).resolve()), "--worker", name,
               "--out", str(plan.out), "--device", plan.device]
        if plan.dry_run:
            cmd.append("--dry-run")
        code, _ = run_command(cmd, plan.out / "logs" / f"{name}.log",
                              deadline - time.monotonic(), plan.env())
        result.status, result.error = _status(code)
        written = plan.out / f"{name}.json"
        if written.exists():
            data = json.loads(written.read_text())
            result.detail = data.get("headline", {})
            if data.get("errors") and result.status == "ok":
                result.status = "failed"
                result.error = "; ".join(f"{k}: {v}" for k, v in data["errors"].items())
    return fn


def junit_summary(path: Path) -> dict:
    """Counts and the failing tests (id and first lines of the message) of a junit
    XML file."""
    if not path.exists():
        return {"junit": "missing"}
    root = ET.parse(path).getroot()
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    counts = {k: sum(int(s.get(k, 0)) for s in suites)
              for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = (counts["tests"] - counts["failures"] - counts["errors"]
                        - counts["skipped"])
    failing = []
    for case in root.iter("testcase"):
        for kind in ("failure", "error"):
            node = case.find(kind)
            if node is not None:
                message = (node.get("message") or node.text or "").strip()
                failing.append({"test": f"{case.get('classname')}::{case.get('name')}",
                                "kind": kind, "message": message[:600]})
    counts["failing"] = failing
    return counts


def step_pytest(plan: Plan, name: str, args: list[str], parallel: bool = False):
    def fn(result: StepResult, deadline: float):
        xml = plan.out / "tests" / f"{name}.xml"
        xml.parent.mkdir(parents=True, exist_ok=True)
        # pyproject's addopts turn nbval on, which tests/ does not need and a GPU
        # image may lack: replaced by the rest of them
        cmd = [plan.python, "-m", "pytest", *args, "-q", "-o",
               "addopts=-ra --strict-markers", "-p", "no:nbval", "-p",
               "no:cacheprovider", f"--junitxml={xml}", "-o", "junit_family=xunit1"]
        if parallel and plan.jobs > 1 and _has("xdist"):
            cmd += ["-n", str(min(6, 2 * plan.jobs))]
        code, _ = run_command(cmd, plan.out / "logs" / f"{name}.log",
                              deadline - time.monotonic(), plan.env(side_by_side=True))
        result.status, result.error = _status(code)
        result.detail = junit_summary(xml)
        (plan.out / "tests" / f"{name}.json").write_text(
            json.dumps(result.detail, indent=1) + "\n")
    return fn


def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
        return True
    except ImportError:
        return False


def step_bench(plan: Plan):
    def fn(result: StepResult, deadline: float):
        outdir = plan.out / "bench"
        outdir.mkdir(parents=True, exist_ok=True)
        failures = []
        with tempfile.TemporaryDirectory(prefix="gpu-check-ckpt-") as ckpt:
            for argv in plan.bench:
                dtype = argv[argv.index("--dtype") + 1]
                out = outdir / f"decode-{dtype}.json"
                code, _ = run_command(
                    argv + ["--json", str(out), "--cache-dir", ckpt],
                    plan.out / "logs" / "bench.log", deadline - time.monotonic(),
                    plan.env())
                status, error = _status(code)
                if status != "ok":
                    failures.append(f"{dtype}: {error}")
        records = []
        for path in sorted(outdir.glob("decode-*.json")):
            records += json.loads(path.read_text())["results"]
        result.detail = bench_headline(records)
        if records:
            plot_bench(records, plan.out / "plots" / "bench_decode.png")
        result.status = "failed" if failures else "ok"
        result.error = "; ".join(failures) or None
    return fn


def bench_headline(records: list[dict]) -> dict:
    """tok/s, fraction of the bandwidth roofline and ratio to transformers, per model
    and dtype (medians over rounds)."""
    out = {}
    for r in records:
        lead = r["lead"]
        out[f"{r['model']} {r['dtype']}"] = {
            "llmcore tok/s": round(statistics.median(r["tok_s"][lead]), 1),
            "transformers tok/s": round(
                statistics.median(r["tok_s"]["transformers"]), 1),
            "roofline tok/s": round(statistics.median(r["rooflines_tok_s"]), 1),
            "llmcore fraction of roofline": round(r["fraction_of_roofline"][lead], 3),
            "llmcore / transformers": round(r["vs_transformers"][lead], 3),
            "same tokens": r["same_tokens_as_transformers"][lead],
        }
    return out


def step_notebooks(plan: Plan):
    def fn(result: StepResult, deadline: float):
        from concurrent.futures import ThreadPoolExecutor
        outdir = plan.out / "notebooks"
        outdir.mkdir(parents=True, exist_ok=True)

        def one(nb: str) -> dict:
            path = Path(nb)
            left = deadline - time.monotonic()
            if left < 5:
                return {"notebook": path.name, "status": "skipped", "seconds": 0}
            cmd = [plan.python, "scripts/execute_notebooks.py", "--out-dir",
                   str(outdir), "--allow-errors", "--timeout", "600", str(path)]
            code, seconds = run_command(
                cmd, plan.out / "logs" / f"notebook-{path.stem}.log", left,
                plan.env(side_by_side=True))
            status, _ = _status(code)
            entry = {"notebook": path.name, "status": status,
                     "seconds": round(seconds, 1)}
            executed = outdir / path.name
            if executed.exists() and code is not None:
                entry.update(notebook_report(executed, plan.out / "plots"))
                if entry["errors"]:
                    entry["status"] = "failed"
            return entry

        with ThreadPoolExecutor(max_workers=max(1, plan.jobs)) as pool:
            entries = list(pool.map(one, plan.notebooks))
        result.detail = {e["notebook"]: e for e in entries}
        gpu_cells = {e["notebook"]: e.pop("gpu_cells", []) for e in entries}
        (outdir / "gpu_cells.json").write_text(json.dumps(gpu_cells, indent=1) + "\n")
        (outdir / "notebooks.json").write_text(json.dumps(entries, indent=1) + "\n")
        bad = [e["notebook"] for e in entries if e["status"] != "ok"]
        result.status = "failed" if bad else "ok"
        result.error = f"not ok: {', '.join(bad)}" if bad else None
        result.detail = {e["notebook"]: {k: v for k, v in e.items() if k != "notebook"}
                         for e in entries}
    return fn


def _is_gpu_cell(source: str) -> bool:
    """A cell that does something only on a GPU (not the setup or an export cell)."""
    head = source.lstrip()
    return ("cuda" in source and not head.startswith("# Setup:")
            and not head.startswith("#| export"))


def notebook_report(path: Path, plots: Path) -> dict:
    """Errors of an executed notebook, and the outputs of its GPU-guarded cells (text
    in the report, images as PNG files in `plots`)."""
    import base64
    nb = json.loads(path.read_text())
    errors, gpu_cells = [], []
    for index, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        texts, images = [], []
        for output in cell.get("outputs", []):
            if output["output_type"] == "error":
                errors.append({"cell": index, "ename": output["ename"],
                               "evalue": output["evalue"][:600]})
            elif output["output_type"] == "stream":
                texts.append("".join(output["text"]))
            elif "data" in output:
                data = output["data"]
                if "image/png" in data:
                    images.append(data["image/png"])
                elif "text/plain" in data:
                    texts.append("".join(data["text/plain"]))
        if _is_gpu_cell(source):
            files = []
            for k, png in enumerate(images):
                plots.mkdir(parents=True, exist_ok=True)
                name = f"{path.stem}-cell{index}-{k}.png"
                (plots / name).write_bytes(base64.b64decode(png))
                files.append(name)
            gpu_cells.append({"cell": index, "source": source[:400],
                              "text": "".join(texts)[:4000], "images": files})
    return {"cells": len(nb["cells"]), "errors": errors, "gpu_cells": gpu_cells}


# ------------------------------------------------------------------------ the workers
def worker_env(plan: Plan) -> dict:
    """Versions, packages and the GPU, as env.json."""
    import torch
    data: dict = {"python": platform.python_version(), "executable": sys.executable,
                  "platform": platform.platform(), "cpus": os.cpu_count(),
                  "torch": torch.__version__, "torch_cuda": torch.version.cuda,
                  "cudnn": (torch.backends.cudnn.version()
                            if torch.backends.cudnn.is_available() else None),
                  "device": plan.device, "dry_run": plan.dry_run, "errors": {}}
    packages = {}
    for module, package in NEEDED.items():
        try:
            mod = importlib.import_module(module)
            packages[package] = getattr(mod, "__version__", "installed")
        except Exception as err:  # ImportError, or a broken install
            packages[package] = f"missing ({type(err).__name__})"
    data["packages"] = packages
    try:
        import llmcore
        data["llmcore"] = llmcore.__version__
    except Exception as err:
        data["errors"]["llmcore"] = f"{type(err).__name__}: {err}"
    data["git"] = _git()
    device = torch.device(plan.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            data["errors"]["gpu"] = "torch sees no CUDA GPU"
        else:
            from llmcore.device import default_dtype
            props = torch.cuda.get_device_properties(device)
            data["gpu"] = {
                "name": props.name, "capability": f"{props.major}.{props.minor}",
                "memory_bytes": props.total_memory,
                "multiprocessors": props.multi_processor_count,
                "bf16_native": torch.cuda.is_bf16_supported(including_emulation=False),
                "bf16_with_emulation": torch.cuda.is_bf16_supported(),
                "llmcore_default_dtype": str(default_dtype(device)),
                "count": torch.cuda.device_count(),
            }
        try:
            smi = subprocess.run(["nvidia-smi", "-q"], capture_output=True, text=True,
                                 timeout=30)
            (plan.out / "nvidia-smi.txt").write_text(smi.stdout + smi.stderr)
        except (OSError, subprocess.TimeoutExpired) as err:
            data["nvidia_smi"] = f"not run: {err}"
    missing = [p for p, v in packages.items() if v.startswith("missing")
               and p != "pytest-xdist"]
    data["headline"] = {"gpu": data.get("gpu", {}).get("name", plan.device),
                        "torch": data["torch"], "cuda": data["torch_cuda"],
                        "missing packages": missing}
    return data


def _git() -> dict:
    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True,
                                  text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
    return {"commit": git("rev-parse", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def _median_time(fn, device, repeats: int = 5, warmup: int = 2) -> float:
    from llmcore.profile import median_time
    return median_time(fn, repeats=repeats, warmup=warmup, device=device)


def worker_measure(plan: Plan) -> dict:
    """The device's ceilings and the 0.5B-class shape's figures, as measure.json and
    PNGs; each part may fail alone (listed under "errors")."""
    import torch

    from llmcore.device import default_dtype
    from llmcore.hf import config_from_hf
    from llmcore.profile import (decode_cost, measure_copy_bandwidth,
                                 measure_matmul_flops, prefill_cost)
    device = torch.device(plan.device)
    dry = plan.dry_run
    if dry:
        torch.set_num_threads(1)
    data: dict = {"device": str(device), "errors": {}}
    plots = plan.out / "plots"
    plots.mkdir(parents=True, exist_ok=True)

    def part(name):
        def wrap(fn):
            start = time.perf_counter()
            try:
                data[name] = fn()
            except Exception as err:
                data["errors"][name] = f"{type(err).__name__}: {err}"
                traceback.print_exc()
            print(f"measure/{name}: {time.perf_counter() - start:.1f} s", flush=True)
            if device.type == "cuda":
                torch.cuda.empty_cache()
            return fn
        return wrap

    @part("copy_bandwidth")
    def _():
        exps = range(20, 24) if dry else range(22, 32)  # 1 MiB .. / 4 MiB .. 2 GiB
        return [{"bytes": 2**e, "Bps": measure_copy_bandwidth(device, nbytes=2**e)}
                for e in exps]

    @part("matmul")
    def _():
        sizes = [128, 256] if dry else [1024, 2048, 4096, 8192]
        rows = []
        for name, dtype, tf32 in (("float32", torch.float32, False),
                                  ("tf32", torch.float32, True),
                                  ("bfloat16", torch.bfloat16, False),
                                  ("float16", torch.float16, False)):
            if dry and name in ("tf32", "float16"):
                continue
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = tf32
            try:
                for n in sizes:
                    rows.append({"dtype": name, "n": n, "flops":
                                 measure_matmul_flops(device, dtype, size=n)})
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before
        return rows

    shape = DRY_SHAPE if dry else MEASURE_SHAPE
    cfg = config_from_hf(dict(shape))
    dtype = torch.float32 if device.type == "cpu" else default_dtype(device)
    data["shape"] = {"config": shape, "dtype": str(dtype)}
    model = None

    @part("model")
    def _():
        nonlocal model
        from llmcore.model import Transformer
        torch.manual_seed(0)
        with torch.device(device):
            model = Transformer(cfg).to(dtype).eval()
        return {"parameters": model.num_parameters()}

    # the largest buffer's: smaller ones partly stay in the GPU's L2 (60 MB on an H200)
    bandwidth = (data["copy_bandwidth"][-1]["Bps"] if data.get("copy_bandwidth")
                 else None)
    peak = max((r["flops"] for r in data.get("matmul", [])
                if r["dtype"] == str(dtype).removeprefix("torch.")), default=None)
    if bandwidth and peak:
        data["roofline"] = {"peak_flops": peak, "bandwidth_Bps": bandwidth,
                            "dtype": str(dtype)}

    def forward_time(batch: int, new: int, context: int) -> float:
        from llmcore.kvcache import KVCache, prefill
        cache = KVCache(cfg, batch, context + new, device=device, dtype=dtype)
        gen = torch.Generator().manual_seed(0)
        if context:
            prefill(model, torch.randint(0, cfg.vocab_size, (batch, context),
                                         generator=gen).to(device), cache)
        ids = torch.randint(0, cfg.vocab_size, (batch, new), generator=gen).to(device)
        positions = torch.arange(context, context + new, device=device)

        def run():
            with torch.inference_mode():
                model(ids, positions=positions, kv_cache=cache)
        return _median_time(run, device, repeats=3 if dry else 7)

    @part("roofline_points")
    def _():
        if model is None:
            raise RuntimeError("no model (see errors['model'])")
        rows = []
        batches = [1, 4] if dry else [1, 2, 4, 8, 16, 32, 64, 128, 256]
        for b in batches:  # decode: one token per sequence after 512 cached
            ctx = 32 if dry else 512
            t = forward_time(b, 1, ctx)
            cost = decode_cost(cfg, ctx, b, dtype)
            rows.append({"kind": "decode", "batch": b, "tokens": 1, "context": ctx,
                         "seconds": t, "flops": cost.flops, "bytes": cost.bytes})
        for n in ([8, 32] if dry else [16, 64, 256, 1024, 4096]):  # prefill, batch 1
            t = forward_time(1, n, 0)
            cost = prefill_cost(cfg, n, 1, dtype)
            rows.append({"kind": "prefill", "batch": 1, "tokens": n, "context": 0,
                         "seconds": t, "flops": cost.flops, "bytes": cost.bytes})
        for r in rows:
            r["intensity"] = r["flops"] / r["bytes"]
            r["achieved_flops"] = r["flops"] / r["seconds"]
        return rows

    @part("decode_context")
    def _():
        if model is None:
            raise RuntimeError("no model (see errors['model'])")
        from llmcore.profile import kv_bytes_per_token, matmul_weights
        contexts = [16, 64] if dry else [128, 512, 2048, 8192, 16384]
        weights = matmul_weights(cfg) * dtype.itemsize
        rows = []
        for ctx in contexts:
            t = forward_time(1, 1, ctx)
            kv = kv_bytes_per_token(cfg, dtype) * ctx
            floor = (weights + kv) / bandwidth if bandwidth else None
            rows.append({"context": ctx, "seconds": t, "tok_s": 1 / t,
                         "weight_bytes": weights, "kv_bytes": kv,
                         "floor_seconds": floor,
                         "floor_tok_s": 1 / floor if floor else None})
        return rows

    @part("step_cost")
    def _():
        if model is None:
            raise RuntimeError("no model (see errors['model'])")
        ctx = 32 if dry else 256
        ns = [1, 2, 4] if dry else [1, 2, 3, 4, 5, 6, 8, 12, 16, 24, 32]
        times = {n: forward_time(1, n, ctx) for n in ns}
        return [{"tokens": n, "context": ctx, "seconds": t,
                 "ratio_to_one": t / times[1]} for n, t in times.items()]

    @part("batch_invariance")
    def _():
        if model is None:
            raise RuntimeError("no model (see errors['model'])")
        gen = torch.Generator().manual_seed(0)
        ids = torch.randint(0, cfg.vocab_size, (1, 16 if dry else 64),
                            generator=gen).to(device)
        rows = []
        with torch.inference_mode():
            one = model(ids)[0].float()
            for size in ([2, 4] if dry else [2, 8, 32, 128]):
                many = model(ids.expand(size, -1).contiguous())[0].float()
                rows.append({
                    "batch": size, "dtype": str(dtype),
                    "bit_identical": bool(torch.equal(one, many)),
                    "fraction_differing": float((one != many).float().mean()),
                    "max_abs_diff": float((one - many).abs().max()),
                    "argmax_flips": int((one.argmax(-1) != many.argmax(-1)).sum()),
                    "positions": int(one.shape[0])})
        return rows

    try:
        plot_measure(data, plots)
    except Exception as err:
        data["errors"]["plots"] = f"{type(err).__name__}: {err}"
    data["headline"] = measure_headline(data)
    return data


def measure_headline(data: dict) -> dict:
    head = {}
    if data.get("copy_bandwidth"):
        head["copy bandwidth GB/s (largest buffer)"] = round(
            data["copy_bandwidth"][-1]["Bps"] / 1e9, 1)
    for row in data.get("matmul", []):
        head[f"matmul {row['dtype']} TFLOP/s (largest n)"] = round(
            row["flops"] / 1e12, 2)
    decode = [r for r in data.get("roofline_points", []) if r["kind"] == "decode"]
    if decode and data.get("roofline"):
        r = decode[0]
        head["decode batch 1: fraction of bandwidth"] = round(
            r["bytes"] / r["seconds"] / data["roofline"]["bandwidth_Bps"], 3)
    if data.get("step_cost"):
        last = data["step_cost"][-1]
        head[f"pass over {last['tokens']} tokens / pass over 1"] = round(
            last["ratio_to_one"], 2)
    if data.get("batch_invariance"):
        head["batch sizes with bit-identical logits"] = [
            r["batch"] for r in data["batch_invariance"] if r["bit_identical"]]
    return head


def plot_measure(data: dict, plots: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from llmcore.profile import Roofline, plot_roofline
    where = data["device"]
    if data.get("roofline") and data.get("roofline_points"):
        roof = Roofline(data["roofline"]["peak_flops"],
                        data["roofline"]["bandwidth_Bps"])
        points = {}
        for kind in ("decode", "prefill"):
            rows = [r for r in data["roofline_points"] if r["kind"] == kind]
            points[f"{kind} (measured)"] = [(r["intensity"], r["achieved_flops"])
                                            for r in rows]
        ax = plot_roofline(roof, points, title=f"roofline, {where}, "
                           f"{data['roofline']['dtype']}")
        ax.figure.savefig(plots / "roofline.png", dpi=120, bbox_inches="tight")
        plt.close(ax.figure)
    if data.get("decode_context"):
        rows = data["decode_context"]
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.plot([r["context"] for r in rows], [r["tok_s"] for r in rows], "o-",
                label="decode, batch 1 (measured)")
        if rows[0]["floor_tok_s"]:
            ax.plot([r["context"] for r in rows], [r["floor_tok_s"] for r in rows],
                    "k--", label="bandwidth floor (weights + KV)")
        ax.set_xscale("log")
        ax.set_xlabel("context (tokens)")
        ax.set_ylabel("tokens/s")
        ax.set_title(f"decode vs context, {where}")
        ax.legend(frameon=False, fontsize=8)
        fig.savefig(plots / "decode_context.png", dpi=120, bbox_inches="tight")
        plt.close(fig)
    if data.get("step_cost"):
        rows = data["step_cost"]
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.plot([r["tokens"] for r in rows], [r["ratio_to_one"] for r in rows], "o-")
        ax.set_xlabel("tokens in one pass (after the cached context)")
        ax.set_ylabel("time / time of 1 token")
        ax.set_title(f"cost of a verify pass, {where}")
        fig.savefig(plots / "step_cost.png", dpi=120, bbox_inches="tight")
        plt.close(fig)
    if data.get("copy_bandwidth"):
        rows = data["copy_bandwidth"]
        fig, ax = plt.subplots(figsize=(6.5, 3.2))
        ax.plot([r["bytes"] for r in rows], [r["Bps"] / 1e9 for r in rows], "o-")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("buffer (bytes)")
        ax.set_ylabel("GB/s (read + write)")
        ax.set_title(f"copy bandwidth, {where}")
        fig.savefig(plots / "copy_bandwidth.png", dpi=120, bbox_inches="tight")
        plt.close(fig)


def plot_bench(records: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    path.parent.mkdir(parents=True, exist_ok=True)
    labels = [f"{r['model']}\n{r['dtype']}" for r in records]
    peers = sorted({p for r in records for p in r["tok_s"]})
    fig, ax = plt.subplots(figsize=(7, 3.4))
    width = 0.8 / (len(peers) + 1)
    for i, peer in enumerate(peers):
        ax.bar([x + i * width for x in range(len(records))],
               [statistics.median(r["tok_s"].get(peer, [math.nan])) for r in records],
               width, label=peer)
    ax.bar([x + len(peers) * width for x in range(len(records))],
           [statistics.median(r["rooflines_tok_s"]) for r in records], width,
           label="bandwidth roofline", color="lightgrey")
    ax.set_xticks([x + width * len(peers) / 2 for x in range(len(records))], labels,
                  fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s, batch 1")
    ax.set_title(f"greedy decode, {records[0]['device']}")
    ax.legend(frameon=False, fontsize=8)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def parallel_runs(device: str, gpus: int) -> list[tuple[str, int]]:
    """(backend, ranks) of each run of the parallel step: NCCL on min(2, GPUs) ranks
    on a GPU machine, and gloo on 2 CPU ranks as well where one GPU cannot make two
    NCCL ranks; gloo on 2 ranks on a CPU."""
    if not device.startswith("cuda"):
        return [("gloo", 2)]
    world = max(1, min(2, gpus))
    return [("nccl", world)] + ([("gloo", 2)] if world < 2 else [])


def comm_report(ranks: list[dict], batch: int, warm: int) -> dict:
    """The decode steps of `tp_decode_comm` (one record per rank) summed up: rank 0's
    median step and collective times after `warm` steps and their share, and every
    rank's collectives of every step against the formula: the layers' all-reduces
    send 2 x n_layers x batch x dim x itemsize bytes, the embedding's all-reduce
    batch x dim x itemsize more, the logits' all-gather batch x vocab_rows x itemsize
    (a single rank sends nothing)."""
    first, world = ranks[0], len(ranks)
    act = batch * first["dim"] * first["itemsize"]
    formula = 2 * first["n_layers"] * act
    expected = {}
    if world > 1:
        expected = {"all_reduce": [2 * first["n_layers"] + 1, formula + act],
                    "all_gather": [1, batch * first["vocab_rows"] * first["itemsize"]]}

    def counted(step) -> dict:
        out: dict = {}
        for op, nbytes, _ in step:
            n, total = out.get(op, [0, 0])
            out[op] = [n + 1, total + nbytes]
        return out

    wrong = [[rank, i] for rank, r in enumerate(ranks)
             for i, step in enumerate(r["steps"]) if counted(step) != expected]
    timed = slice(warm, None) if len(first["seconds"]) > warm else slice(None)
    step_s = statistics.median(first["seconds"][timed])
    comm_s = statistics.median(sum(e[2] for e in s) for s in first["steps"][timed])
    last = counted(first["steps"][-1]) if first["steps"] else {}
    layers = last.get("all_reduce", [0, 0])[1] - (act if world > 1 else 0)
    return {
        "ranks": world, "batch": batch, "dim": first["dim"],
        "n_layers": first["n_layers"], "itemsize": first["itemsize"],
        "threads per rank": first["threads"], "steps": len(first["seconds"]),
        "timed steps": len(first["seconds"][timed]),
        "median step ms": round(step_s * 1e3, 4),
        "median collective ms": round(comm_s * 1e3, 4),
        "collective share": round(comm_s / step_s, 4) if step_s else None,
        "collectives per step": {op: n for op, (n, _) in last.items()},
        "bytes per step": {op: b for op, (_, b) in last.items()},
        "layers' all-reduce bytes per step": layers,
        "formula 2 x n_layers x batch x dim x itemsize": formula if world > 1 else 0,
        "expected per step": {op: {"count": n, "bytes": b}
                              for op, (n, b) in expected.items()},
        "bytes as the formula": not wrong,
        "steps not as the formula [rank, step]": wrong[:8],
    }


def _short_error(err: BaseException) -> str:
    """First and last line of an error (launch's carry a rank's whole traceback)."""
    lines = [ln for ln in str(err).strip().splitlines() if ln.strip()] or [""]
    tail = f" ... {lines[-1].strip()}" if len(lines) > 1 else ""
    return f"{type(err).__name__}: {lines[0]}{tail}"[:600]


def worker_parallel(plan: Plan) -> dict:
    """Appendix D's tensor parallelism on the device, as parallel.json (rewritten after
    each part, so a step killed at its budget keeps what it measured): for each run
    (backend, ranks) of `parallel_runs`, the tiny model's logits through
    `llmcore.parallel.tp_logits` against the single-process model, and the decode
    steps of `tp_decode_comm` through `comm_report`."""
    import torch

    from llmcore import parallel
    from llmcore.chat import model_dir
    from llmcore.hf import load_pretrained
    sizes = DRY_PARALLEL_SIZES if plan.dry_run else PARALLEL_SIZES
    cuda = plan.device.startswith("cuda")
    gpus = torch.cuda.device_count() if cuda else 0
    runs = parallel_runs(plan.device, gpus)
    data: dict = {"device": plan.device, "gpus": gpus, "model": "tiny",
                  "dtype": "float32", "sizes": sizes, "tolerance": PARALLEL_TOLERANCE,
                  "runs": {}, "errors": {}}
    if cuda and gpus < 2:
        data["note"] = (f"{gpus} GPU here: NCCL ran on 1 rank, which sends nothing, so "
                        "its step time is one GPU's; timing NCCL collectives needs 2 "
                        "GPUs. The bytes check ran over gloo on 2 CPU ranks.")
    timeout = 60.0 if plan.dry_run else 120.0
    rows, length = sizes["parity"]
    gen = torch.Generator().manual_seed(0)
    vocab = json.loads((model_dir("tiny") / "config.json").read_text())["vocab_size"]
    ids = torch.randint(vocab, (rows, length), generator=gen).tolist()

    def save():
        data["headline"] = parallel_headline(data)
        (plan.out / "parallel.json").write_text(
            json.dumps(data, indent=1, default=str) + "\n")

    def part(name, fn):
        start = time.perf_counter()
        try:
            fn()
        except Exception as err:
            data["errors"][name] = _short_error(err)
            traceback.print_exc()
        print(f"parallel/{name}: {time.perf_counter() - start:.1f} s", flush=True)
        save()

    for backend, world in runs:
        where = "cuda" if backend == "nccl" else "cpu"
        label = f"{backend} x{world} ({where})"
        run = data["runs"].setdefault(label, {"backend": backend, "ranks": world,
                                              "device": where})

        def parity():
            whole = load_pretrained(model_dir("tiny"), device=where, dtype="float32")
            with torch.inference_mode():
                ref = whole(torch.tensor(ids, device=where)).float().cpu()
            del whole
            got = parallel.launch(parallel.tp_logits, world, "tiny", ids, "float32",
                                  backend=backend, timeout=timeout)
            diff = max(float((g - ref).abs().max()) for g in got)
            run["logits max |diff|"] = diff
            run["ranks hold the same logits"] = all(torch.equal(got[0], g)
                                                    for g in got)
            run["parity ok"] = diff < PARALLEL_TOLERANCE
            if not run["parity ok"]:
                raise AssertionError(f"max |logit difference| {diff:.2e} >= "
                                     f"{PARALLEL_TOLERANCE:g}")

        def comm():
            got = parallel.launch(parallel.tp_decode_comm, world, "tiny",
                                  sizes["batch"], sizes["prompt_len"], sizes["steps"],
                                  "float32", backend=backend, timeout=timeout)
            run["decode"] = comm_report(got, sizes["batch"], sizes["warm"])
            if not run["decode"]["bytes as the formula"]:
                raise AssertionError("collectives differ from the formula at [rank, "
                                     "step] " + str(run["decode"][
                                         "steps not as the formula [rank, step]"]))

        part(f"{label} parity", parity)
        part(f"{label} decode", comm)
    return data


def parallel_headline(data: dict) -> dict:
    head = {}
    if data.get("note"):
        head["note"] = data["note"]
    for label, run in data.get("runs", {}).items():
        row = {}
        if "logits max |diff|" in run:
            row["logits max |diff|"] = float(f"{run['logits max |diff|']:.3g}")
            row["parity ok"] = run["parity ok"]
        decode = run.get("decode")
        if decode:
            for key in ("median step ms", "median collective ms", "collective share",
                        "bytes per step", "layers' all-reduce bytes per step",
                        "formula 2 x n_layers x batch x dim x itemsize",
                        "bytes as the formula"):
                row[key] = decode[key]
        head[label] = row
    return head


def attention_cost(batch: int, heads: int, kv_heads: int, q_len: int, kv_len: int,
                   head_dim: int, itemsize: int, causal: bool = False) -> dict:
    """FLOPs and the least bytes one attention pass moves: two products of 2 x q_len x
    kv_len x head_dim per head (halved when causal and q_len == kv_len), q and the
    output once, K and V once per kv head. For a decode (q_len 1) the bytes are the
    K/V read, the figure its speed is bound by."""
    flops = 4 * batch * heads * q_len * kv_len * head_dim
    if causal and q_len == kv_len:
        flops //= 2
    kv = 2 * batch * kv_heads * kv_len * head_dim * itemsize
    return {"flops": flops, "kv_bytes": kv,
            "bytes": kv + 2 * batch * heads * q_len * head_dim * itemsize}


def _kernel_peaks(plan: Plan, device, dtype) -> dict:
    """The device's copy bandwidth and matmul FLOP/s in `dtype`: measure.json's when
    the measure step ran in this folder, else measured here."""
    from llmcore.profile import measure_copy_bandwidth, measure_matmul_flops
    name = str(dtype).removeprefix("torch.")
    measured = plan.out / "measure.json"
    if measured.exists():
        data = json.loads(measured.read_text())
        flops = [r["flops"] for r in data.get("matmul", []) if r["dtype"] == name]
        if data.get("copy_bandwidth") and flops:
            return {"bandwidth_Bps": data["copy_bandwidth"][-1]["Bps"],
                    "matmul_flops": max(flops), "from": "measure.json"}
    cuda = device.type == "cuda"
    return {"bandwidth_Bps": measure_copy_bandwidth(
                device, nbytes=2**30 if cuda else 2**22),
            "matmul_flops": measure_matmul_flops(device, dtype,
                                                 size=8192 if cuda else 128),
            "from": "measured in this step"}


def worker_kernels(plan: Plan) -> dict:
    """Appendix E's Triton kernels against PyTorch, as kernels.json (rewritten after
    each shape, so a step killed at its budget keeps what it measured). On the CPU the
    kernels run through Triton's interpreter: their times say nothing of speed."""
    if not plan.device.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported
    import torch
    import torch.nn.functional as F

    from llmcore import triton_attention as ta
    from llmcore.model import ModelConfig
    from llmcore.model_runner import Chunk, KVPool
    sizes = DRY_KERNEL_SIZES if plan.dry_run else KERNEL_SIZES
    device, dtype = torch.device(plan.device), getattr(torch, sizes["dtype"])
    if plan.dry_run:
        torch.set_num_threads(1)
    h, hk, d, bs = (sizes[k] for k in ("heads", "kv_heads", "head_dim", "block_size"))
    tol, itemsize = KERNEL_TOLERANCE[sizes["dtype"]], dtype.itemsize
    data: dict = {"device": str(device), "interpreted": ta.INTERPRETED, "sizes": sizes,
                  "tolerance": tol, "flash": [], "decode": [], "errors": {}}
    if ta.INTERPRETED:
        data["note"] = ("Triton's interpreter on the CPU: correctness only, the times "
                        "are not the kernels' speed")
    gen = torch.Generator(device=device).manual_seed(0)

    def time_it(fn) -> float:
        return _median_time(fn, device, repeats=sizes["repeats"],
                            warmup=1 if plan.dry_run else 3)

    def save():
        data["headline"] = kernels_headline(data)
        (plan.out / "kernels.json").write_text(
            json.dumps(data, indent=1, default=str) + "\n")

    def part(name, fn):
        start = time.perf_counter()
        try:
            fn()
        except Exception as err:
            data["errors"][name] = _short_error(err)
            traceback.print_exc()
        if device.type == "cuda":
            torch.cuda.empty_cache()
        print(f"kernels/{name}: {time.perf_counter() - start:.1f} s", flush=True)
        save()

    def peaks():
        data["peaks"] = _kernel_peaks(plan, device, dtype)

    def flash(batch, seq):
        q = torch.randn(batch, h, seq, d, device=device, dtype=dtype, generator=gen)
        k, v = (torch.randn(batch, hk, seq, d, device=device, dtype=dtype,
                            generator=gen) for _ in "kv")
        row = {"batch": batch, "tokens": seq, "causal": True,
               **attention_cost(batch, h, hk, seq, seq, d, itemsize, causal=True)}

        def sdpa(k=k, v=v, gqa=True):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                  enable_gqa=gqa)
        if device.type == "cuda":
            from torch.nn.attention import SDPBackend, sdpa_kernel
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                try:
                    want = sdpa()
                    reference = sdpa
                    row["sdpa"] = "flash backend, enable_gqa"
                except RuntimeError:  # a flash backend without GQA: expand k, v
                    ke, ve = (t.repeat_interleave(h // hk, 1) for t in (k, v))
                    want = sdpa(ke, ve, False)
                    reference = lambda: sdpa(ke, ve, False)  # noqa: E731
                    row["sdpa"] = "flash backend, k and v expanded (not timed)"

                def timed_reference():
                    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                        return reference()
        else:
            want, timed_reference = sdpa(), sdpa
            row["sdpa"] = "default backend (cpu)"
        got = ta.flash_attention(q, k, v, causal=True)
        row["max |triton - sdpa|"] = float((got.float() - want.float()).abs().max())
        row["ok"] = row["max |triton - sdpa|"] < tol
        row["triton s"] = time_it(lambda: ta.flash_attention(q, k, v, causal=True))
        row["sdpa s"] = time_it(timed_reference)
        for who in ("triton", "sdpa"):
            row[f"{who} TFLOP/s"] = row["flops"] / row[f"{who} s"] / 1e12
        if data.get("peaks"):
            row["triton fraction of matmul peak"] = (
                row["flops"] / row["triton s"] / data["peaks"]["matmul_flops"])
        row["triton / sdpa time"] = row["triton s"] / row["sdpa s"]
        data["flash"].append(row)
        if not row["ok"]:
            raise AssertionError(f"flash: max |triton - sdpa| "
                                 f"{row['max |triton - sdpa|']:.2e} >= {tol:g}")

    def decode(batch, ctx):
        cfg = ModelConfig(vocab_size=8, dim=h * d, n_layers=1, n_heads=h,
                          n_kv_heads=hk, hidden_dim=8, max_position_embeddings=ctx + 1)
        width = -(-ctx // bs)
        num_blocks = batch * width + 8  # some blocks nobody owns: holes
        pool = KVPool(cfg, num_blocks, bs, device, dtype)
        pool.pool.normal_(generator=gen)
        order = torch.randperm(num_blocks, device=device, generator=gen)
        tables = order[:batch * width].view(batch, width).int()  # shuffled blocks
        pool.prepare([Chunk([0], ctx - 1, row) for row in tables.tolist()])
        positions = torch.full((1, batch), ctx - 1, device=device)
        q = torch.randn(1, h, batch, d, device=device, dtype=dtype, generator=gen)
        k, v = (torch.randn(1, hk, batch, d, device=device, dtype=dtype,
                            generator=gen) for _ in "kv")

        def reference():
            return pool.attend(0, positions, q, k, v)

        want = reference()[0].transpose(0, 1).float()  # (batch, heads, d)
        lens = torch.full((batch,), ctx, device=device, dtype=torch.int32)
        layer = pool.pool[0]
        row = {"batch": batch, "context": ctx, "block_size": bs,
               **attention_cost(batch, h, hk, 1, ctx, d, itemsize)}

        def kernel(part=None):
            return ta.paged_decode(q[0].transpose(0, 1), layer[0], layer[1], tables,
                                   lens, bs, partition_size=part, max_context=ctx,
                                   validate=False)

        runs = {"triton": lambda: kernel(),
                "triton split-K": lambda: kernel(sizes["partition"]),
                "KVPool.attend": reference}
        for who, fn in runs.items():
            if who != "KVPool.attend":
                err = float((fn().float() - want).abs().max())
                row[f"max |{who} - KVPool.attend|"] = err
                row[f"{who} ok"] = err < tol
            row[f"{who} s"] = time_it(fn)
            row[f"{who} GB/s"] = row["kv_bytes"] / row[f"{who} s"] / 1e9
            if data.get("peaks"):
                row[f"{who} fraction of copy bandwidth"] = (
                    row["kv_bytes"] / row[f"{who} s"]
                    / data["peaks"]["bandwidth_Bps"])
        row["TFLOP/s (triton)"] = row["flops"] / row["triton s"] / 1e12
        data["decode"].append(row)
        pool = None  # the next size allocates its own pool: free this one first
        bad = [w for w in ("triton", "triton split-K") if not row[f"{w} ok"]]
        if bad:
            raise AssertionError(f"decode batch {batch} context {ctx}: {bad} differ "
                                 f"from KVPool.attend by more than {tol:g}")

    part("peaks", peaks)
    for batch, seq in sizes["flash"]:
        part(f"flash b{batch} s{seq}", lambda: flash(batch, seq))
    for batch, ctx in sizes["decode"]:
        part(f"decode b{batch} c{ctx}", lambda: decode(batch, ctx))
    return data


def kernels_headline(data: dict) -> dict:
    head = {}
    if data.get("note"):
        head["note"] = data["note"]
    for r in data.get("flash", []):
        head[f"flash b{r['batch']} s{r['tokens']}"] = {
            "triton TFLOP/s": round(r["triton TFLOP/s"], 3),
            "sdpa TFLOP/s": round(r["sdpa TFLOP/s"], 3),
            "triton / sdpa time": round(r["triton / sdpa time"], 3),
            "max |diff|": float(f"{r['max |triton - sdpa|']:.3g}")}
    for r in data.get("decode", []):
        row = {f"{who} GB/s": round(r[f"{who} GB/s"], 1)
               for who in ("triton", "triton split-K", "KVPool.attend")}
        if "triton fraction of copy bandwidth" in r:
            row["triton fraction of copy bandwidth"] = round(
                r["triton fraction of copy bandwidth"], 3)
        worst = max(r["max |triton - KVPool.attend|"],
                    r["max |triton split-K - KVPool.attend|"])
        row["max |diff|"] = float(f"{worst:.3g}")
        head[f"decode b{r['batch']} c{r['context']}"] = row
    return head


def run_worker(plan: Plan, name: str) -> int:
    plan.out.mkdir(parents=True, exist_ok=True)
    workers = {"env": worker_env, "measure": worker_measure,
               "parallel": worker_parallel, "kernels": worker_kernels}
    data = workers[name](plan)
    (plan.out / f"{name}.json").write_text(json.dumps(data, indent=1, default=str)
                                           + "\n")
    return 0


# ------------------------------------------------------------------------ the summary
def write_summary(plan: Plan, results: dict[str, StepResult], started: str,
                  seconds: float) -> dict:
    env = {}
    if (plan.out / "env.json").exists():
        env = json.loads((plan.out / "env.json").read_text())
    summary = {
        "started": started, "seconds": round(seconds, 1), "device": plan.device,
        "gpu": env.get("gpu", {}).get("name"), "dry_run": plan.dry_run,
        "torch": env.get("torch"), "git": env.get("git"),
        "ok": all(results[s].status == "ok" for s in plan.steps if s in results),
        "steps": {s: asdict(results[s]) for s in plan.steps if s in results},
        "plan": {"steps": plan.steps, "budgets": plan.budgets,
                 "total_budget": plan.total_budget, "jobs": plan.jobs,
                 "notebooks": [Path(n).name for n in plan.notebooks],
                 "tests": plan.tests},
    }
    (plan.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str)
                                           + "\n")
    lines = [f"# gpu_check {'dry run ' if plan.dry_run else ''}on {plan.device}"
             f" ({summary['gpu'] or 'no GPU'})", "",
             f"started {started} UTC, {seconds:.0f} s, torch {summary['torch']}, "
             f"commit {(summary['git'] or {}).get('commit')}", "",
             "| step | status | seconds | budget | note |", "|---|---|---|---|---|"]
    for name in plan.steps:
        r = results.get(name)
        if r:
            note = r.error or r.detail.get("note") or ""
            lines.append(f"| {name} | {r.status} | {r.seconds:.0f} | {r.budget:.0f} | "
                         f"{str(note).replace('|', '/')[:200]} |")
    for name in plan.steps:
        r = results.get(name)
        if r and r.detail:
            lines += ["", f"## {name}", "", "```",
                      json.dumps(r.detail, indent=1, default=str)[:6000], "```"]
    (plan.out / "summary.md").write_text("\n".join(lines) + "\n")
    return summary


def archive(folder: Path, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        tar.add(folder, arcname=folder.name)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:  # a step's subprocess: --out is the results folder itself
        plan = make_plan(args, slug="worker")
        return run_worker(plan, args.worker)
    plan = make_plan(args)
    if plan.device.startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            print("gpu_check: torch sees no CUDA GPU; this is for GPU machines "
                  "(try --dry-run)", file=sys.stderr)
            return 2
    plan.out.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    print(f"[gpu_check] results: {plan.out}", flush=True)
    runner = Runner(plan)
    start = time.perf_counter()
    makers = {
        "env": lambda: step_worker(plan, "env"),
        "measure": lambda: step_worker(plan, "measure"),
        "bench": lambda: step_bench(plan),
        "parallel": lambda: step_worker(plan, "parallel"),
        "kernels": lambda: step_worker(plan, "kernels"),
        "cuda_tests": lambda: step_pytest(plan, "cuda_tests",
                                          ["-m", "cuda", *plan.tests]),
        "tests": lambda: step_pytest(plan, "tests", ["-m", "not book", *plan.tests],
                                     parallel=True),
        "notebooks": lambda: step_notebooks(plan),
    }
    first = [s for s in plan.steps if s in EXCLUSIVE]
    rest = [s for s in plan.steps if s not in EXCLUSIVE]
    for name in first:
        runner.run(name, makers[name]())
    if plan.jobs > 1 and len(rest) > 1:
        threads = [threading.Thread(target=runner.run, args=(s, makers[s]()))
                   for s in rest]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for name in rest:
            runner.run(name, makers[name]())
    summary = write_summary(plan, runner.results, started, time.perf_counter() - start)
    if args.archive:
        archive(plan.out, args.archive)
        print(f"[gpu_check] archive: {args.archive}", flush=True)
    print(f"[gpu_check] {'all steps ok' if summary['ok'] else 'some steps failed'}; "
          f"{time.perf_counter() - start:.0f} s; results in {plan.out}", flush=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
