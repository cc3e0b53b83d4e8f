"""The OpenAPI 3 document, generated from the msgspec schemas the endpoints validate with."""

from __future__ import annotations

from typing import Any

import msgspec

from gateway import schemas as s
from gateway.anthropic import reply as ar
from gateway.anthropic import schemas as a
from gateway.anthropic.errors import is_messages_path
from gateway.responses import objects as ro
from gateway.responses import schemas as rs

# path, method, summary, request body type, response type, streams
ROUTES: list[tuple[str, str, str, type | None, type | None, bool]] = [
    ("/v1/models", "get", "List the served models", None, s.ModelList, False),
    ("/v1/models/{model}", "get", "One served model", None, s.ModelCard, False),
    ("/v1/chat/completions", "post", "Create a chat completion", s.ChatCompletionRequest,
     s.ChatCompletion, True),
    ("/v1/completions", "post", "Create a text completion", s.CompletionRequest, s.Completion,
     True),
    ("/v1/responses", "post", "Create a model response (OpenAI Responses API; stored unless "
     "`store` is false or the server runs with --no-store)", rs.CreateResponse,
     ro.ResponseObject, True),
    ("/v1/responses/{response_id}", "get", "Retrieve a stored response", None, ro.ResponseObject,
     False),
    ("/v1/responses/{response_id}", "delete", "Delete a stored response", None,
     ro.DeletedResponse, False),
    ("/v1/responses/{response_id}/input_items", "get", "List a stored response's input items",
     None, ro.ResponseItemList, False),
    ("/v1/messages", "post", "Create a message (Anthropic Messages API)", a.MessagesRequest,
     ar.AnthropicMessage, True),
    ("/v1/messages/count_tokens", "post", "Count a message's input tokens (Anthropic API)",
     a.CountTokensRequest, ar.AnthropicTokenCount, False),
    ("/v1/health", "get", "Health of the gateway and of each model worker", None, None, False),
    ("/v1/health/{alias}", "get", "Health of one alias", None, None, False),
    ("/v1/workers", "get", "Status of every worker process", None, None, False),
    ("/v1/workers/{alias}", "get", "Status of one alias's worker", None, None, False),
    ("/livez", "get", "Liveness probe (process up)", None, None, False),
    ("/readyz", "get", "Readiness probe (503 until every alias is ready, and while draining)",
     None, None, False),
    ("/metrics", "get", "Prometheus metrics", None, None, False),
    ("/admin/swap/{alias}", "post", "Hot-swap one alias's worker (needs --admin-key)", None,
     None, False),
]

QUERY = {"/v1/responses/{response_id}/input_items": [
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 100,
                                                "default": 20}},
    {"name": "order", "in": "query", "schema": {"type": "string", "enum": ["asc", "desc"],
                                                "default": "desc"}},
    {"name": "after", "in": "query", "schema": {"type": "string"},
     "description": "An item id: list the items after it (in `order`)"}]}

ERROR_STATUSES = {"400": "Invalid request", "401": "Missing or wrong API key",
                  "404": "Unknown model (or stored response)", "415": "The body is not `application/json`",
                  "503": "Model not ready or busy (see Retry-After)"}


def _ref(t: type) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{t.__name__}"}


def build_openapi(version: str) -> dict[str, Any]:
    """Return the OpenAPI document of the HTTP API."""
    types = [t for r in ROUTES for t in (r[3], r[4]) if t is not None] + [s.ErrorResponse,
                                                                          ar.AnthropicError]
    _, components = msgspec.json.schema_components(types, ref_template="#/components/schemas/{name}")
    paths: dict[str, Any] = {}
    for path, method, summary, body, resp, streams in ROUTES:
        content: dict[str, Any] = {"application/json": {"schema": _ref(resp) if resp else
                                                        {"type": "object"}}}
        if streams:
            content["text/event-stream"] = {"schema": {"type": "string"}}
        if path == "/metrics":
            content = {"text/plain": {"schema": {"type": "string"}}}
        error = ar.AnthropicError if is_messages_path(path) else s.ErrorResponse
        op: dict[str, Any] = {
            "summary": summary,
            "operationId": f"{method}_{path.strip('/').replace('/', '_')}",
            "responses": {"200": {"description": "OK", "content": content}, **{
                code: {"description": text, "content": {
                    "application/json": {"schema": _ref(error)}}}
                for code, text in ERROR_STATUSES.items() if code != "415" or method == "post"}},
        }
        if body is not None:
            op["requestBody"] = {"required": True, "content": {
                "application/json": {"schema": _ref(body)}}}
        for name in ("alias", "model", "response_id"):
            if f"{{{name}}}" in path:
                op["parameters"] = [{"name": name, "in": "path", "required": True,
                                     "schema": {"type": "string"}}, *QUERY.get(path, [])]
        paths.setdefault(path, {})[method] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "rapid-mlx", "version": version,
                 "description": "OpenAI-compatible inference server on MLX."},
        "servers": [{"url": "/"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": {
            "bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
    }
