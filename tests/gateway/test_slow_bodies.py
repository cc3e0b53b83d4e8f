"""At a full connection bound with no idle connection left, a newcomer evicts the connection whose
request body has stalled the most (silent for STALL_S, or below MIN_RATE after GRACE_S): a 408 in
its path's error shape; bodies arriving at a fair rate, complete ones, and requests being answered
are never evicted. The real protocol class with an in-memory transport and a fake clock."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any

import pytest
import uvicorn

from gateway.edge import http_protocol, idle, slowbody
from gateway.edge.slowbody import GRACE_S, MIN_RATE, STALL_S, SlowBodies
from tests.gateway.test_eviction_order import Gateway


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    fake = SimpleNamespace(monotonic=c.monotonic)
    monkeypatch.setattr(slowbody, "time", fake)
    monkeypatch.setattr(http_protocol, "time", fake)
    monkeypatch.setattr(idle, "time", fake)
    return c


def head(path: str, length: int = 100_000) -> bytes:
    """A complete POST head for PATH announcing LENGTH body bytes."""
    return (f"POST {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            f"content-length: {length}\r\n\r\n").encode()


def test_a_body_stalls_below_the_rate_after_the_grace_or_when_silent(clock: Clock) -> None:
    bodies: SlowBodies[str] = SlowBodies()
    for name in ("empty", "trickle", "fast", "burst"):
        bodies.received(name, 0)
    bodies.received("burst", 100 * 1024)  # 100 s of credit, then silence
    for _ in range(int(GRACE_S * 10) + 1):  # just past the grace, 0.1 s steps
        clock.now += 0.1
        bodies.received("trickle", 1)
        bodies.received("fast", 10 * 1024)  # 100 KiB/s: an audio upload
    got = [bodies.pop_stalled(lambda c: True) for _ in range(3)]
    assert [g[0] if g else None for g in got] == ["empty", "trickle", None]
    clock.now = 1000.0 + STALL_S - 0.1  # "burst" silent for just under STALL_S
    assert bodies.pop_stalled(lambda c: True) is None
    clock.now += 0.2
    out = bodies.pop_stalled(lambda c: True)
    assert out is not None and out[0] == "burst" and out[1].bytes == 100 * 1024
    clock.now += STALL_S  # "fast" has been silent that long now
    assert bodies.pop_stalled(lambda c: c != "fast") is None  # refused: looked at again later
    assert "fast" in bodies and bodies.pop_stalled(lambda c: True) is None
    clock.now += STALL_S
    assert bodies.pop_stalled(lambda c: True) is not None and len(bodies) == 0


def test_the_heap_stays_proportional_to_the_live_bodies(clock: Clock) -> None:
    bodies: SlowBodies[int] = SlowBodies()
    bodies.received(-1, 0)
    for i in range(10_000):  # keep-alive requests come and go, never evicted
        bodies.received(i, 0)
        bodies.discard(i)
    assert len(bodies) == 1 and len(bodies._heap) <= 2 * 1 + 64 + 1
    clock.now += GRACE_S + 1
    out = bodies.pop_stalled(lambda c: True)
    assert out is not None and out[0] == -1


async def _app(scope: Any, receive: Any, send: Any) -> None:
    """/livez answers at once; anything else reads its body until the client is gone."""
    if scope["path"] == "/livez":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    while (await receive())["type"] != "http.disconnect":
        pass


def _error(out: bytes) -> tuple[bytes, dict[str, Any]]:
    head_, _, body = out.partition(b"\r\n\r\n")
    return head_, json.loads(body)


async def test_stalled_bodies_are_evicted_most_stalled_first_in_their_shape(clock: Clock) -> None:
    """Old code: with no idle connection left, every newcomer got the 503."""
    gw = Gateway(3)
    gw.config = uvicorn.Config(_app, timeout_keep_alive=60)
    gw.cls.bodies = SlowBodies()
    messages = gw.connect(head("/v1/messages") + b"{")
    clock.now += 0.5
    chat = gw.connect(head("/v1/chat/completions") + b"{")
    clock.now += 0.5
    done = gw.connect(head("/v1/chat/completions", 1) + b"{")  # complete: being served
    await gw.settle()
    gw.connect(head("/v1/chat/completions") + b"{")  # nobody stalled yet: 503
    clock.now += GRACE_S
    chat[0].data_received(b" ")  # a byte a second is far below MIN_RATE
    new1 = gw.connect(head("/livez"))
    assert messages[1].ended == "close" and not chat[1].ended and not new1[1].ended
    head_, err = _error(messages[1].out)
    assert head_.startswith(b"HTTP/1.1 408") and b"connection: close" in head_
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error"
    assert "too slowly" in err["error"]["message"]
    await gw.settle()
    # new1 was answered before its body was read: it closes instead of parsing the rest
    assert new1[1].ended == "close" and new1[1].out.startswith(b"HTTP/1.1 200")
    assert gw.cls.refusals.lingering == 0 and len(gw.state.connections) == 2
    gw.connect(head("/v1/chat/completions") + b"{")  # takes the free place (in its grace)
    new2 = gw.connect(head("/v1/chat/completions") + b"{")  # full again...
    assert chat[1].ended == "close"  # ...so the stalled chat body goes, in the OpenAI shape
    head_, err = _error(chat[1].out)
    assert head_.startswith(b"HTTP/1.1 408") and err["error"]["code"] == "connection_evicted"
    await gw.settle()
    late = gw.connect(head("/v1/chat/completions") + b"{")  # new2 is in its grace, done done
    assert late[1].out.startswith(b"HTTP/1.1 503") and not done[1].ended and not new2[1].ended
    assert gw.cls.bodies.evicted == 2
    for task in list(gw.state.tasks):
        task.cancel()
    await gw.settle()


async def test_a_fair_rate_body_and_an_answer_being_sent_are_never_evicted(clock: Clock) -> None:
    """A 100 KiB/s upload, and a request answered before its body is complete, hold their
    connections; one whose answer is complete while its body still trickles just closes."""
    started = asyncio.Event()
    finish = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["path"] == "/early":  # answers without reading the body
            await send({"type": "http.response.start", "status": 200, "headers": []})
            started.set()
            await finish.wait()
            await send({"type": "http.response.body", "body": b"ok"})
            return
        while (await receive())["type"] != "http.disconnect":
            pass

    gw = Gateway(3)
    gw.config = uvicorn.Config(app, timeout_keep_alive=60)
    gw.cls.bodies = SlowBodies()
    fast = gw.connect(head("/upload", 10 * 1024 * 1024) + b"{")
    early = gw.connect(head("/early") + b"{")
    await started.wait()
    idle = gw.connect()
    for _ in range(int(STALL_S * 2 * 10)):  # 10 s at 100 KiB/s
        clock.now += 0.1
        fast[0].data_received(b" " * 10 * 1024)
    other = gw.connect(head("/x") + b"{")  # evicts the idle one
    assert idle[1].ended and not fast[1].ended and not early[1].ended
    late = gw.connect(head("/x") + b"{")  # the answer to `early` is being sent: not evicted
    assert late[1].out.startswith(b"HTTP/1.1 503") and not early[1].ended
    finish.set()
    await gw.settle()
    # its answer is complete and its body unread: it closes (no 2nd answer, no parsing the rest)
    assert early[1].ended == "close" and early[1].out.endswith(b"ok\r\n0\r\n\r\n")
    assert early[1].out.startswith(b"HTTP/1.1 200")
    clock.now += STALL_S + 1
    fast[0].data_received(b" " * 10 * 1024)
    gw.connect(head("/x") + b"{")  # a free place: nobody is evicted
    gw.connect(head("/x") + b"{")  # full: the most stalled goes, `other` (silent since its head)
    assert other[1].out.startswith(b"HTTP/1.1 408")
    assert not fast[1].ended
    for task in list(gw.state.tasks):
        task.cancel()
    await gw.settle()
    assert MIN_RATE <= 10 * 1024 / 0.1


async def test_a_just_connected_client_is_spared_while_a_stalled_body_can_go(clock: Clock) -> None:
    """A connection that has not sent its head yet is evicted before a stalled body only once it
    has been idle FRESH_S: a client just connected is most likely sending its head. Before, a
    flood of trickled bodies reconnecting evicted every new client before its head was read."""
    gw = Gateway(3)
    gw.config = uvicorn.Config(_app, timeout_keep_alive=60)
    gw.cls.bodies = SlowBodies()
    stalled = [gw.connect(head("/v1/chat/completions") + b"{") for _ in range(2)]
    clock.now += GRACE_S + 0.1
    client = gw.connect()  # its head is on the way
    gw.connect(head("/v1/chat/completions") + b"{")  # the flood reconnects
    assert not client[1].ended and stalled[0][1].out.startswith(b"HTTP/1.1 408")
    clock.now += idle.FRESH_S
    gw.connect(head("/v1/chat/completions") + b"{")  # silent for FRESH_S: idle, it goes first
    assert client[1].ended == "close" and not stalled[1][1].ended
    for task in list(gw.state.tasks):
        task.cancel()
    await gw.settle()


async def test_a_refusal_is_shaped_by_the_path_of_its_request_line(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: the 503 was in the OpenAI shape whatever the route; now the refused connection's
    request line is awaited (REFUSAL_WAIT) and /v1/messages gets Anthropic's overloaded_error;
    one that sends nothing gets the OpenAI shape when the wait is over."""
    monkeypatch.setattr(http_protocol, "REFUSAL_WAIT", 0.05)
    gw = Gateway(1)
    gw.config = uvicorn.Config(_app, timeout_keep_alive=60)
    gw.cls.bodies = SlowBodies()
    gw.connect(head("/v1/chat/completions", 1) + b"{")  # complete: never evicted
    await gw.settle()
    messages = gw.connect(b"POST /v1/messages?beta=true HTTP/1.1\r\nhost: x\r\n")
    head_, err = _error(messages[1].out)
    assert head_.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in head_
    assert err == {"type": "error", "error": {"type": "overloaded_error",
                                              "message": err["error"]["message"]}}
    split = gw.connect(b"GET /v1/mess")  # the line in two pieces: answered when it ends
    assert split[1].out == b""
    split[0].data_received(b"ages HTTP/1.1\r\n")
    assert _error(split[1].out)[1]["type"] == "error"
    silent = gw.connect()
    assert silent[1].out == b""
    await asyncio.sleep(0.1)
    head_, err = _error(silent[1].out)
    assert head_.startswith(b"HTTP/1.1 503") and err["error"]["code"] == "too_many_connections"
    await gw.settle()
    assert gw.cls.refusals.lingering == 0
    for task in list(gw.state.tasks):
        task.cancel()
    await gw.settle()
