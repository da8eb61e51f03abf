"""book/references.md says the chapters cite each work where its idea appears: every entry of
book/references.bib must be cited by some page, and every citation must have an entry."""
from __future__ import annotations

import json
import re

from conftest import ROOT

CITE = re.compile(r"\{cite(?::\w+)?\}`([^`]+)`")


def _pages() -> dict[str, str]:
    pages = {}
    for nb in sorted((ROOT / "chapters").glob("*.ipynb")):
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        pages[nb.name] = "\n".join("".join(c["source"]) for c in cells
                                   if c["cell_type"] == "markdown")
    for page in sorted((ROOT / "book").glob("*.md")):
        pages[page.name] = page.read_text(encoding="utf-8")
    return pages


def _cited() -> dict[str, set[str]]:
    cited: dict[str, set[str]] = {}
    for name, text in _pages().items():
        for group in CITE.findall(text):
            for key in group.split(","):
                cited.setdefault(key.strip(), set()).add(name)
    return cited


def _entries() -> set[str]:
    bib = (ROOT / "book" / "references.bib").read_text(encoding="utf-8")
    return set(re.findall(r"^@\w+\{([^,\s]+),", bib, re.M))


def test_every_bibliography_entry_is_cited_where_its_idea_appears():
    uncited = sorted(_entries() - set(_cited()))
    assert not uncited, ("cited by no page (cite them where the idea appears, or remove "
                         f"them from book/references.bib): {', '.join(uncited)}")


def test_every_citation_has_an_entry():
    missing = sorted(set(_cited()) - _entries())
    assert not missing, f"cited without an entry in book/references.bib: {missing}"
