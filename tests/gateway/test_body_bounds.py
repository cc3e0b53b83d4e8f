"""Small bounds at the door, through the real app (no worker: each is refused before one is
needed): compressed bodies (415), `user` / `metadata.user_id` lengths, best_of against n."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from gateway.app import build_app
from gateway.config import GatewayConfig
from gateway.openai.schemas import USER_CHARS
from gateway.served import ServedModel

MSG = [{"role": "user", "content": "hi"}]
BODIES: dict[str, dict[str, Any]] = {
    "/v1/chat/completions": {"model": "m", "messages": MSG},
    "/v1/completions": {"model": "m", "prompt": "hi"},
    "/v1/responses": {"model": "m", "input": "hi"},
    "/v1/messages": {"model": "m", "max_tokens": 4, "messages": MSG},
}


@pytest.fixture(scope="module")
def app() -> Iterator[TestClient]:
    built = build_app(GatewayConfig(served=[ServedModel("m", "x")], spawn_workers=False,
                                    worker_address="inproc://body-bounds"))
    built.state.hub.sock.close(0)
    built.state.hub.ctx.term()
    yield TestClient(built, base_url="http://localhost")


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br", "GZIP", "x-custom\x7f"])
@pytest.mark.parametrize("path", list(BODIES))
def test_compressed_bodies_are_415(app: TestClient, path: str, encoding: str) -> None:
    r = app.post(path, content=gzip.compress(json.dumps(BODIES[path]).encode()),
                 headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert r.status_code == 415, r.text
    if path == "/v1/messages":  # Anthropic's error shape
        body = r.json()
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        error = r.json()["error"]
        assert error["code"] == "unsupported_content_encoding"
        message = error["message"]
    assert "Content-Encoding" in message and "\x7f" not in message


def test_identity_encoding_is_read(app: TestClient) -> None:
    """`identity` is no compression: the body goes on (to the missing worker, not a 415)."""
    r = app.post("/v1/completions", json={**BODIES["/v1/completions"], "suffix": "x"},
                 headers={"Content-Encoding": "identity"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"


@pytest.mark.parametrize("path,field", [("/v1/chat/completions", "user"),
                                        ("/v1/completions", "user"),
                                        ("/v1/responses", "user"),
                                        ("/v1/messages", "metadata.user_id")])
def test_user_ids_are_bounded(app: TestClient, path: str, field: str) -> None:
    long = "u" * (USER_CHARS + 1)
    extra: dict[str, Any] = {"metadata": {"user_id": long}} if "." in field else {"user": long}
    r = app.post(path, json={**BODIES[path], **extra})
    assert r.status_code == 400, r.text
    body = r.json()
    message = body["error"]["message"]
    assert field in message and str(USER_CHARS) in message
    if path != "/v1/messages":
        assert body["error"]["param"] == field


@pytest.mark.parametrize("best_of,n,said", [(1, 2, "best_of must be greater than or equal to n"),
                                            (3, 2, "not supported")])
def test_best_of_must_equal_n(app: TestClient, best_of: int, n: int, said: str) -> None:
    r = app.post("/v1/completions", json={**BODIES["/v1/completions"], "best_of": best_of,
                                          "n": n})
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == "best_of" and said in error["message"]


def test_best_of_equal_to_n_passes_the_door(app: TestClient) -> None:
    r = app.post("/v1/completions", json={**BODIES["/v1/completions"], "best_of": 2, "n": 2,
                                          "suffix": "x"})  # refused later, for the suffix
    assert r.status_code == 400 and r.json()["error"]["param"] == "suffix"
