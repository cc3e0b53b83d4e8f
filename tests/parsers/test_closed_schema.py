"""parsers/closedschema.py: call grammars close the objects of argument schemas."""

from __future__ import annotations

import json

from parsers.callgrammar import call_grammar
from parsers.closedschema import closed

OPEN = {"type": "object", "required": ["city"], "properties": {
    "city": {"type": "string"},
    "stops": {"type": "array", "items": {"type": "object", "properties": {"id": {"type": "integer"}}}},
    "where": {"anyOf": [{"type": "object", "properties": {"lat": {"type": "number"}}},
                        {"type": "string"}]}}}


def test_objects_with_properties_are_closed_at_every_depth() -> None:
    out = closed(OPEN)
    assert out["additionalProperties"] is False
    assert out["properties"]["stops"]["items"]["additionalProperties"] is False
    assert out["properties"]["where"]["anyOf"][0]["additionalProperties"] is False
    assert "additionalProperties" not in OPEN  # a copy: the request's schema is left as it was


def test_schemas_asking_for_more_stay_open() -> None:
    more = {"type": "object", "properties": {"a": {}}, "additionalProperties": {"type": "string"}}
    assert closed(more) == more
    assert "additionalProperties" not in closed({"type": "object"})  # no properties: any object
    parts = {"allOf": [{"properties": {"a": {}}}, {"properties": {"b": {}}}]}
    assert closed(parts) == parts
    named = {"type": "object", "properties": {"properties": {"type": "string"}}}
    assert closed(named)["properties"] == {"properties": {"type": "string"}}


def test_call_grammars_embed_the_closed_schema() -> None:
    for family in ("hermes", "llama", "deepseek", "harmony"):
        grammar = call_grammar(family, [("get_weather", OPEN)], multiple=False)
        embedded, _ = json.JSONDecoder().raw_decode(grammar.split("%json ", 1)[1])
        assert embedded["additionalProperties"] is False, family
