"""Who may speak for an alias's worker, and what happens to frames from anyone else.

A spawned worker proves itself with the per-boot secret its supervisor put in its environment,
from the routing identity ``alias:boot_id`` the supervisor chose. An external worker proves
itself with an allowed CURVE key (the frame's ZAP User-Id), the operator's worker token, or both
when both are configured; with neither, only `--insecure-worker-transport` lets it in. Every
later event is bound to the identity (and key) whose Ready was accepted; a Pulse to that
identity's pulse id (``m.pulse_id``: the worker's pulse thread has a socket of its own).
"""

from __future__ import annotations

import hmac
import logging
import time

from gateway.plane.curve import CurveServer
from gateway.plane.metrics import Metrics
from gateway.plane.state import AliasState, Replica
from protocol import messages as m

log = logging.getLogger("rapid_mlx.gateway")

LOG_INTERVAL = 10.0  # seconds between two log lines about the same peer
GLOBAL_LINES = 20  # log lines about dropped frames per interval, all peers together


class PeerAuth:
    """Decides whether a Ready may make its sender an alias's worker."""

    def __init__(self, *, external: bool, curve: CurveServer | None, token: str | None,
                 insecure: bool) -> None:
        self.external = external
        self.curve = curve
        self.token = token
        self.insecure = insecure

    def refuse_ready(self, st: AliasState, identity: bytes, user_id: str | None,
                     ev: m.Ready) -> str | None:
        """Why this Ready is refused (a metric reason), or None to accept it."""
        if ev.alias != st.alias:
            return "alias_mismatch"
        r = st.replicas.get(ev.boot_id)
        if not self.external and (r is not None or not self.joinable):
            if (r is None or r.secret is None
                    or identity != m.routing_id(st.alias, ev.boot_id, r.secret)):
                return "unexpected_ready"
            return None if _same(ev.secret, r.secret) else "bad_secret"
        # an external worker: with --no-spawn-workers, or joining spawned ones as a replica
        if identity != self.routing_id(st.alias, ev.boot_id):
            return "identity_mismatch"
        if self.curve is not None and not self.curve.allows(user_id, st.alias):
            return "key_not_allowed"
        if self.token is not None and not _same(ev.secret, self.token):
            return "bad_token"
        if self.curve is None and self.token is None and not self.insecure:
            return "unauthenticated"
        return None

    @property
    def joinable(self) -> bool:
        """True when workers this gateway did not spawn may join (CURVE keys or a token)."""
        return self.curve is not None or self.token is not None

    def routing_id(self, alias: str, boot_id: str) -> bytes:
        """The routing id an external worker of ALIAS with BOOT_ID must use."""
        return m.routing_id(alias, boot_id, self.token or "")

    def owns(self, r: Replica, identity: bytes, user_id: str | None, pulse: bool = False) -> bool:
        """True when IDENTITY (with key USER_ID) is the accepted worker of replica R: its loop's
        socket, or with PULSE its pulse thread's (``m.pulse_id`` of the loop's), which may send
        Pulse events and nothing else."""
        if r.identity is None or not (r.user_id is None or user_id == r.user_id):
            return False
        return identity == (m.pulse_id(r.identity) if pulse else r.identity)


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode(), expected.encode())


class Rejections:
    """Counts dropped frames per reason; logs at most one line per peer per interval, and at
    most GLOBAL_LINES lines per interval whatever the number of peers."""

    def __init__(self, metrics: Metrics, interval: float = LOG_INTERVAL,
                 global_lines: int = GLOBAL_LINES) -> None:
        self.metrics = metrics
        self.interval = interval
        self.global_lines = global_lines
        self._logged: dict[bytes, float] = {}
        self._window = (-interval, 0, 0)  # (start, lines logged, lines held back) of this interval

    def drop(self, identity: bytes, reason: str, what: str = "") -> None:
        """Drop one frame from IDENTITY for REASON (WHAT: a short description for the log)."""
        self.metrics.dropped(reason)
        now = time.monotonic()
        if now - self._logged.get(identity, -self.interval) < self.interval:
            return
        start, lines, held = self._window
        if now - start >= self.interval:
            if held:
                log.warning("worker socket: %d more peers' dropped frames were not logged "
                            "(rapid_mlx_worker_plane_rejected_total counts them)", held)
            start, lines, held = now, 0, 0
        if lines >= self.global_lines:
            self._window = (start, lines, held + 1)
            return
        self._window = (start, lines + 1, held)
        if len(self._logged) > 1024:  # many peers: forget old ones rather than grow
            self._logged = {k: t for k, t in self._logged.items() if now - t < self.interval}
            if len(self._logged) > 4096:
                self._logged.clear()
        self._logged[identity] = now
        log.warning("worker socket: dropped %s from %r: %s (further drops from this peer are "
                    "counted in rapid_mlx_worker_plane_rejected_total, logged every %gs)",
                    what or "a frame", identity[:64], reason, self.interval)
