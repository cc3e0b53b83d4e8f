"""uvicorn's warnings that a peer can trigger at will, logged at most once per interval.

uvicorn logs "Invalid HTTP request received." (logger uvicorn.error) for every malformed request
head or body framing: a peer sending garbage on many connections wrote a line per connection,
as fast as it could connect. The edge answers each of them anyway (a 400 in the OpenAI shape,
gateway/edge/http_protocol.py); the log keeps the first one and then one per LOG_INTERVAL_S,
saying how many were left out since.
"""

from __future__ import annotations

import logging
import time

from gateway.edge.connlimit import LOG_INTERVAL_S

NOISY = frozenset({"Invalid HTTP request received."})  # record.msg of uvicorn's peer-driven lines


class RepeatFilter(logging.Filter):
    """Lets each of NOISY's records through at most once per INTERVAL seconds, the next one
    after a pause saying how many were dropped; every other record passes."""

    def __init__(self, interval: float = LOG_INTERVAL_S, messages: frozenset[str] = NOISY) -> None:
        super().__init__()
        self.interval = interval
        self.messages = messages
        self._last: dict[str, float] = {}
        self._dropped: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        """False for a noisy record within the interval of the last one let through."""
        key = record.msg
        if not isinstance(key, str) or key not in self.messages:
            return True
        now = time.monotonic()
        last = self._last.get(key)
        if last is not None and now - last < self.interval:
            self._dropped[key] = self._dropped.get(key, 0) + 1
            return False
        self._last[key] = now
        dropped = self._dropped.pop(key, 0)
        if dropped and last is not None:
            record.msg = f"{key} ({dropped} more in the {now - last:.0f}s since the last one " \
                         "logged)"
            record.args = None
        return True


def quiet_uvicorn() -> None:
    """Install a RepeatFilter on uvicorn's error logger (once)."""
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, RepeatFilter) for f in logger.filters):
        logger.addFilter(RepeatFilter())
