"""Events from peers that are not an alias's current worker: stale, adoptable, or forged.

A gateway that restarts while external workers keep running has never seen their Ready. Their
heartbeats reveal them; the gateway asks them to say Ready again (``m.ADOPT_QUERY``), and that
Ready must pass the same checks as any other (CURVE key, worker token). Nothing else from a
stranger changes any state: it is dropped and counted.
"""

from __future__ import annotations

import logging
from typing import Protocol

from gateway.plane.curve import CurveServer
from gateway.plane.peers import PeerAuth, Rejections
from gateway.plane.state import AliasState
from protocol import messages as m

log = logging.getLogger("rapid_mlx.gateway")


class AdoptingHub(Protocol):
    """What handling a stranger's event needs of the hub (gateway.plane.hub.Hub has it)."""

    @property
    def external(self) -> bool:
        """True when workers are started by someone else (--no-spawn-workers)."""
        ...
    @property
    def draining(self) -> bool:
        """True once the server stops admitting requests."""
        ...
    @property
    def curve(self) -> CurveServer | None:
        """The CURVE server when workers must prove a key, else None."""
        ...
    @property
    def peers(self) -> PeerAuth:
        """Who may speak for an alias's worker."""
        ...
    @property
    def rejections(self) -> Rejections:
        """Drops and counts frames from anyone else."""
        ...
    @property
    def retired(self) -> set[str]:
        """Boot ids declared gone; never accepted again."""
        ...
    @property
    def nudged(self) -> dict[str, float]:
        """When each unknown boot id was last asked to say Ready (or to leave)."""
        ...

    def send_to(self, identity: bytes, job: m.Job) -> bool:
        """Send JOB to one worker identity without blocking; False when it cannot be routed."""
        ...

    def worker_gone(self, alias: str, boot_id: str | None, reason: str) -> None:
        """The replica BOOT_ID left: end or re-route its in-flight requests."""
        ...

_MAX_NUDGED = 1024


def on_stranger(hub: AdoptingHub, st: AliasState, identity: bytes, user_id: str | None, ev: m.Event,
                now: float) -> None:
    """An event from a peer that is not the alias's current worker."""
    if isinstance(ev, m.Dead) and _own_loader(hub, st, identity, user_id, ev):
        log.info("worker %s of %s exited before it was ready: %s", ev.boot_id, st.alias, ev.reason)
        if hub.external:
            st.last_exit = ev.reason[:500]  # e.g. failed to load
        else:  # the boot the supervisor started: retire it (its exit code is appended later)
            hub.worker_gone(st.alias, ev.boot_id, ev.reason[:500])
        return
    if isinstance(ev, m.Heartbeat) and ev.boot_id in hub.retired:
        if _nudge(hub, ev.boot_id, now, 5.0):
            hub.send_to(identity, m.Shutdown(reason="this worker was declared gone"))
        hub.rejections.drop(identity, "retired_boot", "a Heartbeat")
        return
    if (isinstance(ev, m.Heartbeat) and hub.external and ev.boot_id not in st.replicas
            and not hub.draining and identity == hub.peers.routing_id(st.alias, ev.boot_id)):
        # a worker that said Ready to a previous gateway: ask it to say Ready again (it joins
        # the alias as a replica if its Ready passes)
        if _nudge(hub, ev.boot_id, now, 1.0):
            hub.send_to(identity, m.StatusQuery(query_id=m.ADOPT_QUERY))
        return
    hub.rejections.drop(identity, "not_owner", f"a {type(ev).__name__} for {st.alias}")


def _own_loader(hub: AdoptingHub, st: AliasState, identity: bytes, user_id: str | None,
                ev: m.Dead) -> bool:
    """True when a Dead comes from the worker being started for the alias (before its Ready)."""
    if ev.boot_id in hub.retired:
        return False
    r = st.replicas.get(ev.boot_id)
    if not hub.external:
        return (r is not None and r.identity is None and r.secret is not None
                and identity == m.routing_id(st.alias, ev.boot_id, r.secret))
    if r is not None or identity != hub.peers.routing_id(st.alias, ev.boot_id):
        return False
    return hub.curve is not None and hub.curve.allows(user_id, st.alias)


def _nudge(hub: AdoptingHub, boot_id: str, now: float, every: float) -> bool:
    """True (and remembered) when BOOT_ID was not nudged in the last EVERY seconds."""
    if hub.nudged.get(boot_id, -every) > now - every:
        return False
    if len(hub.nudged) > _MAX_NUDGED:
        hub.nudged.clear()
    hub.nudged[boot_id] = now
    return True
