"""Checkers for chapter 10 (the server): reading an API field by one rule, the text of
a streamed reply from its server-sent events, a conversation rendered in ChatML, and the
chapter's pen-and-paper questions. Hand-written."""
from __future__ import annotations

import json
from typing import Callable

from . import (Case, Verdict, checker, number_question, register_questions, report,
               run_cases)


def _read_top_k(body: dict, vocab_size: int) -> int:
    from llmcore.api import APIError
    value = body.get("top_k")
    if value is None:
        return 0
    if type(value) is not int or not (value == -1 or 0 <= value <= vocab_size):
        raise APIError(400, f"'top_k' must be -1 or 0 (off), or an int in [1, "
                            f"{vocab_size}], got {value!r}", param="top_k")
    return max(value, 0)


@checker
def check_read_top_k(fn: Callable) -> Verdict:
    """`fn(body, vocab_size)` -> the top_k for SamplingParams (0 = off), or raises
    APIError(400, ..., param="top_k")."""
    from llmcore.api import APIError

    def outcome(call):
        def run(body, vocab_size):
            try:
                return call(body, vocab_size)
            except APIError as err:
                return ("APIError", err.status, err.param)
        return run
    bodies = [{}, {"top_k": None}, {"top_k": -1}, {"top_k": 0}, {"top_k": 1},
              {"top_k": 40}, {"top_k": 4096}, {"top_k": 4097}, {"top_k": 10**20},
              {"top_k": -2}, {"top_k": True}, {"top_k": 5.0}, {"top_k": "5"},
              {"top_k": [5]}, {"top_k": 40, "top_p": 0.9}]
    cases = [Case((dict(body), 4096), outcome(_read_top_k)(body, 4096))
             for body in bodies]
    return report(run_cases(
        "Exercise 10.1 (read_top_k)", outcome(fn), cases,
        compare=lambda got, exp: type(got) is type(exp) and got == exp,
        hint="absent or null means the default (0, off); -1 also means off; accept "
             "only a real int (True is an int in Python, 5.0 is not) in [0, "
             "vocab_size]; anything else raises APIError(400, message, "
             "param='top_k')."))


# --- Exercise 10.2: the text of a streamed reply, from the bytes on the wire ----------

def _sse(obj) -> bytes:
    """One server-sent event as a server writes it (raw UTF-8, as some servers send)."""
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n".encode()


def _piece(text: str, finish: str | None = None) -> dict:
    return {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "tiny",
            "choices": [{"index": 0, "text": text, "logprobs": None,
                         "finish_reason": finish}]}


def _stream(*texts: str, usage: bool = False, ping: bool = False) -> bytes:
    """A whole streamed completion: a chunk per text, the finish chunk, the usage
    chunk if asked, then `data: [DONE]`; keep-alive comments between events if asked."""
    events = [_sse(_piece(t)) for t in texts] + [_sse(_piece("", "stop"))]
    if usage:
        events.append(_sse({**_piece(""), "choices": [], "usage": {
            "prompt_tokens": 3, "completion_tokens": len(texts),
            "total_tokens": 3 + len(texts)}}))
    events.append(b"data: [DONE]\n\n")
    return (b": ping\n\n" if ping else b"").join(events)


def _split(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def _read_stream(reads: list[bytes]) -> list[str]:
    buffer, texts = b"", []
    for read in reads:
        buffer += read
        while b"\n\n" in buffer:
            event, buffer = buffer.split(b"\n\n", 1)
            for line in event.decode("utf-8").split("\n"):
                if not line.startswith("data: "):
                    continue  # a comment such as ": ping"
                if line == "data: [DONE]":
                    return texts
                chunk = json.loads(line[len("data: "):])
                if "error" in chunk:  # the server's error event
                    raise RuntimeError(chunk["error"]["message"])
                texts += [c["text"] for c in chunk["choices"] if c["text"]]
    raise RuntimeError("the stream ended before data: [DONE]: the reply was cut off")


@checker
def check_read_stream(fn: Callable) -> Verdict:
    """`fn(reads)` -> the non-empty text pieces of a streamed completion, from the bytes
    as they were read; RuntimeError for an error event or a stream cut off before
    `data: [DONE]`."""
    def outcome(reads):
        try:
            return fn(list(reads))
        except NotImplementedError:  # a RuntimeError too: the skeleton, not attempted
            raise
        except RuntimeError as err:
            return ("RuntimeError", str(err))

    def compare(got, exp):
        if isinstance(exp, tuple):  # RuntimeError, whose message holds exp[1]
            return isinstance(got, tuple) and got[0] == exp[0] and exp[1] in got[1]
        return type(got) is list and got == exp
    failed = "this request failed inside the engine"
    cut = ("RuntimeError", "")  # any message
    code = ["def", " add", "(a, b", "):\n", "    return", " a + b"]
    whole = _stream(*code)
    error = (_sse(_piece("def")) + _sse({"error": {
        "message": failed, "type": "server_error",
        "param": None, "code": None}}))
    cases = [
        Case(([whole],), code),                                  # all in one read
        Case((_split(whole, 1000),), code),                      # a read per ~event
        Case((_split(whole, 7),), code),                         # events split anywhere
        Case((_split(whole, 1),), code),                         # one byte per read
        Case((_split(_stream("ça", " va", " 数据"), 1),), ["ça", " va", " 数据"]),
        Case(([_stream(*code, ping=True)],), code),              # keep-alive comments
        Case((_split(_stream(*code, usage=True), 5),), code),    # usage: no choices
        Case(([_stream()],), []),                                # an empty reply
        Case(([error],), ("RuntimeError", failed)),              # an error event
        Case((_split(whole[:-len(b"data: [DONE]\n\n")], 9),), cut),  # no [DONE]
        Case(([whole[:200]],), cut),                             # cut off mid-event
    ]
    return report(run_cases(
        "Exercise 10.2 (read_stream)", outcome, cases, compare=compare,
        hint="keep a bytes buffer across reads and cut events at b'\\n\\n' before "
             "decoding (a read may end inside a UTF-8 character); skip lines that do "
             "not start with 'data: ' (': ping' is a comment); 'data: [DONE]' ends the "
             "stream; a chunk with no choices adds nothing; an error event, or a "
             "stream that ends before [DONE], raises RuntimeError."))


# --- Exercise 10.3: a conversation in ChatML, by hand ---------------------------------

def _conversations() -> list[tuple[list, bool]]:
    """(messages, add_generation_prompt): short ones first, so that a failure shows
    the whole prompt it expected."""
    hi = {"role": "user", "content": "hi"}
    system = {"role": "system", "content": "You write Python."}
    user = {"role": "user", "content": "A function that adds two numbers."}
    answer = {"role": "assistant", "content": "def add(a, b):\n    return a + b"}
    again = {"role": "user", "content": "Now three."}
    return [
        ([hi], True),
        ([hi], False),                               # no generation prompt
        ([{"role": "user", "content": ""}], True),   # empty content
        ([{"role": "user", "content": [{"type": "text", "text": "a"},
                                       {"type": "text", "text": "b"}]}],
         False),                                     # OpenAI's text parts
        ([{"role": "assistant", "content": None}], False),  # null content
        ([system, user], True),
        ([system, user, answer, again], True),       # several turns
        ([system, user, answer], False),             # a finished conversation
        ([{"role": "user", "content": "数据 ✓"}], True),
    ]


@checker
def check_render_chatml(fn: Callable) -> Verdict:
    """`fn(messages, add_generation_prompt)` -> the ChatML prompt, equal to what the
    bundled tiny model's template renders through llmcore.chat."""
    from llmcore.chat import load_chat_template

    template = load_chat_template("tiny")
    cases = [Case((messages, gen), template.render(messages,
                                                   add_generation_prompt=gen))
             for messages, gen in _conversations()]

    def call(messages, gen):  # the learner gets copies: the cases stay as they are
        return fn(json.loads(json.dumps(messages)), gen)
    return report(run_cases(
        "Exercise 10.3 (render_chatml)", call, cases,
        compare=lambda got, exp: isinstance(got, str) and got == exp,
        hint="each message is '<|im_start|>' + role + '\\n' + content + '<|im_end|>\\n'"
             "; a list of text parts is their texts joined by '\\n', None is ''; the "
             "generation prompt, only if asked, is '<|im_start|>assistant\\n'."))


# --- Check your understanding: pen-and-paper questions ------------------------------

# Question 10.1: the server admits requests while prompts x n of those in flight fit in
# max_batch + max_waiting = 8 + 24 = 32 completions; at n = 2 that is 16 of the 40
# clients, and the other 24 get 503.
check_q_refused = number_question(
    "Question 10.1 (requests refused)", 40 - (8 + 24) // 2, rel=1e-9)

# Question 10.2: 8 run at a time, all 100 tokens long, so the batch turns over every
# 100 steps of 20 ms; the last of 24 runs in the third wave, after two waves.
check_q_queue_wait = number_question(
    "Question 10.2 (seconds in the queue)", (24 // 8 - 1) * 100 * 0.020, rel=0.02)

register_questions(globals())
