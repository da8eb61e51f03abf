"""Tests for llmcore.speculative: the acceptance rules and the draft-and-verify loop."""
import pytest
import torch

from llmcore.kvcache import KVCache, greedy_generate
from llmcore.model import ModelConfig, Transformer
from llmcore.sampling import SamplingParams
from llmcore.speculative import (accept_greedy, accept_sampled, distribution, residual_distribution,
                                 speculative_generate)


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
