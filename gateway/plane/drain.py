"""Graceful drain: stop admitting, let running requests finish up to a timeout, end the rest."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable

from gateway.plane.hub import AliasState, Hub, Terminal

log = logging.getLogger("rapid_mlx.gateway")


async def settle(aliases: Iterable[AliasState], timeout: float,
                 cut: asyncio.Event | None = None) -> int:
    """Wait until ALIASES have no in-flight request, TIMEOUT passes or CUT is set; return the rest."""
    states = list(aliases)
    deadline = time.monotonic() + timeout
    while any(st.streams for st in states) and time.monotonic() < deadline:
        if cut is not None and cut.is_set():
            break
        await asyncio.sleep(0.05)
    return sum(len(st.streams) for st in states)


class Drainer:
    """The gateway's shutdown sequence, started by the first SIGTERM (or SIGINT, without wait)."""

    def __init__(self, hub: Hub, on_done: Callable[[], None]) -> None:
        self.hub = hub
        self.on_done = on_done
        self.task: asyncio.Task[None] | None = None
        self.cut = asyncio.Event()

    @property
    def started(self) -> bool:
        """True once a drain has begun."""
        return self.task is not None

    def begin(self, timeout: float) -> None:
        """Start draining with TIMEOUT for running requests; a second call cuts the wait short."""
        if self.task is not None:
            self.cut.set()
            return
        log.warning("draining: no new requests; waiting up to %.1fs for %d running", timeout,
                    sum(len(st.streams) for st in self.hub.aliases.values()))
        self.hub.start_drain()
        if timeout <= 0:
            self.cut.set()
        self.task = asyncio.get_running_loop().create_task(self._run(timeout), name="drain")

    async def _run(self, timeout: float) -> None:
        try:
            left = await settle(self.hub.aliases.values(), timeout, self.cut)
            if left:
                log.warning("drain: ending %d request(s) still running", left)
                for st in self.hub.aliases.values():
                    self.hub.fail_streams(st, Terminal(
                        "The server is shutting down; this request was ended before it finished.",
                        code="server_shutting_down"))
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.05)  # let the relays write their terminal events
        finally:
            self.on_done()
