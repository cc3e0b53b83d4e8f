"""Which full K8V4 pages have a float copy in the working set: page -> slot, least recently used.

Full pages never change while they hold the same content, so decode reads each one from a float
copy dequantized once, instead of dequantizing (or multiplying quantized) every step. The copies
live in slots of a bounded float array (the store's tail arrays, after the tail pages); this
class only keeps the host-side map. A page that is written again (it was freed and reused) loses
its copy: every batch forgets the pages it writes, before planning what it reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class WorkingSet:
    """Slot bookkeeping for float copies of up to ``slots`` pages of a pool of ``num_pages``."""

    def __init__(self, num_pages: int, slots: int) -> None:
        self.slots = slots
        self.slot_of = np.full(num_pages, -1, dtype=np.int64)  # page -> slot (-1: no copy)
        self.page_of = np.full(slots, -1, dtype=np.int64)  # slot -> page (-1: free)
        self.used = np.zeros(slots, dtype=np.int64)  # clock of the slot's last use
        self.clock = 0
        self.loads = 0  # pages dequantized into the set so far (stats, tests)
        self.refused = 0  # batches whose pages did not fit (they read quantized pages)
        self.version = 0  # bumped whenever a copy is dropped, evicted or loaded
        self.memo: tuple[Any, Any] | None = None  # the last decode plan's tables and their key
        self.free = list(range(slots - 1, -1, -1))  # free slots, lowest last (taken first)

    def forget(self, pages: np.ndarray) -> None:
        """Drop the copies of PAGES (their content is being rewritten)."""
        held = self.slot_of[pages]
        held = held[held >= 0]
        if len(held):  # (a decode step's pages hold none: no sort)
            held = np.unique(held)  # PAGES may repeat
            self.page_of[held] = -1
            self.slot_of[pages] = -1
            self.free.extend(held.tolist())
            self.version += 1

    def acquire(self, pages: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """Slots for the distinct PAGES a batch reads: the (pages, slots) to load now.

        Evicts the least recently used copies that this batch does not read. None (and no
        change) when PAGES do not fit in the set at all.
        """
        if len(pages) > self.slots:
            self.refused += 1
            return None
        self.clock += 1
        held = self.slot_of[pages]
        self.used[held[held >= 0]] = self.clock
        missing = pages[held < 0]
        if not len(missing):
            return missing, missing
        self.version += 1
        if len(self.free) >= len(missing):  # the usual case: no scan of every slot
            slots = np.array([self.free.pop() for _ in range(len(missing))], dtype=np.int64)
        else:
            free = np.array(self.free, dtype=np.int64)
            self.free = []
            busy = np.flatnonzero((self.page_of >= 0) & (self.used < self.clock))
            victims = busy[np.argsort(self.used[busy], kind="stable")[: len(missing) - len(free)]]
            self.slot_of[self.page_of[victims]] = -1
            self.page_of[victims] = -1
            slots = np.concatenate([free, victims])
        self.slot_of[missing] = slots
        self.page_of[slots] = missing
        self.used[slots] = self.clock
        self.loads += len(missing)
        return missing, slots

    def cancel(self, pages: np.ndarray) -> None:
        """Undo ``acquire`` for PAGES whose copies were never written (not counted as loads)."""
        self.forget(pages)
        self.loads -= len(pages)

    def check(self) -> None:
        """Assert the two maps and the free list agree (tests)."""
        held = np.flatnonzero(self.slot_of >= 0)
        assert np.array_equal(np.sort(self.slot_of[held]), np.flatnonzero(self.page_of >= 0))
        assert np.array_equal(self.page_of[self.slot_of[held]], held)
        assert sorted(self.free) == np.flatnonzero(self.page_of < 0).tolist()
