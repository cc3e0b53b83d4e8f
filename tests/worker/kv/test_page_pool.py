"""PagePool: allocation is all-or-nothing and free + used == total always."""

from __future__ import annotations

import random

import pytest

from worker.kv.page_pool import OutOfPages, PagePool


def test_alloc_free_and_scratch_page() -> None:
    pool = PagePool(9)
    assert pool.total == 8 and pool.num_free == 8
    pages = pool.alloc(8)
    assert 0 not in pages and sorted(pages) == list(range(1, 9))
    with pytest.raises(OutOfPages):
        pool.alloc(1)
    pool.free(pages[:3])
    assert pool.num_free == 3 and pool.num_used == 5
    pool.check()


def test_all_or_nothing_and_double_free() -> None:
    pool = PagePool(5)
    with pytest.raises(OutOfPages):
        pool.alloc(5)
    assert pool.num_free == 4
    got = pool.alloc(2)
    pool.free(got)
    with pytest.raises(ValueError):
        pool.free(got[:1])


def test_random_operations_keep_invariant() -> None:
    rng = random.Random(0)
    pool = PagePool(64)
    held: list[int] = []
    for _ in range(2000):
        if held and rng.random() < 0.5:
            k = rng.randint(1, len(held))
            rng.shuffle(held)
            pool.free(held[:k])
            held = held[k:]
        else:
            try:
                held += pool.alloc(rng.randint(1, 8))
            except OutOfPages:
                pass
        pool.check()
        assert pool.num_used == len(held) == len(set(held))
