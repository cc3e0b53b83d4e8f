"""Connections whose request body arrives too slowly: evicted at the bound when no idle one is left.

A connection is tracked from its complete request head until its body is complete (or it
closes). Its body has stalled, and the connection may be evicted to make room for a new one,
once `now` passes its deadline: the earlier of
  - STALL_S seconds after the last body bytes (nginx's client_body_timeout, between reads), and
  - start + max(GRACE_S, bytes / MIN_RATE): below MIN_RATE bytes a second on average once the
    grace is over (Apache mod_reqtimeout's MinRate: every byte received buys 1/MIN_RATE s).
Both only ever move later, so a lazy heap finds the most stalled one: a chunk costs O(1) (two
fields), an eviction pops stale entries and re-files the ones that moved on.

The numbers. MIN_RATE = 1 KiB/s is 8 kbit/s, below any real link (GPRS gives ~40 kbit/s); a
legitimate client writes a JSON body in one go, and the slowest legitimate uploads (an audio
file at 100 KiB/s) run a hundred times faster; at 1 KiB/s a connection, holding the whole bound
(10,000) costs an attacker ~10 MiB/s upstream: a bandwidth flood, no longer a cheap slow one.
GRACE_S = 2 s: a client's body follows its head in the same flight (one waiting for a 100
Continue is never evicted), so 2 s is ten round trips of a 200 ms path; a rate over a shorter
span is noise. It is also what an attacker must beat by reopening: to keep a bound of B
connections all in their grace, B / GRACE_S new connections a second (5,000/s at the default
bound), each sending a complete head; below that rate real clients find a stalled body to
evict (one reopening faster is a plain connection flood). STALL_S = 5 s is longer than two TCP
retransmission back-offs (1 s + 2 s) after a lost segment, so a healthy fast upload hiccuping
is not taken for a stalled one. None of this ends a connection on its own: only a new one
arriving at a full bound, when no connection without a request head is left to evict, makes
the most stalled body give way (it gets a 408 in its protocol's shape); the body read timeouts
(gateway/edge/limits.py BODY_READ_TIMEOUT_S, the audio upload's) stay as they were.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.edge.connlimit import OverloadLog

T = TypeVar("T")

MIN_RATE = 1024.0  # bytes a second, on average since the head, once GRACE_S is over
GRACE_S = 2.0  # seconds after the head in which the rate is not judged
STALL_S = 5.0  # seconds without a body byte after which a body has stalled


@dataclass
class Body:
    """One body being received: when its head completed, its last bytes, how many so far."""

    start: float
    last: float
    bytes: int = 0
    key: float = 0.0  # the deadline its live heap entry was filed under
    rate: float = MIN_RATE  # the average bytes a second it must keep up after GRACE_S
    seq: int = 0  # that entry's sequence number (older entries for it are stale)

    def deadline(self) -> float:
        """When this body counts as stalled unless more bytes arrive."""
        return min(self.last + STALL_S, self.start + max(GRACE_S, self.bytes / self.rate))


class SlowBodies(Generic[T]):
    """The connections whose request body is being received, the most stalled found fast."""

    def __init__(self) -> None:
        self._live: dict[T, Body] = {}
        self._heap: list[tuple[float, int, T]] = []
        self._seq = 0
        self.log = OverloadLog()
        self.evicted = 0  # connections evicted so far

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, conn: object) -> bool:
        return conn in self._live

    def received(self, conn: T, n: int, rate: float = MIN_RATE) -> None:
        """N more body bytes of CONN; a connection not tracked yet starts now, held to RATE."""
        body = self._live.get(conn)
        now = time.monotonic()
        if body is None:
            body = self._live[conn] = Body(now, now, n, rate=rate)
            self._file(conn, body, body.deadline())
            return
        body.bytes += n
        body.last = now

    def discard(self, conn: T) -> None:
        """CONN's body is complete, or it closed, or the server stopped reading it."""
        if self._live.pop(conn, None) is not None and len(self._heap) > 2 * len(self._live) + 64:
            self._compact()

    def pop_stalled(self, evictable: Callable[[T], bool]) -> tuple[T, Body] | None:
        """The most stalled connection whose deadline has passed and that EVICTABLE allows,
        removed with its Body; or None. One EVICTABLE refuses is looked at again STALL_S later."""
        now = time.monotonic()
        while self._heap:
            key, seq, conn = self._heap[0]
            body = self._live.get(conn)
            if body is None or body.seq != seq:
                heapq.heappop(self._heap)  # stale: completed, closed, or filed again since
                continue
            if key > now:
                return None  # every deadline is at least its key: none has passed
            heapq.heappop(self._heap)
            due = body.deadline()
            if due > now:
                self._file(conn, body, due)  # bytes arrived since it was filed
            elif not evictable(conn):
                self._file(conn, body, now + STALL_S)
            else:
                del self._live[conn]
                self.evicted += 1
                return conn, body
        return None

    def _file(self, conn: T, body: Body, key: float) -> None:
        self._seq += 1
        body.key, body.seq = key, self._seq
        heapq.heappush(self._heap, (key, self._seq, conn))

    def _compact(self) -> None:
        """Drop the stale entries (each body's live one kept): the heap stays O(live)."""
        self._heap = [(b.key, b.seq, c) for c, b in self._live.items()]
        heapq.heapify(self._heap)
