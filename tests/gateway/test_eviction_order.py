"""Which connection a newcomer evicts at the bound: the one idle the longest (fresh, trickling a
head, or keep-alive between requests), never one whose request is being read or served; the
accounting stays exact. The real protocol class with an in-memory transport."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from gateway.app import error_shapes
from gateway.edge import http_protocol
from gateway.edge.http_protocol import GuardedH11Protocol, Refusals
from gateway.edge.idle import IdleConnections

PARTIAL = b"GET /livez HTTP/1.1\r\nhost: x\r\n"
BUSY = b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\n{"
GET = b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n"


class Transport(asyncio.Transport):
    """Keeps what is written; close and abort end the connection on the next loop turn."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self.loop, self.out, self.ended = loop, b"", ""
        self.protocol: asyncio.Protocol | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:  # type: ignore[override]
        self.out += bytes(data)

    def _end(self, how: str) -> None:
        if not self.ended or (self.ended == "close" and how == "abort" and self.unsent):
            self.ended = how
            assert self.protocol is not None
            self.loop.call_soon(self.protocol.connection_lost, None)

    def close(self) -> None:
        if self.unsent:  # asyncio sends what is left first
            self.ended = self.ended or "close"
            return
        self._end("close")

    def abort(self) -> None:
        self._end("abort")

    def is_closing(self) -> bool:
        return bool(self.ended)

    def get_write_buffer_size(self) -> int:
        return self.unsent

    unsent = 0  # bytes the client has not taken yet

    def can_write_eof(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """/livez answers at once; anything else waits for its body forever."""
    if scope["path"] == "/livez":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    while True:
        await receive()


class Gateway:
    """A protocol class bounded to MAX connections, and the connections made so far."""

    def __init__(self, most: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.state = ServerState()
        self.config = uvicorn.Config(_app, timeout_keep_alive=60)
        self.cls = type("P", (GuardedH11Protocol,), {
            "max_connections": most, "refusals": Refusals(), "idle": IdleConnections(),
            "header_timeout": 60.0, "shapes": error_shapes()})

    def connect(self, data: bytes = b"") -> tuple[GuardedH11Protocol, Transport]:
        """A new connection, having sent DATA."""
        proto = self.cls(self.config, self.state, {}, self.loop)
        tr = Transport(self.loop)
        tr.protocol = proto
        proto.connection_made(tr)
        if data and not tr.ended:
            proto.data_received(data)
        return proto, tr

    async def settle(self) -> None:
        for _ in range(5):
            await asyncio.sleep(0)


def test_idle_order_is_by_first_idle_moment() -> None:
    idle: IdleConnections[str] = IdleConnections()
    for c in "abc":
        idle.add(c)
    idle.add("a")  # a trickled byte: keeps its place
    idle.discard("b")  # b sent its head
    idle.add("b")  # and is idle again (keep-alive): now the youngest
    got = [idle.pop_oldest() for _ in range(4)]
    assert [g[0] if g else None for g in got] == ["a", "c", "b", None]
    assert idle.evicted == 3 and len(idle) == 0


async def test_the_oldest_idle_is_evicted_and_busy_ones_never() -> None:
    gw = Gateway(3)
    fresh = gw.connect()
    slow = gw.connect(PARTIAL)
    busy = gw.connect(BUSY)
    await gw.settle()
    assert len(gw.state.connections) == 3
    new1 = gw.connect()  # evicts `fresh`: a plain close
    assert fresh[1].ended == "close" and fresh[1].out == b""
    assert new1[1].ended == "" and len(gw.state.connections) == 3
    assert gw.cls.refusals.lingering == 1  # its fd, until connection_lost
    await gw.settle()
    assert gw.cls.refusals.lingering == 0
    gw.connect(b"G")  # evicts `slow` (older than new1): a 408 first
    assert slow[1].ended == "close" and slow[1].out.startswith(b"HTTP/1.1 408")
    err = json.loads(slow[1].out.partition(b"\r\n\r\n")[2])["error"]
    assert err["code"] == "connection_evicted"
    await gw.settle()
    assert len(gw.state.connections) == 3 and gw.cls.refusals.lingering == 0
    assert not busy[1].ended  # its request is being read: never evicted
    for _ in range(2):  # new1, then the one that sent "G"
        gw.connect(BUSY)
        await gw.settle()
    late = gw.connect(GET)  # all three busy: refused
    assert late[1].out.startswith(b"HTTP/1.1 503") and not busy[1].ended
    assert len(gw.state.connections) == 3
    for task in list(gw.state.tasks):
        task.cancel()
    await gw.settle()


async def test_a_keep_alive_connection_is_idle_again_after_its_response() -> None:
    gw = Gateway(2)
    keep = gw.connect(GET)  # answered at once, then waits for its next request
    await gw.settle()
    assert keep[1].out.startswith(b"HTTP/1.1 200") and not keep[1].ended
    other = gw.connect()
    gw.connect()  # the bound is full: the keep-alive one is the oldest idle
    assert keep[1].ended == "close" and not other[1].ended
    await gw.settle()
    assert len(gw.state.connections) == 2


@pytest.mark.parametrize("slots", [0, 8])
async def test_evictions_past_the_linger_slots_are_reset(slots: int) -> None:
    gw = Gateway(1)
    gw.cls.linger_slots = slots
    first = gw.connect()
    gw.connect()
    assert first[1].ended == ("abort" if slots == 0 else "close")
    await gw.settle()


async def test_an_evicted_connection_whose_client_does_not_read_is_reset(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A keep-alive connection with its last answer still unsent is closed gently (the answer
    goes out first), but reset after LINGER: its fd is not held by a client that never reads."""
    monkeypatch.setattr(http_protocol, "LINGER", 0.01)
    gw = Gateway(1)
    stuck = gw.connect()
    stuck[1].unsent = 1000
    gw.connect()
    assert stuck[1].ended == "close"  # waiting for the unsent bytes
    await asyncio.sleep(0.05)
    assert stuck[1].ended == "abort"
    await gw.settle()
    assert gw.cls.refusals.lingering == 0
