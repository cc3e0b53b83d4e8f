"""API keys: with keys configured every route needs one, except the probes and what is made public."""

from __future__ import annotations

import hashlib
import hmac

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from gateway.edge.errors import APIError
from gateway.edge.shapes import OPENAI_ONLY, ErrorShapes

PROBES = ("/livez", "/readyz")
HEALTH = ("/v1/health", "/health")
DOCS = ("/docs", "/openapi.json")  # and Swagger UI's files under /docs/static/
OPS_VIEWS = ("/v1/workers", "/v1/health", "/health", "/metrics")  # the admin key also opens them


def bearer(headers: Headers) -> str:
    """The token of an `Authorization: Bearer TOKEN` header, else of `x-api-key` (Anthropic's
    clients), or ''."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key", "").strip()


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def key_matches(given: str, keys: list[str]) -> bool:
    """Constant-time check of GIVEN against every key (fixed-length digests, no early exit)."""
    probe = _digest(given)
    hits = [hmac.compare_digest(probe, _digest(k)) for k in keys]
    return bool(given) and any(hits)


class Operators:
    """Who sees operator data (other tenants' requests, pids, paths): everyone without API keys
    (one tenant), else only the caller with the admin key (nobody when none is configured)."""

    def __init__(self, api_keys: list[str], admin_key: str | None) -> None:
        self.keyed = bool(api_keys)
        self.admin_key = admin_key or None

    def sees_all(self, headers: Headers) -> bool:
        """True when the request's caller may see operator data."""
        if not self.keyed:
            return True
        return self.admin_key is not None and key_matches(bearer(headers), [self.admin_key])


def public_paths(public_metrics: bool, public_health: bool, public_docs: bool) -> tuple[str, ...]:
    """The paths open without a key when keys are configured."""
    return (PROBES + (("/metrics",) if public_metrics else ()) + (HEALTH if public_health else ())
            + (DOCS if public_docs else ()))


class ApiKeyMiddleware:
    """Require `Authorization: Bearer KEY` (or `x-api-key: KEY`) with a configured key; open
    when none is configured.

    /admin/* is left to the admin endpoints, which check their own key.
    """

    def __init__(self, app: ASGIApp, keys: list[str], public: tuple[str, ...],
                 admin_key: str | None = None, shapes: ErrorShapes = OPENAI_ONLY) -> None:
        self.app = app
        self.shapes = shapes
        self.keys = list(keys)
        self.admin_key = admin_key or None
        self.exact = frozenset(public)
        self.prefixes = tuple(p + "/" for p in public if p in HEALTH) + (
            ("/docs/static/",) if "/docs" in public else ())

    def is_public(self, path: str) -> bool:
        """True when PATH needs no API key."""
        return path in self.exact or path.startswith(("/admin/", *self.prefixes))

    def accepts(self, path: str, given: str) -> bool:
        """True when GIVEN is an API key, or the admin key on an operator view (OPS_VIEWS)."""
        if key_matches(given, self.keys):
            return True
        ops = path in OPS_VIEWS or path.startswith(tuple(p + "/" for p in OPS_VIEWS))
        return ops and self.admin_key is not None and key_matches(given, [self.admin_key])

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.keys or self.is_public(scope.get("path", "")):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if not self.accepts(path, bearer(Headers(scope=scope))):
            err = APIError(401, "Incorrect API key provided: send `Authorization: Bearer KEY` (or "
                           "`x-api-key: KEY`) with a key given to the server by --api-key.",
                           code="invalid_api_key")
            await self.shapes.response(err, path)(scope, receive, send)
            return
        await self.app(scope, receive, send)
