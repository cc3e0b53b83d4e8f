"""Acceptance 2: hot swap under load (8 streams on `a`, 8 on `b`), admin access rules, status."""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.served import ServedModel
from tests.e2e.harness import ROOT, Server
from tests.ops.harness import DEMO, Load, pair, stream_chat, wait_for

pytestmark = pytest.mark.slow
KEY = "admin-secret"


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder swaps may load new weights from (--swap-allow-path)."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def srv(allowed: Path) -> Iterator[Server]:
    s = pair("--admin-key", KEY, "--max-batch", "16", "--swap-allow-path", str(allowed)
             ).wait_ready()
    yield s
    s.stop()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gateway", *args], cwd=ROOT, text=True,
                          capture_output=True, timeout=180)


def test_swap_under_load(srv: Server, allowed: Path) -> None:
    new_model = str(allowed / "demo-copy")
    shutil.copytree(DEMO, new_model)  # "new weights on disk": same files, another folder
    before = srv.worker("a")
    load_a = Load(srv.url, "a", 8).start()
    load_b = Load(srv.url, "b", 8).start()
    try:
        wait_for(lambda: len(load_a.outcomes) >= 8 and len(load_b.outcomes) >= 8)
        started = time.monotonic()
        done = _cli("swap", "a", new_model, "--url", srv.base, "--admin-key", KEY)
        took = time.monotonic() - started
        assert done.returncode == 0, done.stderr
        assert "swapped" in done.stdout and new_model in done.stdout
        n_a, n_b = len(load_a.outcomes), len(load_b.outcomes)
        wait_for(lambda: len(load_a.outcomes) >= n_a + 8)  # a serves again under load
    finally:
        outs_a, outs_b = load_a.stop(), load_b.stop()
    print(f"swap took {took:.2f}s; a: {len(outs_a)} streams, {len(load_a.errors)} errors; "
          f"b: {len(outs_b)} streams, {len(load_b.errors)} errors")
    assert not load_b.errors, load_b.errors[:3]
    assert len(outs_b) > n_b  # b kept serving during the swap
    # running requests on a drained and arrivals waited: a saw no error either
    assert not load_a.errors, load_a.errors[:3]
    after = srv.worker("a")
    assert after["boot_id"] != before["boot_id"] and after["pid"] != before["pid"]
    assert after["model"] == new_model and after["path"] == new_model
    assert after["restarts"] == before["restarts"] + 1 and "swapped" in after["last_exit"]
    models = {m["id"]: m for m in httpx.get(f"{srv.url}/models").json()["data"]}
    assert models["a"]["model"] == new_model and models["a"]["boot_id"] == after["boot_id"]
    assert models["b"]["model"] == DEMO
    table = _cli("status", "--url", srv.base)
    assert table.returncode == 0 and new_model in table.stdout and "ALIAS" in table.stdout
    print(table.stdout)


def test_swap_ends_long_requests_after_drain_timeout(srv: Server) -> None:
    first = threading.Event()
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(o=stream_chat(srv.url, "a", 1500, first=first)))
    t.start()
    assert first.wait(30)
    started = time.monotonic()
    r = httpx.post(f"{srv.base}/admin/swap/a", json={"drain_timeout": 1},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=120)
    assert r.status_code == 200 and r.json()["state"] == "ready", r.text
    t.join(30)
    out = result["o"]
    assert out.error and out.error["code"] == "model_swapped", out
    print(f"long request on a ended {out.ended_at - started:.2f}s after the swap began")
    assert out.ended_at - started < 5.0
    assert stream_chat(srv.url, "a", 4).ok


def test_admin_needs_the_key(srv: Server) -> None:
    r = httpx.post(f"{srv.base}/admin/swap/b", json={}, timeout=10)
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_admin_key"
    r = httpx.post(f"{srv.base}/admin/swap/b", json={}, headers={"Authorization": "Bearer nope"},
                   timeout=10)
    assert r.status_code == 401
    bad = _cli("swap", "b", "--url", srv.base)
    assert bad.returncode != 0 and "401" in bad.stderr
    r = httpx.post(f"{srv.base}/admin/swap/zzz", json={},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=10)
    assert r.status_code == 404


def test_cli_swap_to_a_refused_target_leaves_the_alias_serving(srv: Server) -> None:
    before = srv.worker("b")
    bad = _cli("swap", "b", "/etc", "--url", srv.base, "--admin-key", KEY)
    assert bad.returncode != 0 and "400" in bad.stderr and "not allowed or not found" in bad.stderr
    after = srv.worker("b")
    assert after["state"] == "ready" and after["boot_id"] == before["boot_id"]
    assert stream_chat(srv.url, "b", 4).ok


def _unstarted_app(admin_key: str | None) -> TestClient:
    # no lifespan: nothing is bound or started, only the routes answer
    app = build_app(GatewayConfig(served=[ServedModel("m", "x")], spawn_workers=False,
                                  worker_address="inproc://admin-test", admin_key=admin_key))
    hub = app.state.hub
    hub.sock.close(0)  # never started: release the socket so the context can end
    hub.ctx.term()
    return TestClient(app, base_url="http://localhost")


def test_admin_rules_without_workers_to_swap() -> None:
    r = _unstarted_app(None).post("/admin/swap/m", json={})  # even from loopback
    assert r.status_code == 403 and r.json()["error"]["code"] == "admin_disabled"
    client = _unstarted_app(KEY)
    auth = {"Authorization": f"Bearer {KEY}"}
    r = client.post("/admin/swap/m", content=b"{}", headers={**auth, "Content-Type": "text/plain"})
    assert r.status_code == 415
    r = client.post("/admin/swap/m", json={}, headers={**auth, "Origin": "http://evil.example"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "cross_origin_forbidden"
    r = client.post("/admin/swap/m", json={"model": "/etc"}, headers=auth)
    assert r.status_code == 400 and r.json()["error"]["code"] == "swap_target_not_allowed"
    r = client.post("/admin/swap/m", json={}, headers=auth)
    assert r.status_code == 409 and r.json()["error"]["code"] == "external_workers"
