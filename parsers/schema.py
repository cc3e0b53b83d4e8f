"""Tool JSON-schema lookup and conversion of raw text parameter values."""

from __future__ import annotations

import math
import re
from typing import Any

from parsers.jsonutil import loads_strict
from parsers.pyliteral import parse_literal

_INT_RE = re.compile(r"[+-]?\d+")
_FLOAT_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_TYPE_ORDER = ("boolean", "integer", "number", "object", "array")
_TYPE_ALIASES = {
    "int": "integer",
    "float": "number",
    "double": "number",
    "bool": "boolean",
    "str": "string",
    "text": "string",
    "dict": "object",
    "list": "array",
}


def tool_functions(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Map function name -> its ``parameters`` schema, for OpenAI or bare tool entries."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or []:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        spec = fn if isinstance(fn, dict) else tool
        name = spec.get("name")
        params = spec.get("parameters")
        if isinstance(name, str):
            out[name] = params if isinstance(params, dict) else {}
    return out


def schema_types(schema: dict[str, Any]) -> set[str]:
    """The JSON types a (sub)schema admits, from type/anyOf/oneOf/nullable/enum/const."""
    types: set[str] = set()
    declared = schema.get("type")
    if isinstance(declared, str):
        types.add(_TYPE_ALIASES.get(declared, declared))
    elif isinstance(declared, list):
        types.update(_TYPE_ALIASES.get(t, t) for t in declared if isinstance(t, str))
    for key in ("anyOf", "oneOf", "allOf"):
        subs = schema.get(key)
        if isinstance(subs, list):
            for sub in subs:
                if isinstance(sub, dict):
                    types |= schema_types(sub)
    if schema.get("nullable") is True:
        types.add("null")
    values = schema.get("enum")
    if "const" in schema:
        values = [schema["const"]]
    if not types and isinstance(values, list):
        for v in values:
            types.add(_json_type(v))
    if not types and isinstance(schema.get("properties"), dict):
        types.add("object")
    if not types and "items" in schema:
        types.add("array")
    return types


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return "string"


def _as_number(text: str, integer: bool) -> tuple[bool, Any]:
    if _INT_RE.fullmatch(text):
        try:
            return True, int(text)
        except ValueError:  # absurdly long digit strings
            return False, None
    if _FLOAT_RE.fullmatch(text):
        try:
            value = float(text)
        except (ValueError, OverflowError):
            return False, None
        if not math.isfinite(value):
            return False, None
        if integer:
            return (True, int(value)) if value.is_integer() else (False, None)
        return True, value
    return False, None


def _as_container(text: str, kind: type) -> tuple[bool, Any]:
    ok, value = loads_strict(text)
    if ok and isinstance(value, kind):
        return True, value
    ok, value = parse_literal(text)
    if ok and isinstance(value, kind):
        return True, value
    return False, None


def _try_type(kind: str, text: str) -> tuple[bool, Any]:
    if kind == "boolean":
        low = text.lower()
        if low in ("true", "false"):
            return True, low == "true"
        return False, None
    if kind == "integer":
        return _as_number(text, integer=True)
    if kind == "number":
        return _as_number(text, integer=False)
    if kind == "object":
        return _as_container(text, dict)
    if kind == "array":
        return _as_container(text, list)
    return False, None


def json_or_string(raw: str) -> Any:
    """The JSON value ``raw`` denotes if it parses, else ``raw`` itself."""
    ok, value = loads_strict(raw.strip())
    return value if ok else raw


def convert_value(raw: str, schema: dict[str, Any] | None) -> Any:
    """Convert a raw text value to the JSON type its schema asks for (string stays string)."""
    if not isinstance(schema, dict):
        return json_or_string(raw)
    types = schema_types(schema)
    if not types:
        return json_or_string(raw)
    text = raw.strip()
    if "null" in types and text.lower() in ("null", "none"):
        return None
    for kind in _TYPE_ORDER:
        if kind in types:
            ok, value = _try_type(kind, text)
            if ok:
                return value
    if "string" in types:
        return raw
    return json_or_string(raw)


class ToolSchemas:
    """Per-request parameter schemas, used to type text parameter values."""

    def __init__(self, tools: list[dict[str, Any]] | None = None) -> None:
        self._functions = tool_functions(tools)

    def param_schema(self, function: str, param: str) -> dict[str, Any] | None:
        """The schema of one parameter, if the tool declares it."""
        props = self._functions.get(function, {}).get("properties")
        if isinstance(props, dict):
            sub = props.get(param)
            if isinstance(sub, dict):
                return sub
        return None

    def convert(self, function: str, param: str, raw: str) -> Any:
        """Convert one raw parameter value using the declared schema (JSON-or-string if none)."""
        return convert_value(raw, self.param_schema(function, param))
