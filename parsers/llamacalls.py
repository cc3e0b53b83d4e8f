"""Reading Llama candidate expressions (JSON objects/lists, pythonic calls) as tool calls."""

from __future__ import annotations

from typing import Any

from parsers.jsoncalls import call_from_json
from parsers.jsonutil import loads_strict
from parsers.pyliteral import parse_call, parse_call_list

Call = tuple[str, dict[str, Any]]


def _json_calls(text: str) -> list[Call] | None:
    ok, value = loads_strict(text)
    if not ok:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [call_from_json(item, strict_keys=True) for item in items]
    if not calls or any(c is None for c in calls):
        return None
    return [c for c in calls if c is not None]


def _normalise(calls: list[Call]) -> list[Call]:
    return [(name.removesuffix(".call"), args) for name, args in calls]


def parse_candidate(kind: str, text: str) -> list[Call] | None:
    """Calls in a complete candidate expression of the given kind, or None."""
    if kind == "{":
        return _json_calls(text)
    if kind == "[":
        calls = parse_call_list(text)
        return _normalise(calls) if calls else _json_calls(text)
    call = parse_call(text)
    return _normalise([call]) if call else None


def prose_calls(kind: str, text: str, known: frozenset[str]) -> list[Call] | None:
    """Calls found after prose: a JSON object with a name and ``parameters``/``arguments``
    (vLLM ``llama3_json``) or a pythonic list ``[f(a=1)]`` (SGLang ``pythonic``).

    When the request declares tools every name must be one of them (prose quoting JSON or
    code is common, so a looser rule would turn examples into calls).
    """
    calls: list[Call] | None
    if kind == "[":
        found = parse_call_list(text)
        calls = _normalise(found) if found else None
    else:
        ok, value = loads_strict(text)
        if not ok or not isinstance(value, dict):
            return None
        if "parameters" not in value and "arguments" not in value:
            return None
        call = call_from_json(value, strict_keys=True)
        calls = [call] if call else None
    if not calls or (known and any(name not in known for name, _ in calls)):
        return None
    return calls
