"""A radix tree over page-aligned token ids whose nodes own KV pages (SGLang's shape).

Keys are token-id tuples whose length is a multiple of the page size; each node owns one page per
page of its key. Requests lock the path to the node they use so its pages cannot be evicted.
Only full pages are shared. Eviction frees least-recently-used unlocked leaves: a heap of
(last access, node) entries, pushed whenever a node becomes an unlocked leaf or an unlocked leaf
is touched, and checked when popped (lazy invalidation), so finding the next victim costs
O(log n) instead of a walk over every node; the evictable page count is kept as nodes lock,
unlock, join and leave.

A model with a windowed layer group (worker/kv/window_group.py) has nodes own that group's
pages too (``window``, one entry per page, 0 where the publishing sequence had released it):
they are freed with the node (``window_freed`` collects them for the manager).

A hybrid model's nodes may also hold a snapshot: the recurrent state after the node's last token
(worker/kv/snapshots.py); a hit on such a model resumes from the deepest one on its path.

Namespaces (a tenant's cache salt) isolate prefixes: each has its own root, so the same tokens
under two salts never share pages (one tenant cannot learn from a cache hit what another sent),
while eviction stays global (one LRU heap and page budget over every namespace). The empty salt
is the shared namespace.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterator, Sequence

_clock = itertools.count()


def common_pages(a: Sequence[int], b: Sequence[int], page_size: int) -> int:
    """Length of the common prefix of A and B, rounded down to whole pages."""
    n = 0
    limit = min(len(a), len(b))
    while n + page_size <= limit and tuple(a[n : n + page_size]) == tuple(b[n : n + page_size]):
        n += page_size
    return n


class Node:
    """A tree node: a page-aligned key segment and the pages holding its KV."""

    def __init__(self, key: tuple[int, ...], pages: list[int], parent: Node | None) -> None:
        self.key = key
        self.pages = pages
        self.parent = parent
        self.children: dict[tuple[int, ...], Node] = {}
        self.lock_ref = 0
        self.last_access = next(_clock)
        self.evicted = False
        self.queued: int | None = None  # the access time of its entry in the eviction heap
        self.snapshot = 0  # a hybrid model's recurrent-state slot after this node's last token
        self.window: list[int] = []  # the windowed group's pages (0: released; [] no group)

    @property
    def is_leaf(self) -> bool:
        """True when no child hangs below."""
        return not self.children


class RadixCache:
    """Prefix sharing of KV pages between requests."""

    def __init__(self, page_size: int, on_evict: Callable[[Node], None] | None = None) -> None:
        self.page_size = page_size
        self.on_evict = on_evict  # told of every node evicted (its snapshot goes too)
        self.root = Node((), [], None)  # the shared namespace's ("")
        self.root.lock_ref = 1  # never evicted
        self.roots: dict[str, Node] = {"": self.root}
        self.num_pages = 0
        self.num_window_pages = 0  # windowed-group pages held (non-zero ``window`` entries)
        self.window_freed: list[int] = []  # windowed pages of evicted nodes, for the manager
        self._evictable = 0  # pages of unlocked nodes
        self._nodes_alive = 0
        # (last_access, seq, node) of unlocked leaves; stale entries are skipped when popped
        self._heap: list[tuple[int, int, Node]] = []
        self._seq = itertools.count()

    def _first(self, key: Sequence[int]) -> tuple[int, ...]:
        return tuple(key[: self.page_size])

    def _root(self, salt: str) -> Node:
        """SALT's root, made on first use (locked for good like the shared one)."""
        root = self.roots.get(salt)
        if root is None:
            root = self.roots[salt] = Node((), [], None)
            root.lock_ref = 1
        return root

    def match_prefix(self, tokens: Sequence[int], limit: int | None = None,
                     salt: str = "") -> tuple[list[int], Node]:
        """Pages of the longest cached full-page prefix of TOKENS (at most LIMIT tokens) in
        namespace SALT.

        Returns the pages in order and the deepest node covering them (split so that it ends
        exactly at the match).
        """
        node, pages = self._root(salt), []
        node.last_access = next(_clock)
        for child, common in self._walk(tokens, limit, node):
            if common < len(child.key):
                child = self._split(child, common)
            child.last_access = next(_clock)
            self._offer(child)
            pages.extend(child.pages)
            node = child
        return pages, node

    def cached_length(self, tokens: Sequence[int], limit: int | None = None,
                      salt: str = "") -> int:
        """Tokens of the longest cached full-page prefix of TOKENS in namespace SALT, without
        touching the tree."""
        root = self.roots.get(salt)
        return 0 if root is None else sum(common for _, common in self._walk(tokens, limit, root))

    def _walk(self, tokens: Sequence[int], limit: int | None,
              root: Node) -> Iterator[tuple[Node, int]]:
        """The nodes along TOKENS' cached full-page prefix below ROOT, each with its matching
        token count."""
        n = len(tokens) if limit is None else min(limit, len(tokens))
        n -= n % self.page_size
        node, pos = root, 0
        while pos < n:
            child = node.children.get(tuple(tokens[pos : pos + self.page_size]))
            if child is None:
                return
            common = self._common(child.key, tokens[pos:n])
            partial = common < len(child.key)  # decided before the caller may split the node
            yield child, common
            if partial:
                return
            pos += common
            node = child

    def _common(self, key: Sequence[int], tokens: Sequence[int]) -> int:
        return common_pages(key, tokens, self.page_size)

    def _split(self, node: Node, at: int) -> Node:
        """Cut NODE after AT tokens; the new upper node keeps the first pages, NODE the rest."""
        pages_at = at // self.page_size
        upper = Node(node.key[:at], node.pages[:pages_at], node.parent)
        upper.window, node.window = node.window[:pages_at], node.window[pages_at:]
        upper.lock_ref = node.lock_ref
        upper.last_access = node.last_access
        assert node.parent is not None
        node.parent.children[self._first(upper.key)] = upper
        node.key, node.pages, node.parent = node.key[at:], node.pages[pages_at:], upper
        upper.children[self._first(node.key)] = node
        self._nodes_alive += 1
        return upper

    def insert(self, tokens: Sequence[int], pages: Sequence[int],
               salt: str = "", window: Sequence[int] = ()) -> tuple[list[int], Node]:
        """Cache the full pages of TOKENS held in PAGES in namespace SALT (and the windowed
        group's WINDOW, one entry per page: 0 where released).

        Returns the tree's pages for the whole prefix (a caller's page that duplicates a page the
        tree already had must be freed by the caller) and the node ending the prefix. A windowed
        entry the tree lacks (0) on the existing path is taken from WINDOW (``path_window``
        then has the caller's page there: not a duplicate).
        """
        n = min(len(tokens) - len(tokens) % self.page_size, len(pages) * self.page_size)
        tree_pages, node = self.match_prefix(tokens, n, salt)
        pos = len(tree_pages) * self.page_size
        if window:
            self._fill_window(node, len(tree_pages), window)
        if pos < n:
            new = Node(tuple(tokens[pos:n]), list(pages[pos // self.page_size : n // self.page_size]),
                       node)
            if window:
                new.window = list(window[pos // self.page_size : n // self.page_size])
                self.num_window_pages += sum(1 for w in new.window if w)
            node.children[self._first(new.key)] = new
            self.num_pages += len(new.pages)
            self._evictable += len(new.pages)
            self._nodes_alive += 1
            self._offer(new)
            tree_pages.extend(new.pages)
            node = new
        return tree_pages, node

    def _fill_window(self, node: Node, depth: int, window: Sequence[int]) -> None:
        """Give the path ending at NODE (DEPTH pages deep) WINDOW's pages where it has none."""
        n: Node | None = node
        while n is not None and n.parent is not None:
            depth -= len(n.pages)
            for i, w in enumerate(n.window):
                if not w and depth + i < len(window) and window[depth + i]:
                    n.window[i] = window[depth + i]
                    self.num_window_pages += 1
            n = n.parent

    def path_window(self, node: Node) -> list[int]:
        """The windowed group's entries of every page from NODE's root down to NODE."""
        parts: list[list[int]] = []
        n: Node | None = node
        while n is not None:
            parts.append(n.window)
            n = n.parent
        return [w for part in reversed(parts) for w in part]

    def cut(self, node: Node, depth: int, at: int) -> Node:
        """The node on the path ending at NODE (DEPTH tokens deep) that ends AT tokens deep
        (split there if needed; AT <= DEPTH, page-aligned)."""
        while node.parent is not None and depth - len(node.key) >= at:
            depth -= len(node.key)
            node = node.parent
        if depth > at:
            node = self._split(node, len(node.key) - (depth - at))
        return node

    def snapshot_above(self, node: Node, depth: int) -> tuple[Node, int]:
        """The deepest node at or above NODE (ending DEPTH tokens deep) that holds a snapshot,
        with its depth; NODE's namespace root and 0 when none does."""
        while node.parent is not None and not node.snapshot:
            depth -= len(node.key)
            node = node.parent
        return node, depth

    def lock(self, node: Node) -> None:
        """Protect NODE and its ancestors from eviction."""
        n: Node | None = node
        while n is not None:
            if n.lock_ref == 0:
                self._evictable -= len(n.pages)
            n.lock_ref += 1
            n = n.parent

    def unlock(self, node: Node) -> None:
        """Release a lock taken with lock()."""
        n: Node | None = node
        while n is not None:
            n.lock_ref -= 1
            assert n.lock_ref >= 0, "unbalanced unlock"
            if n.lock_ref == 0:
                self._evictable += len(n.pages)
                self._offer(n)
            n = n.parent

    def evictable_pages(self) -> int:
        """Pages held by nodes no request locks."""
        return self._evictable

    def _offer(self, node: Node) -> None:
        """Queue NODE for eviction if it is an unlocked leaf (under its current last access)."""
        if (node.lock_ref or node.children or node.parent is None  # a root
                or node.queued == node.last_access):  # its entry is queued already
            return
        node.queued = node.last_access
        heapq.heappush(self._heap, (node.last_access, next(self._seq), node))
        if len(self._heap) > 2 * self._nodes_alive + 64:
            self._compact()

    def _compact(self) -> None:
        """Drop the heap's outdated entries (amortized: it grew past twice the live nodes)."""
        self._heap = [e for e in self._heap if not e[2].evicted and e[2].queued == e[0]]
        heapq.heapify(self._heap)

    def _pop(self) -> Node | None:
        """The least recently used unlocked leaf, off the heap (None: there is none)."""
        while self._heap:
            access, _, node = heapq.heappop(self._heap)
            if node.evicted or node.queued != access:
                continue  # outdated: the node was touched (queued again) or is gone
            node.queued = None  # its next offer queues it again
            if node.lock_ref == 0 and not node.children:
                return node
        return None

    def evict(self, num_pages: int) -> list[int]:
        """Free at least NUM_PAGES pages (if possible) from LRU unlocked leaves; return them
        (their windowed pages go to ``window_freed``)."""
        freed: list[int] = []
        while len(freed) < num_pages and (node := self._pop()) is not None:
            freed.extend(node.pages)
            held = [w for w in node.window if w]
            self.window_freed.extend(held)
            self.num_window_pages -= len(held)
            self.num_pages -= len(node.pages)
            self._evictable -= len(node.pages)
            self._nodes_alive -= 1
            node.evicted = True
            if self.on_evict is not None:
                self.on_evict(node)
            parent = node.parent
            assert parent is not None
            del parent.children[self._first(node.key)]
            if parent.parent is None:  # a namespace root: forget it once empty and unused
                self._drop_root(parent)
            else:
                self._offer(parent)
        return freed

    def _drop_root(self, root: Node) -> None:
        """Forget ROOT's namespace if it is empty and no request holds it (never the shared one)."""
        if root is self.root or root.children or root.lock_ref != 1:
            return
        for salt, r in self.roots.items():
            if r is root:
                del self.roots[salt]
                return

    def _nodes(self) -> list[Node]:
        out, stack = [], [c for r in self.roots.values() for c in r.children.values()]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def all_pages(self) -> list[int]:
        """Every page the tree owns."""
        return [p for n in self._nodes() for p in n.pages]

    def drop_window(self, num_pages: int, read: Callable[[int], bool]) -> list[int]:
        """Take at least NUM_PAGES windowed pages (if there are) from the nodes, least recently
        used first, except those READ says a request reads; their entries become 0 (the nodes
        keep their pages: hits whose window lies elsewhere stay valid). Returns them."""
        freed: list[int] = []
        for node in sorted(self._nodes(), key=lambda n: n.last_access):
            for i, w in enumerate(node.window):
                if w and not read(w):
                    node.window[i] = 0
                    freed.append(w)
            if len(freed) >= num_pages:
                break
        self.num_window_pages -= len(freed)
        return freed

    def all_window_pages(self) -> list[int]:
        """Every windowed-group page the tree owns."""
        return [w for n in self._nodes() for w in n.window if w]

    def reset(self) -> list[int]:
        """Drop every unlocked entry; return the freed pages."""
        return self.evict(self.num_pages)
