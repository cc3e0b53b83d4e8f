"""The hub's watchdog: hung workers, external workers whose connection is gone, expired waits."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Protocol

import zmq

from gateway.plane.state import AliasState, Replica
from protocol import messages as m

log = logging.getLogger("rapid_mlx.gateway")

SILENCE_LIMIT = 10.0  # seconds an external worker may send no event at all (it beats every 0.5 s)
_PROBE = m.encode(m.Abort(request_ids=[]))  # a no-op job: can its connection still be routed?

# a worker whose intake is preparing a prompt (large images take seconds) is making progress,
# but one job preparing for this many hang timeouts (and at least PREPARE_FLOOR seconds) is
# stuck: the watchdog's clock runs again (Hub.prepare_limit)
PREPARE_LIMIT = 10
PREPARE_FLOOR = 120.0


class WatchedHub(Protocol):
    """What the watchdog needs of the hub (gateway.plane.hub.Hub has it)."""

    @property
    def aliases(self) -> dict[str, AliasState]:
        """The served aliases' states by name."""
        ...
    @property
    def external(self) -> bool:
        """True when workers are started by someone else (--no-spawn-workers)."""
        ...
    @property
    def hang_timeout(self) -> float:
        """Seconds a worker with work may make no progress before it is hung."""
        ...
    @property
    def heartbeat_timeout(self) -> float:
        """Seconds a worker's connection may leave a ping unanswered."""
        ...
    @property
    def on_hung(self) -> Callable[[str, str], None] | None:
        """Called with (alias, boot id) when a worker is declared hung."""
        ...

    def expire_parked(self, st: AliasState, now: float, message: str,
                      code: str = "model_not_ready") -> None:
        """End the parked jobs whose wait is over at NOW."""
        ...

    def send_now(self, identity: bytes, frame: bytes) -> None:
        """Queue one frame for IDENTITY now; raise zmq.ZMQError if it cannot be queued."""
        ...

    def send_to(self, identity: bytes, job: m.Job) -> bool:
        """Send JOB to one worker identity without blocking; False when it cannot be routed."""
        ...

    def worker_gone(self, alias: str, boot_id: str | None, reason: str) -> None:
        """The replica BOOT_ID left: end or re-route its in-flight requests."""
        ...


def default_prepare_limit(hang_timeout: float) -> float:
    """Seconds one prompt may prepare in a worker's intake before the watchdog counts again."""
    return max(PREPARE_LIMIT * hang_timeout, PREPARE_FLOOR)


async def watchdog(hub: WatchedHub) -> None:
    """Every 0.25 s: expire parked jobs, find lost external workers and hung ones."""
    while True:
        await asyncio.sleep(0.25)
        now = time.monotonic()
        for st in hub.aliases.values():
            gave_up = st.state in ("failed", "stopped")  # its parked jobs end now
            hub.expire_parked(st, float("inf") if gave_up else now,
                               f"The model '{st.alias}' did not become ready (state: "
                               f"{st.state}). Retry soon.")
            for r in list(st.replicas.values()):
                check_replica(hub, st, r, now)


def check_replica(hub: WatchedHub, st: AliasState, r: Replica, now: float) -> None:
    """Declare replica R gone when it is lost (external) or hung with work."""
    if r.identity is None:
        return
    if (hub.external or r.secret is None) and lost(hub, st, r, now):  # not spawned by us
        return
    if not r.streams:
        return
    why = hung(hub.hang_timeout, r, now)
    if why is None:
        return
    log.error("worker %s of %s is hung with work: %s", r.name, st.alias, why)
    hub.send_to(r.identity, m.Shutdown(reason="hung"))
    hub.worker_gone(st.alias, r.boot_id, f"hung ({why})")
    if hub.on_hung is not None:
        hub.on_hung(st.alias, r.boot_id)


# a step's deadline: the hang timeout plus its planned work at rates slower than a CPU serving a
# small model runs (a 512-token prompt chunk at 20k positions: 5 s + 10 s); a step past it is
# hung once the process's CPU time stops advancing, and past HARD_FACTOR times it in any case
SECONDS_PER_TOKEN = 0.01
SECONDS_PER_PAIR = 1e-6
HARD_FACTOR = 20


def step_deadline(timeout: float, tokens: int, pairs: int) -> float:
    """Seconds a step of TOKENS tokens and PAIRS attention pairs may run before it is suspect."""
    return timeout + tokens * SECONDS_PER_TOKEN + pairs * SECONDS_PER_PAIR


def hung(timeout: float, r: Replica, now: float) -> str | None:
    """Why replica R (which has work) is hung at NOW, or None while it makes progress.

    A worker that pulses (worker/serve/pulse.py) is hung when its pulse stops for TIMEOUT (a
    stopped or frozen process), or when a step runs past its deadline with the process's CPU
    time frozen for TIMEOUT (a deadlock), or far past it whatever the CPU does. Between steps,
    and for a worker without a pulse, the step count must advance every TIMEOUT."""
    p = r.pulse
    if p is not None:
        silent = now - r.pulse_at
        if silent > timeout:
            return f"no pulse for {silent:.1f}s: the process is stopped or frozen"
        if p.running_for:
            running = p.running_for + silent
            limit = step_deadline(timeout, p.work_tokens, p.work_pairs)
            frozen = now - r.cpu_moved_at
            if running > limit and frozen > timeout:
                return (f"step {p.step + 1} has run {running:.1f}s, past its {limit:.0f}s "
                        f"deadline, with no CPU time used for {frozen:.1f}s")
            if running > HARD_FACTOR * limit:
                return (f"step {p.step + 1} has run {running:.1f}s, {HARD_FACTOR} times its "
                        f"{limit:.0f}s deadline")
            return None
    stalled = now - max(r.last_progress, r.busy_since)
    if stalled <= timeout:
        return None
    beat = f", last pulse {now - r.pulse_at:.1f}s ago" if p is not None else ""
    return f"no progress for {stalled:.1f}s{beat}"


def lost(hub: WatchedHub, st: AliasState, r: Replica, now: float) -> bool:
    """Declare an external replica gone when its connection dropped or it fell silent."""
    assert r.identity is not None
    try:
        hub.send_now(r.identity, _PROBE)
        why = None
    except zmq.ZMQError as exc:
        why = "its connection was lost" if exc.errno == zmq.EHOSTUNREACH else None
    silent = now - r.last_seen
    if why is None and silent > max(SILENCE_LIMIT, hub.heartbeat_timeout):
        why = f"no heartbeat for {silent:.1f}s"
        hub.send_to(r.identity, m.Shutdown(reason="missed heartbeats"))
    if why is None:
        return False
    log.error("worker %s of %s is gone: %s", r.boot_id, st.alias, why)
    hub.worker_gone(st.alias, r.boot_id, why)
    return True
