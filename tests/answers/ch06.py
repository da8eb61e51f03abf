"""Answers for the chapter 06 checkers: one correct, several wrong (used by tests/test_exercises.py)."""
from llmcore.paged import block_hash


def _fit(mem, weights, layers, kv, hd, ctx, b, k_and_v=2, floor=True, clamp=True):
    n = (mem - weights) / (k_and_v * layers * kv * hd * ctx * b)
    n = int(n // 1) if floor else n
    return max(0, n) if clamp else n


def _write(cache, positions, new, mode="ok"):
    if mode == "append":  # ignores positions: writes at the start
        cache[:, :, :new.shape[2]] = new
        return cache[:, :, :new.shape[2]]
    if mode == "first_row":  # uses row 0's positions for every row
        cache[:, :, positions[0]] = new
        return cache[:, :, :int(positions.max()) + 1]
    for row in range(cache.shape[0]):
        cache[row][:, positions[row]] = new[row]
    if mode == "whole":
        return cache
    if mode == "off_by_one":
        return cache[:, :, :int(positions.max())]
    return cache[:, :, :int(positions.max()) + 1]


def _write_copy(cache, positions, new):
    cache = cache.clone()  # writes into a copy: the caller's cache is unchanged
    for row in range(cache.shape[0]):
        cache[row][:, positions[row]] = new[row]
    return cache[:, :, :int(positions.max()) + 1]


def _reuse(prompt, bs, index, chained=True, recheck=True, keep_last=True):
    n_blocks = (len(prompt) - 1) // bs if keep_last else len(prompt) // bs
    parent, reused = None, 0
    for i in range(n_blocks):
        tokens = tuple(prompt[i * bs:(i + 1) * bs])
        key = block_hash(parent if chained else None, tokens)
        if key not in index or (recheck and index[key] != tokens):
            break
        reused += bs
        parent = key
    return reused


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch06.check_sequences_that_fit": (
        _fit,
        [lambda *a: _fit(*a, k_and_v=1),                    # forgot that K and V are both stored
         lambda *a: _fit(*a, floor=False),                  # a fraction of a sequence
         lambda *a: _fit(*a, clamp=False),                  # negative when the weights do not fit
         lambda mem, w, *rest: _fit(mem, 0, *rest)]),       # forgot the weights
    "ch06.check_write_kv": (
        _write,
        [lambda c, p, n: _write(c, p, n, "append"),
         lambda c, p, n: _write(c, p, n, "first_row"),
         lambda c, p, n: _write(c, p, n, "whole"),
         lambda c, p, n: _write(c, p, n, "off_by_one"),
         _write_copy]),
    "ch06.check_reusable_prefix": (
        _reuse,
        [lambda p, bs, idx: _reuse(p, bs, idx, chained=False),      # same block after any prefix
         lambda p, bs, idx: _reuse(p, bs, idx, recheck=False),      # trusts the hash blindly
         lambda p, bs, idx: _reuse(p, bs, idx, keep_last=False)]),  # reuses the last token too
    # 2 x 32 layers x 8 kv heads x 128 x 2 bytes x 8,000 tokens x 20 conversations
    "ch06.check_q_kv_gib": (
        2 * 32 * 8 * 128 * 2 * 8000 * 20 / 2**30,
        [32 * 8 * 128 * 2 * 8000 * 20 / 2**30,      # keys only (or values only)
         2 * 32 * 8 * 128 * 4 * 8000 * 20 / 2**30,  # float32
         2 * 32 * 32 * 128 * 2 * 8000 * 20 / 2**30,  # query heads cached
         2 * 32 * 8 * 128 * 2 * 8000 * 20 / 1e9,    # GB, not GiB
         2 * 32 * 8 * 128 * 2 * 8000 / 2**30]),     # one conversation
    # 62 full blocks (992 tokens) of the system prompt are reused
    "ch06.check_q_prefilled": (
        38, [30, 31, 1030, 22, 8, 1030 - 1000]),
}
