"""A test-only hook that makes one engine step slow or stuck, to test the gateway's watchdog.

``RAPID_MLX_TEST_STEP_HOOK``: ``slow:SECONDS`` burns CPU for SECONDS inside the first step with
work (a slow step: CPU time advances); ``deadlock`` blocks that step forever on a lock it holds
(a stuck process: CPU time frozen). With ``RAPID_MLX_TEST_STEP_HOOK_ONCE=PATH`` the hook fires
in the first worker process that creates PATH only (so a restarted worker serves normally).
Unset, the loop never calls anything.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

log = logging.getLogger("rapid_mlx.worker")

HOOK_ENV = "RAPID_MLX_TEST_STEP_HOOK"
ONCE_ENV = "RAPID_MLX_TEST_STEP_HOOK_ONCE"


def step_hook() -> Callable[[], None] | None:
    """The hook the environment asks for, or None (the normal case)."""
    spec = os.environ.get(HOOK_ENV, "")
    if not spec:
        return None
    kind, _, arg = spec.partition(":")
    if kind == "slow":
        seconds = float(arg or "5")
        return lambda: _fire(f"slow step of {seconds:g}s", lambda: _burn(seconds))
    if kind == "deadlock":
        return lambda: _fire("deadlocked step", _deadlock)
    raise SystemExit(f"{HOOK_ENV}={spec!r}: expected slow:SECONDS or deadlock")


def _fire(what: str, act: Callable[[], None]) -> None:
    once = os.environ.get(ONCE_ENV)
    if once:
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
    log.warning("test hook: a %s", what)
    act()


def _burn(seconds: float) -> None:
    """Keep the CPU busy for SECONDS (the GIL switches threads as in any Python loop)."""
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x = (x * 31 + 7) % 1000003


def _deadlock() -> None:
    """Wait forever on a lock this thread holds (the GIL is released while it waits)."""
    lock = threading.Lock()
    lock.acquire()
    lock.acquire()
