"""Properties of streaming: stop-string hold-back and the streaming invariant (hypothesis).

- However the text is cut into pieces, StopChecker ends it at the same place as find_stop on the
  whole text, and its released pieces add up to exactly that text.
- Nothing is released while it could still be the start of a stop string: the released prefix is
  at most len(text) - (len(longest stop) - 1) characters until the generation ends.
- stream() on a scripted model: the deltas add up to the non-streamed text, never contain a stop
  string or half a character (no U+FFFD from a split character), including Chinese and emoji
  split across byte tokens.
"""
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_generate import ScriptedModel

from llmcore.generate import Delta, GenerationResult, StopChecker, find_stop, generate, stream
from llmcore.sampling import SamplingParams
from llmcore.tokenizer import Tokenizer

TOK = Tokenizer.load(Path(__file__).resolve().parent.parent / "llmcore" / "data" / "tokenizer.llmcore.json")

SMALL = "ab\n€😀"  # few letters, so stop strings occur often; two of them are multi-byte
RICH = "abc xyz_=():\n\t" + "数据模型你好" + "😀🚀é" + "ß"


def expected_text(full: str, stops, include: bool) -> tuple[str, str | None]:
    match = find_stop(full, stops)
    if match is None:
        return full, None
    start, stop = match
    return full[:start + len(stop) if include else start], stop


@st.composite
def split_text(draw, alphabet=SMALL, max_size=40):
    text = draw(st.text(alphabet=alphabet, max_size=max_size))
    cuts = sorted(draw(st.sets(st.integers(0, len(text)), max_size=12)))
    bounds = [0, *cuts, len(text)]
    return text, [text[a:b] for a, b in zip(bounds, bounds[1:])]


stop_lists = st.lists(st.text(alphabet=SMALL, min_size=1, max_size=4), max_size=3)


@settings(max_examples=400, deadline=None)
@given(split_text(), stop_lists, st.booleans())
def test_stop_checker_is_independent_of_how_the_text_is_cut(text_and_pieces, stops, include):
    text, pieces = text_and_pieces
    checker = StopChecker(stops, include)
    released = []
    for piece in pieces:
        released.append(checker.add(piece))
        if checker.stop is not None:
            break
        # the hold-back: only what no later piece can turn into a stop string is out
        assert len("".join(released)) == max(0, len(checker.text) - checker.hold)
    released.append(checker.finish())
    want, stop = expected_text(text, stops, include)
    assert "".join(released) == checker.text == want
    assert checker.stop == stop
    if stop is not None and not include:
        assert text[len(want):].startswith(stop)
        assert all(s not in want for s in stops)  # nothing that was released holds a stop string


@st.composite
def generations(draw):
    text = draw(st.text(alphabet=RICH, min_size=1, max_size=24))
    ids = TOK.encode(text)
    # stop strings: pieces of the text itself (so they do occur, often across tokens) or random
    pieces = st.builds(lambda a, n: text[a:a + n], st.integers(0, len(text) - 1), st.integers(1, 4))
    stops = draw(st.lists(st.one_of(pieces, pieces, st.text(alphabet=RICH, min_size=1, max_size=3)), max_size=3))
    max_tokens = draw(st.one_of(st.just(len(ids) + 1), st.integers(1, len(ids) + 1)))
    return ids, [s for s in stops if s], max_tokens, draw(st.booleans())


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(generations())
def test_stream_equals_generate_and_never_leaks(gen):
    ids, stops, max_tokens, include = gen
    model = ScriptedModel(ids + TOK.encode(" end of text"))  # the script goes on past max_tokens
    params = SamplingParams(temperature=0, max_tokens=max_tokens, stop=stops, include_stop_str_in_output=include)
    events = list(stream(model, TOK, "p", params, eos_token_ids=[]))
    *deltas, result = events
    assert all(isinstance(d, Delta) and d.text for d in deltas) and isinstance(result, GenerationResult)
    streamed = "".join(d.text for d in deltas)

    script = model.script
    full = TOK.decode(script[:max_tokens])
    want, stop = expected_text(full, stops, include)
    assert streamed == result.text == want
    again = generate(ScriptedModel(script), TOK, "p", params, eos_token_ids=[])
    assert (again.text, again.token_ids, again.finish_reason, again.stop_reason) == \
        (result.text, result.token_ids, result.finish_reason, result.stop_reason)
    assert result.finish_reason == ("stop" if stop is not None else "length")
    assert result.token_ids == script[:len(result.token_ids)]
    # half a character never reaches the client: U+FFFD can only be a character cut by max_tokens
    assert "\ufffd" not in streamed[:-1] and ("\ufffd" not in streamed or result.finish_reason == "length")
    if stop is not None and not include:
        assert all(s not in d.text for d in deltas for s in stops)


@pytest.mark.parametrize("text, stop", [
    ("print('你好，世界')\n", "世界"),     # a stop string made of multi-byte characters
    ("emoji = '😀🚀'\n# done", "🚀'"),     # a stop string that starts inside an emoji's byte tokens
    ("数据 = 1\n模型 = 2\n", "\n模"),
])
def test_stop_strings_made_of_multibyte_characters(text, stop):
    ids = TOK.encode(text)
    *deltas, result = stream(ScriptedModel(ids), TOK, "p", SamplingParams(temperature=0, stop=[stop]),
                             eos_token_ids=[])
    assert result.text == text[:text.index(stop)] == "".join(d.text for d in deltas)
    assert result.finish_reason == "stop" and "\ufffd" not in result.text
