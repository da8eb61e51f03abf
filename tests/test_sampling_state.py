"""llmcore.sampling.PenaltyState: a request's penalty counts kept on the device and updated
one token at a time give exactly what the list path (token_counts from prompt and output
lists at every step) gives."""
import random

import pytest
import torch

from llmcore.sampling import PenaltyState, Sampler, SamplingParams, make_generator, token_counts


def _random_params(rng: random.Random) -> SamplingParams:
    greedy = rng.random() < 0.4
    return SamplingParams(
        temperature=0.0 if greedy else rng.choice([0.7, 1.0, 1.3]),
        top_k=rng.choice([0, 0, 5]),
        top_p=rng.choice([1.0, 1.0, 0.9]),
        repetition_penalty=rng.choice([1.0, 1.0, 1.3, 0.8]),
        presence_penalty=rng.choice([0.0, 0.0, 0.5, -0.7]),
        frequency_penalty=rng.choice([0.0, 0.0, 1.0, -0.4]),
        logit_bias=rng.choice([{}, {}, {3: 2.0}]),
        seed=None if greedy or rng.random() < 0.5 else rng.randrange(2**32),
    )


def _both_paths(params, prompts, vocab, steps, trial):
    """(tokens, penalised logits) per step, by the list path and by the state path."""
    logits_rng = torch.Generator().manual_seed(trial)
    steps_logits = [torch.randn(len(params), vocab, generator=logits_rng) * 3 for _ in range(steps)]
    results = []
    for use_states in (False, True):
        sampler = Sampler(seed=trial)  # the shared stream, for sampled rows without a seed
        generators = [None if p.seed is None else make_generator(p.seed) for p in params]
        outputs = [[] for _ in params]
        states = [PenaltyState(ids, vocab, "cpu", p) for ids, p in zip(prompts, params)]
        tokens, penalised = [], []
        for logits in steps_logits:
            if use_states:
                penalties, _ = sampler.processors(params, vocab, "cpu", states=states)
                drawn = sampler(logits, params, generators, states=states, validate=False)
            else:
                penalties, _ = sampler.processors(params, vocab, "cpu", prompts, outputs)
                drawn = sampler(logits, params, generators, prompts, outputs)
            out = logits
            for processor in penalties:
                out = processor(out)
            penalised.append(out)
            tokens.append(drawn.tolist())
            for row, token in enumerate(drawn.tolist()):
                outputs[row].append(token)
                states[row].add(token)
        results.append((tokens, penalised))
    return results


@pytest.mark.parametrize("trial", range(40))
def test_states_give_the_same_tokens_and_logits_as_the_lists(trial):
    rng = random.Random(trial)
    vocab = rng.choice([7, 20, 50])
    batch = rng.randint(1, 6)
    params = [_random_params(rng) for _ in range(batch)]
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(0, 12))] for _ in range(batch)]
    (tokens, logits), (tokens_s, logits_s) = _both_paths(params, prompts, vocab, 12, trial)
    assert tokens == tokens_s
    assert all(torch.equal(a, b) for a, b in zip(logits, logits_s))


def test_the_counts_a_state_keeps_act_on_the_draw():
    """Not vacuous: with the same logits at every step a greedy row would repeat one
    token; the counts its state keeps make it move on."""
    logits = torch.randn(1, 5, generator=torch.Generator().manual_seed(0))
    params = [SamplingParams(temperature=0, repetition_penalty=1.5, frequency_penalty=1.0)]
    state = PenaltyState([], 5, "cpu", params[0])
    tokens = []
    for _ in range(8):
        tokens.append(int(Sampler()(logits, params, states=[state])[0]))
        state.add(tokens[-1])
    assert tokens[0] == int(logits.argmax()) and len(set(tokens)) > 1


def test_add_after_n_tokens_equals_token_counts_of_those_tokens():
    rng = random.Random(0)
    vocab, prompt = 30, [rng.randrange(30) for _ in range(9)]
    output = [rng.randrange(vocab) for _ in range(40)]
    params = SamplingParams(repetition_penalty=1.2, presence_penalty=0.3, frequency_penalty=0.5)
    state = PenaltyState(prompt, vocab, "cpu", params)
    for token in output:
        state.add(token)
    assert state.counts.dtype == torch.int32
    assert torch.equal(state.counts, token_counts([output], vocab, "cpu")[0])
    assert torch.equal(state.seen, token_counts([prompt + output], vocab, "cpu")[0] > 0)
    resumed = PenaltyState(prompt, vocab, "cpu", params, output_ids=output)  # e.g. recomputed
    assert torch.equal(resumed.counts, state.counts) and torch.equal(resumed.seen, state.seen)


def test_a_state_holds_only_what_its_penalties_read():
    def tensors(state):
        return {k for k, v in vars(state).items() if isinstance(v, torch.Tensor)}

    assert tensors(PenaltyState([1, 2], 10, "cpu", SamplingParams(temperature=0.5, top_p=0.9,
                                                                  logit_bias={1: 3.0}))) == set()
    assert tensors(PenaltyState([1, 2], 10, "cpu", SamplingParams(repetition_penalty=1.1))) == {"seen"}
    assert tensors(PenaltyState([1, 2], 10, "cpu", SamplingParams(presence_penalty=0.2))) == {"counts"}
    assert tensors(PenaltyState([1, 2], 10, "cpu", SamplingParams(repetition_penalty=0.9,
                                                                  frequency_penalty=1))) == {"seen", "counts"}
    # a state without penalties accepts tokens and still holds nothing
    state = PenaltyState([1, 2], 10, "cpu", SamplingParams())
    state.add(3)
    assert tensors(state) == set()


def test_rows_without_penalties_may_pass_none_and_a_batch_of_them_needs_no_state():
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(0))
    plain = SamplingParams(temperature=0)
    penalised = SamplingParams(temperature=0, repetition_penalty=2.0)
    state = PenaltyState([int(logits[1].argmax())], 8, "cpu", penalised)
    got = Sampler()(logits, [plain, penalised, plain], states=[None, state, None])
    want = Sampler()(logits, [plain, penalised, plain], None, [[], list(state.seen.nonzero()[:, 0].tolist()), []],
                     [[], [], []])
    assert torch.equal(got, want)
    assert torch.equal(Sampler()(logits, [plain] * 3, states=[None] * 3), logits.argmax(-1))


def test_validate_false_skips_the_params_check():
    params = SamplingParams(temperature=0)
    params.top_p = 2.0  # edited after construction: only validate() notices
    logits = torch.zeros(1, 5)
    with pytest.raises(ValueError, match="top_p"):
        Sampler()(logits, [params], states=[None])
    assert Sampler()(logits, [params], states=[None], validate=False).tolist() == [0]


def test_bad_use_of_states_raises_a_clear_error():
    logits = torch.zeros(2, 5)
    rep = SamplingParams(repetition_penalty=1.2)
    two = [rep, rep]
    ok = [PenaltyState([1], 5, "cpu", rep) for _ in range(2)]
    with pytest.raises(ValueError, match="states has 1 entries for 2 rows"):
        Sampler()(logits, two, states=ok[:1])
    with pytest.raises(ValueError, match=r"states\[1\] is for a vocabulary of 6 tokens; the logits have 5"):
        Sampler()(logits, two, states=[ok[0], PenaltyState([1], 6, "cpu", rep)])
    with pytest.raises(ValueError, match="pass states or prompt_ids/output_ids, not both"):
        Sampler()(logits, two, None, [[1], [1]], [[], []], states=ok)
    with pytest.raises(ValueError, match="row 1's penalties need its PenaltyState's seen"):
        Sampler()(logits, two, states=[ok[0], None])
    with pytest.raises(ValueError, match="row 0's penalties need its PenaltyState's counts"):
        Sampler()(logits, [SamplingParams(frequency_penalty=1)] * 2, states=ok)
    elsewhere = PenaltyState([1], 5, "cpu", rep)
    elsewhere.seen = elsewhere.seen.to("meta")  # as if made for another device
    with pytest.raises(ValueError, match=r"states\[0\] is on meta; the logits are on cpu"):
        Sampler()(logits, two, states=[elsewhere, ok[1]])
    for token in (5, -1, 1.0, True, torch.tensor(1)):
        with pytest.raises(ValueError, match=r"token must be an int in \[0, 5\)"):
            ok[0].add(token)
    with pytest.raises(ValueError, match="vocab_size must be an int >= 1"):
        PenaltyState([1], 0, "cpu", rep)
    with pytest.raises(ValueError, match=r"ids outside \[0, 5\)"):
        PenaltyState([7], 5, "cpu", rep)
