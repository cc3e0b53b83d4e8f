"""Events from workers that are not an alias's current one: stale, retired, or adoptable.

A gateway that restarts while external workers keep running has never seen their Ready. Their
heartbeats reveal them; the gateway asks for their status, which carries the model facts and
protocol version, and adopts them as if they had just said Ready.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import msgspec

from gateway.state import AliasState
from protocol import messages as m

if TYPE_CHECKING:
    from gateway.hub import Hub

log = logging.getLogger("rapid_mlx.gateway")

ADOPT_QUERY = "adopt"


def on_stranger(hub: Hub, st: AliasState, identity: bytes, ev: m.Event, now: float) -> None:
    """An event from a worker that is not the alias's current one."""
    if isinstance(ev, m.Dead):
        log.info("worker %s of %s exited: %s", ev.boot_id, st.alias, ev.reason)
        if st.identity is None and ev.boot_id not in hub.retired:  # e.g. failed to load
            st.last_exit = ev.reason
    elif ev.boot_id in hub.retired:
        if isinstance(ev, m.Heartbeat) and hub.nudged.get(ev.boot_id, 0.0) < now - 5:
            hub.nudged[ev.boot_id] = now
            hub.send_to(identity, m.Shutdown(reason="this worker was declared gone"))
    elif not hub.external or st.identity is not None or hub.draining:
        return
    elif isinstance(ev, m.Heartbeat) and hub.nudged.get(ev.boot_id, 0.0) < now - 1:
        # a worker that said Ready to a previous gateway: ask for its facts to adopt it
        hub.nudged[ev.boot_id] = now
        hub.send_to(identity, m.StatusQuery(query_id=ADOPT_QUERY))
    elif isinstance(ev, m.Status) and ev.query_id == ADOPT_QUERY:
        ready = _ready_from_status(st.alias, ev)
        if ready is not None:
            log.info("adopting running worker %s of %s", ev.boot_id, st.alias)
            hub.accept_ready(st, identity, ready, now)


def _ready_from_status(alias: str, ev: m.Status) -> m.Ready | None:
    """A Ready rebuilt from a worker's status body (facts and protocol version), if it has them."""
    body = ev.body
    try:
        facts = msgspec.convert(body["facts"], m.ModelFacts)
        return m.Ready(alias=alias, boot_id=ev.boot_id, pid=int(body.get("pid", 0)),
                       protocol_version=int(body["protocol_version"]), facts=facts)
    except (KeyError, TypeError, ValueError, msgspec.ValidationError):
        log.warning("worker %s of %s cannot be adopted: its status lacks facts", ev.boot_id, alias)
        return None
