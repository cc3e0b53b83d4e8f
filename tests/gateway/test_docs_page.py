"""GET /docs serves Swagger UI from the packaged files, with nothing from elsewhere."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.ops.docs_page import ASSETS, swagger_ui_dir
from gateway.served import ServedModel


def _client(**kw: object) -> Iterator[TestClient]:
    # no lifespan: nothing is bound or started, only the routes and middleware answer
    app = build_app(GatewayConfig(served=[ServedModel("m", "x")], spawn_workers=False,
                                  worker_address="inproc://docs-units", **kw))  # type: ignore[arg-type]
    app.state.hub.sock.close(0)
    app.state.hub.ctx.term()
    yield TestClient(app, base_url="http://localhost")


@pytest.fixture
def open_client() -> Iterator[TestClient]:
    yield from _client()


def test_page_loads_swagger_ui_from_this_server(open_client: TestClient) -> None:
    r = open_client.get("/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle(" in r.text and 'url: "openapi.json"' in r.text
    assert "validatorUrl: null" in r.text  # else the document goes to an online validator
    assert not re.search(r"https?://", r.text)  # nothing named from elsewhere
    refs = re.findall(r"""(?:src|href)="([^"]+)\"""", r.text)
    assert refs and all(ref.startswith("docs/static/") for ref in refs)
    for ref in refs:  # each file it names is served, with its content type
        got = open_client.get("/" + ref)
        assert got.status_code == 200, ref
        assert got.headers["content-type"] == ASSETS[ref.rsplit("/", 1)[-1]]
        assert got.content == (swagger_ui_dir() / ref.rsplit("/", 1)[-1]).read_bytes()


def test_swagger_ui_is_a_version_that_reads_openapi_31() -> None:
    major = int(swagger_ui_dir().name.rsplit("-", 1)[-1].split(".")[0])
    assert major >= 5, swagger_ui_dir()  # Swagger UI 4 cannot render an OpenAPI 3.1 document


def test_only_the_listed_files_are_served(open_client: TestClient) -> None:
    for path in ("/docs/static/index.html", "/docs/static/swagger-initializer.js",
                 "/docs/static/..%2F__init__.py", "/docs/static/"):
        assert open_client.get(path).status_code == 404, path
    assert open_client.post("/docs/static/swagger-ui.css", json={}).status_code == 405


def test_keys_guard_the_docs_unless_public() -> None:
    for public in (False, True):
        client = next(_client(api_keys=["k"], public_docs=public))
        for path in ("/docs", "/openapi.json", "/docs/static/swagger-ui-bundle.js"):
            assert client.get(path).status_code == (200 if public else 401), (path, public)
            assert client.get(path, headers={"Authorization": "Bearer k"}).status_code == 200
        # public docs open no other path under /docs
        assert client.get("/docs/other").status_code in (401, 404)
