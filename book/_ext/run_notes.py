"""Under every machine-dependent output, the machine it was measured on.

Cells tagged ``nbval-ignore-output`` show what varies from machine to machine: timings,
bf16 details. ``scripts/execute_notebooks.py`` records the run that wrote a notebook's
outputs in its metadata (``llmcore.execution``: CPU model, cores, torch version and threads,
date, load average). This extension puts one line under each such cell's output on the site
saying so, in the page's language, so a reader knows whose figures they are looking at. Cells
that only describe the machine (``machine-info``) or whose output the site leaves out
(``remove-output``) get none. ``tests/test_book.py`` checks the line on the built pages.
"""
from __future__ import annotations

import json
from pathlib import Path

from docutils import nodes

SKIP = {"tag_machine-info", "tag_remove-output", "tag_remove_output"}

TEXT = {
    "en": ("Measured on {machine}, {cores} cores, torch {torch} with {torch_threads} "
           "threads, on {date}; load average {load_before} before the run. Other "
           "machines give other figures; the compared lines after it hold on any."),
    "zh": ("测量环境：{machine}，{cores} 核，torch {torch}（{torch_threads} 个线程），"
           "{date}；运行前负载均值 {load_before}。其他机器上的数字会不同；其后受检的结论在任何"
           "机器上都成立。"),
}
BUSY = {
    "en": " The machine was busy during this run: its timings may be slow.",
    "zh": " 这次运行时机器较忙：计时可能偏慢。",
}
MISSING = {
    "en": "Measured on a machine this notebook does not record.",
    "zh": "本笔记本未记录测量所用的机器。",
}


def run_record(app, docname: str) -> dict | None:
    path = Path(app.env.doc2path(docname))
    if path.suffix != ".ipynb" or not path.exists():
        return None
    metadata = json.loads(path.read_text(encoding="utf-8")).get("metadata", {})
    return metadata.get("llmcore", {}).get("execution", {})


def note_text(record: dict, language: str) -> str:
    if not record:
        return MISSING[language]
    text = TEXT[language].format(**record)
    return text + (BUSY[language] if record.get("busy") else "")


def add_run_notes(app, doctree) -> None:
    record = run_record(app, app.env.docname)
    if record is None:
        return
    language = "zh" if (app.config.language or "").startswith("zh") else "en"
    for cell in list(doctree.findall(nodes.container)):
        classes = set(cell.get("classes", []))
        if "cell" not in classes or "tag_nbval-ignore-output" not in classes:
            continue
        if classes & SKIP:
            continue
        note = nodes.paragraph(classes=["run-note"])
        note += nodes.Text(note_text(record, language))
        cell.parent.insert(cell.parent.index(cell) + 1, note)


def setup(app):
    app.connect("doctree-read", add_run_notes)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
