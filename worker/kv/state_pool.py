"""Recurrent-state slots of linear-attention layers (Gated DeltaNet: a conv state and an SSM state).

A hybrid model (Qwen3.5/3.6, Qwen3-Next) keeps, besides the attention layers' pages, a fixed-size
state per sequence in each linear-attention layer. The pool holds those states in slots: each
layer's state arrays are (slots, size) rows, so one gather by a (B,) slot vector gives a batch's
states and one row write (the store's ``put_rows``: in place on the CPU) stores them back. Slot 0
is scratch, never handed out. A running request owns one slot; the prefix cache keeps snapshots
(the state after a page-aligned prefix) in others, and a running request may hold one more, the
state at its latest page boundary, until the cache takes it over.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

import mlx.core as mx

from worker.kv.scatter import PutRows, scatter_rows


@dataclass(frozen=True)
class StateLayout:
    """Which model layers are recurrent and the shape and dtype of each of their states."""

    layers: tuple[int, ...]  # model layer indices of the linear-attention layers
    shapes: tuple[tuple[tuple[int, ...], mx.Dtype], ...]  # per state index (per-sequence shape)

    def bytes_per_slot(self) -> int:
        """Bytes one sequence's states take across every recurrent layer."""
        return len(self.layers) * sum(prod(s) * d.size for s, d in self.shapes)


class OutOfSlots(Exception):
    """No free state slot."""


class StatePool:
    """The state slots of every recurrent layer, their free list, and row reads and writes."""

    def __init__(self, layout: StateLayout, slots: int, put_rows: PutRows = scatter_rows) -> None:
        self.layout = layout
        self.num_slots = slots
        self.put_rows = put_rows
        self.arrays: list[list[mx.array]] = [
            [mx.zeros((slots, prod(shape)), dtype=dtype) for shape, dtype in layout.shapes]
            for _ in layout.layers]
        self._free = list(range(slots - 1, 0, -1))  # slot 0: scratch
        # the last speculative verify forward's per-position states (worker/kv/state_capture.py)
        self.capture: Any = None
        mx.eval(self.arrays)

    @property
    def num_free(self) -> int:
        """Slots not handed out."""
        return len(self._free)

    def alloc(self) -> int:
        """A free slot (its contents are whatever was last written there)."""
        if not self._free:
            raise OutOfSlots
        return self._free.pop()

    def free(self, slot: int) -> None:
        """Give SLOT back."""
        assert 0 < slot < self.num_slots and slot not in self._free, slot
        self._free.append(slot)

    def read(self, layer: int, index: int, slots: mx.array) -> mx.array:
        """Recurrent layer LAYER's state INDEX at SLOTS (B,): (B, *shape)."""
        shape, _ = self.layout.shapes[index]
        return self.arrays[layer][index][slots].reshape(slots.shape[0], *shape)

    def write(self, layer: int, index: int, slots: mx.array, values: mx.array) -> None:
        """Store VALUES (B, *shape) as recurrent layer LAYER's state INDEX at SLOTS (B,)."""
        arrays = self.arrays[layer]
        dtype = arrays[index].dtype
        arrays[index] = self.put_rows(arrays[index], slots,
                                      values.reshape(slots.shape[0], -1).astype(dtype))

    def copy(self, dst: int, src: int) -> None:
        """Slot DST's states become slot SRC's (in every layer)."""
        rows, source = mx.array([dst]), mx.array([src])
        for arrays in self.arrays:
            for i, a in enumerate(arrays):
                arrays[i] = self.put_rows(a, rows, a[source])

    def all_arrays(self) -> list[mx.array]:
        """Every state array (to materialize pending writes)."""
        return [a for arrays in self.arrays for a in arrays]

    def nbytes(self) -> int:
        """Bytes held by the pool."""
        return sum(a.nbytes for a in self.all_arrays())

    def check(self) -> None:
        """Assert the free list is sane (tests)."""
        assert len(set(self._free)) == len(self._free) and 0 not in self._free
