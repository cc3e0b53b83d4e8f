"""Helpers for XML-style parameter values (Qwen3-Coder, MiniMax-M2, GLM-4.5+)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator

from parsers.jsonutil import Finder

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


def parameter_pairs(body: str, open_tag: str, close_tag: str, key_of: Callable[[str], str | None],
                    closed: bool) -> Iterator[tuple[str, str]]:
    """(key, raw value) of each ``OPEN_TAG...>VALUE CLOSE_TAG`` in BODY, in order.

    KEY_OF reads the key from the text between OPEN_TAG and ``>``. An unterminated value counts
    (up to the next parameter or the end) only when the call itself is CLOSED.
    """
    find = Finder(body)
    i = find.find(open_tag, 0)
    while i >= 0:
        gt = body.find(">", i + len(open_tag))
        if gt < 0:
            return
        key = key_of(body[i + len(open_tag) : gt])
        close = find.find(close_tag, gt + 1)
        nxt = find.find(open_tag, gt + 1)
        if close >= 0 and (nxt < 0 or close < nxt):
            value, i = body[gt + 1 : close], find.find(open_tag, close + len(close_tag))
        elif closed:
            stop = nxt if nxt >= 0 else len(body)
            value, i = body[gt + 1 : stop], nxt
        else:
            return
        if key:
            yield key, value
