"""Admin endpoints (hot swap): disabled without --admin-key; then same-origin, with the key."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.auth import bearer, key_matches
from gateway.edge.errors import APIError, from_validation, read_raw
from gateway.edge.limits import MAX_ADMIN_BODY_BYTES
from gateway.edge.middleware import is_cross_origin
from gateway.ops.swap_targets import SwapTargets
from gateway.plane.hub import Hub
from gateway.plane.replica_drain import drain_replica, find_replica
from gateway.plane.supervisor import Supervisor


class SwapRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of POST /admin/swap/{alias}; every field is optional."""

    model: str | None = None
    revision: str | None = None
    wait: bool = True
    timeout: float | None = None
    drain_timeout: float | None = None


def check_admin(request: Request, admin_key: str | None) -> None:
    """Raise 403 (disabled, cross-origin) or 401 (wrong key) unless the caller may use admin."""
    if not admin_key:
        raise APIError(403, "Admin endpoints are disabled: start the server with --admin-key KEY "
                       "(or RAPID_MLX_ADMIN_KEY) and send `Authorization: Bearer KEY`.",
                       code="admin_disabled")
    if is_cross_origin(request.scope, request.headers):
        raise APIError(403, "Admin endpoints refuse cross-origin requests (browser pages of other "
                       "origins); call them from a command line client.",
                       code="cross_origin_forbidden")
    if not key_matches(bearer(request.headers), [admin_key]):
        raise APIError(401, "Admin endpoints need `Authorization: Bearer ADMIN_KEY`.",
                       code="invalid_admin_key")


class AdminEndpoints:
    """POST /admin/swap/{alias}: restart an alias's worker on the same or another model."""

    def __init__(self, hub: Hub, supervisor: Supervisor | None, admin_key: str | None,
                 drain_timeout: float, targets: SwapTargets) -> None:
        self.hub = hub
        self.targets = targets
        self.supervisor = supervisor
        self.admin_key = admin_key
        self.drain_timeout = drain_timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self._drains: set[asyncio.Task[int]] = set()

    async def swap(self, request: Request) -> Response:
        """Drain the alias (bounded), restart its worker, and (by default) wait until it is ready."""
        check_admin(request, self.admin_key)
        st = self.hub.lookup(request.path_params["alias"])
        raw = await read_raw(request, MAX_ADMIN_BODY_BYTES)
        try:
            req = msgspec.json.decode(raw, type=SwapRequest) if raw.strip() else SwapRequest()
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise from_validation(exc) from exc
        model = self.targets.resolve(req.model) if req.model else None
        if self.supervisor is None:
            raise APIError(409, f"Workers are managed outside the gateway (--no-spawn-workers): "
                           f"restart the worker of '{st.alias}' with its supervisor, e.g. "
                           f"`supervisorctl restart worker-{st.alias}`.", code="external_workers")
        previous = st.boot_id
        drain = self.drain_timeout if req.drain_timeout is None else req.drain_timeout
        # the swap runs as its own task: a client that hangs up does not stop it half-way
        task = asyncio.create_task(self.supervisor.swap(st.alias, model, req.revision, drain))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await asyncio.shield(task)
        deadline = time.monotonic() + (req.timeout if req.timeout is not None else 300.0)
        while req.wait and time.monotonic() < deadline:
            if st.state == "failed" or (self.hub.serving(st) and st.boot_id != previous):
                break
            await asyncio.sleep(0.1)
        body: dict[str, Any] = {"alias": st.alias, "model": st.model, "revision": st.revision,
                                "previous_boot_id": previous, "boot_id": st.boot_id,
                                "state": st.state, "last_exit": st.last_exit}
        if st.state == "failed":
            raise APIError(500, f"The new worker of '{st.alias}' failed to start "
                           f"({st.last_exit}).", type="server_error", code="swap_failed")
        done = self.hub.serving(st) and st.boot_id != previous
        return JSONResponse(body, status_code=200 if done else 202)

    async def drain(self, request: Request) -> Response:
        """POST /admin/drain/{alias}/{boot_id}: move new work off one replica, let its requests
        finish (up to the body's `timeout`, default the swap drain timeout), then stop it."""
        check_admin(request, self.admin_key)
        r = find_replica(self.hub, request.path_params["alias"], request.path_params["boot_id"])
        raw = await read_raw(request, MAX_ADMIN_BODY_BYTES)
        try:
            req = msgspec.json.decode(raw, type=DrainRequest) if raw.strip() else DrainRequest()
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise from_validation(exc) from exc
        alias = request.path_params["alias"]
        timeout = self.drain_timeout if req.timeout is None else req.timeout
        task = asyncio.create_task(drain_replica(self.hub, alias, r, timeout))
        self._drains.add(task)
        task.add_done_callback(self._drains.discard)
        ended = await asyncio.shield(task)
        return JSONResponse({"alias": alias, "replica": r.name, "boot_id": r.boot_id,
                             "state": "drained", "ended": ended,
                             "respawned": self.supervisor is not None})


class DrainRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Body of POST /admin/drain/{alias}/{boot_id}; optional."""

    timeout: float | None = None
