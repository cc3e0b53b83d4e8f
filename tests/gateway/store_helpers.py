"""Run a test's coroutine against a real ResponseStore in a temporary folder."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore

T = TypeVar("T")
# the store's first schema (version 1: items whole in input_items), for upgrade tests
V1 = ["CREATE TABLE responses (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
      "owner TEXT NOT NULL, created_at INTEGER NOT NULL, body BLOB NOT NULL)",
      "CREATE INDEX responses_created_at ON responses (created_at)",
      "CREATE TABLE input_items (response_seq INTEGER NOT NULL REFERENCES responses (seq) "
      "ON DELETE CASCADE, pos INTEGER NOT NULL, id TEXT NOT NULL, body BLOB NOT NULL, "
      "PRIMARY KEY (response_seq, pos)) WITHOUT ROWID",
      "CREATE INDEX input_items_id ON input_items (response_seq, id)",
      "PRAGMA user_version=1"]


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
