"""GET /v1/models, /v1/health, /openapi.json and /docs."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from gateway.docs_page import render_docs
from gateway.hub import Hub
from gateway.openapi import build_openapi
from gateway.served import ServedModel


class InfoEndpoints:
    """Read-only endpoints about what is served and how it is doing."""

    def __init__(self, hub: Hub, served: dict[str, ServedModel], version: str) -> None:
        self.hub = hub
        self.served = served
        self.spec = build_openapi(version)
        self.docs_html = render_docs(self.spec)
        self.started = time.time()

    async def models(self, request: Request) -> Response:
        """The OpenAI model list, with our parser and capability fields."""
        data = []
        for alias, s in self.served.items():
            st = self.hub.aliases[alias]
            ctx = st.facts.context_length if st.facts else s.context_length
            data.append({"id": alias, "object": "model", "created": s.created,
                         "owned_by": "rapid-mlx", "tool_call_parser": s.tool_call_parser,
                         "reasoning_parser": s.reasoning_parser, "is_hybrid": s.is_hybrid,
                         "is_moe": s.is_moe, "supports_spec_decode": s.supports_spec_decode,
                         "context_length": ctx, "state": st.state, "model": s.model})
        return JSONResponse({"object": "list", "data": data})

    def health_body(self) -> dict[str, Any]:
        """Overall and per-alias health."""
        models = {}
        for alias, st in self.hub.aliases.items():
            models[alias] = {"state": st.state, "boot_id": st.boot_id, "pid": st.pid,
                             "restarts": st.restarts, "last_exit": st.last_exit,
                             "in_flight": len(st.streams)}
        states = [m["state"] for m in models.values()]
        status = "ok" if states and all(s == "ready" for s in states) else (
            "degraded" if "ready" in states else "unavailable")
        return {"status": status, "uptime_s": round(time.time() - self.started, 3),
                "models": models}

    async def health(self, request: Request) -> Response:
        """200 while at least one alias serves, 503 otherwise."""
        body = self.health_body()
        return JSONResponse(body, status_code=200 if body["status"] != "unavailable" else 503)

    async def openapi(self, request: Request) -> Response:
        """The OpenAPI document."""
        return JSONResponse(self.spec)

    async def docs(self, request: Request) -> Response:
        """Human-readable API reference."""
        return HTMLResponse(self.docs_html)
