"""Answers for the chapter 01 checkers: one correct, several wrong (used by
tests/test_exercises.py)."""


def _ttft_tpot(start, times):
    tpot = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None
    return times[0] - start, tpot


def _tpot_over_n(start, times):  # off by one: n tokens have n - 1 gaps
    tpot = (times[-1] - times[0]) / len(times) if len(times) > 1 else None
    return times[0] - start, tpot


def _tpot_from_start(start, times):  # the first token's wait (prefill) is not a gap
    return times[0] - start, (times[-1] - start) / len(times)


def _tpot_zero_single(start, times):  # one token: there is no TPOT, not a TPOT of 0
    return times[0] - start, (times[-1] - times[0]) / max(1, len(times) - 1)


def _decode(step, prompt_ids, n_new, mode="ok"):
    if mode == "token_by_token_prefill":  # right tokens, but n passes for the prompt
        for i, t in enumerate(prompt_ids):
            logits = step([t], [i])
    else:
        logits = step(prompt_ids, list(range(len(prompt_ids))))
    out = []
    for i in range(n_new):
        out.append(int(logits.argmax()))
        if i < n_new - 1 or mode == "feeds_last":
            position = len(prompt_ids) + i + (1 if mode == "position_off_by_one" else 0)
            if mode == "no_cache":  # re-runs everything: positions already cached
                seq = list(prompt_ids) + out
                logits = step(seq, list(range(len(seq))))
            else:
                logits = step([out[-1]], [position])
    return out


def _tokens(prompt_len, n_new, kv_cache):
    if kv_cache:
        return prompt_len + n_new - 1
    return sum(prompt_len + t for t in range(n_new))


def _tokens_feed_last(prompt_len, n_new, kv_cache):  # the last token is never fed back
    if kv_cache:
        return prompt_len + n_new
    return sum(prompt_len + t for t in range(1, n_new + 1))


def _tokens_no_quadratic(prompt_len, n_new, kv_cache):  # the re-run grows each step
    return prompt_len + n_new - 1 if kv_cache else prompt_len * n_new


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch01.check_ttft_and_tpot": (
        _ttft_tpot, [_tpot_over_n, _tpot_from_start, _tpot_zero_single]),
    "ch01.check_decode_greedy": (
        _decode,
        [lambda s, p, n, mode=mode: _decode(s, p, n, mode)
         for mode in ("token_by_token_prefill", "feeds_last", "position_off_by_one",
                      "no_cache")]
        + [lambda s, p, n: [int(s(p, list(range(len(p)))).argmax())] * n]),
    "ch01.check_tokens_processed": (
        _tokens, [_tokens_feed_last, _tokens_no_quadratic, lambda p, n, c: p + n - 1]),
    # 140 ms; wrong: TTFT + 21 TPOTs, no TTFT, every token a TTFT, 20 TPOTs only
    "ch01.check_q_last_token": (140, [144, 84, 1260, 80]),
    # 12 tokens; wrong: one per character, two bytes per character (UTF-16), one token
    "ch01.check_q_chinese_tokens": (12, [4, 8, 1]),
}
