"""RadixCache invariants: page-aligned sharing, splits keep pages, locks, LRU eviction."""

from __future__ import annotations

import random

from cache.page_pool import PagePool
from cache.radix_cache import RadixCache

P = 4


def _tokens(*pages: int) -> list[int]:
    """Tokens made of page-sized blocks: block k is [k*10, k*10+1, k*10+2, k*10+3]."""
    return [k * 10 + i for k in pages for i in range(P)]


def test_only_full_pages_match_and_limit_caps() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1, 2, 3), [11, 12, 13])
    pages, _ = rc.match_prefix(_tokens(1, 2, 3) + [99])
    assert pages == [11, 12, 13]
    pages, _ = rc.match_prefix(_tokens(1, 2)[:-1])  # 7 tokens: one full page
    assert pages == [11]
    pages, _ = rc.match_prefix(_tokens(1, 2, 3), limit=11)  # capped one short: 2 pages
    assert pages == [11, 12]
    assert rc.match_prefix(_tokens(5))[0] == []


def test_split_keeps_pages() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1, 2, 3), [11, 12, 13])
    tree, _ = rc.insert(_tokens(1, 2, 7), [21, 22, 27])
    assert tree == [11, 12, 27]  # caller's 21, 22 duplicate the tree's and must be freed
    assert sorted(rc.all_pages()) == [11, 12, 13, 27]
    assert rc.match_prefix(_tokens(1, 2, 3))[0] == [11, 12, 13]
    assert rc.match_prefix(_tokens(1, 2, 7))[0] == [11, 12, 27]
    assert rc.num_pages == 4


def test_eviction_spares_locked_and_goes_lru() -> None:
    rc = RadixCache(P)
    _, a = rc.insert(_tokens(1, 2), [11, 12])
    _, b = rc.insert(_tokens(3), [13])
    _, c = rc.insert(_tokens(4), [14])
    rc.lock(a)
    rc.match_prefix(_tokens(3))  # touch b: c is now the least recently used
    assert rc.evict(1) == [14]
    assert rc.evict(10) == [13]  # a is locked: only b could go
    assert sorted(rc.all_pages()) == [11, 12]
    rc.unlock(a)
    assert sorted(rc.evict(10)) == [11, 12] and rc.num_pages == 0


def test_lock_counts_return_to_zero_after_split() -> None:
    rc = RadixCache(P)
    _, node = rc.insert(_tokens(1, 2, 3), [11, 12, 13])
    rc.lock(node)
    rc.insert(_tokens(1, 9), [21, 29])  # splits the locked node
    rc.unlock(node)
    stack = list(rc.root.children.values())
    while stack:
        n = stack.pop()
        assert n.lock_ref == 0
        stack.extend(n.children.values())


def test_random_workload_against_pool() -> None:
    """Random inserts/locks/evictions: tree pages are unique, pool accounting stays exact."""
    rng = random.Random(1)
    pool = PagePool(200)
    rc = RadixCache(P)
    locked = []
    for _ in range(500):
        op = rng.random()
        if op < 0.5:
            seq = _tokens(*[rng.randint(1, 4) for _ in range(rng.randint(1, 6))])
            pages = pool.alloc(len(seq) // P) if pool.num_free >= len(seq) // P else None
            if pages is None:
                pool.free(rc.evict(len(seq) // P))
                continue
            tree, node = rc.insert(seq, pages)
            pool.free([p for p, t in zip(pages, tree, strict=True) if p != t])
            if rng.random() < 0.3:
                rc.lock(node)
                locked.append(node)
        elif op < 0.7 and locked:
            rc.unlock(locked.pop(rng.randrange(len(locked))))
        else:
            freed = rc.evict(rng.randint(1, 10))
            pool.free(freed)
        tree_pages = rc.all_pages()
        assert len(tree_pages) == len(set(tree_pages)) == rc.num_pages == pool.num_used
        pool.check()
    for node in locked:
        rc.unlock(node)
    pool.free(rc.reset())
    assert pool.num_used == 0
