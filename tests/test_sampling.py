"""llmcore.sampling: validation, each processor on hand-checked cases, the batched sampler, properties."""
import math
import re

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcore.sampling import (
    LogitBias,
    MinP,
    PresenceFrequencyPenalty,
    RepetitionPenalty,
    Sampler,
    SamplingParams,
    Temperature,
    TopK,
    TopP,
    check_prompt_length,
    entropy,
    make_generator,
    sample,
    token_counts,
)

INF = math.inf


def _logits(probs):
    return torch.tensor(probs, dtype=torch.float32).log()[None]


def _kept(logits):
    return torch.isfinite(logits)[0].tolist()


# ---------------------------------------------------------------- validation gate

@pytest.mark.parametrize("field, value", [
    ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf), ("temperature", "1"),
    ("top_p", 0.0), ("top_p", 1.01), ("top_p", -0.5),
    ("top_k", -1), ("top_k", 2.5), ("top_k", True),
    ("min_p", -0.01), ("min_p", 1.5),
    ("max_tokens", 0), ("max_tokens", 3.0),
    ("min_tokens", -1), ("min_tokens", 300),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0),
    ("presence_penalty", 2.5), ("presence_penalty", -2.01), ("frequency_penalty", 3),
    ("logit_bias", {-1: 1.0}), ("logit_bias", {3: math.nan}), ("logit_bias", {"a": 1.0}), ("logit_bias", [1]),
    ("stop", [""]), ("stop", "stop"), ("stop", [None]),
    ("stop_token_ids", [-2]), ("stop_token_ids", [1.0]),
    ("seed", -1), ("seed", 2**64), ("seed", 1.5),
    ("include_stop_str_in_output", 1),
])
def test_invalid_params_name_the_field_and_the_value(field, value):
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field} must be .* got " + re.escape(repr(value))):
        SamplingParams(**{field: value})


def test_valid_params_and_edges():
    SamplingParams(temperature=0, top_p=1, top_k=0, min_p=1, max_tokens=1, min_tokens=1,
                   presence_penalty=-2, frequency_penalty=2, repetition_penalty=0.5, logit_bias={0: -100},
                   stop=["\n\n"], stop_token_ids=[0, 2], seed=0, include_stop_str_in_output=True)
    assert SamplingParams(temperature=0).greedy and not SamplingParams(temperature=0.1).greedy


def test_sampler_revalidates_params_edited_after_construction():
    params = SamplingParams()
    params.top_p = 2.0
    with pytest.raises(ValueError, match="top_p"):
        Sampler()(torch.zeros(1, 5), [params])


@pytest.mark.parametrize("n_prompt, max_tokens, window, truncate, keep", [
    (10, 5, 20, False, 10), (15, 5, 20, False, 15), (15, 5, 20, True, 15),
    (30, 5, 20, True, 15), (18, 5, 20, True, 15),
])
def test_check_prompt_length_keeps(n_prompt, max_tokens, window, truncate, keep):
    assert check_prompt_length(n_prompt, max_tokens, window, truncate) == keep


@pytest.mark.parametrize("args, message", [
    ((30, 5, 20), r"prompt \(30 tokens\) does not fit the context window \(20\) with max_tokens=5; "
                  r"shorten it to 15 tokens or pass truncate=True"),
    ((18, 5, 20), r"prompt \(18 tokens\) \+ max_tokens \(5\) exceeds the context window \(20\); "
                  r"lower max_tokens to at most 2, shorten the prompt to 15 tokens, or pass truncate=True"),
    ((5, 20, 20), r"max_tokens=20 leaves no room for a prompt .* at most 19"),
    ((0, 5, 20), r"n_prompt_tokens must be an int >= 1, got 0"),
    ((5, 0, 20), r"max_tokens must be an int >= 1, got 0"),
    ((5, 5, 1), r"context_window must be an int >= 2, got 1"),
    ((5.0, 5, 20), r"n_prompt_tokens must be an int >= 1, got 5.0"),
])
def test_check_prompt_length_errors(args, message):
    with pytest.raises(ValueError, match=message):
        check_prompt_length(*args)


def test_truncation_cannot_make_room_when_max_tokens_fills_the_window():
    with pytest.raises(ValueError, match="leaves no room"):
        check_prompt_length(5, 20, 20, truncate=True)


# ---------------------------------------------------------------- processors, hand-checked

def test_repetition_penalty_divides_positive_and_multiplies_negative_seen_logits():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    seen = torch.tensor([[True, True, False, False]])
    assert RepetitionPenalty(2.0, seen)(logits).tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_presence_and_frequency_penalties_follow_openai():
    logits = torch.zeros(1, 4)
    counts = token_counts([[1, 2, 2, 2]], 4, "cpu")
    assert counts.tolist() == [[0, 1, 3, 0]]
    out = PresenceFrequencyPenalty(0.5, 0.25, counts)(logits)
    assert out.tolist() == [[0.0, -0.75, -1.25, 0.0]]


def test_logit_bias_and_temperature():
    logits = torch.tensor([[1.0, 2.0, 3.0]])
    assert LogitBias(torch.tensor([[0.0, -1.0, 10.0]]))(logits).tolist() == [[1.0, 1.0, 13.0]]
    assert Temperature(0.5)(logits).tolist() == [[2.0, 4.0, 6.0]]
    assert Temperature(0.0)(logits).tolist() == logits.tolist()  # greedy rows are decided elsewhere


def test_top_k_keeps_k_largest_and_every_tie_with_the_kth():
    logits = torch.tensor([[1.0, 5.0, 3.0, 3.0, 0.0]])
    assert _kept(TopK(1)(logits)) == [False, True, False, False, False]
    assert _kept(TopK(2)(logits)) == [False, True, True, True, False]  # 3.0 twice: both kept
    assert _kept(TopK(0)(logits)) == [True] * 5
    assert _kept(TopK(99)(logits)) == [True] * 5


def test_top_p_keeps_the_smallest_nucleus():
    logits = _logits([0.05, 0.5, 0.15, 0.3])
    assert _kept(TopP(0.5)(logits)) == [False, True, False, False]
    assert _kept(TopP(0.75)(logits)) == [False, True, False, True]
    assert _kept(TopP(0.9)(logits)) == [False, True, True, True]
    assert _kept(TopP(0.01)(logits)) == [False, True, False, False]  # never empty
    assert _kept(TopP(1.0)(logits)) == [True] * 4


def test_top_p_keeps_all_tokens_tied_at_the_boundary():
    # Any two of the 0.2 tokens complete the nucleus of 0.7; which two would depend on sort order,
    # so all three are kept (transformers keeps exactly two, whichever its sort puts first).
    logits = _logits([0.2, 0.4, 0.2, 0.2])
    assert _kept(TopP(0.7)(logits)) == [True] * 4
    assert _kept(TopP(0.4)(logits)) == [False, True, False, False]


def test_min_p_is_relative_to_the_top_probability():
    logits = _logits([0.5, 0.3, 0.15, 0.05])
    assert _kept(MinP(0.2)(logits)) == [True, True, True, False]   # threshold 0.1
    assert _kept(MinP(0.5)(logits)) == [True, True, False, False]  # threshold 0.25
    assert _kept(MinP(1.0)(logits)) == [True, False, False, False]
    assert _kept(MinP(0.0)(logits)) == [True] * 4


def test_processors_take_one_value_per_row_and_disabled_rows_are_unchanged():
    torch.manual_seed(0)
    logits = torch.randn(4, 50)
    for cls, values, off in ((TopK, [0, 3, 10, 0], 0), (TopP, [1.0, 0.3, 0.9, 1.0], 1.0),
                             (MinP, [0.0, 0.1, 0.5, 0.0], 0.0), (Temperature, [1.0, 0.5, 2.0, 0.0], 1.0)):
        out = cls(torch.tensor(values))(logits)
        for row, value in enumerate(values):
            assert torch.equal(out[row], cls(value)(logits[row:row + 1])[0]), (cls, row)
            if value == off:
                assert torch.equal(out[row], logits[row])
    with pytest.raises(ValueError, match=r"expected a scalar or \(4,\)"):
        TopK(torch.tensor([1, 2]))(logits)


# ---------------------------------------------------------------- entropy

def test_entropy_in_nats():
    assert entropy(torch.zeros(8)).item() == pytest.approx(math.log(8))
    assert entropy(torch.tensor([0.0, -INF, -INF])).item() == 0.0
    assert entropy(torch.tensor([[0.0, 0.0, -INF]])).tolist() == pytest.approx([math.log(2)])
    torch.manual_seed(0)
    logits = torch.randn(100)
    values = [entropy(logits / t).item() for t in (0.1, 0.5, 1.0, 2.0, 10.0)]
    assert values == sorted(values) and values[-1] < math.log(100)  # hotter = more uncertain


# ---------------------------------------------------------------- sampler

def test_greedy_is_argmax_even_with_filters_set():
    torch.manual_seed(0)
    logits = torch.randn(16, 100)
    params = [SamplingParams(temperature=0, top_k=5, top_p=0.1, min_p=0.9)] * 16
    assert torch.equal(Sampler()(logits, params), logits.argmax(-1))
    assert torch.equal(Sampler()(logits, [SamplingParams(temperature=0, seed=1)] * 16), logits.argmax(-1))
    assert sample(logits[3], SamplingParams(temperature=0)) == logits[3].argmax().item()


def test_greedy_sees_penalties_and_bias():
    logits = torch.tensor([[3.0, 2.0, 1.0]])
    params = [SamplingParams(temperature=0, repetition_penalty=2.0)]
    assert Sampler()(logits, params, prompt_ids=[[0]], output_ids=[[]]).item() == 1  # 3/2 < 2
    assert sample(logits[0], SamplingParams(temperature=0, logit_bias={2: 5.0})) == 2


def test_mixed_batch_rows_follow_their_own_params():
    logits = torch.tensor([[0.0, 1.0, 5.0, 0.0]] * 4)
    params = [SamplingParams(temperature=0), SamplingParams(top_k=1), SamplingParams(logit_bias={0: 50.0}),
              SamplingParams(temperature=0, logit_bias={3: 9.0})]
    for _ in range(20):
        assert Sampler()(logits, params).tolist() == [2, 2, 0, 3]


def test_drawn_token_is_always_kept():
    torch.manual_seed(1)
    logits = torch.randn(2000, 30)
    params = [SamplingParams(top_k=3)] * 2000 + [SamplingParams(top_p=0.3)] * 2000 + [SamplingParams(min_p=0.6)] * 2000
    tokens = Sampler()(logits.repeat(3, 1), params).view(3, 2000).T  # column j: the j-th filter
    ranks = logits.argsort(dim=-1, descending=True).argsort(dim=-1).gather(1, tokens[:, :1])
    assert (ranks < 3).all()
    for col, proc in ((1, TopP(0.3)), (2, MinP(0.6))):
        assert torch.isfinite(proc(logits).gather(1, tokens[:, col:col + 1])).all()


def test_seeded_request_draws_the_same_tokens_alone_or_in_any_batch():
    torch.manual_seed(0)
    vocab, steps = 40, 8
    steps_logits = torch.randn(steps, 5, vocab)
    mine = SamplingParams(seed=1234, top_p=0.9, temperature=1.3, repetition_penalty=1.2, presence_penalty=0.5)

    def run(batch_params, row_of_mine):
        sampler = Sampler()  # unseeded: other rows use torch's global stream
        gens = [make_generator(p.seed) if p.seed is not None else None for p in batch_params]
        outputs = [[] for _ in batch_params]
        for step in range(steps):
            logits = steps_logits[step, :len(batch_params)].clone()
            logits[row_of_mine] = steps_logits[step, 0]
            tokens = sampler(logits, batch_params, gens, [[1, 2]] * len(batch_params), outputs)
            for row, t in enumerate(tokens.tolist()):
                outputs[row].append(t)
        return outputs[row_of_mine]

    alone = run([mine], 0)
    assert run([SamplingParams(), mine, SamplingParams(seed=7, top_k=3)], 1) == alone
    torch.manual_seed(99)
    assert run([SamplingParams(temperature=0), SamplingParams(min_p=0.2), SamplingParams(seed=5), mine], 3) == alone
    assert len(set(alone)) > 1  # the stream advances: not the same draw every step


def test_shared_generator_seed_reproduces_a_whole_batch():
    logits = torch.randn(64, 20)
    params = [SamplingParams()] * 64
    assert torch.equal(Sampler(seed=3)(logits, params), Sampler(seed=3)(logits, params))
    assert not torch.equal(Sampler(seed=3)(logits, params), Sampler(seed=4)(logits, params))
    assert sample(logits[0], SamplingParams(seed=11)) == sample(logits[0], SamplingParams(seed=11))


def test_sampler_errors_are_clear():
    logits = torch.zeros(2, 5)
    two = [SamplingParams()] * 2
    with pytest.raises(ValueError, match=r"logits must be \(batch, vocab\)"):
        Sampler()(torch.zeros(5), two)
    with pytest.raises(ValueError, match="params has 1 entries for 2 rows"):
        Sampler()(logits, two[:1])
    with pytest.raises(ValueError, match="row 1 has seed=3 but no generator"):
        Sampler()(logits, [SamplingParams(), SamplingParams(seed=3)])
    with pytest.raises(ValueError, match=r"logit_bias token id 9 \(row 0\) is outside the vocabulary \[0, 5\)"):
        Sampler()(logits, [SamplingParams(logit_bias={9: 1.0})] * 2)
    with pytest.raises(ValueError, match="repetition_penalty needs the tokens seen so far"):
        Sampler()(logits, [SamplingParams(repetition_penalty=1.1)] * 2)
    with pytest.raises(ValueError, match="presence/frequency penalties need the generated tokens"):
        Sampler()(logits, [SamplingParams(frequency_penalty=1)] * 2)
    with pytest.raises(ValueError, match=r"ids outside \[0, 5\): min 0, max 7"):
        Sampler()(logits, [SamplingParams(frequency_penalty=1)] * 2, output_ids=[[0], [7]])
    with pytest.raises(ValueError, match="one row of logits"):
        sample(logits, SamplingParams())


def test_sampler_accepts_half_precision_logits():
    logits = torch.randn(3, 10).to(torch.bfloat16)
    tokens = Sampler(seed=0)(logits, [SamplingParams(top_p=0.8)] * 3)
    assert tokens.dtype == torch.long and tokens.shape == (3,)


# ---------------------------------------------------------------- properties

finite_logit = st.floats(-30, 30, allow_nan=False, width=32)
tied_logit = st.integers(-3, 3).map(float)  # few distinct values: many ties


@st.composite
def logits_batches(draw):
    vocab = draw(st.integers(1, 24))
    rows = draw(st.lists(st.lists(st.one_of(finite_logit, tied_logit), min_size=vocab, max_size=vocab),
                         min_size=1, max_size=4))
    logits = torch.tensor(rows, dtype=torch.float32)
    masked = torch.tensor(draw(st.lists(st.lists(st.booleans(), min_size=vocab, max_size=vocab),
                                        min_size=len(rows), max_size=len(rows))))
    masked[:, 0] = False  # -inf where drawn, but every row keeps at least one finite logit
    return logits.masked_fill(masked, -INF)


def processors_for(draw, logits):
    b, v = logits.shape
    per_row = lambda s: torch.tensor(draw(st.lists(s, min_size=b, max_size=b)))  # noqa: E731
    counts = torch.tensor(draw(st.lists(st.lists(st.integers(0, 3), min_size=v, max_size=v), min_size=b, max_size=b)))
    return [
        RepetitionPenalty(per_row(st.floats(0.1, 5.0)), counts > 0),
        PresenceFrequencyPenalty(per_row(st.floats(-2, 2)), per_row(st.floats(-2, 2)), counts),
        LogitBias(torch.tensor(draw(st.lists(st.lists(st.floats(-100, 100), min_size=v, max_size=v),
                                             min_size=b, max_size=b)))),
        Temperature(per_row(st.floats(0, 5))),
        TopK(per_row(st.integers(0, v + 2))),
        TopP(per_row(st.floats(1e-6, 1.0))),
        MinP(per_row(st.floats(0.0, 1.0))),
    ]


@settings(max_examples=150, deadline=None)
@given(st.data(), logits_batches())
def test_processors_never_edit_input_and_always_keep_a_token(data, logits):
    out = logits
    for processor in processors_for(data.draw, logits):
        before = out.clone()
        step = processor(out)
        name = type(processor).__name__
        assert torch.equal(out, before), f"{name} edited its input"
        assert step is not out and step.shape == out.shape
        assert torch.isfinite(step).any(dim=-1).all(), f"{name} removed every token of a row"
        out = step
    # the most likely token survives all the filters
    for processor in (TopK(1), TopP(1e-9), MinP(1.0)):
        kept = processor(logits)
        assert torch.isfinite(kept.gather(1, logits.argmax(-1, keepdim=True))).all()


@settings(max_examples=100, deadline=None)
@given(logits_batches(), st.floats(0, 1e-6), st.integers(0, 5), st.floats(1e-3, 1.0), st.floats(0, 1))
def test_greedy_equals_argmax_and_sampler_does_not_edit_logits(logits, temperature, top_k, top_p, min_p):
    before = logits.clone()
    params = [SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p)] * len(logits)
    assert torch.equal(Sampler()(logits, params), logits.argmax(-1))
    sampled = Sampler(seed=0)(logits, [SamplingParams(top_k=top_k, top_p=top_p, min_p=min_p)] * len(logits))
    assert torch.isfinite(logits.gather(1, sampled[:, None])).all()
    assert torch.equal(logits, before)
