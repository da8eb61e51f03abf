"""The claim index (book/claims.md) lists each of the source article's 24 claims once, each
with at least one link to the section that shows it; the strict site build (test_book.py)
fails if a link's section does not exist."""
import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[1] / "book" / "claims.md"


def test_every_claim_is_listed_once_with_a_section_link():
    rows = [line for line in PAGE.read_text().splitlines() if re.match(r"\| C\d+ \|", line)]
    claims = [re.match(r"\| (C\d+) \|", row)[1] for row in rows]
    assert claims == [f"C{i}" for i in range(1, 25)]
    for row in rows:
        links = re.findall(r"\]\(\.\./chapters/\w+\.ipynb#[\w-]+\)", row)
        assert links, f"{row[:40]}... links to no chapter section"
