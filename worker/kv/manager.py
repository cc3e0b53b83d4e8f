"""Page bookkeeping of requests: allocation, prefix sharing through the radix tree, release."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from worker.kv.page_pool import OutOfPages, PagePool
from worker.kv.paged_kv import PagedKVStore
from worker.kv.radix_cache import RadixCache, common_pages
from worker.kv.request_pages import RequestPages
from worker.kv.snapshots import Snapshots


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
        need = self.pages_for(upto) - len(r.kv.pages)
        if need <= 0:
            return True
        if need > self.pool.num_free and self.radix is not None:
            self.pool.free(self.radix.evict(need - self.pool.num_free))
        try:
            r.kv.pages.extend(self.pool.alloc(need))
        except OutOfPages:
            return False
        return True

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

    def publish(self, r: PagedRequest) -> None:
        """Hand r's full computed pages to the tree so other requests can share them now."""
        if self.radix is None:
            return
        full = r.computed // self.page_size
        if full <= r.kv.shared:
            return
        kv = r.kv
        tree_pages, node = self.radix.insert(r.tokens[: full * self.page_size], kv.pages[:full],
                                            r.cache_salt)
        duplicates = [kv.pages[i] for i in range(kv.shared, full) if kv.pages[i] != tree_pages[i]]
        kv.pages[:full] = tree_pages[:full]
        self.pool.free(duplicates)
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
