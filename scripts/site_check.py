"""Open every page of the built site in headless Chromium; fail on what a reader sees.

    python scripts/site_check.py              # build the site, then check _build/html
    python scripts/site_check.py --no-build   # check the site already in _build/html
    python scripts/site_check.py --site DIR   # check another build (no build)
    python scripts/site_check.py --page 07    # only pages whose path contains "07"

The site is served on 127.0.0.1 (an ephemeral port, in a thread) and every page is
opened in a 1280 px wide window, scrollbar included, in Debian's `chromium` (`apt-get
install chromium`) driven by Playwright's Python API; Playwright's own browser download
is never used. Requests to any other host are refused, so a page that needs the network
shows up as an error. A page fails on:

- js: a console error (a failed request included) or an uncaught exception;
- tex: `\\(` or `\\[` left in the text after MathJax finished typesetting, or a MathJax
  error;
- image: an image that did not load;
- code / table / math: a code block (input or output), table or display equation whose
  content is wider than its own box (it scrolls sideways, deliberately or not) or whose
  box is wider than the text column; collapsed solutions and hidden cells are opened
  first;
- exercise: an exercise whose number (`Exercise 7.1` in its title) differs from the
  number in the first checker verdict printed after it (`Exercise 7.1 (name): ...`), or
  that has no verdict (the Chinese edition's "练习 7.1" the same way);
- markup: Markdown emphasis left as text (`**` or `__` in a paragraph, list or heading);
- language: no link to the page's other edition (English / 中文), or one that does not
  open (the Chinese edition is under zh/, scripts/build_book.py).

Printed output wraps on the site (as in Jupyter), so it never counts as too wide; its
wrapped lines are counted in a note. A full-page PNG screenshot of every page (as a
reader first sees it: solutions collapsed) goes to _build/site-check/, with report.json
(every problem). Exit status 1 if any page fails, 2 if Chromium is not installed.
"""
from __future__ import annotations

import argparse
import functools
import http.server
import json
import re
import shutil
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WIDTH, HEIGHT = 1280, 900
CATEGORIES = {
    "js": "JavaScript errors",
    "tex": "raw TeX / math errors",
    "image": "broken images",
    "code": "code blocks too wide",
    "table": "tables too wide",
    "math": "display equations too wide",
    "exercise": "exercise numbers",
    "markup": "markdown left as text",
    "language": "language switch",
}
SHOWN_PER_CATEGORY = 5  # per page in the printed list; report.json holds every problem
INSTALL = "Debian/Ubuntu: `sudo apt-get install chromium`"


def chromium_path() -> str | None:
    """Debian's chromium, or None when it is not installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


def site_pages(site: Path) -> list[str]:
    """Every HTML page of the site (relative paths) but redirects such as index.html."""
    pages = []
    for p in sorted(site.rglob("*.html")):
        rel = p.relative_to(site).as_posix()
        if {"_static", "_sources", "_images"} & set(rel.split("/")[:-1]):
            continue  # the theme's templates, not pages (zh/_static/ too)
        head = p.read_text(encoding="utf-8", errors="replace")[:2000]
        if 'http-equiv="Refresh"' in head:
            continue
        pages.append(rel)
    return pages


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        pass


def serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve `site` on 127.0.0.1 at an ephemeral port from a daemon thread."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# --- what runs in the page ------------------------------------------------------------

_WAIT_FOR_MATHJAX = """async () => {
  if (!document.querySelector('script[src*="mathjax"]'))
    return 'no MathJax on this page';
  const started = () => window.MathJax && MathJax.startup && MathJax.startup.promise;
  for (let i = 0; i < 200 && !started(); i++) await new Promise(r => setTimeout(r, 50));
  if (!started()) return 'MathJax did not start within 10 s';
  await MathJax.startup.promise;
  return null;
}"""

_RAW_TEX = r"""() => {
  const skip = 'pre, code, script, style, textarea, mjx-container, .highlight';
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (n.parentElement && n.parentElement.closest(skip)) continue;
    const t = n.textContent;
    for (const m of t.matchAll(/\\[\(\[]/g)) {
      const around = t.slice(Math.max(0, m.index - 30), m.index + 50);
      out.push('raw TeX: "' + around.replace(/\s+/g, ' ').trim() + '"');
    }
  }
  for (const e of document.querySelectorAll('mjx-merror')) {
    const why = e.getAttribute('data-mjx-error') || e.textContent;
    out.push('MathJax error: ' + why.slice(0, 120));
  }
  return out;
}"""

_BROKEN_IMAGES = """async () => {
  const imgs = Array.from(document.images);
  await Promise.all(imgs.map(img => Promise.race([
    img.decode().catch(() => null), new Promise(r => setTimeout(r, 5000))])));
  return imgs.filter(img => !img.complete || img.naturalWidth === 0)
    .map(img => 'image did not load: ' + (img.getAttribute('src') || '(no src)'));
}"""

_EXPAND_HIDDEN = """() => {
  for (const e of document.querySelectorAll('.toggle-hidden'))
    e.classList.remove('toggle-hidden');
  for (const d of document.querySelectorAll('details')) d.open = true;
}"""

# Fonts loaded and two frames drawn: measure the layout a reader sees.
_SETTLE = """async () => {
  await document.fonts.ready;
  for (let i = 0; i < 2; i++) await new Promise(r => requestAnimationFrame(r));
}"""

# A code block, table or display equation overflows when its content is wider than its
# own visible box (scrollWidth > clientWidth: it scrolls sideways or spills out) or when
# its box sticks out of the article's text column. A deliberate scroll box counts too.
_OVERFLOW = r"""() => {
  const art = document.querySelector('article.bd-article')
    || document.querySelector('main') || document.body;
  const cs = getComputedStyle(art), ar = art.getBoundingClientRect();
  const left = ar.left + parseFloat(cs.paddingLeft);
  const right = ar.right - parseFloat(cs.paddingRight);
  // the width of one character of the code font, and a code block's padding
  const codePre = art.querySelector('.cell_input div.highlight pre')
    || art.querySelector('div.highlight pre');
  let charPx = 0, prePad = 0;
  if (codePre) {
    const probe = document.createElement('pre');
    probe.style.cssText = 'position:absolute;visibility:hidden;display:inline-block;'
      + 'padding:0;margin:0;border:0';
    probe.textContent = 'x'.repeat(100);
    codePre.parentElement.appendChild(probe);
    charPx = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const ps = getComputedStyle(codePre);
    prePad = parseFloat(ps.paddingLeft) + parseFloat(ps.paddingRight);
  }
  const flat = s => s.replace(/\s+/g, ' ').trim().slice(0, 60);
  const kinds = [['code', 'pre'], ['table', 'table'],
                 ['math', 'div.math, mjx-container[display="true"]']];
  const out = [];
  const seen = new Set();
  for (const [kind, sel] of kinds) {
    for (const el of art.querySelectorAll(sel)) {
      const r = el.getBoundingClientRect();
      if (r.width === 0 && r.height === 0) continue;  // not rendered
      // one display equation is one problem, measured on its div.math or mjx-container
      const key = kind === 'math' ? (el.closest('div.math') || el) : el;
      if (seen.has(key)) continue;
      let own = el.scrollWidth - el.clientWidth;
      const p = el.parentElement;
      if (kind !== 'code' && p && p !== art)
        own = Math.max(own, p.scrollWidth - p.clientWidth);
      const over = Math.max(own, r.right - right, left - r.left);
      if (over <= 1) continue;
      seen.add(key);
      let what;
      if (kind === 'code') {
        const lines = el.textContent.split('\n');
        const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
        const where = el.closest('.cell_output') ? 'output'
          : el.closest('.cell_input') ? 'input' : 'block';
        const start = longest.trim().slice(0, 70);
        what = `${where} line of ${longest.length} chars: "${start}"`;
      } else if (kind === 'table') {
        what = `table "${flat(el.innerText)}"`;
      } else {
        const tex = el.querySelector('mjx-assistive-mml, math') || el;
        what = `equation "${flat(tex.textContent)}"`;
      }
      out.push({kind, text: `${what} is ${Math.round(over)} px too wide`});
    }
  }
  // printed output that wraps (white-space: pre-wrap) fits by design: count long lines
  let wrapped = 0;
  for (const el of art.querySelectorAll('.cell_output pre')) {
    if (!charPx || !getComputedStyle(el).whiteSpace.startsWith('pre-wrap')) continue;
    const fits = Math.floor((el.clientWidth - prePad) / charPx);
    wrapped += el.textContent.split('\n').filter(l => l.length > fits).length;
  }
  const column = right - left;
  return {problems: out, column_px: Math.round(column), wrapped_output_lines: wrapped,
          code_chars: charPx ? Math.floor((column - prePad) / charPx) : null};
}"""

# Each exercise admonition's number against the first checker verdict printed after it.
_EXERCISES = r"""() => {
  // "Exercise 7.1 (Title)", "Exercise 7.1", "Exercise (A.2)", "Exercise 25 (Title)"
  const num =
    /(?:Exercise|练习)\s*\(?\s*(\d+(?:\s*\.\s*\d+)?|[A-Z]\s*\.\s*\d+)(?!\w|\.\d)/;
  const verdict = /(?:Exercise|练习)\s+([A-Z]|\d+)\.(\d+)\s+\(/;
  const out = [];
  let current = null;
  const finish = () => {
    if (current && !current.done)
      out.push(`${current.label}: no checker verdict follows it`);
  };
  const sel = 'div.exercise.admonition, div.cell_output';
  for (const el of document.querySelectorAll(sel)) {
    if (el.matches('div.exercise.admonition')) {
      finish();
      const titleEl = el.querySelector('.admonition-title');
      const title = (titleEl ? titleEl.textContent : '').replace(/\s+/g, ' ').trim();
      const m = title.match(num);
      const n = m ? m[1].replace(/\s+/g, '') : null;
      current = {n, label: `"${title.slice(0, 60)}"`, done: false};
      if (!n) {
        out.push(`${current.label}: no "Exercise <n>" in the title`);
        current.done = true;
      }
      continue;
    }
    if (!current || current.done) continue;
    const m = el.textContent.match(verdict);
    if (!m) continue;
    current.done = true;
    const v = `${m[1]}.${m[2]}`;
    if (v !== current.n)
      out.push(`${current.label} is numbered ${current.n}, its checker prints ${v}`);
  }
  finish();
  return out;
}"""


# Emphasis markers that Markdown did not turn into emphasis (a closing `**` after Chinese
# punctuation and before a character does not close, CommonMark's flanking rule).
_MARKUP = r"""() => {
  const out = [];
  const sel = '.bd-article p, .bd-article li, .bd-article h1, .bd-article h2, '
    + '.bd-article h3, .bd-article td, .bd-article dd';
  for (const el of document.querySelectorAll(sel)) {
    if (el.closest('.cell_output, pre, code, .highlight')) continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      if (n.parentElement.closest('code, pre, mjx-container')) continue;
      const m = n.textContent.match(/\*\*|__/);
      if (m) {
        const t = n.textContent, i = m.index;
        out.push('"' + t.slice(Math.max(0, i - 25), i + 25).replace(/\s+/g, ' ') + '"');
      }
    }
  }
  return [...new Set(out)];
}"""

# The link to the same page in the other edition (book/_static/lang-switch.js) opens.
_LANGUAGE = r"""async () => {
  const a = document.querySelector('a.lang-switch');
  if (!a) return ['no language switch (English / 中文) on this page'];
  try {
    const r = await fetch(a.href.split('#')[0], {method: 'HEAD'});
    if (!r.ok) return [`the language switch leads to ${a.href}: HTTP ${r.status}`];
  } catch (e) {
    return [`the language switch leads to ${a.href}: ${e}`];
  }
  return [];
}"""


def _console_error(problems: dict, message) -> None:
    if message.type != "error":
        return
    where = ""
    if message.location and message.location.get("url"):
        name = message.location["url"].rsplit("/", 1)[-1]
        where = f" ({name}:{message.location['lineNumber']})"
    problems["js"].append(f"console: {message.text}{where}")


def check_page(context, url: str, shot: Path | None) -> dict:
    """Open one page; return its problems by category and the column's measurements."""
    page = context.new_page()
    problems: dict[str, list[str]] = {k: [] for k in CATEGORIES}
    measured: dict = {}
    page.on("console", lambda m: _console_error(problems, m))
    page.on("pageerror", lambda e: problems["js"].append(f"uncaught: {e}"))
    try:
        page.goto(url, wait_until="load", timeout=60_000)
        late = page.evaluate(_WAIT_FOR_MATHJAX)
        if late and late != "no MathJax on this page":
            problems["tex"].append(late)
        page.wait_for_timeout(100)  # scripts that run after load report their errors
        problems["tex"] += page.evaluate(_RAW_TEX)
        problems["image"] += page.evaluate(_BROKEN_IMAGES)
        problems["exercise"] += page.evaluate(_EXERCISES)
        problems["markup"] += page.evaluate(_MARKUP)
        problems["language"] += page.evaluate(_LANGUAGE)
        if shot is not None:
            shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(shot), full_page=True)
        page.evaluate(_EXPAND_HIDDEN)
        page.evaluate(_SETTLE)
        measured = page.evaluate(_OVERFLOW)
        if measured["problems"]:  # measure again once the layout has surely settled
            page.wait_for_timeout(500)
            measured = page.evaluate(_OVERFLOW)
        for p in measured["problems"]:
            problems[p["kind"]].append(p["text"])
    finally:
        page.close()
    return {"problems": problems, "column_px": measured.get("column_px"),
            "code_chars": measured.get("code_chars"),
            "wrapped_output_lines": measured.get("wrapped_output_lines", 0)}


def run(site: Path, out: Path, only: str | None = None,
        screenshots: bool = True) -> dict:
    """Check every page of `site`: {page: result}. RuntimeError without Chromium."""
    from playwright.sync_api import sync_playwright

    exe = chromium_path()
    if exe is None:
        raise RuntimeError(f"Chromium is not installed ({INSTALL})")
    pages = [p for p in site_pages(site) if only is None or only in p]
    if screenshots and only is None and out.is_dir():
        for old in out.glob("*.png"):  # no stale screenshot of a page that is gone
            old.unlink()
    server, base = serve(site)
    results = {}
    try:
        with sync_playwright() as pw:
            # a 1280 px window with a real scrollbar, as a desktop browser shows it
            browser = pw.chromium.launch(executable_path=exe, args=["--no-sandbox"],
                                         ignore_default_args=["--hide-scrollbars"])
            context = browser.new_context(viewport={"width": WIDTH, "height": HEIGHT})
            # every page as on a first visit (the theme keeps settings in localStorage)
            context.add_init_script("localStorage.clear()")
            # the site must work offline: refuse every request that leaves 127.0.0.1
            context.route(re.compile(r"^(?!http://127\.0\.0\.1:)"), lambda r: r.abort())
            for rel in pages:
                name = rel.removesuffix(".html").replace("/", "__") + ".png"
                t0 = time.perf_counter()
                results[rel] = check_page(context, base + rel,
                                          out / name if screenshots else None)
                results[rel]["seconds"] = round(time.perf_counter() - t0, 1)
            browser.close()
    finally:
        server.shutdown()
    return results


def report(results: dict, out: Path, seconds: float, verbose: bool = False) -> int:
    """Print the per-page list and counts, write report.json; return the problems."""
    for rel, r in results.items():
        found = {k: v for k, v in r["problems"].items() if v}
        if not found:
            continue
        print(f"\n{rel}  (text column {r['column_px']} px, "
              f"{r['code_chars']} code characters)")
        for k, items in found.items():
            print(f"  {CATEGORIES[k]}: {len(items)}")
            shown = items if verbose else items[:SHOWN_PER_CATEGORY]
            for item in shown:
                print(f"    - {item}")
            if len(items) > len(shown):
                print(f"    ... and {len(items) - len(shown)} more "
                      f"(all in {out / 'report.json'})")
    counts = {k: sum(len(r["problems"][k]) for r in results.values())
              for k in CATEGORIES}
    hit = {k: sum(bool(r["problems"][k]) for r in results.values()) for k in CATEGORIES}
    total = sum(counts.values())
    failing = sum(any(r["problems"].values()) for r in results.values())
    print(f"\n{'':30} {'pages':>6} {'problems':>9}")
    for k, label in CATEGORIES.items():
        print(f"{label:30} {hit[k]:>6} {counts[k]:>9}")
    print(f"{'total':30} {failing:>6} {total:>9}   "
          f"({len(results)} pages checked in {seconds:.0f} s)")
    wrapped = sum(r["wrapped_output_lines"] for r in results.values())
    if wrapped:
        print(f"note (not a failure): {wrapped} printed output lines are wider than "
              "the column and wrap, as in Jupyter")
    columns = sorted({(r["column_px"], r["code_chars"]) for r in results.values()
                      if r["column_px"] and r["code_chars"]})
    if columns:
        print(f"text column at {WIDTH} px: "
              + ", ".join(f"{px} px = {ch} code characters" for px, ch in columns))
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(
        {"counts": counts, "pages_with_problems": hit, "pages": results},
        indent=1, ensure_ascii=False), encoding="utf-8")
    return total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", type=Path, default=None,
                        help="a built site (default: build, then check _build/html)")
    parser.add_argument("--no-build", action="store_true",
                        help="check _build/html as it is")
    parser.add_argument("--out", type=Path, default=ROOT / "_build" / "site-check",
                        help="screenshots and report.json (default: _build/site-check)")
    parser.add_argument("--page", default=None,
                        help="only pages whose path contains this")
    parser.add_argument("--no-screenshots", action="store_true")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print every problem")
    args = parser.parse_args(argv)

    if chromium_path() is None:
        print(f"site check: Chromium is not installed ({INSTALL})", file=sys.stderr)
        return 2
    site = args.site
    if site is None:
        site = ROOT / "_build" / "html"
        if not args.no_build:
            sys.path.insert(0, str(ROOT / "scripts"))
            import build_book

            if build_book.main([]) != 0:
                return 1
    start = time.perf_counter()
    results = run(site.resolve(), args.out, args.page,
                  screenshots=not args.no_screenshots)
    total = report(results, args.out, time.perf_counter() - start, args.verbose)
    print(f"screenshots and report.json: {args.out}")
    if total:
        failing = sum(any(r["problems"].values()) for r in results.values())
        print(f"site check FAILED: {total} problems on {failing} pages")
        return 1
    print("site check passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
