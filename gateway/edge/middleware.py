"""The HTTP edge: Host allow-list, CORS, cross-site refusals and JSON-only bodies, before routing."""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.edge.cors import CorsPolicy
from gateway.edge.errors import APIError
from gateway.edge.hosts import HostPolicy
from gateway.edge.http_protocol import MAX_HEADER_BYTES
from gateway.edge.shapes import OPENAI_ONLY, ErrorShapes

SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def own_origin(scope: Scope, headers: Headers) -> str:
    """The origin a page served by this server would have: scheme://Host."""
    return f"{scope.get('scheme', 'http')}://{headers.get('host', '').lower()}"


def is_cross_origin(scope: Scope, headers: Headers) -> bool:
    """True when a browser says the request comes from a page of another origin (or site)."""
    origin = headers.get("origin")
    if origin is not None and origin.rstrip("/").lower() != own_origin(scope, headers):
        return True
    return headers.get("sec-fetch-site", "none").lower() in ("cross-site", "same-site")


def is_json(content_type: str | None) -> bool:
    """True for `application/json`, with or without parameters such as charset."""
    return (content_type or "").split(";", 1)[0].strip().lower() == "application/json"


MULTIPART_PATHS = frozenset({"/v1/audio/transcriptions", "/v1/audio/translations"})


def takes_multipart(path: str, content_type: str | None) -> bool:
    """True for a multipart/form-data body sent to an upload endpoint (every other POST is JSON)."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    return kind == "multipart/form-data" and path in MULTIPART_PATHS


def shown_encoding(encoding: str) -> str:
    """A Content-Encoding value as an error message may quote it: short, printable ASCII."""
    clean = "".join(c if " " <= c <= "~" else "?" for c in encoding[:40])
    return clean + ("..." if len(encoding) > 40 else "")


def _unsupported(path: str, got: str) -> APIError:
    """The 415 for a body of type GOT at PATH, naming what PATH takes."""
    if path in MULTIPART_PATHS:
        return APIError(415, "Audio uploads must be multipart/form-data: send `Content-Type: "
                        "multipart/form-data` with the audio in the form field 'file' "
                        f"(got '{got}').", param="file", code="unsupported_media_type")
    return APIError(415, f"Request bodies must be JSON: send `Content-Type: application/json` "
                    f"(got '{got}').", code="unsupported_media_type")


class EdgeMiddleware:
    """Refuse what no route should see: unknown Hosts (400), cross-site writes (403), compressed
    bodies and non-JSON ones (415, but multipart uploads to the audio endpoints); answer CORS preflights and add CORS headers for allowed origins."""

    def __init__(self, app: ASGIApp, hosts: HostPolicy, cors: CorsPolicy,
                 shapes: ErrorShapes = OPENAI_ONLY) -> None:
        self.app = app
        self.shapes = shapes
        self.hosts = hosts
        self.cors = cors

    def _refusal(self, scope: Scope, headers: Headers) -> APIError | None:
        if sum(len(k) + len(v) for k, v in scope["headers"]) > MAX_HEADER_BYTES:
            return APIError(431, f"The request headers must fit in {MAX_HEADER_BYTES} bytes.",
                            code="headers_too_large")
        if not self.hosts.allows(headers.get("host")):
            return APIError(400, "This server does not answer for that Host header; start it with "
                            "--allowed-hosts NAME to add a name it is reached by.",
                            code="host_not_allowed")
        method = scope["method"]
        if method in SAFE_METHODS:
            return None
        origin = headers.get("origin")
        if is_cross_origin(scope, headers) and not (origin and self.cors.allows(origin)):
            return APIError(403, "Cross-origin requests are refused; start the server with "
                            "--cors-allow-origins ORIGIN to let browser pages from ORIGIN call it.",
                            code="cross_origin_forbidden")
        encoding = headers.get("content-encoding", "identity").strip().lower()
        if encoding not in ("identity", ""):  # read as is, a gzip body would be garbage JSON
            return APIError(415, f"Request bodies must not be compressed: send the body without "
                            f"`Content-Encoding` (got '{shown_encoding(encoding)}').",
                            code="unsupported_content_encoding")
        if method == "POST" and not is_json(headers.get("content-type")) \
                and not takes_multipart(scope.get("path", ""), headers.get("content-type")):
            return _unsupported(scope.get("path", ""), headers.get("content-type") or "none")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        refusal = self._refusal(scope, headers)
        origin = headers.get("origin")
        if refusal is not None:
            response = self.shapes.response(refusal, scope.get("path", ""))
            self.cors.decorate(origin, response.headers)
            await response(scope, receive, send)
            return
        if (scope["method"] == "OPTIONS" and origin is not None
                and "access-control-request-method" in headers):
            await self.cors.preflight(headers)(scope, receive, send)
            return
        if not origin or not self.cors.allows(origin):
            await self.app(scope, receive, send)
            return

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.cors.decorate(origin, MutableHeaders(scope=message))
            await send(message)

        await self.app(scope, receive, send_with_cors)
