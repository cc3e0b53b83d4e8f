"""The windowed layer group: sliding-window and chunked layers' pages, released as they slide out.

A model whose attention layers are not all full (worker/kv/layer_kinds.py) keeps two layer
groups, each with its own page id space and one block table per request (vLLM's KV cache
groups, SGLang's SWA pool): the full layers' (``RequestPages.pages``, the manager's ``pool``:
today's path, unchanged) and the windowed layers' (``RequestPages.window``, ``window_pool``;
the store's arrays of those layers hold ``window_pages`` pages). After every step the manager
releases the windowed group's pages no later query of a running sequence can see, nor a prefix
hit at its last page boundary (``slide``: pages before the window start, ``first_page``, of its
last query and of that boundary), so those layers hold at most a window (plus the page being
written and one more) per sequence. Their block-table
entries become 0: the scratch page, masked by the window mask anyway.

Prefix cache: tree nodes own both groups' pages of their positions; a node's windowed entry is
0 where the sequence that published it had released that page already. A hit at depth d needs
the full group's pages before d and the windowed group's pages from ``first_page(d)`` on, so a
match is cut back to the deepest page boundary whose window pages are all present
(``valid_depth``; depth 0 always is). A later sequence publishing the same positions fills
the tree's missing windowed entries with its own pages. When the windowed pool runs short, the
tree drops windowed pages no request's table points at (``KVManager.window_refs``; least
recently used nodes first; the nodes keep their full pages, and hits whose windows lie
elsewhere stay valid; the pages tables do point at are in locked nodes). The full pool's
shortage evicts whole least-recently-used unlocked nodes, freeing both groups' pages. So a
prompt longer than the windowed pool fits: its published windowed pages leave the tree as its
own window slides past them.

K8V4 pages and hybrid (recurrent) models keep one group (nothing released; ``group_for``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from worker.kv.layer_kinds import FULL, LayerKinds


@dataclass(frozen=True)
class WindowGroup:
    """The windowed layers of a model and the page arithmetic of their release."""

    kinds: LayerKinds
    page_size: int

    @property
    def layers(self) -> tuple[int, ...]:
        """The attention layers in the group (sliding or chunked)."""
        return tuple(i for i, k in enumerate(self.kinds.kinds) if k != FULL)

    def first_page(self, position: int) -> int:
        """The first page any windowed layer's query at POSITION or later can see."""
        return self.kinds.window_start(position) // self.page_size

    def seq_pages(self) -> int:
        """Pages a running sequence holds at most in this group between steps: its widest
        window's pages, the page being written, and one more (a window not page-aligned)."""
        widest = max(s for s, k in zip(self.kinds.sizes, self.kinds.kinds, strict=True)
                     if k != FULL)
        return -(-widest // self.page_size) + 2

    def valid_depth(self, window: Sequence[int], pages: int) -> int:
        """The deepest page count d <= PAGES such that a sequence resuming after d pages has
        every windowed page it needs in WINDOW (the tree's entries along the path)."""
        for d in range(pages, 0, -1):
            if all(window[self.first_page(d * self.page_size): d]):
                return d
        return 0


def group_for(kinds: LayerKinds, page_size: int, kind: str, hybrid: bool) -> WindowGroup | None:
    """The windowed group of a model with these layer KINDS, or None (one group: no windowed
    layer, K8V4 pages, or a hybrid model's recurrent states)."""
    if not kinds.windowed or kind != "none" or hybrid or FULL not in kinds.kinds:
        return None
    return WindowGroup(kinds, page_size)
