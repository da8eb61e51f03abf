"""The built site in a real browser: scripts/site_check.py (= `make site-check`) opens every
page in headless Chromium at 1280 px and fails on JavaScript errors, raw TeX, broken images,
code, tables or equations wider than the text column, and exercise numbers that differ from
their checkers'. Without Debian's chromium the test is skipped, and says so."""
from __future__ import annotations

import subprocess
import sys

import pytest

import site_check
from conftest import ROOT

pytestmark = pytest.mark.book


def test_every_page_passes_the_site_check_in_chromium():
    if site_check.chromium_path() is None:
        pytest.skip("site check not run: Chromium is missing; install Debian's chromium "
                    "(`sudo apt-get install chromium`) to check the site in a browser")
    # a subprocess: Playwright's sync API must not share a process with other event loops
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "site_check.py")], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"
