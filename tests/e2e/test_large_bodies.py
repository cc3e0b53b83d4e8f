"""A large body is decoded and translated off the gateway's event loop: while one is handled,
/livez still answers (before the large request does), on every chat-like door."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

# tiny items, as many as MAX_JSON_VALUES lets through (5 values each: 225,000; 220,000 items,
# ~7 MiB, now get json_too_many_values at once): Python work on the loop before the fix
N = 45_000
ITEM = {"role": "user", "content": "a"}
BODIES: dict[str, dict[str, Any]] = {
    "/v1/responses": {"model": "default", "input": [ITEM] * N, "max_output_tokens": 1},
    "/v1/chat/completions": {"model": "default", "messages": [ITEM] * N, "max_tokens": 1},
    "/v1/messages": {"model": "default", "max_tokens": 1, "messages": [  # the slowest blocks
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f",
                                           "input": {}}] * (N * 5 // 9)}]},  # 9 values
}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server().wait_ready()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.parametrize("path", list(BODIES))
def test_livez_answers_while_a_large_body_is_handled(server: Server, path: str) -> None:
    body = json.dumps(BODIES[path]).encode()
    order: list[str] = []
    answer: list[bytes] = []
    with httpx.Client(base_url=server.base, timeout=120) as probe:
        assert probe.get("/livez").status_code == 200  # its connection is open before
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
                     "\r\n\r\n".encode() + body)

        def read_big() -> None:
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            answer.append(b"".join(chunks))
            order.append("large")

        reader = threading.Thread(target=read_big)
        reader.start()
        time.sleep(0.02)  # not a bound: lets the gateway read the body's last chunks (between
        # chunks its loop is free anyway; 1.5 MB on loopback takes a few ms), so the probes meet
        # the decoding and translating (chat and Messages: 130-240 ms of it since the bodies
        # shrank under MAX_JSON_VALUES; 0.2 s here let the large answer come first)
        for _ in range(3):  # one after another, from once the whole body is sent: the
            assert probe.get("/livez").status_code == 200  # old loop let one in between stages
            order.append("livez")
        reader.join()
        sock.close()
    assert answer[0].startswith(b"HTTP/1.1 400"), answer[0][:300]  # far over the context
    assert b"maximum context length" in answer[0]
    assert order == ["livez", "livez", "livez", "large"]
