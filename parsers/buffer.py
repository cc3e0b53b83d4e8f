"""Append-only text buffer with a cursor, for linear-time incremental scanning."""

from __future__ import annotations

from collections.abc import Iterable


class MarkerSet:
    """A fixed set of markers with precomputed proper prefixes for hold-back checks."""

    __slots__ = ("markers", "max_len", "_prefixes")

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers: tuple[str, ...] = tuple(m for m in markers if m)
        self.max_len = max((len(m) for m in self.markers), default=0)
        self._prefixes = frozenset(m[:k] for m in self.markers for k in range(1, len(m)))

    def held_suffix(self, text: str, start: int) -> int:
        """Length of the longest suffix of ``text[start:]`` that is a proper prefix of a marker."""
        n = len(text)
        for k in range(min(n - start, self.max_len - 1), 0, -1):
            if text[n - k :] in self._prefixes:
                return k
        return 0


class TextBuffer:
    """Text received so far plus a consumption cursor ``pos``.

    ``find`` remembers how far it has already searched for a given marker set, so waiting
    for a closing marker never rescans the text it already looked at.
    """

    __slots__ = ("_text", "pos", "_hint_set", "_hint_pos")

    def __init__(self) -> None:
        self._text = ""
        self.pos = 0
        self._hint_set: MarkerSet | None = None
        self._hint_pos = 0

    @property
    def text(self) -> str:
        """The buffered text (positions are indexes into it)."""
        return self._text

    def __len__(self) -> int:
        return len(self._text)

    def append(self, text: str) -> None:
        """Append a delta (amortised O(len(text)))."""
        s = self._text
        self._text = ""  # drop our reference so CPython can grow the string in place
        s += text
        self._text = s

    def rest(self) -> str:
        """The unconsumed text."""
        return self._text[self.pos :]

    def slice(self, start: int, end: int | None = None) -> str:
        """A slice of the buffered text."""
        return self._text[start:end]

    def take(self, end: int) -> str:
        """Return ``text[pos:end]`` and move the cursor to ``end``."""
        out = self._text[self.pos : end]
        self.pos = max(self.pos, end)
        return out

    def find(self, markers: MarkerSet) -> tuple[int, str] | None:
        """Earliest marker occurrence at or after ``pos`` (longest marker wins ties)."""
        start = self.pos
        if self._hint_set is markers and self._hint_pos > start:
            start = self._hint_pos
        best: tuple[int, str] | None = None
        text = self._text
        for m in markers.markers:
            i = text.find(m, start)
            if i >= 0 and (best is None or i < best[0] or (i == best[0] and len(m) > len(best[1]))):
                best = (i, m)
        if best is None:
            self._hint_set = markers
            self._hint_pos = max(self.pos, len(text) - markers.max_len + 1)
        else:
            self._hint_set = None
        return best

    def held(self, markers: MarkerSet) -> int:
        """Length of the unconsumed tail that may be the start of one of ``markers``."""
        return markers.held_suffix(self._text, self.pos)

    def compact(self, keep_before: int = 0) -> None:
        """Forget consumed text, keeping ``keep_before`` characters before the cursor."""
        cut = self.pos - keep_before
        if cut > 0:
            self._text = self._text[cut:]
            self.pos -= cut
            self._hint_set = None
