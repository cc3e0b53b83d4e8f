"""Run a test's coroutine against a real ResponseStore in a temporary folder."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import msgspec

from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from gateway.storage.schema import BODY_ROW, ITEM_ROW, RESPONSE_ROW

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
# count), as an earlier rapid-mlx made it, for upgrade tests
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


# the schema of version 3 (per-owner totals of the JSON alone: input_items rows uncounted), as
# an earlier rapid-mlx made it, for upgrade tests
V3 = [*V2[:8],
      "CREATE TABLE owners (owner TEXT PRIMARY KEY, bytes INTEGER NOT NULL, count INTEGER NOT "
      "NULL) WITHOUT ROWID",
      "CREATE VIEW usage AS SELECT coalesce(sum(bytes), 0) AS bytes, coalesce(sum(count), 0) AS "
      "count FROM owners",
      "CREATE INDEX responses_owner ON responses (owner, seq)",
      *(f"CREATE TRIGGER {t}_add AFTER INSERT ON {t} BEGIN INSERT INTO owners VALUES (new.owner, "
        f"{size.format('new')}, {n}) ON CONFLICT (owner) DO UPDATE SET bytes = bytes + "
        f"excluded.bytes, count = count + excluded.count; END"
        for t, size, n in (("responses", "length({}.body)", 1), ("item_bodies", "{}.size", 0))),
      *(f"CREATE TRIGGER {t}_sub AFTER DELETE ON {t} BEGIN UPDATE owners SET bytes = bytes - "
        f"{size.format('old')}, count = count - {n} WHERE owner = old.owner; END"
        for t, size, n in (("responses", "length({}.body)", 1), ("item_bodies", "{}.size", 0))),
      "PRAGMA user_version=3"]


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


def stored_bytes(turns: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> int:
    """What the byte bound counts for TURNS (responses and their items) stored together: each
    response's JSON and row, each input_items row, each distinct item JSON (by content) once
    with its row."""
    distinct = {msgspec.json.encode(it) for _, items in turns for it in items}
    return sum(len(msgspec.json.encode(r)) + RESPONSE_ROW + ITEM_ROW * len(items)
               for r, items in turns) + sum(len(b) + BODY_ROW for b in distinct)


def recount(path: Path) -> dict[str, tuple[int, int]]:
    """Per owner, (bytes, responses) recomputed from the rows themselves (not the triggers' totals
    nor the `items` column): JSON, plus each row's cost, input_items rows counted as found."""
    out: dict[str, tuple[int, int]] = {}
    with sqlite3.connect(path / RESPONSES_DB) as db:
        for owner, size, n in db.execute(
                f"SELECT r.owner, length(r.body) + {RESPONSE_ROW} + {ITEM_ROW} * (SELECT count(*) "
                "FROM input_items i WHERE i.response_seq = r.seq), 1 FROM responses r UNION ALL "
                f"SELECT owner, length(body) + {BODY_ROW}, 0 FROM item_bodies"):
            b0, n0 = out.get(owner, (0, 0))
            out[owner] = (b0 + size, n0 + n)
    return out
