"""The Chinese edition (scripts/i18n.py): the drift gate on the real translations, and the
gate's own behaviour on a small book of its own (an edited, added or removed English cell,
a missing glossary term, emphasis that does not render)."""
from __future__ import annotations

import json
import sys

import nbformat
import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import i18n  # noqa: E402


def test_every_english_unit_has_a_current_translation():
    """The drift gate: a new English cell without a translation, or an English cell edited
    after it was translated, fails here with its location and both texts."""
    problems = i18n.check()
    assert not problems, (f"{len(problems)} translation problem(s); see CONTRIBUTING.md, "
                          f"'Translate'\n\n" + "\n\n".join(problems[:20]))


def test_every_glossary_term_has_a_chinese_name():
    terms = i18n.glossary_terms()
    assert len(terms) > 80
    for en, zh in terms:
        assert any("\u4e00" <= ch <= "\u9fff" for name in zh for ch in name) or en[0] in {
            "SwiGLU", "safetensors", "UTF-8", "top-k", "min-p", "max_tokens"}, (en, zh)


def test_chinese_headings_keep_the_english_anchors():
    english = i18n.heading_map()  # raises if one Chinese heading stands for two English ones
    assert english["7. 采样：从分布到词元"] == "7. Sampling: from a distribution to a token"


def test_the_chinese_source_tree_shares_code_and_outputs(tmp_path):
    """Code cells and outputs of the Chinese notebooks are the English ones; only the
    markdown, the setup cell's language line and the verdicts' words differ."""
    from llmcore.exercises import translate_verdicts

    src = i18n.write_zh_source(tmp_path / "zh")
    for path in sorted((ROOT / "chapters").glob("*.ipynb")):
        en = json.loads(path.read_text(encoding="utf-8"))
        zh = json.loads((src / "chapters" / path.name).read_text(encoding="utf-8"))
        assert [c["id"] for c in en["cells"]] == [c["id"] for c in zh["cells"]]
        translated = i18n.translated(path.stem)
        setup_seen = False
        for a, b in zip(en["cells"], zh["cells"]):
            if a["cell_type"] == "markdown":
                assert "".join(b["source"]) == translated.get(a["id"], "".join(a["source"]))
                continue
            source = "".join(a["source"])
            if not setup_seen:
                source += i18n.SETUP_LANGUAGE
                setup_seen = True
            assert "".join(b["source"]) == source
            for oa, ob in zip(a.get("outputs", []), b.get("outputs", []), strict=True):
                if oa.get("output_type") == "stream":
                    assert "".join(ob["text"]) == translate_verdicts("".join(oa["text"]), "zh")
                else:
                    assert oa == ob
    config = (src / "_config.yml").read_text(encoding="utf-8")
    assert "language: zh_CN" in config and "zh_slugs.slugify" in config
    assert "入门" in (src / "_toc.yml").read_text(encoding="utf-8")
    assert "{glossary}" in (src / "book" / "glossary.md").read_text(encoding="utf-8")


# --- the gate on a small book of its own ---------------------------------------------------

GLOSSARY = """# Glossary

```{glossary}
prefill
预填充（Prefill）
  The first forward pass over the whole prompt.

token
词元（token）
  One unit of text.
```
"""


@pytest.fixture
def book(tmp_path, monkeypatch):
    (tmp_path / "chapters").mkdir()
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "glossary.md").write_text(GLOSSARY, encoding="utf-8")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# 1. Prefill\n\nThe prompt's tokens, at once."),
                nbformat.v4.new_code_cell("print(1)"),
                nbformat.v4.new_markdown_cell("Then one token per step.")]
    for i, cell in enumerate(nb.cells):
        cell.id = f"cell{i}"
    nbformat.write(nb, tmp_path / "chapters" / "01_x.ipynb")
    monkeypatch.setattr(i18n, "ROOT", tmp_path)
    monkeypatch.setattr(i18n, "ZH", tmp_path / "book" / "zh")
    monkeypatch.setattr(i18n, "PAGES", ["glossary"])
    return tmp_path


def _translate_all():
    for name in i18n.sources():
        i18n.sync(name)
        units = i18n.load(name)
        for u in units:
            u.zh = {"# 1. Prefill\n\nThe prompt's tokens, at once.":
                    "# 1. 预填充\n\n提示的所有词元，一次算完。",
                    "Then one token per step.": "然后每步一个词元。"}.get(u.en, u.en)
        i18n.save(name, units)


def _edit_cell(book, cell_id, text):
    path = book / "chapters" / "01_x.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.id == cell_id:
            cell.source = text
    nbformat.write(nb, path)


def test_gate_passes_a_complete_translation(book):
    assert len(i18n.check()) == 2  # no translation files
    for name in i18n.sources():
        i18n.sync(name)
    assert len(i18n.check()) == 5  # two cells and three page blocks untranslated
    _translate_all()
    assert i18n.check() == []
    assert i18n.heading_map() == {"1. 预填充": "1. Prefill", "Glossary": "Glossary"}


def test_gate_shows_an_edited_english_cell_with_both_texts(book):
    _translate_all()
    _edit_cell(book, "cell2", "Then one token per decode step.")
    (problem,) = i18n.check()
    assert problem.startswith("chapters/01_x.ipynb, markdown cell cell2: the English "
                              "changed after it was translated.")
    assert "-Then one token per step." in problem  # what was translated
    assert "+Then one token per decode step." in problem  # what the English says now
    assert "然后每步一个词元。" in problem  # the translation to update
    assert "i18n.py put 01_x cell2" in problem
    i18n.sync("01_x")  # keeps the stale translation: the gate still fails
    assert len(i18n.check()) == 1
    units = i18n.load("01_x")
    units[1].zh, units[1].en = "然后每个解码步一个词元。", "Then one token per decode step."
    units[1].sha = i18n.digest(units[1].en)
    i18n.save("01_x", units)
    assert i18n.check() == []


def test_gate_fails_on_a_new_cell_and_a_removed_one(book):
    _translate_all()
    path = book / "chapters" / "01_x.ipynb"
    nb = nbformat.read(path, as_version=4)
    new = nbformat.v4.new_markdown_cell("A new paragraph.")
    new.id = "cell3"
    nb.cells = [c for c in nb.cells if c.id != "cell2"] + [new]
    nbformat.write(nb, path)
    problems = i18n.check()
    assert any("markdown cell cell3: no translation" in p for p in problems)
    assert any("units ['cell2'] translate no English unit" in p for p in problems)
    i18n.sync("01_x")
    assert [u.id for u in i18n.load("01_x")] == ["cell0", "cell3"]


def test_gate_fails_on_a_missing_glossary_term_unless_skipped(book):
    _translate_all()
    units = i18n.load("01_x")
    units[1].zh = "然后每步一个。"  # "token" is in the English, 词元 is not here
    i18n.save("01_x", units)
    (problem,) = i18n.check()
    assert "glossary terms" in problem and "'token' -> '词元(token)'" in problem
    units[1].skip_terms = ["token"]
    i18n.save("01_x", units)
    assert i18n.check() == []


def test_glossary_alternative_names_count(book):
    """A `.. also:` line: a Chinese name the check accepts, an English synonym it watches."""
    page = book / "book" / "glossary.md"
    page.write_text(page.read_text().replace(
        "  One unit of text.\n", "  One unit of text.\n.. also: 个词元; piece\n"))
    terms = dict((en[0], (en, zh)) for en, zh in i18n.glossary_terms())
    assert terms["token"] == (["token", "piece"], ["词元(token)", "词元", "token", "个词元"])
    unit = i18n.Unit("x", "", "Then one piece per step.", "然后每步一个。")
    assert i18n.missing_terms(unit) == ["'token' -> '词元(token)' or '词元' or 'token' or '个词元'"]
    unit.zh = "然后每步出一个词元。"
    assert i18n.missing_terms(unit) == []


def test_gate_fails_on_headings_and_on_emphasis_that_does_not_render(book):
    _translate_all()
    units = i18n.load("01_x")
    units[0].zh = "## 1. 预填充\n\n提示的所有词元，一次算完。"
    units[1].zh = "然后每步一个**词元（token）**而已。"
    i18n.save("01_x", units)
    problems = i18n.check()
    assert len(problems) == 2
    assert "headings [(2, '1. 预填充')] do not match the English's [(1, '1. Prefill')]" in \
        problems[0]
    assert "emphasis that does not render" in problems[1]


def test_page_blocks_follow_the_english_through_an_insertion(book):
    _translate_all()
    page = book / "book" / "glossary.md"
    page.write_text(page.read_text().replace("# Glossary\n", "# Glossary\n\nTerms.\n"))
    problems = i18n.check()
    assert problems and all("glossary.md" in p for p in problems)
    i18n.sync("glossary")
    units = i18n.load("glossary")
    assert [u.zh for u in units] == ["# Glossary", "", units[2].en, units[3].en]
    (problem,) = i18n.check()
    assert "book/glossary.md, block 2 (book/zh/glossary.yml id b1): no translation" in problem


def test_put_records_a_translation_and_reports_its_problems(book, monkeypatch, capsys):
    import io

    for name in i18n.sources():
        i18n.sync(name)
    monkeypatch.setattr(sys, "stdin", io.StringIO("然后每步一个。\n"))
    assert i18n.main(["put", "01_x", "cell2"]) == 1  # 词元 missing: reported
    assert "glossary terms" in capsys.readouterr().err
    monkeypatch.setattr(sys, "stdin", io.StringIO("然后每步一个词元。\n"))
    assert i18n.main(["put", "01_x", "cell2"]) == 0
    assert i18n.load("01_x")[1].zh == "然后每步一个词元。"
    monkeypatch.setattr(sys, "stdin", io.StringIO("x"))
    assert i18n.main(["put", "01_x", "nope"]) == 2
