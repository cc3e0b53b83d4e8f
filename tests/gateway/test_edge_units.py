"""Unit tests of the edge's policies: hosts, CORS, keys, swap targets, exposure, public flags."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import GatewayConfig, is_loopback
from gateway.edge.auth import key_matches
from gateway.edge.cors import CorsPolicy
from gateway.edge.errors import APIError
from gateway.edge.hosts import HostPolicy, split_host
from gateway.ops.swap_targets import SwapTargets
from gateway.served import ServedModel


@pytest.mark.parametrize("header,host", [
    ("LocalHost:8000", "localhost"), ("127.0.0.1", "127.0.0.1"), ("[::1]:80", "[::1]"),
    ("[::1]", "[::1]"), ("a.example:1:2", "a.example:1:2"), ("", ""),
])
def test_split_host(header: str, host: str) -> None:
    assert split_host(header) == host


def test_host_policy() -> None:
    p = HostPolicy("127.0.0.1", ["api.example", "[fd00::1]"])
    assert all(p.allows(h) for h in ("localhost:1", "127.0.0.1", "[::1]:9", "API.example:443",
                                     "[fd00::1]:8000"))
    assert not any(p.allows(h) for h in ("evil.example", "10.0.0.1", None, "", "localhost.evil"))
    v6 = HostPolicy("fd00::2", [])
    assert v6.allows("[fd00::2]:8000") and not v6.allows("fd00::3")
    wild = HostPolicy("0.0.0.0", [])
    assert wild.allows("10.1.2.3:8000") and wild.allows("[fe80::1]") and not wild.allows("a.b")
    assert HostPolicy("127.0.0.1", ["*"]).allows("anything.example")


def test_cors_policy() -> None:
    off = CorsPolicy([])
    assert not off.enabled and not off.allows("http://a.example")
    on = CorsPolicy(["http://A.example/"])
    assert on.allows("http://a.example") and not on.allows("http://b.example")
    assert CorsPolicy(["*"]).response_headers("http://x")["Access-Control-Allow-Origin"] == "*"


def test_key_matches() -> None:
    assert key_matches("k2", ["k1", "k2"]) and not key_matches("k3", ["k1", "k2"])
    assert not key_matches("", ["k1"]) and not key_matches("k1", [])


def test_loopback_and_exposure() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "127.9.9.9", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.0.0.5", "my-host"]))
    cfg = GatewayConfig(served=[], host="0.0.0.0")
    assert cfg.exposure_error() is not None and "--api-key" in (cfg.exposure_error() or "")
    for ok in (GatewayConfig(served=[], host="0.0.0.0", api_keys=["k"]),
               GatewayConfig(served=[], host="0.0.0.0", allow_unauthenticated=True),
               GatewayConfig(served=[])):
        assert ok.exposure_error() is None


def _model(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def test_swap_targets(tmp_path: Path) -> None:
    root = tmp_path / "allowed"
    good = _model(root / "m")
    outside = _model(tmp_path / "outside")
    os.symlink(outside, root / "link")  # a symlink out of the allowed folder does not count
    t = SwapTargets({"qwen": "org/qwen"}, ["embedded://demo"], [str(root)], allow_repos=False)
    assert t.resolve("qwen") == "org/qwen" and t.resolve("embedded://demo") == "embedded://demo"
    assert t.resolve(str(good)) == str(good.resolve())
    assert t.resolve(str(root / "x" / ".." / "m")) == str(good.resolve())
    refused = ["/etc", str(outside), str(root / "link"), str(root / "missing"), str(root),
               "org/other", "embedded://other", "", "qwen2"]
    messages = set()
    for target in refused:
        with pytest.raises(APIError) as info:
            t.resolve(target)
        assert info.value.status == 400 and info.value.code == "swap_target_not_allowed"
        messages.add(info.value.message.replace(f"'{target}'", "'T'"))
    assert len(messages) == 1
    repos = SwapTargets({}, [], [], allow_repos=True)
    assert repos.resolve("org/other") == "org/other"
    for target in ("/etc", "a/b/c", "./org/x"):
        with pytest.raises(APIError):
            repos.resolve(target)


@pytest.fixture
def keyed() -> Iterator[TestClient]:
    # no lifespan: nothing is bound or started, only the routes and middleware answer
    app = build_app(GatewayConfig(served=[ServedModel("m", "x")], spawn_workers=False,
                                  worker_address="inproc://edge-units", api_keys=["k"],
                                  public_metrics=True, public_docs=True))
    app.state.hub.sock.close(0)
    app.state.hub.ctx.term()
    yield TestClient(app, base_url="http://localhost")


def test_public_flags_open_only_what_they_name(keyed: TestClient) -> None:
    for path in ("/metrics", "/docs", "/openapi.json"):
        assert keyed.get(path).status_code == 200, path
    # open without a key; 503 here only because no lifespan started the hub's event reader
    assert keyed.get("/livez").status_code == 503
    for path in ("/v1/health", "/v1/health/m", "/v1/workers", "/v1/models", "/v1/models/m"):
        assert keyed.get(path).status_code == 401, path
    assert keyed.get("/v1/models/m", headers={"Authorization": "Bearer k"}).status_code == 200
    r = keyed.get("/v1/models/zz", headers={"Authorization": "Bearer k"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize("ctype", ["application/x-www-form-urlencoded", "text/plain", None])
def test_upload_routes_name_multipart_in_their_415(keyed: TestClient, ctype: str | None) -> None:
    """An upload route refuses other bodies by saying what it takes: not JSON, which it refuses
    too (a client told to send JSON would get a 400 next)."""
    headers = {"Authorization": "Bearer k", **({"Content-Type": ctype} if ctype else {})}
    for path in ("/v1/audio/transcriptions", "/v1/audio/translations"):
        r = keyed.post(path, content=b"file=x", headers=headers)
        err = r.json()["error"]
        assert r.status_code == 415 and err["code"] == "unsupported_media_type", r.text
        assert "multipart/form-data" in err["message"] and "JSON" not in err["message"]
