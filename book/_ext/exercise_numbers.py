"""Exercises numbered by chapter on the site, as the checkers number them, and notebook-only
notes kept off the site.

sphinx-exercise numbers exercises 1, 2, 3, ... across the whole book. This extension
renumbers them per chapter after Sphinx has assigned its figure numbers: the k-th exercise
of ``chapters/07_sampling`` becomes ``Exercise 7.k``, of ``chapters/A_tiny_model``
``Exercise A.k``, of ``chapters/00_setup`` ``Exercise 0.k``. Titles, solution titles and
``{numref}`` references all read the same numbers, which are the ones the chapter's checkers
print (``tests/test_exercises.py`` checks the checkers against the notebooks).

It also adapts two things that serve the learner in Jupyter and Colab but not on the site:

- a solution code cell starts with ``# @title Solution ...`` (Colab shows a form cell by
  that title, its code hidden); the site drops that first line;
- an HTML element with the class ``nb-only`` (the note above each hidden solution that says
  how to open it in Jupyter or Colab) is removed: on the site the dropdown says it.
"""
from __future__ import annotations

import re

from docutils import nodes

CHAPTER = re.compile(r"^chapters/(?:(\d+)|([A-Z]))_")
TITLE_LINE = re.compile(r"^# ?@title [^\n]*\n?")


def chapter_number(docname: str) -> str | None:
    """'chapters/07_sampling' -> '7', 'chapters/A_tiny_model' -> 'A', else None."""
    match = CHAPTER.match(docname)
    if match is None:
        return None
    return str(int(match.group(1))) if match.group(1) else match.group(2)


def renumber_exercises(app, env) -> list[str]:
    """Replace the book-wide exercise numbers with (chapter, k) per chapter page."""
    for docname, figtypes in env.toc_fignumbers.items():
        chapter = chapter_number(docname)
        numbers = figtypes.get("exercise")
        if chapter is None or not numbers:
            continue
        in_order = sorted(numbers, key=lambda label: numbers[label])
        figtypes["exercise"] = {label: (chapter, k) for k, label in
                                enumerate(in_order, 1)}
    return []


def drop_notebook_only_parts(app, doctree) -> None:
    """Remove ``nb-only`` HTML and the ``# @title`` line of Colab form cells."""
    for raw in list(doctree.findall(nodes.raw)):
        if raw.get("format") == "html" and 'class="nb-only"' in raw.astext():
            raw.parent.remove(raw)
    for block in doctree.findall(nodes.literal_block):
        text = block.astext()
        if TITLE_LINE.match(text):
            rest = TITLE_LINE.sub("", text, count=1)
            block.children = [nodes.Text(rest)]
            block.rawsource = rest


def setup(app):
    # after Sphinx's TocTreeCollector (priority 500) has assigned the figure numbers
    app.connect("env-get-updated", renumber_exercises, priority=900)
    app.connect("doctree-read", drop_notebook_only_parts)
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
