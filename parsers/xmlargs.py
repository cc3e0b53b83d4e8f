"""Helpers for XML-style parameter values (Qwen3-Coder, MiniMax-M2, GLM-4.5+)."""

from __future__ import annotations

import re

_ATTR_RE = re.compile(r"""\s*name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+))\s*/?\s*$""")


def strip_one_newline(value: str) -> str:
    """Drop one leading and one trailing newline (the format's own line breaks)."""
    if value.startswith("\r\n"):
        value = value[2:]
    elif value.startswith("\n"):
        value = value[1:]
    if value.endswith("\r\n"):
        value = value[:-2]
    elif value.endswith("\n"):
        value = value[:-1]
    return value


def name_attribute(attrs: str) -> str | None:
    """The value of a lone ``name="..."`` attribute (quoted or bare), else None."""
    m = _ATTR_RE.match(attrs)
    if m is None:
        return None
    name = next(g for g in m.groups() if g is not None).strip()
    return name or None


def plain_name(text: str) -> str | None:
    """A stripped identifier-like name without whitespace or angle brackets, else None."""
    name = text.strip()
    if not name or any(c.isspace() or c in "<>" for c in name):
        return None
    return name
