"""Answers for the chapter 02 checkers: one correct, several wrong (used by tests/test_exercises.py)."""
from collections import Counter

from llmcore.tokenizer import merge


def _count_pairs(chunks):
    counts = {}
    for ids in chunks:
        for pair in zip(ids, ids[1:]):
            counts[pair] = counts.get(pair, 0) + 1
    return counts


def _count_pairs_flattened(chunks):  # counts pairs across chunk boundaries
    ids = [i for chunk in chunks for i in chunk]
    return dict(Counter(zip(ids, ids[1:])))


def _count_pairs_once_per_chunk(chunks):  # a set per chunk: repeats inside a chunk are lost
    counts = Counter()
    for ids in chunks:
        counts.update(set(zip(ids, ids[1:])))
    return dict(counts)


def _count_pairs_unordered(chunks):  # (a, b) and (b, a) counted as one pair
    counts = Counter()
    for ids in chunks:
        counts.update(tuple(sorted(p)) for p in zip(ids, ids[1:]))
    return dict(counts)


def _merge_overlapping(ids, pair, new_id):  # every position, so [1, 1, 1] -> [9, 9]
    out = []
    for i in range(len(ids) - 1):
        out.append(new_id if (ids[i], ids[i + 1]) == pair else ids[i])
    return out + ids[-1:] if ids and (len(ids) < 2 or (ids[-2], ids[-1]) != pair) else out


def _merge_right_to_left(ids, pair, new_id):
    return merge(ids[::-1], pair[::-1], new_id)[::-1]


def _merge_string_replace(ids, pair, new_id):  # '1,2' also matches inside '11,2'
    text = "," + ",".join(map(str, ids)) + ","
    text = text.replace(f"{pair[0]},{pair[1]},", f"{new_id},")
    return [int(t) for t in text.strip(",").split(",") if t]


def _merge_in_place(ids, pair, new_id):
    i = 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            ids[i:i + 2] = [new_id]
        i += 1
    return ids


def _merge_drops_last(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids) - 1:
        if (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def _ratio(tokenizer, pairs):
    return sum(len(tokenizer.encode(zh)) for _, zh in pairs) / sum(len(tokenizer.encode(en)) for en, _ in pairs)


def _ratio_mean_of_pairs(tokenizer, pairs):
    return sum(len(tokenizer.encode(zh)) / len(tokenizer.encode(en)) for en, zh in pairs) / len(pairs)


def _ratio_inverted(tokenizer, pairs):
    return 1 / _ratio(tokenizer, pairs)


def _ratio_characters(tokenizer, pairs):
    return sum(len(zh) for _, zh in pairs) / sum(len(en) for en, _ in pairs)


def _stream(pieces):
    out, pending = [], b""
    for piece in pieces:
        data = pending + piece
        cut = len(data)
        for i in range(len(data) - 1, max(len(data) - 4, -1), -1):
            if data[i] & 0xC0 != 0x80:
                need = 1 if data[i] < 0x80 else 2 if data[i] < 0xE0 else 3 if data[i] < 0xF0 else 4
                cut = i if len(data) - i < need else len(data)
                break
        out.append(data[:cut].decode("utf-8"))
        pending = data[cut:]
    return out


def _stream_all_or_nothing(pieces):  # waits until the whole buffer decodes
    out, pending = [], b""
    for piece in pieces:
        pending += piece
        try:
            out.append(pending.decode("utf-8"))
            pending = b""
        except UnicodeDecodeError:
            out.append("")
    return out


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch02.check_count_pairs": (
        _count_pairs,
        [_count_pairs_flattened, _count_pairs_once_per_chunk, _count_pairs_unordered,
         lambda chunks: dict(Counter(p for ids in chunks for p in zip(ids, ids[2:])))]),
    "ch02.check_merge": (
        merge,  # the chapter's own implementation is the correct answer
        [_merge_overlapping, _merge_right_to_left, _merge_string_replace, _merge_in_place, _merge_drops_last]),
    "ch02.check_zh_en_token_ratio": (
        _ratio,
        [_ratio_mean_of_pairs, _ratio_inverted, _ratio_characters]),
    "ch02.check_stream_utf8": (
        _stream,
        [lambda pieces: [p.decode("utf-8", errors="replace") for p in pieces],
         lambda pieces: [p.decode("utf-8", errors="ignore") for p in pieces],
         _stream_all_or_nothing]),
    # 2,731 characters; wrong: one token per character, two bytes each, times 3
    "ch02.check_q_window_characters": (2731, [8192, 4096, 24576]),
    # 18 tokens; wrong: two tokens removed per pair, nothing removed, from 28
    "ch02.check_q_tokens_after_merge": (18, [13, 23, 28]),
}
