"""One forward pass's recurrent-state rows, and the per-layer cache objects mlx-lm's linear-attention
layers call (the shape of mlx-lm's ``ArraysCache``).

mlx-lm's Gated DeltaNet reads ``cache[0]`` (conv state) and ``cache[1]`` (SSM state), writes both
back, reads ``cache.lengths`` for right-padded rows and calls ``cache.advance(n)``; its model asks
``cache.make_mask(n)`` for the padding mask. ``StateView`` answers from the pool's slots: a row
that starts at position 0 starts from zeros; a row whose fed positions end on a page boundary
also has its new state copied to its boundary slot (the prefix cache's snapshot candidate).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from worker.kv.request_pages import RequestPages
from worker.kv.state_capture import Capture
from worker.kv.state_pool import StatePool


class StateRows:
    """The slots a batch reads and writes, which rows start fresh, and the padding lengths."""

    def __init__(self, pool: StatePool, kvs: list[RequestPages], starts: list[int],
                 lengths: list[int], page_size: int, verify: bool = False) -> None:
        """Plan the batch; rows whose positions end on a page boundary and that hold a boundary
        slot record there how many positions their boundary state covers (``boundary_at``).
        VERIFY (a speculative verify forward): every position's states are captured for
        ``state_capture.roll_back`` instead, and no boundary state is kept."""
        self.pool = pool
        n = max(lengths)
        self.slots = mx.array([kv.state for kv in kvs])
        fresh = [s == 0 for s in starts]
        self.all_fresh = all(fresh)
        self.fresh = (mx.array(fresh)[:, None, None] if any(fresh) and not self.all_fresh
                      else None)
        self.lengths: mx.array | None = (None if all(x == n for x in lengths)
                                         else mx.array(lengths))
        self.capture = Capture(pool, kvs, self.slots) if verify else None
        snap = [b for b, (kv, s, x) in enumerate(zip(kvs, starts, lengths, strict=True))
                if kv.boundary and x > 0 and (s + x) % page_size == 0 and not verify]
        for b in snap:
            kvs[b].boundary_at = starts[b] + lengths[b]
        self.snap_rows = mx.array(snap) if snap else None
        self.snap_slots = mx.array([kvs[b].boundary for b in snap]) if snap else None

    def views(self, layer: int) -> StateView:
        """Recurrent layer LAYER's cache object."""
        return StateView(self, layer)


class StateView:
    """One recurrent layer's states for one forward pass, as mlx-lm's ArraysCache."""

    def __init__(self, rows: StateRows, layer: int) -> None:
        self.rows = rows
        self.layer = layer
        self.lengths = rows.lengths

    def __getitem__(self, index: int) -> mx.array | None:
        """State INDEX of every row (B, ...), zeros for rows starting fresh (None: all are)."""
        r = self.rows
        if index == 0 and r.capture is not None:  # the layer's call begins: its captures
            r.capture.layer = self.layer
        if r.all_fresh:
            return None
        states = r.pool.read(self.layer, index, r.slots)
        if r.fresh is not None:
            fresh = r.fresh.reshape(-1, *([1] * (states.ndim - 1)))
            states = mx.where(fresh, mx.zeros((), dtype=states.dtype), states)
        return states

    def __setitem__(self, index: int, value: mx.array) -> None:
        """Store every row's new state INDEX (and boundary rows' copy)."""
        r = self.rows
        r.pool.write(self.layer, index, r.slots, value)
        if r.snap_rows is not None and r.snap_slots is not None:
            r.pool.write(self.layer, index, r.snap_slots, value[r.snap_rows])

    def advance(self, n: int) -> None:
        """mlx-lm's bookkeeping after a call: the padding lengths count down."""
        if self.lengths is not None:
            self.lengths = self.lengths - n

    def make_mask(self, n: int, **_: Any) -> mx.array | None:
        """(B, N) True at each row's fed positions (None: no row is padded)."""
        if self.lengths is None:
            return None
        return mx.arange(n)[None, :] < self.lengths[:, None]

    @property
    def state(self) -> tuple[()]:
        """Pooled states have nothing for mlx-lm to save."""
        return ()

    def is_trimmable(self) -> bool:
        """mlx-lm never trims our caches."""
        return False
