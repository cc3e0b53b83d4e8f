"""At the connection bound, connections whose request body has stalled (trickled a byte at a
time) give way to new ones once no idle connection is left: the most stalled gets a 408 in its
path's error shape; a fast upload and a streaming answer are never evicted (a real server,
stories260K, at most 6 connections)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.edge.slowbody import GRACE_S
from tests.conftest import shared_model
from tests.e2e.harness import Server
from tests.e2e.test_connections import LIVEZ, _answer, _assert_refusal
from tests.e2e.test_eviction import _assert_streamed_whole, _held_stream

pytestmark = pytest.mark.slow
MOST = 6
BOUNDARY = "rapidmlxtestboundary"


def _head(path: str, length: int = 100_000, ctype: str = "application/json") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: {ctype}\r\n"
            f"content-length: {length}\r\n\r\n").encode()


class Trickle:
    """Connections whose bodies arrive a byte every half second (JSON whitespace), until
    stopped; a send that fails (the server closed it) is left alone."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.socks: list[socket.socket] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def open(self, path: str = "/v1/chat/completions") -> socket.socket:
        """One more trickling connection to PATH (its head and a first `{` sent)."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=20)
        s.sendall(_head(path) + b"{")
        self.socks.append(s)
        time.sleep(0.2)  # the server has read the head (else the next one evicts it as idle)
        return s

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            for s in list(self.socks):
                try:
                    s.send(b" ")
                except OSError:
                    pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        for s in self.socks:
            s.close()


class Upload(threading.Thread):
    """An audio upload (multipart) sent at about 100 KiB/s; `error` is set if the server
    ends it."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20)
        self.stop = threading.Event()
        self.sent = 0
        self.error: Exception | None = None

    def run(self) -> None:
        part = (f"--{BOUNDARY}\r\ncontent-disposition: form-data; name=\"file\"; "
                f"filename=\"a.wav\"\r\ncontent-type: audio/wav\r\n\r\n").encode()
        self.sock.sendall(_head("/v1/audio/transcriptions", 20_000_000,
                                f"multipart/form-data; boundary={BOUNDARY}") + part)
        try:
            while not self.stop.wait(0.05):
                self.sock.sendall(b"\0" * 5 * 1024)
                self.sent += 5 * 1024
        except OSError as exc:
            self.error = exc


def _recv_now(s: socket.socket, wait: float = 3.0) -> bytes:
    """What the server sent on S within WAIT seconds, up to its close; b"" if nothing."""
    s.settimeout(wait)
    try:
        return _answer(s)
    except TimeoutError:
        return b""


def _error(out: bytes, status: bytes = b"408") -> dict[str, object]:
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 " + status), out[:300]
    assert b"connection: close" in head.lower()
    return dict(json.loads(body))


@pytest.fixture(scope="module")
def small() -> Iterator[tuple[Server, str]]:
    """A server on stories260K holding at most MOST connections; heads may take long."""
    model = shared_model("stories260K")
    srv = Server(str(model), "--max-connections", str(MOST), "--header-timeout", "120",
                 "--log-level", "warning").wait_ready()
    yield srv, model.name
    srv.stop()


def test_a_bound_full_of_trickling_bodies_lets_clients_in(small: tuple[Server, str]) -> None:
    """Old code: the trickling connections were "busy", never evicted, so /livez and chat got
    the 503 until each body's 30 s read timeout; now each evicts the most stalled body, which
    gets a 408 connection_evicted (OpenAI shape), within a second."""
    srv, model = small
    flood = Trickle(srv.port)
    try:
        for _ in range(MOST):
            flood.open()
        time.sleep(GRACE_S + 0.5)  # past their grace: a byte every 0.5 s is far below the rate
        t0 = time.monotonic()
        r = httpx.get(f"{srv.base}/livez", timeout=10, headers={"connection": "close"})
        assert r.status_code == 200, r.text  # old code: 503 too_many_connections
        r = httpx.post(f"{srv.url}/chat/completions", timeout=60, json={
            "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 5.0
        evicted = [out for s in flood.socks if (out := _recv_now(s, 0.5))]
        assert len(evicted) == 1 or len(evicted) == 2, evicted  # (chat may find the room free)
        for out in evicted:
            err = _error(out)["error"]
            assert isinstance(err, dict) and err["code"] == "connection_evicted", err
            assert set(err) == {"message", "type", "param", "code"}
    finally:
        flood.close()
    log = srv.lines
    assert any("request body stalled" in ln for ln in log), log[-20:]


def test_an_evicted_messages_body_gets_the_anthropic_shape(small: tuple[Server, str]) -> None:
    """The most stalled connection is a /v1/messages request: its 408 is Anthropic's error.
    Old code: /livez got the 503 and the messages connection nothing."""
    srv, _ = small
    time.sleep(0.5)  # the previous test's sockets are closed
    flood = Trickle(srv.port)
    try:
        messages = flood.open("/v1/messages")  # the oldest: the most stalled
        time.sleep(0.2)
        for _ in range(MOST - 1):
            flood.open()
        time.sleep(GRACE_S + 0.5)
        r = httpx.get(f"{srv.base}/livez", timeout=10, headers={"connection": "close"})
        assert r.status_code == 200, r.text  # old code: 503
        err = _error(_recv_now(messages))
        assert err["type"] == "error", err
        assert err["error"] == {"type": "invalid_request_error", "message": err["error"]["message"]}
        assert "too slowly" in err["error"]["message"]  # type: ignore[index]
    finally:
        flood.close()


def test_a_fast_upload_and_a_streaming_answer_are_never_evicted(
        small: tuple[Server, str]) -> None:
    """With the bound holding a 100 KiB/s audio upload (the oldest), a streaming chat read
    slowly, and stalled bodies, newcomers evict the stalled bodies only; once the rest are in
    their grace a newcomer gets the 503; the upload goes on and the stream completes. Old code:
    the first newcomer got the 503 (every connection was "busy")."""
    srv, model = small
    time.sleep(0.5)
    upload = Upload(srv.port)
    upload.start()
    stream = _held_stream(srv.port, model)
    flood = Trickle(srv.port)
    try:
        stalled = [flood.open() for _ in range(MOST - 2)]
        time.sleep(GRACE_S + 0.5)
        fresh = [flood.open() for _ in range(MOST - 2)]  # each evicts a stalled body
        for s in stalled:
            assert _error(_recv_now(s))["error"]["code"] == "connection_evicted"  # type: ignore
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as late:
            late.sendall(LIVEZ)
            _assert_refusal(_answer(late))  # upload, stream and fresh bodies: nobody to evict
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as late:
            late.sendall(_head("/v1/messages", 2) + b"{}")
            err = _error(_answer(late), b"503")  # old code: the OpenAI shape
            assert err["type"] == "error" and err["error"]["type"] == "overloaded_error", err  # type: ignore
        assert all(_recv_now(s, 0.2) == b"" for s in fresh)
        assert upload.error is None and upload.is_alive(), upload.error
        sent = upload.sent
        time.sleep(GRACE_S + 0.5)  # the fresh bodies stall in turn: they go, the upload stays
        r = httpx.get(f"{srv.base}/livez", timeout=10, headers={"connection": "close"})
        assert r.status_code == 200, r.text
        assert upload.error is None and upload.sent > sent + 100 * 1024, (upload.sent, sent)
    finally:
        upload.stop.set()
        upload.join()
        upload.sock.close()
        flood.close()
    _assert_streamed_whole(stream)
