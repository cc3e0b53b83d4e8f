"""Stored Responses API objects in SQLite, off the event loop.

Threading: two connections, each owned by one dedicated thread (a single-worker executor): one
writes (puts, deletes, the bounds), one reads (GET, input_items, the conversation a turn
continues). Every call is a job on one of them, so the event loop never waits on the disk, a
connection is never shared between threads (no locks, sqlite3's default thread check stays on),
and the writes run one at a time in arrival order, which is all a gateway's write rate needs
(each job is one short transaction). WAL lets the reads run meanwhile, each on the last commit: a
put of 10,000 items (~0.4 s) no longer holds every key's reads. Durability is in
`schema.connect`: WAL with synchronous=NORMAL.

Owners: rows carry the SHA-256 of the API key that created them ('' without keys); every read
and delete matches it, so another key's response looks exactly like an unknown one.

Items: each distinct input item JSON of an owner is stored once (schema.BODIES, keyed by its
SHA-256) and a response's input_items rows name theirs, so the turns of a previous_response_id
chain, each holding the whole conversation so far, share its items: bytes linear in its turns,
not quadratic. A body goes in the statement that deletes the last item naming it (a trigger), so
deleting or pruning any turn leaves every other one exactly as it was.

Retention, checked in the transaction of every insert (indexed deletes, usually empty): at most
MAX_COUNT responses, none older than MAX_AGE seconds, and at most MAX_BYTES stored: the JSON
(response bodies and item bodies, each counted once, while stored) and a fixed cost per row
(schema.ITEM_ROW for each input_items row, a chain's turns repeating theirs; BODY_ROW,
RESPONSE_ROW), so that the bound bounds the file; over the count or byte bound,
the owner holding the most gives way, oldest first (retention.py), so one key's long chats never
evict another's responses while it holds more; MAX_BYTES_PER_KEY (optional) bounds each owner
alone the same way. The totals per owner (and their sum) are kept by triggers in the database
itself (schema.OWNERS), so deletes, expiry, restarts and other processes never put them off; they
are recomputed once at open all the same. A response larger than MAX_BYTES (or
MAX_BYTES_PER_KEY) on its own (its body and its distinct items: what it takes when nothing else
is stored, rows included) is not stored (`put` says False) and evicts nothing. Freed pages go
back to the file system (incremental auto-vacuum) beyond a slack (RECLAIM_SLACK, at most an
eighth of MAX_BYTES) kept for the next inserts to reuse, so the file follows the bound.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import msgspec

from gateway.storage.retention import (
    prune_bytes,
    prune_count,
    prune_owner_bytes,
    prune_owners_bytes,
)
from gateway.storage.schema import BODY_ROW, ITEM_ROW, RECOUNT, RESPONSE_ROW, connect, sha256
from gateway.storage.schema import transaction as _transaction

log = logging.getLogger("rapid_mlx.gateway")
T = TypeVar("T")
RECLAIM_SLACK = 4 << 20  # bytes of free pages kept in the file for the next inserts
Order = Literal["asc", "desc"]
BODY = "SELECT b.body FROM input_items i JOIN item_bodies b ON b.id = i.body_id"


class UnknownItem(LookupError):
    """An `after` cursor that is not an item of the response."""


class ResponseStore:
    """Stored responses and their input items, in one SQLite file."""

    def __init__(self, path: Path, max_count: int = 0, max_age: float = 0.0,
                 max_bytes: int = 0, max_bytes_per_key: int = 0) -> None:
        self.path = path
        self.max_count = max_count  # 0: no count bound
        self.max_age = max_age  # seconds; 0: no age bound
        self.max_bytes = max_bytes  # 0: no byte bound
        self.max_bytes_per_key = max_bytes_per_key  # 0: no bound on one owner alone
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rapid-mlx-store")
        self._reads = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rapid-mlx-store-read")
        self._conn: sqlite3.Connection | None = None
        self._rconn: sqlite3.Connection | None = None  # the reads', on their thread

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._reads, self._snapshot, fn,
                                                                *args)

    def _snapshot(self, fn: Callable[..., T], *args: Any) -> T:
        """Run FN in one read transaction: its statements all see the same commit, so a prune
        committed between two of them (the response found, its items gone) is never seen."""
        db = self._reader()
        db.execute("BEGIN")
        try:
            return fn(*args)
        finally:
            db.execute("COMMIT")

    def _reader(self) -> sqlite3.Connection:
        if self._rconn is None:
            raise RuntimeError("the response store is not open")
        return self._rconn

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the response store is not open")
        return self._conn

    async def open(self) -> None:
        """Open the database (creating or upgrading it) and apply the bounds."""
        await self._run(self._open)
        await asyncio.get_running_loop().run_in_executor(self._reads, self._open_reads)

    def _open_reads(self) -> None:
        self._rconn = db = sqlite3.connect(self.path, isolation_level=None)
        db.execute("PRAGMA busy_timeout=5000")
        db.execute("PRAGMA query_only=ON")

    def _open(self) -> None:
        self._conn = db = connect(self.path)
        with _transaction(db):
            for stmt in RECOUNT:
                db.execute(stmt)
            self._prune_age(db)
            prune_owners_bytes(db, self.max_bytes_per_key)
            prune_bytes(db, self.max_bytes)
            prune_count(db, self.max_count)
        self._reclaim(db)

    async def close(self) -> None:
        """Close the connections and stop the threads."""
        await asyncio.get_running_loop().run_in_executor(self._reads, self._close_reads)
        await self._run(self._close)
        self._reads.shutdown(wait=True)
        self._pool.shutdown(wait=True)

    def _close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _close_reads(self) -> None:
        if self._rconn is not None:
            self._rconn.close()
            self._rconn = None

    async def put(self, rid: str, owner: str, response: dict[str, Any],
                  items: list[dict[str, Any]]) -> bool:
        """Store (or replace) RESPONSE with its input ITEMS; committed when this returns. False
        (nothing stored, nothing evicted) when they alone are larger than a byte bound."""
        return await self._run(self._put, rid, owner, int(response.get("created_at") or time.time()),
                        response, items)  # encoded there too: off the event loop

    def _put(self, rid: str, owner: str, created_at: int, response: dict[str, Any],
             items: list[dict[str, Any]]) -> bool:
        body = msgspec.json.encode(response)
        rows = [(it["id"], msgspec.json.encode(it)) for it in items]
        keys = [sha256(b) for _, b in rows]
        distinct = dict(zip(keys, rows, strict=True))
        size = len(body) + RESPONSE_ROW + len(rows) * ITEM_ROW + sum(  # what it takes alone
            len(b) + BODY_ROW for _, b in distinct.values())
        for bound, flag in ((self.max_bytes, "bytes"), (self.max_bytes_per_key, "bytes-per-key")):
            if 0 < bound < size:
                log.warning("response %s not stored: %d bytes, more than --responses-max-%s %d",
                            rid, size, flag, bound)
                return False
        db = self._db()
        with _transaction(db):
            db.execute("DELETE FROM responses WHERE id = ?", (rid,))  # a re-put replaces
            ids = self._bodies(db, owner, distinct)
            seq = int(db.execute("INSERT INTO responses (id, owner, created_at, size, items, "
                                 "body) VALUES (?, ?, ?, ?, ?, ?)",
                                 (rid, owner, created_at, size, len(rows), body)).lastrowid or 0)
            db.executemany("INSERT INTO input_items (response_seq, pos, body_id) VALUES (?, ?, ?)",
                           [(seq, pos, ids[k]) for pos, k in enumerate(keys)])
            self._prune_age(db)
            prune_count(db, self.max_count, seq)
            prune_owner_bytes(db, owner, self.max_bytes_per_key, seq)
            prune_bytes(db, self.max_bytes, seq)
        self._reclaim(db)
        return True

    @staticmethod
    def _bodies(db: sqlite3.Connection, owner: str, distinct: dict[bytes, tuple[str, bytes]]
                ) -> dict[bytes, int]:
        """The row id of each item body (by hash) of OWNER, storing those not stored yet."""
        ids: dict[bytes, int] = {}
        for key, (iid, b) in distinct.items():
            row = db.execute("SELECT id FROM item_bodies WHERE owner = ? AND hash = ?",
                             (owner, key)).fetchone()
            if row is None:
                row = (db.execute("INSERT INTO item_bodies (owner, hash, item_id, size, body) "
                                  "VALUES (?, ?, ?, ?, ?)",
                                  (owner, key, iid, len(b), b)).lastrowid,)
            ids[key] = row[0]
        return ids

    def _prune_age(self, db: sqlite3.Connection) -> None:
        if self.max_age > 0:
            db.execute("DELETE FROM responses WHERE created_at < ?",
                       (int(time.time() - self.max_age),))

    @staticmethod
    def _bytes(db: sqlite3.Connection) -> int:
        return int(db.execute("SELECT bytes FROM usage").fetchone()[0])

    def _reclaim(self, db: sqlite3.Connection) -> None:
        """Give free pages beyond the slack (RECLAIM_SLACK, at most an eighth of the byte bound)
        back to the file system; outside a transaction, as executescript steps the pragma to
        its end (execute frees one page). Housekeeping: a failure is logged, never raised, as
        the caller's transaction is committed already."""
        try:
            free = db.execute("PRAGMA freelist_count").fetchone()[0]
            slack = min(RECLAIM_SLACK, self.max_bytes // 8) if self.max_bytes > 0 \
                else RECLAIM_SLACK
            keep = slack // db.execute("PRAGMA page_size").fetchone()[0]
            if free > keep:
                db.executescript(f"PRAGMA incremental_vacuum({free - keep});")
        except sqlite3.Error:
            log.exception("could not give free pages of %s back", self.path)

    def _seq(self, rid: str, owner: str) -> tuple[int, bytes] | None:
        row = self._reader().execute("SELECT seq, body FROM responses WHERE id = ? AND owner = ?",
                                 (rid, owner)).fetchone()
        return (row[0], row[1]) if row else None

    async def get(self, rid: str, owner: str) -> dict[str, Any] | None:
        """The stored response RID of OWNER, or None."""
        found = await self.get_json(rid, owner)
        return msgspec.json.decode(found) if found is not None else None

    async def get_json(self, rid: str, owner: str) -> bytes | None:
        """The stored response RID of OWNER as its JSON, as stored (nothing decoded), or None."""
        found = await self._read(self._seq, rid, owner)
        return found[1] if found else None

    async def conversation(self, rid: str, owner: str
                           ) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
        """The stored response RID of OWNER, all its input items in order and their stored size
        in bytes (the response's too), or None."""
        return await self._read(self._conversation, rid, owner)

    def _conversation(self, rid: str, owner: str
                      ) -> tuple[dict[str, Any], list[dict[str, Any]], int] | None:
        found = self._seq(rid, owner)
        if found is None:
            return None
        rows = self._reader().execute(f"{BODY} WHERE i.response_seq = ? ORDER BY i.pos",
                                  (found[0],)).fetchall()
        size = len(found[1]) + sum(len(r[0]) for r in rows)  # the JSON read, shared or not
        return msgspec.json.decode(found[1]), [msgspec.json.decode(r[0]) for r in rows], size

    async def items(self, rid: str, owner: str, limit: int, order: Order, after: str | None
                    ) -> tuple[list[dict[str, Any]], bool] | None:
        """One page of RID's input items (and whether more follow), or None for no such response;
        raises UnknownItem when AFTER is not one of its items."""
        return await self._read(self._items, rid, owner, limit, order, after)

    def _items(self, rid: str, owner: str, limit: int, order: Order, after: str | None
               ) -> tuple[list[dict[str, Any]], bool] | None:
        db = self._reader()
        found = self._seq(rid, owner)
        if found is None:
            return None
        seq = found[0]
        bound = -1 if order == "asc" else 2**62
        if after is not None:
            row = db.execute("SELECT min(i.pos) FROM item_bodies b CROSS JOIN input_items i ON "
                             "i.body_id = b.id AND i.response_seq = ? "  # CROSS: by the indexes
                             "WHERE b.owner = ? AND b.item_id = ?", (seq, owner, after)).fetchone()
            if row[0] is None:
                raise UnknownItem(after)
            bound = row[0]
        cmp, direction = (">", "ASC") if order == "asc" else ("<", "DESC")
        rows = db.execute(f"{BODY} WHERE i.response_seq = ? AND i.pos {cmp} ? "
                          f"ORDER BY i.pos {direction} LIMIT ?", (seq, bound, limit + 1)).fetchall()
        return [msgspec.json.decode(r[0]) for r in rows[:limit]], len(rows) > limit

    async def delete(self, rid: str, owner: str) -> bool:
        """Delete RID of OWNER (and its input items); False when there was none."""
        return await self._run(self._delete, rid, owner)

    def _delete(self, rid: str, owner: str) -> bool:
        db = self._db()
        with _transaction(db):
            cur = db.execute("DELETE FROM responses WHERE id = ? AND owner = ?", (rid, owner))
        self._reclaim(db)
        return cur.rowcount > 0

    async def usage(self) -> int:
        """Bytes stored (all owners: JSON and rows' costs), the total the byte bound applies to."""
        return await self._run(lambda: self._bytes(self._db()))

    async def count(self) -> int:
        """How many responses are stored (all owners)."""
        return await self._run(lambda: int(self._db().execute(
            "SELECT count(*) FROM responses").fetchone()[0]))
