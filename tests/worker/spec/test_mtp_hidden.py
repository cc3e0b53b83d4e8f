"""The MTP drafter's store of captured hidden states: overwrites, gaps, the window, forgetting."""

from __future__ import annotations

import mlx.core as mx

from worker.spec import mtp_hidden
from worker.spec.mtp_hidden import Captured


def rows(lo: int, hi: int, batch: int = 2, row: int = 1) -> mx.array:
    """A (batch, hi-lo, 1) forward output whose row ROW holds its positions' numbers."""
    pos = mx.arange(lo, hi, dtype=mx.float32)[None, :, None]
    return mx.concatenate([pos * 0 - 1] * row + [pos] * (batch - row))


def values(c: Captured, lo: int, hi: int) -> list[int] | None:
    got = c.span(lo, hi)
    return None if got is None else [int(v) for v in got[:, 0].tolist()]  # type: ignore[union-attr]


def test_contiguous_captures_and_rewrites() -> None:
    c = Captured()
    c.put(0, rows(0, 5), 1, 5)  # a prompt chunk
    c.put(5, rows(5, 6), 1, 1)  # a decode step
    assert values(c, 0, 6) == list(range(6)) and values(c, 2, 4) == [2, 3]
    c.put(6, rows(6, 10), 1, 4)  # a verify of 3 drafts
    c.put(7, rows(107, 109), 1, 2)  # one kept: positions 7.. are fed again
    assert values(c, 5, 9) == [5, 6, 107, 108]
    assert values(c, 5, 10) is None  # never captured
    c.forget_before(6)
    assert values(c, 5, 7) is None and values(c, 6, 9) == [6, 107, 108] and c.first() == 6


def test_a_gap_starts_afresh_and_padding_rows_are_cut() -> None:
    c = Captured()
    c.put(0, rows(0, 4), 1, 3)  # the row was 3 of the batch's 4 positions long
    assert values(c, 0, 3) == [0, 1, 2] and values(c, 0, 4) is None
    c.put(10, rows(10, 12), 1, 2)  # a prefix hit elsewhere: 3..9 were never seen
    assert c.first() == 10 and values(c, 0, 3) is None and values(c, 10, 12) == [10, 11]


def test_the_window_drops_old_positions() -> None:
    c = Captured()
    window = mtp_hidden.WINDOW
    for p in range(0, window + 40, 10):
        c.put(p, rows(p, p + 10), 1, 10)
    assert c.first() > 0 and values(c, c.first(), window + 40) is not None
    assert window + 40 - c.first() <= window + 10
