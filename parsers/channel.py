"""Text sink that trims whitespace next to cut points (tool calls, tags, messages)."""

from __future__ import annotations


class TextChannel:
    """Passes text through, trimming whitespace runs adjacent to cut points.

    With ``hold_trailing`` a trailing whitespace run is held back until non-whitespace text
    follows (then it is released) or a ``cut`` happens. After a cut (or when created with
    ``skip_leading``) leading whitespace is skipped. When text resumes after a cut and some
    text was already emitted, one separator is kept: the whitespace run before the cut, else
    the one after it, else ``default_sep``. Text before the first cut keeps its leading
    whitespace; text after the last cut loses its leading whitespace only.

    The output is a pure function of the pushed text and the cut positions, so it does not
    depend on how the text was chunked.
    """

    __slots__ = ("_hold", "_pending", "_skip", "_sep", "_lead", "_default_sep", "emitted")

    def __init__(
        self, *, hold_trailing: bool = True, skip_leading: bool = False, default_sep: str = ""
    ) -> None:
        self._hold = hold_trailing
        self._pending = ""
        self._skip = skip_leading
        self._sep = ""
        self._lead = ""
        self._default_sep = default_sep
        self.emitted = False

    def push(self, text: str) -> str:
        """Feed text; return what can be released now."""
        if not text:
            return ""
        if self._skip:
            stripped = text.lstrip()
            self._lead += text[: len(text) - len(stripped)]
            if not stripped:
                return ""
            self._skip = False
            if self.emitted:
                stripped = (self._sep or self._lead or self._default_sep) + stripped
            self._sep = self._lead = ""
            text = stripped
        self.emitted = True
        if not self._hold:
            return text
        body = text.rstrip()
        if not body:
            self._pending += text
            return ""
        out = self._pending + body
        self._pending = text[len(body) :]
        return out

    def cut(self) -> str:
        """Mark a cut point: hold back the whitespace around it (releases nothing)."""
        if not self._skip:
            self._sep = self._pending
        self._pending = ""
        self._lead = ""
        self._skip = True
        return ""

    def flush(self) -> str:
        """End of stream without a cut: release held whitespace."""
        out, self._pending = self._pending, ""
        return out
