"""llmcore.tools: the tools of a request checked, tool_choice's schema, and tool calls
parsed out of a reply (Hermes style for "auto", JSON for "required" and a named
function). The server's use of them is tested in test_server.py."""
import json
import re

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmcore.constrained import compile_schema
from llmcore.tools import check_tool_choice, check_tools, parse_tool_calls, tool_schema

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"],
        "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time"}}  # no parameters


def test_check_tools_refuses_with_a_reason():
    assert check_tools([WEATHER, TIME]) == [WEATHER, TIME]
    for bad, says in [([], "non-empty list"), ([{"type": "x"}], "tools[0] must be"),
                      ([{"type": "function", "function": {"name": "a b"}}], "name"),
                      ([WEATHER, WEATHER], "used twice"),
                      ([{"type": "function", "function": {"name": "f", "parameters": {
                          "type": "string", "format": "uri"}}}], "format"),
                      ([{"type": "function", "function": {
                          "name": "f", "description": 3}}], "description")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            check_tools(bad)


def test_tool_choice():
    assert check_tool_choice(None, None) == "none"
    assert check_tool_choice(None, [WEATHER]) == "auto"
    assert check_tool_choice("required", [WEATHER]) == "required"
    assert check_tool_choice({"type": "function", "function": {"name": "get_time"}},
                             [WEATHER, TIME]) == "get_time"
    for bad, tools, says in [("required", None, "needs 'tools'"),
                             ("always", [WEATHER], "must be"),
                             ({"type": "function", "function": {"name": "x"}},
                              [WEATHER], "not among")]:
        with pytest.raises(ValueError, match=says):
            check_tool_choice(bad, tools)


def test_the_schemas_of_required_and_named_accept_exactly_calls():
    assert tool_schema([WEATHER], "auto") is None
    assert tool_schema([WEATHER], "get_weather") == WEATHER["function"]["parameters"]
    required = tool_schema([WEATHER, TIME], "required")
    compile_schema(required)
    jsonschema.validate([{"name": "get_weather", "parameters": {"city": "Oslo"}},
                         {"name": "get_time", "parameters": {}}], required)
    for wrong in ([], [{"name": "nope", "parameters": {}}],
                  [{"name": "get_weather", "parameters": {}}]):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, required)


def test_parse_tool_calls():
    tools = [WEATHER, TIME]
    text = ('Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
            '"Oslo"}}\n</tool_call>\n<tool_call>{"name": "nope", "arguments": {}}'
            '</tool_call><tool_call>{broken</tool_call>'
            '<tool_call>{"name": "get_time"}</tool_call>')
    content, calls = parse_tool_calls(text, tools, "auto")
    assert [c["function"]["name"] for c in calls] == ["get_weather", "get_time"]
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    assert content.startswith("Checking.") and "nope" in content and "{broken" in content
    assert len({c["id"] for c in calls}) == 2
    assert parse_tool_calls("just text", tools, "auto") == ("just text", [])
    assert parse_tool_calls(text, tools, "none") == (text, [])
    content, calls = parse_tool_calls('{"city": "Rome"}', tools, "get_weather")
    assert content is None and calls[0]["function"]["name"] == "get_weather"
    content, calls = parse_tool_calls(
        '[{"name": "get_time", "parameters": {}}]', tools, "required")
    assert content is None and calls[0]["function"]["arguments"] == "{}"
    # cut short by max_tokens: no call, the text is what came back
    assert parse_tool_calls('[{"name": "get_ti', tools, "required") == (
        '[{"name": "get_ti', [])


def _strict(text: str):
    """Parse as a strict JSON parser does: NaN and Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


_EDGE_NUMBERS = st.sampled_from([
    "0", "-0", "1e999", "-1e999", "1E+308", "2.2250738585072014e-308", "4.9e-324",
    "0.30000000000000000001", "123456789012345678901234567890", "-9007199254740993",
    "1.0", "1e-999"])
_SCALARS = st.one_of(_EDGE_NUMBERS, st.integers().map(str),
                     st.floats(allow_nan=False, allow_infinity=False).map(repr),
                     st.text(max_size=8).map(json.dumps),
                     st.sampled_from(["true", "false", "null"]))
_SPACES = st.sampled_from(["", " ", "\n  ", "\t"])


@st.composite
def _json_text(draw, depth=2):
    """JSON text with the numbers a model may write (beyond float range, more digits
    than a double holds) and free whitespace, as a grammar lets a model write it."""
    if depth == 0 or draw(st.booleans()):
        return draw(_SCALARS)
    sp = draw(_SPACES)
    if draw(st.booleans()):
        items = draw(st.lists(_json_text(depth - 1), max_size=3))
        return "[" + sp + ("," + sp).join(items) + sp + "]"
    keys = draw(st.lists(st.text(max_size=5), max_size=3, unique=True))
    members = [json.dumps(k) + sp + ":" + sp + draw(_json_text(depth - 1))
               for k in keys]
    return "{" + sp + ("," + sp).join(members) + sp + "}"


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.text(max_size=5), _json_text()), min_size=1, max_size=3,
                unique_by=lambda kv: kv[0]), _SPACES)
def test_tool_arguments_are_the_models_text_and_parse_strictly(members, sp):
    arguments = "{" + sp + ("," + sp).join(
        json.dumps(k) + ":" + sp + v for k, v in members) + sp + "}"
    tools = [WEATHER, TIME]
    named = parse_tool_calls(sp + arguments + sp, tools, "get_weather")[1]
    required = parse_tool_calls(
        '[{"name": "get_time",' + sp + '"parameters": ' + arguments + '}]', tools,
        "required")[1]
    auto = parse_tool_calls('<tool_call>\n{"name": "get_time", "arguments": '
                            + arguments + '}\n</tool_call>', tools, "auto")[1]
    for calls in (named, required, auto):
        assert len(calls) == 1
        text = calls[0]["function"]["arguments"]
        assert text == arguments  # exactly as written: never parsed and dumped again
        assert _strict(text) == _strict(arguments)  # so no Infinity, no lost digits


def test_arguments_that_are_not_strict_json_are_no_call():
    tools = [WEATHER]
    for text in ('{"city": NaN}', '{"city": Infinity}', '{"city": "Oslo",}',
                 '{"city": "Oslo"} trailing', '["Oslo"]'):
        assert parse_tool_calls(text, tools, "get_weather") == (text, []), text
        block = f'<tool_call>{{"name": "get_weather", "arguments": {text}}}</tool_call>'
        assert parse_tool_calls(block, tools, "auto") == (block, []), text


def test_a_call_whose_name_is_not_a_string_stays_content():
    block = '<tool_call>{"name": ["get_weather"], "arguments": {}}</tool_call>'
    assert parse_tool_calls(block, [WEATHER], "auto") == (block, [])


# ---------------------------------------------------------------- strict tools under auto
from llmcore.tools import ToolCallGrammar, strict_tools  # noqa: E402

STRICT = {"type": "function", "function": {**WEATHER["function"], "strict": True}}


def _read(grammar, text: str):
    state = grammar.start
    for b in text.encode():
        state = grammar.step(state, b)
        if state is None:
            return "rejected"
    return "whole" if grammar.is_complete(state) else "open"


def test_strict_tools_hold_calls_and_leave_the_text_free():
    assert strict_tools([STRICT, TIME], "auto") and not strict_tools([WEATHER], "auto")
    assert not strict_tools([STRICT], "none") and not strict_tools([STRICT], "required")
    grammar = ToolCallGrammar([STRICT, TIME])
    call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    for text, want in [("Sure, any text at all: {]\"", "whole"),
                       ("Checking. " + call + "\n</tool_call> Done.", "whole"),
                       (call, "open"),  # a call begun must end
                       ('<tool_call>\n{"name": "get_time", "arguments": {}}\n</tool_call>',
                        "whole"),
                       ('<tool_call>\n{"name": "get_weather", "arguments": {"city": 5}}',
                        "rejected"),  # the argument's type
                       ('<tool_call>\n{"name": "get_date"', "rejected"),  # no such tool
                       (call + " </tool_call>", "whole"),  # some whitespace: Hermes'
                       ('<tool_call>{"name": "get_weather", "arguments": {"city": 5}}',
                        "rejected"),  # without the newlines, held all the same
                       (call + "\n" * 5 + "</tool_call>", "rejected"),  # bounded
                       (call + "</tool_calls>", "rejected"),
                       ("<tool_<tool_call>\n{", "open"),  # found across a false start
                       ("a <tool_cal", "whole")]:
        assert _read(grammar, text) == want, text
    assert grammar.bytes_to_close(grammar.start) == 0
    state = grammar.start
    for b in call.encode():
        state = grammar.step(state, b)
    assert grammar.bytes_to_close(state) == len("</tool_call>")  # the object is whole
    with pytest.raises(ValueError, match="strict must be true or false"):
        check_tools([{"type": "function", "function": {"name": "f", "strict": "yes"}}])


def test_a_strict_call_under_auto_fits_even_when_the_model_errs():
    import torch

    from llmcore.constrained import JsonConstraint
    from llmcore.generate import generate
    from llmcore.pretrained import load_tokenizer
    from llmcore.sampling import SamplingParams
    from test_generate import ScriptedModel
    tok = load_tokenizer("tiny")
    wrong = ('Let me check. <tool_call>\n{"name": "get_weather", "arguments": '
             '{"city": 5}}\n</tool_call>')
    script = tok.encode(wrong) + [tok.special_tokens["<|endoftext|>"]]
    constraint = JsonConstraint(tok, grammar=ToolCallGrammar([STRICT]))
    torch.manual_seed(0)
    reply = generate(ScriptedModel(script), tok, [1], SamplingParams(
        temperature=0, max_tokens=200), constraint=constraint)
    assert reply.text.startswith("Let me check. <tool_call>\n")  # free, then the call
    content, calls = parse_tool_calls(reply.text, [STRICT], "auto")
    assert content == "Let me check." and len(calls) == 1
    jsonschema.validate(json.loads(calls[0]["function"]["arguments"]),
                        WEATHER["function"]["parameters"])  # 5 could not be written
