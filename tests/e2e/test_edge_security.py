"""Deny by default at the HTTP edge (issue 9, items 9, 10, 12): real servers, real sockets."""

from __future__ import annotations

import json
import select
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow
ADMIN = "admin-secret"
API = "api-secret"
CHAT = {"model": "default", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}
ORIGIN = "http://app.example"


def _envelope(r: httpx.Response) -> dict:
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    return err


@pytest.fixture(scope="module")
def admin_srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    allowed = tmp_path_factory.mktemp("swap-allowed")
    srv = Server("--admin-key", ADMIN, "--swap-allow-path", str(allowed),
                 "--header-timeout", "2").wait_ready()
    srv.allowed = allowed  # type: ignore[attr-defined]
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def keyed_srv() -> Iterator[Server]:
    srv = Server("--api-key", API, "--cors-allow-origins", ORIGIN,
                 "--allowed-hosts", "api.example,other.example").wait_ready()
    yield srv
    srv.stop()


def _admin(srv: Server, body: dict | None = None, **headers: str) -> httpx.Response:
    hdrs = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json", **headers}
    return httpx.post(f"{srv.base}/admin/swap/default", content=json.dumps(body or {}),
                      headers=hdrs, timeout=30)


# --- admin -----------------------------------------------------------------------------------

def test_admin_is_disabled_without_admin_key(server: Server) -> None:
    r = httpx.post(f"{server.base}/admin/swap/default", json={}, timeout=10)
    assert r.status_code == 403 and _envelope(r)["code"] == "admin_disabled"
    assert "--admin-key" in r.json()["error"]["message"]


def test_admin_needs_json_and_same_origin(admin_srv: Server) -> None:
    boot = admin_srv.worker("default")["boot_id"]
    r = _admin(admin_srv, **{"Content-Type": "text/plain"})
    assert r.status_code == 415 and _envelope(r)["code"] == "unsupported_media_type"
    assert "application/json" in r.json()["error"]["message"]
    r = httpx.post(f"{admin_srv.base}/admin/swap/default", content=b"{}", timeout=10,
                   headers={"Authorization": f"Bearer {ADMIN}"})  # no content type at all
    assert r.status_code == 415
    for hostile in ({"Origin": "http://evil.example"}, {"Origin": "null"},
                    {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"}):
        r = _admin(admin_srv, **hostile)
        assert r.status_code == 403 and _envelope(r)["code"] == "cross_origin_forbidden", hostile
    r = _admin(admin_srv, Authorization="Bearer wrong")
    assert r.status_code == 401 and _envelope(r)["code"] == "invalid_admin_key"
    assert admin_srv.worker("default")["boot_id"] == boot  # nothing above touched the worker


def test_swap_targets_outside_the_allow_list_are_refused_alike(admin_srv: Server) -> None:
    before = admin_srv.worker("default")
    allowed: Path = admin_srv.allowed  # type: ignore[attr-defined]
    (allowed / "not-a-model").mkdir()
    messages = set()
    for target in ("/etc", "/nonexistent/dir", str(allowed / "missing"),
                   str(allowed / "not-a-model"), str(allowed / ".." / ".."), "mlx-community/x",
                   "../../etc", "~"):
        r = _admin(admin_srv, {"model": target})
        err = _envelope(r)
        assert r.status_code == 400 and err["code"] == "swap_target_not_allowed", (target, r.text)
        messages.add(err["message"].replace(target[:200], "T"))
    assert len(messages) == 1, messages  # one message: nothing says what exists on disk
    after = admin_srv.worker("default")
    assert after["state"] == "ready" and after["boot_id"] == before["boot_id"]
    r = httpx.post(f"{admin_srv.url}/chat/completions", json=CHAT, timeout=30)
    assert r.status_code == 200, r.text


def test_admin_bodies_have_a_small_limit_of_their_own(admin_srv: Server) -> None:
    """An /admin/* body over 64 KiB gets a 413 (counted, or declared: then before any of it is
    sent). Old code read it whole (request.body(): only --max-body-memory bounded it, no read
    timeout): the 1 MiB model path got the allow list's 400, the bare head waited for its body."""
    boot = admin_srv.worker("default")["boot_id"]
    for path in ("/admin/swap/default", f"/admin/drain/default/{boot}"):
        hdrs = {"Authorization": f"Bearer {ADMIN}", "Content-Type": "application/json"}
        big = json.dumps({"model": "m" * (1 << 20), "timeout": 1}).encode()
        r = httpx.post(f"{admin_srv.base}{path}", content=big, headers=hdrs, timeout=30)
        err = _envelope(r)
        assert r.status_code == 413 and err["code"] == "request_too_large", (path, r.text)
        assert str(64 * 1024) in err["message"] and r.headers["connection"] == "close"
        head = (f"POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json"
                f"\r\nAuthorization: Bearer {ADMIN}\r\nContent-Length: {10 << 20}\r\n\r\n")
        out, took = _raw(admin_srv.port, head.encode(), timeout=5)
        assert out.startswith(b"HTTP/1.1 413") and b'"request_too_large"' in out, out[:300]
        assert took < 5
    assert admin_srv.worker("default")["boot_id"] == boot  # nothing above touched the worker
    r = _admin(admin_srv, {"model": "x" * 1000})  # a small body is still read and judged
    assert r.status_code == 400 and _envelope(r)["code"] == "swap_target_not_allowed"


# --- Host, CORS, content types -----------------------------------------------------------------

def test_unknown_host_is_refused_before_any_route(admin_srv: Server) -> None:
    for host in ("evil.example", "evil.example:80", f"attacker.test:{admin_srv.port}"):
        r = httpx.get(f"{admin_srv.url}/models", headers={"Host": host}, timeout=10)
        assert r.status_code == 400 and _envelope(r)["code"] == "host_not_allowed", host
        r = httpx.post(f"{admin_srv.url}/chat/completions", json=CHAT, headers={"Host": host},
                       timeout=10)
        assert r.status_code == 400
    for host in ("localhost", f"localhost:{admin_srv.port}", f"127.0.0.1:{admin_srv.port}",
                 "[::1]", f"[::1]:{admin_srv.port}", "LOCALHOST"):
        r = httpx.get(f"{admin_srv.url}/models", headers={"Host": host}, timeout=10)
        assert r.status_code == 200, (host, r.text)


def test_cors_is_off_by_default(admin_srv: Server) -> None:
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type"}
    r = httpx.options(f"{admin_srv.url}/chat/completions", headers=pre, timeout=10)
    assert r.status_code == 403 and _envelope(r)["code"] == "cors_origin_not_allowed"
    assert "--cors-allow-origins" in r.json()["error"]["message"] and "POST" in r.headers["allow"]
    assert not any(h.startswith("access-control-") for h in r.headers)
    r = httpx.get(f"{admin_srv.url}/models", headers={"Origin": ORIGIN}, timeout=10)
    assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
    # a cross-site write is refused even with a JSON type (a browser would have preflighted)
    r = httpx.post(f"{admin_srv.url}/chat/completions", json=CHAT, headers={"Origin": ORIGIN},
                   timeout=10)
    assert r.status_code == 403 and _envelope(r)["code"] == "cross_origin_forbidden"


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded",
                                   "multipart/form-data; boundary=x", None])
def test_json_routes_refuse_other_content_types(admin_srv: Server, ctype: str | None) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    for path in ("/chat/completions", "/completions"):
        r = httpx.post(f"{admin_srv.url}{path}", content=json.dumps(CHAT), headers=headers,
                       timeout=10)
        assert r.status_code == 415, (path, ctype, r.text)
        assert "Content-Type: application/json" in _envelope(r)["message"]
    r = httpx.post(f"{admin_srv.url}/chat/completions", content=json.dumps(CHAT), timeout=30,
                   headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200, r.text


def test_405_carries_allow_and_models_by_id(admin_srv: Server) -> None:
    r = httpx.get(f"{admin_srv.url}/chat/completions", timeout=10)
    assert r.status_code == 405 and r.headers["allow"] == "POST" and _envelope(r)
    r = httpx.delete(f"{admin_srv.url}/models", timeout=10)
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    r = httpx.options(f"{admin_srv.url}/models", timeout=10)  # not a preflight: plain 405
    assert r.status_code == 405 and "GET" in r.headers["allow"]
    r = httpx.get(f"{admin_srv.url}/models/default", timeout=10)
    card = r.json()
    assert r.status_code == 200 and card["id"] == "default" and card["object"] == "model"
    assert {"created", "owned_by"} <= set(card)
    assert card == next(m for m in httpx.get(f"{admin_srv.url}/models").json()["data"]
                        if m["id"] == "default")
    r = httpx.get(f"{admin_srv.url}/models/nope", timeout=10)
    assert r.status_code == 404 and _envelope(r)["code"] == "model_not_found"


# --- the HTTP parser's own limits ----------------------------------------------------------------

def _raw(port: int, data: bytes, timeout: float = 10.0) -> tuple[bytes, float]:
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out, time.monotonic() - started


def test_huge_header_gets_a_json_431(admin_srv: Server) -> None:
    head = (b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 1_000_000
            + b"\r\n\r\n")
    out, _ = _raw(admin_srv.port, head)
    status, _, body = out.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 431"), out[:200]
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    out, _ = _raw(admin_srv.port, b"NONSENSE\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") and b'"invalid_http"' in out


def test_incomplete_headers_are_dropped_after_the_header_timeout(admin_srv: Server) -> None:
    out, took = _raw(admin_srv.port, b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-a: b")
    assert out.startswith(b"HTTP/1.1 408") and b"header_timeout" in out, out
    assert 1.5 < took < 6, took  # --header-timeout 2 (+ the linger after the answer)
    out, took = _raw(admin_srv.port, b"")  # connects, sends nothing
    assert out == b"" and 1.5 < took < 4, took
    # a slow but steady sender does not get more time: the deadline is per request head
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", admin_srv.port), timeout=10) as s:
        s.sendall(b"GET /v1/models HTTP/1.1\r\n")
        for _ in range(20):
            time.sleep(0.25)
            if select.select([s], [], [], 0)[0]:
                break  # the server answered
            s.sendall(b"X-a: b\r\n")
        got = s.recv(1000)
    assert got.startswith(b"HTTP/1.1 408") and time.monotonic() - started < 4, got


# --- API keys ------------------------------------------------------------------------------------

def test_with_keys_only_the_probes_are_open(keyed_srv: Server) -> None:
    r = httpx.get(f"{keyed_srv.base}/livez", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}
    r = httpx.get(f"{keyed_srv.base}/readyz", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ready"}
    auth = {"Authorization": f"Bearer {API}"}
    for path in ("/metrics", "/v1/health", "/v1/health/default", "/health", "/v1/workers",
                 "/v1/workers/default", "/docs", "/openapi.json", "/v1/models",
                 "/v1/models/default", "/nothing"):
        r = httpx.get(f"{keyed_srv.base}{path}", timeout=10)
        assert r.status_code == 401 and _envelope(r)["code"] == "invalid_api_key", path
        assert "pid" not in r.text and "boot" not in r.text
        r = httpx.get(f"{keyed_srv.base}{path}", headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 401, path
        if path != "/nothing":
            assert httpx.get(f"{keyed_srv.base}{path}", headers=auth, timeout=10).status_code \
                in (200,), path
    r = httpx.post(f"{keyed_srv.url}/chat/completions", json=CHAT, timeout=10)
    assert r.status_code == 401
    r = httpx.post(f"{keyed_srv.url}/chat/completions", json=CHAT, headers=auth, timeout=30)
    assert r.status_code == 200, r.text


def test_cors_when_enabled(keyed_srv: Server) -> None:
    pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization, content-type"}
    r = httpx.options(f"{keyed_srv.url}/chat/completions", headers=pre, timeout=10)
    assert r.status_code == 204, r.text  # no key needed: preflights carry none
    assert r.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    assert r.headers["access-control-allow-headers"] == "authorization, content-type"
    r = httpx.options(f"{keyed_srv.url}/chat/completions", timeout=10,
                      headers={**pre, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers
    auth = {"Authorization": f"Bearer {API}", "Origin": ORIGIN}
    r = httpx.post(f"{keyed_srv.url}/chat/completions", json=CHAT, headers=auth, timeout=30)
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ORIGIN
    r = httpx.get(f"{keyed_srv.url}/models", headers={"Origin": ORIGIN}, timeout=10)
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == ORIGIN
    r = httpx.post(f"{keyed_srv.url}/chat/completions", json=CHAT, timeout=10,
                   headers={**auth, "Origin": "http://evil.example"})
    assert r.status_code == 403 and "access-control-allow-origin" not in r.headers


def test_allowed_hosts_flag_adds_names(keyed_srv: Server) -> None:
    for host, code in (("api.example", 200), (f"other.example:{keyed_srv.port}", 200),
                       ("evil.example", 400)):
        r = httpx.get(f"{keyed_srv.base}/livez", headers={"Host": host}, timeout=10)
        assert r.status_code == code, host


# --- exposure at start-up ------------------------------------------------------------------------

def test_non_loopback_host_without_key_refuses_to_start() -> None:
    for host in ("0.0.0.0", "::"):
        srv = Server("--host", host)
        code = srv.proc.wait(60)
        out = "".join(srv.lines).strip()
        assert code != 0
        assert out.count("\n") == 0 and "--api-key" in out and "--allow-unauthenticated" in out, out
        assert "Traceback" not in out


def test_allow_unauthenticated_starts_and_prints_the_bound_address() -> None:
    srv = Server("--host", "0.0.0.0", "--allow-unauthenticated").wait_ready()
    try:
        ready = next(line for line in srv.lines if line.startswith("Ready: "))
        assert ready.strip() == f"Ready: http://0.0.0.0:{srv.port}/v1", ready
        assert httpx.get(f"{srv.url}/models", timeout=10).status_code == 200
        # reached by the machine's own address, not by a DNS name it does not know
        r = httpx.get(f"{srv.url}/models", headers={"Host": f"192.0.2.7:{srv.port}"}, timeout=10)
        assert r.status_code == 200
        r = httpx.get(f"{srv.url}/models", headers={"Host": "rebind.evil.example"}, timeout=10)
        assert r.status_code == 400
    finally:
        assert srv.stop() == 0
