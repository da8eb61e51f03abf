"""Answers for the chapter 11 checkers: one correct, several wrong (used by tests/test_exercises.py)."""


def _tokens(alpha, k):
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def _accept(choices, guesses, stop=True):
    accepted = 0
    for choice, guess in zip(choices, guesses):
        if choice != guess:
            if stop:
                break
            continue
        accepted += 1
    return accepted, choices[accepted]


def _residual(p, q, normalise=True, clamp=True):
    r = (p - q).clamp(min=0) if clamp else (p - q).abs()
    if r.sum() == 0:
        return p
    return r / r.sum() if normalise else r


#: checker name -> (a correct answer, wrong answers it must reject)
ANSWERS = {
    "ch11.check_expected_tokens_per_pass": (
        _tokens,
        [lambda a, k: _tokens(a, k) - 1,             # forgot the target's own token
         lambda a, k: 1 + a * k,                      # treats the guesses as independent of each other
         lambda a, k: (1 - a ** k) / (1 - a) if a != 1 else float(k)]),  # one term short
    "ch11.check_greedy_accept": (
        _accept,
        [lambda c, g: _accept(c, g, stop=False),      # counts matches after the first miss
         lambda c, g: (_accept(c, g)[0], g[min(_accept(c, g)[0], len(g) - 1)])]),  # next token from the draft
    "ch11.check_residual": (
        _residual,
        [lambda p, q: _residual(p, q, normalise=False),
         lambda p, q: _residual(p, q, clamp=False),
         lambda p, q: (p - q).clamp(min=0) / max(float((p - q).clamp(min=0).sum()), 1e-12)]),  # p == q gives 0s
}


def _choose_k(alpha, t_pass, t_draft=0.0, bonus=1, draft=True, offset=1, linear=False,
              plain=True, last_tie=False):
    def tokens(k):
        if linear:
            return 1 + alpha * k
        full = float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)
        return full - 1 + bonus

    rates = {0: 1 / t_pass[1]} if plain else {}
    for k in range(1, max(t_pass)):
        rates[k] = tokens(k) / ((k * t_draft if draft else 0) + t_pass[k + offset])
    best = max(rates.values())
    ties = [k for k, rate in rates.items() if rate == best]
    return max(ties) if last_tie else min(ties)


ANSWERS["ch11.check_choose_k"] = (
    _choose_k,
    [lambda a, t, d=0.0: _choose_k(a, t, d, bonus=0),       # forgot the target's own token
     lambda a, t, d=0.0: _choose_k(a, t, d, draft=False),   # draft steps taken as free
     lambda a, t, d=0.0: _choose_k(a, t, d, offset=0),      # verify pass over k, not k + 1
     lambda a, t, d=0.0: _choose_k(a, t, d, linear=True),   # 1 + alpha k: guesses independent
     lambda a, t, d=0.0: _choose_k(a, t, d, plain=False),   # never falls back to plain decoding
     lambda a, t, d=0.0: _choose_k(a, t, d, last_tie=True)])  # the largest k on a tie

# Question 11.1: 3.36 tokens a round, 4 x 2 ms of draft + a 20 ms verify pass
_TOKENS = 1 + 0.8 + 0.8**2 + 0.8**3 + 0.8**4
ANSWERS["ch11.check_q_gpu_speedup"] = (
    _TOKENS * 20 / 28,
    [_TOKENS,                       # the draft's steps taken as free
     (_TOKENS - 1) * 20 / 28,       # forgot the target's own token
     5 * 20 / 28,                   # every guess kept
     _TOKENS * 20 / (5 * 2 + 20),   # k + 1 draft steps
     28 / (_TOKENS * 20)])          # upside down
# Question 11.2: kept + 1 > 5
ANSWERS["ch11.check_q_break_even"] = (4, [5, 8, 9, 3])

