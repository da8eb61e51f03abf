"""book/glossary.md: every term has its Chinese name and a definition.

An entry is a block of unindented lines (the English term, then its Chinese name) followed
by the indented definition, as the {glossary} directive reads them.
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
        terms = [line for line in lines if not line.startswith(" ")]
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
