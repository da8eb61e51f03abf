"""Every number a reader sees is guarded by a compared verdict (issue 26).

nbval compares each cell's fresh output with the stored one, except in cells tagged
``nbval-ignore-output``: those hold what varies from machine to machine (timings, bf16
details), so nothing would notice if their figures came to contradict the prose. The rule
that closes the gap, checked here from the notebooks alone:

- a measurement the prose interprets is followed, in its section, by a *verdict* cell: a
  compared code cell tagged ``verdict`` that prints the qualitative fact with its margin as
  ``<statement>: True``; nbval re-runs it, so a fresh run where the fact fails fails the
  test suite, and this file fails on a stored verdict that is not True;
- an ignored cell prints no ``...: True`` / ``...: False`` line (a verdict there would be
  checked by nothing), and is followed by a verdict unless its whole output describes the
  machine (tag ``machine-info``) or it is a widget (tag ``remove-output``);
- every claim section that book/claims.md links to holds a verdict;
- a notebook with machine-dependent outputs records the run that wrote them
  (``scripts/execute_notebooks.py`` writes ``metadata.llmcore.execution``), and that run was
  not on a busy machine.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import i18n  # scripts/, on the path from conftest.py

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
VERDICT_LINE = re.compile(r"^(?P<statement>.*\S): (?P<value>True|False)\s*$", re.M)
HEADING = re.compile(r"^(#{1,6}) (.*)$", re.M)
EXEMPT = {"machine-info", "remove-output"}


def _tags(cell: dict) -> set[str]:
    return set(cell.get("metadata", {}).get("tags", []))


def _source(cell: dict) -> str:
    source = cell["source"]
    return source if isinstance(source, str) else "".join(source)


def _ignored(cell: dict) -> bool:
    return ("nbval-ignore-output" in _tags(cell)
            or "NBVAL_IGNORE_OUTPUT" in _source(cell))


def _text(cell: dict) -> str:
    """The stored text a reader sees under a code cell (streams and text/plain)."""
    parts = []
    for output in cell.get("outputs", []):
        if output["output_type"] == "stream":
            text = output["text"]
        else:
            text = output.get("data", {}).get("text/plain", "")
        parts.append(text if isinstance(text, str) else "".join(text))
    return "".join(parts)


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _where(path: Path, index: int, cell: dict) -> str:
    first = _source(cell).strip().splitlines()[:1] or [""]
    return f"{path.name} cell {index} (id {cell.get('id')}, {first[0][:50]!r})"


def verdict_problems(path: Path) -> list[str]:
    """What breaks the rule in one notebook (an empty list when it holds)."""
    cells, problems = _cells(path), []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "code":
            continue
        lines = VERDICT_LINE.findall(_text(cell))
        if "verdict" in _tags(cell):
            if _ignored(cell):
                problems.append(f"{_where(path, i, cell)}: a verdict cell must be "
                                "compared; remove nbval-ignore-output")
            if not lines:
                problems.append(f"{_where(path, i, cell)}: a verdict cell prints no "
                                "'<statement>: True' line")
            for statement, value in lines:
                if value != "True":
                    problems.append(f"{_where(path, i, cell)}: stored verdict says "
                                    f"False: {statement!r}")
        if not _ignored(cell):
            continue
        if lines:
            problems.append(f"{_where(path, i, cell)}: an ignored cell prints verdicts "
                            f"({lines[0][0]!r}...), which nothing compares; print them "
                            "from a cell tagged verdict")
        if _tags(cell) & EXEMPT:
            continue
        for later in cells[i + 1:]:
            if later["cell_type"] == "markdown" and HEADING.search(_source(later)):
                problems.append(f"{_where(path, i, cell)}: a measurement without a "
                                "verdict cell after it in its section")
                break
            if later["cell_type"] == "code" and "verdict" in _tags(later):
                break
        else:
            problems.append(f"{_where(path, i, cell)}: a measurement without a verdict "
                            "cell after it")
    return problems


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_measurement_ends_in_a_true_compared_verdict(path):
    problems = verdict_problems(path)
    assert not problems, "\n".join(problems)


def _slug(title: str) -> str:
    """The anchor MyST gives a heading (myst_heading_anchors)."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", title.strip().lower()))


def section_cells(cells: list[dict], anchor: str) -> list[dict] | None:
    """The cells of the section whose heading has this anchor, up to the next heading
    of the same or a higher level (its subsections included); None if there is none."""
    start = level = None
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        for hashes, title in HEADING.findall(_source(cell)):
            if start is None and _slug(title) == anchor:
                start, level = i, len(hashes)
            elif start is not None and i > start and len(hashes) <= level:
                return cells[start:i]
    return None if start is None else cells[start:]


def claim_sections() -> list[tuple[str, str, str]]:
    """(claim, notebook, anchor) for every section book/claims.md links to."""
    found = []
    for line in (ROOT / "book" / "claims.md").read_text().splitlines():
        claim = re.match(r"\| (C\d+) \|", line)
        if claim:
            for name, anchor in re.findall(r"\]\(\.\./chapters/(\w+\.ipynb)#([\w-]+)\)",
                                           line):
                found.append((claim[1], name, anchor))
    return found


@pytest.mark.parametrize("claim, name, anchor", claim_sections(),
                         ids=lambda x: x if isinstance(x, str) else None)
def test_every_claim_section_holds_a_verdict(claim, name, anchor):
    cells = section_cells(_cells(ROOT / "chapters" / name), anchor)
    assert cells is not None, f"{claim}: {name} has no section #{anchor}"
    assert any(c["cell_type"] == "code" and "verdict" in _tags(c) for c in cells), (
        f"{claim}: section {name}#{anchor} shows the claim without a compared verdict "
        "cell (a code cell tagged verdict printing '<fact>: True')")


def machine_dependent(path: Path) -> bool:
    return any(c["cell_type"] == "code" and _ignored(c) and not _tags(c) & EXEMPT
               for c in _cells(path))


@pytest.mark.parametrize("path", [p for p in NOTEBOOKS if machine_dependent(p)],
                         ids=lambda p: p.stem)
def test_machine_dependent_outputs_record_a_quiet_run(path):
    record = json.loads(path.read_text())["metadata"].get("llmcore", {}).get("execution")
    assert record, (f"{path.name} stores timings without the run that wrote them: "
                    f"re-execute it with `make notebooks NB=chapters/{path.name}`")
    for key in ("date", "machine", "cores", "torch_threads", "torch", "load_before",
                "load_after", "other_processes_cores"):
        assert key in record, f"{path.name}: the run record lacks {key!r}"
    assert not record.get("busy") and record["load_before"] <= record["cores"], (
        f"{path.name} was executed on a busy machine ({record}): run it again when the "
        "load is below the core count")


# The rule must be able to fail: the same checks on disturbed copies of a real notebook.

def _disturbed(tmp_path: Path, edit) -> Path:
    source = ROOT / "chapters" / "06_kv_cache.ipynb"
    nb = json.loads(source.read_text())
    edit(nb["cells"])
    out = tmp_path / source.name
    out.write_text(json.dumps(nb))
    return out


def _first(cells, predicate):
    return next(c for c in cells if c["cell_type"] == "code" and predicate(c))


def _set_text(cell: dict, text: str) -> None:
    cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": text}]


def test_a_stored_false_verdict_fails(tmp_path):
    def edit(cells):
        cell = _first(cells, lambda c: "verdict" in _tags(c))
        _set_text(cell, VERDICT_LINE.sub(r"\g<statement>: False", _text(cell), count=1))
    assert any("stored verdict says False" in p
               for p in verdict_problems(_disturbed(tmp_path, edit)))


def test_a_measurement_without_its_verdict_fails(tmp_path):
    def edit(cells):
        for cell in cells:
            if cell["cell_type"] == "code":
                cell.setdefault("metadata", {})["tags"] = [
                    t for t in _tags(cell) if t != "verdict"]
    problems = verdict_problems(_disturbed(tmp_path, edit))
    assert any("without a verdict" in p for p in problems)


def test_a_verdict_inside_an_ignored_cell_fails(tmp_path):
    def edit(cells):
        cell = _first(cells, _ignored)
        _set_text(cell, _text(cell) + "cache faster: True\n")
    assert any("an ignored cell prints verdicts" in p
               for p in verdict_problems(_disturbed(tmp_path, edit)))


def test_a_claim_section_without_a_verdict_fails():
    cells = [{"cell_type": "markdown", "source": "## Decoding without a cache\n"},
             {"cell_type": "code", "source": "print(1)", "metadata": {"tags": []},
              "outputs": []},
             {"cell_type": "markdown", "source": "### A detail\n"},
             {"cell_type": "code", "source": "print(2)", "metadata": {"tags": ["verdict"]},
              "outputs": []},
             {"cell_type": "markdown", "source": "## Next\n"}]
    section = section_cells(cells, "decoding-without-a-cache")
    assert len(section) == 4  # the subsection belongs to it, the next section does not
    assert any("verdict" in _tags(c) for c in section)
    without = section_cells(cells[:2], "decoding-without-a-cache")
    assert not any("verdict" in _tags(c) for c in without)


# A figure the prose quotes from this book's own run ("7× on this book's CPU run") is a
# copy of a stored output: re-executing the notebook changes the output, and nothing else
# would notice that the copy went stale (the prose would contradict the page under it).

QUOTED_RUN = {
    "en": re.compile(r"\(([^()]*(?:\bthis book's (?:CPU )?run\b|\bin this run\b|\d× here\b)"
                     r"[^()]*)\)"),
    "zh": re.compile(r"[（(]([^（）()]*(?:本书(?:的|这次)?\s?(?:CPU\s?)?(?:这次)?运行|这次运行"
                     r"|这里是\s?[\d.]+\s?倍)[^（）()]*)[）)]"),
}
# a figure: decimals, and whole numbers with a unit; a ratio (×, x, 倍) or a time must be
# printed with its unit, so that "20×" is not found in "20 ms"
QUOTED_FIGURE = re.compile(r"(?<![\w.,])(\d[\d,]*(?:\.\d+)?)"
                           r"(\s?(?:×|x\b|倍|ms\b|µs\b|tok/s)| against| 对)?")
PRINTED_UNIT = {"×": r"\s?[x×]", "x": r"\s?[x×]", "倍": r"\s?[x×]", "ms": r"\s?ms",
                "µs": r"\s?µs", "tok/s": r"\s?tok/s"}


def quoted_figure_problems(path: Path, edition: str) -> list[str]:
    """Figures quoted from this book's run in the prose of `path` (English or Chinese)
    that none of its stored outputs prints."""
    cells = _cells(path)
    shown = "\n".join(_text(c) for c in cells if c["cell_type"] == "code")
    zh = i18n.translated(path.stem) if edition == "zh" else {}
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        prose = " ".join(zh.get(cell.get("id"), _source(cell)).split())
        for quote in QUOTED_RUN[edition].findall(prose):
            for figure, unit in QUOTED_FIGURE.findall(quote):
                unit = unit.strip()
                if "." not in figure and not unit:
                    continue  # a count in the sentence, not a measured figure
                whole = "" if "." in figure else r"(?:\.0+)?"  # 144× quotes 144.0x
                printed = re.compile(rf"(?<![\d.,]){re.escape(figure)}{whole}"
                                     + PRINTED_UNIT.get(unit, r"(?![\d,]|\.\d)"))
                if not printed.search(shown):
                    problems.append(f"{path.name} ({edition}) cell {i}: "
                                    f"{figure + unit!r} in ({quote}) is printed by no "
                                    "stored output; copy the figure of the current run "
                                    "into the prose")
    return problems


# An outcome of the run told in words ("it dropped a little in this run", "at one
# position in this run") is the same copy without a figure for the guard above to check:
# a sentence that names the run and states what happened in it either quotes the printed
# figure or points the reader at the output that prints it (issue 44).
RUN_PHRASE = {
    "en": re.compile(r"\bin this run\b|\bin the run stored here\b|\bin the stored run\b"
                     r"|\bthis book's (?:CPU )?run\b"),
    "zh": re.compile(r"这次运行|本次运行|存下的运行|本书的\s?(?:CPU\s?)?运行"),
}
RUN_OUTCOME = {
    "en": re.compile(r"\b(?:dropped|rose|risen|fell|fallen|grew|climbed|faster|slower"
                     r"|higher|lower|stays? (?:above|below)|beat|won|lost|changed|flipped"
                     r"|one|two|three|four|five|six|seven|eight|nine|ten|every|none|most"
                     r"|half)\b", re.I),
    "zh": re.compile(r"下降|上升|更快|更慢|更高|更低|胜过|超过|变了|翻转|每一个|全部|大部分"
                     r"|一半|没有一个"),
}
POINTS_AT_OUTPUT = {
    "en": re.compile(r"\bprint|\bthe (?:table|cell|line|lines|check|checks|verdict|plot"
                     r"|figure)\b", re.I),
    "zh": re.compile(r"打印|表中|表格|单元格|判定|检查|图中|见上"),
}
SENTENCE = {"en": re.compile(r"(?<=[.!?])\s+(?=[A-Z(])"), "zh": re.compile(r"(?<=[。！？])")}
FIGURE = re.compile(r"(?<![\w.,])\d[\d,]*(?:\.\d+)?")


def run_outcome_problems(path: Path, edition: str) -> list[str]:
    """Sentences of `path`'s prose that tell an outcome of the stored run in words, with
    no figure (which the quoted-figure guard then checks) and no pointer to an output."""
    cells = _cells(path)
    zh = i18n.translated(path.stem) if edition == "zh" else {}
    problems = []
    for i, cell in enumerate(cells):
        if cell["cell_type"] != "markdown":
            continue
        prose = " ".join(zh.get(cell.get("id"), _source(cell)).split())
        for sentence in SENTENCE[edition].split(prose):
            if (RUN_PHRASE[edition].search(sentence)
                    and RUN_OUTCOME[edition].search(sentence)
                    and not FIGURE.search(sentence)
                    and not POINTS_AT_OUTPUT[edition].search(sentence)):
                problems.append(f"{path.name} ({edition}) cell {i}: {sentence[:120]!r} "
                                "tells the run's outcome in words; quote the printed "
                                "figure, point at the output that prints it, or state "
                                "what holds on any machine")
    return problems


@pytest.mark.parametrize("edition", ["en", "zh"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_runs_outcomes_are_not_told_in_words_alone(path, edition):
    problems = run_outcome_problems(path, edition)
    assert not problems, "\n".join(problems)


def test_an_outcome_told_in_words_fails(tmp_path):
    def edit(cells):
        cell = next(c for c in cells if c["cell_type"] == "markdown")
        cell["source"] = _source(cell) + "\n\nThroughput dropped a little in this run.\n"
        cell["id"] = "not-translated"
    path = _disturbed(tmp_path, edit)
    problems = run_outcome_problems(path, "en")
    assert len(problems) == 1 and "dropped a little" in problems[0]


@pytest.mark.parametrize("edition", ["en", "zh"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_figures_quoted_from_the_books_run_are_its_stored_outputs(path, edition):
    problems = quoted_figure_problems(path, edition)
    assert not problems, "\n".join(problems)


def test_a_stale_quoted_figure_fails(tmp_path):
    def edit(cells):
        cell = next(c for c in cells if c["cell_type"] == "markdown"
                    and "this book's CPU run" in _source(c))
        cell["source"] = re.sub(r"\d+(?:\.\d+)?× on\s+this\s+book's\s+CPU\s+run",
                                "9.87× on this book's CPU run", _source(cell), count=1)
        cell["id"] = "not-translated"
    problems = quoted_figure_problems(_disturbed(tmp_path, edit), "en")
    assert len(problems) == 1 and "'9.87×'" in problems[0]
    assert quoted_figure_problems(ROOT / "chapters" / "06_kv_cache.ipynb", "zh") == []
