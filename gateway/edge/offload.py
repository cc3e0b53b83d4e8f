"""Run the CPU-heavy part of a large request (decoding, translating, checking) off the event loop.

A body of a few MiB of tiny items costs the gateway hundreds of milliseconds of Python; on the
event loop that stalls every other stream and /livez for as long. Small bodies (the common case)
stay on the loop and pay nothing; large ones run in a thread of a small pool of their own, where
the interpreter's switch interval hands the loop the GIL. That interval is 5 ms by default, and
the loop needs the GIL many times to answer one request (each wait on a socket gives it back),
so while such work runs the interval is shortened to SWITCH_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

LARGE_BODY_BYTES = 256 * 1024  # bodies from this size are prepared off the event loop
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="large-body")  # not image decodes'
SWITCH_S = 0.0005  # the interpreter's switch interval while any large body is being prepared


class _FastSwitch:
    """Shortens the switch interval while at least one thread is inside (then restores it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = 0
        self.saved = sys.getswitchinterval()

    def __enter__(self) -> None:
        with self.lock:
            if self.inside == 0:
                self.saved = sys.getswitchinterval()
                sys.setswitchinterval(min(SWITCH_S, self.saved))
            self.inside += 1

    def __exit__(self, *_: object) -> None:
        with self.lock:
            self.inside -= 1
            if self.inside == 0:
                sys.setswitchinterval(self.saved)


_fast_switch = _FastSwitch()


def fast_switch(size: int) -> contextlib.AbstractContextManager[None]:
    """The short switch interval while a block (on the loop, across awaits) waits for another
    thread's work on SIZE bytes, e.g. the store decoding or encoding a large conversation; for
    SIZE under LARGE_BODY_BYTES, nothing."""
    return _fast_switch if size >= LARGE_BODY_BYTES else contextlib.nullcontext()


def _switching(fn: Callable[[], T]) -> T:
    with _fast_switch:
        return fn()


async def off_loop(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """FN(*ARGS, **KWARGS): inline for a body of SIZE bytes under LARGE_BODY_BYTES, else in a
    thread of the large-body pool (its exceptions are raised here either way)."""
    if size < LARGE_BODY_BYTES:
        return fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, _switching, lambda: fn(*args, **kwargs))
