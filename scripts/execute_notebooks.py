"""Re-execute chapter notebooks in place to refresh their committed outputs.

    python scripts/execute_notebooks.py                    # every notebook in chapters/
    python scripts/execute_notebooks.py chapters/02_*.ipynb
    python scripts/execute_notebooks.py --out-dir results/x --allow-errors   # copies

Run it on a CPU machine before committing a changed notebook: the outputs it stores are what
the website shows and what nbval (`make test`) compares against. The kernel is the Python that
runs this script, started in chapters/ like nbval does. With --out-dir the executed copies
are written there and the notebooks in chapters/ stay as they are (scripts/gpu_check.py runs
every chapter on a GPU this way); --allow-errors runs every cell even after one raised.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path, timeout: int, out: Path | None = None, allow_errors: bool = False) -> float:
    """Execute `path` (kernel started in its folder) and write it to `out` (default: in place)."""
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=True, allow_errors=allow_errors,
                            resources={"metadata": {"path": str(path.parent)}})
    client.execute()
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
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    for path in paths:
        out = args.out_dir.resolve() / path.name if args.out_dir else None
        if out is not None and out == path.resolve():
            raise SystemExit(f"--out-dir would overwrite {path}; choose another folder")
        print(f"executing {path} ..." + (f" into {out}" if out else ""), flush=True)
        seconds = execute(path.resolve(), args.timeout, out, args.allow_errors)
        print(f"  done in {seconds:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
