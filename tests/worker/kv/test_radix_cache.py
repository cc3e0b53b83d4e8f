"""RadixCache invariants: page-aligned sharing, splits keep pages, locks, LRU eviction."""

from __future__ import annotations

import heapq
import random

import pytest

from worker.kv.page_pool import PagePool
from worker.kv.radix_cache import Node, RadixCache

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


def test_parent_becomes_evictable_after_its_children_go() -> None:
    rc = RadixCache(P)
    rc.insert(_tokens(1, 2), [11, 12])
    rc.insert(_tokens(1, 2, 3), [11, 12, 13])
    rc.insert(_tokens(1, 2, 4), [11, 12, 14])
    rc.match_prefix(_tokens(1, 2, 4))  # the [1, 2] node and the 4 leaf: newer than the 3 leaf
    assert rc.evict(1) == [13]  # the [1, 2] node is not a leaf yet, however recently used
    assert rc.evict(1) == [14]
    assert rc.evict(1) == [11, 12]  # a leaf now
    assert rc.num_pages == 0 and rc.evictable_pages() == 0


def test_locked_leaf_is_spared_and_queued_again_when_unlocked() -> None:
    rc = RadixCache(P)
    _, a = rc.insert(_tokens(1), [11])
    rc.insert(_tokens(2), [12])
    rc.lock(a)
    assert rc.evictable_pages() == 1
    assert rc.evict(5) == [12]  # a is the oldest leaf but locked
    assert rc.evict(5) == []
    rc.unlock(a)
    assert rc.evictable_pages() == 1
    assert rc.evict(5) == [11]


def _walk_order(rc: RadixCache, num_pages: int) -> list[int]:
    """The pages evict(NUM_PAGES) frees, by a walk over every node (the reference order)."""
    nodes, stack = [], list(rc.root.children.values())
    while stack:
        n = stack.pop()
        nodes.append(n)
        stack.extend(n.children.values())
    children = {id(n): len(n.children) for n in nodes}
    heap = [(n.last_access, id(n), n) for n in nodes if not n.children and n.lock_ref == 0]
    heapq.heapify(heap)
    freed: list[int] = []
    while heap and len(freed) < num_pages:
        _, _, node = heapq.heappop(heap)
        freed.extend(node.pages)
        parent = node.parent
        assert parent is not None
        if parent is not rc.root:
            children[id(parent)] -= 1
            if children[id(parent)] == 0 and parent.lock_ref == 0:
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
    return freed


def test_eviction_order_and_counts_match_a_full_walk() -> None:
    """Random inserts, matches, locks and evictions: LRU order as a whole-tree walk finds it."""
    rng = random.Random(7)
    pool = PagePool(120)
    rc = RadixCache(P)
    locked = []
    for _ in range(1500):
        op = rng.random()
        if op < 0.4:
            seq = _tokens(*[rng.randint(1, 5) for _ in range(rng.randint(1, 5))])
            need = len(seq) // P
            if pool.num_free < need:
                want = _walk_order(rc, need - pool.num_free)
                assert rc.evict(need - pool.num_free) == want
                pool.free(want)
                if pool.num_free < need:
                    continue
            pages = pool.alloc(need)
            tree, node = rc.insert(seq, pages)
            pool.free([p for p, t in zip(pages, tree, strict=True) if p != t])
            if rng.random() < 0.3:
                rc.lock(node)
                locked.append(node)
        elif op < 0.6:
            _, node = rc.match_prefix(_tokens(*[rng.randint(1, 5) for _ in range(3)]))
            if rng.random() < 0.3:
                rc.lock(node)
                locked.append(node)
        elif op < 0.8 and locked:
            rc.unlock(locked.pop(rng.randrange(len(locked))))
        else:
            n = rng.randint(1, 6)
            want = _walk_order(rc, n)
            assert rc.evict(n) == want
            pool.free(want)
        unlocked = [p for n in _all_nodes(rc) if n.lock_ref == 0 for p in n.pages]
        assert rc.evictable_pages() == len(unlocked)
        heap = getattr(rc, "_heap", [])  # outdated entries are dropped as the heap grows
        assert len(heap) <= 2 * len(_all_nodes(rc)) + 64
    for node in locked:
        rc.unlock(node)
    pool.free(rc.reset())
    assert pool.num_used == 0 and rc.evictable_pages() == 0


def _all_nodes(rc: RadixCache) -> list[Node]:
    out, stack = [], list(rc.root.children.values())
    while stack:
        n = stack.pop()
        out.append(n)
        stack.extend(n.children.values())
    return out


def test_evicting_a_page_does_not_visit_every_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Finding the next victim (and the evictable count) touches O(log n) nodes, not all n."""
    rc = RadixCache(P)
    for k in range(1000):
        rc.insert(_tokens(k // 50 + 1, 1000 + k), [2 * k + 1, 2 * k + 2])  # 20 parents x 50 leaves
    seen: set[int] = set()
    original = Node.__getattribute__

    def counting(self: Node, name: str) -> object:
        seen.add(id(self))
        return original(self, name)

    monkeypatch.setattr(Node, "__getattribute__", counting)
    assert rc.evictable_pages() > 0
    freed = rc.evict(1)
    monkeypatch.undo()
    assert len(freed) == 1
    assert len(seen) <= 20, f"evict(1) looked at {len(seen)} of ~1,020 nodes"
