"""OpenAI-style errors: one exception type and one JSON envelope."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response


class APIError(Exception):
    """An error answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        """The error envelope as a dict."""
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}

    def response(self) -> Response:
        """The error as an HTTP response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, param: str | None = None, code: str | None = None) -> APIError:
    """A 400 invalid_request_error."""
    return APIError(400, message, param=param, code=code)


def unavailable(message: str, retry_after: int = 1, code: str = "model_not_ready") -> APIError:
    """A 503 with Retry-After."""
    return APIError(503, message, type="server_error", code=code,
                    headers={"Retry-After": str(retry_after)})


_PATH = re.compile(r"at `\$\.?([^`]*)`")


def from_validation(exc: msgspec.ValidationError | msgspec.DecodeError) -> APIError:
    """Turn a msgspec decode/validation failure into a 400 naming the offending field."""
    text = str(exc)
    if isinstance(exc, msgspec.ValidationError):
        match = _PATH.search(text)
        param = match.group(1) if match else None
        message = _PATH.sub("", text).rstrip(" -")
        where = f" (at '{param}')" if param else ""
        return bad_request(f"Invalid request: {message}{where}", param=param or None,
                           code="invalid_value")
    return bad_request(f"We could not parse the JSON body of your request: {text}",
                       code="invalid_json")


T = TypeVar("T")


async def read_body(request: Request, type_: type[T]) -> T:
    """Decode and validate a JSON request body, or raise the matching 400."""
    try:
        return msgspec.json.decode(await request.body(), type=type_)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise from_validation(exc) from exc


async def handle_api_error(request: Request, exc: Exception) -> Response:
    """Starlette exception handler for APIError."""
    assert isinstance(exc, APIError)
    return exc.response()


async def handle_http_error(request: Request, exc: Exception) -> Response:
    """Starlette handler that wraps HTTP errors (404, 405...) in the OpenAI envelope."""
    status = getattr(exc, "status_code", 500)
    detail = getattr(exc, "detail", "error")
    kind = "invalid_request_error" if status < 500 else "server_error"
    headers = dict(getattr(exc, "headers", None) or {})  # e.g. a 405's Allow
    return APIError(status, str(detail), type=kind, code=str(status), headers=headers).response()


async def handle_unexpected(request: Request, exc: Exception) -> Response:
    """Last resort: a bug becomes a clean 500 envelope, never a stack trace."""
    return APIError(500, f"internal error: {type(exc).__name__}: {exc}", type="server_error",
                    code="internal_error").response()
