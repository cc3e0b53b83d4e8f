"""Many open connections against the real gateway: bounded, refused at once in the OpenAI shape,
logged once, and the worker plane keeps its fds (a real server with a low fd limit)."""

from __future__ import annotations

import json
import resource
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.conftest import shared_model
from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
# the server starts with macOS's soft limit for a shell and a hard limit of 4096
SOFT, HARD = 256, 4096
LIVEZ = b"GET /livez HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n"
CHAT = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}


def _open(port: int, n: int) -> list[socket.socket]:
    """N idle connections (they send nothing)."""
    return [socket.create_connection(("127.0.0.1", port), timeout=20) for _ in range(n)]


def _room_for(n: int) -> None:
    """Let this (the client) process open N sockets: its soft limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < n:
        pytest.skip(f"the test process may open {hard} files; the flood needs {n}")
    if soft != resource.RLIM_INFINITY and soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n if hard == resource.RLIM_INFINITY
                                                    else hard, hard))


def _answer(s: socket.socket) -> bytes:
    """Everything the server sends on S until it closes (a reset ends it too)."""
    out = b""
    try:
        while chunk := s.recv(65536):
            out += chunk
    except ConnectionResetError:
        pass
    return out


def _assert_refusal(out: bytes) -> None:
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), out[:300]
    assert b"retry-after: 1" in head.lower() and b"connection: close" in head.lower()
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    assert err["code"] == "too_many_connections" and err["type"] == "server_error"


def _served(srv: Server, model: str) -> None:
    """/livez and a chat request are served (the flood is gone)."""
    assert httpx.get(f"{srv.base}/livez", timeout=30).status_code == 200
    r = httpx.post(f"{srv.url}/chat/completions", json={**CHAT, "model": model}, timeout=60)
    assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def low_fds() -> Iterator[tuple[Server, str]]:
    """A server on stories260K with a low fd limit, whose idle connections stay open."""
    model = shared_model("stories260K")
    srv = Server(str(model), "--header-timeout", "120", "--log-level", "warning",
                 nofile=(SOFT, HARD)).wait_ready()
    yield srv, model.name
    srv.stop()


def test_more_connections_than_fds_are_refused_and_the_server_lives(
        low_fds: tuple[Server, str]) -> None:
    """Old code: past the soft fd limit accept() failed (EMFILE) with a traceback per attempt,
    and a new connection was never answered; now the soft limit is raised to the hard one, the
    bound keeps fds in reserve, and past it a new connection evicts the oldest idle one (or,
    when all are busy, gets a 503: test_max_connections_is_exact)."""
    srv, model = low_fds
    _room_for(HARD + 200)
    before = len(srv.lines)
    flood = _open(srv.port, HARD + 50)  # more than the process may ever open
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as late:
            late.sendall(LIVEZ)
            out = _answer(late)  # old code: no answer (timeout); then a 503
            assert out.startswith(b"HTTP/1.1 200"), out[:300]
        refused = 0
        for s in flood[HARD // 2:]:  # the first ones fit under the bound
            s.settimeout(0.5)
            try:
                out = s.recv(1)
            except TimeoutError:
                continue  # still open: admitted
            except ConnectionResetError:
                out = b""  # evicted while many evictions lingered: reset at once
            refused += out == b""  # evicted: closed
        assert refused >= 50  # at least the fds past the limit were evicted
    finally:
        for s in flood:
            s.close()
    for _ in range(100):  # the server notices the closes in its own time: wait by asking
        try:
            _served(srv, model)
            break
        except AssertionError:
            time.sleep(0.1)
    _served(srv, model)  # the worker plane and the gateway survived the flood
    log = srv.lines[before:]
    assert not [ln for ln in log if "Traceback" in ln or "Too many open files" in ln], log[:20]
    assert 1 <= sum("evicting idle connections" in ln or "refusing connections" in ln
                    for ln in log) <= 4, log


def test_max_connections_is_exact() -> None:
    """--max-connections N: N connections whose requests are being read are held, the next is
    refused with a 503 (an idle one would be evicted instead: tests/e2e/test_eviction.py), and
    one closed frees its slot."""
    srv = Server("--max-connections", "4", "--header-timeout", "120").wait_ready()
    try:
        held = _open(srv.port, 4)
        for s in held:  # a complete head, a body still to come (20 KiB of it already: not
            # stalled for 5 s, gateway/edge/slowbody.py): busy, not evicted
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\n"
                      b"content-length: 100000\r\n\r\n{" + b" " * 20 * 1024)
        time.sleep(0.5)  # the server has read the heads
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as late:
            _assert_refusal(_answer(late))
        held.pop().close()
        for _ in range(100):  # until the server has seen the close
            time.sleep(0.05)
            with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as s:
                s.sendall(LIVEZ)
                if _answer(s).startswith(b"HTTP/1.1 200"):
                    break
        else:
            raise AssertionError("a freed slot was never given to a new connection")
        for s in held:
            s.close()
    finally:
        srv.stop()


def test_max_connections_beyond_the_fd_limit_refuses_to_start() -> None:
    srv = Server("--max-connections", "4000", nofile=(SOFT, HARD))
    assert srv.wait_exit() == 2
    text = "".join(srv.lines)
    assert "--max-connections 4000 needs more file descriptors" in text, text


def test_a_worker_starts_under_a_hard_fd_limit_below_4096() -> None:
    """Old code: mlx_lm's import asks for (2048, 4096) open files, which a hard limit of 1024 (a
    container's `--ulimit nofile=1024`) refuses with ValueError, so the worker never started."""
    model = shared_model("stories260K")
    srv = Server(str(model), "--log-level", "warning", nofile=(256, 1024))
    try:
        srv.wait_ready()
        _served(srv, model.name)
    finally:
        srv.stop()
