"""Hostile sequences at the HTTP edge that the in-memory transport of test_eviction_order cannot
show: the project's protocol class in a real uvicorn on loopback, real asyncio transports, raw
sockets; none may leave a traceback in the log or a connection counted after it is gone."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn

from gateway.app import error_shapes
from gateway.edge.http_protocol import LINGER, GuardedH11Protocol, Refusals
from gateway.edge.idle import IdleConnections
from gateway.edge.slowbody import SlowBodies

BIG = b"x" * (8 << 20)  # more than loopback's socket buffers hold: part stays in the transport
WS_HEAD = (b"GET /echo HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n"
           b"sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n")


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """/big: 8 MiB in one message; /livez: at once, its body unread; else echoes the body size."""
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        await send({"type": "websocket.close"})
        return
    size = 0
    if scope["path"] not in ("/big", "/livez"):
        while True:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            size += len(msg.get("body", b""))
            if not msg.get("more_body"):
                break
    body = BIG if scope["path"] == "/big" else b"got %d" % size
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Edge:
    """A uvicorn server in a thread with the gateway's protocol class, at most MAX connections."""

    def __init__(self, max_connections: int, header_timeout: float = 30.0,
                 send_stall: float = 60.0) -> None:
        self.protocol: Any = type("P", (GuardedH11Protocol,), {
            "max_connections": max_connections, "refusals": Refusals(),
            "idle": IdleConnections(), "bodies": SlowBodies(), "linger_slots": 8,
            "header_timeout": header_timeout, "send_stall": send_stall, "shapes": error_shapes()})
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(_app, http=self.protocol, ws="auto", timeout_keep_alive=60,
                                lifespan="on", log_config=None, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]},
                                       daemon=True)
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def connect(self) -> socket.socket:
        """A new client connection."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=10)

    def open_connections(self) -> int:
        """Connections the server counts in its bound (tasks settle first)."""
        time.sleep(0.2)
        return len(self.server.server_state.connections)

    def stop(self) -> None:
        """Shut the server down."""
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def edge() -> Iterator[Edge]:
    e = Edge(max_connections=2)
    yield e
    e.stop()


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(1 << 20):
        out += chunk
    return out


def _response(s: socket.socket) -> bytes:
    """One whole response (head and content-length body) from S."""
    out = b""
    while b"\r\n\r\n" not in out:
        out += s.recv(4096)
    head, _, body = out.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += s.recv(4096)
    return head + b"\r\n\r\n" + body


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


def test_an_evicted_keep_alive_connection_that_drains_its_answer_leaves_no_traceback(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """Old code: an evicted keep-alive connection whose last answer was still being sent was
    closed and reset LINGER s later; when its client read the answer in between, asyncio had
    already closed the transport and the late abort() raised AttributeError ('NoneType' object
    has no attribute 'call_soon') in the event loop's log."""
    a = edge.connect()
    a.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
    time.sleep(0.5)  # answered: idle between requests, most of 8 MiB still in its transport
    b, c = edge.connect(), edge.connect()  # c evicts a, the one idle the longest
    try:
        got = _read_all(a)  # a reads its whole answer: the transport drains, then closes
        assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"x" * 1000)
        time.sleep(LINGER + 0.5)  # past the old reset
        assert _tracebacks(caplog) == []
        assert edge.protocol.refusals.lingering == 0
        assert edge.open_connections() == 2  # b and c
    finally:
        for s in (a, b, c):
            s.close()


@pytest.mark.parametrize("first", [b"", b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n"])
def test_an_upgrade_header_is_ignored(edge: Edge, caplog: pytest.LogCaptureFixture,
                                      first: bytes) -> None:
    """Old code: uvicorn handed a connection asking for a WebSocket to its WebSocket protocol
    (the gateway serves none) and the edge's bookkeeping then raised AttributeError in
    data_received (a traceback, the connection reset): now the request is served as HTTP."""
    s = edge.connect()
    try:
        if first:  # a keep-alive connection asks for the upgrade on its second request
            s.sendall(first)
            assert _response(s).startswith(b"HTTP/1.1 200")
        s.sendall(WS_HEAD + b"content-length: 2\r\n\r\nhi")
        out = _response(s)
        assert out.startswith(b"HTTP/1.1 200") and out.endswith(b"got 2"), out
        s.sendall(b"GET /livez HTTP/1.1\r\nhost: x\r\n\r\n")  # still plain HTTP/1.1 after
        assert _response(s).startswith(b"HTTP/1.1 200")
    finally:
        s.close()
    assert _tracebacks(caplog) == []
    assert edge.open_connections() == 0


def test_a_broken_chunked_body_of_a_request_answered_early_leaves_no_traceback(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """Old code: a route answering without reading its body (/livez, a 401, a 404) wrote its
    answer after the edge's 400 for the broken chunked framing and its EOF: RuntimeError
    'Cannot call write() after write_eof()', an 'Exception in ASGI application' traceback per
    request. Now the request's app sees the client gone; the client gets the 400 alone."""
    s = edge.connect()
    try:
        s.sendall(b"POST /livez HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n")
        out = _read_all(s)
    finally:
        s.close()
    assert out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1") == 1, out
    assert b'"invalid_http"' in out
    time.sleep(0.3)
    assert _tracebacks(caplog) == []


def test_a_broken_chunked_body_being_read_gets_a_400_and_frees_its_slot(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """A body whose chunk framing breaks while the app reads it: a 400 alone, nothing logged as
    an error, no slot or task kept (passes on the old code too: a guard for the fix above)."""
    s = edge.connect()
    try:
        s.sendall(b"POST /echo HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
                  b"5\r\nhello\r\n")
        time.sleep(0.2)  # the app has the first chunk and waits for more
        s.sendall(b"5\r\nhelloXX\r\n")
        out = _read_all(s)
    finally:
        s.close()
    assert out.startswith(b"HTTP/1.1 400") and out.count(b"HTTP/1.1") == 1, out
    assert _tracebacks(caplog) == []
    assert edge.open_connections() == 0
    assert len(edge.server.server_state.tasks) == 0


def test_a_client_that_never_reads_its_400_does_not_keep_its_connection(
        edge: Edge, caplog: pytest.LogCaptureFixture) -> None:
    """Old code: a connection answered with a 400 (or a 408) was closed after the linger, but
    close() waits for unsent data: a client that asked for a large answer, read none of it and
    then sent a malformed request kept its connection (and the bound's slot) open forever. Now
    it is reset LINGER s after that close."""
    s = edge.connect()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        s.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\nNOT HTTP\r\n\r\n")  # then never reads
        assert edge.open_connections() == 1
        deadline = time.monotonic() + 3 * LINGER + 2
        while edge.open_connections() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert edge.open_connections() == 0  # old code: 1, for as long as the client waits
        assert edge.protocol.refusals.lingering == 0
    finally:
        s.close()
    assert _tracebacks(caplog) == []


MESSAGES_HEAD = b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\n"


def _shape(answer: bytes) -> tuple[int, str, str]:
    """The status, error shape ('anthropic' or 'openai') and error type of ANSWER."""
    head, _, body = answer.partition(b"\r\n\r\n")
    doc = json.loads(body)
    if doc.get("type") == "error":
        return int(head.split()[1]), "anthropic", doc["error"]["type"]
    return int(head.split()[1]), "openai", doc["error"]["type"]


@pytest.mark.parametrize("sent,status", [
    (MESSAGES_HEAD + b"no colon here\r\n\r\n", 400),  # a malformed head
    (MESSAGES_HEAD + b"transfer-encoding: chunked\r\n\r\nzz\r\n", 400),  # a broken body
    (MESSAGES_HEAD + b"x-pad: " + b"a" * 70000, 431),  # a head too large
])
def test_a_broken_messages_request_gets_the_anthropic_shape(edge: Edge, sent: bytes,
                                                             status: int) -> None:
    """Old code: the edge's 400 and 431 were in OpenAI's shape whatever the path; a request
    line for /v1/messages now gets Anthropic's, as the routes answer there."""
    s = edge.connect()
    try:
        s.sendall(sent)
        got = _read_all(s)
    finally:
        s.close()
    assert _shape(got) == (status, "anthropic", "invalid_request_error"), got


def test_timeouts_and_evictions_of_a_messages_head_get_the_anthropic_shape() -> None:
    """Old code: the 408s of a head not complete in time, and of an idle connection evicted
    for a newcomer, were in OpenAI's shape even after a /v1/messages request line."""
    e = Edge(max_connections=1, header_timeout=0.5)
    try:
        slow = e.connect()
        slow.sendall(MESSAGES_HEAD)
        assert _shape(_read_all(slow)) == (408, "anthropic", "invalid_request_error")
        slow.close()
        idle = e.connect()
        idle.sendall(MESSAGES_HEAD)
        time.sleep(0.1)
        newcomer = e.connect()  # evicts it
        assert _shape(_read_all(idle)) == (408, "anthropic", "invalid_request_error")
        idle.close()
        newcomer.close()
    finally:
        e.stop()


def test_an_answer_nobody_reads_does_not_hold_its_connection_forever() -> None:
    """Old code: an answer larger than the socket buffers that the client never read stayed in
    the server's memory with its connection open, for as long as the client kept the socket:
    with `Connection: close` (or HTTP/1.0) it was never idle, so never evicted, and enough of
    them held the whole bound (503 for everyone). Now a client that takes none of it for
    send_stall seconds is reset; one reading slowly but steadily gets all of it."""
    e = Edge(max_connections=4, send_stall=1.0)
    try:
        stuck = e.connect()
        stuck.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        slow = e.connect()
        slow.sendall(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        got = b""
        while chunk := slow.recv(1 << 20):  # about 1 MiB every 0.4 s: never 1 s without
            got += chunk
            time.sleep(0.4)
        assert got.endswith(b"x" * 1000) and len(got) > len(BIG)
        deadline = time.monotonic() + 10
        while e.open_connections() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert e.open_connections() == 0  # old code: 1 (stuck), for as long as it waits
        stuck.close()
        slow.close()
    finally:
        e.stop()
