"""Stop-string matching over streamed text, holding back what could still become a stop."""

from __future__ import annotations


class StopMatcher:
    """Feeds text deltas; releases text that can no longer be part of a stop string."""

    def __init__(self, stops: list[str]) -> None:
        self.stops = [s for s in stops if s]
        self.held = ""
        self.stopped = False
        self.matched: str | None = None  # the stop string that ended the text

    def feed(self, text: str) -> str:
        """Return the text safe to emit; sets ``stopped`` when a stop string appears."""
        if not self.stops:
            return text
        buf = self.held + text
        found = [(i, s) for s in self.stops if (i := buf.find(s)) >= 0]
        if found:
            cut, self.matched = min(found, key=lambda f: f[0])
            self.held = ""
            self.stopped = True
            return buf[:cut]
        keep = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), keep, -1):
                if buf.endswith(s[:n]):
                    keep = n
                    break
        self.held = buf[len(buf) - keep :] if keep else ""
        return buf[: len(buf) - keep]

    def flush(self) -> str:
        """Release held text at the end of generation."""
        out, self.held = self.held, ""
        return out
