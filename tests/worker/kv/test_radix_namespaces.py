"""RadixCache namespaces (tenants' cache salts): no match across them, one global LRU and budget."""

from __future__ import annotations

import random

from worker.kv.page_pool import PagePool
from worker.kv.radix_cache import RadixCache

P = 4


def _tokens(*pages: int) -> list[int]:
    """Tokens made of page-sized blocks: block k is [k*10, k*10+1, k*10+2, k*10+3]."""
    return [k * 10 + i for k in pages for i in range(P)]


def test_same_tokens_under_two_salts_never_match() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1, 2, 3), [11, 12, 13], salt="a")
    assert rc.match_prefix(_tokens(1, 2, 3), salt="a")[0] == [11, 12, 13]  # same salt: a hit
    assert rc.cached_length(_tokens(1, 2, 3), salt="a") == 3 * P
    assert rc.match_prefix(_tokens(1, 2, 3), salt="b")[0] == []  # another tenant: nothing
    assert rc.cached_length(_tokens(1, 2, 3), salt="b") == 0
    assert rc.match_prefix(_tokens(1, 2, 3))[0] == []  # nor the shared namespace
    assert rc.cached_length(_tokens(1, 2, 3)) == 0
    tree, _ = rc.insert(_tokens(1, 2), [21, 22], salt="b")
    assert tree == [21, 22]  # b's own copy, not a's pages
    assert sorted(rc.all_pages()) == [11, 12, 13, 21, 22] and rc.num_pages == 5
    assert rc.match_prefix(_tokens(1, 2, 3), salt="b")[0] == [21, 22]
    assert rc.match_prefix(_tokens(1, 2, 3), salt="a")[0] == [11, 12, 13]


def test_shared_namespace_still_shares() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1, 2), [11, 12])
    assert rc.match_prefix(_tokens(1, 2, 3))[0] == [11, 12]
    assert rc.match_prefix(_tokens(1, 2, 3), salt="")[0] == [11, 12]


def test_eviction_is_one_lru_across_namespaces() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1), [11], salt="a")
    rc.insert(_tokens(1), [21], salt="b")
    rc.insert(_tokens(1), [31])
    rc.match_prefix(_tokens(1), salt="a")  # a's page is now the most recently used
    assert rc.evictable_pages() == 3
    assert rc.evict(1) == [21]  # b's is the oldest
    assert rc.evict(1) == [31]
    assert rc.evict(1) == [11]
    assert rc.num_pages == 0 and rc.evictable_pages() == 0
    assert list(rc.roots) == [""]  # emptied namespaces are forgotten, the shared one stays


def test_a_locked_namespace_root_is_kept_and_locks_balance() -> None:
    rc = RadixCache(P)
    pages, node = rc.match_prefix(_tokens(1), salt="a")  # a miss: the request locks a's root
    assert pages == [] and node.parent is None
    rc.lock(node)
    _, leaf = rc.insert(_tokens(1), [11], salt="a")
    rc.lock(leaf)
    rc.unlock(node)
    assert rc.evict(5) == []  # locked by the request
    rc.unlock(leaf)
    assert rc.evict(5) == [11]
    assert all(r.lock_ref == 1 for r in rc.roots.values())


def test_random_workload_over_namespaces_keeps_pool_exact() -> None:
    rng = random.Random(3)
    pool = PagePool(120)
    rc = RadixCache(P)
    locked = []
    for _ in range(800):
        op, salt = rng.random(), rng.choice(["", "a", "b", "c"])
        if op < 0.5:
            seq = _tokens(*[rng.randint(1, 3) for _ in range(rng.randint(1, 5))])
            if pool.num_free < len(seq) // P:
                pool.free(rc.evict(len(seq) // P))
                continue
            pages = pool.alloc(len(seq) // P)
            tree, node = rc.insert(seq, pages, salt)
            pool.free([p for p, t in zip(pages, tree, strict=True) if p != t])
            assert rc.match_prefix(seq, salt=salt)[0] == tree
            if rng.random() < 0.3:
                rc.lock(node)
                locked.append(node)
        elif op < 0.7 and locked:
            rc.unlock(locked.pop(rng.randrange(len(locked))))
        else:
            pool.free(rc.evict(rng.randint(1, 10)))
        tree_pages = rc.all_pages()
        assert len(tree_pages) == len(set(tree_pages)) == rc.num_pages == pool.num_used
    for node in locked:
        rc.unlock(node)
    pool.free(rc.reset())
    assert pool.num_used == 0 and list(rc.roots) == [""]
