"""The UI-TARS call grammar: ``NAME(key='text', n=3)``, keyword values as Python literals."""

from __future__ import annotations

from typing import Any

from parsers.grammarterms import (
    Lit,
    json_term,
    plain_string,
    properties,
    quoted,
    text_term,
    value_term,
)

_CHARS = r"[^'\\\r\n]"  # inside a '...' literal: no quote, backslash or line break


def _value(schema: Any) -> str:
    """A free string as a '...' literal; an enum or pattern string, and any other value, as
    JSON (which Python reads alike)."""
    if isinstance(schema, dict) and plain_string(schema):
        values = [schema["const"]] if "const" in schema else schema.get("enum")
        if not (isinstance(values, list) and values) and "pattern" not in schema:
            return f"\"'\" {text_term(schema, _CHARS)} \"'\""
        return json_term(schema)
    return value_term(schema, _CHARS)


def action_call(name: str, params: dict[str, Any] | None, lit: Lit) -> str:
    """One action: required keywords first, then the optional ones, comma-separated."""
    items = [(f"{quoted(key + '=')} {_value(schema)}", required)
             for key, schema, required in properties(params)]
    need = [term for term, required in items if required]
    opt = [term for term, required in items if not required]
    body = ' ", " '.join(need)
    if need:
        body += "".join(f' (", " {term})?' for term in opt)
    elif opt:
        alts = [" ".join([opt[i], *(f'(", " {t})?' for t in opt[i + 1:])])
                for i in range(len(opt))]
        body = "(" + " | ".join(f"({a})" for a in alts) + ")?"
    return f"{lit(name + '(')} {body} {lit(')')}"
