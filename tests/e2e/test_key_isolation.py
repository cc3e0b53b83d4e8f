"""One tenant's API key against another's: the real server with two API keys and an admin key on
stories260K. A tenant sees no other tenant's requests, no pids and no filesystem paths (only the
admin key does), and another tenant's stored response looks exactly like a missing one."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from gateway.ops.schemas import HealthReport, OneAliasHealth, WorkerInfo, WorkerList
from tests.conftest import shared_model
from tests.e2e.harness import ROOT, Server

pytestmark = pytest.mark.slow

ONE, TWO, ADMIN = ({"Authorization": f"Bearer {k}"} for k in ("key-one", "key-two", "adm-key"))
MISSING = "resp_" + "0" * 32  # the shape of a real id, never handed out


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    model = str(shared_model("stories260K"))
    srv = Server(model, "--served-model-name", "m", "--api-key", "key-one", "--api-key",
                 "key-two", "--admin-key", "adm-key", "--public-health").wait_ready()
    try:
        yield srv
    finally:
        srv.stop()


def _ask(c: httpx.Client, headers: dict[str, str], **kw: Any) -> dict[str, Any]:
    r = c.post("/responses", headers=headers, json={"model": "m", "input": "Once upon a time",
                                                    "max_output_tokens": 4, **kw})
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _decoding(c: httpx.Client) -> Iterator[str]:
    """Start key-two's long streamed request and yield its id once it is decoding (ended after)."""
    with c.stream("POST", "/responses", headers=TWO,
                  json={"model": "m", "input": "Once upon a time", "max_output_tokens": 480,
                        "ignore_eos": True, "stream": True}) as s:
        rid = None
        lines = s.iter_lines()  # kept: a dropped iterator closes the stream (a disconnect)
        for line in lines:
            ev = json.loads(line[5:]) if line.startswith("data:") else {}
            rid = ev["response"]["id"] if ev.get("type") == "response.created" else rid
            if ev.get("type") == "response.output_text.delta":
                break
        assert rid is not None
        yield rid
        lines.close()


def test_workers_show_a_tenant_no_requests_pids_or_paths(server: Server) -> None:
    model = str(shared_model("stories260K"))
    real = os.path.realpath(model)
    seen = 0
    with httpx.Client(base_url=server.url, timeout=60) as c:
        for _ in range(10):  # until the admin view (asked second) still lists the request
            for rid in _decoding(c):
                for path in ("/workers", "/workers/m"):
                    tenant = c.get(path, headers=ONE).text  # key-one asks first
                    assert rid not in tenant, tenant
                    assert model not in tenant and real not in tenant, tenant
                    view = json.loads(tenant)
                    view = view["data"][0] if "data" in view else view
                    assert view["redacted"] is True and view["requests"] is None
                    admin = c.get(path, headers=ADMIN).text
                    full = json.loads(admin)
                    full = full["data"][0] if "data" in full else full
                    assert full["path"] == real and full["pid"] > 0
                    assert view["pid"] is None and f'"pid": {full["pid"]}' not in \
                        json.dumps(view)
                    assert view["model"] == "stories260K" and view["state"] == "ready"
                    for body in (tenant, admin):  # both in the documented (OpenAPI) shape
                        msgspec.json.decode(body, type=WorkerList if path == "/workers"
                                            else WorkerInfo)
                    seen += rid in admin  # then key-one's view was taken while it ran
            if seen >= 2:
                break
    assert seen >= 2  # the admin key saw the request in flight in both views


def test_health_and_models_show_a_tenant_no_pids_or_paths(server: Server) -> None:
    model = str(shared_model("stories260K"))
    real = os.path.realpath(model)
    with httpx.Client(base_url=server.url, timeout=30) as c:
        for path in ("/health", "/health/m", "/models", "/models/m"):
            tenant = c.get(path, headers=ONE)
            assert tenant.status_code == 200 and "stories260K" in tenant.text
            assert model not in tenant.text and real not in tenant.text, (path, tenant.text)
        anonymous = c.get("/health").json()["models"]["m"]  # --public-health: no key at all
        admin = c.get("/health", headers=ADMIN).json()["models"]["m"]
        tenant = c.get("/health/m", headers=ONE).json()
        msgspec.json.decode(c.get("/health", headers=ONE).content, type=HealthReport)
        msgspec.convert(tenant, OneAliasHealth)
    assert admin["pid"] > 0 and admin["model"] == model
    for view in (anonymous, tenant):
        assert view["pid"] is None and view["model"] == "stories260K"
        assert view["state"] == "ready" and view["ready"] is True


def test_the_admin_key_opens_operator_views_only(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as c:
        assert c.get("/workers", headers=ADMIN).status_code == 200
        assert c.get("/workers/m", headers=ADMIN).status_code == 200
        assert httpx.get(server.base + "/metrics", headers=ADMIN).status_code == 200
        for method, path in (("GET", "/models"), ("POST", "/responses"),
                             ("POST", "/chat/completions"), ("GET", f"/responses/{MISSING}")):
            r = c.request(method, path, headers=ADMIN, json={} if method == "POST" else None)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        assert c.get("/workers", headers={"Authorization": "Bearer nope"}).status_code == 401


def _same(a: httpx.Response, b: httpx.Response, theirs: str) -> None:
    """A and B are the same answer but for the id they name (THEIRS in A, MISSING in B)."""
    assert a.status_code == b.status_code, (a.text, b.text)
    assert a.text.replace(theirs, MISSING) == b.text
    skip = {"date", "content-length"}
    assert {k: v for k, v in a.headers.items() if k not in skip} == \
        {k: v for k, v in b.headers.items() if k not in skip}


def test_another_tenants_response_looks_missing(server: Server) -> None:
    with httpx.Client(base_url=server.url, timeout=60) as c:
        mine = _ask(c, ONE)
        rid = mine["id"]
        item = c.get(f"/responses/{rid}/input_items", headers=ONE).json()["data"][0]["id"]
        for method, path in (("GET", "/responses/{}"), ("DELETE", "/responses/{}"),
                             ("GET", "/responses/{}/input_items"),
                             ("GET", "/responses/{}/input_items?order=asc&after=" + item),
                             ("GET", "/responses/{}/input_items?limit=1")):
            _same(c.request(method, path.format(rid), headers=TWO),
                  c.request(method, path.format(MISSING), headers=TWO), rid)
        for stream in (False, True):
            body = {"model": "m", "input": "and then", "max_output_tokens": 2, "stream": stream}
            _same(c.post("/responses", headers=TWO, json={**body, "previous_response_id": rid}),
                  c.post("/responses", headers=TWO,
                         json={**body, "previous_response_id": MISSING}), rid)
        assert c.get(f"/responses/{rid}", headers=ONE).json()["id"] == rid  # nothing deleted
        follow = _ask(c, ONE, previous_response_id=rid)  # and its owner still continues it
        assert follow["previous_response_id"] == rid


def test_a_failed_models_reason_is_not_in_a_tenants_error(tmp_path: Path) -> None:
    arch = tmp_path / "arch-model"
    shutil.copytree(ROOT / "worker" / "model" / "demo" / "weights", arch)
    config = json.loads((arch / "config.json").read_text())
    (arch / "config.json").write_text(json.dumps({**config, "model_type": "no_such_arch"}))
    demo = str(ROOT / "worker" / "model" / "demo" / "weights")  # all failed: the server exits
    srv = Server(demo, str(arch), "--served-model-name", "good", "--served-model-name", "arch",
                 "--api-key", "key-one", "--admin-key", "adm-key").wait_ready(120)
    try:
        r = httpx.post(f"{srv.url}/chat/completions", headers=ONE, timeout=10, json={
            "model": "arch", "messages": [{"role": "user", "content": "x"}]})
        message = r.json()["error"]["message"]
        assert r.status_code == 503 and "state: failed" in message, message
        assert "no_such_arch" not in message and str(tmp_path) not in message, message
        assert "/v1/health with the admin key" in message
        admin = httpx.get(f"{srv.url}/health/arch", headers=ADMIN, timeout=10).json()
        assert admin["state"] == "failed" and "no_such_arch" in admin["last_exit"], admin
    finally:
        srv.stop()
