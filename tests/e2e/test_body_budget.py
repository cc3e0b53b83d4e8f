"""One bound on the request-body bytes held at once over all connections (--max-body-memory): a
request whose body does not fit gets a 503 with Retry-After before any of it is read, in its
path's error shape; accepted requests go on; every charge is given back, whatever way the request
ends (a real server, stories260K, a 64 MiB budget, raw sockets).

Old code: no budget (the newcomers were read and held, each up to its own limit) and no
rapid_mlx_request_body_bytes gauge: the refusal, eviction and chunked tests fail on it with
the gauge reads left out (the newcomers wait for their body: a 408 after 30 s); the storm and
pipelining tests guard the new bookkeeping (the storm one fails when connection_lost does not
give the charge back)."""

from __future__ import annotations

import json
import random
import re
import socket
import struct
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from gateway.edge.slowbody import GRACE_S
from tests.conftest import shared_model
from tests.e2e.harness import Server
from tests.e2e.test_connections import _answer

pytestmark = pytest.mark.slow
BUDGET = 64 << 20
HELD = 8_000_000  # each of 8 connections declares this much: 64,000,000 of 67,108,864 charged


def _head(path: str, length: int | None, extra: str = "") -> bytes:
    size = "transfer-encoding: chunked" if length is None else f"content-length: {length}"
    return (f"POST {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\n"
            f"{size}\r\n{extra}\r\n").encode()


def _chat(model: str, length: int) -> bytes:
    """A valid chat body of exactly LENGTH bytes (JSON padded with spaces)."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "Hi"}],
                       "max_tokens": 2}).encode()
    return body + b" " * (length - len(body))


def _held(srv: Server) -> int:
    """The gauge of charged body bytes on /metrics."""
    text = httpx.get(f"{srv.base}/metrics", timeout=10).text
    found = re.search(r"^rapid_mlx_request_body_bytes (\S+)$", text, re.M)
    assert found, "no rapid_mlx_request_body_bytes gauge"
    return int(float(found.group(1)))


def _settled(srv: Server, want: int, wait: float = 10.0) -> int:
    """The gauge once it reads WANT (or after WAIT seconds)."""
    deadline = time.monotonic() + wait
    while (got := _held(srv)) != want and time.monotonic() < deadline:
        time.sleep(0.1)
    return got


def _reset(s: socket.socket) -> None:
    """Close S with a TCP reset (an aborted upload)."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()


def _refusal(out: bytes) -> dict[str, object]:
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 503"), out[:300]
    assert b"retry-after: 1" in head.lower() and b"connection: close" in head.lower()
    return dict(json.loads(body))


@pytest.fixture(scope="module")
def small() -> Iterator[tuple[Server, str]]:
    """A server on stories260K whose budget is 64 MiB (the least allowed)."""
    model = shared_model("stories260K")
    srv = Server(str(model), "--max-body-memory", "64MiB", "--header-timeout", "60").wait_ready()
    yield srv, model.name
    srv.stop()


def _fill(port: int, n: int = 8) -> list[socket.socket]:
    """N connections whose heads declare HELD bytes each, and a first byte of body."""
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(_head("/v1/chat/completions", HELD) + b"{")
        socks.append(s)
    return socks


class Feed:
    """Keeps bodies arriving at 600 KB/s each, faster than HELD's pace (HELD / 30 s, 267 KB/s),
    leaving their last 1 MB unsent; a send that fails is left alone."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.socks = list(socks)
        self.sent = 1
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        self.sent = 1  # the `{`
        while not self.stop.wait(0.1) and self.sent < HELD - 1_000_000:
            for s in self.socks:
                try:
                    s.sendall(b" " * 60_000)
                except OSError:
                    pass
            self.sent += 60_000

    def close(self) -> None:
        self.stop.set()
        self.thread.join()


def test_a_body_past_the_budget_is_refused_at_once_and_accepted_ones_go_on(
        small: tuple[Server, str]) -> None:
    """With 64,000,000 bytes declared by 8 uploads keeping their pace, a newcomer declaring 4 MB
    gets the 503 at once (OpenAI shape; Anthropic's on /v1/messages) while its body is unsent; a
    small chat request fits and is served; an accepted upload completing its 8 MB body is
    answered; once the uploads are reset, the gauge is back to 0."""
    srv, model = small
    assert _held(srv) == 0
    socks = _fill(srv.port)
    feed = Feed(socks)
    try:
        assert _settled(srv, 8 * HELD) == 8 * HELD
        t0 = time.monotonic()
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/chat/completions", 4_000_000))  # no body byte sent
            err = _refusal(_answer(s))["error"]
        assert time.monotonic() - t0 < 2.0
        assert isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}, err
        assert err["code"] == "request_bodies_full" and err["type"] == "server_error", err
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/messages", 4_000_000, "anthropic-version: 2023-06-01\r\n"))
            out = _refusal(_answer(s))
        assert out["type"] == "error", out
        assert out["error"]["type"] == "overloaded_error", out  # type: ignore[index]
        r = httpx.post(f"{srv.url}/chat/completions", timeout=60, json={
            "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
        assert r.status_code == 200, r.text
        time.sleep(GRACE_S + 0.5)  # past their grace: they keep their pace, so none is evicted
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/chat/completions", 4_000_000))
            _refusal(_answer(s))
        feed.close()
        done = socks.pop(0)  # an accepted upload completes: answered, budget or not
        chat = _chat(model, 0)  # after the `{` and the spaces sent: the rest of a valid body
        done.sendall(b" " * (HELD - feed.sent - len(chat) + 1) + chat[1:])
        head = _answer_head(done)
        assert head.startswith(b"HTTP/1.1 200"), head
        done.close()
        assert _settled(srv, 7 * HELD) == 7 * HELD
    finally:
        feed.close()
        for s in socks:
            _reset(s)
    assert _settled(srv, 0) == 0
    assert any("refusing request bodies" in ln for ln in srv.lines), srv.lines[-10:]


def test_uploads_behind_their_pace_give_way_to_a_newcomer(small: tuple[Server, str]) -> None:
    """With the budget held by 8 uploads that stopped sending, a newcomer declaring 4 MB evicts
    one of them (a 408 connection_evicted, Anthropic's shape on /v1/messages) instead of getting
    the 503, and is served; the other 7 keep their charge."""
    srv, model = small
    first = socket.create_connection(("127.0.0.1", srv.port), timeout=30)  # the most behind
    first.sendall(_head("/v1/messages", HELD, "anthropic-version: 2023-06-01\r\n") + b"{")
    time.sleep(0.2)
    socks = _fill(srv.port, 7)
    try:
        assert _settled(srv, 8 * HELD) == 8 * HELD
        time.sleep(GRACE_S + 0.5)
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/chat/completions", 4_000_000) + _chat(model, 4_000_000))
            head = _answer_head(s)
        assert head.startswith(b"HTTP/1.1 200"), head
        out = _answer(first)
        assert out.startswith(b"HTTP/1.1 408"), out[:300]
        err = json.loads(out.partition(b"\r\n\r\n")[2])
        assert err["type"] == "error" and "memory" in err["error"]["message"], err
        assert _settled(srv, 7 * HELD) == 7 * HELD
    finally:
        _reset(first)
        for s in socks:
            _reset(s)
    assert _settled(srv, 0) == 0
    assert any("evicting requests whose body stalled" in ln for ln in srv.lines), srv.lines[-9:]


def _answer_head(s: socket.socket) -> bytes:
    """The status line and headers of the answer on S."""
    out = b""
    while b"\r\n\r\n" not in out:
        chunk = s.recv(65536)
        if not chunk:
            break
        out += chunk
    return out.partition(b"\r\n\r\n")[0]


def test_a_chunked_body_is_charged_as_it_grows_and_refused_when_it_does_not_fit(
        small: tuple[Server, str]) -> None:
    """A chunked body (size undeclared) is charged 8 MiB at once, the rest as it arrives: with
    56,000,000 bytes declared by others, its 3rd MB past 8 MiB does not fit: a 503, and the
    others' charge stays."""
    srv, model = small
    socks = _fill(srv.port, 7)
    try:
        assert _settled(srv, 7 * HELD) == 7 * HELD
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/chat/completions", None))
            assert _settled(srv, 7 * HELD + (8 << 20)) == 7 * HELD + (8 << 20)
            chunk = b"%x\r\n%s\r\n" % (1 << 20, b" " * (1 << 20))
            try:
                for _ in range(16):
                    s.sendall(chunk)
            except OSError:
                pass  # the server stopped reading: refused
            err = _refusal(_answer(s))["error"]
        assert err["code"] == "request_bodies_full", err  # type: ignore[index]
        assert _settled(srv, 7 * HELD) == 7 * HELD
    finally:
        for s in socks:
            _reset(s)
    assert _settled(srv, 0) == 0


def _abort_one(port: int, model: str, rng: random.Random) -> None:
    """One upload ended some hostile way."""
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    try:
        length = rng.choice([100, 70_000, 1_000_000, 8_000_000, 9_000_000, 70_000_000])
        path = rng.choice(["/v1/chat/completions", "/v1/messages", "/v1/completions",
                           "/v1/embeddings", "/v1/responses", "/nowhere"])
        chunked = rng.random() < 0.2
        s.sendall(_head(path, None if chunked else length))
        how = rng.randrange(6)
        part = b" " * min(length, rng.choice([0, 1000, 65_536, 300_000]))
        if how == 0:  # reset before any body
            pass
        elif how == 1:  # part of the body, then reset
            s.sendall(b"%x\r\n%s\r\n" % (len(part), part) if chunked and part else part)
        elif how == 2:  # a whole small body that is not JSON, answered 400; then closed
            s.sendall(b"5\r\nnope!\r\n0\r\n\r\n" if chunked else b"n" * min(length, 100))
            s.settimeout(2)
            s.recv(100)
        elif how == 3:  # half-close after part of the body
            s.sendall(part if not chunked else b"")
            s.shutdown(socket.SHUT_WR)
            time.sleep(0.01)
        elif how == 4:  # a valid body, reset before the answer is read
            if not chunked and 100 <= length <= 8_000_000:
                s.sendall(_chat(model, length)[:length])
        else:  # a broken chunk framing
            s.sendall(b"zz\r\n" if chunked else part)
    except OSError:
        pass
    finally:
        _reset(s)


def test_a_storm_of_aborted_uploads_leaves_no_charge(small: tuple[Server, str]) -> None:
    """400 uploads from 16 threads, each ended another way (reset before or during its body,
    half-closed, a 400 or a 413 answer, reset before its answer, broken framing): the gauge
    returns to 0 and the server serves."""
    srv, model = small

    def run(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(25):
            _abort_one(srv.port, model, rng)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert _settled(srv, 0, 15.0) == 0
    assert not [ln for ln in srv.lines if "Traceback" in ln or " ERROR " in ln], srv.lines[-30:]
    r = httpx.post(f"{srv.url}/chat/completions", timeout=60, json={
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text


def test_pipelined_requests_are_charged_one_at_a_time(small: tuple[Server, str]) -> None:
    """20 chat requests pipelined on one connection, each declaring 4 MB (80 MB in all, more
    than the budget): each is charged when its turn comes (after the previous answer) and given
    back with its answer, so all are served; the gauge ends at 0 (a guard: passes on the old
    code, which had no budget)."""
    srv, model = small
    one = _head("/v1/chat/completions", 4_000_000) + _chat(model, 4_000_000)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
        sender = threading.Thread(target=s.sendall, args=(one * 20,), daemon=True)
        sender.start()
        out = b""
        while out.count(b"HTTP/1.1 ") < 20 or not out.endswith(b"}"):
            chunk = s.recv(65536)
            assert chunk, out[-300:]
            out += chunk
        sender.join(30)
    assert out.count(b"HTTP/1.1 200") == 20, out[:300]
    assert _settled(srv, 0) == 0


def _read_until(s: socket.socket, marker: bytes, out: bytes = b"", size: int = 65536) -> bytes:
    """OUT and what S sends until MARKER is in it (the server must not close first)."""
    while marker not in out:
        chunk = s.recv(size)
        assert chunk, out[-300:]
        out += chunk
    return out


def _stalled_stream(port: int, model: str, path: str) -> socket.socket:
    """A streamed request to PATH of a HELD-byte body (mostly padding) whose answer (16 choices
    of 400 tokens with logprobs: megabytes) has started and is then left unread, so it cannot
    complete: the server stalls sending it (a slow reader)."""
    ask: dict[str, object] = {"model": model, "stream": True, "n": 16, "max_tokens": 400,
                              "ignore_eos": True}
    if path == "/v1/chat/completions":
        ask.update(messages=[{"role": "user", "content": "Hi"}], logprobs=True, top_logprobs=20)
    else:
        ask.update(prompt="Once upon a time", logprobs=5)
    body = json.dumps(ask).encode()
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.settimeout(30)
    s.connect(("127.0.0.1", port))
    s.sendall(_head(path, HELD) + body + b" " * (HELD - len(body)))
    out = _read_until(s, b"data: ", size=4096)
    assert out.startswith(b"HTTP/1.1 200"), out[:300]
    return s


def test_a_started_stream_gives_its_body_charge_back(small: tuple[Server, str]) -> None:
    """Eight streamed answers (chat, completions) of 8 MB bodies, started and left unread (they
    cannot complete), hold nothing of the budget once they started: a newcomer's 4 MB body is
    served. Old code held their 64,000,000 bytes until the answers completed: the gauge stayed
    there (48,000,000 with chat streams: two had completed into the socket buffers) and the
    newcomer got the 503."""
    srv, model = small
    socks = [_stalled_stream(srv.port, model, path) for path in
             ["/v1/chat/completions", "/v1/completions"] * 4]
    try:
        assert _settled(srv, 0) == 0
        with socket.create_connection(("127.0.0.1", srv.port), timeout=30) as s:
            s.sendall(_head("/v1/chat/completions", 4_000_000) + _chat(model, 4_000_000))
            head = _answer_head(s)
        assert head.startswith(b"HTTP/1.1 200"), head
    finally:
        for s in socks:
            _reset(s)
    assert _settled(srv, 0) == 0
    r = httpx.post(f"{srv.url}/chat/completions", timeout=30, json={
        "model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})
    assert r.status_code == 200, r.text


def _held_while_running(srv: Server) -> tuple[int, int]:
    """From one /metrics scrape: the charged body bytes and the requests in flight on workers."""
    text = httpx.get(f"{srv.base}/metrics", timeout=10).text
    held = re.search(r"^rapid_mlx_request_body_bytes (\S+)$", text, re.M)
    assert held, "no rapid_mlx_request_body_bytes gauge"
    running = re.findall(r"^rapid_mlx_replica_in_flight\{[^}]*\} (\S+)$", text, re.M)
    assert running, "no rapid_mlx_replica_in_flight gauge"
    return int(float(held.group(1))), int(sum(float(n) for n in running))


def test_a_started_messages_stream_gives_its_body_charge_back(small: tuple[Server, str]) -> None:
    """A streamed /v1/messages answer (Anthropic events) of an 8 MB body holds nothing of the
    budget once its message_start arrived, while the worker still generates it (480 greedy
    tokens, ~1 s here): one scrape reads the charged bytes and the requests in flight. Old code
    (no release in the Messages endpoint) held the 8,000,000 bytes until the answer completed.
    The answer then completes whole and the gauge stays at 0."""
    srv, model = small
    body = json.dumps({"model": model, "stream": True, "max_tokens": 480, "temperature": 0,
                       "messages": [{"role": "user", "content": "Hi"}]}).encode()
    for _ in range(3):  # a scrape after the answer ended would prove nothing: try again
        with socket.create_connection(("127.0.0.1", srv.port), timeout=60) as s:
            s.sendall(_head("/v1/messages", HELD) + body + b" " * (HELD - len(body)))
            out = _read_until(s, b"event: message_start")
            assert out.startswith(b"HTTP/1.1 200"), out[:300]
            held, running = _held_while_running(srv)
            out = _read_until(s, b"event: message_stop", out)
        assert b'"stop_reason":"max_tokens"' in out, out[-300:]
        if running:
            break
    else:
        pytest.fail("the answer always ended before the scrape: nothing was checked")
    assert held == 0
    assert _settled(srv, 0) == 0
