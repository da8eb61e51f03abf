"""llmcore.sampling vs transformers' logits processors, and the sampler's draws vs the target distribution.

Parity means: the same set of kept tokens (finite logits) and the same probabilities within 1e-6.
The one documented difference is top-p with ties at the nucleus boundary: transformers keeps
whichever tied tokens its sort puts first, llmcore keeps every token tied with the last one needed.
"""
import pytest
import torch
from transformers.generation.logits_process import (
    LogitsProcessorList,
    MinPLogitsWarper,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from llmcore.sampling import (
    MinP,
    RepetitionPenalty,
    Sampler,
    SamplingParams,
    Temperature,
    TopK,
    TopP,
    make_generator,
    token_counts,
)

PROB_TOL = 1e-6
BATCH, VOCAB = 8, 1000


def random_logits(seed, scale, batch=BATCH, vocab=VOCAB):
    return torch.randn(batch, vocab, generator=torch.Generator().manual_seed(seed)) * scale


def tied_logits(seed, batch=BATCH, vocab=64):
    """Few distinct values, so nearly every boundary falls inside a group of equal logits."""
    return torch.randint(-4, 4, (batch, vocab), generator=torch.Generator().manual_seed(seed)).float()


def hf(warper, logits, input_ids=None):
    input_ids = torch.zeros(logits.shape[0], 1, dtype=torch.long) if input_ids is None else input_ids
    return warper(input_ids, logits.clone())


def assert_same_distribution(ours, theirs):
    kept_ours, kept_theirs = torch.isfinite(ours), torch.isfinite(theirs)
    assert torch.equal(kept_ours, kept_theirs), f"kept sets differ in {(kept_ours != kept_theirs).sum()} tokens"
    torch.testing.assert_close(ours.softmax(-1), theirs.softmax(-1), atol=PROB_TOL, rtol=0)


SCALES = [1.0, 3.0, 10.0]  # flat to peaked distributions


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("t", [0.25, 0.7, 1.0, 1.8])
def test_temperature(t, scale):
    logits = random_logits(0, scale)
    assert torch.equal(Temperature(t)(logits), hf(TemperatureLogitsWarper(t), logits))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("k", [1, 2, 10, 100, 999, 1000, 5000])
def test_top_k(k, scale):
    logits = random_logits(1, scale)
    assert_same_distribution(TopK(k)(logits), hf(TopKLogitsWarper(k), logits))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("p", [0.01, 0.3, 0.5, 0.8, 0.9, 0.95, 0.999, 1.0])
def test_top_p(p, scale):
    logits = random_logits(2, scale)
    assert_same_distribution(TopP(p)(logits), hf(TopPLogitsWarper(p), logits))


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("min_p", [0.0, 0.01, 0.1, 0.5, 0.9, 1.0])
def test_min_p(min_p, scale):
    logits = random_logits(3, scale)
    assert_same_distribution(MinP(min_p)(logits), hf(MinPLogitsWarper(min_p), logits))


@pytest.mark.parametrize("penalty", [0.5, 1.0, 1.3, 2.0])
def test_repetition_penalty(penalty):
    logits = random_logits(4, 3.0)
    history = torch.randint(0, VOCAB, (BATCH, 200), generator=torch.Generator().manual_seed(4))  # has repeats
    seen = token_counts(history.tolist(), VOCAB, "cpu") > 0
    ours = RepetitionPenalty(penalty, seen)(logits)
    assert torch.equal(ours, hf(RepetitionPenaltyLogitsProcessor(penalty), logits, history))


@pytest.mark.parametrize("t, k, p, min_p", [
    (0.7, 50, 0.9, 0.0), (1.3, 0, 0.8, 0.05), (0.5, 5, 1.0, 0.2), (1.0, 200, 0.5, 0.01), (2.0, 0, 0.95, 0.1),
])
def test_chain_built_by_the_sampler_matches_transformers(t, k, p, min_p):
    """Sampler.processors builds the per-row tensors; the chain equals transformers' warpers in the same order."""
    logits = random_logits(5, 3.0)
    penalties, warpers = Sampler().processors([SamplingParams(temperature=t, top_k=k, top_p=p, min_p=min_p)] * BATCH,
                                              VOCAB, logits.device)
    assert penalties == []
    ours = logits
    for warper in warpers:
        ours = warper(ours)
    chain = [TemperatureLogitsWarper(t)] + ([TopKLogitsWarper(k)] if k else []) + \
        ([TopPLogitsWarper(p)] if p < 1 else []) + ([MinPLogitsWarper(min_p)] if min_p else [])
    assert_same_distribution(ours, hf(LogitsProcessorList(chain), logits))


def test_per_row_parameters_match_transformers_row_by_row():
    logits = random_logits(6, 3.0)
    ks = [0, 1, 7, 50, 0, 999, 3, 1000]
    ps = [1.0, 0.9, 0.5, 0.99, 0.2, 1.0, 0.75, 0.6]
    ms = [0.0, 0.3, 0.0, 0.05, 0.9, 0.01, 0.0, 0.2]
    ours = MinP(torch.tensor(ms))(TopP(torch.tensor(ps))(TopK(torch.tensor(ks))(logits)))
    for row in range(BATCH):
        chain = ([TopKLogitsWarper(ks[row])] if ks[row] else []) + [TopPLogitsWarper(ps[row]),
                                                                      MinPLogitsWarper(ms[row])]
        assert_same_distribution(ours[row:row + 1], hf(LogitsProcessorList(chain), logits[row:row + 1]))


# ---------------------------------------------------------------- ties

@pytest.mark.parametrize("seed", range(3))
def test_ties_top_k_and_min_p_agree_exactly(seed):
    """Both libraries compare against a threshold value, so every token tied with it is kept."""
    logits = tied_logits(seed)
    for k in (1, 3, 10, 40):
        assert_same_distribution(TopK(k)(logits), hf(TopKLogitsWarper(k), logits))
        assert (torch.isfinite(TopK(k)(logits)).sum(-1) >= k).all()  # ties can keep more than k
    for min_p in (0.1, 0.3, 0.5, 1.0):
        assert_same_distribution(MinP(min_p)(logits), hf(MinPLogitsWarper(min_p), logits))


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("p", [0.1, 0.3, 0.5, 0.7, 0.9])
def test_ties_top_p_keeps_the_whole_tie_group_transformers_keeps_part_of_it(p, seed):
    logits = tied_logits(seed)
    ours, theirs = torch.isfinite(TopP(p)(logits)), torch.isfinite(hf(TopPLogitsWarper(p), logits))
    probs = logits.softmax(-1)
    boundary = probs.masked_fill(~theirs, 2.0).amin(-1, keepdim=True)  # least likely token transformers kept
    assert (ours >= theirs).all()  # we never drop a token transformers keeps...
    assert torch.equal(ours, probs >= boundary)  # ...and add exactly the tokens tied with its boundary
    # and our set does not depend on how tokens are ordered
    perm = torch.randperm(logits.shape[-1], generator=torch.Generator().manual_seed(seed))
    assert torch.equal(torch.isfinite(TopP(p)(logits[:, perm])), ours[:, perm])


def test_ties_top_p_example_where_the_libraries_differ():
    logits = torch.tensor([[0.2, 0.4, 0.2, 0.2]]).log()  # nucleus 0.7 needs 0.4 and any one... two 0.2s
    assert torch.isfinite(TopP(0.7)(logits)).sum() == 4
    assert torch.isfinite(hf(TopPLogitsWarper(0.7), logits)).sum() == 3


# ---------------------------------------------------------------- empirical distributions

N_DRAWS = 200_000
TV_TOL = 0.01  # expected TV at 200k draws over 20 tokens is ~0.004


def target_and_draws(params, sampler, generators=None, n=N_DRAWS):
    logits = random_logits(7, 1.5, batch=1, vocab=20)
    chain = [TemperatureLogitsWarper(float(params.temperature))]
    chain += [TopKLogitsWarper(params.top_k)] if params.top_k else []
    chain += [TopPLogitsWarper(params.top_p)] if params.top_p < 1 else []
    chain += [MinPLogitsWarper(params.min_p)] if params.min_p else []
    target = hf(LogitsProcessorList(chain), logits).softmax(-1)[0].double()
    tokens = sampler(logits.expand(n, -1), [params] * n, generators)
    return target, torch.bincount(tokens, minlength=20).double()


def assert_matches(target, counts):
    n = counts.sum()
    tv = 0.5 * (counts / n - target).abs().sum().item()
    assert tv < TV_TOL, f"total variation {tv:.4f}"
    assert counts[target == 0].sum() == 0, "drew a filtered token"
    kept = target > 0
    df = int(kept.sum()) - 1
    if df:
        chi2 = ((counts[kept] - n * target[kept]) ** 2 / (n * target[kept])).sum().item()
        assert chi2 < df + 6 * (2 * df) ** 0.5, f"chi-square {chi2:.1f} with {df} degrees of freedom"


@pytest.mark.parametrize("params", [
    SamplingParams(),
    SamplingParams(temperature=0.6),
    SamplingParams(top_k=5),
    SamplingParams(top_p=0.8),
    SamplingParams(min_p=0.1),
    SamplingParams(temperature=1.4, top_k=12, top_p=0.9, min_p=0.02),
], ids=["plain", "temperature", "top_k", "top_p", "min_p", "all"])
def test_draws_follow_the_filtered_distribution(params):
    assert_matches(*target_and_draws(params, Sampler(seed=0)))


def test_per_request_generators_draw_from_the_same_distribution():
    n = 20_000  # one generator per row; looser bound for 10x fewer draws
    params = SamplingParams(top_p=0.9, seed=0)
    target, counts = target_and_draws(params, Sampler(), [make_generator(i) for i in range(n)], n)
    tv = 0.5 * (counts / n - target).abs().sum().item()
    assert tv < 0.03, f"total variation {tv:.4f}"
