"""Chat templates: from a list of chat messages to the prompt text a chat model expects.

A chat model was trained on conversations written in its own markup (ChatML's
`<|im_start|>user ... <|im_end|>`, DeepSeek's `<｜User｜>`, ...). The model's repository
ships that markup as a Jinja template; `ChatTemplate.render` fills it in exactly as
Hugging Face transformers' `tokenizer.apply_chat_template(..., tokenize=False)` does,
so the tokens a server feeds the model are the ones the model was trained on. Encode
the result with special tokens allowed, as transformers does (the markers are special
tokens): `tokenizer.encode(text, allowed_special="all")`.

This file is hand-written (needs jinja2 >= 3.1.6: `pip install 'llmcore-book[serve]'`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from importlib import resources
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from llmcore.hf import checkpoint_dir

# ChatML (Qwen's format), for the bundled `tiny` model. It was never trained to chat and
# its only special token is <|endoftext|>, so to it the markers are ordinary text.
CHATML = (
    "{%- for message in messages %}\n"
    "{{- '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '')"
    " + '<|im_end|>\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "{{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

# Names a message's reasoning goes by; templates read the first (gpt-oss's the second).
REASONING_KEYS = ("reasoning_content", "thinking", "reasoning")


# --- The Jinja environment, as transformers builds it --------------------------------
class TemplateRaised(jinja2.TemplateError):
    """A template called `raise_exception(message)`: it refuses these messages."""


class GenerationTag(Extension):
    """`{% generation %}...{% endgeneration %}` marks the assistant's text (transformers
    uses it for training masks); rendering keeps the body as it is."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = nodes.CallBlock(self.call_method("_body"), [], [], body)
        return call.set_lineno(lineno)

    def _body(self, caller):
        return caller()


class TemplateNamespace(jinja2.utils.Namespace):
    """`namespace(...)` that refuses underscore-prefixed names (CPython internals)."""

    def __init__(*args, **kwargs):  # Namespace's own signature trick: allows `self=`
        self, attrs = args[0], dict(*args[1:], **kwargs)
        for name in attrs:
            TemplateNamespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name):
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat templates cannot store {name!r} on a namespace")


class TemplateDict:
    """The `dict` a template sees: `dict(...)` and `dict.fromkeys(...)`, not the type
    itself (no type-hackery from inside the sandbox)."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def raise_exception(message):
    raise TemplateRaised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """Plain JSON (Jinja's own `tojson` escapes <, >, & and ' for HTML)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent,
                      separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


@lru_cache
def compile_template(source: str) -> jinja2.Template:
    """The template compiled once per source text, in transformers' sandbox: a template
    from the Hub is untrusted code, and it may not modify the messages it reads."""
    version = tuple(int(part) for part in jinja2.__version__.split(".")[:3])
    if version < (3, 1, 6):  # older releases have known sandbox escapes
        raise ImportError(f"chat templates need jinja2 >= 3.1.6, found "
                          f"{jinja2.__version__}: pip install -U 'jinja2>=3.1.6'")
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals.update(raise_exception=raise_exception, strftime_now=strftime_now,
                       dict=TemplateDict(),
                       namespace=TemplateNamespace)
    return env.from_string(source)


# --- Messages: check them, then shape them as transformers hands them over -----------
def _text_of(parts: list, where: str) -> str:
    """OpenAI content parts as one string: the texts joined by newlines (what vLLM does
    for a template that expects string content)."""
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or part.get("type") != "text":
            what = (f"a part of type {part.get('type')!r}" if isinstance(part, dict)
                    else f"a {type(part).__name__}, not a part")
            raise ValueError(f"{where}[{j}] is {what}; only text parts "
                             '{"type": "text", "text": "..."} are supported')
        if not isinstance(part.get("text"), str):
            raise ValueError(f"{where}[{j}].text must be a string, got "
                             f"{type(part.get('text')).__name__}")
        texts.append(part["text"])
    return "\n".join(texts)


def check_messages(messages) -> list[dict]:
    """Validated copies of `messages`, as transformers passes them to the template.

    Each message is a dict with a `role` string and a `content` string, list of text
    parts (joined into one string) or None/absent (assistant messages only). Keys whose
    value is None are dropped, and a message's reasoning (`reasoning_content`,
    `thinking` or `reasoning`) is copied under the first two names, as transformers
    does. Other keys (`tool_calls`, `name`, ...) pass through untouched.
    """
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of "
                         f"{{'role': ..., 'content': ...}} dicts, got {messages!r:.80}")
    shaped = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{i}] must be a dict with 'role' and "
                             f"'content', got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise ValueError(f"messages[{i}].role must be a non-empty string such as "
                             f"'user', got {role!r}")
        if content is None and role != "assistant":
            raise ValueError(f"messages[{i}].content is missing; only an assistant "
                             "message may leave it out (or set it to null)")
        if isinstance(content, list):
            content = _text_of(content, f"messages[{i}].content")
        elif content is not None and not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string or a list of "
                             f"text parts, got {type(content).__name__}")
        message = {key: value for key, value in {**message, "content": content}.items()
                   if value is not None}
        reasoning = next((message[key] for key in REASONING_KEYS if key in message),
                         None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        shaped.append(message)
    return shaped


# --- The template and its special tokens ----------------------------------------------
def _token_text(value) -> str | None:
    """A special token as tokenizer_config.json gives it: a string or an AddedToken
    dict {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def special_tokens_of(config: dict) -> dict[str, str]:
    """The special-token strings transformers passes to the template, read from a
    tokenizer_config.json: every `*_token` key that holds a token (bos_token,
    eos_token, ..., and model-specific ones) and the entries of an
    `extra_special_tokens` dict (e.g. Qwen3.5's `image_token`)."""
    tokens = {key: _token_text(value) for key, value in config.items()
              if key.endswith("_token")}
    extra = config.get("extra_special_tokens")
    if isinstance(extra, dict):
        tokens.update({key: _token_text(value) for key, value in extra.items()})
    return {key: text for key, text in tokens.items() if text is not None}


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template (Jinja source) and the special tokens it may use.

    `special_tokens` holds exactly the `*_token` variables transformers gives the
    template: a token the tokenizer lacks is absent (undefined in the template), not "".
    """
    source: str
    special_tokens: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError("ChatTemplate needs the template's Jinja source as a "
                             f"non-empty string, got {self.source!r:.80}")
        for key, text in self.special_tokens.items():
            if not isinstance(text, str):
                raise ValueError(f"special_tokens[{key!r}] must be the token's text, "
                                 f"got {text!r}")
        try:  # a broken template fails when loaded, not on the first request
            compile_template(self.source)
        except jinja2.TemplateSyntaxError as err:
            raise ValueError(f"the chat template does not compile: {err.message} "
                             f"(line {err.lineno}); fix its Jinja source") from err

    @property
    def bos_token(self) -> str:
        return self.special_tokens.get("bos_token", "")

    @property
    def eos_token(self) -> str:
        return self.special_tokens.get("eos_token", "")

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> ChatTemplate:
        """Read a checkpoint directory: chat_template.jinja (or chat_templates/*.jinja)
        if present, else tokenizer_config.json's `chat_template`, a string or a list of
        {"name", "template"}. The one named "default" is used (transformers switches
        to one named "tool_use", where there is one, when tools are given)."""
        directory = Path(directory)
        if not directory.is_dir():
            raise FileNotFoundError(f"no checkpoint directory at {directory}")
        config_path = directory / "tokenizer_config.json"
        config = (json.loads(config_path.read_text(encoding="utf-8"))
                  if config_path.is_file() else {})
        templates = {path.stem: path.read_text(encoding="utf-8") for path in
                     sorted((directory / "chat_templates").glob("*.jinja"))}
        if (directory / "chat_template.jinja").is_file():
            templates["default"] = (directory / "chat_template.jinja").read_text(
                encoding="utf-8")
        found = config.get("chat_template")
        if not templates and isinstance(found, str):
            templates = {"default": found}
        elif not templates and isinstance(found, list):
            templates = {entry["name"]: entry["template"] for entry in found}
        if not templates:
            raise ValueError(
                f"{directory} has no chat template: add chat_template.jinja, or a "
                "'chat_template' entry to tokenizer_config.json (llmcore.chat.CHATML "
                "is a generic one), or build ChatTemplate(source, special_tokens)")
        if "default" not in templates:
            raise ValueError(f"{directory} has several chat templates and none is "
                             f"named 'default': {sorted(templates)}; build "
                             "ChatTemplate(source, ...) with the one you want")
        return cls(templates["default"], special_tokens_of(config))

    def render(self, messages, add_generation_prompt: bool = False, **kwargs) -> str:
        """The prompt text for `messages`, as `apply_chat_template(messages,
        add_generation_prompt=..., tokenize=False, **kwargs)` renders it.

        Extra keyword arguments (`tools`, `documents`, `enable_thinking`, ...) become
        template variables and override special tokens of the same name. Bad messages,
        and messages the template refuses or fails on (say, tool-call `arguments` as a
        JSON string where it expects a dict), raise ValueError.
        """
        messages = check_messages(messages)
        variables = {"tools": None, "documents": None, **self.special_tokens, **kwargs}
        template = compile_template(self.source)
        try:
            return template.render(messages=messages,
                                   add_generation_prompt=add_generation_prompt,
                                   **variables)
        except TemplateRaised as err:
            raise ValueError(f"the chat template refuses these messages: {err}"
                             ) from err
        except Exception as err:  # a template is code: it may fail in any way
            raise ValueError(f"the chat template failed on these messages "
                             f"({type(err).__name__}: {err})") from err


# --- Loading by name ------------------------------------------------------------------
def load_chat_template(name_or_path: str | Path) -> ChatTemplate:
    """The chat template of a bundled model ("tiny", "tiny-draft"), a checkpoint
    directory or a Hub id, resolved as `llmcore.pretrained.load_tokenizer` does."""
    if isinstance(name_or_path, str) and "/" not in name_or_path:
        bundled = Path(str(resources.files("llmcore") / "data" / name_or_path))
        if (bundled / "config.json").is_file():
            return ChatTemplate.from_pretrained(bundled)
    try:
        directory = checkpoint_dir(name_or_path)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{str(name_or_path)!r} is neither a bundled model "
                                "('tiny', 'tiny-draft') nor a checkpoint directory "
                                "(nor a Hub id like 'org/name')") from err
    return ChatTemplate.from_pretrained(directory)
