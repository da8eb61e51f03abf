"""Every checker accepts a correct answer, rejects wrong ones, and never raises; the
notebooks number, hide and wrap their exercises as CONTRIBUTING.md says.

Answers live in tests/answers/chNN.py, one module per chapter, each defining ANSWERS.
"""
from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path

import pytest

import answers
import llmcore.exercises as ex
from conftest import ROOT
from llmcore.exercises import CHECKERS, FAILED, NOT_ATTEMPTED, PASSED

for info in pkgutil.iter_modules(ex.__path__):  # registers every chapter's checkers
    importlib.import_module(f"llmcore.exercises.{info.name}")

ANSWERS: dict = {}
for info in pkgutil.iter_modules(answers.__path__):
    ANSWERS.update(importlib.import_module(f"answers.{info.name}").ANSWERS)

NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))
CHECKER_CALL = re.compile(r"\b(ch\w+)\.(check_\w+)\(")
SOLUTION_TITLE = "# @title Solution"


def _skeleton(*args, **kwargs):
    raise NotImplementedError


def test_every_checker_has_answers_here():
    assert set(CHECKERS) == set(ANSWERS), "add a correct and a wrong answer for each new checker"


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_checker_accepts_correct_and_rejects_wrong(name, capsys):
    correct, wrongs = ANSWERS[name]
    assert CHECKERS[name](correct).status == PASSED
    for wrong in wrongs:
        verdict = CHECKERS[name](wrong)
        assert verdict.status == FAILED and not verdict, f"{name} accepted a wrong answer"
        assert re.search(r"\b(case|check)\b", verdict.message), (
            f"{name}: the verdict must name the case or check that failed: {verdict}")
    assert CHECKERS[name](_skeleton).status == NOT_ATTEMPTED
    assert "passed" in capsys.readouterr().out  # verdicts are printed for the learner


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_checker_survives_a_crashing_answer(name):
    def crash(*args):
        raise ZeroDivisionError("boom")
    verdict = CHECKERS[name](crash)
    assert verdict.status == FAILED and "ZeroDivisionError: boom" in verdict.message


def test_verdict_text_names_the_failing_case():
    v = ex.run_cases("demo", lambda x: x + 1, [ex.Case((1,), 2), ex.Case((2,), 4)])
    assert v.status == FAILED and "case 2 (2): expected 4, got 3" in v.message


def test_non_callable_answer_fails_cleanly():
    assert ex.run_cases("demo", 3, [ex.Case((1,), 1)]).status == FAILED


# --- the exercises in the notebooks ---------------------------------------------------


def _cells(path: Path) -> list[tuple[str, str, dict]]:
    """(cell type, source, metadata) of every cell of a notebook."""
    book = json.loads(path.read_text(encoding="utf-8"))
    return [(c["cell_type"], "".join(c["source"]), c.get("metadata", {}))
            for c in book["cells"]]


def _chapter_number(path: Path) -> str:
    """'07_sampling' -> '7', 'A_tiny_model' -> 'A' (as book/_ext/exercise_numbers.py)."""
    prefix = path.stem.split("_")[0]
    return str(int(prefix)) if prefix.isdigit() else prefix


def _exercises(path: Path) -> list[tuple[str, str]]:
    """(label, checker name) of each exercise, in order: the checker is the one the
    code cell right after the {exercise} directive calls."""
    cells, found = _cells(path), []
    for i, (kind, source, _) in enumerate(cells):
        if kind == "markdown" and "```{exercise}" in source:
            label = re.search(r":label: (\S+)", source)
            skeleton = next(s for k, s, _ in cells[i + 1:] if k == "code")
            call = CHECKER_CALL.search(skeleton)
            assert label and call, f"{path.name}: exercise {len(found) + 1} needs a " \
                                   ":label: and a skeleton cell that calls its checker"
            found.append((label[1], f"{call[1]}.{call[2]}"))
    return found


def _solution_cells(path: Path) -> list[tuple[str, str, dict]]:
    """The cells strictly between each {solution-start} and its {solution-end}."""
    inside, found = False, []
    for cell in _cells(path):
        if "{solution-start}" in cell[1]:
            inside = True
        elif "{solution-end}" in cell[1]:
            inside = False
        elif inside:
            found.append(cell)
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_numbers_agree_with_the_checkers(path, capsys):
    # the site shows the k-th exercise of chapter N as "Exercise N.k" (book/_ext);
    # its checker must print that number too
    exercises = _exercises(path)
    assert len(exercises) >= 3, f"{path.name} needs at least three exercises"
    for k, (label, name) in enumerate(exercises, 1):
        number = f"{_chapter_number(path)}.{k}"
        verdict = CHECKERS[name](_skeleton)
        assert verdict.exercise.startswith(f"Exercise {number} ("), (
            f"{path.name}: {label} is Exercise {number} on the page, but {name} "
            f"prints {verdict.exercise!r}")
    capsys.readouterr()


def _question_checks(path: Path) -> list[str]:
    """The checkers of the pen-and-paper questions (`chNN.check_q_x(None)` cells)."""
    return [f"{m[1]}.{m[2]}" for kind, source, _ in _cells(path) if kind == "code"
            for m in re.finditer(r"\b(ch\w+)\.(check_q_\w+)\(None\)", source)]


def test_every_checker_is_called_by_exactly_one_exercise_or_question():
    called = [name for path in NOTEBOOKS for _, name in _exercises(path)]
    called += [name for path in NOTEBOOKS for name in _question_checks(path)]
    assert sorted(called) == sorted(CHECKERS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_solutions_are_hidden_in_jupyter_and_colab(path):
    cells = _solution_cells(path)
    assert cells
    for kind, source, meta in cells:
        where = f"{path.name}: solution cell {source[:60]!r}"
        assert meta.get("jupyter", {}).get("source_hidden") is True, where
        if kind == "code":  # JupyterLab: code and output collapsed; Colab: a form cell
            assert meta["jupyter"].get("outputs_hidden") is True, where
            assert meta.get("cellView") == "form", where
            assert source.startswith(SOLUTION_TITLE), where
    for kind, source, _ in _cells(path):
        if "{solution-start}" in source:  # the note Jupyter shows (the site drops it)
            assert 'class="nb-only"' in source and ":class: dropdown" in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercise_cells_wrap_at_88_columns(path):
    cells = _cells(path)
    first = next(i for i, c in enumerate(cells) if "```{exercise}" in c[1])
    last = max(i for i, c in enumerate(cells) if "{solution-end}" in c[1])
    long = [f"{line[:50]}... ({len(line)} columns)" for _, source, _ in cells[first:last + 1]
            for line in source.splitlines() if len(line) > 88]
    assert not long, f"{path.name}: exercise lines over 88 columns:\n" + "\n".join(long)


def test_exercises_package_wraps_at_88_columns():
    from test_structure import columns  # a Chinese character takes two columns

    long = [f"{path.name}:{i} ({columns(line)} columns)"
            for path in sorted(Path(ex.__file__).parent.glob("*.py"))
            for i, line in enumerate(path.read_text().splitlines(), 1)
            if columns(line) > 88]
    assert not long, "lines longer than 88 columns:\n" + "\n".join(long)


# --- the checkers in the reader's language (the Chinese edition) ---------------------------

def _checker_messages() -> dict[str, str]:
    """Every fixed English text a checker can print: hints (`hint=`), the property checks of
    `run_checks` (the first item of each pair, in the call or in a returned list of pairs)
    and the messages of hand-made verdicts, by text -> where. f-strings (messages with
    values in them) are left out."""
    import ast

    def text(node):
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value,
                                                                           str) else None

    found: dict[str, str] = {}
    for path in sorted(Path(ex.__file__).parent.glob("ch*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call):
                continue
            name = ast.unparse(node.func)
            items = [kw.value for kw in node.keywords if kw.arg == "hint"]
            if name.endswith("run_checks") and len(node.args) > 1 and isinstance(
                    node.args[1], ast.List):
                items += [e.elts[0] for e in node.args[1].elts
                          if isinstance(e, ast.Tuple) and e.elts]
            if name == "Verdict" and len(node.args) > 2:
                items.append(node.args[2])
            for item in items:
                if text(item):
                    found.setdefault(text(item), f"{path.name}:{item.lineno}")
        # a list of (what must hold, test) pairs built elsewhere and passed to run_checks
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Return) and isinstance(node.value, ast.List) and all(
                    isinstance(e, ast.Tuple) and len(e.elts) == 2 and text(e.elts[0])
                    for e in node.value.elts):
                for e in node.value.elts:
                    found.setdefault(text(e.elts[0]), f"{path.name}:{e.lineno}")
    return found


def test_every_checker_message_has_its_chinese():
    from llmcore.exercises.zh import MESSAGES

    found = _checker_messages()
    assert len(found) > 100  # the collector sees the checkers' texts
    missing = [f"{where}: {text!r}" for text, where in found.items() if text not in MESSAGES]
    assert not missing, ("checker texts without a Chinese entry in "
                         "llmcore/exercises/zh.py:\n" + "\n".join(missing))
    unused = [text for text in MESSAGES if text not in found]
    assert not unused, f"entries of llmcore/exercises/zh.py no checker prints: {unused}"
    english_left = [t for t, zh in MESSAGES.items()
                    if not re.search(r"[\u4e00-\u9fff]", zh)]
    assert not english_left, f"entries with no Chinese in them: {english_left}"


def test_verdicts_speak_the_chosen_language(capsys, monkeypatch):
    from llmcore.exercises import ch03

    try:
        ex.set_language("zh")
        ch03.check_rotate_pair(_skeleton)
        assert capsys.readouterr().out.startswith(
            "✏️ 练习 3.2 (rotate_pair)：尚未作答。把 `raise NotImplementedError`")
        ch03.check_rotate_pair(lambda x, y, a: (x, y))  # not turned at all
        out = capsys.readouterr().out
        assert out.startswith("❌ 练习 3.2 (rotate_pair)：未通过。用例 1 "), out
        assert "提示：" in out and "Hint" not in out
        ex.set_language(None)
        monkeypatch.setenv("LLMCORE_LANG", "zh")
        ch03.check_rotate_pair(_skeleton)
        assert "尚未作答" in capsys.readouterr().out
        monkeypatch.setenv("LLMCORE_LANG", "fr")
        with pytest.raises(ValueError, match=r"LLMCORE_LANG must be one of \('en', 'zh'\)"):
            ch03.check_rotate_pair(_skeleton)
        with pytest.raises(ValueError, match="language must be one of"):
            ex.set_language("french")
        monkeypatch.delenv("LLMCORE_LANG")
        ch03.check_rotate_pair(_skeleton)
        assert "Exercise 3.2 (rotate_pair): not attempted" in capsys.readouterr().out
    finally:
        ex.set_language(None)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_printed_verdicts_translate_to_chinese(path):
    """The Chinese edition shows the notebooks' own outputs, their verdicts rewritten."""
    text = "\n".join("".join(o.get("text", "")) for c in json.loads(path.read_text())["cells"]
                     if c["cell_type"] == "code" for o in c.get("outputs", []))
    lines = [ln for ln in text.splitlines() if re.match(r"^(✅|❌|✏️) Exercise ", ln)]
    assert lines, f"{path.name} prints no verdict"
    for line in lines:
        zh = ex.translate_verdicts(line, "zh")
        assert re.match(r"^(✅|❌|✏️) 练习 [0-9A-Z]+\.\d+ \(\w+\)：(通过|未通过|尚未作答)。", zh), zh
        assert not re.search(r"\b(passed|failed|cases|checks|Replace)\b", zh), zh
