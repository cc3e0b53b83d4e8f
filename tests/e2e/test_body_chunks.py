"""A request body's parsing work is bounded (gateway/edge/bodychunks.py): a body of one-byte
chunks gets a 400 body_chunks_too_small after a few thousand of them instead of holding the event
loop for all of them, and a request answered before its body is read (a wrong API key) closes
its connection instead of parsing the rest (a real server, stories260K, with an API key)."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from gateway.edge.bodychunks import FREE_EVENTS
from tests.conftest import shared_model
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Hi " * 100}],
                   "max_tokens": 2}).encode()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    model = str(shared_model("stories260K"))
    srv = Server(model, "--served-model-name", "m", "--api-key", "good").wait_ready()
    yield srv
    srv.stop()


def _head(key: str) -> bytes:
    return (f"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: "
            f"application/json\r\ntransfer-encoding: chunked\r\nauthorization: Bearer {key}\r\n"
            "\r\n").encode()


def _chunks(body: bytes, size: int) -> bytes:
    parts = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def _status_and_body(out: bytes) -> tuple[int, bytes]:
    head, _, body = out.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body


def test_ordinary_chunks_are_read(server: Server) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(_head("good").replace(b"\r\n\r\n", b"\r\nconnection: close\r\n\r\n")
                  + _chunks(BODY, 256))
        status, body = _status_and_body(_read_all(s))
    assert status == 200, body


def test_one_byte_chunks_are_refused_early(server: Server) -> None:
    """Old code: all 20,000 chunks were parsed (~14 us of loop time each) and the spaces then
    failed as invalid_json; now the body stops at its event budget."""
    pad = b" " * (20 * FREE_EVENTS)
    with socket.create_connection(("127.0.0.1", server.port), timeout=60) as s:
        s.sendall(_head("good") + _chunks(pad + BODY, 1))
        status, body = _status_and_body(_read_all(s))
    assert status == 400, body
    assert json.loads(body)["error"]["code"] == "body_chunks_too_small"


def test_a_wrong_key_closes_before_the_body_is_read(server: Server) -> None:
    """Old code: after the 401 uvicorn kept parsing the body (to keep the connection alive) for
    as long as it came; now the connection closes once the 401 is out, the body unread."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as s:
        s.sendall(_head("wrong"))
        s.settimeout(0.05)
        out, closed = b"", False
        for _ in range(200):  # 10 s of body at most, a 600-byte chunk every 50 ms
            try:
                s.sendall(b"258\r\n" + b" " * 600 + b"\r\n")
            except OSError:
                closed = True
                break
            try:
                got = s.recv(65536)
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
            if not got:
                closed = True
                break
            out += got
            time.sleep(0)
    assert out.startswith(b"HTTP/1.1 401"), out[:200]
    assert closed  # old code: still reading the body when the client gave up
