"""CORS: off by default; with --cors-allow-origins, preflights answered and origins echoed."""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.responses import Response

from gateway.edge.errors import APIError

METHODS = "GET, POST, OPTIONS"
EXPOSED = "Retry-After, Content-Type"
MAX_AGE = "600"


class CorsPolicy:
    """The origins whose pages may call the API from a browser (none by default, `*`: any)."""

    def __init__(self, origins: list[str]) -> None:
        self.any = "*" in origins
        self.origins = frozenset(o.rstrip("/").lower() for o in origins if o != "*")

    @property
    def enabled(self) -> bool:
        """True when some origin is allowed."""
        return self.any or bool(self.origins)

    def allows(self, origin: str) -> bool:
        """True when pages from ORIGIN may read responses."""
        return self.any or origin.rstrip("/").lower() in self.origins

    def response_headers(self, origin: str) -> dict[str, str]:
        """Headers added to an actual response for an allowed ORIGIN."""
        return {"Access-Control-Allow-Origin": "*" if self.any else origin, "Vary": "Origin",
                "Access-Control-Expose-Headers": EXPOSED}

    def preflight(self, headers: Headers) -> Response:
        """The answer to an OPTIONS preflight: 204 with the grants, or 403 saying how to enable."""
        origin = headers.get("origin", "")
        if not self.allows(origin):
            why = ("CORS is disabled on this server; start it with --cors-allow-origins ORIGIN "
                   "to let browser pages from ORIGIN call it." if not self.enabled else
                   f"The origin '{origin}' is not in --cors-allow-origins.")
            return APIError(403, why, code="cors_origin_not_allowed",
                            headers={"Allow": METHODS, "Vary": "Origin"}).response()
        grants = {**self.response_headers(origin), "Access-Control-Allow-Methods": METHODS,
                  "Access-Control-Max-Age": MAX_AGE, "Allow": METHODS}
        wanted = headers.get("access-control-request-headers")
        if wanted:  # no cookies are ever honoured, so any request header may be granted
            grants["Access-Control-Allow-Headers"] = wanted
        return Response(status_code=204, headers=grants)

    def decorate(self, origin: str | None, headers: MutableHeaders) -> None:
        """Add the CORS headers to a response when its request came from an allowed origin."""
        if origin and self.allows(origin):
            for name, value in self.response_headers(origin).items():
                if name == "Vary" and "vary" in headers:
                    headers.add_vary_header("Origin")
                else:
                    headers[name] = value
