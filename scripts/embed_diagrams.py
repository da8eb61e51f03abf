"""Embed the concept diagrams in the chapter notebooks, so that a notebook opened alone shows them.

    python scripts/embed_diagrams.py                # rewrite chapters/*.ipynb in place
    python scripts/embed_diagrams.py NB.ipynb ...   # only these notebooks
    python scripts/embed_diagrams.py --check        # list notebooks whose diagrams are not
                                                    # the current files (exit 1 if any)

A chapter shows a diagram in a markdown cell as `<img src="../book/_static/diagrams/NAME.svg"
...>` inside a `{figure-md}` (CONTRIBUTING.md, "Change a diagram"). That path resolves in the
repository and on the site, but not in a notebook opened on its own (Colab from GitHub, a
download): the reader sees a broken image. This script replaces every such `src` in the
markdown cells by `data:image/svg+xml;base64,...` of the current English SVG, and replaces a
stale embedded copy by the current one. Jupyter, Colab and the site (MyST turns the `<img>`
into an image node; Sphinx writes a data URI as it is) all show it.

An embedded copy is recognised by its own bytes: every SVG scripts/diagrams.py writes names
itself in its metadata, `<dc:identifier>llmcore-diagram:NAME</dc:identifier>` (not drawn, and
it survives any redraw), so the script knows which file a data URI came from even when the
drawing has changed since. A data URI without that marker is left alone.

The Chinese edition keeps the path form: scripts/i18n.py turns embedded diagrams back into
paths (`to_paths`) before it hashes or compares a cell, so embedding changes no translation
unit, and the Chinese build copies book/zh/diagrams/*.svg over the English files.

Write new figures with the path form; run this script after `python scripts/diagrams.py`.
"""
from __future__ import annotations

import argparse
import base64
import binascii
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DIAGRAMS = ROOT / "book" / "_static" / "diagrams"
CHAPTERS = ROOT / "chapters"
PATH_PREFIX = "../book/_static/diagrams/"  # the path form, from chapters/
DATA_PREFIX = "data:image/svg+xml;base64,"
MARKER = re.compile(rb"<dc:identifier>llmcore-diagram:([\w-]+)</dc:identifier>")
# the src of an <img>: the path form, or any SVG data URI (a diagram's if it has the marker)
SRC = re.compile(r'src="(?:' + re.escape(PATH_PREFIX) + r'(?P<name>[\w-]+)\.svg'
                 r'|' + re.escape(DATA_PREFIX) + r'(?P<data>[A-Za-z0-9+/=]+))"')


def diagram_name(svg: bytes) -> str | None:
    """The diagram an SVG's bytes are a drawing of (its marker), or None."""
    m = MARKER.search(svg)
    return m.group(1).decode() if m else None


def decode(data: str) -> bytes | None:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def data_uri(name: str, folder: Path = DIAGRAMS) -> str:
    """The data URI of the current file of diagram `name`."""
    path = folder / f"{name}.svg"
    if not path.is_file():
        raise FileNotFoundError(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
                                f": no such diagram (scripts/diagrams.py draws them)")
    return DATA_PREFIX + base64.b64encode(path.read_bytes()).decode("ascii")


def _src_name(m: re.Match) -> str | None:
    """The diagram an <img src="..."> match shows, or None (not one of the diagrams)."""
    if m.group("name"):
        return m.group("name")
    svg = decode(m.group("data"))
    return diagram_name(svg) if svg is not None else None


def embed(text: str, folder: Path = DIAGRAMS) -> str:
    """`text` with every diagram (path form or embedded copy) embedded as its current file."""
    def sub(m: re.Match) -> str:
        name = _src_name(m)
        return m.group(0) if name is None else f'src="{data_uri(name, folder)}"'
    return SRC.sub(sub, text)


def to_paths(text: str) -> str:
    """`text` with every embedded diagram back in the path form (what book/zh/*.yml store)."""
    def sub(m: re.Match) -> str:
        name = _src_name(m)
        return m.group(0) if name is None else f'src="{PATH_PREFIX}{name}.svg"'
    return SRC.sub(sub, text)


def problems(text: str, folder: Path = DIAGRAMS) -> list[str]:
    """What in `text` is not the current embedded diagram: one line per image."""
    out = []
    for m in SRC.finditer(text):
        name = _src_name(m)
        if name is None:
            continue
        if m.group("name"):
            out.append(f"{name}: not embedded (path form)")
        elif m.group("data") != data_uri(name, folder).removeprefix(DATA_PREFIX):
            out.append(f"{name}: the embedded copy differs from {name}.svg")
    return out


def _load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _dump(nb: dict) -> str:
    return json.dumps(nb, ensure_ascii=False, indent=1) + "\n"


def embed_notebook(path: Path, folder: Path = DIAGRAMS) -> bool:
    """Embed the diagrams of notebook `path` in place; True if the file changed. Only the
    markdown cells whose diagrams change are rewritten (same lines, same cell ids)."""
    nb, changed = _load(path), False
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        source = "".join(cell["source"])
        new = embed(source, folder)
        if new != source:
            cell["source"] = new.splitlines(keepends=True)
            changed = True
    if changed:
        path.write_text(_dump(nb), encoding="utf-8")
    return changed


def notebook_problems(path: Path, folder: Path = DIAGRAMS) -> list[str]:
    """Every diagram of notebook `path` that is not embedded as the current file."""
    out = []
    for cell in _load(path)["cells"]:
        if cell["cell_type"] == "markdown":
            out += [f"cell {cell.get('id', '?')}: {p}"
                    for p in problems("".join(cell["source"]), folder)]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="default: chapters/*.ipynb")
    parser.add_argument("--check", action="store_true",
                        help="change nothing; list the notebooks to embed (exit 1 if any)")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(CHAPTERS.glob("*.ipynb"))
    if args.check:
        stale = 0
        for path in paths:
            found = notebook_problems(path)
            if found:
                stale += 1
                print(f"{path}:")
                for p in found:
                    print(f"  {p}")
        if stale:
            print(f"{stale} notebook(s) to update: python scripts/embed_diagrams.py",
                  file=sys.stderr)
        return 1 if stale else 0
    for path in paths:
        if embed_notebook(path):
            print(f"embedded: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
