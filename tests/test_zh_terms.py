"""The Chinese edition says each fixed term one way, and each claim in one Chinese text.

- A term on the fixed list has one rendering: a second one in a translation's prose (code,
  math and link targets aside) fails, naming the rendering to use.
- No italics on Chinese characters (`*中文*` / `_中文_`: Chinese has no italic type).
- A claim's Chinese is the same on the claims page (book/zh/claims.yml) and in every chapter
  callout (`> **源文章论断 CN**：...`), and each claims-page link label (`N：label`) is the
  Chinese heading it links to, or one of that heading's parts around a full-width colon.

The glossary (book/glossary.md) gives each term's Chinese name and, on `.. also:` lines,
the phrasings the translation check also accepts; this test is the other half: what a
translation may not say.
"""
from __future__ import annotations

import re
import sys

import pytest
from markdown_it import MarkdownIt

from conftest import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import i18n  # noqa: E402

CJK = re.compile(r"[\u4e00-\u9fff]")

# (a second rendering, the one rendering to use); the patterns read prose, not code
FORBIDDEN: list[tuple[str, str]] = [
    (r"前向传播", "前向计算 (forward pass)"),
    (r"(?<!操作系统)(?<!Jupyter )(?<!notebook )内核(?!进程)",
     "算子 (a compute kernel; 融合算子 for a fused kernel; the OS's or Jupyter's kernel "
     "is 操作系统内核 / Jupyter 内核)"),
    (r"(?<![A-Za-z_\-（])kernels?(?![A-Za-z_\-])", "算子 (kernel), not the Latin word"),
    (r"(?<!给出)提示(?![词缓查信：:])", "提示词 (prompt; 系统提示词 for a system prompt; a "
     "hint is 提示信息 or （提示：…）)"),
    (r"stop ?(?:字符串|序列)|停止序列", "停止字符串 (stop string, stop sequence)"),
    (r"服务器推送事件|服务端推送事件", "服务器发送事件（SSE）"),
    (r"保留集", "留出 (held-out: 留出的数据, 留出集)"),
    (r"(?<!仅)解码器", "反分词器 (detokenizer; 仅解码器 for decoder-only; a UTF-8 decoder "
     "is said with 解码)"),
    (r"(?<![A-Za-z_\-])tokens?(?![A-Za-z_\-])", "词元 (never a bare Latin token in Chinese "
     "prose; a gloss in parentheses, 词元（token）, is fine)"),
    (r"模型权重文件", "模型检查点 (checkpoint; 模型目录 where a directory is meant)"),
    (r"暂扣缓冲", "暂扣（hold-back）"),
    (r"后续每个字", "TPOT（每个输出词元的间隔）"),
    (r"\*\*每个输出词元的间隔\*\*（TPOT）|(?<=[\u4e00-\u9fff，。、；：])每个输出词元的间隔（TPOT）",
     "TPOT（每个输出词元的间隔） in running text (the glossary's name line aside)"),
    (r"逐字复现", "逐位复现 (bit-reproducible)"),
]

NAMES = sorted(p.stem for p in (ROOT / "book" / "zh").glob("*.yml")
               if p.stem in i18n.sources())
_GLOSS = re.compile(r"（[^）\u4e00-\u9fff]*）")  # （token）, （kernel）: a Latin gloss


def prose_of(name: str, zh: str) -> str:
    """The running Chinese of a unit: no code, math, link targets or Latin glosses in
    full-width parentheses; on the glossary page, no English term lines or `.. also:`."""
    if name == "glossary":
        zh = "\n".join(ln for ln in zh.splitlines()
                       if CJK.search(ln) and not ln.startswith(".. "))
    return _GLOSS.sub("（）", i18n.prose(zh))


def second_renderings(name: str, zh: str) -> list[str]:
    text = prose_of(name, zh)
    out = []
    for pattern, canonical in FORBIDDEN:
        for m in re.finditer(pattern, text):
            around = text[max(0, m.start() - 12):m.end() + 12].replace("\n", " ")
            out.append(f"{m.group(0)!r} in …{around}…: use {canonical}")
    return out


_MD = MarkdownIt("commonmark").enable("table")


def chinese_italics(zh: str) -> list[str]:
    """The text of every emphasis span (`*x*`, `_x_`, not `**x**`) with a Chinese character."""
    found = []
    for token in _MD.parse(zh):
        depth, text = 0, ""
        for child in token.children or []:
            if child.type == "em_open":
                depth, text = depth + 1, ""
            elif child.type == "em_close":
                depth -= 1
                if CJK.search(text):
                    found.append(text)
            elif depth:
                text += child.content
    return found


def current_units(name: str) -> list[i18n.Unit]:
    return [u for u in i18n.load(name) if u.zh.strip()]


@pytest.mark.parametrize("name", NAMES)
def test_one_rendering_per_term(name):
    problems = [f"{u.id}: {p}" for u in current_units(name)
                for p in second_renderings(name, u.zh)]
    assert not problems, (f"book/zh/{name}.yml: {len(problems)} second rendering(s) of a "
                          f"fixed term (issue 28; /tmp/zh_terms_fix.py fixes the mechanical "
                          f"ones):\n" + "\n".join(problems[:40]))


@pytest.mark.parametrize("name", NAMES)
def test_no_italics_on_chinese_characters(name):
    problems = [f"{u.id}: *{t}*" for u in current_units(name) for t in chinese_italics(u.zh)]
    assert not problems, (f"book/zh/{name}.yml: italic Chinese (drop the markers, or use "
                          f"**bold** for a real emphasis):\n" + "\n".join(problems))


# --- the claims ----------------------------------------------------------------------------

def claims_page() -> dict[str, str]:
    """Claim -> its Chinese text in the claims page's table."""
    out = {}
    for u in i18n.load("claims"):
        for m in re.finditer(r"^\| (C\d+) \| (.*?) \| \[", u.zh, re.M):
            out[m.group(1)] = m.group(2).strip()
    return out


CALLOUT = re.compile(r"^> \*\*源文章论断 C\d+\*\*：.*?(?=\[全部 24 条论断\])", re.M)
CLAIM_PART = re.compile(r"\*\*(?:源文章)?(?:论断 )?(C\d+)\*\*：(.*?)(?=；\*\*|。?$)")


def callouts(zh: str) -> list[tuple[str, str]]:
    """(claim, Chinese text) of every claim a callout of this translation quotes."""
    return [(c, text.strip()) for m in CALLOUT.finditer(zh)
            for c, text in CLAIM_PART.findall(m.group(0).rstrip())]


def test_the_claims_page_lists_24_claims_in_chinese():
    page = claims_page()
    assert sorted(page, key=lambda c: int(c[1:])) == [f"C{i}" for i in range(1, 25)]
    for claim, text in page.items():
        assert CJK.search(text), f"{claim}: {text!r} is not Chinese"
        assert not second_renderings("claims", text), (claim, second_renderings("claims", text))
    assert "逐位复现" in page["C20"]


@pytest.mark.parametrize("name", [n for n in NAMES if n != "claims"])
def test_callouts_quote_the_claims_page(name):
    page = claims_page()
    problems = []
    for u in current_units(name):
        if "论断 C" in u.zh and not callouts(u.zh) and re.search(r"^> \*\*.*论断 C", u.zh, re.M):
            problems.append(f"{u.id}: a claim callout this test cannot read")
        for claim, text in callouts(u.zh):
            if text != page.get(claim):
                problems.append(f"{u.id}: {claim} reads\n    {text}\n  the claims page "
                                f"(book/zh/claims.yml) reads\n    {page.get(claim)}")
    assert not problems, (f"book/zh/{name}.yml: claims worded differently from the claims "
                          f"page:\n" + "\n".join(problems))


def _headings_by_anchor(name: str) -> dict[str, str]:
    """English heading's anchor -> the Chinese heading that translates it."""
    from myst_parser.mdit_to_docutils.base import default_slugify

    out = {}
    for u in i18n.load(name):
        for (_, en), (_, zh) in zip(i18n.headings(u.en), i18n.headings(u.zh)):
            out[default_slugify(i18n.heading_text(en))] = i18n.heading_text(zh)
    return out


def label_matches(label: str, heading: str) -> bool:
    heading = re.sub(r"^\d+\.\s*", "", heading)  # "1. 首字慢": the symptom's number
    return label == heading or label in [p.strip() for p in heading.split("：")]


def test_claims_page_labels_are_the_headings_they_link():
    problems = []
    for u in i18n.load("claims"):
        for label, nb, anchor in re.findall(
                r"\[([^\]]*)\]\(\.\./chapters/(\w+)\.ipynb#([\w-]+)\)", u.zh):
            chapter, _, text = label.partition("：")
            if nb not in i18n.sources():
                problems.append(f"[{label}] links to {nb}.ipynb, which is not a chapter")
                continue
            heading = _headings_by_anchor(nb).get(anchor)
            if heading is None:
                problems.append(f"[{label}]: {nb}#{anchor} has no translated heading")
            elif not label_matches(text, heading) or chapter != nb.split("_")[0].lstrip("0"):
                problems.append(f"[{label}] links to {nb}#{anchor}, whose Chinese heading is "
                                f"{heading!r}: write [{nb.split('_')[0].lstrip('0')}："
                                f"{heading}] or a part of it around a '：'")
    assert not problems, "claims page (book/zh/claims.yml) labels:\n" + "\n".join(problems)


# --- the checks themselves -----------------------------------------------------------------

def test_the_checks_catch_what_they_should():
    assert second_renderings("x", "一次前向传播") and not second_renderings("x", "一次前向计算")
    assert not second_renderings("x", "词元（token）和 `token_ids`，以及 max_tokens")
    assert second_renderings("x", "每 token 计算量") and second_renderings("x", "特殊 token")
    assert second_renderings("x", "长提示") and not second_renderings("x", "（提示：用 `x`）")
    assert not second_renderings("x", "仅解码器（decoder-only）模型，notebook 内核进程")
    assert chinese_italics("一次*且仅一次*，**粗体**与 *italic*") == ["且仅一次"]
    assert callouts("> **源文章论断 C9**：甲；**论断 C10**：乙。[全部 24 条论断](x)") == [
        ("C9", "甲"), ("C10", "乙")]
    assert label_matches("首字慢", "1. 首字慢") and label_matches("两个时钟", "两个时钟：TTFT")
    assert not label_matches("先猜，再验证", "先猜，再查")
