"""Drain one replica: route no new work to it, let its requests finish (bounded), then stop it."""

from __future__ import annotations

import asyncio
import logging
import time

from gateway.edge.errors import APIError
from gateway.plane.hub import Hub, Replica, Terminal

log = logging.getLogger("rapid_mlx.gateway")


def find_replica(hub: Hub, alias: str, which: str) -> Replica:
    """The replica of ALIAS named WHICH (a boot id, or a name such as r1); 404 otherwise."""
    st = hub.lookup(alias)
    r = st.replicas.get(which) or next((x for x in st.replicas.values() if x.name == which), None)
    if r is None or r.identity is None:
        known = ", ".join(f"{x.name} ({x.boot_id})" for x in st.replicas.values()) or "none"
        raise APIError(404, f"'{alias}' has no connected replica '{which}'. Replicas: {known}.",
                       param="boot_id", code="replica_not_found")
    return r


async def drain_replica(hub: Hub, alias: str, r: Replica, timeout: float) -> int:
    """Stop routing to R, wait up to TIMEOUT for its requests, end the rest, ask it to exit.

    Return how many requests were ended. A spawned replica is then restarted by its supervisor
    (a rolling restart); an external one leaves the alias."""
    r.state = "draining"
    log.warning("draining replica %s of %s (boot %s): %d request(s) running", r.name, alias,
                r.boot_id, len(r.streams))
    deadline = time.monotonic() + timeout
    while r.streams and time.monotonic() < deadline and r.identity is not None:
        await asyncio.sleep(0.05)
    left = len(r.streams)
    if left:
        hub.fail_streams(r, Terminal(f"The replica serving '{alias}' was drained; this request "
                                     f"was ended after {timeout:g}s.", code="replica_drained"))
    if r.identity is not None:
        hub.send_shutdown(alias, "drained", r.boot_id)
    return left
