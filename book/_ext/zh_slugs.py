"""Heading anchors of the Chinese edition: each translated heading gets the anchor of the
English heading it translates (scripts/i18n.py writes zh_slugs.json beside this file in the
Chinese source tree), so `page#anchor` links and the language switch work in both editions.
The English build does not use it (its _config.yml does not name it)."""
from __future__ import annotations

import json
from pathlib import Path

from myst_parser.mdit_to_docutils.base import default_slugify

_FILE = Path(__file__).with_name("zh_slugs.json")
_SLUGS: dict[str, str] = (json.loads(_FILE.read_text(encoding="utf-8"))
                          if _FILE.exists() else {})


def slugify(title: str) -> str:
    """The English anchor of a translated heading's text; MyST's own slug otherwise."""
    return _SLUGS.get(title) or default_slugify(title)
