"""The Chinese edition: translations kept beside the English, one unit per markdown cell.

    python scripts/i18n.py sync              # create/update book/zh/*.yml from the English
    python scripts/i18n.py todo [NAME]       # what needs translating (new or changed English)
    python scripts/i18n.py put NAME ID < zh  # record the translation of one unit (from stdin)
    python scripts/i18n.py check             # the drift gate (tests/test_i18n.py runs it)
    python scripts/i18n.py terms             # the glossary's English -> Chinese names
    python scripts/i18n.py stats             # how many units and words are translated

Every markdown cell of a chapter notebook, and every blank-line-separated block of a page in
book/, is a *unit*. Its translation lives in `book/zh/<name>.yml` (NAME is the notebook's or
page's file stem, e.g. `02_tokenizer`, `glossary`), keyed by the notebook cell's id (pages:
by position, `b0`, `b1`, ...), with the English text it was made from and that text's
hash. Code cells, their outputs and figures are not translated: the Chinese edition shows the
English notebook's own, so they cannot drift. `check` fails when

- an English unit has no translation (a new cell or block),
- an English unit's hash differs from the one its translation recorded (the English changed
  after it was translated): the message shows the recorded English, the current English and
  the translation, so the translator sees what to change,
- a translation has a different number or levels of headings than its English (the Chinese
  edition keeps the English anchors, see `heading_map`),
- a glossary term's English name is in the English text and none of its Chinese names is in
  the translation (a unit may list terms used in another sense under `skip_terms`),
- a closing `**` that CommonMark leaves as text in Chinese,
- a diagram label without a current translation (book/zh/diagrams.yml; update it with
  `python scripts/diagrams.py --zh-sync`, then redraw with `--lang zh`).

After an English edit: `sync`, then `todo NAME` shows the stale units, then `put NAME ID`.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from embed_diagrams import to_paths  # noqa: E402  (scripts/ is on the path)

ROOT = Path(__file__).resolve().parent.parent
ZH = ROOT / "book" / "zh"
PAGES = ["intro", "claims", "glossary", "references"]  # book/<name>.md


def sources() -> dict[str, Path]:
    """Every translated English source, by NAME: the chapters then the pages of book/."""
    out = {p.stem: p for p in sorted((ROOT / "chapters").glob("*.ipynb"))}
    out.update({name: ROOT / "book" / f"{name}.md" for name in PAGES})
    return out


def digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def english_units(path: Path) -> list[tuple[str, str]]:
    """(id, English text) of every unit of a notebook or page, in order. A diagram embedded
    in a cell (scripts/embed_diagrams.py) counts as its path form, as the units store it."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text(encoding="utf-8"))
        return [(c["id"], to_paths("".join(c["source"]))) for c in nb["cells"]
                if c["cell_type"] == "markdown"]
    blocks = path.read_text(encoding="utf-8").rstrip("\n").split("\n\n")
    return [(f"b{i}", b) for i, b in enumerate(blocks)]


@dataclass
class Unit:
    id: str
    sha: str
    en: str
    zh: str
    skip_terms: list[str] = field(default_factory=list)


def sidecar(name: str) -> Path:
    return ZH / f"{name}.yml"


def load(name: str) -> list[Unit]:
    path = sidecar(name)
    if not path.exists():
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [Unit(u["id"], u["sha"], u["en"], u.get("zh") or "", list(u.get("skip_terms") or []))
            for u in data.get("units", [])]


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _str)

_HEADER = """\
# The Chinese edition of {source}: one unit per {what}.
# `en` is the English text the translation `zh` was made from and `sha` its hash; `make test`
# fails when the English no longer has that hash. After an English edit:
#   python scripts/i18n.py sync && python scripts/i18n.py todo {name}
# then record the new translation with `python scripts/i18n.py put {name} ID < file`.
"""


def save(name: str, units: list[Unit]) -> None:
    src = sources()[name]
    what = "markdown cell (by cell id)" if src.suffix == ".ipynb" else "block of the page"
    rows = []
    for u in units:
        row = {"id": u.id, "sha": u.sha, "en": u.en, "zh": u.zh}
        if u.skip_terms:
            row["skip_terms"] = u.skip_terms
        rows.append(row)
    text = _HEADER.format(source=src.relative_to(ROOT).as_posix(), what=what, name=name)
    text += yaml.dump({"source": src.relative_to(ROOT).as_posix(), "units": rows},
                      Dumper=_Dumper, allow_unicode=True, sort_keys=False, width=10_000)
    ZH.mkdir(parents=True, exist_ok=True)
    tmp = sidecar(name).with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(sidecar(name))


def sync(name: str) -> tuple[int, int]:
    """Align the sidecar with the English; returns (new units, stale units).

    A unit whose English is unchanged keeps its translation. A changed unit keeps its old
    English, hash and translation, so `check` shows the difference. Notebook units match by
    cell id; page blocks by their place in a diff of the two sequences of texts.
    """
    src = sources()[name]
    current = english_units(src)
    old = load(name)
    out: list[Unit] = []
    if src.suffix == ".ipynb":
        by_id = {u.id: u for u in old}
        for uid, en in current:
            out.append(by_id.get(uid) or Unit(uid, digest(en), en, ""))
    else:
        matcher = difflib.SequenceMatcher(a=[u.sha for u in old],
                                          b=[digest(en) for _, en in current], autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            for k, j in enumerate(range(j1, j2)):
                en = current[j][1]
                if tag == "equal":
                    u = old[i1 + k]
                elif tag == "replace" and i1 + k < i2:
                    u = old[i1 + k]  # changed block: keep the old translation, stale
                else:
                    u = Unit("", digest(en), en, "")
                out.append(u)
        for j, u in enumerate(out):
            u.id = f"b{j}"
    new = sum(1 for u in out if not u.zh)
    stale = sum(1 for u, (_, en) in zip(out, current) if u.zh and u.sha != digest(en))
    save(name, out)
    return new, stale


# --- the glossary's terms -------------------------------------------------------------------

def _names(text: str, open_: str, close: str) -> list[str]:
    """'A (B)' -> ['A (B)', 'A', 'B']; 'A / B' parts too."""
    text = text.strip()
    out = [text]
    m = re.fullmatch(rf"(.*?)\s*{re.escape(open_)}(.*){re.escape(close)}\s*(.*)", text)
    if m:
        out += [m.group(1).strip(), m.group(2).strip()]
    for part in list(out):
        if " / " in part:
            out += [p.strip() for p in part.split(" / ")]
    return [o for o in dict.fromkeys(out) if o]


ALSO = ".. also:"  # a glossary entry's alternative names (a comment line for Sphinx)


def also_names(entry: str) -> tuple[list[str], list[str]]:
    """(English, Chinese) alternative names of one glossary entry: its `.. also:` lines,
    names separated by `;`. A name with a Chinese character is a Chinese name (an accepted
    short form or phrasing, e.g. 每个词元的计算量 for 每词元计算量), any other an English one
    (a synonym the English text uses, e.g. stop string for stop sequence)."""
    en, zh = [], []
    for line in entry.splitlines():
        if line.startswith(ALSO):
            for name in (n.strip() for n in line[len(ALSO):].split(";")):
                if name:
                    (zh if re.search(r"[\u4e00-\u9fff]", name) else en).append(name)
    return en, zh


def glossary_terms() -> list[tuple[list[str], list[str]]]:
    """(English names, Chinese names) of every glossary entry, from book/glossary.md; the
    first of each list is the entry's own name, then its parts and `.. also:` names."""
    text = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    body = text.split("```{glossary}", 1)[1].split("\n```", 1)[0]
    terms = []
    for entry in body.strip().split("\n\n"):
        lines = [ln for ln in entry.splitlines() if ln.strip() and not ln.startswith(".. ")]
        if len(lines) < 2 or lines[0].startswith(" "):
            continue
        en, zh = lines[0], lines[1]
        if zh.startswith(" "):
            raise ValueError(f"glossary term {en!r} has no Chinese name: add it on the line "
                             f"after the term, before the indented definition")
        zh_names = _names(zh.replace("（", "(").replace("）", ")"), "(", ")")
        en_names = _names(en, "(", ")")
        # "top-k 采样", "UTF-8 编码": the English name inside the Chinese one counts too
        zh_names += [n for n in en_names if n.lower() in zh.lower() and n not in zh_names]
        en_also, zh_also = also_names(entry)
        en_names += [n for n in en_also if n not in en_names]
        zh_names += [n for n in zh_also if n not in zh_names]
        terms.append((en_names, zh_names))
    return terms


_CODE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$|\]\([^)]*\)|<[^>\n]*>"
                   r"|\{[a-z-]+\}", re.S)


def prose(text: str) -> str:
    """Text without code, math, link targets and HTML tags: where a term is prose."""
    return _CODE.sub(" ", text)


def _term_in_english(name: str, text: str) -> bool:
    word = re.escape(name)
    return re.search(rf"(?<![\w-]){word}(?:s|es)?(?![\w-])", text, re.I) is not None


def missing_terms(u: Unit, terms=None) -> list[str]:
    """The glossary terms whose English is in `u.en` and whose Chinese is not in `u.zh`."""
    en, zh = prose(u.en), u.zh
    out = []
    for en_names, zh_names in terms if terms is not None else glossary_terms():
        if en_names[0] in u.skip_terms:
            continue
        if any(_term_in_english(n, en) for n in en_names) and not any(
                n.lower() in zh.lower() for n in zh_names):
            out.append(f"{en_names[0]!r} -> {' or '.join(repr(n) for n in zh_names)}")
    return out


# --- headings: the Chinese edition keeps the English anchors ------------------------------

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)


def headings(text: str) -> list[tuple[int, str]]:
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    return [(len(m.group(1)), m.group(2)) for m in _HEADING.finditer(text)]


def heading_text(markdown: str) -> str:
    """A heading's text as MyST passes it to the slug function (markup and link targets
    dropped, inline code kept)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", markdown)
    text = re.sub(r"\$[^$]*\$", "", text)
    return re.sub(r"[`*_]{1,2}(?=\S)|(?<=\S)[`*_]{1,2}", "", text).strip()


def heading_map() -> dict[str, str]:
    """Chinese heading text -> the English heading text it translates.

    The Chinese build gives every section the id (and MyST anchor) of its English heading
    (book/_ext/zh_slugs.py), so a link such as
    `05_prefill_decode.ipynb#the-roofline-of-this-machine` works in both editions and the
    language switch keeps the reader's place.
    """
    out: dict[str, str] = {}
    for name in sources():
        for u in load(name):
            for (_, en), (_, zh) in zip(headings(u.en), headings(u.zh)):
                key, english = heading_text(zh), heading_text(en)
                if out.get(key, english) != english:
                    raise ValueError(f"book/zh/{name}.yml: the Chinese heading {zh!r} "
                                     f"translates two English headings ({out[key]!r}, "
                                     f"{english!r}); make the translations differ")
                out[key] = english
    return out


# --- the Chinese edition's source tree ------------------------------------------------------

SETUP_LANGUAGE = ('\nimport os\n\n'
                  'os.environ["LLMCORE_LANG"] = "zh"  # 练习检查器用中文输出结果')


def translated(name: str) -> dict[str, str]:
    """Unit id -> Chinese text, for the units whose translation is current. A unit without a
    current translation is shown in English (the drift gate fails on it; a build does not)."""
    current = dict(english_units(sources()[name]))
    return {u.id: u.zh for u in load(name)
            if u.zh.strip() and u.id in current and u.sha == digest(current[u.id])}


def _zh_notebook(path: Path) -> dict:
    from llmcore.exercises import translate_verdicts

    nb = json.loads(path.read_text(encoding="utf-8"))
    zh = translated(path.stem)
    first_code = True
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":  # diagrams by path: book/zh/diagrams/ copies
            cell["source"] = zh.get(cell["id"]) or to_paths("".join(cell["source"]))
        elif cell["cell_type"] == "code":
            if first_code:  # the setup cell: the checkers of this notebook speak Chinese
                cell["source"] = "".join(cell["source"]) + SETUP_LANGUAGE
                first_code = False
            for out in cell.get("outputs", []):
                if out.get("output_type") == "stream":
                    out["text"] = translate_verdicts("".join(out["text"]), "zh")
    nb["metadata"]["language"] = "zh"
    return nb


def write_zh_source(dst: Path) -> Path:
    """Write the Chinese edition's Jupyter Book source tree into `dst` (replacing it):
    the English tree with every markdown unit translated, Chinese captions and title, and
    `language: zh_CN`. Code cells and outputs are the English notebooks' own."""
    import shutil

    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    site = yaml.safe_load((ZH / "site.yml").read_text(encoding="utf-8"))
    cfg = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    cfg["title"] = site["title"]
    conf = cfg["sphinx"]["config"]
    conf["language"] = "zh_CN"
    conf["myst_heading_slug_func"] = "zh_slugs.slugify"
    conf["extensions"] = [*conf["extensions"], "zh_slugs"]  # book/_ext, on the path
    conf["nb_code_prompt_show"] = "显示代码"  # the book hides inputs only (hide-input)
    conf["nb_code_prompt_hide"] = "隐藏代码"
    conf["togglebutton_hint"] = "点击显示"  # the collapsed solutions
    conf["togglebutton_hint_hide"] = "点击隐藏"
    (dst / "_config.yml").write_text(
        "# Written by scripts/i18n.py from the English _config.yml; do not edit.\n"
        + yaml.safe_dump(cfg, allow_unicode=True, sort_keys=False), encoding="utf-8")
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    for part in toc["parts"]:
        part["caption"] = site["captions"][part["caption"]]
    (dst / "_toc.yml").write_text(yaml.safe_dump(toc, allow_unicode=True, sort_keys=False),
                                  encoding="utf-8")
    shutil.copytree(ROOT / "book", dst / "book", ignore=shutil.ignore_patterns("zh"))
    for svg in sorted((ZH / "diagrams").glob("*.svg")):  # scripts/diagrams.py --lang zh
        shutil.copyfile(svg, dst / "book" / "_static" / "diagrams" / svg.name)
    (dst / "book" / "_ext" / "zh_headings.json").write_text(
        json.dumps(heading_map(), ensure_ascii=False, indent=0), encoding="utf-8")
    for name, src in sources().items():
        if src.suffix == ".ipynb":
            out = dst / "chapters" / src.name
            out.parent.mkdir(exist_ok=True)
            out.write_text(json.dumps(_zh_notebook(src), ensure_ascii=False, indent=1) + "\n",
                           encoding="utf-8")
        else:
            zh = translated(name)
            blocks = [zh.get(uid, en) for uid, en in english_units(src)]
            (dst / "book" / src.name).write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return dst


# --- markup that renders in English and not in Chinese -------------------------------------

def _leftover_markers(text: str) -> int:
    """How many `*` / `_` emphasis markers CommonMark leaves as literal text. In Chinese a
    closing `**` after punctuation and before a character does not close (CommonMark's
    flanking rule): `**对数几率（logits）**向量` shows its asterisks."""
    from markdown_it import MarkdownIt

    count = 0
    for token in MarkdownIt("commonmark").parse(text):
        for child in token.children or []:
            if child.type == "text":
                count += len(re.findall(r"\*+|(?<![\w])_+|_+(?![\w])", child.content))
    return count


# --- the drift gate -------------------------------------------------------------------------

def _indent(text: str) -> str:
    return "\n".join("    " + ln for ln in text.splitlines()) or "    (empty)"


def check(names: list[str] | None = None) -> list[str]:
    """Every problem of the translations, one message each (empty: all translated, current);
    with no names, the diagrams' labels too (book/zh/diagrams.yml, scripts/diagrams.py)."""
    problems = [msg for _, _, msg in problems_of(names)]
    if not names:
        import diagrams  # scripts/ is on the path: this file's folder

        problems += [f"diagram labels: {p}" for p in diagrams.translation_problems()]
    return problems


def problems_of(names: list[str] | None = None) -> list[tuple[str, str, str]]:
    """(NAME, unit id or "", message) of every problem."""
    problems: list[tuple[str, str, str]] = []
    terms = glossary_terms()
    for name in names or sources():
        src = sources()[name]
        rel = src.relative_to(ROOT).as_posix()
        units = load(name)
        if not sidecar(name).exists():
            problems.append((name, "", f"{rel}: no translation file book/zh/{name}.yml; run "
                            f"`python scripts/i18n.py sync` and translate it"))
            continue
        recorded = {u.id: u for u in units}
        current = english_units(src)
        for k, (uid, en) in enumerate(current):
            where = f"{rel}, markdown cell {uid}" if src.suffix == ".ipynb" else \
                f"{rel}, block {k + 1} (book/zh/{name}.yml id {uid})"
            u = recorded.get(uid)
            if u is None or not u.zh.strip():
                problems.append((name, uid, f"{where}: no translation. English:\n{_indent(en)}\n"
                                f"  fix: python scripts/i18n.py put {name} {uid} < zh.md"))
                continue
            if u.sha != digest(en):
                diff = "\n".join(difflib.unified_diff(
                    u.en.splitlines(), en.splitlines(), "translated from", "English now",
                    lineterm=""))
                problems.append((name, uid, f"{where}: the English changed after it was translated.\n"
                                f"  diff:\n{_indent(diff)}\n  translation:\n{_indent(u.zh)}\n"
                                f"  fix: python scripts/i18n.py put {name} {uid} < zh.md"))
                continue
            if [lv for lv, _ in headings(en)] != [lv for lv, _ in headings(u.zh)]:
                problems.append((name, uid, f"{where}: the translation's headings "
                                f"{headings(u.zh)} do not match the English's {headings(en)}"))
            if _leftover_markers(u.zh) > _leftover_markers(en):
                problems.append((name, uid, f"{where}: emphasis that does not render: a "
                                 f"`**` or `*` shows as text in the translation. CommonMark "
                                 f"closes `**` before a Chinese character only when no "
                                 f"punctuation precedes it: write `**对数几率**（logits）` or "
                                 f"`**对数几率（logits）** 向量`, not `**对数几率（logits）**向量`"))
            missing = missing_terms(u, terms)
            if missing:
                problems.append((name, uid, f"{where}: glossary terms in the English without their "
                                f"Chinese name in the translation: {', '.join(missing)} "
                                f"(or list the term under skip_terms if the English uses the "
                                f"word in another sense)"))
        extra = set(recorded) - {uid for uid, _ in current}
        if extra:
            problems.append((name, "", f"book/zh/{name}.yml: units {sorted(extra)} translate no English "
                            f"unit any more; run `python scripts/i18n.py sync`"))
    return problems


def stats() -> dict[str, int]:
    units = words = chars = done = 0
    for name in sources():
        for u in load(name):
            units += 1
            words += len(u.en.split())
            if u.zh.strip():
                done += 1
                chars += len(u.zh)
    return {"units": units, "translated": done, "english_words": words, "chinese_chars": chars}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("sync")
    p = sub.add_parser("todo")
    p.add_argument("name", nargs="?")
    p = sub.add_parser("put")
    p.add_argument("name")
    p.add_argument("id")
    p.add_argument("--skip-terms", default="",
                   help="comma-separated glossary terms the English uses in another sense")
    p = sub.add_parser("check")
    p.add_argument("names", nargs="*")
    sub.add_parser("terms")
    sub.add_parser("stats")
    args = ap.parse_args(argv)
    if args.cmd == "sync":
        for name in sources():
            new, stale = sync(name)
            if new or stale:
                print(f"book/zh/{name}.yml: {new} untranslated, {stale} stale")
        return 0
    if args.cmd == "todo":
        for name in [args.name] if args.name else sources():
            sync(name)  # cells added since the last sync are listed too
            current = dict(english_units(sources()[name]))
            for u in load(name):
                en = current.get(u.id, u.en)
                if not u.zh.strip() or u.sha != digest(en):
                    print(f"=== {name} {u.id} ({'stale' if u.zh.strip() else 'new'})")
                    print(en)
                    if u.zh.strip():
                        print(f"--- old translation of {name} {u.id}\n{u.zh}")
        return 0
    if args.cmd == "put":
        sync(args.name)  # a cell added since the last sync gets its unit
        units = load(args.name)
        current = dict(english_units(sources()[args.name]))
        if args.id not in current:
            print(f"{args.name} has no unit {args.id!r}; `todo {args.name}` lists them",
                  file=sys.stderr)
            return 2
        zh = sys.stdin.read().strip("\n")
        if not zh.strip():
            print("empty translation on stdin", file=sys.stderr)
            return 2
        for u in units:
            if u.id == args.id:
                u.en, u.sha, u.zh = current[u.id], digest(current[u.id]), zh
                if args.skip_terms:
                    u.skip_terms = [t.strip() for t in args.skip_terms.split(",")]
        save(args.name, units)
        mine = [msg for _, uid, msg in problems_of([args.name]) if uid == args.id]
        for p in mine:
            print(p, file=sys.stderr)
        return 1 if mine else 0
    if args.cmd == "check":
        problems = check(args.names or None)
        for p in problems:
            print(p, end="\n\n")
        print(f"{len(problems)} problem(s)", file=sys.stderr)
        return 1 if problems else 0
    if args.cmd == "terms":
        for en, zh in glossary_terms():
            print(f"{en[0]}\t{zh[0]}")
        return 0
    if args.cmd == "stats":
        print(stats())
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
