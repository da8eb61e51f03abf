"""Shared pytest configuration: the `cuda` marker skips tests when no CUDA GPU is present."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # the maintenance scripts are tested as modules
sys.path.insert(0, str(ROOT / "tests"))  # tests/answers

# Triton decides when it is first imported whether its kernels run in its interpreter
# (its own @jit helpers in triton.language are built then). Without a GPU,
# tests/test_triton_attention.py runs appendix E's kernels on CPU tensors through the
# interpreter, and other test modules import triton before it is collected (xgrammar,
# torch's inductor): so the switch is set here, before any of them.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (`make gpu-check` runs them on a GPU machine)")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


def stop_process(proc: subprocess.Popen, timeout: float = 15) -> None:
    """Stop a server the tests started: SIGTERM, then SIGKILL if it has not exited
    within `timeout` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=timeout)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    """The site as `make book` builds it, both editions, warnings as errors (raises if
    any): built once per session for tests/test_book.py and the browser check of
    tests/test_site.py. Returns the folder that holds index.html."""
    import build_book
    index = build_book.build(tmp_path_factory.mktemp("book"))
    assert index.exists()
    return index.parent
