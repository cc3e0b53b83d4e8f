"""The windowed layer group's bookkeeping (worker/kv/window_group.py, KVManager): window arithmetic,
release as positions leave the window, prefix hits cut to where the tree has the window's pages,
holes filled by a later sequence, both pools freed on eviction and truncation, and windowed pages no table reads dropped from the
tree when that pool runs short."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx

from worker.kv.layer_kinds import CHUNKED, FULL, SLIDING, LayerKinds
from worker.kv.manager import KVManager
from worker.kv.paged_kv import KVFormat, PagedKVStore
from worker.kv.request_pages import RequestPages
from worker.kv.window_group import WindowGroup, group_for

P = 4  # page size
WINDOW = 6  # the sliding layer's window


@dataclass
class Req:
    tokens: list[int]
    computed: int = 0
    kv: RequestPages = field(default_factory=RequestPages)
    cache_salt: str = ""


SLIDE = LayerKinds((FULL, SLIDING), (0, WINDOW))


def _manager(kinds: LayerKinds = SLIDE) -> KVManager:
    fmt = KVFormat(2, 1, 8, P, mx.float32, "none")
    group = group_for(kinds, P, "none", hybrid=False)
    assert group is not None
    store = PagedKVStore(fmt, 40, window_layers=group.layers, window_pages=24)
    store.kinds = kinds
    assert store.k[1][0].shape[0] == 24 * P and store.k[0][0].shape[0] == 40 * P
    return KVManager(store)


def _own(m: KVManager, *reqs: Req) -> None:
    """The pools hold exactly what the requests and the tree hold (the engine's verify)."""
    m.check()
    assert m.window_pool is not None and m.radix is not None
    assert m.window_pool.num_used == sum(m.own_window_pages(r) for r in reqs) + (
        m.radix.num_window_pages)
    assert m.pool.num_used == sum(len(r.kv.pages) - r.kv.shared for r in reqs) + (
        m.radix.num_pages)
    assert sum(m.window_refs.values()) == sum(1 for r in reqs for w in r.kv.window[: r.kv.shared]
                                              if w)


def _compute(m: KVManager, r: Req, upto: int, slide: bool = True) -> None:
    """Decode-like steps up to UPTO positions, sliding after each."""
    while r.computed < upto:
        assert m.ensure(r, r.computed + 1)
        r.computed += 1
        if slide:
            m.slide(r)


def test_window_arithmetic() -> None:
    g = WindowGroup(LayerKinds((FULL, SLIDING), (0, WINDOW)), P)
    assert g.layers == (1,)
    assert g.first_page(10) == (10 - WINDOW + 1) // P == 1 and g.first_page(3) == 0
    assert g.seq_pages() == 2 + 2
    assert g.valid_depth([0, 5, 6], 3) == 3  # a hit at 12 needs positions 7.. (pages 1, 2)
    assert g.valid_depth([0, 0, 6, 0], 4) == 0
    assert g.valid_depth([7, 0, 6, 8], 4) == 4 and g.valid_depth([7, 0, 6, 0], 4) == 1
    chunked = WindowGroup(LayerKinds((CHUNKED, FULL), (8, 0)), P)
    assert chunked.first_page(10) == 2 and chunked.first_page(7) == 0
    assert group_for(LayerKinds((FULL, SLIDING), (0, 6)), P, "k8v4", False) is None
    assert group_for(LayerKinds((FULL, SLIDING), (0, 6)), P, "none", True) is None
    assert group_for(LayerKinds((FULL, FULL), (0, 0)), P, "none", False) is None


def test_pages_leave_as_the_window_slides() -> None:
    m = _manager()
    assert m.window is not None
    r = Req(list(range(100)))
    peak = 0
    for upto in range(1, 60):
        _compute(m, r, upto)
        held = sum(1 for w in r.kv.window if w)
        peak = max(peak, held)
        # released: before the window of the last query and of the last page boundary
        gone = min(m.window.first_page(upto - 1), m.window.first_page(upto - upto % P))
        assert all(w == 0 for w in r.kv.window[:gone]) and all(r.kv.window[gone:])
        _own(m, r)
    assert len(r.kv.pages) == 15 and peak <= m.window.seq_pages()
    m.truncate(r, 50)  # a rejected draft's pages go in both groups
    assert len(r.kv.pages) == len(r.kv.window) == 13
    _own(m, r)
    m.release(r, cache=False)
    assert m.pool.num_used == m.window_pool.num_used == 0  # type: ignore[union-attr]


def test_prefix_hit_needs_the_window_at_its_end() -> None:
    m = _manager()
    a = Req(list(range(40)))
    _compute(m, a, 32)  # decoded: only the last window's pages are left
    m.release(a)  # published: the tree has zeros where a had released
    assert m.radix is not None and m.radix.num_pages == 8 and m.radix.num_window_pages == 2
    _own(m)
    deep = Req(list(range(32)) + [999, 998])
    assert m.match(deep, 33) == 32  # the window at 32 (pages 6, 7) is there
    assert deep.kv.window[:6] == [0] * 6 and all(deep.kv.window[6:8])
    _own(m, deep)
    shallow = Req(list(range(20)) + [7] * 8)
    assert m.match(shallow, 27) == 0  # its window (pages 3, 4) was released: recompute
    assert shallow.kv.node is m.radix.root
    _own(m, deep, shallow)
    # a sequence computing those positions again fills the tree's holes with its pages
    again = Req(list(range(20)) + [5] * 8)
    _compute(m, again, 24, slide=False)
    m.publish(again)
    assert m.radix.num_window_pages == 2 + 5 + 1  # its 5 pages in the holes, 1 new page
    _own(m, deep, shallow, again)
    third = Req(list(range(20)) + [3] * 8)
    assert m.match(third, 27) == 20
    assert third.kv.window[3:5] == again.kv.window[3:5] and all(third.kv.window[3:5])
    _own(m, deep, shallow, again, third)
    for r in (deep, shallow, again, third):
        m.release(r)
    _own(m)
    m.reset_cache()  # eviction returns both groups' pages
    assert m.pool.num_used == m.window_pool.num_used == m.radix.num_window_pages == 0  # type: ignore[union-attr]


def test_window_pool_short_drops_unread_window_pages() -> None:
    m = _manager()
    for i in range(5):  # prompts' pages published whole: the tree fills the windowed pool
        r = Req([i * 1000 + t for t in range(17)])
        _compute(m, r, 16, slide=False)
        m.publish(r)
        m.release(r)
    assert m.window_pool is not None and m.window_pool.num_free == 23 - 20
    big = Req(list(range(64)))
    assert m.ensure(big, 40)  # 10 windowed pages: the least recent prefixes' go for them
    _own(m, big)
    assert m.radix is not None and m.radix.num_pages == 20  # every full page stays cached
    assert m.window_pool.num_free < 3 and m.radix.num_window_pages == 20 - 8
    first = Req(list(range(17)))  # the first prompt's windowed pages went: no hit
    assert m.match(first, 16) == 0
    last = Req([4000 + t for t in range(17)])
    assert m.match(last, 16) == 16
    _own(m, big, first, last)
    assert not m.ensure(Req(list(range(200))), 160)  # 40 pages: the rest is read or held


def test_prompt_longer_than_the_windowed_pool() -> None:
    """Chunks publish their windowed pages; as the window slides past them no table reads them
    and the tree gives them up when the pool runs short (keeping its full pages)."""
    m = _manager()
    assert m.window_pool is not None and m.radix is not None and m.window_pool.total == 23
    r = Req(list(range(140)))
    while r.computed < 128:  # 32 pages in chunks of 4
        assert m.ensure(r, r.computed + 16)
        r.computed += 16
        m.publish(r)
        m.slide(r)
        _own(m, r)
    assert m.radix.num_pages == 32 and m.radix.num_window_pages < 23
    m.release(r)
    _own(m)
    again = Req(list(range(128)) + [1, 2, 3])
    assert m.match(again, 130) == 128  # the end's window is still in the tree
    _own(m, again)
    m.release(again)
