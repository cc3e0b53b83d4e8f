"""Safe parsing of Python-style calls and literals with ``ast`` (never evaluated)."""

from __future__ import annotations

import ast
import math
from typing import Any

_PARSE_ERRORS = (SyntaxError, ValueError, TypeError, RecursionError, MemoryError, OverflowError)
_JSON_NAMES: dict[str, Any] = {
    "true": True,
    "false": False,
    "null": None,
    "True": True,
    "False": False,
    "None": None,
}


class NotLiteral(ValueError):
    """Raised internally for nodes that are not plain data literals."""


def literal_value(node: ast.AST) -> Any:
    """Convert a literal AST node to JSON-compatible data; raise ``NotLiteral`` otherwise."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or value is None or isinstance(value, (str, int)):
            return value
        if isinstance(value, float) and math.isfinite(value):
            return value
        raise NotLiteral("unsupported constant")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [literal_value(elt) for elt in node.elts]
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key, val in zip(node.keys, node.values, strict=True):
            if key is None:
                raise NotLiteral("dict unpacking")
            k = literal_value(key)
            if not isinstance(k, str):
                raise NotLiteral("non-string key")
            out[k] = literal_value(val)
        return out
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = literal_value(node.operand)
        if isinstance(operand, bool) or not isinstance(operand, (int, float)):
            raise NotLiteral("sign on non-number")
        return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    raise NotLiteral(type(node).__name__)


def parse_literal(text: str) -> tuple[bool, Any]:
    """Parse a Python literal expression (e.g. ``{'a': True}``); return ``(ok, value)``."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return True, literal_value(tree.body)
    except _PARSE_ERRORS:
        return False, None


def _callee_name(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def _call(node: ast.AST) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _callee_name(node.func)
    if name is None:
        return None
    kwargs: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:  # **kwargs
            return None
        kwargs[kw.arg] = literal_value(kw.value)
    return name, kwargs


def parse_call(text: str) -> tuple[str, dict[str, Any]] | None:
    """Parse ``name(k=literal, ...)`` (keyword arguments only); None if it is not one."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        return _call(tree.body)
    except _PARSE_ERRORS:
        return None


def parse_call_list(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """Parse ``[f(a=1), g(b="x")]``; None unless it is a non-empty list of such calls."""
    try:
        tree = ast.parse(text.strip(), mode="eval")
        body = tree.body
        if not isinstance(body, ast.List) or not body.elts:
            return None
        calls = []
        for elt in body.elts:
            call = _call(elt)
            if call is None:
                return None
            calls.append(call)
        return calls
    except _PARSE_ERRORS:
        return None
