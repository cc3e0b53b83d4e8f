"""Content around tool calls: kept exactly, minus the format's separator and empty layout."""

from __future__ import annotations


class ContentSegments:
    """The content channel of a tool parser; tool calls ``cut`` it into segments.

    * A segment with text is released exactly as the model wrote it, except that right
      before a call it loses the longest suffix it shares with ``sep``, the separator the
      format's chat template puts between content and a call (e.g. ``"\\n"`` for Hermes).
    * A whitespace-only segment next to a call is layout and is dropped (when there are no
      calls at all, whitespace-only content is kept).

    Trailing whitespace is held back until text follows, a cut decides it or the stream
    ends, so the output is a pure function of the pushed text and the cut positions: it
    does not depend on how the text was chunked.
    """

    __slots__ = ("_sep", "_pending", "_has_text", "_cuts")

    def __init__(self, sep: str = "") -> None:
        self._sep = sep
        self._pending = ""  # whitespace not yet released (the whole segment while it has no text)
        self._has_text = False  # the current segment has non-whitespace text
        self._cuts = 0

    def push(self, text: str) -> str:
        """Feed content text; return what can be released now."""
        if not text:
            return ""
        body = text.rstrip()
        if not body:
            self._pending += text
            return ""
        out = self._pending + body
        self._pending = text[len(body) :]
        self._has_text = True
        return out

    def cut(self) -> str:
        """A call starts here: release the segment's held tail minus the separator."""
        out = ""
        if self._has_text:
            out = self._pending[: len(self._pending) - _shared_suffix(self._pending, self._sep)]
        self._pending = ""
        self._has_text = False
        self._cuts += 1
        return out

    def flush(self) -> str:
        """End of stream: release the held tail (a whitespace-only last segment is dropped)."""
        out = self._pending if self._has_text or self._cuts == 0 else ""
        self._pending = ""
        return out


def _shared_suffix(text: str, sep: str) -> int:
    """Length of the longest suffix of ``text`` that is also a suffix of ``sep``."""
    k = min(len(text), len(sep))
    while k and not text.endswith(sep[len(sep) - k :]):
        k -= 1
    return k
