"""Run a test's coroutine against a real ResponseStore in a temporary folder."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore

T = TypeVar("T")


def with_store(path: Path, body: Callable[[ResponseStore], Awaitable[T]], **kw: Any) -> T:
    """BODY's result on a store opened in PATH (with the bounds in KW), closed afterwards."""
    async def run() -> T:
        store = ResponseStore(path / RESPONSES_DB, **kw)
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()
    return asyncio.run(run())
