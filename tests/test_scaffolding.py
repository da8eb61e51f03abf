"""Every chapter gives the learner the same scaffolding, in both editions: the request's
path with this chapter's stage highlighted at the top, a "numbers to remember" box, a
Summary before the Exercises, and pen-and-paper questions between them, each with a
hidden answer and, where the answer is a number, a checker (CONTRIBUTING.md, "Write a
chapter").
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from conftest import ROOT
from test_exercises import _chapter_number as chapter_number

sys.path.insert(0, str(ROOT / "scripts"))
import i18n  # noqa: E402

NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))

# what each edition's scaffolding says
WORDS = {
    "en": {"box": ":::{admonition} Numbers to remember", "summary": "## Summary",
           "check": "## Check your understanding", "exercises": "## Exercises",
           "question": "**Question {n}.{k}.**", "answer": ":::{admonition} Answer"},
    "zh": {"box": ":::{admonition} 值得记住的数字", "summary": "## 小结",
           "check": "## 检验理解", "exercises": "## 练习",
           "question": "**问题 {n}.{k}.**", "answer": ":::{admonition} 答案"},
}
CHECK_CALL = re.compile(r"\b(ch\w+)\.(check_q_\w+)\(None\)")


def cells(path: Path, edition: str) -> list[dict]:
    """The notebook's cells as (type, text, metadata), markdown in `edition`."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    zh = i18n.translated(path.stem) if edition == "zh" else {}
    return [{"type": c["cell_type"], "meta": c.get("metadata", {}),
             "text": zh.get(c.get("id"), "".join(c["source"]))} for c in nb["cells"]]


def first_line(text: str) -> str:
    return text.lstrip().split("\n", 1)[0].strip()


def index_of(found: list[dict], heading: str) -> int:
    hits = [i for i, c in enumerate(found)
            if c["type"] == "markdown" and first_line(c["text"]) == heading]
    assert len(hits) == 1, f"expected one cell that starts {heading!r}, found {len(hits)}"
    return hits[0]


@pytest.mark.parametrize("edition", ["en", "zh"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_pipeline_figure_opens_the_chapter(path, edition):
    prefix = path.stem.split("_")[0]
    second = cells(path, edition)[1]
    assert second["type"] == "markdown" and (
        f"{{figure-md}} fig-pipeline-{prefix}" in second["text"]), (
        f"{path.name} ({edition}): the cell after the title must be the pipeline figure "
        f"fig-pipeline-{prefix} (pipeline_{prefix}.svg, drawn by scripts/diagrams.py)")
    normal = i18n.to_paths(second["text"])  # an embedded diagram as its path
    assert f"pipeline_{prefix}.svg" in normal or "data:image/svg+xml" in normal


@pytest.mark.parametrize("edition", ["en", "zh"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_numbers_box_summary_questions_then_exercises(path, edition):
    words, n = WORDS[edition], chapter_number(path)
    found = cells(path, edition)
    where = f"{path.name} ({edition})"
    summary, check = index_of(found, words["summary"]), index_of(found, words["check"])
    exercises = index_of(found, words["exercises"])
    assert summary < check < exercises, f"{where}: Summary, questions, Exercises in order"
    first_exercise = min(i for i, c in enumerate(found) if "```{exercise}" in c["text"])
    assert exercises < first_exercise, where

    box = found[summary - 1]["text"]
    assert first_line(box) == words["box"], (
        f"{where}: the cell before the Summary is the numbers box {words['box']!r}")
    bullets = [line for line in box.splitlines() if line.startswith("- ")]
    assert 3 <= len(bullets) <= 5, f"{where}: the numbers box has 3 to 5 bullets"
    assert all(re.search(r"\d", b) for b in bullets), f"{where}: each bullet is a number"

    section = found[check + 1:exercises]
    questions = [i for i, c in enumerate(section) if c["type"] == "markdown"
                 and c["text"].startswith(words["question"].split("{")[0])]
    assert 2 <= len(questions) <= 3, f"{where}: two or three questions"
    for k, i in enumerate(questions, 1):
        assert section[i]["text"].startswith(words["question"].format(n=n, k=k)), (
            f"{where}: question {k} must start {words['question'].format(n=n, k=k)!r}")
        after = section[i + 1:(questions[k] if k < len(questions) else len(section))]
        answers = [c for c in after if c["type"] == "markdown"]
        assert answers and answers[-1]["text"].startswith(words["answer"]), (
            f"{where}: question {k} needs its answer, {words['answer']!r}")
        answer = answers[-1]
        assert ":class: dropdown" in answer["text"], f"{where}: answer {k} is collapsed"
        assert answer["meta"].get("jupyter", {}).get("source_hidden") is True, (
            f"{where}: answer {k} is hidden in Jupyter (metadata jupyter.source_hidden)")
    if edition == "en":
        long = [line[:40] for c in section for line in c["text"].splitlines()
                if len(line) > 88 and not line.startswith("<img")]
        assert not long, f"{where}: question lines over 88 columns: {long}"
    calls = [CHECK_CALL.search(c["text"]) for c in section if c["type"] == "code"]
    assert any(calls), f"{where}: at least one question has a numeric answer, checked"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_question_checkers_print_their_questions_number(path, capsys):
    from llmcore.exercises import CHECKERS, NOT_ATTEMPTED

    n, found = chapter_number(path), cells(path, "en")
    k = 0
    for c in found:
        if c["type"] == "markdown" and c["text"].startswith("**Question "):
            k += 1
        call = CHECK_CALL.search(c["text"]) if c["type"] == "code" else None
        if call:
            import importlib

            importlib.import_module(f"llmcore.exercises.{call[1]}")
            verdict = CHECKERS[f"{call[1]}.{call[2]}"](None)
            assert verdict.status == NOT_ATTEMPTED
            assert verdict.exercise.startswith(f"Question {n}.{k} ("), (
                f"{path.name}: {call[2]} follows Question {n}.{k} but prints "
                f"{verdict.exercise!r}")
    capsys.readouterr()
