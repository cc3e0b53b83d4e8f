"""SIGTERM while serving: drain instead of dying (a second SIGTERM, or SIGINT, stops at once)."""

from __future__ import annotations

import logging
import signal
import threading
import time
from typing import Any

log = logging.getLogger("rapid_mlx.worker")

GRACE = 0.3  # seconds the worker keeps reading jobs after its first draining heartbeat
DRAIN_TIMEOUT = 30.0  # seconds running requests may take before the worker stops anyway


class SigtermDrain:
    """The first SIGTERM marks the worker draining: its heartbeats say so (the gateway routes
    no new work to it), it finishes what it has and exits once idle (or after TIMEOUT)."""

    def __init__(self, timeout: float = DRAIN_TIMEOUT) -> None:
        self.timeout = timeout
        self.since: float | None = None

    def install(self) -> None:
        """Handle SIGTERM from now on (call once the loop serves; a loop run in another thread,
        as in tests, keeps the process's handler)."""
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, *_: Any) -> None:
        if self.since is not None:
            raise KeyboardInterrupt  # asked twice: stop now
        self.since = time.monotonic()
        log.warning("SIGTERM: draining (no new work from the gateway; exiting when idle, at "
                    "most %.0fs; SIGTERM again to stop now)", self.timeout)

    @property
    def draining(self) -> bool:
        """True once SIGTERM arrived."""
        return self.since is not None

    def finished(self, idle: bool) -> bool:
        """True when a draining worker should exit now (IDLE: it holds no request)."""
        if self.since is None:
            return False
        waited = time.monotonic() - self.since
        return (idle and waited >= GRACE) or waited >= self.timeout
