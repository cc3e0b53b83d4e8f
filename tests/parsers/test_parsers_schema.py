"""Schema-driven conversion of raw text parameter values."""

from __future__ import annotations

from typing import Any

import pytest

from parsers.schema import ToolSchemas, convert_value

CONVERSIONS: list[tuple[str, dict[str, Any] | None, Any]] = [
    ("42", {"type": "integer"}, 42),
    (" -7 ", {"type": "integer"}, -7),
    ("4.0", {"type": "integer"}, 4),
    ("4.5", {"type": "integer"}, 4.5),  # not an integer, but valid JSON
    ("1" * 5000, {"type": "integer"}, "1" * 5000),
    ("2.5", {"type": "number"}, 2.5),
    ("1e400", {"type": "number"}, "1e400"),
    ("NaN", {"type": "number"}, "NaN"),
    ("true", {"type": "boolean"}, True),
    ("False", {"type": "boolean"}, False),
    ("yes", {"type": "boolean"}, "yes"),
    ("hello", {"type": "string"}, "hello"),
    ("123", {"type": "string"}, "123"),
    ("null", {"type": "string"}, "null"),
    ("null", {"type": "string", "nullable": True}, None),
    ("null", {"type": ["integer", "null"]}, None),
    ("5", {"type": ["integer", "null"]}, 5),
    ('{"a": 1}', {"type": "object"}, {"a": 1}),
    ("{'a': [True, None]}", {"type": "object"}, {"a": [True, None]}),
    ("[1, 2]", {"type": "array"}, [1, 2]),
    ("not json", {"type": "array"}, "not json"),
    ("[1, 2]", None, [1, 2]),
    ("plain", None, "plain"),
    ('"quoted"', None, "quoted"),
    ("7", {"description": "no type"}, 7),
    ("2", {"enum": [1, 2, 3]}, 2),
    ("b", {"enum": ["a", "b"]}, "b"),
    ("3", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, 3),
    ("x", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "x"),
    ("1.5", {"type": "float"}, 1.5),
    ("{", {"type": "object", "properties": {}}, "{"),
    ("Infinity", None, "Infinity"),
]


@pytest.mark.parametrize("raw,schema,expected", CONVERSIONS)
def test_convert_value(raw: str, schema: dict[str, Any] | None, expected: Any) -> None:
    assert convert_value(raw, schema) == expected
    assert type(convert_value(raw, schema)) is type(expected)


def test_tool_schemas_accepts_both_tool_shapes() -> None:
    schemas = ToolSchemas(
        [
            {
                "type": "function",
                "function": {"name": "a", "parameters": {"properties": {"x": {"type": "integer"}}}},
            },
            {"name": "b", "parameters": {"properties": {"y": {"type": "boolean"}}}},
            "garbage",  # type: ignore[list-item]
            {"function": {"name": "c"}},
        ]
    )
    assert schemas.convert("a", "x", "3") == 3
    assert schemas.convert("b", "y", "true") is True
    assert schemas.convert("c", "z", "[1]") == [1]
    assert schemas.convert("unknown", "z", "text") == "text"
