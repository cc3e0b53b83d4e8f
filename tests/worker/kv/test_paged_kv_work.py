"""WorkingSet: page -> slot map of float page copies, least recently used eviction."""

from __future__ import annotations

import numpy as np

from worker.kv.paged_kv_work import WorkingSet


def _pages(*ids: int) -> np.ndarray:
    return np.array(ids, dtype=np.int64)


def test_loads_only_missing_pages_and_reuses_held_ones() -> None:
    ws = WorkingSet(num_pages=10, slots=4)
    got = ws.acquire(_pages(3, 5))
    assert got is not None
    loaded, slots = got
    assert list(loaded) == [3, 5] and len(set(slots.tolist())) == 2
    again = ws.acquire(_pages(3, 5, 7))
    assert again is not None and list(again[0]) == [7]
    assert ws.loads == 3
    ws.check()


def test_evicts_the_least_recently_used_page_not_read_now() -> None:
    ws = WorkingSet(num_pages=10, slots=3)
    for step in ([1], [2], [3], [1]):  # page 2 is now the least recently used
        assert ws.acquire(_pages(*step)) is not None
    got = ws.acquire(_pages(1, 4))
    assert got is not None and list(got[0]) == [4]
    assert ws.slot_of[2] == -1 and ws.slot_of[3] >= 0 and ws.slot_of[1] >= 0
    ws.check()


def test_a_batch_that_does_not_fit_changes_nothing() -> None:
    ws = WorkingSet(num_pages=10, slots=2)
    assert ws.acquire(_pages(1, 2)) is not None
    assert ws.acquire(_pages(3, 4, 5)) is None
    assert ws.slot_of[1] >= 0 and ws.slot_of[2] >= 0 and ws.slot_of[3] == -1
    ws.check()


def test_forgotten_pages_are_loaded_again() -> None:
    ws = WorkingSet(num_pages=10, slots=4)
    assert ws.acquire(_pages(1, 2)) is not None
    ws.forget(_pages(2, 9))  # 9 never had a copy
    got = ws.acquire(_pages(1, 2))
    assert got is not None and list(got[0]) == [2]
    ws.check()


def test_no_slots_never_holds_anything() -> None:
    ws = WorkingSet(num_pages=4, slots=0)
    assert ws.acquire(_pages(1)) is None
    got = ws.acquire(_pages())
    assert got is not None and not len(got[0])


def test_version_changes_exactly_when_a_copy_changes() -> None:
    """Decode plans reuse the last step's tables while the version stays (worker/kv/working.py)."""
    ws = WorkingSet(num_pages=10, slots=2)
    assert ws.acquire(_pages(1, 2)) is not None
    v = ws.version
    assert ws.acquire(_pages(1, 2)) is not None and ws.version == v  # all held: no change
    ws.forget(_pages(5, 5))  # held nowhere
    assert ws.version == v
    ws.forget(_pages(2))
    assert ws.version > v
    v = ws.version
    assert ws.acquire(_pages(3)) is not None and ws.version > v  # loaded
    v = ws.version
    assert ws.acquire(_pages(4)) is not None and ws.version > v  # loaded over an evicted copy
    ws.check()
