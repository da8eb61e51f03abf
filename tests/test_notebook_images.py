"""A chapter notebook opened alone (Colab from GitHub, a download) shows every image its
markdown shows: the diagrams are embedded as data URIs (scripts/embed_diagrams.py), and each
embedded copy is the current drawing. Embedding changes no unit of the Chinese edition."""
from __future__ import annotations

import base64
import binascii
import html
import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import embed_diagrams
import i18n
from conftest import ROOT

# opens the notebooks' images in headless Chromium (the slow tier)
pytestmark = pytest.mark.slow

NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
FIX = "run `python scripts/embed_diagrams.py` and commit the notebooks"

# <img src="..."> and ![alt](src "title") in markdown
HTML_SRC = re.compile(r"<img\b[^>]*?\bsrc=([\"'])(.*?)\1", re.S | re.I)
MD_SRC = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
DATA = re.compile(r"data:(?P<mime>[\w.+/-]+)(?P<params>(?:;[\w-]+=[\w.-]+)*)"
                  r"(?P<b64>;base64)?,(?P<data>.*)", re.S)


def _markdown_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text("utf-8"))["cells"]
            if c["cell_type"] == "markdown"]


def image_sources(cell: dict) -> list[str]:
    text = "".join(cell["source"])
    return [html.unescape(m.group(2)) for m in HTML_SRC.finditer(text)] + \
        [m.group(1) for m in MD_SRC.finditer(text)]


def image_problem(src: str, folder: Path, cell: dict) -> str | None:
    """Why `src` shows nothing in a notebook that sits alone in `folder` (None: it shows)."""
    if src.startswith(("http://", "https://")):
        return None  # the web: not this test's business (the book uses none)
    if src.startswith("attachment:"):
        name = src.removeprefix("attachment:")
        if name not in (cell.get("attachments") or {}):
            return f"{src}: no such cell attachment"
        (mime, data), = cell["attachments"][name].items()
        src = f"data:{mime};base64,{data}"
    m = DATA.fullmatch(src)
    if src.startswith("data:"):
        if m is None or not m.group("b64"):
            return f"{src[:40]}...: not a base64 data URI"
        try:
            raw = base64.b64decode(m.group("data"), validate=True)
        except (binascii.Error, ValueError):
            return f"{src[:40]}...: invalid base64"
        mime = m.group("mime")
        if mime == "image/svg+xml":
            try:
                root = ET.fromstring(raw)
            except ET.ParseError as e:
                return f"{src[:40]}...: not well-formed SVG ({e})"
            if not root.tag.endswith("svg"):
                return f"{src[:40]}...: the document is <{root.tag}>, not an SVG"
            return None
        if mime == "image/png":
            return None if raw.startswith(b"\x89PNG\r\n\x1a\n") else \
                f"{src[:40]}...: not a PNG"
        return f"{src[:40]}...: an image type this book does not use ({mime})"
    if (folder / src).is_file():
        return None
    return f"{src}: a path that does not resolve next to the notebook alone"


def alone(path: Path, tmp_path: Path) -> Path:
    """A copy of notebook `path`, alone in an empty folder."""
    folder = tmp_path / "alone"
    folder.mkdir()
    return Path(shutil.copy(path, folder / path.name))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_image_shows_in_the_notebook_copied_alone(path, tmp_path):
    copy = alone(path, tmp_path)
    bad = [f"cell {c['id']}: {problem}"
           for c in _markdown_cells(copy) for src in image_sources(c)
           if (problem := image_problem(src, copy.parent, c))]
    assert not bad, f"{path.name}: images a reader of the notebook alone cannot see " \
                    f"({FIX}):\n  " + "\n  ".join(bad)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_every_embedded_diagram_is_the_current_drawing(path):
    found = embed_diagrams.notebook_problems(path)
    assert not found, f"{path.name} ({FIX}):\n  " + "\n  ".join(found)


# --- the script, on copies ------------------------------------------------------------------

def _figure(src: str) -> str:
    return (f":::{{figure-md}} fig-x\n<img src=\"{src}\" alt=\"A diagram\" width=\"100%\">\n\n"
            f"A caption.\n:::\n")


def _folder_with(tmp_path: Path, names: list[str]) -> Path:
    folder = tmp_path / "diagrams"
    folder.mkdir()
    for name in names:
        shutil.copy(embed_diagrams.DIAGRAMS / f"{name}.svg", folder)
    return folder


def test_embed_then_to_paths_gives_back_the_text(tmp_path):
    text = _figure("../book/_static/diagrams/kv_growth.svg") + "\nProse.\n" + \
        _figure("../book/_static/diagrams/pipeline_06.svg")
    embedded = embed_diagrams.embed(text)
    assert "_static/diagrams" not in embedded and embedded.count("data:image/svg+xml") == 2
    assert embed_diagrams.problems(embedded) == []
    assert embed_diagrams.embed(embedded) == embedded  # idempotent
    assert embed_diagrams.to_paths(embedded) == text
    assert embed_diagrams.problems(text) == [
        "kv_growth: not embedded (path form)", "pipeline_06: not embedded (path form)"]


def test_a_stale_embedded_copy_is_recognised_and_replaced(tmp_path):
    folder = _folder_with(tmp_path, ["gqa_heads"])
    svg = folder / "gqa_heads.svg"
    text = embed_diagrams.embed(_figure("../book/_static/diagrams/gqa_heads.svg"), folder)
    svg.write_text(svg.read_text("utf-8").replace("</svg>", "<!-- redrawn --></svg>"),
                   "utf-8")
    assert embed_diagrams.problems(text, folder) == [
        "gqa_heads: the embedded copy differs from gqa_heads.svg"]
    current = embed_diagrams.embed(text, folder)
    assert embed_diagrams.problems(current, folder) == []
    assert base64.b64decode(current.split("base64,")[1].split('"')[0]) == svg.read_bytes()
    assert embed_diagrams.to_paths(current) == embed_diagrams.to_paths(text)


def test_an_image_that_is_not_a_diagram_is_left_alone():
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(20)).decode()
    svg = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg"/>').decode()
    text = (f'<img src="data:image/png;base64,{png}">\n<img src="data:image/svg+xml;base64,'
            f'{svg}">\n<img src="other.svg">\n![x](../book/_static/other/x.svg)\n')
    assert embed_diagrams.embed(text) == text
    assert embed_diagrams.to_paths(text) == text
    assert embed_diagrams.problems(text) == []


def test_every_diagram_names_itself_in_its_svg():
    for svg in embed_diagrams.DIAGRAMS.glob("*.svg"):
        assert embed_diagrams.diagram_name(svg.read_bytes()) == svg.stem, svg.name


def _shows_a_diagram(path: Path) -> bool:
    text = path.read_text("utf-8")
    return "_static/diagrams/" in text or "data:image/svg+xml" in text


def test_the_script_embeds_copies_and_check_lists_what_is_left(tmp_path):
    folder = tmp_path / "chapters"
    folder.mkdir()
    originals = [p for p in NOTEBOOKS if _shows_a_diagram(p)][:2]
    copies = [Path(shutil.copy(p, folder)) for p in originals]
    script = [sys.executable, str(ROOT / "scripts" / "embed_diagrams.py")]
    subprocess.run(script + list(map(str, copies)), check=True, capture_output=True)
    done = subprocess.run(script + ["--check", *map(str, copies)], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    for copy, original in zip(copies, originals):
        nb, old = json.loads(copy.read_text("utf-8")), json.loads(original.read_text("utf-8"))
        assert [c["id"] for c in nb["cells"]] == [c["id"] for c in old["cells"]]
        changed = [c for c, o in zip(nb["cells"], old["cells"]) if c != o]
        assert all(c["cell_type"] == "markdown" for c in changed)
        assert i18n.english_units(copy) == i18n.english_units(original)
    # an embedded copy whose bytes are not the file's (its first 6 bytes changed: the marker
    # still names it) is listed by --check
    nb = json.loads(copies[0].read_text("utf-8"))
    for c in nb["cells"]:
        if c["cell_type"] == "markdown":
            c["source"] = [re.sub(r"base64,[A-Za-z0-9+/=]{8}", "base64,PHN2ZyB4", line)
                           for line in c["source"]]
    copies[0].write_text(json.dumps(nb, ensure_ascii=False, indent=1) + "\n", "utf-8")
    done = subprocess.run(script + ["--check", str(copies[0])], capture_output=True, text=True)
    assert done.returncode == 1 and "differs from" in done.stdout, done.stdout


# --- the Chinese edition --------------------------------------------------------------------

@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_embedding_changes_no_chinese_unit_and_the_zh_source_keeps_paths(path, tmp_path,
                                                                          monkeypatch):
    copy = alone(path, tmp_path)
    embed_diagrams.embed_notebook(copy)
    assert i18n.english_units(copy) == i18n.english_units(path)
    monkeypatch.setattr(i18n, "sources", lambda: {path.stem: copy})
    zh = i18n._zh_notebook(copy)
    for cell in zh["cells"]:
        if cell["cell_type"] == "markdown":  # the diagrams by path: the Chinese files
            text = "".join(cell["source"])
            assert embed_diagrams.to_paths(text) == text, f"{path.name}: cell {cell['id']}"


# --- in a browser, as Jupyter shows the markdown ---------------------------------------------

def test_every_image_loads_in_chromium_from_the_notebooks_copied_alone(tmp_path):
    """Each notebook's markdown rendered to HTML (CommonMark with raw HTML, as Jupyter renders
    a markdown cell) in a folder of its own: every <img> loads (naturalWidth > 0)."""
    site_check = pytest.importorskip("site_check")
    if site_check.chromium_path() is None:
        pytest.skip("Chromium is missing (`sudo apt-get install chromium`)")
    from markdown_it import MarkdownIt
    from playwright.sync_api import sync_playwright

    md = MarkdownIt("commonmark", {"html": True})
    pages = {}
    for path in NOTEBOOKS:
        folder = tmp_path / path.stem
        folder.mkdir()
        shutil.copy(path, folder)
        body = "\n".join(md.render("".join(c["source"])) for c in _markdown_cells(path))
        if "<img" not in body:
            continue
        page = folder / "index.html"
        page.write_text(f"<!doctype html><meta charset=utf-8><body>{body}</body>", "utf-8")
        pages[path.name] = page
    assert pages, "no notebook shows an image"
    broken = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=site_check.chromium_path(),
                                     args=["--no-sandbox"])
        page = browser.new_page()
        for name, html_path in pages.items():
            page.goto(html_path.as_uri(), wait_until="load")
            bad = page.evaluate("""() => [...document.images]
                .filter(i => !(i.complete && i.naturalWidth > 0))
                .map(i => i.getAttribute('src').slice(0, 60))""")
            if bad:
                broken[name] = bad
        browser.close()
    assert not broken, f"images that do not load ({FIX}): {broken}"
