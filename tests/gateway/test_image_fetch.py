"""gateway/images/fetch.py and address.py: image URLs reach public addresses only, bounded.

A local HTTP server plays the remote host; the address check is replaced by one that lets
127.0.0.1 (only) through, so the other bounds can be seen, and the real check refuses it."""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from gateway.edge.errors import APIError
from gateway.images import fetch as fetch_mod
from gateway.images.address import AddressRefused, is_public, resolve
from gateway.images.fetch import fetch
from tests.image_samples import encoded

PNG = encoded("PNG")
MiB = 1024 * 1024


class Handler(BaseHTTPRequestHandler):
    """Routes: /img.png, /hop/N (N redirects), /away (to 127.0.0.2), /file (to file://),
    /stream (21 MiB, no length), /declared (a 30 MiB Content-Length), /slow, /gzip, /missing,
    /host (the image only when the Host header names localhost)."""

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", **headers: str) -> None:
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k.replace("_", "-"), v)
        if "Content_Length" not in headers:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        port = self.server.server_address[1]
        p = self.path
        if p == "/img.png":
            self._send(200, PNG, Content_Type="image/png")
        elif p.startswith("/hop/"):
            n = int(p.rsplit("/", 1)[1])
            self._send(302, Location="/img.png" if n <= 1 else f"/hop/{n - 1}")
        elif p == "/away":
            self._send(302, Location=f"http://127.0.0.2:{port}/img.png")
        elif p == "/file":
            self._send(302, Location="file:///etc/passwd")
        elif p == "/stream":
            self.send_response(200)
            self.send_header("Connection", "close")
            self.end_headers()
            for _ in range(21):
                self.wfile.write(b"\0" * MiB)
        elif p == "/declared":
            self._send(200, b"x", Content_Length=str(30 * MiB))
        elif p == "/slow":
            time.sleep(10)  # far beyond the test's 0.5 s budget (and its 5 s bound)
            self._send(200, PNG)
        elif p == "/gzip":
            self._send(200, PNG, Content_Encoding="gzip")
        elif p == "/host":
            ok = self.headers.get("Host") == f"rebind.test:{port}"
            self._send(200 if ok else 421, PNG if ok else b"")
        else:
            self._send(404)


@pytest.fixture(scope="module")
def origin() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def only_127_0_0_1(ip: Any) -> bool:
    return str(ip) == "127.0.0.1"


async def refused(url: str, **kw: Any) -> APIError:
    with pytest.raises(APIError) as info:
        await fetch(url, "p", **kw)
    assert info.value.status == 400 and info.value.param == "p"
    return info.value


@pytest.mark.parametrize(("addr", "public"), [
    ("8.8.8.8", True), ("1.1.1.1", True), ("2606:4700:4700::1111", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("10.0.0.1", False), ("172.16.5.4", False),
    ("192.168.1.1", False), ("169.254.169.254", False), ("100.64.0.1", False),
    ("0.0.0.0", False), ("224.0.0.1", False), ("239.255.255.250", False),
    ("255.255.255.255", False), ("240.0.0.1", False), ("192.0.2.1", False),
    ("198.18.0.1", False), ("::1", False), ("::", False), ("fe80::1", False),
    ("fc00::1", False), ("fd12:3456::1", False), ("ff02::1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:10.1.2.3", False), ("::ffff:8.8.8.8", True),
    ("64:ff9b::7f00:1", False), ("64:ff9b::808:808", True), ("2002:7f00:1::", False),
    ("2001:db8::1", False),
])
def test_is_public(addr: str, public: bool) -> None:
    assert is_public(ipaddress.ip_address(addr)) is public


async def test_resolve_checks_every_address() -> None:
    with pytest.raises(AddressRefused, match="127.0.0.1"):
        await resolve("127.0.0.1", 80)
    with pytest.raises(AddressRefused):
        await resolve("localhost", 80)  # a name is judged by what it resolves to
    with pytest.raises(AddressRefused, match="does not resolve"):
        await resolve("no-such-host.invalid", 80)
    assert await resolve("8.8.8.8", 80) == "8.8.8.8"


async def test_loopback_server_refused_by_default(origin: str) -> None:
    err = await refused(f"{origin}/img.png")
    assert err.code == "image_url_refused" and "127.0.0.1" in err.message


async def test_fetch_and_redirects(origin: str) -> None:
    assert await fetch(f"{origin}/img.png", "p", allowed=only_127_0_0_1) == PNG
    assert await fetch(f"{origin}/hop/3", "p", allowed=only_127_0_0_1) == PNG
    err = await refused(f"{origin}/hop/4", allowed=only_127_0_0_1)
    assert "more than 3" in err.message


async def test_each_redirect_is_checked(origin: str) -> None:
    assert (await refused(f"{origin}/away", allowed=only_127_0_0_1)).code == "image_url_refused"
    assert (await refused(f"{origin}/file", allowed=only_127_0_0_1)).code == \
        "unsupported_image_url"


async def test_size_bounds(origin: str) -> None:
    started = time.monotonic()
    err = await refused(f"{origin}/stream", allowed=only_127_0_0_1)
    assert err.code == "image_too_large"
    assert (await refused(f"{origin}/declared", allowed=only_127_0_0_1)).code == "image_too_large"
    assert time.monotonic() - started < 5


async def test_time_bound_and_other_failures(origin: str) -> None:
    started = time.monotonic()
    err = await refused(f"{origin}/slow", allowed=only_127_0_0_1, total=0.5)
    # ended by its 0.5 s budget, not by the answer 10 s later; a loaded machine is slow to
    # notice, so the bound sits halfway
    assert err.code == "image_fetch_failed" and time.monotonic() - started < 5
    assert "HTTP 404" in (await refused(f"{origin}/missing", allowed=only_127_0_0_1)).message
    assert "Content-Encoding" in (await refused(f"{origin}/gzip", allowed=only_127_0_0_1)).message


async def test_connects_to_the_checked_address(origin: str, monkeypatch: pytest.MonkeyPatch
                                               ) -> None:
    """The name is resolved once, by the check: the connection goes to that address (with the
    name in Host), so a DNS answer that changes afterwards is never used."""
    seen: list[str] = []

    async def checked(host: str, port: int, allowed: Any) -> str:
        seen.append(host)
        return "127.0.0.1"

    monkeypatch.setattr(fetch_mod, "resolve", checked)
    port = origin.rsplit(":", 1)[1]
    assert await fetch(f"http://rebind.test:{port}/host", "p") == PNG  # not in any DNS
    assert seen == ["rebind.test"]


@pytest.mark.parametrize("url", ["file:///etc/passwd", "gopher://x/", "http:///nohost",
                                 "http://example.com:99999/a.png", "http://ex ample.com/",
                                 "http://%zz/", "http://[::1/", "http://[fe80::1%25eth0]/",
                                 "http://user:pw@example.com/a.png", "https://" + "a" * 9000])
async def test_bad_urls(url: str) -> None:
    await refused(url)


async def test_one_request_has_one_fetch_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """16 slow URLs cannot hold a request for 16 x 20 s: all of them share FETCH_REQUEST_S."""
    import asyncio

    from gateway.images import intake
    from gateway.images.intake import ImageParts
    from gateway.images.refs import ImageRef

    budgets: list[float] = []
    loop = asyncio.get_running_loop()
    now = [loop.time()]  # the loop's clock, moved by the fetches alone (no wall-clock timing)

    async def slow(url: str, param: str, total: float) -> bytes:
        budgets.append(total)
        now[0] += 0.3
        return PNG

    monkeypatch.setattr(loop, "time", lambda: now[0])
    monkeypatch.setattr(intake, "fetch", slow)
    monkeypatch.setattr(intake, "FETCH_REQUEST_S", 0.5)
    images = ImageParts()
    for k in range(3):
        images.add(ImageRef(f"p{k}", url=f"https://example.com/{k}.png"))
    with pytest.raises(APIError) as info:
        await images.load(True)
    assert info.value.param == "p2" and info.value.code == "image_fetch_failed"
    assert budgets[0] <= 0.5 and budgets[1] <= 0.21  # each fetch gets what is left
    assert len(budgets) == 2
