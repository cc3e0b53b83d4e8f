"""Strict JSON helpers: no NaN/Infinity, canonical compact output."""

from __future__ import annotations

import json
import math
from typing import Any

_PARSE_ERRORS = (ValueError, RecursionError, MemoryError, TypeError)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("non-finite number")
    return value


def loads_strict(text: str) -> tuple[bool, Any]:
    """Parse standard JSON; return ``(ok, value)`` and never raise."""
    try:
        return True, json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except _PARSE_ERRORS:
        return False, None


def dumps_canonical(value: Any) -> str | None:
    """``json.dumps(value, ensure_ascii=False)``, or None when it cannot be serialised."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except _PARSE_ERRORS:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: fall back to escaped output
        try:
            text = json.dumps(value, allow_nan=False)
        except _PARSE_ERRORS:
            return None
    return text


def strip_code_fence(text: str) -> str:
    """Remove a surrounding Markdown code fence (```json ... ```), if any."""
    s = text.strip()
    if not s.startswith("```"):
        return s
    nl = s.find("\n")
    if nl < 0:
        return s
    s = s[nl + 1 :].rstrip()
    if s.endswith("```"):
        s = s[:-3]
    return s.strip()


_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def loads_sequence(text: str) -> list[Any] | None:
    """Parse one or more JSON values separated by whitespace or a comma; None if any part
    is not JSON (``{..}, {..}`` is how some models put several calls in one block)."""
    values: list[Any] = []
    i, n = 0, len(text)
    try:
        while True:
            while i < n and text[i] in " \t\r\n":
                i += 1
            if values and i < n and text[i] == ",":
                i += 1
                while i < n and text[i] in " \t\r\n":
                    i += 1
                if i >= n:
                    return None
            if i >= n:
                break
            value, i = _DECODER.raw_decode(text, i)
            values.append(value)
    except _PARSE_ERRORS:
        return None
    return values or None


class Finder:
    """``str.find`` with memoised results per needle, for linear forward scans."""

    __slots__ = ("_text", "_cache")

    def __init__(self, text: str) -> None:
        self._text = text
        self._cache: dict[str, int] = {}

    def find(self, needle: str, start: int) -> int:
        """First index >= start of needle, or -1."""
        hit = self._cache.get(needle)
        if hit is None or (hit != -1 and hit < start):
            hit = self._text.find(needle, start)
            self._cache[needle] = hit
        return hit
