"""A peer sending garbage on many connections: each gets its 400 (OpenAI shape), but the log
holds one "Invalid HTTP request received." line per interval, not one per connection (a real
server, stories260K).

Old code: 200 garbage connections wrote 200 warning lines (checked against 862288d)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.edge.connlimit import LOG_INTERVAL_S
from tests.conftest import shared_model
from tests.e2e.harness import Server
from tests.e2e.test_connections import _answer

pytestmark = pytest.mark.slow
INVALID = "Invalid HTTP request received."


@pytest.fixture(scope="module")
def srv() -> Iterator[Server]:
    """A server on stories260K that logs warnings."""
    server = Server(str(shared_model("stories260K")), "--log-level", "warning").wait_ready()
    yield server
    server.stop()


def _garbage(port: int, n: int, out: list[bytes]) -> None:
    for i in range(n):
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            s.sendall(b"\x16\x03\x01\x02\x00garbage %d\r\n\r\n" % i)  # a TLS hello, say
            out.append(_answer(s))


def test_a_garbage_flood_is_answered_and_logged_once(srv: Server) -> None:
    answers: list[bytes] = []
    t0 = time.monotonic()
    threads = [threading.Thread(target=_garbage, args=(srv.port, 50, answers)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    elapsed = time.monotonic() - t0
    assert len(answers) == 200
    for out in answers:
        head, _, body = out.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400"), out[:200]
        assert json.loads(body)["error"]["code"] == "invalid_http"
    assert httpx.get(f"{srv.base}/livez", timeout=10).status_code == 200
    lines = [ln for ln in srv.lines if INVALID in ln]
    # the first is logged, then at most one a LOG_INTERVAL_S (a slow machine may take longer)
    assert 1 <= len(lines) <= 1 + elapsed // LOG_INTERVAL_S, (elapsed, lines[:5])
    assert INVALID + "\n" == lines[0][-len(INVALID) - 1:]  # the first as uvicorn wrote it
