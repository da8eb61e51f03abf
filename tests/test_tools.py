"""llmcore.tools: the tools of a request checked, tool_choice's schema, and tool calls
parsed out of a reply (Hermes style for "auto", JSON for "required" and a named
function). The server's use of them is tested in test_server.py."""
import json
import re

import jsonschema
import pytest

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
                          "type": "string", "format": "email"}}}], "'format'"),
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
