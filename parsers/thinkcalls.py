"""Tool-call blocks written inside a ``<think>`` section: calls or a draft?

Qwen3 models whose template opened ``<think>`` sometimes emit their ``<tool_call>`` without
closing the reasoning first. Reasoning models also draft calls while thinking. The rule,
decided from the text alone (so streaming and whole parsing agree):

* a *region* starts at a tool-call block opener inside the reasoning and runs over complete
  blocks and whitespace, optionally followed by the closing think tag and more whitespace;
* if the output ends inside the region, the region holds real calls: the reasoning ended
  implicitly where the region starts, and the blocks (minus the think tag) are content;
* if anything else follows (more reasoning text, text or another call after the think tag,
  or the think tag inside an unclosed block), the blocks were a draft and stay reasoning.

Only the region itself is held back while this is undecided.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Verdict(enum.Enum):
    """Outcome of scanning a region."""

    WAIT = 0  # more text is needed
    CALLS = 1  # the output ended in the region: it holds calls
    DRAFT = 2  # the region is reasoning text


@dataclass(frozen=True)
class Decision:
    """A verdict plus, for a draft, where reasoning text ends and whether the think closed.

    ``end``: for DRAFT, the index the region's reasoning text runs to (the think tag's index
    when ``closed``, else where scanning resumes in the reasoning). For CALLS, the index of
    the think tag inside the region, or -1.
    """

    verdict: Verdict
    end: int = -1
    closed: bool = False


_WAIT = Decision(Verdict.WAIT)


class CallRegion:
    """Incremental scanner of one region; ``decide`` resumes where it stopped (linear time)."""

    __slots__ = ("_blocks", "_close", "scan", "_closer", "_close_at", "_hint", "_max")

    def __init__(self, blocks: Sequence[tuple[str, str]], close: str, opener_end: int,
                 closer: str) -> None:
        self._blocks = tuple(blocks)
        self._close = close
        self.scan = opener_end  # scanning position (inside the first block's body)
        self._closer = closer  # closer of the block being scanned, "" between blocks
        self._close_at = -1  # index of the think tag inside the region
        self._hint = opener_end
        self._max = max([len(close)] + [len(o) for o, _ in self._blocks])

    def decide(self, text: str, final: bool) -> Decision:
        """Scan ``text`` (the whole buffer) from where the last call stopped."""
        while True:
            if self._closer:
                hit = self._find(text, self._closer)
                if hit is None:
                    return Decision(Verdict.CALLS, self._close_at) if final else _WAIT
                idx, marker = hit
                if marker != self._closer:  # the think tag inside an unclosed block
                    return Decision(Verdict.DRAFT, idx, closed=True)
                self.scan = idx + len(marker)
                self._closer = ""
                continue
            i, n = self.scan, len(text)
            while i < n and text[i].isspace():
                i += 1
            self.scan = i
            if i == n:
                return Decision(Verdict.CALLS, self._close_at) if final else _WAIT
            if self._close_at >= 0:
                return Decision(Verdict.DRAFT, self._close_at, closed=True)
            for opener, closer in self._blocks:
                if text.startswith(opener, i):
                    self.scan = self._hint = i + len(opener)
                    self._closer = closer
                    break
            else:
                if text.startswith(self._close, i):
                    self._close_at = i
                    self.scan = i + len(self._close)
                    continue
                piece = text[i : i + self._max]
                markers = [self._close] + [o for o, _ in self._blocks]
                if not final and any(len(piece) < len(m) and m.startswith(piece) for m in markers):
                    return _WAIT
                return Decision(Verdict.DRAFT, i)

    def _find(self, text: str, closer: str) -> tuple[int, str] | None:
        """Earliest ``closer`` or think tag at or after the scan position."""
        start = max(self.scan, self._hint)
        best: tuple[int, str] | None = None
        for marker in (closer, self._close):
            i = text.find(marker, start)
            if i >= 0 and (best is None or i < best[0]):
                best = (i, marker)
        if best is None:
            self._hint = max(self.scan, len(text) - max(len(closer), len(self._close)) + 1)
        return best
