"""Incremental detection of where a bracketed JSON or Python expression closes."""

from __future__ import annotations

import re

_OUTSIDE_PY = re.compile(r"[\"'()\[\]{}]")
_OUTSIDE_JSON = re.compile(r'["()\[\]{}]')
_IN_STRING = {'"': re.compile(r'[\\"]'), "'": re.compile(r"[\\']")}


class BracketScanner:
    """Tracks bracket depth and string literals from ``start`` over a growing text.

    ``scan`` resumes where the previous call stopped, so the total work is linear.
    """

    __slots__ = ("pos", "_outside", "_depth", "_quote", "_escape", "_opened")

    def __init__(self, start: int, *, python: bool) -> None:
        self.pos = start
        self._outside = _OUTSIDE_PY if python else _OUTSIDE_JSON
        self._depth = 0
        self._quote = ""
        self._escape = False
        self._opened = False

    def scan(self, text: str, end: int | None = None) -> int:
        """Index just past the bracket that closes the expression, or -1 if not there yet.

        Only ``text[:end]`` is scanned when ``end`` is given.
        """
        i, n = self.pos, len(text) if end is None else end
        while i < n:
            if self._escape:
                self._escape = False
                i += 1
                continue
            if self._quote:
                m = _IN_STRING[self._quote].search(text, i, n)
                if m is None:
                    i = n
                    break
                i = m.end()
                if m.group() == "\\":
                    self._escape = True
                else:
                    self._quote = ""
                continue
            m = self._outside.search(text, i, n)
            if m is None:
                i = n
                break
            c = m.group()
            i = m.end()
            if c in "\"'":
                self._quote = c
            elif c in "([{":
                self._depth += 1
                self._opened = True
            else:
                self._depth -= 1
                if self._opened and self._depth <= 0:
                    self.pos = i
                    return i
        self.pos = i
        return -1
