"""Tests for llmcore.speculative: the acceptance rules and the draft-and-verify loop."""
import pytest
import torch

from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams
from llmcore.speculative import (PromptLookup, accept_greedy, accept_sampled, distribution,
                                 residual_distribution, speculative_generate)


def _model(seed, vocab=64, **overrides):
    torch.manual_seed(seed)
    cfg = dict(vocab_size=vocab, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=48, **overrides)
    return Transformer(ModelConfig(**cfg)).eval()


def _spec(target, draft, prompt, n, k, **params):
    """Token ids of a speculative generation of n tokens (greedy unless params say otherwise)."""
    params = SamplingParams(**{"temperature": 0.0, "max_tokens": n, **params})
    result, stats = speculative_generate(target, draft, None, prompt, params, k=k)
    return result.token_ids, stats


def _greedy(model, prompt, n):
    cache = KVCache(model.cfg, 1, len(prompt) + n, device="cpu", dtype=torch.float32)
    return greedy_generate(model, torch.tensor([prompt]), n, cache)[0].tolist()


def test_accept_greedy_keeps_the_agreeing_prefix_and_adds_the_targets_token():
    logits = torch.full((4, 10), -1.0)
    for row, choice in enumerate([5, 6, 7, 8]):
        logits[row, choice] = 1.0
    assert accept_greedy(logits, torch.tensor([5, 6, 7])) == (3, 8)  # all kept: a bonus token
    assert accept_greedy(logits, torch.tensor([5, 9, 7])) == (1, 6)  # stops at the first miss
    assert accept_greedy(logits, torch.tensor([4, 6, 7])) == (0, 5)
    with pytest.raises(ValueError, match="k \\+ 1"):
        accept_greedy(logits, torch.tensor([5, 6]))


def test_residual_distribution():
    p, q = torch.tensor([0.5, 0.3, 0.2, 0.0]), torch.tensor([0.2, 0.2, 0.2, 0.4])
    torch.testing.assert_close(residual_distribution(p, q), torch.tensor([0.75, 0.25, 0.0, 0.0]))
    assert torch.equal(residual_distribution(p, p), p)


def test_accept_sampled_outputs_follow_the_target_distribution():
    p = torch.tensor([[0.5, 0.3, 0.2, 0.0], [0.1, 0.2, 0.3, 0.4]])
    q = torch.tensor([[0.1, 0.1, 0.4, 0.4]])
    gen, counts, draws = torch.Generator().manual_seed(0), torch.zeros(4), 20_000
    for _ in range(draws):
        guess = torch.multinomial(q[0], 1, generator=gen)
        kept, extra = accept_sampled(p, q, guess, gen)
        counts[int(guess) if kept else extra] += 1
    assert (counts / draws - p[0]).abs().max() < 0.015
    assert counts[3] == 0  # a token the target never picks never comes out, however often it is guessed
    with pytest.raises(ValueError, match="k \\+ 1"):
        accept_sampled(p[:1], q, torch.tensor([0]))


def test_distribution_applies_the_sampling_parameters():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
    assert torch.equal(distribution(logits, SamplingParams(top_k=1)), torch.tensor([[1.0, 0.0, 0.0, 0.0]]))
    torch.testing.assert_close(distribution(logits, SamplingParams(temperature=2.0)), (logits / 2).softmax(-1))
    biased = distribution(logits, SamplingParams(logit_bias={3: 100.0}))
    assert biased.argmax() == 3


@pytest.mark.parametrize("k", [1, 2, 3, 5, 12])
@pytest.mark.parametrize("prompt", [[7], [3, 14, 15, 9, 26, 5]])
def test_greedy_speculative_decoding_gives_the_targets_tokens(k, prompt):
    target, draft = _model(0), _model(1)
    out, stats = _spec(target, draft, prompt, 10, k)
    assert out == _greedy(target, prompt, 10)
    assert stats.target_passes <= 10 and stats.proposed == k * stats.target_passes
    assert stats.proposed_per_pass == [k] * stats.target_passes  # a draft model always guesses k
    assert sum(a + 1 for a in stats.accepted_per_pass) >= 10  # the last round may be cut short


def test_a_draft_identical_to_the_target_is_always_accepted():
    target = _model(0)
    out, stats = _spec(target, _model(0), [1, 2, 3], 12, 3)
    assert out == _greedy(target, [1, 2, 3], 12)
    assert stats.acceptance_rate == 1.0 and stats.tokens_per_pass == 4.0


def test_bundled_models_greedy_equivalence():
    from llmcore.generate import generate
    from llmcore.pretrained import load
    target, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    draft, _ = load("tiny-draft", device="cpu", dtype=torch.float32)
    params = SamplingParams(temperature=0.0, max_tokens=24)
    result, stats = speculative_generate(target, draft, tokenizer, "def add(a, b):\n", params, k=4)
    expected = generate(target, tokenizer, "def add(a, b):\n", params)
    assert (result.token_ids, result.text) == (expected.token_ids, expected.text)
    assert result.usage.completion_tokens == len(result.token_ids)
    assert stats.acceptance_rate > 0.2  # the draft learned the same corpus: it is right fairly often


@pytest.mark.slow
def test_sampled_speculative_decoding_follows_the_targets_distribution():
    target, draft = _model(0, vocab=6), _model(1, vocab=6)
    prompt, runs = [1, 2], 1500
    with torch.no_grad():
        p1 = target(torch.tensor([prompt]))[0, -1].softmax(-1)
        p2 = sum(p1[x] * target(torch.tensor([prompt + [x]]))[0, -1].softmax(-1) for x in range(6))
    firsts, seconds = torch.zeros(6), torch.zeros(6)
    for seed in range(runs):
        out, _ = _spec(target, draft, prompt, 2, 2, temperature=1.0, seed=seed)
        firsts[out[0]] += 1
        seconds[out[1]] += 1
    assert (firsts / runs - p1).abs().max() < 0.05
    assert (seconds / runs - p2).abs().max() < 0.05


def test_min_tokens_bans_stop_ids_in_draft_and_target():
    target, draft = _model(0), _model(1)
    greedy = _greedy(target, [5, 6], 12)
    stop = greedy[1]
    out, _ = _spec(target, draft, [5, 6], 12, 3, stop_token_ids=[stop])
    assert out == greedy[:2]  # stops on the stop id, which is counted
    out, _ = _spec(target, draft, [5, 6], 12, 3, stop_token_ids=[stop], min_tokens=4)
    assert stop not in out[:4] and len(out) > 4


def test_seeded_sampling_is_reproducible():
    target, draft = _model(0), _model(1)
    first = _spec(target, draft, [5, 6], 12, 3, temperature=0.9, top_p=0.9, seed=3)[0]
    again = _spec(target, draft, [5, 6], 12, 3, temperature=0.9, top_p=0.9, seed=3)[0]
    assert first == again and len(first) == 12


def test_speculative_generate_argument_errors():
    target, draft = _model(0), _model(1)
    params = SamplingParams(temperature=0.0, max_tokens=4)
    with pytest.raises(ValueError, match="repetition_penalty"):
        speculative_generate(target, draft, None, [1], SamplingParams(repetition_penalty=1.2))
    with pytest.raises(ValueError, match="share one tokenizer"):
        speculative_generate(target, _model(1, vocab=32), None, [1], params)
    with pytest.raises(ValueError, match="k >= 1"):
        speculative_generate(target, draft, None, [1], params, k=0)
    with pytest.raises(ValueError, match="non-empty prompt"):
        speculative_generate(target, draft, None, [], params)
    with pytest.raises(ValueError, match="needs a tokenizer"):
        speculative_generate(target, draft, None, "text", params)


# Prompt lookup: guesses copied from the context, no draft model.

def test_prompt_lookup_copies_what_followed_the_most_recent_match():
    lookup = PromptLookup(max_ngram=3)
    tokens = [1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3]
    assert lookup.propose(tokens, 2) == [7, 5]  # the most recent match, not the first ([9, 1])
    assert lookup.propose(tokens, 8) == [7, 5, 1, 2, 3]  # cut at the end of the sequence
    # A 3-token match wins over a more recent 1-token one (..., 3, 7, ...).
    assert lookup.propose([1, 2, 3, 8, 5, 3, 7, 1, 2, 3], 2) == [8, 5]
    assert lookup.propose([4, 5, 6, 1, 5, 6, 2, 9, 6], 2) == [2, 9]  # falls back to n = 1
    assert PromptLookup(max_ngram=1).propose([1, 2, 3, 8, 5, 3, 7, 1, 2, 3], 2) == [7, 1]
    assert lookup.propose([5, 5, 5, 5], 4) == [5]  # the match overlaps the suffix
    assert lookup.propose([1, 2, 3], 4) == []  # nothing repeats: no guesses
    assert lookup.propose([7], 4) == []
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="max_ngram"):
            PromptLookup(max_ngram=bad)


def _looping_prompt(target):
    """[7] and the first 10 tokens the target writes after it: a loop of 8 tokens that the
    target goes on repeating, so most guesses copied from the prompt are right."""
    return [7] + _greedy(target, [7], 10)


@pytest.mark.parametrize("k", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("case", ["looping", "no repeats", "one token", "repeated prompt"])
def test_prompt_lookup_greedy_gives_the_targets_tokens(case, k):
    target = _model(0)
    prompt = {"looping": _looping_prompt(target), "no repeats": [3, 14, 15, 9, 26, 5],
              "one token": [7], "repeated prompt": [3, 14, 15, 9, 26, 5] * 3 + [3, 14]}[case]
    out, stats = _spec(target, PromptLookup(3), prompt, 16, k)
    assert out == _greedy(target, prompt, 16)
    assert len(stats.proposed_per_pass) == len(stats.accepted_per_pass) == stats.target_passes
    assert stats.proposed == sum(stats.proposed_per_pass) and max(stats.proposed_per_pass) <= k
    assert stats.accepted == sum(stats.accepted_per_pass)
    assert all(0 <= a <= g for a, g in zip(stats.accepted_per_pass, stats.proposed_per_pass))
    assert sum(a + 1 for a in stats.accepted_per_pass) >= 16
    if case == "looping":  # nearly every copied guess is right
        assert stats.acceptance_rate > 0.8 and stats.target_passes <= 16 // (k + 1) + 2
    if case == "no repeats":  # first round: nothing to copy, one ordinary step
        assert stats.proposed_per_pass[0] == 0 and stats.accepted_per_pass[0] == 0


class _Oracle:
    """A drafter that knows the answer: it proposes the target's own greedy continuation."""

    def __init__(self, prompt, answer):
        self.prompt, self.answer = list(prompt), list(answer)

    def propose(self, tokens, k):
        done = len(tokens) - len(self.prompt)
        assert tokens[:len(self.prompt)] == self.prompt  # it is shown prompt + output
        return self.answer[done:done + k]


def test_a_drafter_that_is_always_right_gets_k_plus_one_tokens_per_pass():
    target, prompt = _model(0), [3, 14, 15]
    expected = _greedy(target, prompt, 20)
    out, stats = _spec(target, _Oracle(prompt, expected[:18]), prompt, 20, 4)
    assert out == expected
    # 4 guesses and the target's token a pass, until the oracle runs short (3 guesses) and
    # out (none: an ordinary step).
    assert stats.proposed_per_pass == [4, 4, 4, 3, 0]
    assert stats.accepted_per_pass == [4, 4, 4, 3, 0]


def test_prompt_lookup_sampled_follows_the_targets_distribution():
    target = _model(0, vocab=6)
    prompt, runs = [1, 2, 3, 1, 2], 1500  # the lookup guesses 3, 1 after it
    assert PromptLookup(3).propose(prompt, 2) == [3, 1]
    with torch.no_grad():
        p1 = target(torch.tensor([prompt]))[0, -1].softmax(-1)
        p2 = sum(p1[x] * target(torch.tensor([prompt + [x]]))[0, -1].softmax(-1) for x in range(6))
    firsts, seconds, kept_first = torch.zeros(6), torch.zeros(6), 0
    for seed in range(runs):
        out, stats = _spec(target, PromptLookup(3), prompt, 2, 2, temperature=1.0, seed=seed)
        firsts[out[0]] += 1
        seconds[out[1]] += 1
        kept_first += stats.accepted_per_pass[0] > 0
    assert (firsts / runs - p1).abs().max() < 0.05
    assert (seconds / runs - p2).abs().max() < 0.05
    assert 0.5 * p1[3] * runs < kept_first < 1.5 * p1[3] * runs  # the guess 3 is kept with prob p1(3)


def test_prompt_lookup_stops_through_the_reply():
    from llmcore.generate import generate
    target = _model(0)
    prompt = _looping_prompt(target)
    greedy = _greedy(target, prompt, 16)
    stop = greedy[5]  # inside a run of copied guesses that the target keeps
    for extra in ({}, {"min_tokens": 12}, {"eos_token_ids": [stop]}):
        params = SamplingParams(temperature=0.0, max_tokens=16,
                                stop_token_ids=[] if "eos_token_ids" in extra else [stop],
                                min_tokens=extra.get("min_tokens", 0))
        eos = extra.get("eos_token_ids", [])
        result, stats = speculative_generate(target, PromptLookup(3), None, prompt, params,
                                             k=8, eos_token_ids=eos)
        expected = generate(target, None, prompt, params, eos_token_ids=eos)
        assert (result.token_ids, result.finish_reason) == (expected.token_ids, expected.finish_reason)
        if "min_tokens" in extra:  # banned at first, so the text takes another path
            assert stop not in result.token_ids[:12]
            continue
        assert result.finish_reason == "stop" and result.token_ids[-1] == stop
        # The last round kept guesses past the stop; the Reply dropped them.
        emitted_last = len(result.token_ids) - sum(a + 1 for a in stats.accepted_per_pass[:-1])
        assert stats.accepted_per_pass[-1] + 1 > emitted_last


def test_prompt_lookup_argument_errors():
    target = _model(0)
    params = SamplingParams(temperature=0.0, max_tokens=4)
    with pytest.raises(TypeError, match="propose"):
        speculative_generate(target, "ngram", None, [1], params)

    class TooMany:
        def propose(self, tokens, k):
            return [1] * (k + 1)

    class OutOfVocab:
        def propose(self, tokens, k):
            return [64]

    for drafter in (TooMany(), OutOfVocab()):
        with pytest.raises(ValueError, match="at most k=2 token ids"):
            speculative_generate(target, drafter, None, [1], params, k=2)
    with pytest.raises(ValueError, match="k >= 1"):
        speculative_generate(target, PromptLookup(), None, [1], params, k=0)
    with pytest.raises(ValueError, match="draft is the target itself"):
        speculative_generate(target, target, None, [1, 2], params, k=2)
    with pytest.raises(ValueError, match="repetition_penalty"):
        speculative_generate(target, PromptLookup(), None, [1], SamplingParams(repetition_penalty=1.2))


def test_bundled_models_prompt_lookup_on_a_copy_heavy_prompt():
    from llmcore.generate import generate
    from llmcore.pretrained import load
    target, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    table = "".join(f"        '.{ext}'    : 'application/{kind}',\n" for ext, kind in
                    [("doc", "msword"), ("dot", "msword"), ("wiz", "msword"), ("bin", "octet-stream"),
                     ("a", "octet-stream"), ("dll", "octet-stream"), ("exe", "octet-stream")])
    for params in (SamplingParams(temperature=0.0, max_tokens=48),
                   SamplingParams(temperature=0.0, max_tokens=48, stop=["',\n"], min_tokens=9)):
        result, stats = speculative_generate(target, PromptLookup(3), tokenizer, table, params, k=4)
        expected = generate(target, tokenizer, table, params)
        assert (result.token_ids, result.text, result.finish_reason) == (
            expected.token_ids, expected.text, expected.finish_reason)
    assert result.finish_reason == "stop"
    assert stats.tokens_per_pass > 2.5  # the model copies the table's shape, and the lookup with it


def test_greedy_logit_bias_acts_on_the_verify_rows_as_in_generate():
    """A greedy request's logit bias is the one processor its argmax sees; the loop
    applies it to every row of the verify pass (and skips the processors without one)."""
    from llmcore.generate import generate
    from llmcore.pretrained import load
    target, tokenizer = load("tiny", device="cpu", dtype=torch.float32)
    draft, _ = load("tiny-draft", device="cpu", dtype=torch.float32)
    prompt = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n"
    plain = generate(target, tokenizer, prompt, SamplingParams(temperature=0.0, max_tokens=24))
    for bias in ({plain.token_ids[3]: -100.0}, {plain.token_ids[0]: -100.0, 7: 4.0}):
        params = SamplingParams(temperature=0.0, max_tokens=24, logit_bias=bias)
        expected = generate(target, tokenizer, prompt, params)
        assert expected.token_ids != plain.token_ids  # the bias changes the path
        for drafter in (PromptLookup(2), draft):
            result, _ = speculative_generate(target, drafter, tokenizer, prompt, params, k=3)
            assert result.token_ids == expected.token_ids


# The bonus token: when all k guesses are kept, it comes from row k of the verify pass.

def test_accept_sampled_draws_the_bonus_token_from_the_last_row():
    # Row 1 makes the guess certain; row 2, the bonus row, is a different distribution.
    p = torch.tensor([[0.2, 0.3, 0.5, 0.0], [0.0, 0.0, 0.0, 1.0], [0.1, 0.6, 0.0, 0.3]])
    q = p[:2].clone()  # the draft agrees with the target: every guess is kept
    gen, counts, draws = torch.Generator().manual_seed(0), torch.zeros(4), 4000
    for _ in range(draws):
        guesses = torch.stack([torch.multinomial(q[0], 1, generator=gen)[0], torch.tensor(3)])
        kept, bonus = accept_sampled(p, q, guesses, gen)
        assert kept == 2
        counts[bonus] += 1
    assert (counts / draws - p[2]).abs().max() < 0.03  # row 1 would give token 3 every time
    # A one-hot draft (a prompt-lookup guess) that the target is certain of is kept too.
    kept, bonus = accept_sampled(p[1:], torch.tensor([[0.0, 0.0, 0.0, 1.0]]), torch.tensor([3]), gen)
    assert kept == 1 and bonus in (0, 1, 3)


@pytest.mark.slow
def test_sampled_bonus_token_follows_the_target_after_the_last_guess():
    # A draft identical to the target: both guesses of the one round are always kept, and
    # the third token is the bonus, from the target's row after the second guess.
    # Temperature 0.3 sharpens the random model enough for that row to differ from the one
    # before it.
    target, draft = _model(2, vocab=6), _model(2, vocab=6)
    prompt, runs, params = [1, 2], 1500, SamplingParams(temperature=0.3)

    def dist(ids):
        return distribution(target(torch.tensor([ids]))[0, -1:], params)[0]

    with torch.no_grad():
        p1 = dist(prompt)
        after_two = torch.zeros(6)  # the right row: P(third token)
        after_one = torch.zeros(6)  # the row before it, what a wrong index would use
        for x in range(6):
            p2 = dist(prompt + [x])
            after_one += p1[x] * p2
            for y in range(6):
                after_two += p1[x] * p2[y] * dist(prompt + [x, y])
    assert (after_two - after_one).abs().max() > 0.15  # the test tells the two rows apart
    thirds = torch.zeros(6)
    for seed in range(runs):
        out, stats = _spec(target, draft, prompt, 3, 2, temperature=0.3, seed=seed)
        assert stats.accepted_per_pass == [2]
        thirds[out[2]] += 1
    assert (thirds / runs - after_two).abs().max() < 0.05


def test_prompt_lookup_matches_transformers_rule_up_to_which_occurrence():
    """transformers' PromptLookupCandidateGenerator tries the same n-gram sizes in the same
    order and cuts the guesses the same way; it takes the first occurrence of the suffix,
    PromptLookup the most recent one. Where only one occurrence exists, they agree."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
    gen, compared = torch.Generator().manual_seed(0), {"one": 0, "several": 0, "none": 0}
    for _ in range(300):
        tokens = torch.randint(0, 6, (int(torch.randint(2, 40, (1,), generator=gen)),),
                               generator=gen).tolist()
        k, max_ngram = int(torch.randint(1, 9, (1,), generator=gen)), 3
        theirs = PromptLookupCandidateGenerator(num_output_tokens=k, max_matching_ngram_size=max_ngram,
                                                max_length=10_000)
        ids, _ = theirs.get_candidates(torch.tensor([tokens]))
        their_guesses = ids[0, len(tokens):].tolist()
        ours = PromptLookup(max_ngram).propose(tokens, k)
        for n in range(min(max_ngram, len(tokens) - 1), 0, -1):
            starts = [s for s in range(len(tokens) - n) if tokens[s:s + n] == tokens[-n:]]
            if starts:
                break
        else:
            starts = []
        if not starts:
            compared["none"] += 1
            assert ours == their_guesses == []
            continue
        assert ours == tokens[starts[-1] + n:starts[-1] + n + k]
        assert their_guesses == tokens[starts[0] + n:starts[0] + n + k]
        compared["one" if len(starts) == 1 else "several"] += 1
        if len(starts) == 1:
            assert ours == their_guesses
    assert min(compared.values()) >= 10, compared
