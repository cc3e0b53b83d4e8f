"""uvicorn's peer-driven "Invalid HTTP request received." is logged once per interval with a
count of the lines left out; other records pass (the filter alone, with a fake clock; the real
server's log under a garbage flood is tests/e2e/test_log_flood.py)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest

from gateway.edge import quietlog
from gateway.edge.quietlog import RepeatFilter, quiet_uvicorn


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, msg, args or None,
                             None)


def test_the_first_passes_then_one_per_interval_with_the_count(
        monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(quietlog, "time", SimpleNamespace(monotonic=lambda: now[0]))
    f = RepeatFilter(interval=10.0)
    first = _record("Invalid HTTP request received.")
    assert f.filter(first) and first.getMessage() == "Invalid HTTP request received."
    assert not any(f.filter(_record("Invalid HTTP request received.")) for _ in range(500))
    other = _record("Exception in ASGI application %s", "x")
    assert f.filter(other) and other.getMessage() == "Exception in ASGI application x"
    now[0] += 10.5
    late = _record("Invalid HTTP request received.")
    assert f.filter(late)
    assert late.getMessage() == ("Invalid HTTP request received. (500 more in the 10s since "
                                 "the last one logged)")
    now[0] += 30.0  # a quiet spell: the next one passes as it is
    again = _record("Invalid HTTP request received.")
    assert f.filter(again) and again.getMessage() == "Invalid HTTP request received."


def test_installed_once() -> None:
    logger = logging.getLogger("uvicorn.error")
    before = list(logger.filters)
    try:
        quiet_uvicorn()
        quiet_uvicorn()
        assert sum(isinstance(f, RepeatFilter) for f in logger.filters) == 1
    finally:
        logger.filters[:] = before
