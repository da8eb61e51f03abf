"""Tests for llmcore.constrained: the JSON automaton, the vocabulary mask and constrained sampling."""
import json
import random
import re

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
    assert finished == 12  # the budget rule closes every value within max_tokens


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


# Issue 29: JSON mode could emit only spaces (unbounded whitespace, which a small model
# trained on code takes happily) and run out of max_tokens before the value closed.

def test_whitespace_runs_outside_strings_are_bounded():
    from llmcore.constrained import MAX_WHITESPACE
    n = MAX_WHITESPACE
    assert is_complete(json_state(" " * n + "{}", OBJECT_START))
    assert json_state(" " * (n + 1), OBJECT_START) is None  # the old automaton took any run
    assert json_state("{" + "\n" + " " * (n - 1) + '"a": 1}', OBJECT_START) is not None
    assert json_state("{" + "\n" + " " * n, OBJECT_START) is None
    assert json_state('{"a"' + " " * (n + 1), OBJECT_START) is None
    assert json_state('{"a": 12' + "\t" * (n + 1), OBJECT_START) is None
    assert json_state("[1," + " \n" * n, VALUE_START) is None
    # runs reset at every token, inside strings spaces are text, after the value: free
    assert is_complete(json_state("{" + (" " * n + '"a"' + " " * n + ":" + " " * n + "1")
                                  + " " * n + "}", OBJECT_START))
    assert is_complete(json_state('{"a": "' + " " * 100 + '"}', OBJECT_START))
    assert is_complete(json_state("{}" + " \n" * 100, OBJECT_START))
    assert is_complete(json_state("12" + " " * 100, VALUE_START))


def test_pretty_printed_json_a_few_levels_deep_is_accepted():
    """The bound admits a newline and the indentation of four levels at 4 spaces (17
    bytes) or nine at 2 (19); a fifth level at 4 spaces (21) is past it."""
    four = {"a": {"b": {"c": [1, True, None, "x y"]}}, "e": []}
    deep = {"a": {"b": {"c": [1, {"d": [True, {"f": {"g": None}}]}]}}}
    for doc, indent in ((four, 4), (four, 2), (deep, 2)):
        for text in (json.dumps(doc, indent=indent), json.dumps(doc),
                     json.dumps(doc, separators=(",", ":"))):
            assert is_complete(json_state(text, OBJECT_START)), (indent, text)
    assert json_state(json.dumps(deep, indent=4), OBJECT_START) is None


@pytest.mark.parametrize("text", VALID)
def test_parsing_is_unchanged_for_valid_json_with_short_whitespace_runs(text):
    state = json_state(text)
    assert is_complete(state) and isinstance(state, tuple)
    assert json.loads(text) is not None or text == "null"


def test_tokens_of_many_spaces_are_excluded_outside_strings(tokenizer):
    from llmcore.constrained import MAX_WHITESPACE
    constraint = JsonConstraint(tokenizer)
    spaces = {t: len(tokenizer.decode_bytes([t])) for t in range(tokenizer.vocab_size)
              if t not in tokenizer.special_tokens.values()
              and set(tokenizer.decode_bytes([t])) == {ord(" ")}}
    assert max(spaces.values()) > MAX_WHITESPACE  # the vocabulary has such tokens
    for written, room in (("", MAX_WHITESPACE), ("{" + " " * 15, MAX_WHITESPACE - 15),
                          ('{"a": 1' + " " * 5, MAX_WHITESPACE - 5)):
        mask = constraint.allowed(json_state(written, OBJECT_START))
        assert all(bool(mask[t]) == (n <= room) for t, n in spaces.items()), written
    inside = constraint.allowed(json_state('{"a": "', OBJECT_START))
    assert all(inside[t] for t in spaces)  # inside a string, spaces are text


def _shortest_completion(state, alphabet=b'"}]:0,{[ \\nu1aelrs'):
    """Breadth-first search over bytes: the length of the shortest text that completes."""
    frontier, seen, depth = {state}, {state}, 0
    while frontier:
        if any(is_complete(s) for s in frontier):
            return depth
        frontier = {a for s in frontier for b in alphabet
                    if (a := json_step(s, b)) is not None and a not in seen}
        seen |= frontier
        depth += 1
    raise AssertionError("no completion")


def test_bytes_to_close_is_the_length_of_the_shortest_completion():
    from llmcore.constrained import bytes_to_close
    rng = random.Random(2)
    docs = VALID + ['{"a": [[{"b": "x\\u00', '[{"k": tr', '{"a": -', '{"a": 1.', '{"a": 1e+',
                    '{"a": {}, ', '{"a"   ', '[[[', '{"x": [1, 2, {"y": "\\']
    states = set()
    for doc in docs:
        data = doc.encode()
        for _ in range(6):
            state = json_state(data[:rng.randint(0, len(data))])
            if state is not None:
                states.add(state)
    assert len(states) >= 30
    for state in states:
        assert bytes_to_close(state) == _shortest_completion(state), state


@pytest.mark.parametrize("extra", [0, 1, 3, 9])
def test_a_tight_budget_still_closes_a_nested_value_against_an_adversary(tokenizer, extra):
    """Whatever the sampler picks among the allowed tokens (here: always the one that
    leaves the most to close), the value completes within the tokens left."""
    from llmcore.constrained import bytes_to_close
    constraint = JsonConstraint(tokenizer)
    for written in ("", '{"a": [[{"b": "x', '{"a": [1, {"c": tr', '{"k": {"l": [-'):
        state = json_state(written, OBJECT_START)
        left = bytes_to_close(state) + extra
        for _ in range(left):
            mask = constraint.allowed(state, left)
            choices = [t for t in mask.nonzero().flatten().tolist()]
            token = max(choices, key=lambda t: (bytes_to_close(
                json_state(tokenizer.decode_bytes([t]), state)), t))
            state = constraint.advance(state, tokenizer.decode_bytes([token]))
            left -= 1
            if is_complete(state):
                break
        assert is_complete(state), (written, extra, state)


def test_the_budget_masks_are_cached_only_when_tight(tokenizer):
    constraint = JsonConstraint(tokenizer)
    state = json_state('{"a": [', OBJECT_START)
    logits = torch.zeros(tokenizer.vocab_size)
    loose = constraint.mask_logits(logits, state, 200)
    assert torch.equal(loose, constraint.mask_logits(logits, state))  # same as no limit
    assert constraint._tight.cache_info().currsize == 0
    tight = constraint.mask_logits(logits, state, 3)  # '0]}' is all that fits
    assert constraint._tight.cache_info().currsize == 1
    assert (~torch.isinf(tight)).sum() < (~torch.isinf(loose)).sum()
    assert torch.isinf(tight[tokenizer.encode("[")[0]])  # one more level cannot close
    assert not torch.isinf(tight[tokenizer.encode("0")[0]])


def test_a_budget_too_small_for_any_value_ends_with_length(tokenizer):
    """As OpenAI's API: a max_tokens too few to close the value is accepted, and the
    reply ends unfinished with "length"; can_close tells a caller beforehand."""
    from llmcore.generate import Reply
    # 7 bytes close it ("]]]]]]}"), 6 tokens with the vocabulary's "]]", never 5
    deep = JsonConstraint(tokenizer, start=json_state('{"a": [[[[[[', OBJECT_START))
    assert not deep.can_close(deep.start, 5) and deep.can_close(deep.start, 6)
    reply = Reply(tokenizer, SamplingParams(max_tokens=5), 1, constraint=deep)
    for _ in range(5):  # whatever the mask allows, greedily
        reply.add(int(reply.mask(torch.zeros(tokenizer.vocab_size)).argmax()), 0.0)
    assert reply.done and reply.finish_reason == "length"
    assert not deep.is_complete(reply.json_state)
    Reply(tokenizer, SamplingParams(max_tokens=6), 1, constraint=deep)
    # a whole "{}" is one token of the tiny vocabulary: one token is enough for an object
    Reply(tokenizer, SamplingParams(max_tokens=1), 1, constraint=JsonConstraint(tokenizer))


@pytest.fixture(scope="module")
def tiny_model():
    from llmcore.pretrained import load
    return load("tiny")[0]


def test_json_mode_never_emits_only_whitespace_and_always_closes(tokenizer, tiny_model):
    """Issue 29's reproduction: prompt "x = {", T=0.8, max_tokens 64. Seeds 0 and 3 gave
    64 spaces and finish_reason "length" before the whitespace bound."""
    constraint = JsonConstraint(tokenizer)
    for seed in range(12):
        for max_tokens in (64, 6):
            params = SamplingParams(temperature=0.8, max_tokens=max_tokens, seed=seed)
            result = generate(tiny_model, tokenizer, "x = {", params, constraint=constraint)
            assert result.text.strip(), (seed, max_tokens)
            assert result.finish_reason == "stop", (seed, max_tokens, result.text)
            assert isinstance(json.loads(result.text), dict)
            assert len(result.token_ids) <= max_tokens


def test_a_servers_budget_below_max_tokens_also_closes_the_value(tokenizer, tiny_model):
    constraint = JsonConstraint(tokenizer)
    prompt = tokenizer.encode("x = {")
    for seed in range(4):
        params = SamplingParams(temperature=1.0, max_tokens=64, seed=seed)
        result = generate(tiny_model, tokenizer, prompt, params, constraint=constraint,
                          budget_tokens=len(prompt) + 5)
        assert result.finish_reason == "stop" and isinstance(json.loads(result.text), dict)


# ---------------------------------------------------------------- choices and regexes
from llmcore.constrained import ChoiceGrammar, RegexError, RegexGrammar  # noqa: E402

PATTERNS = [r"[a-z]+", r"\d{3}-\d{4}", r"(foo|bar)baz?", r"^[A-Z][a-z]*( [A-Z][a-z]*)*$",
            r"[^0-9]{2,3}", r"a.c", r"(?:ab|cd)*e", r"[\w.+-]+@[\w-]+\.[a-z]{2,}",
            r"\d{4}-\d{2}-\d{2}", r"[äöü€😀]+x", r"x{0,2}y", r"[-a]b", r"\.\*\\", r"(a|)b",
            r"\u00e9+", r"[^\s]+", r"(?P<y>\d+)/(?P<m>\d+)", r"a{2,}", r"[\x41-\x43]{2}?"]


def _reads(grammar, text: str) -> bool:
    state = grammar.start
    for b in text.encode():
        state = grammar.step(state, b)
        if state is None:
            return False
    return grammar.is_complete(state)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_regex_automaton_agrees_with_re_fullmatch(pattern):
    import re
    grammar, reference = RegexGrammar(pattern), re.compile(pattern, re.ASCII)
    rng = random.Random(pattern)
    alphabet = "abcefoxyzABZ019-.@ _+/\\*éäöü€😀\n"
    for _ in range(1500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9)))
        assert _reads(grammar, text) == bool(reference.fullmatch(text)), text


@pytest.mark.parametrize("pattern, text", [(r"\d{3}-\d{4}", "555-1234"),
                                           (r"[äöü€😀]+x", "ä😀x"),
                                           (r"(foo|bar)baz?", "barba")])
def test_bytes_to_close_counts_the_shortest_completion(pattern, text):
    grammar = RegexGrammar(pattern)
    data, state = text.encode(), grammar.start
    for i, b in enumerate(data):  # at every byte, even inside a character
        need = grammar.bytes_to_close(state)
        assert 0 < need <= len(data) - i
        state = grammar.step(state, b)
    assert grammar.bytes_to_close(state) == 0 if grammar.is_complete(state) else 1


@pytest.mark.parametrize("pattern, message", [
    (r"(a", "without its ')'"), (r"a)", "without its '('"),
    (r"(a)\1", "backreference"), (r"(?=a)b", "lookaround"), (r"a{3,1}", "second"),
    (r"*a", "nothing to repeat"), (r"[a", "without its ']'"), (r"a\bb", "boundary"),
    (r"a^b", "only at its ends"), (r"a{5000}{5000}", "automaton states"),
    (r"[z-a]", "class range"), (r"[^\x00-\uffff\U00010000]", "\\U")])
def test_a_pattern_outside_the_subset_is_refused_naming_why(pattern, message):
    with pytest.raises(RegexError, match=re.escape(message)):
        RegexGrammar(pattern)


def test_a_regex_reply_may_stop_where_the_text_is_whole_or_go_on(tokenizer, tiny_model):
    eos = tokenizer.special_tokens["<|endoftext|>"]
    words = JsonConstraint(tokenizer, grammar=RegexGrammar(r"[a-z]+"))
    ended = generate(tiny_model, tokenizer, "x = 1", SamplingParams(
        temperature=0, max_tokens=8, logit_bias={eos: 50.0}), constraint=words)
    # a whole match lets the stop token through: drawn at once, once a letter is in
    assert ended.finish_reason == "stop" and ended.token_ids[-1] == eos
    assert len(ended.token_ids) == 2 and ended.text.isalpha()
    longer = generate(tiny_model, tokenizer, "x = 1", SamplingParams(
        temperature=0, max_tokens=8, logit_bias={eos: -50.0}), constraint=words)
    assert longer.finish_reason == "length" and longer.text.isalpha()
    assert len(longer.token_ids) == 8 and eos not in longer.token_ids
    # a choice that is the start of another: both can be written
    yes = JsonConstraint(tokenizer, grammar=ChoiceGrammar(["yes", "yes, please"]))
    for bias, want in ((50.0, "yes"), (-50.0, "yes, please")):
        reply = generate(tiny_model, tokenizer, "x = 1", SamplingParams(
            temperature=0, max_tokens=12, logit_bias={eos: bias}), constraint=yes)
        assert reply.text == want and reply.finish_reason == "stop"
