"""Compiled grammars by spec hash, least recently used first out; requests get copies."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any

from protocol.messages import GrammarSpec

CACHE_SIZE = 64  # distinct compiled grammars kept


def spec_key(spec: GrammarSpec) -> str:
    """A stable hash of SPEC (kind and text)."""
    return hashlib.sha256(f"{spec.kind}\0{spec.text}".encode()).hexdigest()


class GrammarCache:
    """A thread-safe LRU map from spec hash to a matcher at its grammar's start."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: str) -> Any | None:
        """A fresh copy of the cached matcher for KEY, or None."""
        with self._lock:
            template = self._items.get(key)
            if template is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
        return template.deep_copy()

    def put(self, key: str, matcher: Any) -> None:
        """Keep a pristine copy of MATCHER under KEY, evicting the least recently used."""
        with self._lock:
            self._items[key] = matcher.deep_copy()
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)
