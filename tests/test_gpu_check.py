"""scripts/gpu_check.py: its plan, its step runner (failures and timeouts are recorded,
never fatal), its reports, and a short dry run end to end on the CPU."""
from __future__ import annotations

import base64
import datetime as dt
import json
import os
import sys
import tarfile
import time
from pathlib import Path

import pytest
import torch

import execute_notebooks
import gpu_check
from gpu_check import Plan, Runner, StepResult

# runs scripts/gpu_check.py's dry runs end to end (the slow tier)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
NOW = dt.datetime(2026, 12, 1, 9, 30, tzinfo=dt.timezone.utc)


def _plan(tmp_path, **changes) -> Plan:
    plan = gpu_check.make_plan(gpu_check.parse_args(["--dry-run", "--out",
                                                     str(tmp_path)]))
    for key, value in changes.items():
        setattr(plan, key, value)
    return plan


def test_the_gpu_plan_runs_everything_within_nine_and_a_half_minutes():
    plan = gpu_check.make_plan(gpu_check.parse_args([]), slug="nvidia-h200", now=NOW)
    assert plan.device == "cuda" and not plan.dry_run
    assert plan.out == ROOT / "results" / "gpu" / "2026-12-01-0930-nvidia-h200"
    assert plan.steps == list(gpu_check.STEPS) and plan.total_budget == 570
    for step in ("parallel", "kernels"):
        assert step in plan.steps and step in gpu_check.EXCLUSIVE
    chapters = sorted(p.name for p in (ROOT / "chapters").glob("*.ipynb"))
    assert sorted(Path(n).name for n in plan.notebooks) == chapters
    assert plan.tests == ["tests"] and plan.jobs > 1
    dtypes = [argv[argv.index("--dtype") + 1] for argv in plan.bench]
    assert dtypes == ["bfloat16", "float32"]
    for argv in plan.bench:
        assert argv[argv.index("--device") + 1] == "cuda"
        assert "qwen2.5-0.5b" in argv and "smollm2-135m" in argv
    # the timed steps run alone first and leave time for the checks
    # (one command of the lent device may run 600 s)
    exclusive = sum(plan.budgets[s] for s in gpu_check.EXCLUSIVE)
    assert exclusive <= plan.total_budget - 180
    env = plan.env()  # every thread the machine has: only the dry run pins one
    assert env["LLMCORE_DEVICE"] == "cuda"
    assert env.get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
    assert plan.env(side_by_side=True)["OMP_NUM_THREADS"] == "2"  # the checks'
    from llmcore.hf import config_from_hf
    from llmcore.profile import parameter_count
    shape = config_from_hf(dict(gpu_check.MEASURE_SHAPE))  # Qwen2.5-0.5B's
    assert shape.attention_bias and 490e6 < parameter_count(shape) < 500e6


def test_the_dry_run_plan_is_small_and_on_one_cpu_thread():
    plan = gpu_check.make_plan(gpu_check.parse_args(["--dry-run"]), now=NOW)
    assert plan.device == "cpu" and plan.jobs == 1 and plan.total_budget <= 180
    assert plan.out == ROOT / "results" / "gpu-dry-run" / "2026-12-01-0930-cpu"
    assert [Path(n).stem for n in plan.notebooks] == list(gpu_check.DRY_NOTEBOOKS)
    assert all(Path(n).exists() for n in plan.notebooks)
    assert all((ROOT / t).exists() for t in plan.tests)
    env = plan.env()
    assert env["LLMCORE_DEVICE"] == "cpu" and env["OMP_NUM_THREADS"] == "1"
    assert str(ROOT) in env["PYTHONPATH"].split(":")
    for argv in plan.bench:
        assert "tiny-shape" in argv and argv[argv.index("--device") + 1] == "cpu"


def test_arguments_are_checked():
    with pytest.raises(SystemExit, match="unknown step"):
        gpu_check.make_plan(gpu_check.parse_args(["--steps", "env,nope"]), slug="x")
    with pytest.raises(SystemExit, match="STEP=SECONDS"):
        gpu_check.make_plan(gpu_check.parse_args(["--budget", "bench"]), slug="x")
    with pytest.raises(SystemExit, match="matches 0 chapters"):
        gpu_check.make_plan(gpu_check.parse_args(["--notebooks", "99_none"]), slug="x")
    plan = gpu_check.make_plan(gpu_check.parse_args(
        ["--budget", "bench=12", "--steps", "bench,env", "--notebooks", "02"]),
        slug="x")
    assert plan.budgets["bench"] == 12 and plan.steps == ["bench", "env"]
    assert [Path(n).name for n in plan.notebooks] == ["02_tokenizer.ipynb"]


def test_a_failing_step_a_hung_step_and_the_deadline_are_recorded(tmp_path):
    plan = _plan(tmp_path, budgets={**gpu_check.DRY_BUDGETS, "bench": 6})
    runner = Runner(plan)

    def broken(result, deadline):
        raise ValueError("a bug in the step")

    def hangs(result, deadline):
        code, seconds = gpu_check.run_command(
            [sys.executable, "-c", "import time; time.sleep(60)"],
            tmp_path / "logs" / "bench.log", deadline - time.monotonic(), plan.env())
        result.status, result.error = gpu_check._status(code)

    assert runner.run("env", broken).status == "error"
    log = (tmp_path / "logs" / "env.log").read_text()
    assert "ValueError: a bug in the step" in log
    start = time.monotonic()
    hung = runner.run("bench", hangs)
    assert hung.status == "timeout" and time.monotonic() - start < 20
    assert "killed after" in (tmp_path / "logs" / "bench.log").read_text()
    runner.deadline = time.monotonic() + 1  # the run's total budget is spent
    skipped = runner.run("tests", lambda result, deadline: None)
    assert skipped.status == "skipped" and "out of time" in skipped.error
    summary = gpu_check.write_summary(plan, runner.results, "now", 3.0)
    assert not summary["ok"]
    assert summary["steps"]["bench"]["status"] == "timeout"
    table = (tmp_path / "summary.md").read_text()
    assert "| env | error |" in table and "| tests | skipped |" in table


def test_junit_summary_lists_the_failing_tests(tmp_path):
    xml = tmp_path / "r.xml"
    xml.write_text(
        '<testsuites><testsuite tests="3" failures="1" errors="0" skipped="1">'
        '<testcase classname="tests.test_x" name="test_ok"/>'
        '<testcase classname="tests.test_x" name="test_bad">'
        '<failure message="assert 1 == 2">trace</failure></testcase>'
        '<testcase classname="tests.test_x" name="test_gpu"><skipped/></testcase>'
        '</testsuite></testsuites>')
    got = gpu_check.junit_summary(xml)
    counts = (got["tests"], got["passed"], got["failures"], got["skipped"])
    assert counts == (3, 1, 1, 1)
    assert got["failing"] == [{"test": "tests.test_x::test_bad", "kind": "failure",
                               "message": "assert 1 == 2"}]
    assert gpu_check.junit_summary(tmp_path / "none.xml") == {"junit": "missing"}


def test_notebook_report_finds_errors_and_keeps_the_gpu_cells_output(tmp_path):
    png = base64.b64encode(b"\x89PNG fake").decode()
    cells = [
        {"cell_type": "markdown", "source": ["# 5. x"]},
        {"cell_type": "code", "source": ["# Setup: ...\nimport torch.cuda"],
         "outputs": []},
        {"cell_type": "code", "source": ["if torch.cuda.is_available():\n    plot()"],
         "outputs": [{"output_type": "stream", "name": "stdout", "text": ["H200\n"]},
                     {"output_type": "display_data",
                      "data": {"image/png": png, "text/plain": ["<Figure>"]}}]},
        {"cell_type": "code", "source": ["1 / 0"],
         "outputs": [{"output_type": "error", "ename": "ZeroDivisionError",
                      "evalue": "division by zero", "traceback": []}]},
    ]
    path = tmp_path / "05_x.ipynb"
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                "nbformat_minor": 5}))
    report = gpu_check.notebook_report(path, tmp_path / "plots")
    assert report["errors"] == [{"cell": 3, "ename": "ZeroDivisionError",
                                 "evalue": "division by zero"}]
    [cell] = report["gpu_cells"]
    assert cell["cell"] == 2 and cell["text"] == "H200\n"
    assert (tmp_path / "plots" / cell["images"][0]).read_bytes() == b"\x89PNG fake"


def test_bench_headline_and_plot(tmp_path):
    record = {"model": "m", "dtype": "bfloat16", "device": "cuda", "lead": "llmcore",
              "tok_s": {"transformers": [100.0, 110.0], "llmcore": [150.0, 160.0]},
              "rooflines_tok_s": [200.0, 220.0],
              "fraction_of_roofline": {"transformers": 0.5, "llmcore": 0.74},
              "vs_transformers": {"llmcore": 1.5},
              "same_tokens_as_transformers": {"llmcore": True}}
    head = gpu_check.bench_headline([record])["m bfloat16"]
    assert head["llmcore tok/s"] == 155.0 and head["roofline tok/s"] == 210.0
    assert head["llmcore fraction of roofline"] == 0.74 and head["same tokens"]
    gpu_check.plot_bench([record], tmp_path / "b.png")
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_execute_notebooks_never_overwrites_with_out_dir():
    nb = ROOT / "chapters" / "00_setup.ipynb"
    before = nb.stat().st_mtime_ns
    with pytest.raises(SystemExit, match="would overwrite"):
        execute_notebooks.main(["--out-dir", str(nb.parent), str(nb)])
    assert nb.stat().st_mtime_ns == before


def test_a_short_dry_run_end_to_end(tmp_path, capsys):
    """env and measure as subprocesses, the cuda tests of one file, an archive."""
    out, archive = tmp_path / "run", tmp_path / "run.tar.gz"
    code = gpu_check.main(["--dry-run", "--steps", "env,measure,cuda_tests", "--out",
                           str(out), "--tests", "tests/test_device.py", "--archive",
                           str(archive)])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["ok"], (out / "summary.md").read_text()
    assert str(out) in capsys.readouterr().out
    env = json.loads((out / "env.json").read_text())
    assert env["device"] == "cpu" and env["torch"] and env["git"]["commit"]
    measure = json.loads((out / "measure.json").read_text())
    assert not measure["errors"]
    kinds = {r["kind"] for r in measure["roofline_points"]}
    assert kinds == {"decode", "prefill"}
    assert measure["step_cost"][0]["ratio_to_one"] == 1.0
    for name in ("roofline", "decode_context", "step_cost", "copy_bandwidth"):
        assert (out / "plots" / f"{name}.png").exists()
    cuda = summary["steps"]["cuda_tests"]["detail"]
    ran = cuda["passed"] if torch.cuda.is_available() else cuda["skipped"]
    assert cuda["tests"] == ran > 0  # collected; skipped without a GPU
    with tarfile.open(archive) as tar:
        assert f"{out.name}/summary.json" in tar.getnames()


def test_the_parallel_step_plan_and_its_byte_count(tmp_path):
    """NCCL where there are GPUs, gloo on 2 CPU ranks besides where one GPU cannot
    make 2; the collectives of each step counted against the formula."""
    assert gpu_check.parallel_runs("cuda", 1) == [("nccl", 1), ("gloo", 2)]
    assert gpu_check.parallel_runs("cuda", 8) == [("nccl", 2)]
    assert gpu_check.parallel_runs("cpu", 0) == [("gloo", 2)]
    assert set(gpu_check.BUDGETS) == set(gpu_check.DRY_BUDGETS) == set(gpu_check.STEPS)
    # n_layers 2, batch 2, dim 4, float32: 2 x 2 x 2 x 4 x 4 = 128 bytes in the layers,
    # 32 for the embedding, 2 x 8 x 4 = 64 in the logits' all-gather
    step = [("all_reduce", 32, 0.001)] * 5 + [("all_gather", 64, 0.002)]
    rank = {"steps": [step] * 3, "seconds": [0.5, 0.01, 0.01], "dim": 4,
            "n_layers": 2, "vocab_rows": 8, "itemsize": 4, "threads": 1}
    report = gpu_check.comm_report([rank, rank], batch=2, warm=1)
    assert report["bytes as the formula"] and report["timed steps"] == 2
    assert report["bytes per step"] == {"all_reduce": 160, "all_gather": 64}
    assert report["layers' all-reduce bytes per step"] == 128
    assert report["formula 2 x n_layers x batch x dim x itemsize"] == 128
    assert report["median step ms"] == 10.0 and report["collective share"] == 0.7
    short = {**rank, "steps": [step, step, step[1:]]}  # one all-reduce missing
    report = gpu_check.comm_report([rank, short], batch=2, warm=1)
    assert not report["bytes as the formula"]
    assert report["steps not as the formula [rank, step]"] == [[1, 2]]
    alone = {**rank, "steps": [[]] * 3}  # one rank sends nothing
    assert gpu_check.comm_report([alone], batch=2, warm=1)["bytes as the formula"]
    # the note (NCCL timing needs 2 GPUs) reaches the summary's table
    data = {"note": "NCCL timing needs 2 GPUs", "runs": {"nccl x1 (cuda)": {
        "logits max |diff|": 0.0, "parity ok": True}}}
    head = gpu_check.parallel_headline(data)
    assert head["nccl x1 (cuda)"] == {"logits max |diff|": 0.0, "parity ok": True}
    plan = _plan(tmp_path, steps=["parallel"])
    result = StepResult("parallel", "ok", 1.0, 60.0, head)
    gpu_check.write_summary(plan, {"parallel": result}, "now", 1.0)
    assert ("| parallel | ok | 1 | 60 | NCCL timing needs 2 GPUs |"
            in (tmp_path / "summary.md").read_text())


def test_the_parallel_step_dry_run_on_two_gloo_ranks(tmp_path):
    """The step end to end on the CPU: 2 ranks' logits equal the single-process
    model's, and each decode step sends the formula's bytes (about 15 s; the step's
    budget bounds it, and its ranks are ended with it)."""
    out = tmp_path / "run"
    code = gpu_check.main(["--dry-run", "--steps", "parallel", "--out", str(out),
                           "--budget", "parallel=50"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["ok"], (out / "summary.md").read_text()
    head = summary["steps"]["parallel"]["detail"]["gloo x2 (cpu)"]
    assert head["parity ok"] and head["logits max |diff|"] < 1e-4
    assert head["bytes as the formula"]
    assert head["layers' all-reduce bytes per step"] == 2 * 6 * 2 * 256 * 4  # tiny
    data = json.loads((out / "parallel.json").read_text())
    assert not data["errors"] and data["sizes"]["batch"] == 2


def test_the_kernels_step_plan_and_its_cost_model(tmp_path):
    """H200-class shapes (32 query heads over 8 kv heads of 128, bf16, contexts to
    16k) on a GPU, tiny float32 ones for the dry run; FLOPs and K/V bytes from the
    shapes; the headline of made-up rows."""
    big, dry = gpu_check.KERNEL_SIZES, gpu_check.DRY_KERNEL_SIZES
    assert (big["heads"], big["kv_heads"], big["head_dim"]) == (32, 8, 128)
    assert big["dtype"] == "bfloat16" and max(c for _, c in big["decode"]) == 16384
    assert {b for b, _ in big["decode"]} == {16, 64}
    assert big["partition"] % 64 == 0 and dry["partition"] % 16 == 0  # key tiles
    assert max(c for _, c in dry["decode"]) > dry["partition"]  # split-K splits
    assert gpu_check.parse_args(["--worker", "kernels"]).worker == "kernels"
    # decode: 2 x batch x kv_heads x context x head_dim x itemsize bytes of K/V
    cost = gpu_check.attention_cost(64, 32, 8, 1, 16384, 128, 2)
    assert cost["kv_bytes"] == 2 * 64 * 8 * 16384 * 128 * 2  # 4.3 GB
    assert cost["flops"] == 4 * 64 * 32 * 16384 * 128
    causal = gpu_check.attention_cost(1, 32, 8, 4096, 4096, 128, 2, causal=True)
    assert causal["flops"] == 2 * 32 * 4096 * 4096 * 128
    data = {"flash": [{"batch": 1, "tokens": 8, "triton TFLOP/s": 400.0,
                       "sdpa TFLOP/s": 500.0, "triton / sdpa time": 1.25,
                       "max |triton - sdpa|": 0.0078125}],
            "decode": [{"batch": 16, "context": 1024, "triton GB/s": 3000.0,
                        "triton split-K GB/s": 3500.0, "KVPool.attend GB/s": 900.0,
                        "triton fraction of copy bandwidth": 0.75,
                        "max |triton - KVPool.attend|": 0.001,
                        "max |triton split-K - KVPool.attend|": 0.002}]}
    head = gpu_check.kernels_headline(data)
    assert head["flash b1 s8"]["triton / sdpa time"] == 1.25
    assert head["decode b16 c1024"]["max |diff|"] == 0.002
    assert head["decode b16 c1024"]["triton fraction of copy bandwidth"] == 0.75


def test_the_kernels_step_dry_run_through_the_interpreter(tmp_path):
    """The step end to end on the CPU (Triton's interpreter; about 6 s): flash against
    SDPA and the paged kernels against KVPool.attend within float32 tolerance."""
    pytest.importorskip("triton", reason='triton is not installed (pip install '
                        '"llmcore-book[triton]")')
    out = tmp_path / "run"
    code = gpu_check.main(["--dry-run", "--steps", "kernels", "--out", str(out),
                           "--budget", "kernels=50"])
    summary = json.loads((out / "summary.json").read_text())
    assert code == 0 and summary["ok"], (out / "summary.md").read_text()
    data = json.loads((out / "kernels.json").read_text())
    assert not data["errors"] and data["interpreted"] and "not the kernels' speed" \
        in data["note"]
    assert len(data["flash"]) == 1 and len(data["decode"]) == 2
    assert all(r["ok"] for r in data["flash"])
    assert all(r["triton ok"] and r["triton split-K ok"] for r in data["decode"])
    assert data["peaks"]["bandwidth_Bps"] > 0
