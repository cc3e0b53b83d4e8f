"""Lark (llguidance dialect) terms shared by the call grammars: literals, JSON values, strings."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from parsers.closedschema import closed
from parsers.schema import schema_types

Lit = Callable[[str], str]


def quoted(text: str) -> str:
    """TEXT as a Lark string literal (no token references)."""
    return json.dumps(text, ensure_ascii=False)


# Chat templates render tool-call arguments with `tojson` (json.dumps' ", " and ": "), so models
# write calls that way; forcing another layout (e.g. compact JSON) pushes them off their training
# distribution and garbles the values they write (seen: a demo-model call's city became ':').
JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def compact(schema: dict[str, Any]) -> dict[str, Any]:
    """SCHEMA with llguidance told to write JSON in the templates' layout, no free whitespace."""
    return {**schema, "x-guidance": JSON_LAYOUT}


def args_schema(params: dict[str, Any] | None) -> dict[str, Any]:
    """A tool's arguments schema: its parameters, an object (any object when it has none)."""
    schema = dict(params) if isinstance(params, dict) and params else {"type": "object"}
    schema.setdefault("type", "object")
    return compact(schema)


def json_term(schema: dict[str, Any]) -> str:
    """An embedded JSON-schema term (the value written in JSON_LAYOUT), its objects closed
    (parsers/closedschema.py)."""
    return "%json " + json.dumps(compact(closed(schema)), ensure_ascii=False)


def plain_string(schema: dict[str, Any]) -> bool:
    """True when SCHEMA admits only strings (its value can be written as bare text)."""
    return schema_types(schema) == {"string"}


def _regex(body: str) -> str:
    return "/" + body.replace("/", "\\/") + "/"


def text_term(schema: dict[str, Any], chars: str, edge: str | None = None) -> str:
    """A string value as bare text of CHARS (a regex class) within the schema's length bounds,
    its enum or its pattern; EDGE, when given, is the class of its first and last character."""
    values = [schema["const"]] if "const" in schema else schema.get("enum")
    if isinstance(values, list) and values and all(isinstance(v, str) for v in values):
        return "(" + " | ".join(quoted(v) for v in values) + ")"
    pattern = schema.get("pattern")
    if isinstance(pattern, str):
        return _regex(pattern.removeprefix("^").removesuffix("$"))
    lo = schema.get("minLength", 0)
    hi = schema.get("maxLength")
    lo = lo if isinstance(lo, int) and lo > 0 else 0
    bound = f"{{{max(lo, 1)},{hi}}}" if isinstance(hi, int) else f"{{{max(lo, 1)},}}"
    if isinstance(hi, int) and hi <= 0:
        return '""'
    if edge is not None and not isinstance(hi, int) and lo <= 1:
        term = _regex(f"{edge}({chars}*{edge})?")
    else:
        term = _regex(f"{edge or chars}{bound}" if edge else f"{chars}{bound}")
    return term if lo > 0 else f"({term})?"


def value_term(schema: Any, chars: str, edge: str | None = None) -> str:
    """A parameter value: bare text for a string-only schema, compact JSON otherwise."""
    if not isinstance(schema, dict):
        return json_term({})
    return text_term(schema, chars, edge) if plain_string(schema) else json_term(schema)


def properties(params: dict[str, Any] | None) -> list[tuple[str, Any, bool]]:
    """(name, schema, required) of each declared parameter, in the schema's order."""
    if not isinstance(params, dict):
        return []
    props = params.get("properties")
    required = params.get("required")
    needed = set(required) if isinstance(required, list) else set()
    if not isinstance(props, dict):
        return []
    return [(k, v, k in needed) for k, v in props.items()]
