"""An MTP drafter's state per target row: the hidden states it captured, by absolute position,
and its next-n layer's own KV."""

from __future__ import annotations

import weakref
from collections import deque
from dataclasses import dataclass, field

import mlx.core as mx

from worker.kv.request_pages import RequestPages

WINDOW = 2048  # positions kept ahead of the MTP KV; older ones go (its context restarts later)


@dataclass
class Chunk:
    """Positions pos..pos+n-1 are src[row, off:off+n] (a forward's whole output, not copied)."""

    pos: int
    src: mx.array
    row: int
    off: int
    n: int

    @property
    def end(self) -> int:
        """One past the last position."""
        return self.pos + self.n


class Captured:
    """Contiguous captured hidden states; a capture at an earlier position overwrites the rest."""

    def __init__(self) -> None:
        self.chunks: deque[Chunk] = deque()

    def put(self, start: int, src: mx.array, row: int, n: int) -> None:
        """Positions START..START+n-1 are src[row, :n] (B, n, D)."""
        end = self.chunks[-1].end if self.chunks else start
        if start > end:  # a gap (positions never captured): start afresh from here
            self.chunks.clear()
        while self.chunks and self.chunks[-1].pos >= start:  # rewritten (rejected drafts)
            self.chunks.pop()
        if self.chunks and self.chunks[-1].end > start:
            self.chunks[-1].n = start - self.chunks[-1].pos
        self.chunks.append(Chunk(start, src, row, 0, n))
        while self.chunks[0].end + WINDOW < start + n:
            self.chunks.popleft()

    def first(self) -> int:
        """The first captured position."""
        return self.chunks[0].pos if self.chunks else 0

    def span(self, lo: int, hi: int) -> mx.array | None:
        """Hidden states (hi-lo, D) of positions lo..hi-1 (None when not all captured)."""
        if not self.chunks or self.chunks[0].pos > lo or self.chunks[-1].end < hi or hi <= lo:
            return None
        parts = [c.src[c.row, c.off + max(lo, c.pos) - c.pos: c.off + min(hi, c.end) - c.pos]
                 for c in self.chunks if c.pos < hi and c.end > lo]
        return parts[0] if len(parts) == 1 else mx.concatenate(parts)

    def forget_before(self, pos: int) -> None:
        """Drop positions before POS (their MTP KV is computed)."""
        while self.chunks and self.chunks[0].end <= pos:
            self.chunks.popleft()
        if self.chunks and self.chunks[0].pos < pos:
            c = self.chunks[0]
            c.off, c.n, c.pos = c.off + pos - c.pos, c.end - pos, pos


@dataclass(eq=False)
class MTPRow:
    """One target row's MTP state: captured hidden states and the layer's own KV."""

    target: weakref.ref[RequestPages]  # the target row's pages object: captures are keyed by it
    hidden: Captured = field(default_factory=Captured)
    base: int = 0  # absolute position of the MTP KV's slot 0
    done: int = 0  # absolute positions base..done-1 are in the MTP KV
    computed: int = 0  # KVManager's view: local positions held (done - base)
    tokens: list[int] = field(default_factory=list)
    kv: RequestPages = field(default_factory=RequestPages)
    cache_salt: str = ""  # its KVManager has no prefix tree
