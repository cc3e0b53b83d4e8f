"""How many client connections the gateway keeps open at once, from the process's fd limit.

Every open connection is a file descriptor. Past the limit, accept() fails with EMFILE: the
listening socket stops taking anyone (/livez included), asyncio logs a traceback per failed
accept (thousands a second), and the worker plane (ZeroMQ reconnects, the response store,
spawning a worker) finds no fd either. So the gateway raises its soft fd limit to the hard one,
keeps a reserve of them beyond the bound; past the bound a new connection evicts the one idle the
longest, else the one whose request body stalled the most, or gets a 503 when all are busy
(gateway/edge/http_protocol.py, idle.py, slowbody.py); overload is logged once per interval.

The reserve covers the worker plane and storage, the sockets asyncio accepts in one burst before
any of them is counted (up to the listen backlog per wake-up, and a second wake-up may come
first: twice the backlog), and the refused or evicted connections lingering to deliver their
answer.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from typing import Any

log = logging.getLogger("rapid_mlx.gateway")

DEFAULT_CAP = 10000  # the default bound, whatever the fd limit (about 5 KiB of memory each)
MIN_RESERVE = 64  # fds never given to client connections: ZeroMQ, sqlite, pipes, logs, imports
MAX_BACKLOG = 2048  # uvicorn's default listen backlog
MACOS_OPEN_MAX = 10240  # macOS refuses a soft limit above this (its hard limit is "unlimited")
LOG_INTERVAL_S = 10.0  # overload is logged at most this often


def backlog(limit: int) -> int:
    """The listen backlog (and so the most sockets accepted at one wake-up) for an fd LIMIT; also
    the most refused connections lingering at once."""
    return min(MAX_BACKLOG, max(16, limit // 16))


def reserve(limit: int) -> int:
    """The fds of a process limit of LIMIT never taken by open client connections."""
    return max(MIN_RESERVE, limit // 16) + 3 * backlog(limit)


def raise_fd_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (as far as the OS allows); the soft limit
    now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if sys.platform == "darwin":
        want = min(want, MACOS_OPEN_MAX)
    if want > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, want, exc)
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def default_max_connections(limit: int) -> int:
    """The bound on open client connections for a process fd limit of LIMIT."""
    return max(1, min(DEFAULT_CAP, limit - reserve(limit)))


def max_connections_problem(wanted: int, limit: int) -> str | None:
    """Why --max-connections WANTED cannot be kept under an fd limit of LIMIT, or None."""
    most = limit - reserve(limit)
    if wanted <= most:
        return None
    return (f"--max-connections {wanted} needs more file descriptors than the process may open "
            f"({limit}, of which {reserve(limit)} are kept for workers and storage): use at most "
            f"{max(most, 1)}, or raise the limit (ulimit -n)")


class OverloadLog:
    """Logs a recurring overload once per LOG_INTERVAL_S with how often it happened since."""

    def __init__(self, interval: float = LOG_INTERVAL_S) -> None:
        self.interval = interval
        self.last = -interval
        self.count = 0

    def hit(self, message: str, *args: Any) -> None:
        """One more occurrence; log MESSAGE % ARGS (plus the count) if the interval has passed."""
        self.count += 1
        now = time.monotonic()
        if now - self.last < self.interval:
            return
        log.warning(message + " (%d since the last report)", *args, self.count)
        self.last = now
        self.count = 0


_accept_failures = OverloadLog()


def quiet_accept_errors(loop: Any, context: dict[str, Any]) -> None:
    """Event loop exception handler: a failed accept() (out of fds or memory) is logged once per
    interval instead of a traceback per attempt; anything else as asyncio would."""
    if context.get("message") == "socket.accept() out of system resource":
        exc = context.get("exception")
        _accept_failures.hit("cannot accept connections: %s", exc)
        return
    loop.default_exception_handler(context)
