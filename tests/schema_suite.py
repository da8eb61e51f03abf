"""The JSON Schemas the structured-output tests and bench/structured.py share, and a
random writer of valid documents in the conventions llmcore and XGrammar both compile
a schema to (properties in the schema's order, at most MAX_WHITESPACE whitespace
bytes around structural characters, none around the document)."""
from __future__ import annotations

import datetime
import enum
import json
import random
import uuid
from typing import Literal, Optional

import pydantic

from llmcore.constrained import DECIMALS, MAX_WHITESPACE, SchemaGrammar


class Color(str, enum.Enum):
    RED = "red"
    GREEN = "green"
    BLUE = "blue"


class Address(pydantic.BaseModel):
    street: str
    city: str
    zip_code: Optional[str] = None


class Person(pydantic.BaseModel):
    name: str
    age: int = pydantic.Field(ge=0, le=150)
    email: Optional[str] = None
    address: Address
    favourite: Color


class Order(pydantic.BaseModel):
    id: int
    items: list[str]
    quantities: list[int] = pydantic.Field(min_length=1, max_length=4)
    status: Literal["pending", "shipped", "delivered"]
    paid: bool
    total: float


class Tree(pydantic.BaseModel):
    label: str
    children: list["Tree"] = []


class Inventory(pydantic.BaseModel):
    counts: dict[str, int]
    owner: Optional[Person] = None


class Weather(pydantic.BaseModel):
    """The parameters of a tool call, as agents declare them."""
    location: str
    unit: Optional[Literal["celsius", "fahrenheit"]] = None
    days: int = pydantic.Field(default=1, ge=1, le=14)


class Shape(pydantic.BaseModel):
    kind: Literal["circle", "square"]
    size: float


class Drawing(pydantic.BaseModel):
    title: str
    shapes: list[Shape]
    background: Optional[Color] = None
    tags: list[str] = []


class Booking(pydantic.BaseModel):
    """Strings a pydantic user constrains: a pattern, dates and times, an id."""
    reference: str = pydantic.Field(pattern=r"^[A-Z]{2}[0-9]{4}$")
    day: datetime.date
    starts: datetime.datetime
    guest: uuid.UUID
    price: float = pydantic.Field(ge=0, le=10000)
    nights: int = pydantic.Field(ge=1, le=30, multiple_of=1)


def _string(**keywords) -> dict:
    return {"type": "string", **keywords}


def _obj(properties: dict, required: list | None = None) -> dict:
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required,
            "additionalProperties": False}


STRING, INTEGER, NUMBER = {"type": "string"}, {"type": "integer"}, {"type": "number"}
BOOLEAN, NULL = {"type": "boolean"}, {"type": "null"}
SCHEMAS: dict[str, dict] = {
    "one string": _obj({"name": STRING}),
    "one integer": _obj({"n": INTEGER}),
    "one number": _obj({"x": NUMBER}),
    "one boolean": _obj({"ok": BOOLEAN}),
    "one null": _obj({"nothing": NULL}),
    "scalars": _obj({"s": STRING, "i": INTEGER, "f": NUMBER, "b": BOOLEAN}),
    "optional last": _obj({"a": STRING, "b": INTEGER}, ["a"]),
    "optional first": _obj({"a": STRING, "b": INTEGER}, ["b"]),
    "all optional": _obj({"a": BOOLEAN, "b": NULL, "c": INTEGER}, []),
    "optional between": _obj({"a": INTEGER, "b": STRING, "c": BOOLEAN}, ["a", "c"]),
    "empty object": {"type": "object", "properties": {},
                     "additionalProperties": False},
    "string enum": _obj({"color": {"enum": ["red", "green", "blue", "re"]}}),
    "mixed enum": _obj({"v": {"enum": [1, 12, "x", None, True, 1.5]}}),
    "const": _obj({"version": {"const": "v1"}, "n": {"const": 3}}),
    "unicode": _obj({"名前": {"const": "日本 é\"q"}, "emoji": STRING}),
    "integer range": _obj({"age": {"type": "integer", "minimum": 18,
                                   "maximum": 120}}),
    "negative range": _obj({"t": {"type": "integer", "minimum": -40,
                                  "exclusiveMaximum": 7}}),
    "non-negative": _obj({"count": {"type": "integer", "minimum": 0}}),
    "array of strings": _obj({"tags": {"type": "array", "items": STRING}}),
    "bounded array": _obj({"xs": {"type": "array", "items": INTEGER, "minItems": 2,
                                  "maxItems": 4}}),
    "array of objects": _obj({"people": {"type": "array", "items": _obj(
        {"name": STRING, "age": INTEGER})}}),
    "nested arrays": _obj({"grid": {"type": "array", "items": {
        "type": "array", "items": NUMBER, "maxItems": 3}, "maxItems": 3}}),
    "nullable type list": _obj({"note": {"type": ["string", "null"]}}),
    "anyOf scalars": _obj({"id": {"anyOf": [INTEGER, STRING]}}),
    "anyOf objects": _obj({"shape": {"anyOf": [
        _obj({"radius": NUMBER}), _obj({"width": NUMBER, "height": NUMBER})]}}),
    "free object value": _obj({"meta": {"type": "object"}}),
    "map of integers": _obj({"scores": {"type": "object",
                                        "additionalProperties": INTEGER}}),
    "any JSON object": {"type": "object"},
    "deep nesting": _obj({"a": _obj({"b": _obj({"c": _obj({"d": INTEGER})})})}),
    "refs": {"$defs": {"Point": _obj({"x": NUMBER, "y": NUMBER})},
             **_obj({"start": {"$ref": "#/$defs/Point"},
                     "end": {"$ref": "#/$defs/Point"}})},
    "pydantic person": Person.model_json_schema(),
    "pydantic order": Order.model_json_schema(),
    "pydantic tree": Tree.model_json_schema(),
    "pydantic inventory": Inventory.model_json_schema(),
    "pydantic weather": Weather.model_json_schema(),
    "pydantic drawing": Drawing.model_json_schema(),
    # the strict-mode keywords beyond the first subset (issue 42, item 3)
    "postcode pattern": _obj({"zip": _string(pattern="^[0-9]{5}$")}),
    "sku pattern": _obj({"sku": _string(pattern="[A-Z]{3}-[0-9]{2,4}")}),
    "pattern alternation": _obj({"code": _string(pattern="(ab|cd)+x?")}),
    "format date": _obj({"day": _string(format="date")}),
    "format date-time": _obj({"at": _string(format="date-time")}),
    "format time": _obj({"at": _string(format="time")}),
    "format duration": _obj({"for": _string(format="duration")}),
    "format email": _obj({"to": _string(format="email")}),
    "format hostname": _obj({"host": _string(format="hostname")}),
    "format ipv4": _obj({"ip": _string(format="ipv4")}),
    "format ipv6": _obj({"ip": _string(format="ipv6")}),
    "format uuid": _obj({"id": _string(format="uuid")}),
    "number range": _obj({"x": {"type": "number", "minimum": -1.5,
                                "maximum": 2.25}}),
    "exclusive numbers": _obj({"p": {"type": "number", "exclusiveMinimum": 0,
                                     "exclusiveMaximum": 1}}),
    "number floor": _obj({"price": {"type": "number", "minimum": 0.1}}),
    "multipleOf": _obj({"n": {"type": "integer", "multipleOf": 5}}),
    "multipleOf in range": _obj({"n": {"type": "integer", "multipleOf": 7,
                                       "minimum": 10, "maximum": 100}}),
    "oneOf": _obj({"id": {"oneOf": [INTEGER, STRING]}}),
    "const object": _obj({"v": {"const": {"a": [1, 2], "b": None}}}),
    "enum of any value": _obj({"v": {"enum": [{"x": 1}, [1, "two"], "s", 3]}}),
    "minProperties map": {"type": "object", "additionalProperties": INTEGER,
                          "minProperties": 1, "maxProperties": 3},
    "minProperties": {**_obj({"a": INTEGER, "b": STRING, "c": BOOLEAN}, []),
                      "minProperties": 2},
    "maxProperties": {**_obj({"a": INTEGER, "b": STRING, "c": BOOLEAN}, ["b"]),
                      "maxProperties": 2},
    "pydantic booking": Booking.model_json_schema(),
}

_CHARS = list("abcXYZ019 _-,:{}[]") + ["é", "日本", "🙂", "\\n", '\\"', "\\\\", "\\/",
                                        "\\u00e9", "\\uD83D\\uDE00"]


def regex_text(regex, rng: random.Random) -> str:
    """A random text that `regex` (a RegexGrammar) matches whole: byte by byte among
    the bytes it allows, stopping at a match with rising odds, and heading for the
    nearest match once the text is long."""
    state, out = regex.start, b""
    while True:
        if regex.is_complete(state) and (rng.random() < 0.15 + len(out) / 40
                                         or not regex.goes_on(state)):
            return out.decode()
        options = [(b, after) for b in range(256)
                   if (after := regex.step(state, b)) is not None]
        if len(out) > 24:  # long enough: only bytes that bring the match nearer
            need = min(regex.bytes_to_close(after) for _, after in options)
            options = [o for o in options if regex.bytes_to_close(o[1]) == need]
        b, state = rng.choice(options)
        out += bytes([b])


def _ws(rng: random.Random) -> str:
    if rng.random() < 0.6:
        return ""
    return "".join(rng.choice(" \n\t\r") for _ in range(
        rng.choice([1, 2, 4, MAX_WHITESPACE])))


def random_document(grammar: SchemaGrammar, rng: random.Random,
                    node: int | None = None, depth: int = 0,
                    compact: bool = False) -> str:
    """A random valid document of a compiled schema, written the way both
    grammars read it (compact: ", " and ": ", no other whitespace)."""

    def ws() -> str:
        return "" if compact else _ws(rng)

    def sep() -> str:
        return " " if compact else _ws(rng)

    n = grammar.root if node is None else node
    kind, spec = grammar.nodes[n][0], grammar.nodes[n]
    if kind == "anyof":
        options = [o for o in spec[1] if grammar.min_bytes[o] < float("inf")]
        if depth > 3:  # keep recursive schemas finite: the shortest option
            options = [min(options, key=lambda o: grammar.min_bytes[o])]
        return random_document(grammar, rng, rng.choice(options), depth, compact)
    if kind == "literal":
        return rng.choice(spec[1]).decode()
    if kind == "string":
        if spec[3] is not None:  # pattern or format: a random match, JSON-escaped
            return json.dumps(regex_text(spec[3], rng), ensure_ascii=False)
        return '"' + "".join(rng.choice(_CHARS) for _ in range(rng.randint(0, 6))) + '"'
    if kind == "number":
        return rng.choice(["0", "-12", "3.25", "1e5", "-0.5E-3", "42", "7.0e+2"])
    if kind == "decimal":  # a bounded number: a random decimal of f digits in range
        scale, f = 10 ** DECIMALS, rng.randint(0, DECIMALS)
        unit = 10 ** (DECIMALS - f)
        low = -1000 * scale if spec[1] is None else spec[1]
        high = low + 2000 * scale if spec[2] is None else spec[2]
        first, last = -(-low // unit), min(high, low + 2000 * scale) // unit
        if first > last:  # no f-digit decimal in range: the finest grid has one
            unit, first, last = 1, low, min(high, low + 2000 * scale)
        value = rng.randint(first, last) * unit
        whole, frac = divmod(abs(value), scale)
        digits = str(frac).rjust(DECIMALS, "0").rstrip("0") if frac else (
            "0" * (value == 0 or rng.random() < 0.3))
        sign = "-" if value < 0 or (value == 0 and digits and rng.random() < 0.2) else ""
        return sign + str(whole) + ("." + digits if digits else "")
    if kind == "integer":
        low = -1000 if spec[1] is None else spec[1]
        high = low + 2000 if spec[2] is None else spec[2]
        step = spec[3] or 1
        value = rng.randint(low, min(high, low + 2000))
        value = -(-value // step) * step
        return str(value if value <= high else value - step)
    if kind == "object":
        _, members, flags, extra, least, most = spec
        if extra is not None:
            count = max(least, 0 if depth > 3 else rng.randint(0, 2))
            count = count if most is None else min(count, most)
            pairs = [(json.dumps(f"k{i}{rng.choice(_CHARS)}", ensure_ascii=False),
                      random_document(grammar, rng, extra, depth + 1, compact))
                     for i in range(count)]
        else:
            chosen = [k for k in range(len(members))
                      if flags[k] or (depth < 3 and rng.random() < 0.6)]
            optional = [k for k in range(len(members)) if not flags[k]]
            rng.shuffle(optional)
            for k in optional:  # minProperties and maxProperties
                if len(chosen) < least and k not in chosen:
                    chosen.append(k)
                elif most is not None and len(chosen) > most and k in chosen:
                    chosen.remove(k)
            pairs = [(grammar.nodes[members[k][0]][1][0].decode(),
                      random_document(grammar, rng, members[k][1], depth + 1,
                                      compact))
                     for k in sorted(chosen)]
        if not pairs:
            return "{" + ws() + "}"
        body = (ws() + "," + sep()).join(
            key + ws() + ":" + sep() + value for key, value in pairs)
        return "{" + ws() + body + ws() + "}"
    _, item, low, high = spec  # array
    most = low if depth > 3 else min(low + 3, high if high is not None else low + 3)
    items = [random_document(grammar, rng, item, depth + 1, compact)
             for _ in range(rng.randint(low, max(low, most)))]
    if not items:
        return "[" + ws() + "]"
    return "[" + ws() + (ws() + "," + sep()).join(items) + ws() + "]"
