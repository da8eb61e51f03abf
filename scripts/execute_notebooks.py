"""Re-execute chapter notebooks in place to refresh their committed outputs.

    python scripts/execute_notebooks.py                    # every notebook in chapters/
    python scripts/execute_notebooks.py chapters/02_*.ipynb
    python scripts/execute_notebooks.py --out-dir results/x --allow-errors   # copies

Run it on a CPU machine before committing a changed notebook: the outputs it stores are what
the website shows and what nbval (`make test`) compares against. The kernel is the Python that
runs this script, started in chapters/ like nbval does. With --out-dir the executed copies
are written there and the notebooks in chapters/ stay as they are (scripts/gpu_check.py runs
every chapter on a GPU this way); --allow-errors runs every cell even after one raised.

Outputs fit to be shown. A notebook's timings are only as good as the machine was quiet:
before each notebook the script waits (up to --wait seconds) for the 1-minute load average to
fall to the number of cores, and records in the notebook's metadata, under
``llmcore.execution``, the machine (CPU model and its bf16 features), core and thread counts,
torch and Python versions, the date, the load average before and after the run (the latter
includes the notebook's own threads) and the CPU time other processes took while it ran. When
the load stayed above the core count before the run, or other processes took more than a
third of a core on average during it, the run is refused and the notebook is
left as it was; ``--allow-busy`` writes it anyway, marked ``"busy": true``, and says so loudly
(the site then shows the figures as measured on a busy machine, and ``tests/test_verdicts.py``
fails until the chapter is run again on a quiet one). Copies written with --out-dir are never
refused (the GPU check runs several at once); they carry the same record.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
import threading
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The CPU's model name and the features that change its bf16 and int8 arithmetic."""
    name, flags = platform.processor() or platform.machine(), set()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = ""
    for line in info.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("model name", "Model", "CPU part") and value.strip():
            name = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    features = [label for flag, label in (("avx512f", "AVX-512"),
                                          ("avx512_bf16", "AVX512-BF16"),
                                          ("amx_bf16", "AMX"), ("bf16", "BF16"),
                                          ("sve", "SVE")) if flag in flags]
    if not features and "avx2" in flags:
        features = ["AVX2"]
    return name + (f" ({', '.join(features)})" if features else "")


def busy_seconds() -> float:
    """CPU seconds spent by all processes since boot (user + nice + system + irq)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq = (int(x) for x in fields[:7])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


def tree_seconds(root: int) -> float:
    """CPU seconds of process `root` and its descendants (their own and their reaped
    children's)."""
    children: dict[int, list[int]] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        pid, ppid = int(entry.name), int(fields[1])
        children.setdefault(ppid, []).append(pid)
        times[pid] = sum(int(x) for x in fields[11:15]) / tick
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += times.get(pid, 0.0)
        todo.extend(children.get(pid, []))
    return total


class LoadMonitor:
    """CPU time that processes other than this one and its kernel take during a run,
    sampled every second (a finished child's time stays in its parent's count, so a
    kernel that exits does not show up as someone else's)."""

    def __init__(self):
        self.others = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> tuple[float, float]:
        return busy_seconds(), tree_seconds(os.getpid())

    def _run(self):
        total, ours = self._sample()
        while not self._stop.wait(1.0):
            new_total, new_ours = self._sample()
            self.others += max(0.0, (new_total - total) - (new_ours - ours))
            total, ours = new_total, new_ours

    def __enter__(self):
        self.start = time.perf_counter()
        if Path("/proc/stat").exists():
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.seconds = time.perf_counter() - self.start

    @property
    def other_cores(self) -> float:
        """Cores other processes kept busy on average while the notebook ran."""
        return self.others / max(self.seconds, 1e-9)


class BusyMachineError(RuntimeError):
    """The machine was too busy for the run's timings to be shown; nothing was written."""


def wait_for_quiet(cores: int, wait: float) -> float:
    """The 1-minute load average once it is at most `cores`, or when `wait` s ran out."""
    deadline = time.monotonic() + wait
    while (load := os.getloadavg()[0]) > cores and time.monotonic() < deadline:
        print(f"  load average {load:.2f} > {cores} cores: waiting", flush=True)
        time.sleep(15)
    return load


def run_record(cores: int, load_before: float, load_after: float,
               monitor: LoadMonitor) -> dict:
    import torch  # the kernel's torch: same interpreter

    # The load average after the run counts the notebook's own threads, so it is recorded
    # but not judged; what other processes took while it ran is measured directly.
    busy = load_before > cores or monitor.other_cores > OTHERS_LIMIT
    return {
        "date": datetime.date.today().isoformat(),
        "machine": cpu_model(),
        "cores": cores,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "load_before": round(load_before, 2),
        "load_after": round(load_after, 2),
        "other_processes_cores": round(monitor.other_cores, 2),
        "seconds": round(monitor.seconds, 1),
        "busy": busy,
    }


# other processes may keep at most this many cores busy on average while a notebook runs
OTHERS_LIMIT = 0.33


def execute(path: Path, timeout: int, out: Path | None = None, allow_errors: bool = False,
            allow_busy: bool = False, wait: float = 300.0) -> float:
    """Execute `path` (kernel started in its folder) and write it to `out` (default: in
    place), recording the run's machine and load under metadata llmcore.execution.
    Raises BusyMachineError (and writes nothing) when the machine was busy, unless
    allow_busy."""
    nb = nbformat.read(path, as_version=4)
    cores = os.cpu_count() or 1
    load_before = wait_for_quiet(cores, wait)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=True, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    with LoadMonitor() as monitor:
        client.execute()
    record = run_record(cores, load_before, os.getloadavg()[0], monitor)
    if record["busy"]:
        message = (f"{path.name}: the machine was busy (load average "
                   f"{record['load_before']} before, {record['load_after']} after, on "
                   f"{cores} cores; other processes used {record['other_processes_cores']} "
                   f"cores on average, the limit is {OTHERS_LIMIT})")
        if not allow_busy:
            raise BusyMachineError(message + "; nothing written. Run it again on a quiet "
                               "machine, or pass --allow-busy to keep the outputs marked "
                               "busy.")
        print("!" * 88 + f"\n  WARNING {message};\n  outputs written anyway, marked busy "
              "in the notebook's metadata\n" + "!" * 88, flush=True)
    nb.metadata.setdefault("llmcore", {})["execution"] = record
    # nbclient needs the widget state while it runs (its output-widget hook reads it); the state is per
    # session and the site shows static renderings, so it is dropped before saving.
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # keep diffs small: no per-run metadata
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, out or path)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    parser.add_argument("--out-dir", type=Path, help="write the executed notebooks here "
                        "(same file names) instead of over the originals")
    parser.add_argument("--allow-errors", action="store_true",
                        help="run every cell even after one raised (the error is kept as its output)")
    parser.add_argument("--allow-busy", action="store_true",
                        help="write the outputs even when the machine was busy (marked busy)")
    parser.add_argument("--wait", type=float, default=300.0,
                        help="seconds to wait for the load average to fall to the core count")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for path in paths:
        out = args.out_dir.resolve() / path.name if args.out_dir else None
        if out is not None and out == path.resolve():
            raise SystemExit(f"--out-dir would overwrite {path}; choose another folder")
        print(f"executing {path} ..." + (f" into {out}" if out else ""), flush=True)
        try:
            # copies (--out-dir: the GPU check runs several side by side) are never
            # refused; they carry the record all the same
            seconds = execute(path.resolve(), args.timeout, out, args.allow_errors,
                              args.allow_busy or out is not None,
                              0.0 if out is not None else args.wait)
        except BusyMachineError as error:
            print(f"  REFUSED: {error}", flush=True)
            failed.append(path.name)
            continue
        print(f"  done in {seconds:.1f} s", flush=True)
    if failed:
        print(f"not written (busy machine): {', '.join(failed)}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
