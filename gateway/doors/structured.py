"""Structured output at the door: response_format / text.format -> the job's GrammarSpec.

The gateway checks size and shape (cheap, before anything is queued); the worker compiles the
schema and answers a schema its grammar library refuses (or that takes too long to compile) with
a 400 naming the same parameter.
"""

from __future__ import annotations

import json
import re
from typing import Any

from gateway.edge.errors import bad_request
from protocol.messages import GrammarSpec

MAX_SCHEMA_CHARS = 64 * 1024  # the schema as compact JSON
MAX_ENUM_VALUES = 1_000  # enum and const values across the whole schema
MAX_PROPERTIES = 2_000  # properties across the whole schema
MAX_SCHEMA_NODES = 20_000  # values of any kind in the schema
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def grammar_for(kind: str | None, json_schema: dict[str, Any] | None,
                param: str = "response_format") -> GrammarSpec | None:
    """The GrammarSpec of a response format (None for text); a bad one is a 400 naming PARAM.

    JSON_SCHEMA is chat's ``{"name", "schema", "strict", "description"}`` object (Responses'
    flat fields are passed in the same shape).
    """
    if kind in (None, "text"):
        return None
    if kind == "json_object":
        return GrammarSpec(kind="json_object")
    if kind != "json_schema":
        raise bad_request(f"{param} of type '{kind}' is not supported.", param=param,
                          code="unsupported_parameter")
    if not isinstance(json_schema, dict):
        raise bad_request(f"{param}.json_schema is required when the type is 'json_schema'.",
                          param=param, code="missing_required_parameter")
    name = json_schema.get("name")
    if name is not None and not (isinstance(name, str) and _NAME.match(name)):
        raise bad_request(f"{param} name must be 1-64 letters, digits, '_' or '-'.", param=param,
                          code="invalid_value")
    schema = json_schema.get("schema")
    if schema is None:
        return GrammarSpec(kind="json_object")
    if not isinstance(schema, dict):
        raise bad_request(f"{param} schema must be a JSON object.", param=param,
                          code="invalid_value")
    check_schema(schema, param)
    return GrammarSpec(kind="json_schema", text=json.dumps(schema, separators=(",", ":")))


def thinks(reasoning_parser: str | None, template_kwargs: dict[str, Any]) -> bool:
    """True when a reasoning section may come before the constrained answer: the model has a
    reasoning parser and thinking is not turned off."""
    return reasoning_parser is not None and template_kwargs.get("enable_thinking") is not False


def check_schema(schema: dict[str, Any], param: str) -> None:
    """Refuse a schema over the size limits (characters, values, enum values, properties)."""
    text = json.dumps(schema, separators=(",", ":"))
    if len(text) > MAX_SCHEMA_CHARS:
        raise bad_request(f"{param} schema is {len(text)} characters; at most {MAX_SCHEMA_CHARS} "
                          "are allowed.", param=param, code="schema_too_large")
    nodes = enums = props = 0
    stack: list[Any] = [schema]
    while stack:
        value = stack.pop()
        nodes += 1
        if isinstance(value, dict):
            if isinstance(value.get("enum"), list):
                enums += len(value["enum"])
            if "const" in value:
                enums += 1
            if isinstance(value.get("properties"), dict):
                props += len(value["properties"])
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    for what, count, limit in (("values", nodes, MAX_SCHEMA_NODES),
                               ("enum values", enums, MAX_ENUM_VALUES),
                               ("properties", props, MAX_PROPERTIES)):
        if count > limit:
            raise bad_request(f"{param} schema has {count} {what}; at most {limit} are allowed.",
                              param=param, code="schema_too_large")
