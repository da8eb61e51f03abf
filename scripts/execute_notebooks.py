"""Re-execute chapter notebooks in place to refresh their committed outputs.

    python scripts/execute_notebooks.py                    # every notebook in chapters/
    python scripts/execute_notebooks.py chapters/02_*.ipynb

Run it on a CPU machine before committing a changed notebook: the outputs it stores are what
the website shows and what nbval (`make test`) compares against. The kernel is the Python that
runs this script, started in chapters/ like nbval does.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent


def execute(path: Path, timeout: int) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            store_widget_state=True, resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    # nbclient needs the widget state while it runs (its output-widget hook reads it); the state is per
    # session and the site shows static renderings, so it is dropped before saving.
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:  # keep diffs small: no per-run metadata
        cell.get("metadata", {}).pop("execution", None)
    nbformat.write(nb, path)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted((ROOT / "chapters").glob("*.ipynb"))
    for path in paths:
        print(f"executing {path} ...", flush=True)
        print(f"  done in {execute(path.resolve(), args.timeout):.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
