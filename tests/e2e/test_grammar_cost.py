"""A structured-output request pays for its own constraint (worker/grammar/budget.py): the
issue's `"pattern": "^(a{300}){300}$"` schema gets a 400 naming the response format after a few
tokens, while a plain stream and an ordinary schema beside it are answered (a real server, the
demo model)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.harness import ROOT, Server

pytestmark = pytest.mark.slow

DEMO = str(ROOT / "worker" / "model" / "demo" / "weights")
HOSTILE = {"type": "object", "required": ["s"], "additionalProperties": False,
           "properties": {"s": {"type": "string", "pattern": "^(a{300}){300}$"}}}
ORDINARY = {"type": "object", "required": ["ok"], "additionalProperties": False,
            "properties": {"ok": {"type": "boolean"}}}


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    srv = Server(DEMO, "--served-model-name", "m").wait_ready()
    yield srv
    srv.stop()


def _chat(srv: Server, schema: dict[str, Any] | None, max_tokens: int) -> httpx.Response:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "Answer."}],
                            "max_tokens": max_tokens, "temperature": 0}
    if schema is not None:
        body["response_format"] = {"type": "json_schema",
                                   "json_schema": {"name": "x", "schema": schema}}
    return httpx.post(f"{srv.url}/chat/completions", json=body, timeout=300)


def test_a_costly_schema_fails_itself_and_others_are_served(server: Server) -> None:
    """Old code: the hostile request ran all 120 tokens (~0.1 s of mask work each, the whole
    batch waiting on every one) and was answered 200."""
    beside: list[httpx.Response] = []
    plain = threading.Thread(target=lambda: beside.append(_chat(server, None, 64)))
    plain.start()
    r = _chat(server, HOSTILE, 120)
    plain.join()
    assert r.status_code == 400, r.text[:300]
    err = r.json()["error"]
    assert err["param"] == "response_format" and "too costly" in err["message"]
    assert beside[0].status_code == 200, beside[0].text[:300]
    ok = _chat(server, ORDINARY, 16)  # the worker still serves structured output
    assert ok.status_code == 200, ok.text[:300]
