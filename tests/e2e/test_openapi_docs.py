"""/openapi.json is valid OpenAPI 3; /docs renders with no network."""

from __future__ import annotations

import re

import httpx
from openapi_spec_validator import validate

from tests.e2e.harness import Server


def test_openapi_is_valid(server: Server) -> None:
    spec = httpx.get(f"{server.base}/openapi.json").json()
    validate(spec)
    assert "/v1/chat/completions" in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert "ChatCompletionRequest" in schemas and "temperature" in schemas[
        "ChatCompletionRequest"]["properties"]


def test_docs_render_offline(server: Server) -> None:
    r = httpx.get(f"{server.base}/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "/v1/chat/completions" in r.text and "ChatCompletionRequest" in r.text
    # nothing is loaded from elsewhere: no external scripts, styles or images
    assert not re.search(r"""(src|href)=['"]?https?://""", r.text)
