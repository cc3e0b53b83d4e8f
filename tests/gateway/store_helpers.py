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
# the schema of version 2 (items shared, one byte total for all owners: no per-owner totals, no
# count), as rapid-mlx of sessions 13 and 14 made it, for upgrade tests
V2 = ["CREATE TABLE responses (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, "
      "owner TEXT NOT NULL, created_at INTEGER NOT NULL, size INTEGER NOT NULL, "
      "body BLOB NOT NULL)",
      "CREATE INDEX responses_created_at ON responses (created_at)",
      "CREATE TABLE item_bodies (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, hash BLOB NOT NULL, "
      "item_id TEXT NOT NULL, size INTEGER NOT NULL, body BLOB NOT NULL)",
      "CREATE UNIQUE INDEX item_bodies_key ON item_bodies (owner, hash)",
      "CREATE INDEX item_bodies_item_id ON item_bodies (owner, item_id)",
      "CREATE TABLE input_items (response_seq INTEGER NOT NULL REFERENCES responses (seq) "
      "ON DELETE CASCADE, pos INTEGER NOT NULL, body_id INTEGER NOT NULL REFERENCES "
      "item_bodies (id), PRIMARY KEY (response_seq, pos)) WITHOUT ROWID",
      "CREATE INDEX input_items_body ON input_items (body_id, response_seq)",
      "CREATE TRIGGER item_unref AFTER DELETE ON input_items BEGIN DELETE FROM item_bodies "
      "WHERE id = old.body_id AND NOT EXISTS (SELECT 1 FROM input_items WHERE body_id = "
      "old.body_id); END",
      "CREATE TABLE usage (one INTEGER PRIMARY KEY CHECK (one = 1), bytes INTEGER NOT NULL)",
      "INSERT INTO usage VALUES (1, 0)",
      "CREATE TRIGGER usage_add AFTER INSERT ON responses "
      "BEGIN UPDATE usage SET bytes = bytes + length(new.body); END",
      "CREATE TRIGGER usage_sub AFTER DELETE ON responses "
      "BEGIN UPDATE usage SET bytes = bytes - length(old.body); END",
      "CREATE TRIGGER usage_body_add AFTER INSERT ON item_bodies "
      "BEGIN UPDATE usage SET bytes = bytes + new.size; END",
      "CREATE TRIGGER usage_body_sub AFTER DELETE ON item_bodies "
      "BEGIN UPDATE usage SET bytes = bytes - old.size; END",
      "PRAGMA user_version=2"]


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
