"""GET /v1/workers and /v1/workers/{alias}: what each worker process is doing."""

from __future__ import annotations

import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.errors import APIError
from gateway.hub import AliasState, Hub


class WorkersEndpoints:
    """Operator view of workers: supervisor facts merged with the worker's live status."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    async def _describe(self, st: AliasState) -> dict[str, Any]:
        now = time.monotonic()
        body: dict[str, Any] = {
            "alias": st.alias, "model": st.model, "state": st.state, "pid": st.pid,
            "boot_id": st.boot_id, "restarts": st.restarts, "last_exit": st.last_exit,
            "in_flight": len(st.streams),
            "uptime_s": round(now - st.ready_at, 3) if st.ready_at and st.identity else None,
            "last_heartbeat_age_s": round(now - st.last_seen, 3) if st.last_seen else None,
        }
        live = await self.hub.worker_status(st.alias) if st.identity is not None else None
        body["live"] = live
        return body

    async def list(self, request: Request) -> Response:
        """Every alias's worker."""
        return JSONResponse({"object": "list", "data": [
            await self._describe(st) for st in self.hub.aliases.values()]})

    async def one(self, request: Request) -> Response:
        """One alias's worker, or 404."""
        alias = request.path_params["alias"]
        st = self.hub.aliases.get(alias)
        if st is None:
            raise APIError(404, f"No worker for model '{alias}'.", param="alias",
                           code="model_not_found")
        return JSONResponse(await self._describe(st))
