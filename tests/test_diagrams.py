"""The concept diagrams: committed SVGs are what scripts/diagrams.py draws, and each is shown."""
from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from conftest import ROOT

DIAGRAMS = ROOT / "book" / "_static" / "diagrams"
# A page shows a diagram with a MyST figure: `{figure}` in a Markdown page, `{figure-md}` with
# an HTML <img> in a notebook (Jupyter shows the image too, which it cannot for `{figure}`).
FIGURE = re.compile(r"^(```|:::)\{figure(?:-md)?\}.*?^\1$", re.M | re.S)
PATH = re.compile(r"(\S*_static/diagrams/([\w-]+\.svg))")


def _pages() -> dict[str, str]:
    """Markdown of every page: book/*.md, and the markdown cells of chapters/*.ipynb (a
    diagram embedded by scripts/embed_diagrams.py read as its path)."""
    from embed_diagrams import to_paths

    pages = {str(p.relative_to(ROOT)): p.read_text("utf-8") for p in (ROOT / "book").glob("*.md")}
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(nb.read_text("utf-8"))["cells"]
        pages[str(nb.relative_to(ROOT))] = "\n".join(
            to_paths("".join(c["source"])) for c in cells if c["cell_type"] == "markdown")
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


# --- the Chinese edition's diagrams ---------------------------------------------------------
ZH = ROOT / "book" / "zh" / "diagrams"


def test_committed_zh_svgs_are_what_the_script_draws(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "diagrams.py"), "--lang", "zh",
                           "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    drawn = sorted(p.name for p in tmp_path.glob("*.svg"))
    assert drawn == sorted(p.name for p in ZH.glob("*.svg")), (
        "run `python scripts/diagrams.py --lang zh` and commit book/zh/diagrams")
    for name in drawn:
        assert (tmp_path / name).read_bytes() == (ZH / name).read_bytes(), (
            f"zh/{name} differs from what `scripts/diagrams.py --lang zh` draws: run it and "
            f"commit it")


def test_every_english_diagram_has_a_chinese_one_of_the_same_name():
    english = sorted(p.name for p in DIAGRAMS.glob("*.svg"))
    assert english == sorted(p.name for p in ZH.glob("*.svg"))
    import diagrams

    assert english == sorted(f"{name}.svg" for name in diagrams.DIAGRAMS)


def test_every_label_has_a_current_translation():
    import diagrams

    assert diagrams.translation_problems() == []


def test_code_and_numbers_are_not_translated_prose_is():
    import diagrams

    pipeline, gqa = diagrams.labels("pipeline"), diagrams.labels("gqa_heads")
    assert "tokenizer" in pipeline and "KV cache" in pipeline
    assert "repeat_kv(·, 4)" not in gqa  # monospace: code
    assert "q0" not in gqa and "K1" not in gqa  # no word of ASCII letters
    assert "kv0" in gqa  # recorded with zh equal to en


def _units():
    import diagrams

    return diagrams.load_units()


def test_a_changed_english_label_is_reported_with_both_texts():
    import diagrams

    units = _units()
    (u,) = [u for u in units if (u.diagram, u.en) == ("pipeline", "tokenizer")]
    u.en, u.sha = "tokeniser", diagrams.digest("tokeniser")  # made from older English
    problems = diagrams.translation_problems(units)
    assert len(problems) == 1, problems
    assert "'tokeniser'" in problems[0] and "'tokenizer'" in problems[0]
    assert "分词器" in problems[0] and problems[0].startswith("pipeline:")


def test_missing_unused_and_hand_edited_units_are_reported():
    import diagrams

    units = _units()
    units = [u for u in units if (u.diagram, u.en) != ("batching_timeline", "idle slot")]
    units.append(diagrams.Unit("kv_growth", diagrams.digest("gone"), "gone", "没了"))
    (u,) = [u for u in units if (u.diagram, u.en) == ("gqa_heads", "query heads")]
    u.sha = diagrams.digest("key heads")
    problems = diagrams.translation_problems(units)
    assert len(problems) == 3, problems
    assert any("batching_timeline" in p and "'idle slot' has no Chinese" in p for p in problems)
    assert any("kv_growth" in p and "'gone'" in p and "no longer draws" in p for p in problems)
    assert any("gqa_heads" in p and "'query heads'" in p and "sha" in p for p in problems)


@pytest.mark.slow
def test_sync_adds_an_empty_unit_that_shows_the_old_translation(tmp_path):
    import diagrams

    units = _units()
    (u,) = [u for u in units if (u.diagram, u.en) == ("kv_growth", "read from the cache")]
    u.en, u.sha = "read from cache", diagrams.digest("read from cache")
    units.append(diagrams.Unit("pipeline", diagrams.digest("unused"), "unused", "没用"))
    path = tmp_path / "diagrams.yml"
    diagrams.save_units(units, path)
    synced = diagrams.sync_units(path)
    assert diagrams.load_units(path) == synced
    assert len(synced) == len(units) - 1  # the unused unit is gone
    (new,) = [u for u in synced if u.en == "read from the cache"]
    assert (new.zh, new.was_en, new.was_zh) == ("", "read from cache", "从缓存读取")
    problems = diagrams.translation_problems(synced)
    assert len(problems) == 1 and "'read from cache'" in problems[0], problems
    new.zh = "从缓存读取"
    diagrams.save_units(synced, path)
    assert diagrams.translation_problems(diagrams.sync_units(path)) == []
    assert not any(u.was_en for u in diagrams.load_units(path))


def test_drawing_chinese_without_a_translation_fails_clearly(tmp_path, monkeypatch):
    import diagrams

    units = [u for u in _units() if (u.diagram, u.en) != ("paged_prefix", "pool")]
    monkeypatch.setattr(diagrams, "load_units", lambda: units)
    try:
        diagrams.write_all(tmp_path, lang="zh")
    except SystemExit as e:
        assert "paged_prefix" in str(e) and "'pool'" in str(e) and "--zh-sync" in str(e)
    else:
        raise AssertionError("drew a Chinese diagram with an English label")
    assert not list(tmp_path.glob("*.svg"))


# --- the pipeline strip at the top of every chapter -------------------------------------------

def _prefix(nb) -> str:
    return nb.stem.split("_", 1)[0]


def test_every_chapter_has_its_pipeline_strip_in_both_languages():
    import diagrams

    prefixes = sorted(_prefix(nb) for nb in (ROOT / "chapters").glob("*.ipynb"))
    missing = [p for p in prefixes if p not in diagrams.STRIP_HIGHLIGHT]
    assert not missing, f"chapters without a pipeline strip: add {missing} to STRIP_HIGHLIGHT"
    for p in prefixes:
        assert (DIAGRAMS / f"pipeline_{p}.svg").is_file() and (ZH / f"pipeline_{p}.svg").is_file()


def test_each_strip_highlights_its_chapters_stages_and_mutes_the_others():
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    import diagrams

    stages = [k for k, *_ in diagrams.STRIP_PATH] + \
        [k for k, *_ in diagrams.STRIP_SERVING] + ["machine"]
    for chapter, lit in diagrams.STRIP_HIGHLIGHT.items():
        diagrams.setup()
        fig = diagrams.pipeline_strip(chapter)
        boxes = [b for b in fig.findobj(FancyBboxPatch)]
        plt.close(fig)
        assert len(boxes) == len(stages), chapter  # one box per stage, in this order
        bold = [k for k, b in zip(stages, boxes) if b.get_linewidth() > 2]
        assert bold == [k for k in stages if k in lit], chapter
        assert bold, f"pipeline_{chapter} highlights nothing"
        for k, b in zip(stages, boxes):  # highlighted: coloured; the others one grey
            grey = b.get_facecolor()[:3] == diagrams.to_rgb(diagrams.STRIP_OFF_FC)
            assert grey == (k not in lit), (chapter, k)


def test_the_strips_are_small_and_drawn_for_the_column():
    for lang in (DIAGRAMS, ZH):
        for svg in lang.glob("pipeline_*.svg"):
            limit = 60_000 if lang == DIAGRAMS else 90_000  # Chinese glyphs are larger
            assert svg.stat().st_size < limit, f"{svg}: {svg.stat().st_size} bytes"
    import diagrams

    fig = diagrams.DIAGRAMS["pipeline_05"]()
    assert fig.get_figwidth() == 10 and fig.get_figheight() <= 2.2  # one short strip


def test_the_chapter_labels_follow_the_book_s_numbering():
    import diagrams

    pipeline = "\n".join(diagrams.labels("pipeline"))
    assert "speculative decoding\n(ch. 11)" in pipeline and "(ch. 10)" not in pipeline
    assert "continuous batching\n(ch. 9)" in pipeline
    strip = diagrams.group_labels("pipeline_strip")
    for label, ch in [("batching & scheduling", "ch. 9"), ("server & API", "ch. 10"),
                      ("speculative decoding", "ch. 11"), ("tokenizer", "ch. 2")]:
        assert label in strip and ch in strip


def test_every_svg_names_itself_for_embedding():
    """scripts/embed_diagrams.py recognises an embedded copy by this marker."""
    for folder in (DIAGRAMS, ZH):
        for svg in folder.glob("*.svg"):
            assert f"<dc:identifier>llmcore-diagram:{svg.stem}</dc:identifier>" in \
                svg.read_text("utf-8"), svg
