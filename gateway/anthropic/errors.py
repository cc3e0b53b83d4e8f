"""Anthropic's error envelope for every /v1/messages error, from the gateway's APIError (the app
registers `envelope` for PREFIX with the edge's ErrorShapes)."""

from __future__ import annotations

from typing import Any

from gateway.edge.errors import APIError

PREFIX = "/v1/messages"

_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 408: "invalid_request_error", 413: "request_too_large",
          415: "invalid_request_error", 429: "rate_limit_error", 431: "invalid_request_error",
          499: "invalid_request_error", 503: "overloaded_error", 529: "overloaded_error"}


def is_messages_path(path: str) -> bool:
    """True for the routes that answer in Anthropic's shape."""
    return path == PREFIX or path.startswith(PREFIX + "/")


def envelope(err: APIError) -> dict[str, Any]:
    """`{"type": "error", "error": {"type", "message"}}` for ERR."""
    kind = _TYPES.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
    return {"type": "error", "error": {"type": kind, "message": err.message}}

