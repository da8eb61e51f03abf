"""The built site in a real browser: scripts/site_check.py (= `make site-check`) opens
every page in headless Chromium at 1280 px and fails on JavaScript errors, raw TeX,
broken images, code, tables or equations wider than the text column, and exercise
numbers that differ from their checkers'. Without Debian's chromium both tests skip and
say so."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

import site_check
from conftest import ROOT

pytestmark = pytest.mark.book

NO_CHROMIUM = ("site check not run: Chromium is missing; install Debian's chromium "
               "(`sudo apt-get install chromium`) to check the site in a browser")


def test_every_page_passes_the_site_check_in_chromium(site, tmp_path):
    if site_check.chromium_path() is None:
        pytest.skip(NO_CHROMIUM)
    # what `make site-check` runs, on the session's build of the site (the same build as
    # `make book`), without the screenshots: they are for a person to look at, and
    # taking them tripled the check's time (172 s against 49 s for 48 pages)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "site_check.py"),
                           "--site", str(site), "--out", str(tmp_path),
                           "--no-screenshots"],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{proc.stdout[-12000:]}\n{proc.stderr[-3000:]}"


BAD_PAGE = """<!DOCTYPE html><html><head><meta charset="utf-8"><title>bad</title>
</head><body>
<article class="bd-article" style="width: 600px; padding: 0 20px">
<p>Inline math that was never typeset: \\(x^2\\) and \\[y\\].</p>
<img src="missing.png" alt="a figure that is not there">
<div class="highlight"><pre>{long_line}</pre></div>
<table><tr><td style="white-space: nowrap">{long_line}</td></tr></table>
<div class="math" style="white-space: nowrap">{long_line}</div>
<div class="exercise admonition">
  <p class="admonition-title">Exercise 3.1 (Rotate)</p></div>
<div class="cell_output"><pre>✏️ Exercise 3.2 (rotate): not attempted.</pre></div>
<div class="exercise admonition">
  <p class="admonition-title">Exercise 3.2 (Fine)</p></div>
<div class="cell_output"><pre>✏️ Exercise 3.2 (norm): not attempted.</pre></div>
<div class="exercise admonition">
  <p class="admonition-title">练习 3.3 (旋转)</p></div>
<div class="cell_output"><pre>✏️ 练习 3.4 (rope)：尚未作答。</pre></div>
<p>模型给每个位置一个**对数几率（logits）**向量。</p>
<a class="lang-switch" href="zh/page.html">中文</a>
</article>
<script>console.error("boom"); undefined_function();</script>
<script src="https://cdn.example.org/needs-the-network.js"></script>
</body></html>"""


def test_the_site_check_finds_each_kind_of_problem(tmp_path):
    if site_check.chromium_path() is None:
        pytest.skip(NO_CHROMIUM)
    page = BAD_PAGE.format(long_line="x" * 300)
    (tmp_path / "page.html").write_text(page, encoding="utf-8")
    found = site_check.run(tmp_path, tmp_path / "out", screenshots=False)["page.html"]
    problems = found["problems"]
    js = "\n".join(problems["js"])
    assert "boom" in js  # console.error
    assert "undefined_function is not defined" in js  # an uncaught exception
    assert "404" in js  # the missing image
    assert "ERR_FAILED" in js  # the other host's script: no request leaves 127.0.0.1
    assert len(problems["tex"]) == 2 and len(problems["image"]) == 1
    assert len(problems["code"]) == len(problems["table"]) == len(problems["math"]) == 1
    assert problems["exercise"] == [
        '"Exercise 3.1 (Rotate)" is numbered 3.1, its checker prints 3.2',
        '"练习 3.3 (旋转)" is numbered 3.3, its checker prints 3.4']
    assert len(problems["markup"]) == 1 and "**对数几率（logits）**向量" in problems["markup"][0]
    assert len(problems["language"]) == 1, problems["language"]
    assert re.search(r"leads to http://127\.0\.0\.1:\d+/zh/page\.html: HTTP 404",
                     problems["language"][0]), problems["language"]
