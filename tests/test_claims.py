"""The claim index (book/claims.md) lists each of the source article's 24 claims once, each
with at least one link to the section that shows it; the strict site build (test_book.py)
fails if a link's section does not exist."""
import json
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "book" / "claims.md"


def test_every_claim_is_listed_once_with_a_section_link():
    rows = [line for line in PAGE.read_text().splitlines() if re.match(r"\| C\d+ \|", line)]
    claims = [re.match(r"\| (C\d+) \|", row)[1] for row in rows]
    assert claims == [f"C{i}" for i in range(1, 25)]
    # "Beyond the article": the appendices' own claims, X1, X2, ... in order
    extra = re.findall(r"^\| (X\d+) \|", PAGE.read_text(), re.MULTILINE)
    assert extra == [f"X{i}" for i in range(1, len(extra) + 1)]
    rows += [line for line in PAGE.read_text().splitlines() if re.match(r"\| X\d+ \|", line)]
    for row in rows:
        links = re.findall(r"\]\(\.\./chapters/\w+\.ipynb#[\w-]+\)", row)
        assert links, f"{row[:40]}... links to no chapter section"


def _slug(title: str) -> str:
    """The anchor MyST gives a heading (myst_heading_anchors)."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))


def test_each_linked_section_labels_its_claims():
    """Every section the index links to says, under its heading, which claim it shows."""
    rows = [line for line in PAGE.read_text().splitlines() if re.match(r"\| [CX]\d+ \|", line)]
    chapters = PAGE.parents[1] / "chapters"
    missing = []
    for row in rows:
        claim = re.match(r"\| ([CX]\d+) \|", row)[1]
        for name, anchor in re.findall(r"\]\(\.\./chapters/(\w+\.ipynb)#([\w-]+)\)", row):
            cells = json.loads((chapters / name).read_text())["cells"]
            sections = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
            found = False
            for text in sections:
                lines = text.split("\n")
                for i, line in enumerate(lines):
                    heading = re.match(r"#{1,4} (.*)", line)
                    if heading and _slug(heading[1]) == anchor:
                        label = "\n".join(lines[i + 1:i + 4])
                        found = re.search(rf"\*\*(Claim {claim}|{claim})\*\*", label) is not None
            if not found:
                missing.append(f"{claim} under {name}#{anchor}")
    assert not missing, "sections without their claim label:\n" + "\n".join(missing)
