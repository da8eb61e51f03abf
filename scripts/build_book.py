"""Build the website with Jupyter Book 1.x: warnings are errors, notebooks are not executed.

    python scripts/build_book.py                 # into _build/html (what `make book` does)
    python scripts/build_book.py --output DIR    # into DIR/_build/html (the tests use a temp dir)
    python scripts/build_book.py --edition en    # the English edition only (faster)

Two editions, one site: the English at _build/html/ and the Chinese (中文版) at
_build/html/zh/. The Chinese is built from a source tree that scripts/i18n.py writes into
_build/zh-src/: the same notebooks, code and outputs, with the markdown of book/zh/*.yml.

Every build is a full one (`--all`): an incremental Sphinx build would skip the warnings of
pages it does not re-read, and a warning must never pass unnoticed.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import i18n  # noqa: E402

EDITIONS = ("en", "zh")


def _jupyter_book(source: Path, output: Path | None) -> None:
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb), "build", str(source), "--all", "-W", "-n", "--keep-going"]
    if output is not None:
        cmd += ["--path-output", str(output)]
    subprocess.run(cmd, check=True, cwd=source)


def build(output: Path | None = None, editions: tuple[str, ...] = EDITIONS) -> Path:
    """Build the site and return the path of its index.html. Raises CalledProcessError on
    failure."""
    base = (output or ROOT) / "_build"
    if "en" in editions:
        _jupyter_book(ROOT, output)
    if "zh" in editions:
        source = i18n.write_zh_source(base / "zh-src")
        _jupyter_book(source, None)
        site = base / "html" / "zh"
        if site.exists():
            shutil.rmtree(site)
        shutil.copytree(source / "_build" / "html", site)
    return base / "html" / "index.html"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=None)
    parser.add_argument("--edition", choices=EDITIONS, action="append",
                        help="build only this edition (repeatable; default: both)")
    args = parser.parse_args(argv)
    try:
        index = build(args.output, tuple(args.edition or EDITIONS))
    except subprocess.CalledProcessError as e:
        print(f"book build failed (exit {e.returncode}); the warnings above say where", file=sys.stderr)
        return 1
    print(f"\nThe book is built. Open file://{index.resolve()}"
          + (f" (中文版: file://{index.resolve().parent / 'zh' / 'index.html'})"
             if "zh" in (args.edition or EDITIONS) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
