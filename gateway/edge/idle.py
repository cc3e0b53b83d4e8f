"""The open connections with no request being served, oldest first: evicted when the bound is full.

A connection is idle from when it opens, or finishes a response and stays open for the next
request (keep-alive), until it has sent a complete request head. A slow head (slowloris) stays
idle: trickled bytes do not move it back in the order. When the connection bound is full, a new
connection evicts the connection idle the longest instead of being refused, so a flood of idle
or trickling sockets cannot keep real clients (health probes included) out; connections whose
request is being read or answered are never in here, so real work is never evicted.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Generic, TypeVar

from gateway.edge.connlimit import OverloadLog

T = TypeVar("T")

# An idle connection younger than this is most likely a client that has just connected, its head
# on the way: at the bound a stalled body (gateway/edge/slowbody.py) is evicted before it. Without
# this, under a flood of trickled bodies every new client was the only idle connection, and the
# flood's next reconnect evicted it before its head was read (a few percent of probes reset).
FRESH_S = 1.0


class IdleConnections(Generic[T]):
    """Connections without a complete request head, in the order they became so; O(1) each."""

    def __init__(self) -> None:
        self._since: OrderedDict[T, float] = OrderedDict()
        self.log = OverloadLog()
        self.evicted = 0  # connections evicted so far

    def __len__(self) -> int:
        return len(self._since)

    def __contains__(self, conn: object) -> bool:
        return conn in self._since

    def add(self, conn: T) -> None:
        """CONN has no request head yet; one already idle keeps its place (and its age)."""
        if conn not in self._since:
            self._since[conn] = time.monotonic()

    def discard(self, conn: T) -> None:
        """CONN sent a complete request head, or closed."""
        self._since.pop(conn, None)

    def oldest_age(self) -> float | None:
        """How many seconds the connection idle the longest has been; None when none is."""
        for since in self._since.values():
            return time.monotonic() - since
        return None

    def pop_oldest(self) -> tuple[T, float] | None:
        """The connection idle the longest and how many seconds it has been, removed; or None."""
        if not self._since:
            return None
        conn, since = self._since.popitem(last=False)
        self.evicted += 1
        return conn, time.monotonic() - since
