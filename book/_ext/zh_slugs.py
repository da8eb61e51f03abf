"""Section ids of the Chinese edition: each translated heading gets the id and the MyST anchor
of the English heading it translates (scripts/i18n.py writes zh_headings.json, Chinese heading
text -> English heading text, beside this file in the Chinese source tree). So
`page#anchor` links, the "Contents" sidebar and the language switch land on the same section
in both editions. The English build does not load this extension."""
from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes
from myst_parser.mdit_to_docutils.base import default_slugify

_FILE = Path(__file__).with_name("zh_headings.json")
_ENGLISH: dict[str, str] = (json.loads(_FILE.read_text(encoding="utf-8"))
                            if _FILE.exists() else {})


def slugify(title: str) -> str:
    """MyST's anchor of a translated heading: the English heading's (myst_heading_slug_func)."""
    return default_slugify(_ENGLISH.get(title, title))


def _english_ids(app, doctree: nodes.document) -> None:
    """Give every translated section, first, the id docutils gives its English title."""
    for section in doctree.findall(nodes.section):
        english = _ENGLISH.get(section[0].astext()) if len(section) else None
        new = nodes.make_id(english) if english else ""
        if new and new not in doctree.ids:
            section["ids"].insert(0, new)
            doctree.ids[new] = section


def setup(app):
    # before the collectors that read section ids for the page's table of contents
    app.connect("doctree-read", _english_ids, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
