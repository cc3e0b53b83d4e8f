"""Health endpoints: /livez (process up), /readyz (every alias ready), /v1/health, /metrics."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.auth import Operators
from gateway.ops.redact import health_view
from gateway.plane.hub import AliasState, Hub
from gateway.plane.metrics import CONTENT_TYPE


class HealthEndpoints:
    """Probes for orchestrators and the Prometheus scrape endpoint."""

    def __init__(self, hub: Hub, terse: bool = False, operators: Operators | None = None) -> None:
        self.hub = hub
        self.terse = terse  # API keys configured: open probes say ok / not ok, nothing more
        self.operators = operators or Operators([], None)
        self.started = time.time()

    def _alias(self, st: AliasState) -> dict[str, Any]:
        return {"state": st.state, "ready": self.hub.serving(st), "model": st.model,
                "boot_id": st.boot_id, "pid": st.pid, "restarts": st.restarts,
                "last_exit": st.last_exit, "in_flight": len(st.streams),
                "replicas": len(st.ready_replicas())}

    def _shown(self, st: AliasState, full: bool) -> dict[str, Any]:
        return self._alias(st) if full else health_view(self._alias(st))

    def health_body(self, full: bool = True) -> dict[str, Any]:
        """Overall and per-alias health (FULL: with pids, last exits and model paths)."""
        models = {alias: self._shown(st, full) for alias, st in self.hub.aliases.items()}
        ready = [m["ready"] for m in models.values()]
        if self.hub.draining:
            status = "draining"
        elif ready and all(ready):
            status = "ok"
        else:
            status = "degraded" if any(ready) else "unavailable"
        return {"status": status, "uptime_s": round(time.time() - self.started, 3),
                "models": models}

    async def health(self, request: Request) -> Response:
        """200 while at least one alias serves (or all do), 503 otherwise."""
        body = self.health_body(self.operators.sees_all(request.headers))
        ok = body["status"] in ("ok", "degraded")
        return JSONResponse(body, status_code=200 if ok else 503)

    async def health_one(self, request: Request) -> Response:
        """One alias's health: 200 when it serves, 503 otherwise, 404 when unknown."""
        st = self.hub.lookup(request.path_params["alias"])
        body = {"alias": st.alias, **self._shown(st, self.operators.sees_all(request.headers))}
        return JSONResponse(body, status_code=200 if body["ready"] else 503)

    async def livez(self, request: Request) -> Response:
        """The process is up, its event loop answers and it hears its workers; constant cost."""
        if not self.hub.reader_alive():
            return JSONResponse({"status": "failing"}, status_code=503)  # why: in the log
        return JSONResponse({"status": "ok"})

    async def readyz(self, request: Request) -> Response:
        """503 until every configured alias has been ready, and while draining; 200 otherwise.

        Once started, a worker restart or swap does not flip readiness: requests for that alias
        wait for it, and other aliases keep serving (a load balancer should keep routing here).
        """
        states = {} if self.terse else {"models": {a: st.state for a, st in self.hub.aliases.items()}}
        if not self.hub.draining and self.hub.started_up:
            return JSONResponse({"status": "ready", **states})
        status = "draining" if self.hub.draining else "not_ready"
        return JSONResponse({"status": status, **states}, status_code=503,
                            headers={"Retry-After": "5" if self.hub.draining else "1"})

    async def metrics(self, request: Request) -> Response:
        """Prometheus text exposition."""
        return Response(self.hub.metrics.render(), media_type=CONTENT_TYPE)
