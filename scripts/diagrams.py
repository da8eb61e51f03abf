"""Draw the book's concept diagrams (the mechanisms, not measurements) as SVG files.

    python scripts/diagrams.py                  # writes book/_static/diagrams/*.svg
    python scripts/diagrams.py --out DIR        # writes DIR/*.svg (tests/test_diagrams.py)
    python scripts/diagrams.py --png DIR        # also PNG copies at 776 px, to look at
    python scripts/diagrams.py --lang zh        # the Chinese edition's: book/zh/diagrams/
    python scripts/diagrams.py --zh-sync        # align book/zh/diagrams.yml with the labels

Every diagram is drawn with matplotlib on a canvas measured in inches and saved as SVG with
its text as paths (DejaVu Sans, shipped with matplotlib), a fixed hash salt and no date, so
the same code writes byte-identical files. Each file names itself in its metadata
(`<dc:identifier>llmcore-diagram:NAME</dc:identifier>`): scripts/embed_diagrams.py embeds
the diagrams in the notebooks as data URIs and recognises an embedded copy by that. They are
designed for the site's text column, 776 px wide in a 1280 px window: `check_text` refuses
any text smaller than 11 px there. The pages show them with a MyST `{figure}` directive;
tests/test_diagrams.py checks that the committed files are what this script writes and that
every one of them is shown somewhere.

The Chinese edition draws the same figures and then replaces every label by its translation
from book/zh/diagrams.yml: one unit per distinct label of each diagram, keyed by the
diagram's name and the English text, with that text's hash (`sha`, as in book/zh/*.yml); the
chapters' pipeline strips (pipeline_00 ... pipeline_B) share the units of `pipeline_strip`.
Labels drawn in the monospace family (code, token strings) and labels without two ASCII
letters in a row (numbers, `q0`, `K1`, `p+3`, `A (5)`) are not translated. Chinese is drawn
with Noto Sans CJK SC from the pinned `mplfonts` package, also as paths, so the files look
the same everywhere and need the font only here. A label without a current translation stops
the Chinese drawing; `translation_problems()` lists them all (the i18n drift gate runs it).
After an English label changes: `python scripts/diagrams.py --zh-sync` adds a unit with an
empty `zh` for each new label (showing the translation it replaces as `was_en`/`was_zh`) and
drops units no label uses; fill in `zh`, run `--zh-sync` again (it removes the `was_` notes
of translated units), then `python scripts/diagrams.py --lang zh` and look at the PNGs.
"""
from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.resources
import io
import re
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager, ft2font, transforms  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "book" / "_static" / "diagrams"
COLUMN_PX = 776  # a figure's width in the site's text column in a 1280 px window (measured)
MIN_TEXT_PX = 11  # smallest text at that width

# One meaning, one colour, in every diagram.
INK = "#222222"
MUTED = "#6B6B6B"
PROMPT = "#4C72B0"  # prompt tokens
NEW = "#55A868"  # generated tokens
KV = "#DD8452"  # keys and values, the KV cache
WEIGHTS = "#5F6B7A"  # model weights
STREAM = "#2A9D8F"  # the residual stream, activations
DRAFT = "#8172B3"  # the draft model's guesses
REJECT = "#C44E52"  # a rejected guess
BONUS = "#C49A00"  # the target's own token
FIX = "#A23B72"  # where a serving technique acts
MACHINE = "#937860"  # the machine under it all (cores, memory)
MONO = "DejaVu Sans Mono"


def light(color: str, amount: float = 0.75) -> tuple[float, float, float]:
    """`color` mixed with white: 0 keeps it, 1 is white."""
    return tuple(c + (1 - c) * amount for c in to_rgb(color))


def setup() -> None:
    matplotlib.rcdefaults()
    plt.rcParams.update({
        "svg.hashsalt": "llmcore-diagrams",  # fixed ids for clip paths and the like
        "svg.fonttype": "path",  # text as outlines: looks the same in every browser
        "font.family": "DejaVu Sans",
        "font.size": 11,
        "mathtext.fontset": "dejavusans",
    })


def canvas(width: float, height: float):
    """A figure whose data coordinates are inches, origin at the lower left, no axes."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def box(ax, x, y, w, h, text="", fc="white", ec=INK, lw=1.2, fs=11, color=INK,
        weight="normal", ls="-", r=0.06, family=None, z=2, hatch=None):
    """A rounded box with (x, y) its lower-left corner and `text` centred in it."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle=f"round,pad=0,rounding_size={r}",
                                fc=fc, ec=ec, lw=lw, ls=ls, zorder=z, hatch=hatch))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs,
                color=color, weight=weight, family=family or "DejaVu Sans", zorder=z + 1,
                linespacing=1.25)


def cell(ax, x, y, w, h, text="", fc="white", ec=INK, lw=1.0, fs=11, color=INK,
         family=None, ls="-", z=2, weight="normal"):
    """A square-cornered cell (tokens, cache slots, blocks)."""
    ax.add_patch(Rectangle((x, y), w, h, fc=fc, ec=ec, lw=lw, ls=ls, zorder=z))
    if text:
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fs,
                color=color, family=family or "DejaVu Sans", zorder=z + 1, weight=weight)


def arrow(ax, start, end, color=INK, lw=1.4, rad=0.0, ls="-", head=12, z=1,
          style="-|>"):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=head,
                                 color=color, lw=lw, ls=ls, zorder=z, shrinkA=0, shrinkB=0,
                                 connectionstyle=f"arc3,rad={rad}"))


def text(ax, x, y, s, fs=11, color=INK, ha="center", va="center", **kw):
    kw.setdefault("linespacing", 1.25)
    return ax.text(x, y, s, fontsize=fs, color=color, ha=ha, va=va, **kw)


def check_text(fig, name: str) -> None:
    """Refuse text smaller than MIN_TEXT_PX when the figure is shown COLUMN_PX wide."""
    px_per_pt = COLUMN_PX / (fig.get_figwidth() * 72)
    for t in fig.findobj(Text):
        if t.get_visible() and t.get_text().strip():
            px = t.get_fontsize() * px_per_pt
            if px < MIN_TEXT_PX - 1e-9:
                raise ValueError(f"{name}: {t.get_text()!r} is {px:.1f} px at {COLUMN_PX} px "
                                 f"(at least {MIN_TEXT_PX})")


# --------------------------------------------------------------------------------------
# The Chinese edition: every label replaced by its translation from book/zh/diagrams.yml
# --------------------------------------------------------------------------------------
ZH_UNITS = ROOT / "book" / "zh" / "diagrams.yml"
OUT_ZH = ROOT / "book" / "zh" / "diagrams"  # the Chinese edition's copies, same file names
CJK_FAMILY = "Noto Sans CJK SC"
CJK_FILE = "NotoSansCJKsc-Regular.otf"  # in the package mplfonts (requirements.txt)
CJK = re.compile(r"[\u3000-\u30ff\u3400-\u9fff\uff00-\uffef]")
WORD = re.compile(r"[A-Za-z]{2}")
BOLD_SHIFT = 0.4  # pt: the font has no bold face; bold Chinese is drawn twice, shifted


@dataclass
class Unit:
    diagram: str
    sha: str
    en: str
    zh: str
    was_en: str = ""  # --zh-sync: the English and Chinese of the unit this one replaces
    was_zh: str = ""


def digest(text: str) -> str:
    """The same hash as scripts/i18n.py's."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def translatable(t: Text) -> bool:
    """Prose to translate: not code (monospace), and with a word of ASCII letters in it."""
    return t.get_family()[0] != MONO and bool(WORD.search(t.get_text()))


def labels(name: str) -> list[str]:
    """The distinct translatable labels of diagram `name`, in drawing order."""
    with matplotlib.rc_context():
        setup()
        fig = DIAGRAMS[name]()
        out = [t.get_text() for t in fig.findobj(Text) if translatable(t)]
        plt.close(fig)
    return list(dict.fromkeys(out))


def unit_group(name: str) -> str:
    """The name under which diagram `name`'s labels are translated: its own, except the
    chapters' pipeline strips (pipeline_00 ... pipeline_B), which share one set of units."""
    return "pipeline_strip" if name.startswith("pipeline_") else name


def groups() -> dict[str, list[str]]:
    """Unit group -> the diagrams it translates, in DIAGRAMS order."""
    out: dict[str, list[str]] = {}
    for name in DIAGRAMS:
        out.setdefault(unit_group(name), []).append(name)
    return out


def group_labels(group: str) -> list[str]:
    """The distinct translatable labels of every diagram of `group`, in drawing order."""
    return list(dict.fromkeys(en for name in groups()[group] for en in labels(name)))


def load_units(path: Path = ZH_UNITS) -> list[Unit]:
    import yaml

    if not path.exists():
        return []
    data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    return [Unit(u["diagram"], u["sha"], u["en"], u.get("zh") or "", u.get("was_en") or "",
                 u.get("was_zh") or "") for u in data.get("units", [])]


_HEADER = """\
# The Chinese labels of the concept diagrams (scripts/diagrams.py --lang zh draws them into
# book/zh/diagrams/): one unit per distinct English label of each diagram. `en` is the
# English the translation `zh` was made from and `sha` its hash; `make test` fails when a
# diagram draws a label no unit translates. After an English edit:
#   python scripts/diagrams.py --zh-sync    # new labels get an empty zh (was_*: the old unit)
# fill in zh, run --zh-sync again, then python scripts/diagrams.py --lang zh --png /tmp/zh
# and look at the PNGs (a "\\n" in zh breaks the line).
"""


def save_units(units: list[Unit], path: Path = ZH_UNITS) -> None:
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(str, lambda d, s: d.represent_scalar(
        "tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))
    rows = []
    for u in units:
        row = {"diagram": u.diagram, "sha": u.sha, "en": u.en, "zh": u.zh}
        if u.was_en:
            row.update(was_en=u.was_en, was_zh=u.was_zh)
        rows.append(row)
    text = _HEADER + yaml.dump({"source": "scripts/diagrams.py", "units": rows},
                               Dumper=Dumper, allow_unicode=True, sort_keys=False,
                               width=10_000)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _pairs(current: list[str], units: list[Unit]):
    """Match a diagram's labels to its units: (label or None, unit or None) in label order.

    Units match by their English; a label without one is paired, where the two sequences
    line up, with a unit no label uses (its English changed)."""
    by_en = {u.en: u for u in units}
    unused = [u for u in units if u.en not in set(current)]
    missing = [en for en in current if en not in by_en]
    paired = {}
    matcher = difflib.SequenceMatcher(a=[u.en for u in units], b=current, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "replace":
            old = [u for u in units[i1:i2] if u in unused]
            new = [en for en in current[j1:j2] if en in missing]
            paired.update(zip(new, old))
    out = [(en, by_en.get(en) or paired.get(en)) for en in current]
    taken = {id(u) for u in paired.values()}
    out += [(None, u) for u in unused if id(u) not in taken]
    return out


def translation_problems(units: list[Unit] | None = None) -> list[str]:
    """Every label of every diagram without a current translation, and every unused unit.

    Empty when `python scripts/diagrams.py --lang zh` can draw every diagram."""
    units = load_units() if units is None else units
    problems, seen = [], set()
    for u in units:
        if u.diagram not in groups():
            problems.append(f"{u.diagram}: no such diagram (unit {u.en!r}); "
                            f"the diagrams are {', '.join(groups())}")
        elif (u.diagram, u.en) in seen:
            problems.append(f"{u.diagram}: two units translate {u.en!r}: keep one")
        seen.add((u.diagram, u.en))
    fix = "run `python scripts/diagrams.py --zh-sync`, then fill in zh in book/zh/diagrams.yml"
    for name in groups():
        for en, u in _pairs(group_labels(name), [u for u in units if u.diagram == name]):
            if en is None:
                problems.append(f"{name}: the unit for {u.en!r} (zh {u.zh!r}) translates a "
                                f"label the diagram no longer draws: {fix}")
            elif u is None:
                problems.append(f"{name}: the label {en!r} has no Chinese: {fix}")
            elif u.en != en:
                problems.append(f"{name}: the label {u.en!r}, translated {u.zh!r}, is now "
                                f"{en!r}: {fix}")
            elif u.sha != digest(en):
                problems.append(f"{name}: the unit for {en!r} records sha {u.sha}, not this "
                                f"English's {digest(en)}: check zh against en, then {fix}")
            elif not u.zh.strip():
                was = f" (it replaces {u.was_en!r}, translated {u.was_zh!r})" if u.was_en else ""
                problems.append(f"{name}: the label {en!r} has an empty zh{was}: fill it in "
                                f"book/zh/diagrams.yml")
    return problems


def sync_units(path: Path = ZH_UNITS) -> list[Unit]:
    """Rewrite `path` in drawing order: a unit per label (empty zh for a new one), no others."""
    units, out = load_units(path), []
    for name in groups():
        for en, u in _pairs(group_labels(name), [u for u in units if u.diagram == name]):
            if en is None:
                continue
            if u is not None and u.en == en and u.sha == digest(en) and u.zh.strip():
                out.append(Unit(name, u.sha, en, u.zh))
            elif u is not None and u.en == en:
                out.append(u)  # untranslated, or a sha to check: unchanged, still reported
            elif u is not None:
                out.append(Unit(name, digest(en), en, "", u.en, u.zh))
            else:
                out.append(Unit(name, digest(en), en, ""))
    save_units(out, path)
    return out


def cjk_font() -> Path:
    """The pinned Noto Sans CJK SC, from the installed package mplfonts."""
    try:
        path = importlib.resources.files("mplfonts") / "fonts" / CJK_FILE
    except ModuleNotFoundError:
        raise SystemExit("the Chinese diagrams need the font package: "
                         "pip install mplfonts==0.0.11 (requirements.txt has it)") from None
    if not path.is_file():
        raise SystemExit(f"{path} is missing: pip install mplfonts==0.0.11 "
                         f"(requirements.txt has it)")
    return Path(str(path))


def translate(fig, name: str, units: list[Unit], font: Path) -> None:
    """Replace every translatable label of `fig` by its Chinese, in the CJK font."""
    zh = {u.en: u.zh for u in units
          if u.diagram == unit_group(name) and u.sha == digest(u.en) and u.zh.strip()}
    charmap = set(ft2font.FT2Font(str(font)).get_charmap())
    for t in fig.findobj(Text):
        if not translatable(t):
            continue
        en = t.get_text()
        if en not in zh:
            raise SystemExit(f"{name}: no current Chinese for the label {en!r}: run "
                             f"`python scripts/diagrams.py --zh-sync` and fill in zh in "
                             f"{ZH_UNITS.relative_to(ROOT)}")
        t.set_text(zh[en])
        if CJK.search(zh[en]):
            lacking = sorted({c for c in zh[en] if c.strip() and ord(c) not in charmap})
            if lacking:
                raise SystemExit(f"{name}: {CJK_FAMILY} has no glyph for {lacking} in "
                                 f"{zh[en]!r}")
            bold = t.get_weight() in ("bold", 700)
            # by file, not by the family name CJK_FAMILY: matplotlib would pick a system's
            # own Noto Sans CJK SC (Debian's fonts-noto-cjk, with a Bold) where one exists
            t.set_fontproperties(font_manager.FontProperties(
                fname=font, size=t.get_fontsize(), style=t.get_style()))
            if bold:  # a second copy, shifted right: drawn with the same glyphs (a stroke
                # path effect would write every bold label out as paths, twice)
                twin = t.axes.text(*t.get_position(), t.get_text(),
                                   fontproperties=t.get_fontproperties(), color=t.get_color(),
                                   ha=t.get_ha(), va=t.get_va(), zorder=t.get_zorder(),
                                   linespacing=t.get_linespacing(), rotation=t.get_rotation())
                twin.set_transform(transforms.offset_copy(
                    t.get_transform(), fig=fig, x=BOLD_SHIFT, units="points"))


# --------------------------------------------------------------------------------------
# 1. The request pipeline (book/intro.md)
# --------------------------------------------------------------------------------------
def pipeline():
    fig, ax = canvas(10, 5.2)
    w, h, gap, x0, y = 1.38, 1.05, 0.2, 0.66, 2.55
    stages = [
        ("tokenizer", "text → token ids", "ch. 2"),
        ("embedding\n+ RoPE", "a vector per id,\nrotated by position", "ch. 3"),
        ("prefill", "the whole prompt\nin one pass", "ch. 5"),
        ("sampling", "logits → one\ntoken id", "ch. 7"),
        ("stop\nconditions", "EOS, stop string,\nmax_tokens, time", "ch. 8"),
        ("streamed\nreply", "text sent as soon\nas it is final", "ch. 8"),
    ]
    xs = [x0 + i * (w + gap) for i in range(len(stages))]
    for x, (name, what, ch) in zip(xs, stages):
        box(ax, x, y, w, h, fc=light(PROMPT, 0.88), ec=PROMPT)
        text(ax, x + w / 2, y + h - 0.27, name, fs=11.5, weight="bold", va="center")
        text(ax, x + w / 2, y + 0.3, what, fs=10.3, color=INK)
        text(ax, x + w - 0.06, y + h + 0.1, ch, fs=10.3, color=MUTED, ha="right")
    for a, b in zip(xs, xs[1:]):
        arrow(ax, (a + w, y + h / 2), (b, y + h / 2))
    text(ax, 0.06, y + h / 2 + 0.25, "prompt\ntext", fs=11, ha="left")
    arrow(ax, (0.06, y + h / 2 - 0.08), (x0, y + h / 2 - 0.08))
    # the decode loop under sampling
    bw, dy, dh = 1.45, 0.55, 1.0
    dx = xs[3] + w / 2 - bw / 2
    box(ax, dx, dy, bw, dh, fc=light(NEW, 0.85), ec=NEW)
    text(ax, dx + bw / 2, dy + dh - 0.27, "decode step", fs=11.5, weight="bold")
    text(ax, dx + bw / 2, dy + 0.32, "one new token,\none pass", fs=10.3)
    text(ax, dx + bw - 0.06, dy - 0.13, "ch. 5, 6", fs=10.3, color=MUTED, ha="right")
    arrow(ax, (xs[3] + w / 2, dy + dh), (xs[3] + w / 2, y), color=NEW, lw=1.6)
    text(ax, xs[3] + w / 2 + 0.08, (dy + dh + y) / 2, "logits", fs=10.3, ha="left",
         color=NEW)
    sx = xs[4] + w / 2
    arrow(ax, (sx, y), (dx + bw, dy + dh / 2), color=NEW, lw=1.6, rad=-0.3)
    text(ax, sx + 0.12, 1.95, "not stopped:\nfeed the token\nback in", fs=10.3,
         ha="left", color=NEW)
    # the KV cache under embedding and prefill
    kx = xs[1] + 0.35
    box(ax, kx, dy, bw, dh, fc=light(KV, 0.8), ec=KV)
    text(ax, kx + bw / 2, dy + dh - 0.27, "KV cache", fs=11.5, weight="bold")
    text(ax, kx + bw / 2, dy + 0.32, "K, V of every\nlayer and token", fs=10.3)
    text(ax, kx + bw - 0.06, dy - 0.13, "ch. 6", fs=10.3, color=MUTED, ha="right")
    arrow(ax, (xs[2] + w / 2, y), (kx + bw * 0.75, dy + dh), color=KV, lw=1.6)
    text(ax, xs[2] + w / 2 + 0.02, (dy + dh + y) / 2 + 0.05, "fills it", fs=10.3,
         ha="left", color=KV)
    arrow(ax, (kx + bw, dy + dh / 2 + 0.15), (dx, dy + dh / 2 + 0.15), color=KV, lw=1.6)
    arrow(ax, (dx, dy + dh / 2 - 0.15), (kx + bw, dy + dh / 2 - 0.15), color=KV, lw=1.6)
    text(ax, (kx + bw + dx) / 2, dy + dh / 2 + 0.33, "reads all", fs=10.3, color=KV)
    text(ax, (kx + bw + dx) / 2, dy + dh / 2 - 0.34, "writes one", fs=10.3, color=KV)

    # where the serving techniques act
    def fix(x, yy, s, line, ha="center"):
        text(ax, x, yy, s, fs=10.3, color=FIX, ha=ha, style="italic")
        ax.plot(*zip(*line), color=FIX, lw=1.1, ls=(0, (3, 2)), zorder=0)

    top = y + h
    fix(xs[2] + w / 2 - 0.35, top + 0.62, "prompt cache (ch. 6):\nskip a cached prefix",
        ((xs[2] + w / 2, top + 0.36), (xs[2] + w / 2, top + 0.2)))
    fix(xs[3] + w / 2 + 0.45, top + 0.62, "constrained decoding (ch. 7):\n"
        "mask tokens that break JSON",
        ((xs[3] + w / 2, top + 0.36), (xs[3] + w / 2, top + 0.2)))
    fix(0.06, dy + 0.5, "GQA (ch. 4):\nfewer K, V heads,\na smaller cache", ha="left",
        line=((1.55, dy + 0.5), (kx, dy + 0.5)))
    fix(8.15, 1.3, "continuous batching\n(ch. 9): many requests\nshare each step",
        ha="left", line=((dx + bw, dy + 0.2), (8.1, dy + 0.2)))
    fix(8.15, 0.45, "speculative decoding\n(ch. 11): check k\nguesses in one pass",
        ha="left", line=((8.1, dy + 0.2), (8.1, dy + 0.2)))
    # the two clocks
    ttft_y = 4.75
    ax.plot([xs[0], xs[0], xs[3] + w, xs[3] + w],
            [ttft_y - 0.12, ttft_y, ttft_y, ttft_y - 0.12], color=INK, lw=1.1)
    text(ax, (xs[0] + xs[3] + w) / 2, ttft_y + 0.2,
         "time to first token (TTFT): from the prompt to the first sampled token", fs=11)
    text(ax, dx + bw / 2 - 0.4, 0.14, "time per output token (TPOT): one turn of the green "
         "loop", fs=11)
    return fig


# --------------------------------------------------------------------------------------
# 2. A transformer block and the residual stream (chapter 4, "One block")
# --------------------------------------------------------------------------------------
def transformer_block():
    fig, ax = canvas(10, 4.0)
    sy = 1.25  # the residual stream
    ax.add_patch(FancyArrowPatch((1.25, sy), (8.2, sy), arrowstyle="-|>", mutation_scale=22,
                                 color=STREAM, lw=7, zorder=1, shrinkA=0, shrinkB=0))
    box(ax, 0.1, sy - 0.45, 1.15, 0.9, "embedding\nlookup", fc=light(STREAM, 0.85),
        ec=STREAM, fs=11)
    text(ax, 0.675, sy - 0.7, "ids → (seq, 256)", fs=10.3)
    # the block frame
    fx0, fx1, fy0, fy1 = 1.55, 7.85, 0.3, 3.55
    box(ax, fx0, fy0, fx1 - fx0, fy1 - fy0, fc="none", ec=MUTED, ls=(0, (4, 3)), lw=1.1,
        r=0.12, z=0)
    text(ax, fx0 + 0.05, fy1 + 0.18, "block ℓ, repeated 6 times in the tiny model", fs=11,
         ha="left", color=MUTED)

    def sublayer(x_branch, norm_x, f_x, f_w, f_text, add_x, fc, ec, under):
        ty = 2.35
        ax.plot([x_branch, x_branch], [sy, ty + 0.28], color=STREAM, lw=1.6, zorder=1)
        arrow(ax, (x_branch, ty + 0.28), (norm_x, ty + 0.28), color=STREAM, lw=1.6)
        box(ax, norm_x, ty, 0.85, 0.56, "RMSNorm", fc="white", ec=STREAM, fs=10.5)
        arrow(ax, (norm_x + 0.85, ty + 0.28), (f_x, ty + 0.28), lw=1.4)
        box(ax, f_x, ty - 0.22, f_w, 1.0, f_text, fc=fc, ec=ec, fs=10.5)
        ax.plot([f_x + f_w, add_x], [ty + 0.28, ty + 0.28], color=INK, lw=1.4, zorder=1)
        arrow(ax, (add_x, ty + 0.28), (add_x, sy + 0.17), lw=1.4)
        ax.add_patch(plt.Circle((add_x, sy), 0.17, fc="white", ec=INK, lw=1.4, zorder=3))
        text(ax, add_x, sy - 0.01, "+", fs=14, zorder=4)
        text(ax, (x_branch + add_x) / 2, sy - 0.55, under, fs=10.3, color=MUTED)

    sublayer(1.85, 2.05, 3.15, 1.6, "attention\n8 query heads,\n2 K/V heads", 5.0,
             light(PROMPT, 0.85), PROMPT, "tokens exchange information")
    sublayer(5.3, 5.5, 6.6, 1.1, "SwiGLU MLP\nhidden 688", 7.5, light(WEIGHTS, 0.8),
             WEIGHTS, "each token on its own")
    # keys and values leave the attention for the cache
    box(ax, 3.35, 3.2, 1.2, 0.32, "K, V → cache", fc=light(KV, 0.75), ec=KV, fs=10.3)
    ax.plot([3.95, 3.95], [3.13, 3.2], color=KV, lw=1.4)
    # after the last block
    box(ax, 8.2, sy - 0.45, 1.05, 0.9, "RMSNorm,\nlm_head", fc=light(WEIGHTS, 0.8),
        ec=WEIGHTS, fs=11)
    arrow(ax, (9.25, sy), (9.5, sy), lw=1.4)
    text(ax, 9.55, sy, "logits\n(seq,\n4096)", fs=10.3, ha="left")
    text(ax, 4.7, 0.12, "residual stream x, one vector of 256 per token:   "
         "x ← x + Attention(RMSNorm(x)),   x ← x + MLP(RMSNorm(x))", fs=10.5, color=STREAM)
    return fig


# --------------------------------------------------------------------------------------
# 3. Prefill and decode: what moves (chapter 5)
# --------------------------------------------------------------------------------------
def prefill_decode():
    fig, ax = canvas(10, 4.5)

    def panel(x0, title, n_tokens, token_color, kv_note, kv_read, act, intensity):
        text(ax, x0 + 2.35, 4.25, title, fs=12, weight="bold")
        # memory
        box(ax, x0, 0.75, 1.75, 3.1, fc="#F4F4F4", ec=MUTED, r=0.1, z=0)
        text(ax, x0 + 0.875, 3.62, "memory", fs=11, color=MUTED)
        box(ax, x0 + 0.15, 2.0, 1.45, 1.35, "weights\nall layers", fc=light(WEIGHTS, 0.7),
            ec=WEIGHTS, fs=11)
        box(ax, x0 + 0.15, 0.9, 1.45, 0.9, "KV cache", fc=light(KV, 0.7), ec=KV, fs=11)
        # processor
        px, pw = x0 + 2.75, 1.95
        box(ax, px, 0.75, pw, 3.1, fc="white", ec=INK, r=0.1, z=0)
        text(ax, px + pw / 2, 3.62, "processor", fs=11, color=MUTED)
        cw = min(0.2, (pw - 0.3) / n_tokens)
        tx = px + (pw - cw * n_tokens) / 2
        for i in range(n_tokens):
            cell(ax, tx + i * cw, 2.55, cw, 0.42, fc=light(token_color, 0.35),
                 ec=token_color, lw=0.8)
        text(ax, px + pw / 2, 2.3, act, fs=10.3)
        text(ax, px + pw / 2, 1.72, "each token meets\nevery weight:\n" + intensity[0],
             fs=10.3)
        text(ax, px + pw / 2, 1.02, intensity[1], fs=10.3, color=FIX)
        # traffic
        ax.add_patch(FancyArrowPatch((x0 + 1.6, 2.85), (px, 2.85), arrowstyle="-|>",
                                     mutation_scale=18, color=WEIGHTS, lw=4.5,
                                     shrinkA=0, shrinkB=0))
        text(ax, x0 + 2.17, 3.12, "read once", fs=10.3, color=WEIGHTS)
        arrow(ax, (px, 1.2), (x0 + 1.6, 1.2), color=KV, lw=1.6)
        text(ax, x0 + 2.17, 1.4, kv_note, fs=10.3, color=KV)
        if kv_read:
            arrow(ax, (x0 + 1.6, 1.6), (px, 1.6), color=KV, lw=3)
            text(ax, x0 + 2.17, 1.8, kv_read, fs=10.3, color=KV)

    panel(0.15, "prefill: S prompt tokens, one pass", 8, PROMPT, "write S", None,
          "activations (S, 512)", ("2 × weights × S FLOPs", "compute-bound\nwhen S is long"))
    panel(5.15, "decode step: 1 new token per sequence", 1, NEW, "write 1", "read p",
          "activations (B, 1, 512)", ("2 × weights × B FLOPs", "memory-bound"))
    ax.plot([5.0, 5.0], [0.6, 4.4], color="#CCCCCC", lw=1)
    text(ax, 5.0, 0.3, "Bytes per pass: all the weights, however many tokens the pass "
         "holds, plus the K, V written and read (p: positions\nalready cached). FLOPs per "
         "byte in float32 ≈ S/2 for prefill; for decode B/2 at most, less as the K, V reads "
         "grow.", fs=10.5)
    return fig


# --------------------------------------------------------------------------------------
# 4. KV cache growth per step (chapter 6)
# --------------------------------------------------------------------------------------
def kv_growth():
    fig, ax = canvas(10, 4.3)
    prompt, steps, max_len = 5, 3, 10
    tokens = ["def", "␣read", "(self", "):", r"\n", "␣␣␣␣", "return", "␣self"]  # ␣: a space
    cw, ch, x0, top = 0.6, 0.46, 2.15, 3.2
    text(ax, x0 + max_len * cw / 2, top + 0.95, "cache slots of one layer (every layer and "
         "K/V head looks the same); slot j holds position j", fs=10.5, color=MUTED)
    for j in range(max_len):
        text(ax, x0 + (j + 0.5) * cw, top + 0.62, str(j), fs=10.5, color=MUTED)
        if j < len(tokens):
            c = PROMPT if j < prompt else NEW
            text(ax, x0 + (j + 0.5) * cw, top + 0.3, tokens[j],
                 fs=10.3, color=c, family=MONO)
    text(ax, x0 - 0.1, top + 0.3, "token", fs=10.3, color=MUTED, ha="right")
    text(ax, x0 - 0.1, top + 0.62, "slot", fs=10.3, color=MUTED, ha="right")
    rows = [("prefill", f"positions 0–{prompt - 1}", 0)] + [
        (f"decode step {s}", f"position {prompt + s - 1}", s) for s in range(1, steps + 1)]
    for r, (name, where, s) in enumerate(rows):
        y = top - r * (ch + 0.2) - ch
        text(ax, 0.1, y + ch / 2 + 0.1, name, fs=11, ha="left", weight="bold")
        text(ax, 0.1, y + ch / 2 - 0.15, "runs " + where, fs=10.3, ha="left", color=MUTED)
        end = prompt + s  # slots in use after this step
        for j in range(max_len):
            if s == 0 and j < prompt or s > 0 and j == end - 1:
                cell(ax, x0 + j * cw, y, cw, ch, "w", fc=KV, ec=INK, color="white", fs=10.5)
            elif j < end:
                cell(ax, x0 + j * cw, y, cw, ch, "r", fc=light(KV, 0.7), ec=INK, fs=10.5)
            else:
                cell(ax, x0 + j * cw, y, cw, ch, fc="white", ec="#BBBBBB", ls=(0, (2, 2)))
        rx = x0 + max_len * cw + 0.2
        new = prompt if s == 0 else 1
        text(ax, rx, y + ch / 2, f"writes {new} slot{'s' if new > 1 else ''},\n"
             f"attention reads {end}", fs=10.5, ha="left")
    y_leg = 0.3
    for i, (fc, ec, label, t) in enumerate([
            (KV, INK, "written this pass", "w"), (light(KV, 0.7), INK, "read from the cache", "r"),
            ("white", "#BBBBBB", "allocated up front (max_len), not yet used", "")]):
        lx = 0.1 + i * 2.75
        cell(ax, lx, y_leg - 0.15, 0.3, 0.3, t, fc=fc, ec=ec, fs=10.3,
             color="white" if fc == KV else INK, ls="-" if t else (0, (2, 2)))
        text(ax, lx + 0.4, y_leg, label, fs=10.5, ha="left")
    return fig


# --------------------------------------------------------------------------------------
# 5. GQA: query heads sharing key/value heads (chapter 4)
# --------------------------------------------------------------------------------------
def gqa_heads():
    fig, ax = canvas(10, 3.9)
    colors = ["#1f77b4", "#ff7f0e"]  # tab10 C0, C1: chapter 4's head plot uses the same
    n_q, n_kv = 8, 2
    group = n_q // n_kv
    cw, x0 = 0.64, 1.85
    xs = [x0 + i * (cw + 0.1) for i in range(n_q)]
    yq, yr, ykv = 2.95, 1.75, 0.35
    text(ax, 0.1, yq + 0.22, "query heads", fs=11, ha="left", weight="bold")
    text(ax, 0.1, yq - 0.05, "8 × 32 dims", fs=10.3, ha="left", color=MUTED)
    text(ax, 0.1, yr + 0.22, "repeat_kv(·, 4)", fs=11, ha="left", weight="bold", family=MONO)
    text(ax, 0.1, yr - 0.05, "copies for the product,\nnot kept in the cache", fs=10.3, ha="left",
         color=MUTED, va="top")
    text(ax, 0.1, ykv + 0.38, "KV cache", fs=11, ha="left", weight="bold")
    text(ax, 0.1, ykv + 0.1, "2 K and 2 V heads", fs=10.3, ha="left", color=MUTED)
    for i, x in enumerate(xs):
        g = i // group
        cell(ax, x, yq, cw, 0.45, f"q{i}", fc=light(colors[g], 0.8), ec=colors[g], fs=11)
        cell(ax, x, yr, cw, 0.45, f"kv{g}", fc="white", ec=colors[g], fs=11,
             ls=(0, (3, 2)), lw=1.3)
        ax.plot([x + cw / 2, x + cw / 2], [yr + 0.45, yq], color=colors[g], lw=1.2)
    kv_w = 1.6
    for g in range(n_kv):
        first, last = xs[g * group], xs[(g + 1) * group - 1] + cw
        kx = (first + last) / 2 - kv_w / 2
        cell(ax, kx, ykv, kv_w / 2, 0.6, f"K{g}", fc=light(colors[g], 0.55), ec=colors[g],
             fs=11)
        cell(ax, kx + kv_w / 2, ykv, kv_w / 2, 0.6, f"V{g}", fc=light(colors[g], 0.55),
             ec=colors[g], fs=11)
        for i in range(g * group, (g + 1) * group):
            ax.plot([kx + kv_w / 2, xs[i] + cw / 2], [ykv + 0.6, yr], color=colors[g],
                    lw=1.2)
        text(ax, (first + last) / 2, yq + 0.7, f"group {g}: q{g * group}–q{(g + 1) * group - 1}"
             f" read K{g}, V{g}", fs=10.5, color=colors[g])
    rx = xs[-1] + cw + 0.25
    text(ax, rx, 1.95, "The tiny model. Each\nquery head computes\nits own attention.\n\n"
         "Per token and layer\nthe cache holds\n2 × 2 × 32 numbers;\nMHA would hold\n"
         "2 × 8 × 32: 4× more.\n\nSmolLM2-135M: 9 query\nheads, 3 K/V heads.", fs=10.5,
         ha="left")
    return fig


# --------------------------------------------------------------------------------------
# 6. Paged KV cache: block tables and a shared prefix (chapter 6)
# --------------------------------------------------------------------------------------
def paged_prefix():
    fig, ax = canvas(10, 5.05)
    bs = 4  # tokens per block
    shared_c, a_c, b_c = "#7F7F7F", "#4C72B0", "#55A868"
    # seq A above the pool, seq B below it: each table entry points at a physical block
    seqs = {"A": dict(n=13, table=[3, 7, 10, 1], color=a_c, y=4.2, ty=3.55),
            "B": dict(n=11, table=[3, 7, 5], color=b_c, y=0.75, ty=1.4)}
    tw, x0 = 0.3, 1.2  # token cell width, where logical blocks start
    bw = bs * tw + 0.25  # a logical block and its gap
    n_blocks, px0, pw, py, ph = 12, 0.95, 0.66, 2.3, 0.62

    def block_color(seq, i):
        return shared_c if i < 2 else seqs[seq]["color"]

    def pool_x(b):
        return px0 + b * (pw + 0.08)

    for name, s in seqs.items():
        y, ty = s["y"], s["ty"]
        text(ax, 0.1, y + 0.26, f"seq {name}", fs=11.5, ha="left", weight="bold",
             color=s["color"])
        text(ax, 0.1, y + 0.0, f"{s['n']} tokens", fs=10.3, ha="left", color=MUTED)
        text(ax, 0.1, ty + 0.2, f"table {name}", fs=11, ha="left", color=s["color"])
        for i, blk in enumerate(s["table"]):
            c = block_color(name, i)
            bx = x0 + i * bw
            for t in range(bs):
                filled = i * bs + t < s["n"]
                cell(ax, bx + t * tw, y, tw, 0.42, fc=light(c, 0.55) if filled else "white",
                     ec=c, lw=1.0, ls="-" if filled else (0, (2, 2)))
            label_y = y + 0.58 if name == "A" else y - 0.18
            text(ax, bx + bs * tw / 2, label_y, f"logical block {i}", fs=10.3, color=MUTED)
            cx = bx + bs * tw / 2
            cell(ax, cx - 0.25, ty, 0.5, 0.4, str(blk), fc="white", ec=s["color"], fs=11,
                 lw=1.3)
            ax.plot([cx, cx], [y if name == "A" else y + 0.42, ty + 0.4 if name == "A" else ty],
                    color=s["color"], lw=1.0, ls=(0, (2, 2)))
            start = (cx, ty) if name == "A" else (cx, ty + 0.4)
            end = (pool_x(blk) + pw / 2, py + ph if name == "A" else py)
            arrow(ax, start, end, color=s["color"], lw=1.1, head=9)
    # the highlighted lookup: position 9 of B
    s = seqs["B"]
    cell(ax, x0 + 2 * bw + 1 * tw, s["y"], tw, 0.42, "9", fc=b_c, ec=INK, lw=2, fs=10.3,
         color="white", weight="bold")
    # the pool
    text(ax, 0.1, py + ph / 2, "pool", fs=11.5, ha="left", weight="bold")
    owner = {}
    for name, s in seqs.items():
        for i, blk in enumerate(s["table"]):
            owner.setdefault(blk, []).append((name, i))
    for b in range(n_blocks):
        x, users = pool_x(b), owner.get(b, [])
        if b == 8:  # a cached block of a finished request: count 0, evictable
            cell(ax, x, py, pw, ph, fc=light(shared_c, 0.85), ec=shared_c, ls=(0, (3, 2)))
            ref, color = "ref 0", MUTED
        elif users:
            c = block_color(*users[0])
            cell(ax, x, py, pw, ph, fc=light(c, 0.55), ec=c, lw=1.3)
            ref, color = f"ref {len(users)}", INK
        else:
            cell(ax, x, py, pw, ph, fc="white", ec="#BBBBBB")
            ref, color = "free", MUTED
        text(ax, x + pw / 2, py + ph - 0.19, str(b), fs=11, color=color,
             weight="bold" if users else "normal")
        text(ax, x + pw / 2, py + 0.17, ref, fs=10.3, color=color)
    # notes on the right
    nx = x0 + 4 * bw + 0.05
    text(ax, nx, 4.85, "Both sequences start with\nthe same system prompt:\none copy, in "
         "blocks 3 and 7,\nwith reference count 2.\nA full block's key hashes\nthe previous "
         "key and its\n4 tokens.", fs=10.5, ha="left", va="top")
    text(ax, nx, 1.75, "Position 9 of seq B:\nlogical block 9 // 4 = 2,\noffset 9 % 4 = 1;"
         "\ntable B[2] = 5, so pool\nslot 5 × 4 + 1 = 21.", fs=10.5, ha="left", va="top")
    text(ax, pool_x(8) + pw / 2, py - 0.2, "cached, evictable", fs=10.3, color=MUTED)
    return fig


# --------------------------------------------------------------------------------------
# 7. Static and continuous batching as a timeline (chapter 9)
# --------------------------------------------------------------------------------------
STEPS = [5, 2, 8, 3, 4, 6, 2, 3]  # decode steps each request needs, in arrival order
BATCH = 4


def schedule(lengths: list[int], batch: int, static: bool) -> list[tuple[int, int, int, int]]:
    """(request, slot, first step, steps) for every request: all arrive at step 0."""
    runs, queue, t = [], list(range(len(lengths))), 0
    free_at = [0] * batch  # the step from which each slot is free
    while queue:
        if static:
            group, queue = queue[:batch], queue[batch:]
            start = max(free_at)
            for slot, r in enumerate(group):
                runs.append((r, slot, start, lengths[r]))
                free_at[slot] = start + max(lengths[q] for q in group)
            continue
        slot = min(range(batch), key=lambda s: (free_at[s], s))
        t = free_at[slot]
        r = queue.pop(0)
        runs.append((r, slot, t, lengths[r]))
        free_at[slot] = t + lengths[r]
    return runs


def batching():
    fig, ax = canvas(10, 4.9)
    palette = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860",
               "#DA8BC3", "#8C8C8C"]
    names = "ABCDEFGH"
    sw, sh, x0 = 0.5, 0.32, 1.0

    def panel(y_top, title, static):
        runs = schedule(STEPS, BATCH, static)
        total = max(s + n for _, _, s, n in runs)
        text(ax, 0.1, y_top + 0.28, title, fs=11.5, ha="left", weight="bold")
        text(ax, x0 + total * sw + 0.12, y_top - 1.5 * sh, f"{total} steps", fs=11,
             ha="left", weight="bold")
        start = {names[r]: s for r, _, s, _ in runs}
        text(ax, x0 + total * sw + 0.12, y_top - 2.7 * sh, f"E starts at step {start['E']}",
             fs=10.3, ha="left", color=MUTED)
        for slot in range(BATCH):
            y = y_top - (slot + 1) * sh
            text(ax, x0 - 0.12, y + sh / 2, f"slot {slot}", fs=10.3, ha="right", color=MUTED)
            cell(ax, x0, y, total * sw, sh, fc="#F1F1F1", ec="none", z=0)
            busy = [(s, n) for _, sl, s, n in runs if sl == slot]
            for t in range(total):  # idle steps are hatched
                if not any(s <= t < s + n for s, n in busy):
                    ax.add_patch(Rectangle((x0 + t * sw, y), sw, sh, fc="none", ec="#BBBBBB",
                                           hatch="///", lw=0, zorder=1))
        for r, slot, s, n in runs:
            y = y_top - (slot + 1) * sh
            cell(ax, x0 + s * sw + 0.02, y + 0.03, n * sw - 0.04, sh - 0.06,
                 f"{names[r]} ({n})" if n > 1 else names[r], fc=palette[r], ec="white",
                 color="white", fs=10.3, weight="bold")
        return total

    t_static = panel(4.35, "static batching: a batch runs until its longest request ends",
                     True)
    panel(2.25, "continuous batching: a freed slot is refilled at the next step", False)
    for t in range(0, t_static + 1, 2):
        text(ax, x0 + t * sw, 0.68, str(t), fs=10.3, color=MUTED)
    text(ax, x0 + t_static * sw / 2, 0.38, "decode step", fs=10.5, color=MUTED)
    ax.add_patch(Rectangle((0.1, 0.3), 0.3, 0.22, fc="none", ec="#BBBBBB", hatch="///",
                           lw=0.8))
    text(ax, 0.5, 0.41, "idle slot", fs=10.3, ha="left", color=MUTED)
    text(ax, 10 - 0.1, 0.41, "8 requests arrive at once; (n): steps each needs",
         fs=10.3, ha="right", color=MUTED)
    return fig


# --------------------------------------------------------------------------------------
# 8. One round of speculative decoding (chapter 11)
# --------------------------------------------------------------------------------------
def speculative_round():
    fig, ax = canvas(10, 5.0)
    cw, ch, x0 = 0.86, 0.42, 2.2
    col = [x0 + j * (cw + 0.1) for j in range(6)]  # positions p .. p + 5
    draft = ["'.x'", "' ='", "' y'", r"'\n'"]
    target = ["'.x'", "' ='", "' x'", r"'\n'", "'  '"]
    yd, yi, yo, yc, ya = 4.0, 2.45, 3.15, 1.6, 0.75
    for j in range(6):
        text(ax, col[j] + cw / 2, 4.72, "p" if j == 0 else f"p+{j}", fs=10.3, color=MUTED)
    # 1. draft
    text(ax, 0.1, yd + 0.3, "1. draft", fs=11.5, ha="left", weight="bold", color=DRAFT)
    text(ax, 0.1, yd + 0.02, "k = 4 cheap steps,\none token each", fs=10.3, ha="left",
         color=MUTED, va="top")
    cell(ax, col[0], yd, cw, ch, "'self'", fc=light(PROMPT, 0.8), ec=PROMPT, family=MONO,
         fs=10.5)
    for j, tok in enumerate(draft, start=1):
        cell(ax, col[j], yd, cw, ch, tok, fc=light(DRAFT, 0.75), ec=DRAFT, family=MONO, fs=10.5)
        arrow(ax, (col[j - 1] + cw, yd + ch / 2), (col[j], yd + ch / 2), color=DRAFT, lw=1.3,
              head=11)
    # 2. target: one pass, inputs p .. p+4, predictions for p+1 .. p+5
    text(ax, 0.1, yo + 0.12, "2. target", fs=11.5, ha="left", weight="bold")
    text(ax, 0.1, yo - 0.16, "one pass: 5 inputs,\n5 predictions", fs=10.3, ha="left",
         color=MUTED, va="top")
    box(ax, col[0] - 0.1, yi - 0.12, col[5] + cw - col[0] + 0.2, yo + ch - yi + 0.24,
        fc="none", ec=INK, lw=1.2, z=0)
    inputs = ["'self'"] + draft
    for j, tok in enumerate(inputs):
        c = PROMPT if j == 0 else DRAFT
        cell(ax, col[j], yi, cw, ch, tok, fc=light(c, 0.8), ec=c, family=MONO, fs=10.5)
        arrow(ax, (col[j] + cw * 0.75, yi + ch), (col[j + 1] + cw * 0.3, yo), lw=1.0,
              head=8, color=MUTED)
    for j, tok in enumerate(target, start=1):
        used = j <= 3
        cell(ax, col[j], yo, cw, ch, tok, fc="white" if used else "#F4F4F4",
             ec=INK if used else "#BBBBBB", family=MONO, fs=10.5,
             color=INK if used else "#9A9A9A")
    text(ax, col[5] + cw + 0.2, yo + ch / 2, "the target's token\nafter each input", fs=10.3,
         ha="left", color=MUTED)
    text(ax, col[5] + cw + 0.2, yi + ch / 2, "the last kept token\nand the 4 guesses",
         fs=10.3, ha="left", color=MUTED)
    # 3. compare
    text(ax, 0.1, yc + 0.3, "3. compare", fs=11.5, ha="left", weight="bold")
    text(ax, 0.1, yc + 0.02, "guess = prediction?", fs=10.3, ha="left", color=MUTED,
         va="top")
    marks = [("✓", NEW), ("✓", NEW), ("✗", REJECT), ("not\nchecked", MUTED)]
    for j, (m, c) in enumerate(marks, start=1):
        text(ax, col[j] + cw / 2, yc + 0.2, m, fs=16 if len(m) == 1 else 10.3, color=c)
    # 4. accepted
    text(ax, 0.1, ya + 0.3, "4. output", fs=11.5, ha="left", weight="bold")
    text(ax, 0.1, ya + 0.02, "3 tokens for one\ntarget pass", fs=10.3, ha="left",
         color=MUTED, va="top")
    for j, tok in enumerate(["'.x'", "' ='"], start=1):
        cell(ax, col[j], ya, cw, ch, tok, fc=light(NEW, 0.7), ec=NEW, family=MONO, fs=10.5)
    cell(ax, col[3], ya, cw, ch, "' x'", fc=light(BONUS, 0.65), ec=BONUS, family=MONO,
         fs=10.5)
    text(ax, col[1] + cw + 0.05, ya - 0.22, "kept guesses", fs=10.3, color=NEW)
    text(ax, col[3] + cw / 2, ya - 0.22, "target's token", fs=10.3, color=BONUS)
    rx = col[5] + cw + 0.12
    text(ax, rx, 1.25, "All 4 kept? Then the\nprediction at p+5 is\na bonus token: k + 1\n"
         "tokens from one pass.\n\nRejected guesses'\nK, V slots are\noverwritten next round.",
         fs=10.3, ha="left")
    return fig


# --------------------------------------------------------------------------------------
# 9. The pipeline strip at the top of every chapter: this chapter's stage highlighted
# --------------------------------------------------------------------------------------
# The request's path (one row), the serving band under it and the machine under it all.
# Each stage: (key, label, chapter label, colour when highlighted).
STRIP_PATH = [
    ("tokenizer", "tokenizer", "ch. 2", PROMPT),
    ("embedding", "embedding\n+ RoPE", "ch. 3", PROMPT),
    ("attention", "attention\nlayers", "ch. 4", PROMPT),
    ("prefill", "prefill", "ch. 5", PROMPT),
    ("decode", "decode", "", NEW),  # prefill and decode share one "ch. 5"
    ("kv", "KV cache", "ch. 6", KV),
    ("sampling", "sampling", "ch. 7", PROMPT),
    ("stop", "stop +\nstream", "ch. 8", PROMPT),
]
STRIP_SERVING = [
    ("batching", "batching & scheduling", "ch. 9"),
    ("server", "server & API", "ch. 10"),
    ("speculative", "speculative decoding", "ch. 11"),
]
_PATH_KEYS = tuple(k for k, *_ in STRIP_PATH)
# What each chapter's strip highlights (the key is the notebook's prefix).
STRIP_HIGHLIGHT = {
    "00": ("machine",),
    "01": _PATH_KEYS,
    "02": ("tokenizer",), "03": ("embedding",), "04": ("attention",),
    "05": ("prefill", "decode"), "06": ("kv",), "07": ("sampling",), "08": ("stop",),
    "09": ("batching",), "10": ("server",), "11": ("speculative",),
    "12": _PATH_KEYS,
    "A": ("embedding", "attention"),  # the model itself
    "B": ("decode",),
    "C": ("decode", "kv"),  # fewer bytes per weight and per cached token
    "D": ("attention", "kv", "machine"),  # layers and cache split over devices
    "E": ("attention", "kv"),  # the kernels that read them
}
STRIP_OFF_FC, STRIP_OFF_EC = "#F4F4F4", "#C4C4C4"  # a stage this chapter does not cover


def pipeline_strip(chapter: str):
    """The request's path in one wide, short strip, `chapter`'s stages highlighted (colour,
    bold outline, bold label) and every other stage muted."""
    on = set(STRIP_HIGHLIGHT[chapter])
    whole = on >= set(_PATH_KEYS)
    fig, ax = canvas(10, 2.1)
    x0, gap, pair_gap = 0.78, 0.17, 0.07
    widths = {"prefill": 0.78, "decode": 0.78}
    y, h = 1.18, 0.62  # the path row

    def stage(x, yy, w, hh, label, ch, color, lit, ch_inside=False):
        if lit:
            box(ax, x, yy, w, hh, fc=light(color, 0.72), ec=color, lw=2.8, r=0.05, z=3)
        else:
            box(ax, x, yy, w, hh, fc=STRIP_OFF_FC, ec=STRIP_OFF_EC, lw=1.0, r=0.05)
        tx = x + w / 2 if not ch_inside else x + 0.14
        text(ax, tx, yy + hh / 2, label, fs=10.5, ha="center" if not ch_inside else "left",
             color=INK if lit else MUTED, weight="bold" if lit else "normal", zorder=5)
        if ch and ch_inside:
            text(ax, x + w - 0.12, yy + hh / 2, ch, fs=10.3, ha="right",
                 color=color if lit else MUTED, weight="bold" if lit else "normal", zorder=5)

    xs, x = {}, x0
    for i, (key, label, ch, color) in enumerate(STRIP_PATH):
        w = widths.get(key, 1.0)
        xs[key] = (x, w)
        stage(x, y, w, h, label, "", color, key in on)
        x += w + (pair_gap if key == "prefill" else gap)
    x_end = x - gap
    # the chapter labels above the row (prefill and decode: one label over both)
    for key, label, ch, color in STRIP_PATH:
        if not ch:
            continue
        bx, bw = xs[key]
        if key == "prefill":
            bw = xs["decode"][0] + xs["decode"][1] - bx
        lit = key in on or (key == "prefill" and "decode" in on)
        text(ax, bx + bw - 0.04, y + h + 0.13, ch, fs=10.3, ha="right",
             color=INK if lit else MUTED, weight="bold" if lit else "normal")
    # arrows along the path, and its ends
    ink = INK if whole else "#9A9A9A"
    keys = list(_PATH_KEYS)
    for a, b in zip(keys, keys[1:]):
        ax_, aw = xs[a]
        arrow(ax, (ax_ + aw, y + h / 2), (xs[b][0], y + h / 2), color=ink, lw=1.2, head=8)
    text(ax, 0.06, y + h / 2, "text\nin", fs=10.5, ha="left", color=ink,
         weight="bold" if whole else "normal")
    arrow(ax, (0.5, y + h / 2), (x0, y + h / 2), color=ink, lw=1.2, head=8)
    arrow(ax, (x_end, y + h / 2), (x_end + 0.2, y + h / 2), color=ink, lw=1.2, head=8)
    text(ax, x_end + 0.26, y + h / 2, "text\nout", fs=10.5, ha="left", color=ink,
         weight="bold" if whole else "normal")
    # the serving band: what runs around the path when many requests share the model
    sy, sh = 0.62, 0.42
    text(ax, 0.06, sy + sh / 2, "serving", fs=10.5, ha="left", color=MUTED)
    sw = (x_end - x0 - 2 * gap) / 3
    for i, (key, label, ch) in enumerate(STRIP_SERVING):
        stage(x0 + i * (sw + gap), sy, sw, sh, label, ch, FIX, key in on, ch_inside=True)
    # the machine under it all
    my, mh = 0.1, 0.4
    stage(x0, my, x_end - x0, mh, "the machine: cores, memory and its bandwidth, FLOP/s",
          "ch. 0", MACHINE, "machine" in on, ch_inside=True)
    return fig


DIAGRAMS = {
    "pipeline": pipeline,
    "transformer_block": transformer_block,
    "prefill_decode": prefill_decode,
    "kv_growth": kv_growth,
    "gqa_heads": gqa_heads,
    "paged_prefix": paged_prefix,
    "batching_timeline": batching,
    "speculative_round": speculative_round,
    **{f"pipeline_{ch}": (lambda ch=ch: pipeline_strip(ch)) for ch in STRIP_HIGHLIGHT},
}


def marker(name: str) -> str:
    """The SVG's <dc:identifier>: names the diagram wherever its bytes go (a notebook that
    embeds it as a data URI: scripts/embed_diagrams.py recognises it by this)."""
    return f"llmcore-diagram:{name}"


def compact_svg(svg: str) -> str:
    """matplotlib's SVG, smaller: coordinates to 1/100 pt, path data on one line, no
    indentation (about 10% fewer bytes; the drawing is the same)."""
    svg = re.sub(r"\d+\.\d{3,}",
                 lambda m: f"{float(m.group()):.2f}".rstrip("0").rstrip("."), svg)
    svg = re.sub(r" ?\n\s*(?=[A-Za-z]\s|z\b|\")", " ", svg)  # a path's commands
    return re.sub(r">\s*\n\s*<", ">\n<", svg)


def write_all(out: Path, png: Path | None = None, lang: str = "en") -> list[Path]:
    """Draw every diagram into `out` (lang "zh": with the labels of book/zh/diagrams.yml)."""
    if lang not in ("en", "zh"):
        raise ValueError(f"lang is 'en' or 'zh', not {lang!r}")
    if lang == "zh":
        font = cjk_font()
        units = load_units()
        problems = translation_problems(units)
        if problems:
            raise SystemExit("the Chinese diagrams lack translations:\n  "
                             + "\n  ".join(problems))
    setup()
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, draw in DIAGRAMS.items():
        fig = draw()
        if lang == "zh":
            translate(fig, name, units, font)
        check_text(fig, name)
        path = out / f"{name}.svg"
        buf = io.StringIO()
        fig.savefig(buf, format="svg", metadata={
            "Date": None, "Creator": "scripts/diagrams.py", "Identifier": marker(name)})
        path.write_text(compact_svg(buf.getvalue()), encoding="utf-8")
        if png is not None:
            png.mkdir(parents=True, exist_ok=True)
            fig.savefig(png / f"{name}.png", dpi=COLUMN_PX / fig.get_figwidth())
        plt.close(fig)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default {OUT.relative_to(ROOT)} (zh: its zh/ folder)")
    parser.add_argument("--png", type=Path, default=None, help="also write PNG copies here")
    parser.add_argument("--lang", choices=["en", "zh"], default="en")
    parser.add_argument("--zh-sync", action="store_true",
                        help="align book/zh/diagrams.yml with the labels, then list problems")
    args = parser.parse_args(argv)
    if args.zh_sync:
        units = sync_units()
        problems = translation_problems(units)
        print(f"{ZH_UNITS.relative_to(ROOT)}: {len(units)} units, {len(problems)} to do")
        for p in problems:
            print(" ", p)
        return 1 if problems else 0
    out = args.out or (OUT_ZH if args.lang == "zh" else OUT)
    for path in write_all(out, args.png, args.lang):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
