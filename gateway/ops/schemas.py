"""Bodies of the operations routes (health, probes, workers, hot swap) as msgspec structs: they
document /openapi.json, and tests check the live answers against it."""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

State = Literal["starting", "ready", "draining", "stopped", "failed"]


class AliasHealth(msgspec.Struct, kw_only=True):
    """One alias in GET /v1/health."""

    state: State
    ready: bool
    model: str
    boot_id: str | None
    pid: int | None
    restarts: int
    last_exit: str | None
    in_flight: int
    replicas: int  # ready replicas (worker processes) of the alias
    redacted: bool | UnsetType = UNSET  # true for a tenant's key: no pid, last exit or path


class OneAliasHealth(AliasHealth, kw_only=True):
    """GET /v1/health/{alias} (503 with the same body while the alias does not serve)."""

    alias: str


class HealthReport(msgspec.Struct, kw_only=True):
    """GET /v1/health: ok (every alias serves), degraded (some do), unavailable (none: 503) or
    draining (503)."""

    status: Literal["ok", "degraded", "unavailable", "draining"]
    uptime_s: float
    models: dict[str, AliasHealth]


class Liveness(msgspec.Struct):
    """GET /livez: ok, or 503 failing (the gateway no longer hears its workers)."""

    status: Literal["ok", "failing"]


class Readiness(msgspec.Struct, kw_only=True):
    """GET /readyz: ready, or 503 not_ready / draining; with API keys only the status."""

    status: Literal["ready", "not_ready", "draining"]
    models: dict[str, State] | UnsetType = UNSET


class WorkerInfo(msgspec.Struct, kw_only=True):
    """A worker process: the supervisor's facts and the worker's live status (`live`: null when
    it did not answer, and then its fields fall back to the last heartbeat)."""

    alias: str
    model: str
    revision: str | None
    kind: str | None  # generate, embed, transcribe or speech (None before its first Ready)
    path: str | None
    state: State
    pid: int | None
    boot_id: str | None
    uptime_s: float | None
    restarts: int
    last_exit: str | None
    in_flight: int
    running: int
    waiting: int
    requests: list[Any] | None  # null for a tenant's key (see redacted)
    kv_format: str
    kv_pages_used: int | None
    kv_pages_free: int | None
    kv_bytes_per_token: float | None
    prefix_cache_queries: int | None
    prefix_cache_hits: int | None
    prefix_cache_hit_rate: float | None
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None
    speculative: str | None  # the drafter the worker speculates with (null: it does not)
    spec_draft_tokens: int | None  # draft tokens verified since the worker started
    spec_accepted_tokens: int | None  # ... of which kept
    spec_acceptance_rate: float | None  # accepted / drafted
    compile_decode: str | None  # --compile-decode in force: auto, on or off
    compiled_decode_functions: int | None  # compiled decode functions (shape keys) in use
    last_step_at: float | None
    last_step_age_s: float | None
    last_heartbeat_age_s: float | None
    routing: str  # cache_aware, least_loaded or round_robin
    replicas: list[ReplicaInfo]
    live: dict[str, Any] | None  # the worker's own status (null when it did not answer in time)
    redacted: bool | UnsetType = UNSET  # true for a tenant's API key with API keys configured:
    # no requests, pids, addresses, last exit or paths (the admin key sees them)


class ReplicaInfo(msgspec.Struct, kw_only=True):
    """One replica (worker process) of an alias: where it runs, its state, load and hit rates."""

    replica: str  # r0, r1... for spawned workers; the boot id's start for external ones
    boot_id: str
    pid: int | None
    address: str | None  # the worker's IP (tcp)
    state: Literal["starting", "ready", "draining"]
    model: str | None
    revision: str | None  # the weights fingerprint the worker reported
    uptime_s: float | None
    in_flight: int
    load: int
    running: int
    waiting: int
    prompt_tokens_computed: int | None
    prefix_cache_queries: int | None  # prompt tokens looked up in the worker's prefix cache
    prefix_cache_hits: int | None  # ... and found there
    prefix_cache_hit_rate: float | None  # the worker's own prefix cache
    route_prefix_hit_rate: float | None  # the router's estimate (its prefix tree)
    routed_chars: int
    last_heartbeat_age_s: float | None
    last_pulse_age_s: float | None = None  # the worker's pulse thread (between and during steps)
    step_running_s: float | None = None  # how long the step now running has run (0: none)
    live: bool


class DrainResult(msgspec.Struct, kw_only=True):
    """POST /admin/drain/{alias}/{boot_id}: the replica was drained and asked to exit."""

    alias: str
    replica: str
    boot_id: str
    state: Literal["drained"]
    ended: int  # requests still running at the timeout, ended with an error
    respawned: bool  # a spawned replica is restarted by the supervisor
    live: dict[str, Any] | None


class WorkerList(msgspec.Struct):
    """GET /v1/workers."""

    data: list[WorkerInfo]
    object: Literal["list"] = "list"


class SwapResult(msgspec.Struct, kw_only=True):
    """POST /admin/swap/{alias}: 200 when the new worker serves, 202 when it was not awaited."""

    alias: str
    model: str
    revision: str | None
    previous_boot_id: str | None
    boot_id: str | None
    state: State
    last_exit: str | None
