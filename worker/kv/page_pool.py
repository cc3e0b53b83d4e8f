"""A pool of fixed-size KV pages: which page ids are free, which are in use."""

from __future__ import annotations


class OutOfPages(Exception):
    """The pool cannot satisfy an allocation."""


class PagePool:
    """Hands out page ids 1..num_pages-1; page 0 is a scratch page that is never allocated."""

    def __init__(self, num_pages: int) -> None:
        if num_pages < 2:
            raise ValueError("a page pool needs at least 2 pages (page 0 is scratch)")
        self.total = num_pages - 1
        self._free: list[int] = list(range(num_pages - 1, 0, -1))
        self._used: set[int] = set()

    @property
    def num_free(self) -> int:
        """Pages available for allocation."""
        return len(self._free)

    @property
    def num_used(self) -> int:
        """Pages handed out and not yet freed."""
        return len(self._used)

    def alloc(self, n: int) -> list[int]:
        """Take N pages, or raise OutOfPages and take none."""
        if n > len(self._free):
            raise OutOfPages(f"need {n} pages, {len(self._free)} free")
        pages = [self._free.pop() for _ in range(n)]
        self._used.update(pages)
        return pages

    def free(self, pages: list[int]) -> None:
        """Return pages to the pool; freeing a page that is not in use is a bug."""
        for p in pages:
            if p not in self._used:
                raise ValueError(f"page {p} is not in use")
            self._used.remove(p)
            self._free.append(p)

    def check(self) -> None:
        """Assert the pool's invariant: free + used == total, disjoint."""
        assert len(self._free) + len(self._used) == self.total
        assert not self._used.intersection(self._free)
