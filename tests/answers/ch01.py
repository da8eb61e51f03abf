"""Answers for the chapter 01 checkers: one correct, several wrong (used by tests/test_exercises.py)."""


def _ttft_tpot(start, times):
    return times[0] - start, (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None


def _tpot_over_n(start, times):  # off by one: n tokens have n - 1 gaps
    return times[0] - start, (times[-1] - times[0]) / len(times) if len(times) > 1 else None


def _tpot_from_start(start, times):  # the first token's wait (prefill) is not a decode gap
    return times[0] - start, (times[-1] - start) / len(times)


def _tpot_zero_single(start, times):  # one token: there is no TPOT, not a TPOT of 0
    return times[0] - start, (times[-1] - times[0]) / max(1, len(times) - 1)


def _tokens(prompt_len, n_new, kv_cache):
    if kv_cache:
        return prompt_len + n_new - 1
    return sum(prompt_len + t for t in range(n_new))


def _tokens_feed_last(prompt_len, n_new, kv_cache):  # the last sampled token is never fed back
    return prompt_len + n_new if kv_cache else sum(prompt_len + t for t in range(1, n_new + 1))


def _tokens_no_quadratic(prompt_len, n_new, kv_cache):  # forgets that the re-run grows each step
    return prompt_len + n_new - 1 if kv_cache else prompt_len * n_new


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch01.check_ttft_and_tpot": (_ttft_tpot, [_tpot_over_n, _tpot_from_start, _tpot_zero_single]),
    "ch01.check_total_latency": (
        lambda ttft, tpot, n: ttft + (n - 1) * tpot,
        [lambda ttft, tpot, n: ttft + n * tpot, lambda ttft, tpot, n: n * tpot,
         lambda ttft, tpot, n: max(ttft, n * tpot)]),
    "ch01.check_tokens_processed": (_tokens, [_tokens_feed_last, _tokens_no_quadratic,
                                              lambda p, n, c: p + n - 1]),
}
