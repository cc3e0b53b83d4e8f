"""Tool-call argument schemas with their objects closed, so that a forced call ends.

A JSON schema's object admits keys beyond its ``properties`` unless it says
``additionalProperties: false``; a grammar built from it lets a model keep adding keys until
``max_tokens`` (seen with the demo model: hermes 1/5, llama, deepseek, harmony 0/5 forced calls
came back as calls). Call grammars treat every object that lists ``properties`` as closed unless
its schema asks for more (``additionalProperties``, ``patternProperties`` or
``unevaluatedProperties`` given); objects inside ``allOf`` stay as written (closing each part of
an intersection would refuse the other parts' keys).
"""

from __future__ import annotations

from typing import Any

OPEN_KEYS = ("additionalProperties", "patternProperties", "unevaluatedProperties")
ONE_SCHEMA = ("items", "additionalItems", "contains", "not", "if", "then", "else",
              "additionalProperties", "propertyNames", "unevaluatedItems")
SCHEMA_LISTS = ("anyOf", "oneOf", "prefixItems")
SCHEMA_MAPS = ("properties", "$defs", "definitions", "dependentSchemas", "patternProperties")


def closed(schema: Any) -> Any:
    """A copy of SCHEMA with each object that lists properties closed to further keys."""
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = dict(schema)
    for key in ONE_SCHEMA:
        if isinstance(out.get(key), dict | list):
            out[key] = closed(out[key])
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [closed(s) for s in out[key]]
    for key in SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: closed(s) for name, s in out[key].items()}
    if isinstance(out.get("properties"), dict) and not any(k in out for k in OPEN_KEYS) \
            and "allOf" not in out:
        out["additionalProperties"] = False
    return out
