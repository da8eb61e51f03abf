"""Build the website with Jupyter Book 1.x: warnings are errors, notebooks are not executed.

    python scripts/build_book.py                 # into _build/html (what `make book` does)
    python scripts/build_book.py --output DIR    # into DIR/_build/html (the tests use a temp dir)

Every build is a full one (`--all`): an incremental Sphinx build would skip the warnings of
pages it does not re-read, and a warning must never pass unnoticed.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(output: Path | None = None) -> Path:
    """Build the site and return the path of its index.html. Raises CalledProcessError on failure."""
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(ROOT), "--all", "-W", "-n", "--keep-going"]
    if output is not None:
        cmd += ["--path-output", str(output)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return (output or ROOT) / "_build" / "html" / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    args = parser.parse_args(argv)
    try:
        index = build(args.output)
    except subprocess.CalledProcessError as e:
        print(f"book build failed (exit {e.returncode}); the warnings above say where", file=sys.stderr)
        return 1
    print(f"\nThe book is built. Open file://{index.resolve()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
