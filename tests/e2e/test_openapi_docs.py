"""/openapi.json is valid OpenAPI 3 and true to the wire: the live bodies, SSE events and errors of
the generation routes conform to it strictly (no undocumented field); /docs is Swagger UI served
from this server (its browser test is test_docs_browser.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx
import pytest
from openapi_spec_validator import validate

from tests.e2e.harness import Server
from tests.spec_check import SpecCheck

pytestmark = pytest.mark.slow

SSE = "text/event-stream"
HI = [{"role": "user", "content": "Hello!"}]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
WEATHER = {"name": "get_weather", "description": "Get the current weather in a city"}
THINK = {"chat_template_kwargs": {"enable_thinking": True}}
NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}
# route -> bodies covering its kinds of events: plain text, reasoning, tool calls
CASES: dict[str, list[dict[str, Any]]] = {
    "/v1/chat/completions": [
        {"messages": HI, "max_tokens": 12, "logprobs": True, "top_logprobs": 2,
         "stream_options": {"include_usage": True}, **NO_THINK},
        {"messages": HI, "max_tokens": 60, **THINK},
        {"messages": ASK, "max_tokens": 80, "temperature": 0, **NO_THINK,
         "tools": [{"type": "function", "function": {**WEATHER, "parameters": PARAMS}}]}],
    "/v1/completions": [
        {"prompt": "Once upon a time", "max_tokens": 8, "logprobs": 2, "n": 2,
         "stream_options": {"include_usage": True}}],
    "/v1/responses": [
        {"input": "Hello!", "max_output_tokens": 6, "reasoning": {"effort": "none"}},
        {"input": "Hello!", "max_output_tokens": 60, "reasoning": {"effort": "high"}, **THINK},
        {"input": ASK, "max_output_tokens": 80, "temperature": 0, "reasoning": {"effort": "none"},
         "tools": [{"type": "function", **WEATHER, "parameters": PARAMS}]}],
    "/v1/messages": [
        {"messages": HI, "max_tokens": 12, "thinking": {"type": "disabled"}},
        {"messages": HI, "max_tokens": 60, "thinking": {"type": "enabled", "budget_tokens": 1024}},
        {"messages": ASK, "max_tokens": 80, "temperature": 0, "thinking": {"type": "disabled"},
         "tools": [{**WEATHER, "input_schema": PARAMS}]}],
}


@pytest.fixture(scope="module")
def check(server: Server) -> SpecCheck:
    return SpecCheck(httpx.get(f"{server.base}/openapi.json").json())


def _events(server: Server, path: str, body: dict[str, Any]) -> list[tuple[str | None, Any]]:
    """(event line or None, data) of every event of a streamed request, read raw."""
    out: list[tuple[str | None, Any]] = []
    name = None
    with httpx.stream("POST", server.base + path, timeout=120,
                      json={"model": "default", "stream": True, **body}) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith(SSE)
        for line in r.iter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                out.append((name, line[6:] if line == "data: [DONE]" else json.loads(line[6:])))
                name = None
    return out


def test_openapi_is_valid(server: Server) -> None:
    spec = httpx.get(f"{server.base}/openapi.json").json()
    validate(spec)
    assert "/v1/chat/completions" in spec["paths"]
    schemas = spec["components"]["schemas"]
    assert "ChatCompletionRequest" in schemas and "temperature" in schemas[
        "ChatCompletionRequest"]["properties"]


@pytest.mark.parametrize("path", list(CASES))
def test_streams_and_bodies_conform(server: Server, check: SpecCheck, path: str) -> None:
    kinds: set[str] = set()
    for body in CASES[path]:
        events = _events(server, path, body)
        named = path in ("/v1/responses", "/v1/messages")
        if not named:
            assert events[-1] == (None, "[DONE]")
            events = events[:-1]
        for name, data in events:
            assert (name == data["type"]) if named else name is None
            check.check(path, "post", 200, data, SSE)
            kinds.add(data.get("type") or data["object"])
            for choice in data.get("choices", []):
                kinds.update(f"delta.{k}" for k in choice.get("delta", {}))
        whole = httpx.post(server.base + path, timeout=120, json={"model": "default", **body})
        assert whole.status_code == 200, whole.text
        check.check(path, "post", 200, whole.json())
    # the cases did produce reasoning and tool-call events, not only text
    want = {"/v1/chat/completions": {"delta.reasoning_content", "delta.tool_calls"},
            "/v1/completions": {"text_completion"},
            "/v1/responses": {"response.reasoning_text.delta",
                              "response.function_call_arguments.done", "response.incomplete"},
            "/v1/messages": {"content_block_start", "message_delta"}}[path]
    assert want <= kinds, kinds


@pytest.mark.parametrize("path", list(CASES) + ["/v1/messages/count_tokens"])
def test_errors_conform(server: Server, check: SpecCheck, path: str) -> None:
    cases = [(b"{", "application/json", 400), (b'{"model": 3}', "application/json", 400),
             (b'{"model": "no-such-model", "messages": [{"role": "user", "content": "x"}], '
              b'"prompt": "x", "input": "x", "max_tokens": 4}', "application/json", 404),
             (b"{}", "text/plain", 415)]
    for raw, ctype, status in cases:
        r = httpx.post(server.base + path, content=raw, headers={"content-type": ctype})
        assert r.status_code == status, (raw, r.text)
        check.check(path, "post", status, r.json())
    models = httpx.get(f"{server.base}/v1/models/no-such-model")
    assert models.status_code == 404
    check.check("/v1/models/{model}", "get", 404, models.json())


def test_operations_answers_conform(server: Server, check: SpecCheck) -> None:
    for path, url in [("/v1/models", "/v1/models"), ("/v1/models/{model}", "/v1/models/default"),
                      ("/v1/health", "/v1/health"), ("/v1/health/{alias}", "/v1/health/default"),
                      ("/v1/workers", "/v1/workers"), ("/v1/workers/{alias}", "/v1/workers/default"),
                      ("/livez", "/livez"), ("/readyz", "/readyz"),
                      ("/v1/health/{alias}", "/v1/health/nope"),
                      ("/v1/workers/{alias}", "/v1/workers/nope")]:
        r = httpx.get(server.base + url, timeout=30)
        assert r.status_code in (200, 404), (url, r.text)
        check.check(path, "get", r.status_code, r.json())
    swap = httpx.post(f"{server.base}/admin/swap/default", json={})  # no --admin-key: disabled
    assert swap.status_code == 403
    check.check("/admin/swap/{alias}", "post", 403, swap.json())


def test_docs_serve_swagger_ui_offline(server: Server) -> None:
    r = httpx.get(f"{server.base}/docs")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "SwaggerUIBundle(" in r.text and '"openapi.json"' in r.text
    # nothing is loaded from elsewhere: every script, style and icon is a file of this server
    assert not re.search(r"https?://", r.text)
    for ref in re.findall(r"""(?:src|href)="([^"]+)\"""", r.text):
        got = httpx.get(f"{server.base}/{ref}")
        assert got.status_code == 200 and got.content, ref
