"""At the connection bound a new connection evicts the one idle the longest (no complete request
head: fresh, trickling, or keep-alive between requests) instead of being refused; a connection
whose request is being read or served is never evicted (a real server, stories260K)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import shared_model
from tests.e2e.harness import Server
from tests.e2e.test_connections import LIVEZ, _answer, _assert_refusal, _open

pytestmark = pytest.mark.slow
PARTIAL_HEAD = b"GET /livez HTTP/1.1\r\nhost: localhost\r\n"
# a head and the first 20 KiB of its body: 20 s of credit at the minimum body rate, so the body
# is not taken for a stalled one (gateway/edge/slowbody.py) for STALL_S seconds
BODY_HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
             b"content-type: application/json\r\ncontent-length: 100000\r\n\r\n{"
             + b" " * 20 * 1024)


def _still_open(s: socket.socket) -> bool:
    """S has had nothing from the server (no answer, no close)."""
    s.settimeout(0.3)
    try:
        s.recv(1)
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False
    return False


@pytest.fixture(scope="module")
def small() -> Iterator[tuple[Server, str]]:
    """A server on stories260K holding at most 6 connections; idle ones stay (long timeouts)."""
    model = shared_model("stories260K")
    srv = Server(str(model), "--max-connections", "6", "--header-timeout", "120",
                 "--log-level", "warning").wait_ready()
    yield srv, model.name
    srv.stop()


def test_idle_connections_are_evicted_oldest_first_for_probes_and_requests(
        small: tuple[Server, str]) -> None:
    """Old code: with the bound full of idle sockets, /livez and chat got 503
    too_many_connections; now each evicts the oldest idle socket: one that had sent part of a
    head gets a 408 connection_evicted and a close, one that had sent nothing just a close."""
    srv, model = small
    before = len(srv.lines)
    flood = _open(srv.port, 6)
    flood[0].sendall(PARTIAL_HEAD)  # a slowloris: the oldest
    time.sleep(0.3)  # the server has taken all six
    try:
        with httpx.Client(timeout=60) as client:
            r = client.get(f"{srv.base}/livez")  # keeps its connection open: keep-alive idle
            assert r.status_code == 200, r.text  # old code: 503
            out = _answer(flood[0])
            assert out.startswith(b"HTTP/1.1 408"), out[:200]
            assert json.loads(out.partition(b"\r\n\r\n")[2])["error"]["code"] == \
                "connection_evicted"
            r = httpx.post(f"{srv.url}/chat/completions", timeout=60, json={
                "model": model, "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 2})
            assert r.status_code == 200, r.text  # old code: 503
            assert _answer(flood[1]) == b""  # sent nothing: just closed
            assert all(_still_open(s) for s in flood[2:])  # younger: untouched
    finally:
        for s in flood:
            s.close()
    log = srv.lines[before:]
    assert 1 <= sum("evicting idle connections" in ln for ln in log) <= 2, log


def test_connections_serving_a_request_are_never_evicted(small: tuple[Server, str]) -> None:
    """A streaming chat whose client reads slowly and a request whose body is still arriving
    (not stalled) are real work: an idle socket is evicted instead, and with only busy
    connections left the newcomer gets the 503; the stream then completes. Old code: /livez
    got 503 at once."""
    srv, model = small
    time.sleep(0.5)  # the previous test's sockets are closed
    stream = _held_stream(srv.port, model)
    busy = _open(srv.port, 4)
    for s in busy:
        s.sendall(BODY_HEAD)  # heads complete, bodies arriving: requests being read
    idle = _open(srv.port, 1)[0]  # the bound (6) is full
    time.sleep(0.3)
    try:
        r = httpx.get(f"{srv.base}/livez", timeout=30)
        assert r.status_code == 200, r.text  # old code: 503
        assert _answer(idle) == b""  # the idle one went, not the stream or the bodies
        time.sleep(0.3)  # the server saw the probe's close
        busy += _open(srv.port, 1)
        busy[-1].sendall(BODY_HEAD)  # full again, every connection busy
        time.sleep(0.3)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as late:
            late.sendall(LIVEZ)
            _assert_refusal(_answer(late))  # nobody to evict: 503 as before
        assert all(_still_open(s) for s in busy)
    finally:
        for s in busy:
            s.close()
        idle.close()
    _assert_streamed_whole(stream)


HELD_CHOICES = 16  # x 400 tokens with 20 top logprobs each: ~6,400 SSE chunks of ~1.5 KB (~9
# MB), more than the server's socket buffers hold (4 MiB kernel + 64 KiB transport): the answer
# cannot complete (and free the connection) before the test reads it, however fast it decodes


def _held_stream(port: int, model: str) -> socket.socket:
    """A streaming chat whose client does not read yet (back-pressure): busy until read."""
    stream = socket.socket()
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    stream.settimeout(60)
    stream.connect(("127.0.0.1", port))
    body = json.dumps({"model": model, "stream": True, "max_tokens": 400, "ignore_eos": True,
                       "n": HELD_CHOICES, "logprobs": True, "top_logprobs": 20,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
    stream.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: "
                   b"application/json\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    got = stream.recv(1024)
    assert got.startswith(b"HTTP/1.1 200"), got[:300]
    return stream


def _assert_streamed_whole(stream: socket.socket) -> None:
    """Read a held stream's answer to its end (it was never evicted) and check that all its
    choices finished; closes it."""
    stream.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    rest = b""
    while b"data: [DONE]" not in rest:
        chunk = stream.recv(65536)
        assert chunk, rest[-300:]  # closed before the end: the stream was evicted
        rest += chunk
    stream.close()
    assert rest.count(b'"finish_reason":"length"') == HELD_CHOICES, rest[-300:]
