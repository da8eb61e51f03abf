"""book/glossary.md: every term has its Chinese name and a definition.

An entry is a block of unindented lines (the English term, then its Chinese name) followed
by the indented definition, as the {glossary} directive reads them, and optionally a line
`.. also: NAME; NAME` (a comment for Sphinx) with the alternative names the translation
check accepts (see the page's header).
"""
import re
from pathlib import Path

GLOSSARY = Path(__file__).resolve().parent.parent / "book" / "glossary.md"
CJK = re.compile(r"[\u4e00-\u9fff]")


def entries() -> list[tuple[list[str], list[str]]]:
    text = GLOSSARY.read_text(encoding="utf-8")
    body = text.split("```{glossary}\n", 1)[1].split("\n```", 1)[0]
    found = []
    for block in body.strip("\n").split("\n\n"):
        lines = block.splitlines()
        terms = [line for line in lines if not line.startswith((" ", ".. "))]
        definition = [line for line in lines if line.startswith(" ")]
        found.append((terms, definition))
    return found


def test_the_glossary_parses():
    assert len(entries()) >= 80


def test_every_term_has_a_chinese_name_and_a_definition():
    for terms, definition in entries():
        assert len(terms) == 2, f"{terms}: want the English term, then its Chinese name"
        english, chinese = terms
        assert CJK.search(chinese), f"{english!r} has no Chinese name ({chinese!r})"
        assert not CJK.search(english), f"{english!r}: the English term comes first"
        assert definition, f"{english!r} has no definition"


def test_mqa_and_hold_back_have_their_own_names():
    names = {terms[0]: terms[1] for terms, _ in entries()}
    gqa = next(zh for en, zh in names.items() if "MQA" in en)
    assert "多查询注意力" in gqa and "分组查询注意力" in gqa
    assert "回退" not in names["hold-back"]


def test_alternative_names_are_a_comment_after_the_definition():
    """`.. also:` must end its entry: Sphinx's glossary skips a comment line and every
    indented line after it, so one above the definition would hide the definition."""
    text = GLOSSARY.read_text(encoding="utf-8")
    body = text.split("```{glossary}\n", 1)[1].split("\n```", 1)[0]
    found = 0
    for block in body.strip("\n").split("\n\n"):
        lines = block.splitlines()
        for i, line in enumerate(lines):
            if line.startswith(".. "):
                assert line.startswith(".. also: ") and i == len(lines) - 1, block
                found += 1
    assert found >= 5


def test_fixed_terms_have_their_one_chinese_name():
    names = {terms[0]: terms[1] for terms, _ in entries()}
    assert names["checkpoint"] == "模型检查点"
    assert names["special token"] == "特殊词元"
    assert names["incremental detokenizer"] == "增量反分词器"
    assert names["stop sequence"] == "停止字符串"
    assert names["time per output token (TPOT)"] == "每个输出词元的间隔（TPOT）"
    assert "token" not in names["FLOPs per token"]
