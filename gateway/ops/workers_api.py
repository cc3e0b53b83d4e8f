"""GET /v1/workers and /v1/workers/{alias}: what each worker process is doing."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gateway.edge.auth import Operators
from gateway.ops.redact import worker_view
from gateway.plane.hub import AliasState, Hub, Replica


def _rate(hits: Any, queries: Any) -> float | None:
    return round(hits / queries, 4) if isinstance(queries, int | float) and queries else None


class WorkersEndpoints:
    """Operator view of workers: supervisor facts merged with the worker's live status; a
    tenant's key (not the admin key) gets it redacted (ops/redact.py)."""

    def __init__(self, hub: Hub, operators: Operators | None = None) -> None:
        self.hub = hub
        self.operators = operators or Operators([], None)

    async def describe(self, st: AliasState) -> dict[str, Any]:
        """Everything known about ST's workers: the primary replica's fields (one worker: the
        worker's) with counts summed over replicas, and a `replicas` list; live fields are None
        when a worker does not answer."""
        now = time.monotonic()
        replicas = sorted(st.replicas.values(), key=lambda r: r.name)
        asked = [r.boot_id for r in replicas if r.identity is not None]  # before any await
        lives = await asyncio.gather(*(self.hub.worker_status(st.alias, boot_id=b)
                                       for b in asked))
        by_boot = dict(zip(asked, lives, strict=True))
        primary = st.primary
        live = by_boot.get(primary.boot_id) if primary is not None else None
        lv = live or {}
        hb = st.heartbeat if st.identity is not None else None
        prefix = self.hub.metrics.prefix.get(st.alias)
        queries = lv.get("prefix_cache_queries", prefix.queries if prefix else None)
        hits = lv.get("prefix_cache_hits", prefix.hits if prefix else None)
        used, free = lv.get("kv_pages_used"), lv.get("kv_pages_free")
        if used is None and hb is not None and hb.kv_total:
            used, free = hb.kv_used, hb.kv_total - hb.kv_used
        last_step_at = lv.get("last_step_at") or None
        rows = [_replica(r, by_boot.get(r.boot_id), now) for r in replicas]
        many = len(rows) > 1
        return {
            "alias": st.alias, "model": st.model, "revision": st.revision or lv.get("revision"),
            "kind": st.facts.kind if st.facts else lv.get("kind"),
            "path": lv.get("path"), "state": st.state, "pid": st.pid, "boot_id": st.boot_id,
            "uptime_s": round(now - st.ready_at, 3) if st.ready_at and st.identity else None,
            "restarts": st.restarts, "last_exit": st.last_exit,
            "in_flight": len(st.streams),
            "running": sum(x["running"] for x in rows) if many
            else lv.get("running", hb.running if hb else 0),
            "waiting": sum(x["waiting"] for x in rows) if many
            else lv.get("waiting", hb.waiting if hb else 0),
            "requests": lv.get("requests", []),
            "kv_format": lv.get("kv_format", "none"),
            "kv_pages_used": used, "kv_pages_free": free,
            "kv_bytes_per_token": lv.get("kv_bytes_per_token"),
            "prefix_cache_queries": queries, "prefix_cache_hits": hits,
            "prefix_cache_hit_rate": _rate(hits, queries),
            "prefill_tokens_per_s": lv.get("prefill_tokens_per_s"),
            "decode_tokens_per_s": lv.get("decode_tokens_per_s"),
            "speculative": lv.get("speculative", (st.facts.speculative or None) if st.facts else None),
            "spec_draft_tokens": lv.get("spec_draft_tokens"),
            "spec_accepted_tokens": lv.get("spec_accepted_tokens"),
            "spec_acceptance_rate": lv.get("spec_acceptance_rate"),
            "compile_decode": lv.get("compile_decode"),
            "compiled_decode_functions": lv.get("compiled_decode_functions"),
            "last_step_at": last_step_at,
            "last_step_age_s": round(time.time() - last_step_at, 3) if last_step_at else None,
            "last_heartbeat_age_s": round(now - st.last_seen, 3) if st.last_seen else None,
            "routing": self.hub.router.config.policy,
            "replicas": rows,
            "live": live,
        }

    async def list(self, request: Request) -> Response:
        """Every alias's worker."""
        data = await asyncio.gather(*(self.describe(st) for st in self.hub.aliases.values()))
        full = self.operators.sees_all(request.headers)
        return JSONResponse({"object": "list",
                             "data": [d if full else worker_view(d) for d in data]})

    async def one(self, request: Request) -> Response:
        """One alias's worker, or 404."""
        st = self.hub.lookup(request.path_params["alias"])
        view = await self.describe(st)
        return JSONResponse(view if self.operators.sees_all(request.headers)
                            else worker_view(view))


def _replica(r: Replica, live: dict[str, Any] | None, now: float) -> dict[str, Any]:
    """One replica: where it runs, its state and load, and its prefix hit rates."""
    lv = live or {}
    hb = r.heartbeat if r.identity is not None else None
    return {
        "replica": r.name, "boot_id": r.boot_id, "pid": r.pid, "address": r.address or None,
        "state": r.state, "model": r.facts.model if r.facts else None,
        "revision": r.facts.revision or None if r.facts else None,
        "uptime_s": round(now - r.ready_at, 3) if r.ready_at and r.identity else None,
        "in_flight": len(r.streams), "load": r.load,
        "running": lv.get("running", hb.running if hb else 0),
        "waiting": lv.get("waiting", hb.waiting if hb else 0),
        "prompt_tokens_computed": lv.get("prompt_tokens_computed"),
        "prefix_cache_queries": lv.get("prefix_cache_queries"),
        "prefix_cache_hits": lv.get("prefix_cache_hits"),
        "prefix_cache_hit_rate": _rate(lv.get("prefix_cache_hits"),
                                       lv.get("prefix_cache_queries")),
        "route_prefix_hit_rate": r.hit_rate,
        "routed_chars": r.routed_chars,
        "last_heartbeat_age_s": round(now - r.last_seen, 3) if r.last_seen else None,
        # the worker's pulse (worker/serve/pulse.py): its age, and how long the step it reported
        # running has run (0: between steps); None before the first pulse
        "last_pulse_age_s": round(now - r.pulse_at, 3) if r.pulse is not None else None,
        "step_running_s": _running(r, now),
        "live": live is not None,
    }


def _running(r: Replica, now: float) -> float | None:
    """Seconds the step R's last pulse reported running has run by NOW (0.0 between steps)."""
    p = r.pulse
    if p is None:
        return None
    return round(p.running_for + now - r.pulse_at, 3) if p.running_for else 0.0
