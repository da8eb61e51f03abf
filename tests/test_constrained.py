"""Tests for llmcore.constrained: the JSON automaton, the vocabulary mask and constrained sampling."""
import json
import random

import pytest
import torch

from llmcore.constrained import (OBJECT_START, VALUE_START, JsonConstraint, is_complete, json_state,
                                 json_step)
from llmcore.generate import generate
from llmcore.model import ModelConfig, Transformer
from llmcore.pretrained import load_tokenizer
from llmcore.sampling import SamplingParams

VALID = ['{"a": 1, "b": [true, false, null], "c": {"d": "\\u00e9\\n\\"x\\""}, "f": -0.5e+10}', "[]", "{}", "0",
         "-12.5E3", '"x"', '[1,2,[3,[4]], {"k":[]}]', '  { "a" : "b" }  ', "true", '{"x": "\u65e5\u672c"}', "1e5"]
INVALID = ['{"a" 1}', "[1,]", "{,}", "01", '"\x01"', '{"a":1}}', "tru e", "[1 2]", '{"a":}', ".5", "+1",
           "{1:2}", '"\\x"', "[,1]", '{"a":1,}', "nul", "[1]]", '{"a":1 "b":2}', "--1", "1.e5"]


@pytest.mark.parametrize("text", VALID)
def test_valid_documents_and_all_their_prefixes_are_accepted(text):
    data = text.encode()
    assert is_complete(json_state(data))
    assert all(json_state(data[:i]) is not None for i in range(len(data)))


@pytest.mark.parametrize("text", INVALID)
def test_invalid_documents_are_never_complete(text):
    assert not is_complete(json_state(text))


def test_the_automaton_agrees_with_json_loads_on_random_strings():
    rng = random.Random(1)
    alphabet = b'{}[]:,"\\ 0123456789.-+eEtrufalsn\n'
    for _ in range(30_000):
        text = bytes(rng.choice(alphabet) for _ in range(rng.randint(1, 9)))
        try:
            json.loads(text)
            parses = True
        except ValueError:
            parses = False
        assert is_complete(json_state(text, VALUE_START)) == parses, text


def test_object_start_accepts_only_an_object():
    assert json_state("[1]", OBJECT_START) is None and json_state("1", OBJECT_START) is None
    assert is_complete(json_state(' {"a": [1]} \n', OBJECT_START))
    assert json_step(("END",), ord("x")) is None


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer("tiny")


def test_the_mask_allows_exactly_the_tokens_that_continue_valid_json(tokenizer):
    constraint = JsonConstraint(tokenizer)
    special = set(tokenizer.special_tokens.values())
    for state in (OBJECT_START, json_state('{"key": ', OBJECT_START), json_state('{"a": [1, "tex', OBJECT_START)):
        mask = constraint.allowed(state)
        for token in range(tokenizer.vocab_size):
            ok = token not in special and json_state(tokenizer.decode_bytes([token]), state) is not None
            assert bool(mask[token]) == ok, (state, tokenizer.decode_bytes([token]))
    with pytest.raises(ValueError, match="do not continue valid JSON"):
        constraint.advance(OBJECT_START, b"x")


def test_sampled_outputs_always_parse_when_finished(tokenizer):
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=tokenizer.vocab_size, dim=32, n_layers=2, n_heads=4, n_kv_heads=2,
                                    hidden_dim=48, max_position_embeddings=256)).eval()
    constraint = JsonConstraint(tokenizer)
    finished = 0
    for seed in range(12):
        params = SamplingParams(temperature=1.0, max_tokens=40, seed=seed)
        result = generate(model, tokenizer, [1, 2, 3], params, constraint=constraint)
        text, finish = result.text, result.finish_reason
        if finish == "stop":
            assert isinstance(json.loads(text), dict)
            finished += 1
        else:
            assert finish == "length" and json_state(text.encode(), OBJECT_START) is not None
    assert finished > 0


def test_mask_logits_makes_each_states_mask_once_per_device():
    """The mask for a state is built (and moved to the logits' device) once, not at
    every step: on a GPU a fresh mask would be a host-to-device copy per token."""
    from llmcore.constrained import OBJECT_START, JsonConstraint
    from llmcore.pretrained import load

    tok = load("tiny")[1]
    c = JsonConstraint(tok)
    logits = torch.zeros(tok.vocab_size + 3)  # a model's padded vocabulary: extra ids
    first = c.mask_logits(logits, OBJECT_START)
    again = c.mask_logits(logits, OBJECT_START)
    assert torch.equal(first, again) and c._masks.cache_info().currsize == 1
    assert torch.isinf(first[tok.vocab_size:]).all()  # ids beyond the tokenizer: banned
    assert not torch.isinf(first[tok.encode("{")[0]])  # an object may start
    c.mask_logits(torch.zeros(tok.vocab_size), OBJECT_START)  # another width: its own
    assert c._masks.cache_info().currsize == 2


def test_the_caches_are_bounded_and_masks_stay_right_after_eviction(tokenizer):
    """A server meets ever more states (the nesting stack is part of the state): the
    per-state caches keep at most max_states entries, the least recently used go, and a
    state met again after its eviction gets the same mask."""
    bound = 8
    constraint = JsonConstraint(tokenizer, max_states=bound)
    reference = JsonConstraint(tokenizer)  # large enough to keep every state here
    width = tokenizer.vocab_size + 3
    # 60 distinct states: arrays and objects nested ever deeper, and strings inside them
    docs = ["[" * d for d in range(1, 21)] + ['{"a": [' * d for d in range(1, 21)]
    docs += ['[{"k": ' * d + '"s' for d in range(1, 21)]
    states = [json_state(doc, VALUE_START) for doc in docs]
    assert len(set(states)) == 60 and None not in states
    sizes = []
    for state in states + states[::-1] + states:  # the first ones come back evicted
        logits = torch.randn(width)
        got = constraint.mask_logits(logits, state)
        assert torch.equal(got, reference.mask_logits(logits, state))
        assert torch.equal(constraint.allowed(state), reference.allowed(state))
        sizes += [constraint._allowed.cache_info().currsize,
                  constraint._masks.cache_info().currsize]
    assert max(sizes) == bound and reference._allowed.cache_info().currsize == 60
    # the masks are right, not only equal to each other: brute force on a few states
    special = set(tokenizer.special_tokens.values())
    for state in (states[0], states[19], states[-1]):
        ok = [t not in special and json_state(tokenizer.decode_bytes([t]), state) is not None
              for t in range(tokenizer.vocab_size)]
        assert constraint.allowed(state).tolist() == ok


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, None, "8"])
def test_max_states_must_be_a_positive_int(tokenizer, bad):
    with pytest.raises(ValueError, match=r"max_states .* must be an int >= 1, got "):
        JsonConstraint(tokenizer, max_states=bad)


def test_one_constraint_built_in_a_thread_serves_many_threads(tokenizer):
    """The server builds it off the event loop and shares it; concurrent callers
    (and evictions under them) never see a wrong mask or an error."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        constraint = pool.submit(JsonConstraint, tokenizer, max_states=4).result()
        states = [json_state("[" * d, VALUE_START) for d in range(1, 13)]
        reference = {s: JsonConstraint(tokenizer).allowed(s) for s in states}

        def work(k):
            for state in states[k:] + states[:k]:
                logits = torch.zeros(tokenizer.vocab_size)
                banned = torch.isinf(constraint.mask_logits(logits, state))
                assert torch.equal(~banned, reference[state])
            return True

        assert all(pool.map(work, range(8)))
    assert constraint._masks.cache_info().currsize <= 4
