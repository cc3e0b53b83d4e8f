"""Run the CPU-heavy part of a large request (decoding, translating, checking) off the event loop.

A body of a few MiB of tiny items costs the gateway hundreds of milliseconds of Python; on the
event loop that stalls every other stream and /livez for as long. Small bodies (the common case)
stay on the loop and pay nothing; large ones run in a thread of a small pool of their own, where
the interpreter's switch interval hands the loop the GIL every few milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")

LARGE_BODY_BYTES = 256 * 1024  # bodies from this size are prepared off the event loop
_POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="large-body")  # not image decodes'


async def off_loop(size: int, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """FN(*ARGS, **KWARGS): inline for a body of SIZE bytes under LARGE_BODY_BYTES, else in a
    thread of the large-body pool (its exceptions are raised here either way)."""
    if size < LARGE_BODY_BYTES:
        return fn(*args, **kwargs)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(_POOL, lambda: fn(*args, **kwargs))
