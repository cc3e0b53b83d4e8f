"""gateway/storage: the byte bounds count the rows too (input_items above all), so they bound the
file: a previous_response_id chain repeats its whole item list at every turn."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec

from gateway.responses.history import replay
from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from gateway.storage.schema import SCHEMA_VERSION, sha256
from tests.gateway.store_helpers import V3, recount, stored_bytes
from tests.gateway.store_helpers import with_store as _with_store

KIB = 1024
Turn = tuple[str, dict[str, Any], list[dict[str, Any]]]


def _msg(iid: str, role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"id": iid, "type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _chain(turns: int, tag: str = "") -> list[Turn]:
    """TURNS short turns as POST /v1/responses stores them: each the previous turn's items and
    its output replayed, then a new user line (turn k names 2k - 1 items)."""
    out: list[Turn] = []
    items: list[dict[str, Any]] = []
    for t in range(turns):
        if out:
            items = out[-1][2] + replay(out[-1][1])
        items = items + [_msg(f"msg_{tag}u{t}", "user", f"line {t}")]
        rid = f"resp_{tag}{t}"
        out.append((rid, {"id": rid, "object": "response", "created_at": int(time.time()),
                          "output": [_msg(f"msg_{tag}a{t}", "assistant", f"answer {t}")]}, items))
    return out


def _file(path: Path) -> int:
    """The database file's size once the WAL is checkpointed into it (and truncated)."""
    with sqlite3.connect(path / RESPONSES_DB) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return (path / RESPONSES_DB).stat().st_size


def test_a_long_chain_is_pruned_by_its_rows_and_the_file_follows_the_bound(
        tmp_path: Path) -> None:
    chain = _chain(300)  # 90,000 input_items rows in all; ~0.2 MB of JSON
    bound = 512 * KIB

    async def body(s: ResponseStore) -> tuple[int, list[bool]]:
        for rid, r, items in chain:
            assert await s.put(rid, "", r, items)
            assert await s.usage() <= bound
        last = chain[-1]
        found = await s.conversation(last[0], "")
        assert found is not None and found[:2] == (last[1], last[2])  # the newest is whole
        return await s.usage(), [await s.get(rid, "") is not None for rid, _, _ in chain]
    usage, kept = _with_store(tmp_path, body, max_bytes=bound)
    assert kept == sorted(kept) and not kept[0] and kept[-1]  # the oldest turns went
    assert usage == sum(b for b, _ in recount(tmp_path).values())
    size = _file(tmp_path)
    # what is counted is what is on disk, within a small factor (pages, free-page slack)
    assert size < 2 * bound and size < 3 * usage, (size, usage)


def test_rows_count_even_when_they_name_the_same_item(tmp_path: Path) -> None:
    one = _msg("msg_same", "user", "hi")
    rows = [one] * 2000  # one body, 2000 rows: 64 KB counted for them

    async def body(s: ResponseStore) -> tuple[bool, int]:
        return await s.put("resp_0", "", {"id": "resp_0"}, rows), await s.usage()
    assert _with_store(tmp_path, body) == (True, stored_bytes([({"id": "resp_0"}, rows)]))
    assert recount(tmp_path) == {"": (stored_bytes([({"id": "resp_0"}, rows)]), 1)}
    # a bound below its rows: pruned at open, and refused when put again
    assert _with_store(tmp_path, body, max_bytes=32 * KIB) == (False, 0)
    assert recount(tmp_path) == {}


def _v3_store(path: Path, chains: dict[str, list[Turn]], gone: str) -> None:
    """A version-3 database (as an earlier rapid-mlx left it) holding CHAINS (by
    owner), filled as its put did; then GONE, the newest, deleted (its seq never reused)."""
    with sqlite3.connect(path / RESPONSES_DB) as db:
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA foreign_keys=ON")
        for stmt in V3:
            db.execute(stmt)
        for owner, chain in chains.items():
            for rid, r, items in chain:
                ids, distinct = [], {}
                for it in items:
                    b = msgspec.json.encode(it)
                    db.execute("INSERT OR IGNORE INTO item_bodies (owner, hash, item_id, size, "
                               "body) VALUES (?, ?, ?, ?, ?)", (owner, sha256(b), it["id"],
                                                                 len(b), b))
                    ids.append(db.execute("SELECT id FROM item_bodies WHERE owner = ? AND "
                                          "hash = ?", (owner, sha256(b))).fetchone()[0])
                    distinct[b] = len(b)
                body = msgspec.json.encode(r)
                seq = db.execute("INSERT INTO responses (id, owner, created_at, size, body) "
                                 "VALUES (?, ?, ?, ?, ?)", (rid, owner, r["created_at"],
                                                            len(body) + sum(distinct.values()),
                                                            body)).lastrowid
                db.executemany("INSERT INTO input_items VALUES (?, ?, ?)",
                               [(seq, p, bid) for p, bid in enumerate(ids)])
        db.execute("DELETE FROM responses WHERE id = ?", (gone,))


def test_a_version_3_database_is_upgraded_counting_its_rows(tmp_path: Path) -> None:
    chains = {"a": _chain(12, "a"), "b": _chain(5, "b")}
    _v3_store(tmp_path, chains, "resp_b4")
    chains["b"].pop()
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        json_only = db.execute("SELECT bytes FROM usage").fetchone()[0]
    want = {o: stored_bytes([(r, items) for _, r, items in c]) for o, c in chains.items()}

    async def body(s: ResponseStore) -> None:
        assert await s.usage() == sum(want.values()) > json_only  # the rows now count
        for owner, chain in chains.items():
            for rid, r, items in chain:
                found = await s.conversation(rid, owner)
                assert found is not None and found[:2] == (r, items)
        await s.put("resp_new", "b", {"id": "resp_new"}, [])
        assert await s.usage() == sum(want.values()) + stored_bytes([({"id": "resp_new"}, [])])
    _with_store(tmp_path, body)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        assert db.execute("SELECT seq FROM responses WHERE id = 'resp_new'").fetchone()[0] == 18
        sizes = dict(db.execute("SELECT id, size FROM responses").fetchall())
        cols = [c[1] for c in db.execute("PRAGMA table_info(responses)")]
        assert cols.index("items") < cols.index("body")  # read without the body's pages
    for chain in chains.values():  # each response's size: what it takes stored alone
        assert [sizes[rid] for rid, _, _ in chain] == [stored_bytes([(r, items)])
                                                       for _, r, items in chain]

    async def deleted(s: ResponseStore) -> int:  # the triggers take off what they count
        for owner, chain in chains.items():
            for rid, _, _ in chain:
                assert await s.delete(rid, owner)
        assert await s.delete("resp_new", "b")
        return await s.usage()
    assert _with_store(tmp_path, deleted) == 0
    assert recount(tmp_path) == {}


def test_an_upgrade_then_a_smaller_bound_prunes_by_rows_at_open(tmp_path: Path) -> None:
    chains = {"a": _chain(40, "a"), "b": _chain(6, "b")}
    _v3_store(tmp_path, chains, "resp_b5")
    chains["b"].pop()
    light = stored_bytes([(r, items) for _, r, items in chains["b"]])

    async def kept(s: ResponseStore) -> dict[str, list[bool]]:
        return {o: [await s.get(rid, o) is not None for rid, _, _ in c]
                for o, c in chains.items()}
    last = stored_bytes([chains["a"][-1][1:]])  # the newest of a alone, more than b holds
    bound = 2 * light + last
    found = _with_store(tmp_path, kept, max_bytes=bound)
    assert found["b"] == [True] * 5  # the light key keeps all: the heavy one's rows went first
    assert found["a"] == sorted(found["a"]) and not found["a"][0] and found["a"][-1]
    owners = recount(tmp_path)
    assert last > light and sum(b for b, _ in owners.values()) <= bound
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert dict(db.execute("SELECT owner, bytes FROM owners WHERE count > 0")) == {
            o: b for o, (b, _) in owners.items()}
