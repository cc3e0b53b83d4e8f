"""A small /v1/responses request continuing a large stored conversation (`previous_response_id`)
converts the stored items off the gateway's event loop: while it is handled, /livez still
answers (before the continuation does)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.probes.loop_stall import STORED_ID, continuation
from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

CALLS, ENTRIES = 60, 20_000  # ~12 MiB: cheap for the store to read (a string per call's
# arguments), seconds of Python to convert (each call's arguments decoded, every string counted)


def _store(data: Path) -> None:
    """STORED_ID: a user message, then CALLS function calls of ENTRIES-entry arguments each, as
    a model with a longer context could have left it."""
    args = json.dumps([{"k": "v"}] * ENTRIES)
    items = [{"id": "msg_0", "type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "go"}]}]
    items += [{"id": f"fc_{i}", "type": "function_call", "call_id": f"call_{i}", "name": "f",
               "arguments": args} for i in range(CALLS)]
    response = {"id": STORED_ID, "object": "response", "created_at": int(time.time()),
                "status": "completed", "model": "default", "output": []}

    async def put() -> None:
        store = ResponseStore(data / RESPONSES_DB)
        await store.open()
        try:
            await store.put(STORED_ID, "", response, items)
        finally:
            await store.close()

    asyncio.run(put())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("data")
    _store(Path(data))
    srv = Server("--data-dir", str(data)).wait_ready()
    try:
        yield srv
    finally:
        srv.stop()


def test_livez_answers_while_a_large_stored_conversation_is_continued(server: Server) -> None:
    body = json.dumps(continuation()).encode()
    assert len(body) < 1024  # the body is small: only the stored conversation is large
    order: list[str] = []
    answer: list[bytes] = []
    with httpx.Client(base_url=server.base, timeout=120) as probe:
        assert probe.get("/livez").status_code == 200  # its connection is open before
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(f"POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     f"application/json\r\nContent-Length: {len(body)}\r\nConnection: close"
                     "\r\n\r\n".encode() + body)

        def read_answer() -> None:
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
            answer.append(b"".join(chunks))
            order.append("continued")

        reader = threading.Thread(target=read_answer)
        reader.start()
        time.sleep(0.3)  # not a bound: lets the store read the conversation (off the loop in
        # old code too), so the probes meet its conversion
        for _ in range(3):
            assert probe.get("/livez").status_code == 200
            order.append("livez")
        reader.join()
        sock.close()
    assert answer[0].startswith(b"HTTP/1.1 400"), answer[0][:300]  # far over the context
    assert b"maximum context length" in answer[0]
    assert order == ["livez", "livez", "livez", "continued"]
