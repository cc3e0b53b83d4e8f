"""Page bookkeeping of requests: allocation, prefix sharing through the radix tree, release.

A model with a windowed layer group (worker/kv/window_group.py) has a second pool for those
layers' pages; ``slide`` releases the ones that fell out of every window after each step, and
the tree's windowed pages no request's table points at (``window_refs``) are dropped from the
tree, least recently used first, when that pool runs short.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.kv.page_pool import OutOfPages, PagePool
from worker.kv.paged_kv import PagedKVStore
from worker.kv.radix_cache import RadixCache, common_pages
from worker.kv.request_pages import RequestPages
from worker.kv.snapshots import Snapshots
from worker.kv.window_group import WindowGroup, group_for


class PagedRequest(Protocol):
    """What the manager needs of a request."""

    tokens: list[int]
    computed: int
    kv: RequestPages
    cache_salt: str  # the prefix-cache namespace (a tenant's; "": shared)


@dataclass
class CacheStats:
    """Prefix-cache counters, in tokens."""

    queries: int = 0
    hits: int = 0


class KVManager:
    """Owns the page pool, the prefix tree and the page arrays."""

    def __init__(self, store: PagedKVStore, prefix_cache: bool = True, max_batch: int = 0) -> None:
        self.store = store
        self.page_size = store.fmt.page_size
        self.pool = PagePool(store.num_pages)
        # a hybrid model's recurrent-state slots and the tree's snapshots of them
        self.snapshots = (Snapshots(store.states, max_batch) if store.states is not None
                          else None)
        on_evict = self.snapshots.dropped if self.snapshots is not None else None
        self.radix = RadixCache(self.page_size, on_evict) if prefix_cache else None
        self.tails = PagePool(store.tail_pages) if store.tail_pages else None
        self.stats = CacheStats()
        # the windowed layer group's pool (None: one group, every layer in ``pool``'s pages)
        self.window: WindowGroup | None = None
        self.window_pool: PagePool | None = None
        if store.window_pages:
            self.window = group_for(store.kinds, self.page_size, store.fmt.kind,
                                    store.states is not None)
            assert self.window is not None and set(self.window.layers) == store.window_layers
            self.window_pool = PagePool(store.window_pages)
        # the tree's windowed pages that requests' tables point at (how many tables each):
        # the others may be dropped from the tree when the windowed pool runs short
        self.window_refs: dict[int, int] = {}

    def pages_for(self, tokens: int) -> int:
        """Pages needed to hold TOKENS positions."""
        return -(-tokens // self.page_size)

    def available(self) -> int:
        """Pages that could be had now: free plus evictable."""
        return self.pool.num_free + (self.radix.evictable_pages() if self.radix else 0)

    def shares_inflight_prefix(self, r: PagedRequest, others: Sequence[PagedRequest],
                               limit: int) -> bool:
        """True when one of OTHERS is still computing full pages r could reuse once published.

        Requests that arrive together with a common prompt prefix (a system prompt after a
        restart) then compute it once instead of each recomputing it.
        """
        if self.radix is None or not others:
            return False
        cached = self.radix.cached_length(r.tokens, limit, r.cache_salt)
        for q in others:
            if q.cache_salt != r.cache_salt:
                continue  # another namespace's pages are never shared: no reason to wait
            common = common_pages(q.tokens, r.tokens[:limit], self.page_size)
            if common - cached >= self.page_size and q.computed < common:
                return True
        return False

    def match(self, r: PagedRequest, limit: int) -> int:
        """Reuse cached pages for r's first tokens (at most LIMIT); return the tokens reused."""
        if r.kv.pages:
            return 0
        self.stats.queries += len(r.tokens)
        if self.radix is None:
            return 0
        pages, node = self.radix.match_prefix(r.tokens, limit, r.cache_salt)
        if self.snapshots is not None:  # a hybrid resumes from the deepest state snapshot
            held = self.snapshots.hold(r.kv)  # first: taking a slot may evict snapshots
            node, depth = self.radix.snapshot_above(node, len(pages) * self.page_size)
            while not held and node.parent is not None:  # no slot: no hit (the root)
                node, depth = node.parent, 0
            pages = pages[: depth // self.page_size]
            if depth:
                self.snapshots.resume(r.kv, node)
        if self.window is not None:  # only as deep as the tree still has the window's pages
            path = self.radix.path_window(node)
            depth = self.window.valid_depth(path, len(pages))
            node = self.radix.cut(node, len(pages) * self.page_size, depth * self.page_size)
            pages = pages[:depth]
            start = self.window.first_page(depth * self.page_size)
            r.kv.window = [0] * start + path[start:depth]
            r.kv.window_from = start
            self._ref(path[start:depth], 1)
        self.radix.lock(node)
        r.kv.pages, r.kv.node, r.kv.shared = list(pages), node, len(pages)
        hit = len(pages) * self.page_size
        self.stats.hits += hit
        return hit

    def ensure(self, r: PagedRequest, upto: int) -> bool:
        """Give r pages for positions < UPTO, evicting cached pages if needed; False if short."""
        if self.tails is not None and not r.kv.tail:
            try:
                r.kv.tail = self.tails.alloc(1)[0]
            except OutOfPages:
                return False
        if self.snapshots is not None:
            if not self.snapshots.hold(r.kv):
                return False
            if upto % self.page_size == 0 and self.radix is not None:
                self.snapshots.boundary(r.kv)  # this step's state is a snapshot candidate
        if self.window_pool is not None and not self._ensure_window(r, upto):
            return False
        need = self.pages_for(upto) - len(r.kv.pages)
        if need <= 0:
            return True
        if need > self.pool.num_free and self.radix is not None:
            self._evict(need - self.pool.num_free)
        try:
            r.kv.pages.extend(self.pool.alloc(need))
        except OutOfPages:
            return False
        return True

    def _ensure_window(self, r: PagedRequest, upto: int) -> bool:
        """Give r windowed-group pages for positions < UPTO; False if short."""
        pool = self.window_pool
        assert pool is not None
        need = self.pages_for(upto) - len(r.kv.window)
        if need <= 0:
            return True
        if need > pool.num_free and self.radix is not None:  # the tree's that no table reads
            pool.free(self.radix.drop_window(need - pool.num_free,
                                             lambda w: w in self.window_refs))
        try:
            r.kv.window.extend(pool.alloc(need))
        except OutOfPages:
            return False
        return True

    def _evict(self, pages: int) -> None:
        """Evict cached prefixes until PAGES pages are freed (if they can be), returning both
        groups' pages to their pools."""
        assert self.radix is not None
        self.pool.free(self.radix.evict(pages))
        if self.radix.window_freed:
            assert self.window_pool is not None
            self.window_pool.free(self.radix.window_freed)
            self.radix.window_freed = []

    def slide(self, r: PagedRequest) -> None:
        """Release r's windowed-group pages that neither a query after its last computed one
        nor a prefix hit at its last page boundary (its published depth) sees (the tree's stay
        in the tree: only r's entries go)."""
        if self.window is None or r.computed <= 0:
            return
        kv = r.kv
        boundary = r.computed - r.computed % self.page_size
        end = min(self.window.first_page(r.computed - 1), self.window.first_page(boundary),
                  len(kv.window))
        self._ref(kv.window[kv.window_from: min(end, kv.shared)], -1)
        own = [kv.window[i] for i in range(max(kv.window_from, kv.shared), end) if kv.window[i]]
        for i in range(kv.window_from, end):
            kv.window[i] = 0
        kv.window_from = max(kv.window_from, end)
        if own:
            assert self.window_pool is not None
            self.window_pool.free(own)

    def _ref(self, pages: list[int], delta: int) -> None:
        """Count DELTA more tables pointing at each of the tree's windowed PAGES (0s skipped)."""
        refs = self.window_refs
        for w in pages:
            if w:
                left = refs.get(w, 0) + delta
                assert left >= 0, f"windowed page {w} unreferenced twice"
                if left:
                    refs[w] = left
                else:
                    del refs[w]

    def reset_cache(self) -> None:
        """Drop every unlocked prefix-cache entry, both groups' pages back to their pools."""
        if self.radix is not None:
            self._evict(self.radix.num_pages)

    def chunk(self, r: PagedRequest, n: int) -> int:
        """A prompt chunk of at most N tokens from r.computed; a hybrid model with the prefix
        cache on cuts it at its last page boundary, so that the state there can be kept."""
        if self.snapshots is None or self.radix is None:
            return n
        start, end = r.computed, r.computed + n
        boundary = end - end % self.page_size
        return boundary - start if start < boundary < end else n

    def truncate(self, r: PagedRequest, upto: int) -> None:
        """Free r's pages past those holding positions < UPTO (rejected draft tokens' KV)."""
        keep = max(self.pages_for(upto), r.kv.shared)
        if len(r.kv.pages) > keep:
            self.pool.free(r.kv.pages[keep:])
            del r.kv.pages[keep:]
        if self.window_pool is not None and len(r.kv.window) > keep:
            self.window_pool.free([w for w in r.kv.window[keep:] if w])
            del r.kv.window[keep:]

    def publish(self, r: PagedRequest) -> None:
        """Hand r's full computed pages to the tree so other requests can share them now."""
        if self.radix is None:
            return
        full = r.computed // self.page_size
        if full <= r.kv.shared:
            return
        kv = r.kv
        tree_pages, node = self.radix.insert(r.tokens[: full * self.page_size], kv.pages[:full],
                                            r.cache_salt, kv.window[:full])
        duplicates = [kv.pages[i] for i in range(kv.shared, full) if kv.pages[i] != tree_pages[i]]
        kv.pages[:full] = tree_pages[:full]
        self.pool.free(duplicates)
        if self.window_pool is not None:  # r keeps the tree's windowed pages where it held one
            path = self.radix.path_window(node)
            self.window_pool.free([kv.window[i] for i in range(kv.shared, full)
                                   if kv.window[i] and kv.window[i] != path[i]])
            self._ref([path[i] for i in range(kv.shared, full) if kv.window[i]], 1)
            kv.window[:full] = [path[i] if kv.window[i] else 0 for i in range(full)]
        self.radix.lock(node)
        if kv.node is not None:
            self.radix.unlock(kv.node)
        kv.node, kv.shared = node, full
        if self.snapshots is not None:
            self.snapshots.attach(kv, node, full * self.page_size)

    def release(self, r: PagedRequest, cache: bool = True) -> None:
        """Free r's pages, keeping its full computed pages cached when the tree is on (and CACHE)."""
        if cache:
            self.publish(r)
        kv = r.kv
        self.pool.free(kv.pages[kv.shared:])
        if self.window_pool is not None:
            self.window_pool.free([w for w in kv.window[kv.shared:] if w])
            self._ref(kv.window[: kv.shared], -1)
        if kv.node is not None and self.radix is not None:
            self.radix.unlock(kv.node)
        if kv.tail and self.tails is not None:
            self.tails.free([kv.tail])
        if self.snapshots is not None:
            self.snapshots.release(kv)
        r.kv = RequestPages()

    def check(self) -> None:
        """Assert pool and tree agree (tests)."""
        self.pool.check()
        if self.tails is not None:
            self.tails.check()
        if self.radix is not None:
            tree = self.radix.all_pages()
            assert len(tree) == len(set(tree)) == self.radix.num_pages
        if self.window_pool is not None:
            self.window_pool.check()
            if self.radix is not None:
                held = self.radix.all_window_pages()
                assert len(held) == len(set(held)) == self.radix.num_window_pages

    def own_window_pages(self, r: PagedRequest) -> int:
        """Windowed-group pages r holds itself (not the tree's)."""
        return sum(1 for w in r.kv.window[r.kv.shared:] if w)
