"""gateway/storage: the byte bound on stored responses, its running total and the file size."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec

from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from gateway.storage.schema import SCHEMA_VERSION
from tests.gateway.store_helpers import V1, recount, stored_bytes
from tests.gateway.store_helpers import with_store as _with_store

KIB = 1024


def _resp(rid: str, created_at: int | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": created_at or int(time.time())}


def _items(rid: str, n: int, size: int) -> list[dict[str, Any]]:
    return [{"id": f"msg_{rid}_{i}", "type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "x" * size}]} for i in range(n)]


def _size(response: dict[str, Any], items: list[dict[str, Any]]) -> int:
    """What the bound counts: the JSON of the body and of every item, and the rows' costs."""
    return stored_bytes([(response, items)])


def _sum_sizes(path: Path) -> int:
    """The total recomputed from the rows themselves (not the running one): each body once."""
    return sum(b for b, _ in recount(path).values())


def test_byte_bound_drops_oldest_first(tmp_path: Path) -> None:
    one = _size(_resp("resp_0"), _items("resp_0", 2, 10 * KIB))

    async def body(s: ResponseStore) -> None:
        for i in range(8):
            assert await s.put(f"resp_{i}", "", _resp(f"resp_{i}"), _items(f"resp_{i}", 2,
                                                                             10 * KIB))
        kept = [await s.get(f"resp_{i}", "") is not None for i in range(8)]
        assert kept == [False] * 5 + [True] * 3  # 3.5 responses' worth: the 3 newest fit
        assert await s.usage() == 3 * one
        found = await s.conversation("resp_7", "")
        assert found is not None and found[1] == _items("resp_7", 2, 10 * KIB)
    _with_store(tmp_path, body, max_bytes=int(3.5 * one))
    assert _sum_sizes(tmp_path) == 3 * one
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:  # the items went with their responses
        assert db.execute("SELECT count(*) FROM input_items").fetchone()[0] == 6


def test_total_follows_deletes_expiry_and_restarts(tmp_path: Path) -> None:
    old = int(time.time()) - 3 * 86400
    rows = {f"resp_{i}": (_resp(f"resp_{i}", old if i < 2 else None), _items(f"resp_{i}", i, 999))
            for i in range(6)}

    async def fill(s: ResponseStore) -> int:
        for rid, (r, its) in rows.items():
            await s.put(rid, "", r, its)
        await s.put("resp_5", "", *rows["resp_5"])  # a re-put replaces: counted once
        assert await s.delete("resp_3", "")
        assert not await s.delete("resp_3", "")
        return await s.usage()
    want = sum(_size(*rows[rid]) for rid in ("resp_0", "resp_1", "resp_2", "resp_4", "resp_5"))
    assert _with_store(tmp_path, fill) == want == _sum_sizes(tmp_path)

    async def usage(s: ResponseStore) -> int:
        return await s.usage()
    assert _with_store(tmp_path, usage) == want  # a restart
    want -= _size(*rows["resp_0"]) + _size(*rows["resp_1"])
    assert _with_store(tmp_path, usage, max_age=86400) == want == _sum_sizes(tmp_path)  # expired
    want = _size(*rows["resp_5"])  # a restart with a smaller bound prunes at open
    assert _with_store(tmp_path, usage, max_bytes=want + 10) == want == _sum_sizes(tmp_path)

    async def more(s: ResponseStore) -> int:
        await s.put("resp_9", "", _resp("resp_9"), [])
        return await s.usage()
    assert _with_store(tmp_path, more) == want + _size(_resp("resp_9"), []) == _sum_sizes(tmp_path)


def test_oversized_response_is_refused_and_evicts_nothing(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        for i in range(3):
            assert await s.put(f"resp_{i}", "", _resp(f"resp_{i}"), _items(str(i), 1, KIB))
        before = await s.usage()
        assert not await s.put("resp_big", "", _resp("resp_big"), _items("big", 1, 64 * KIB))
        assert await s.get("resp_big", "") is None
        assert await s.count() == 3 and await s.usage() == before
    _with_store(tmp_path, body, max_bytes=32 * KIB)


def test_file_size_follows_the_bound(tmp_path: Path) -> None:
    bound = 4 << 20

    async def body(s: ResponseStore) -> None:
        for i in range(96):  # 24 MiB stored in all, 6 times the bound
            await s.put(f"resp_{i}", "", _resp(f"resp_{i}"), _items(str(i), 4, 64 * KIB))
        assert await s.usage() <= bound
    _with_store(tmp_path, body, max_bytes=bound)
    db = tmp_path / RESPONSES_DB
    assert db.stat().st_size < bound * 1.2, db.stat().st_size  # pages, ids, indexes, slack

    async def drop_all(s: ResponseStore) -> None:
        for i in range(96):
            await s.delete(f"resp_{i}", "")
        assert await s.usage() == 0
    _with_store(tmp_path, drop_all, max_bytes=bound)
    assert db.stat().st_size < bound / 4, db.stat().st_size  # the space went back




def test_a_version_1_database_is_upgraded(tmp_path: Path) -> None:
    rows = {f"resp_{i}": (_resp(f"resp_{i}"), _items(f"resp_{i}", 3, 500)) for i in range(4)}
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:  # as the first rapid-mlx store made it
        db.execute("PRAGMA journal_mode=WAL")
        for stmt in V1:
            db.execute(stmt)
        for rid, (r, its) in rows.items():
            seq = db.execute("INSERT INTO responses (id, owner, created_at, body) VALUES "
                             "(?, '', ?, ?)", (rid, r["created_at"],
                                               msgspec.json.encode(r))).lastrowid
            db.executemany("INSERT INTO input_items VALUES (?, ?, ?, ?)",
                           [(seq, p, it["id"], msgspec.json.encode(it))
                            for p, it in enumerate(its)])

    async def body(s: ResponseStore) -> None:  # the count bound pruned the oldest two at open
        assert await s.count() == 2 and await s.get("resp_1", "") is None
        assert await s.usage() == sum(_size(*rows[rid]) for rid in ("resp_2", "resp_3"))
        found = await s.conversation("resp_3", "")
        assert found is not None and found[:2] == rows["resp_3"]
        r, its = rows["resp_3"]
        assert found[2] == len(msgspec.json.encode(r)) + sum(  # the JSON read
            len(msgspec.json.encode(it)) for it in its)
        await s.put("resp_9", "", _resp("resp_9"), [])  # seq continues after the old rows
        assert await s.count() == 2  # the count bound still prunes the oldest
        assert await s.get("resp_2", "") is None and await s.get("resp_3", "") is not None
    _with_store(tmp_path, body, max_count=2)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # incremental, after VACUUM
        assert db.execute("SELECT count(*) FROM input_items").fetchone()[0] == 3  # cascaded
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"



class _NoVacuum:
    """A connection whose executescript (the vacuum) fails, as a disk error would."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def executescript(self, sql: str) -> None:
        raise sqlite3.OperationalError("disk I/O error")


def test_a_failed_reclaim_never_fails_the_put(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        await s._run(lambda: setattr(s, "_conn", _NoVacuum(s._db())))
        for i in range(4):  # each evicts the one before and frees its pages
            assert await s.put(f"resp_{i}", "", _resp(f"resp_{i}"), _items(str(i), 4, 64 * KIB))
        assert await s.delete("resp_3", "")
        assert await s.count() == 0 and await s.usage() == 0
        await s._run(lambda: setattr(s, "_conn", s._db().conn))  # type: ignore[attr-defined]
    _with_store(tmp_path, body, max_bytes=300 * KIB)
