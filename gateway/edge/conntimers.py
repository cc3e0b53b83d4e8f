"""A client connection's timers: its request head's deadline (slowloris) and the watch on an
answer its client does not take."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.edge.answers import cancel


class HeadTimer:
    """The deadline of a request head: armed while a head is awaited, `on_expiry` when it passes
    (the connection decides what an incomplete head gets)."""

    __slots__ = ("_handle", "_loop", "_on_expiry", "_timeout", "_transport")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
                 timeout: float, on_expiry: Callable[[], None]) -> None:
        self._loop, self._transport = loop, transport
        self._timeout, self._on_expiry = timeout, on_expiry
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Start the deadline, unless it runs already (a head keeps its first deadline) or the
        connection is closing."""
        if self._handle is None and not self._transport.is_closing():
            self._handle = self._loop.call_later(self._timeout, self._expired)

    def disarm(self) -> None:
        """Stop the deadline (a head is complete, or the connection is going)."""
        cancel(self._handle)
        self._handle = None

    def _expired(self) -> None:
        self._handle = None
        self._on_expiry()


class SendWatch:
    """While writing is paused (the transport holds more than its high-water mark unsent): a
    client that takes none of it for `stall` seconds is reset (nginx's send_timeout), its
    request's app then sees the client gone."""

    __slots__ = ("_handle", "_loop", "_stall", "_transport", "_unsent")

    def __init__(self, loop: asyncio.AbstractEventLoop, transport: asyncio.Transport,
                 stall: float) -> None:
        self._loop, self._transport, self._stall = loop, transport, stall
        self._handle: asyncio.TimerHandle | None = None
        self._unsent = 0  # bytes left to send when the watch last looked

    def paused(self) -> None:
        """Writing paused: start watching, unless already watching."""
        if self._handle is None:
            self._unsent = self._transport.get_write_buffer_size()
            self._handle = self._loop.call_later(self._stall, self._check)

    def stop(self) -> None:
        """Writing resumed (or the connection is lost): stop watching."""
        cancel(self._handle)
        self._handle = None

    def _check(self) -> None:
        """Reset the connection if its client has taken nothing since the last look."""
        self._handle = None
        left = self._transport.get_write_buffer_size()
        if left and left >= self._unsent:
            self._transport.abort()
        elif left:
            self._unsent = left
            self._handle = self._loop.call_later(self._stall, self._check)
