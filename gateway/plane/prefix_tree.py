"""An approximate radix tree of the text prefixes the gateway sent to one replica (LRU-bounded)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

_clock = itertools.count()


@dataclass(eq=False)
class _Node:
    edge: str = ""
    parent: _Node | None = None
    children: dict[str, _Node] = field(default_factory=dict)  # first character -> child
    used: int = 0  # a logical clock: larger is more recent
    ns: str = ""  # a root's namespace (a tenant's cache salt)


class PrefixTree:
    """Text prefixes sent to one replica: longest-match lookups, inserts, LRU leaf eviction.

    It mirrors what the replica's own prefix cache probably holds, without asking it: the size
    bound (in characters) keeps it from growing without end, like the cache it approximates.
    Like that cache, each namespace (a tenant's cache salt; "" shared) has its own root, so a
    text sent under one never matches under another; the bound and the LRU order are global.
    """

    def __init__(self, max_chars: int = 1 << 20) -> None:
        self.roots: dict[str, _Node] = {"": _Node()}
        self.max_chars = max_chars
        self.size = 0  # characters stored on edges

    @property
    def root(self) -> _Node:
        """The shared namespace's root."""
        return self.roots[""]

    def match(self, text: str, ns: str = "") -> int:
        """How many leading characters of TEXT namespace NS holds (marks the path as used)."""
        node, i, now = self.roots.get(ns), 0, next(_clock)
        if node is None:
            return 0
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                break
            n = _common(child.edge, text, i)
            i += n
            if n < len(child.edge):
                break
            child.used = now
            node = child
        return i

    def insert(self, text: str, ns: str = "") -> None:
        """Add TEXT (a prompt sent to the replica) under namespace NS, then evict old leaves
        beyond the bound."""
        node = self.roots.get(ns)
        if node is None:
            node = self.roots[ns] = _Node(ns=ns)
        i, now = 0, next(_clock)
        while i < len(text):
            child = node.children.get(text[i])
            if child is None:
                leaf = _Node(text[i:], node, used=now)
                node.children[text[i]] = leaf
                self.size += len(leaf.edge)
                break
            n = _common(child.edge, text, i)
            if n < len(child.edge):  # split the edge at n (the rest keeps its own age)
                mid = _Node(child.edge[:n], node, used=now)
                node.children[text[i]] = mid
                child.edge, child.parent = child.edge[n:], mid
                mid.children[child.edge[0]] = child
                child = mid
            child.used = now
            i += n
            node = child
        self.evict()

    def evict(self) -> None:
        """Drop least recently used leaves until the tree fits its bound."""
        while self.size > self.max_chars:
            leaves = (n for root in self.roots.values() for n in _leaves(root))
            leaf = min(leaves, key=lambda n: n.used, default=None)
            if leaf is None or leaf.parent is None:
                return
            parent = leaf.parent
            del parent.children[leaf.edge[0]]
            self.size -= len(leaf.edge)
            if parent.parent is None and not parent.children and parent.ns:
                del self.roots[parent.ns]  # an emptied namespace

    def clear(self) -> None:
        """Forget everything (the replica died: its cache is gone)."""
        self.roots, self.size = {"": _Node()}, 0


def _common(edge: str, text: str, start: int) -> int:
    """Length of the common prefix of EDGE and TEXT[start:]."""
    if text.startswith(edge, start):  # the usual case, at C speed
        return len(edge)
    n = min(len(edge), len(text) - start)
    for k in range(n):
        if edge[k] != text[start + k]:
            return k
    return n


def _leaves(node: _Node) -> list[_Node]:
    out: list[_Node] = []
    stack = [node]
    while stack:
        cur = stack.pop()
        if cur.children:
            stack.extend(cur.children.values())
        elif cur.parent is not None:
            out.append(cur)
    return out
