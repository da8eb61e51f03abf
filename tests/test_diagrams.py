"""The concept diagrams: committed SVGs are what scripts/diagrams.py draws, and each is shown."""
from __future__ import annotations

import json
import re
import subprocess
import sys

from conftest import ROOT

DIAGRAMS = ROOT / "book" / "_static" / "diagrams"
# A page shows a diagram with a MyST figure: `{figure}` in a Markdown page, `{figure-md}` with
# an HTML <img> in a notebook (Jupyter shows the image too, which it cannot for `{figure}`).
FIGURE = re.compile(r"^(```|:::)\{figure(?:-md)?\}.*?^\1$", re.M | re.S)
PATH = re.compile(r"(\S*_static/diagrams/([\w-]+\.svg))")


def _pages() -> dict[str, str]:
    """Markdown of every page: book/*.md, and the markdown cells of chapters/*.ipynb."""
    pages = {str(p.relative_to(ROOT)): p.read_text("utf-8") for p in (ROOT / "book").glob("*.md")}
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(nb.read_text("utf-8"))["cells"]
        pages[str(nb.relative_to(ROOT))] = "\n".join(
            "".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    return pages


def test_committed_svgs_are_what_the_script_draws(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "scripts" / "diagrams.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    drawn = sorted(p.name for p in tmp_path.glob("*.svg"))
    committed = sorted(p.name for p in DIAGRAMS.glob("*.svg"))
    assert drawn == committed, "run `python scripts/diagrams.py` and commit book/_static/diagrams"
    assert len(drawn) >= 8
    for name in drawn:
        assert (tmp_path / name).read_bytes() == (DIAGRAMS / name).read_bytes(), (
            f"{name} differs from what scripts/diagrams.py draws: run the script and commit it")


def test_every_diagram_is_shown_with_alt_text_width_and_a_caption():
    shown = {}
    for page, text in _pages().items():
        for m in FIGURE.finditer(text):
            block = m.group(0)
            found = PATH.search(block)
            if not found:
                continue
            path, name = found.groups()
            path = path.removeprefix('src="')
            where = (ROOT / page).parent / path
            assert where.resolve() == (DIAGRAMS / name).resolve(), f"{page}: {path} is not {name}"
            assert re.search(r'(:alt: |alt=")\w', block), f"{page}: {name} has no alt text"
            assert ":width: 100%" in block or 'width="100%"' in block, f"{page}: {name}"
            body = block.split("\n\n", 1)[1] if "\n\n" in block else ""
            assert body.strip("`:\n "), f"{page}: {name} has no caption"
            shown.setdefault(name, []).append(page)
    missing = sorted(p.name for p in DIAGRAMS.glob("*.svg") if p.name not in shown)
    assert not missing, f"diagrams no page shows: {missing}"
