"""Deterministic, offline text for tokenizer tests and benchmarks.

Everything comes from the running interpreter's standard library plus seeded random
generators, so the same Python version always yields the same corpus.
"""
from __future__ import annotations

import ast
import json
import os
import random
import sysconfig
from functools import lru_cache
from pathlib import Path

ENDOFTEXT = "<|endoftext|>"


@lru_cache(maxsize=1)
def stdlib_sources() -> tuple[str, ...]:
    """Source of every stdlib .py file, in sorted path order (installed packages excluded)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    paths = []
    for folder, subdirs, files in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in ("site-packages", "dist-packages", "__pycache__")]
        paths += [Path(folder, f) for f in files if f.endswith(".py")]
    paths.sort(key=lambda p: p.relative_to(root).as_posix())
    return tuple(p.read_bytes().decode("utf-8", errors="replace") for p in paths)


def stdlib_corpus(min_bytes: int) -> str:
    """Whole stdlib files joined by <|endoftext|> until the text has at least `min_bytes` UTF-8 bytes."""
    docs, size = [], 0
    for source in stdlib_sources():
        docs.append(source)
        size += len(source.encode("utf-8")) + len(ENDOFTEXT)
        if size >= min_bytes:
            return ENDOFTEXT.join(docs)
    raise ValueError(f"the standard library has fewer than {min_bytes} bytes of source")


def _docstrings(sources, limit: int) -> list[str]:
    """English prose: module, class and function docstrings."""
    out, size = [], 0
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:  # a few test files are deliberately broken
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=True)
                if doc and len(doc) > 80:
                    out.append(doc)
                    size += len(doc)
                    if size >= limit:
                        return out
    return out


def _random_json(rng: random.Random, depth: int = 0):
    kind = rng.randrange(6 if depth < 3 else 4)
    if kind == 0:
        return rng.randint(-10**9, 10**12)
    if kind == 1:
        return round(rng.uniform(-1e4, 1e4), rng.randrange(8))
    if kind == 2:
        return rng.choice([True, False, None])
    if kind == 3:
        return _words(rng, rng.randrange(1, 6))
    if kind == 4:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    return {_words(rng, 1).replace(" ", "_"): _random_json(rng, depth + 1) for _ in range(rng.randrange(5))}


_LATIN = ["the", "model", "token", "cache", "attention", "naïve", "café", "Straße", "über", "déjà", "vu",
          "can't", "it's", "we'll", "they're", "I'm", "you've", "HE'D", "Élan", "façade", "jalapeño"]
_SCRIPTS = {  # (first, last) code points of long-assigned, stable ranges
    "chinese": (0x4E00, 0x9FA5), "hiragana": (0x3041, 0x3096), "katakana": (0x30A1, 0x30FA),
    "hangul": (0xAC00, 0xD7A3), "cyrillic": (0x0430, 0x044F), "greek": (0x03B1, 0x03C9),
    "arabic": (0x0627, 0x064A), "devanagari": (0x0915, 0x0939), "thai": (0x0E01, 0x0E2E),
}
_EMOJI = ["😀", "😂", "🤖", "🚀", "🎉", "❤️", "👍", "🔥", "✨", "🙏", "🧠", "📚"]
_ZWJ = ["👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "👨‍🚀", "🧑‍🤝‍🧑", "👁️‍🗨️"]
_SKIN = ["👋🏻", "👍🏼", "🙌🏽", "💪🏾", "🤝🏿", "👶🏽"]
_PUNCT = [",", ".", "!", "?", ";", ":", "—", "…", "，", "。", "、", "！", "？", "「", "」", "(", ")", '"', "'"]


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_LATIN) for _ in range(n))


def _script_text(rng: random.Random, script: str, n_chars: int, spaced: bool) -> str:
    first, last = _SCRIPTS[script]
    out = []
    while sum(map(len, out)) < n_chars:
        out.append("".join(chr(rng.randint(first, last)) for _ in range(rng.randint(1, 8))))
        out.append(rng.choice(_PUNCT) if rng.random() < 0.3 else (" " if spaced else ""))
    return "".join(out)


def _flag(rng: random.Random) -> str:
    return "".join(chr(0x1F1E6 + rng.randrange(26)) for _ in range(2))  # regional indicator pair


def _mixed_line(rng: random.Random) -> str:
    """One line mixing scripts, emoji, numbers and odd whitespace."""
    parts = []
    for _ in range(rng.randint(3, 12)):
        kind = rng.randrange(12)
        if kind == 0:
            parts.append(_words(rng, rng.randint(1, 5)))
        elif kind == 1:
            parts.append(_script_text(rng, rng.choice(list(_SCRIPTS)), rng.randint(2, 30), rng.random() < 0.5))
        elif kind == 2:
            parts.append(rng.choice(_EMOJI) * rng.randint(1, 3))
        elif kind == 3:
            parts.append(rng.choice(_ZWJ))
        elif kind == 4:
            parts.append(_flag(rng) + (_flag(rng) if rng.random() < 0.5 else ""))
        elif kind == 5:
            parts.append(rng.choice(_SKIN))
        elif kind == 6:
            parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 40))))
        elif kind == 7:
            parts.append(rng.choice([" ", "  ", "\t", "\t\t", " \t ", "\u00a0", "\u3000", "\u2009", " " * 17]))
        elif kind == 8:
            parts.append(rng.choice(["\n", "\r\n", "\n\n", " \n", "\r\n\r\n", "\n   \n", "\x0b", "\x0c"]))
        elif kind == 9:  # decomposed accents: NFC-normalizing tokenizers must compose them
            parts.append(rng.choice(["e\u0301", "a\u0308", "n\u0303", "o\u0302\u0323", "\u1100\u1161", "A\u030a"]))
        elif kind == 10:
            parts.append(rng.choice(["$", "%", "&&", "->", "=>", "::", "#", "@", "~", "^_^", "<>", "\\", "||", "'s",
                                     "'LL", "'ve", "'t", "'re"]))
        else:
            parts.append(rng.choice(["\x1c", "\x1f", "\x00", "\x7f", "\u200b", "\u200d", "\ufeff", "\u0085"]))
        parts.append(rng.choice(["", " ", " ", ", ", "\t"]))
    return "".join(parts)


PARALLEL_SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Le renard brun rapide saute par-dessus le chien paresseux.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "素早い茶色の狐がのろまな犬を飛び越える。",
    "빠른 갈색 여우가 게으른 개를 뛰어넘는다.",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από τον τεμπέλη σκύλο.",
    "สุนัขจิ้งจอกสีน้ำตาลกระโดดข้ามสุนัขขี้เกียจ",
    "Con cáo nâu nhanh nhẹn nhảy qua con chó lười; có nhiều việc ở Việt Nam.",
    "Hızlı kahverengi tilki tembel köpeğin üzerinden atlar; bu durum değişmektedir.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy; jeho každý den.",
]


def tricky_text(seed: int = 0, n: int = 3000) -> str:
    """Short pieces that make split regexes backtrack: contractions, whitespace and newline runs."""
    rng = random.Random(seed)
    pieces = ["a", "Z", "'", "s", "ll", "'ll", "'S", "1", "12345", " ", "  ", "\t", "\n", "\r", "\r\n", ".", "!",
              "中", "の", "한", "é", "e\u0301", "\u00a0", "\x1c", "😀", "$", "-", "_", "[", "\\", "ſ", "\u3000"]
    return "".join(rng.choice(pieces) for _ in range(n))


def corpus_documents(seed: int = 0) -> list[str]:
    """About 1.2 MB of varied text as a list of documents; the same for a given seed and Python."""
    rng = random.Random(seed)
    sources = stdlib_sources()
    docs = [s[:20_000] for s in sources[::max(1, len(sources) // 20)]][:20]  # Python code, about 400 KB
    docs += ["\n\n".join(_docstrings(sources, 300_000))]  # English prose
    for indent in (None, 2):
        for ascii_only in (True, False):
            blob = [_random_json(rng) for _ in range(400)]
            docs.append(json.dumps(blob, indent=indent, ensure_ascii=ascii_only))
    for script in _SCRIPTS:
        docs.append("\n".join(_script_text(rng, script, 200, spaced=script not in ("chinese", "hiragana", "katakana"))
                              for _ in range(60)))
    docs += ["\n".join(_mixed_line(rng) for _ in range(300)) for _ in range(8)]
    docs.append("\n".join(rng.choice(PARALLEL_SENTENCES) + rng.choice([" ", "\n", "  ", "\r\n"]) for _ in range(500)))
    docs.append("".join(rng.choice(["1", "12", "123", "1234", "9" * 25, " ", "\n", " " * 9, "\t" * 3, "\r\n"])
                        for _ in range(5000)))
    docs.append(tricky_text(seed))
    return docs
