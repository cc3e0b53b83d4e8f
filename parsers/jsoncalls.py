"""Turning decoded JSON objects into ``(name, arguments)`` tool calls."""

from __future__ import annotations

from typing import Any

from parsers.jsonutil import loads_sequence, loads_strict, strip_code_fence

Call = tuple[str, dict[str, Any]]
_MAX_DECODES = 2
_CALL_KEYS = frozenset({"name", "arguments", "parameters", "type", "id"})


def _arguments(value: Any) -> dict[str, Any] | None:
    """The arguments object; a string holding serialized JSON is decoded (at most twice).

    Arguments are always a JSON object (function parameters are object schemas, and clients
    decode them into keyword arguments). A string that holds a serialized object (Granite 4,
    some Qwen fine-tunes), even serialized twice, is decoded; any other value (a bare string
    like ``"hello"``, a number, a list) is not a call: the block stays content, so nothing is
    lost and nothing that is not an object reaches the client. vLLM instead returns such a
    value JSON-encoded as the arguments text (``'"hello"'``).
    """
    if value is None:
        return {}
    for _ in range(_MAX_DECODES):
        if not isinstance(value, str):
            break
        if not value.strip():
            return {}
        ok, value = loads_strict(value)
        if not ok:
            return None
    return value if isinstance(value, dict) else None


def call_from_json(obj: Any, *, strict_keys: bool = False) -> Call | None:
    """``{"name": ..., "arguments"|"parameters": {...}}`` (optionally under "function") -> call."""
    if not isinstance(obj, dict):
        return None
    fn = obj.get("function")
    if isinstance(fn, dict) and "name" not in obj:
        obj = fn
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    if strict_keys and not set(obj) <= _CALL_KEYS:
        return None
    if "arguments" in obj:
        args = _arguments(obj["arguments"])
    else:
        args = _arguments(obj.get("parameters"))
    if args is None:
        return None
    return name.strip(), args


def calls_from_json_text(text: str) -> list[Call] | None:
    """Calls from JSON text holding one object, a list of objects, or several objects."""
    values = loads_sequence(strip_code_fence(text))
    if values is None:
        return None
    items: list[Any] = []
    for value in values:
        items.extend(value if isinstance(value, list) else [value])
    calls = []
    for item in items:
        call = call_from_json(item)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def single_json_call(text: str) -> Call | None:
    """The call in a JSON object text, or None."""
    ok, value = loads_strict(strip_code_fence(text))
    return call_from_json(value) if ok else None
