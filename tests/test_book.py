"""Build the website as `make book` does (warnings are errors) and check what a reader gets."""
from __future__ import annotations

import re

import pytest
import yaml

from conftest import ROOT

pytestmark = pytest.mark.book


def _toc_files() -> list[str]:
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]
    for part in toc.get("parts", []):
        files += [c["file"] for c in part["chapters"]]
    return files


def test_every_toc_entry_has_a_page(site):
    for f in _toc_files():
        assert (site / f"{f}.html").exists(), f"{f} is in _toc.yml but no page was built"


def test_every_chapter_is_in_the_toc():
    listed = set(_toc_files())
    for nb in (ROOT / "chapters").glob("*.ipynb"):
        assert f"chapters/{nb.stem}" in listed, f"{nb.name} is not in _toc.yml"


def test_chapters_have_colab_and_download_buttons(site):
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    path = repo.removeprefix("https://github.com/")
    for nb in (ROOT / "chapters").glob("*.ipynb"):
        html = (site / "chapters" / f"{nb.stem}.html").read_text(encoding="utf-8")
        assert f"colab.research.google.com/github/{path}/blob/main/chapters/{nb.name}" in html
        assert "btn-download-source-button" in html
        assert (site / "_sources" / "chapters" / nb.name).exists()


def test_chapter_pages_show_outputs_figures_and_hidden_solutions(site):
    html = (site / "chapters" / "00_setup.html").read_text(encoding="utf-8")
    assert "llmcore will run on" in html  # stored outputs are rendered, not re-executed
    assert re.search(r'<img alt="[^"]*" src="\.\./_images/[0-9a-f]+\.png"', html)
    n_ex = html.count('class="exercise admonition"')
    assert n_ex >= 3 and html.count('class="solution dropdown admonition"') == n_ex


def test_exercises_are_numbered_by_chapter_like_their_checkers(site):
    # book/_ext/exercise_numbers.py: the k-th exercise of chapter N shows "Exercise N.k",
    # the number its checker prints (tests/test_exercises.py checks the checkers); the
    # notebook-only parts of a hidden solution (Colab's "# @title" line, the note on how
    # to open it in Jupyter) stay off the site
    for page in sorted((site / "chapters").glob("*.html")):
        html = page.read_text(encoding="utf-8")
        prefix = page.stem.split("_")[0]
        chapter = str(int(prefix)) if prefix.isdigit() else prefix
        shown = re.findall(r'class="caption-number">Exercise (\S+) </span>', html)
        assert len(shown) >= 3, page.name
        assert shown == [f"{chapter}.{k}" for k in range(1, len(shown) + 1)], page.name
        assert "# @title" not in html and "nb-only" not in html, page.name


def test_glossary_gives_chinese_terms(site):
    html = (site / "book" / "glossary.html").read_text(encoding="utf-8")
    for zh in ("首字延迟", "访存瓶颈", "投机解码", "残差流"):
        assert zh in html


def test_no_page_shows_a_dead_widget(site):
    # a widget's output has no state on the static site: widget cells are tagged remove-output
    # and followed by a static rendering (a figure or a table) of the same view
    for page in (site / "chapters").glob("*.html"):
        assert "application/vnd.jupyter.widget-view+json" not in page.read_text(encoding="utf-8"), page.name


def test_math_renders_offline(site):
    # MathJax is copied into the site (sphinx-mathjax-offline); no page loads it from the web
    assert (site / "_static" / "mathjax" / "tex-chtml.js").exists()
    for page in list(site.glob("chapters/*.html")) + list(site.glob("book/*.html")):
        scripts = re.findall(r'<script[^>]*src="([^"]*mathjax[^"]*)"', page.read_text("utf-8"))
        assert all(not src.startswith(("http:", "https:", "//")) for src in scripts), (
            f"{page.name} loads MathJax from {scripts}")
    math_page = (site / "chapters" / "05_prefill_decode.html").read_text("utf-8")
    assert '../_static/mathjax/tex-chtml.js' in math_page


# --- the Chinese edition (中文版), built by the same command under zh/ --------------------

def test_every_english_page_has_its_chinese_page(site):
    for f in _toc_files():
        html = (site / "zh" / f"{f}.html").read_text(encoding="utf-8")
        assert '<html lang="zh-CN"' in html, f
        assert "lang-switch.js" in html, f"zh/{f}.html has no language switch"
    assert "lang-switch.js" in (site / "chapters" / "07_sampling.html").read_text("utf-8")


def test_chinese_pages_show_the_translation_and_the_english_outputs(site):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import i18n

    en = (site / "chapters" / "07_sampling.html").read_text(encoding="utf-8")
    zh = (site / "zh" / "chapters" / "07_sampling.html").read_text(encoding="utf-8")
    title = next(t for t in i18n.translated("07_sampling").values() if t.startswith("# 7."))
    assert title.splitlines()[0][2:] in zh  # the translated title
    assert "采样" in zh and "What this chapter builds" not in zh
    # the same stored outputs: every figure of the English page is on the Chinese one
    figures = re.findall(r'src="\.\./_images/([0-9a-f]+\.png)"', en)
    assert figures and figures == re.findall(r'src="\.\./_images/([0-9a-f]+\.png)"', zh)
    # the checkers' stored verdicts, in Chinese
    assert "✏️ 练习 7.1 (temperature_top_p)：尚未作答。" in zh
    assert "✏️ Exercise 7.1 (temperature_top_p): not attempted." in en


def test_chinese_headings_keep_the_english_anchors(site):
    """`page#anchor` links and the language switch land on the same section in both."""
    for page in ("chapters/05_prefill_decode.html", "chapters/09_batching.html",
                 "chapters/10_server.html"):
        en = (site / page).read_text(encoding="utf-8")
        zh = (site / "zh" / page).read_text(encoding="utf-8")
        en_ids = re.findall(r'<section (?:class="[^"]*" )?id="([^"]+)"', en)
        zh_ids = re.findall(r'<section (?:class="[^"]*" )?id="([^"]+)"', zh)
        assert len(en_ids) > 5 and en_ids == zh_ids, page


def test_chinese_edition_uses_chinese_captions_and_diagrams(site):
    zh = (site / "zh" / "chapters" / "01_the_map.html").read_text(encoding="utf-8")
    for caption in ("入门", "一个请求，一步一步", "规模化服务"):
        assert caption in zh
    en_svg = (site / "_images" / "pipeline.svg")
    zh_svg = (site / "zh" / "_images" / "pipeline.svg")
    assert en_svg.exists() and zh_svg.exists()
    assert en_svg.read_bytes() != zh_svg.read_bytes()  # the labels are Chinese


def test_machine_dependent_outputs_name_the_machine_they_were_measured_on(site):
    """book/_ext/run_notes.py: a line under every nbval-ignore-output cell (but the
    machine-info and remove-output ones) names the run recorded in the notebook."""
    import json

    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        data = json.loads(nb.read_text(encoding="utf-8"))
        cells = [c for c in data["cells"] if c["cell_type"] == "code"]
        tags = [set(c.get("metadata", {}).get("tags", [])) for c in cells]
        expected = sum("nbval-ignore-output" in t
                       and not t & {"machine-info", "remove-output"} for t in tags)
        record = data["metadata"].get("llmcore", {}).get("execution")
        for edition, page in (("en", site / "chapters" / f"{nb.stem}.html"),
                              ("zh", site / "zh" / "chapters" / f"{nb.stem}.html")):
            html = page.read_text(encoding="utf-8")
            notes = re.findall(r'<p class="run-note">(.*?)</p>', html, re.S)
            assert len(notes) == expected, (f"{edition} {nb.stem}: {len(notes)} run "
                                            f"notes for {expected} measured cells")
            if expected and record:
                assert all(record["machine"] in n and record["date"] in n
                           for n in notes), f"{edition} {nb.stem}: {notes[0]}"
