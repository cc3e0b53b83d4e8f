"""One connection's charge to the server's body budget (gateway/edge/bodybudget.py): the body
bytes of its current request, charged from its complete head until its answer completes."""

from __future__ import annotations

from typing import Protocol

from gateway.edge.bodybudget import BodyBudget, pace, upfront
from gateway.edge.slowbody import Body


class BodyHolder(Protocol):
    """A connection whose charged body may be evicted to make room in the budget."""

    def body_evictable(self) -> bool:
        """Whether the client alone holds this connection's request body up."""
        ...

    def evict_body(self, body: Body, for_budget: bool = False) -> None:
        """Close this connection, whose request body has stalled (FOR_BUDGET: give its charge
        back at once)."""
        ...


class BodyCharge:
    """The charge of CONN's current request (`cycle`): `charged` bytes so far; a `metered` body
    (undeclared size) is charged as it arrives (`received`), keeping `pace` bytes a second."""

    __slots__ = ("budget", "charged", "conn", "cycle", "metered", "pace", "received")

    def __init__(self, budget: BodyBudget, conn: BodyHolder) -> None:
        self.budget, self.conn = budget, conn
        self.charged = 0  # body bytes of the current request charged to the budget
        self.cycle: object = None  # that request's cycle, until its answer is complete
        self.metered = False  # its body's size was not declared (or is past any route's):
        self.received = 0  # charged as it arrives, these bytes (with chunk framing) so far
        self.pace = 0.0  # bytes a second its body must keep up while it holds budget

    def admit(self, cycle: object, headers: list[tuple[bytes, bytes]], path: str,
              buffered: int) -> int | None:
        """Charge the new request CYCLE's body (HEADERS, PATH; BUFFERED bytes of it read with its
        head): None when charged, else the bytes that did not fit (nothing charged)."""
        want, metered = upfront(headers)
        if not self.take(want):
            return want
        self.charged, self.cycle, self.metered = want, cycle, metered
        self.received = buffered
        self.pace = pace(want, path)
        return None

    def take(self, n: int) -> bool:
        """Charge N more bytes to the budget, evicting first, while they do not fit, the other
        requests whose bodies have fallen furthest behind their pace; False if they still do
        not fit (nothing charged)."""
        budget, conn = self.budget, self.conn
        while not budget.take(n):
            stalled = budget.pending.pop_stalled(lambda c: c is not conn and c.body_evictable())
            if stalled is None:
                return False
            stalled[0].evict_body(stalled[1], for_budget=True)
        return True

    def more(self, cycle: object) -> int | None:
        """Charge the bytes of CYCLE's metered body received past its charge: None when charged
        (or not this charge's request any more), else the bytes that did not fit."""
        if self.cycle is not cycle:
            return None
        if self.take(self.received - self.charged):
            self.charged = self.received
            return None
        return self.received

    def release(self) -> None:
        """Give the current request's charge back to the budget."""
        self.budget.pending.discard(self.conn)
        self.budget.give_back(self.charged)
        self.charged, self.cycle, self.metered = 0, None, False
