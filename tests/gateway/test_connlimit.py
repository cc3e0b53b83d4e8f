"""The connection bound's arithmetic, the fd limit raise, and the once-per-interval logs."""

from __future__ import annotations

import logging
import resource
import subprocess
import sys
from typing import Any

import pytest

from gateway.edge import connlimit
from gateway.edge.connlimit import (
    OverloadLog,
    backlog,
    default_max_connections,
    max_connections_problem,
    quiet_accept_errors,
    reserve,
)


@pytest.mark.parametrize("limit", [256, 1024, 4096, 20000, 1 << 20])
def test_the_bound_and_its_reserve_fit_the_fd_limit(limit: int) -> None:
    most = default_max_connections(limit)
    assert 0 < most <= connlimit.DEFAULT_CAP
    assert most + reserve(limit) <= limit
    assert reserve(limit) >= 3 * backlog(limit) + connlimit.MIN_RESERVE  # bursts, refusals, plane
    assert max_connections_problem(most, limit) is None
    assert "needs more file descriptors" in (max_connections_problem(limit, limit) or "")


def test_macos_default_limit_still_serves() -> None:
    assert default_max_connections(256) >= 100


def test_the_soft_fd_limit_is_raised_to_the_hard_one() -> None:
    """In a child with soft 256: after raise_fd_limit() the soft limit is the hard one."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    code = ("import resource; from gateway.edge.connlimit import raise_fd_limit; "
            "print(raise_fd_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                               (256, hard)))
    want = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if sys.platform == "darwin":
        want = min(want, connlimit.MACOS_OPEN_MAX)
    assert out.stdout.split() == [str(want), str(want)]


def test_overload_is_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    over = OverloadLog(interval=3600)
    with caplog.at_level(logging.WARNING, "rapid_mlx.gateway"):
        for _ in range(1000):
            over.hit("refusing: %d open", 5)
    assert len(caplog.records) == 1
    assert "refusing: 5 open (1 since the last report)" in caplog.text


class _Loop:
    def __init__(self) -> None:
        self.passed: list[dict[str, Any]] = []

    def default_exception_handler(self, context: dict[str, Any]) -> None:
        self.passed.append(context)


def test_failed_accepts_are_logged_once_not_per_attempt(caplog: pytest.LogCaptureFixture,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """asyncio reports every failed accept() (EMFILE) through the loop's exception handler, with
    a traceback: thousands a second once the fds run out."""
    monkeypatch.setattr(connlimit, "_accept_failures", OverloadLog(interval=3600))
    loop = _Loop()
    emfile = OSError(24, "Too many open files")
    with caplog.at_level(logging.WARNING, "rapid_mlx.gateway"):
        for _ in range(2048):
            quiet_accept_errors(loop, {"message": "socket.accept() out of system resource",
                                       "exception": emfile})
        quiet_accept_errors(loop, {"message": "something else"})
    assert len(caplog.records) == 1 and "Too many open files" in caplog.text
    assert caplog.records[0].exc_info is None  # no traceback
    assert loop.passed == [{"message": "something else"}]
