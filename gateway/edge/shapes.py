"""The error envelope each path answers in: OpenAI's, unless the app registered another one for the
path's prefix (as Starlette registers exception handlers), and the handlers that use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.errors import APIError

Render = Callable[[APIError], dict[str, Any]]  # an error's JSON body in one protocol's shape
Handler = Callable[[Request, Exception], Awaitable[Response]]


class ErrorShapes:
    """Path prefixes and the renderer of their error bodies; OpenAI's envelope elsewhere."""

    def __init__(self) -> None:
        self._shapes: list[tuple[str, Render]] = []

    def register(self, prefix: str, render: Render) -> None:
        """Answer errors on PREFIX and the paths under it (PREFIX/...) with RENDER's body."""
        self._shapes.append((prefix, render))

    def renderer(self, path: str) -> Render | None:
        """The renderer registered for PATH's prefix, or None (OpenAI's envelope)."""
        for prefix, render in self._shapes:
            if path == prefix or path.startswith(prefix + "/"):
                return render
        return None

    def body(self, err: APIError, path: str) -> dict[str, Any]:
        """ERR's JSON body in the shape of the protocol PATH belongs to."""
        render = self.renderer(path)
        return err.body() if render is None else render(err)

    def response(self, err: APIError, path: str) -> Response:
        """ERR as an HTTP response in PATH's shape (its status and headers kept)."""
        return JSONResponse(self.body(err, path), status_code=err.status, headers=err.headers)

    def exception_handlers(self) -> dict[Any, Handler]:
        """Starlette's exception_handlers answering in these shapes."""
        return {APIError: self.handle_api_error, HTTPException: self.handle_http_error,
                Exception: self.handle_unexpected}

    async def handle_api_error(self, request: Request, exc: Exception) -> Response:
        """Starlette exception handler for APIError."""
        assert isinstance(exc, APIError)
        return self.response(exc, request.url.path)

    async def handle_http_error(self, request: Request, exc: Exception) -> Response:
        """Starlette handler that wraps HTTP errors (404, 405...) in the path's envelope."""
        status = getattr(exc, "status_code", 500)
        detail = getattr(exc, "detail", "error")
        kind = "invalid_request_error" if status < 500 else "server_error"
        headers = dict(getattr(exc, "headers", None) or {})  # e.g. a 405's Allow
        return self.response(APIError(status, str(detail), type=kind, code=str(status),
                                      headers=headers), request.url.path)

    async def handle_unexpected(self, request: Request, exc: Exception) -> Response:
        """Last resort: a bug becomes a clean 500 envelope, never a stack trace."""
        return self.response(APIError(500, f"internal error: {type(exc).__name__}: {exc}",
                                      type="server_error", code="internal_error"),
                             request.url.path)


OPENAI_ONLY = ErrorShapes()  # no registrations: the default of the edge's pieces (bare apps, tests)
