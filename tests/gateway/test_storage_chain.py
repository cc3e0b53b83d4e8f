"""gateway/storage: a previous_response_id chain shares its items (bytes linear in its turns)."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.responses.history import replay
from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from gateway.storage.schema import SCHEMA_VERSION
from tests.gateway.store_helpers import V1, stored_bytes
from tests.gateway.store_helpers import with_store as _with_store

Turn = tuple[str, dict[str, Any], list[dict[str, Any]]]
# the layout first merged as version 2 (items still whole in input_items), never released
V2_FIRST = [V1[0].replace("created_at INTEGER NOT NULL,", "created_at INTEGER NOT NULL, "
                          "size INTEGER NOT NULL DEFAULT 0,"), *V1[1:4],
            "CREATE TABLE usage (one INTEGER PRIMARY KEY CHECK (one = 1), bytes INTEGER NOT NULL)",
            "INSERT INTO usage VALUES (1, 0)",
            "CREATE TRIGGER usage_add AFTER INSERT ON responses "
            "BEGIN UPDATE usage SET bytes = bytes + new.size; END",
            "CREATE TRIGGER usage_sub AFTER DELETE ON responses "
            "BEGIN UPDATE usage SET bytes = bytes - old.size; END", "PRAGMA user_version=2"]


async def _conv(s: ResponseStore, rid: str, owner: str) -> tuple[Any, ...] | None:
    """The stored response and its items (conversation() without the bytes read)."""
    found = await s.conversation(rid, owner)
    return None if found is None else found[:2]


def _n(obj: Any) -> int:
    return len(msgspec.json.encode(obj))


def _msg(iid: str, role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"id": iid, "type": "message", "role": role, "content": [{"type": kind, "text": text}]}


def _chain(turns: int, text: int, tag: str = "") -> list[Turn]:
    """TURNS turns as POST /v1/responses stores them: the previous turn's items and its output
    replayed, then a new user message; each answered by one assistant message."""
    out: list[Turn] = []
    items: list[dict[str, Any]] = []
    for t in range(turns):
        if out:
            items = out[-1][2] + replay(out[-1][1])
        items = items + [_msg(f"msg_{tag}u{t}", "user", f"{t} " + "u" * text)]
        rid = f"resp_{tag}{t}"
        out.append((rid, {"id": rid, "object": "response", "created_at": int(time.time()),
                          "output": [_msg(f"msg_{tag}a{t}", "assistant", "a" * text)]}, items))
    return out


def _stored(turns: list[Turn]) -> int:
    """The bytes TURNS take stored with each item once: bodies plus distinct items (and the
    rows' costs)."""
    return stored_bytes([(r, items) for _, r, items in turns])


def _db(path: Path, sql: str) -> int:
    with sqlite3.connect(path / RESPONSES_DB) as db:
        return int(db.execute(sql).fetchone()[0])


async def _views(s: ResponseStore, rid: str, owner: str = "") -> Any:
    """Everything a client can read of RID: GET, the replay, and item pages both ways."""
    pages = []
    for order in ("asc", "desc"):
        after = None
        while True:
            page = await s.items(rid, owner, 3, order, after)  # type: ignore[arg-type]
            assert page is not None
            pages.append(page)
            if not page[1]:
                break
            after = page[0][-1]["id"]
    return await s.get(rid, owner), await s.conversation(rid, owner), pages


def test_a_chain_is_stored_linearly(tmp_path: Path) -> None:
    chain = _chain(60, 2048)

    async def body(s: ResponseStore) -> int:
        for rid, r, items in chain:
            assert await s.put(rid, "", r, items)
        assert await _conv(s, chain[-1][0], "") == (chain[-1][1], chain[-1][2])
        return await s.usage()
    usage = _with_store(tmp_path, body)
    full = sum(_n(r) + sum(_n(i) for i in items) for _, r, items in chain)  # each turn a copy
    assert usage == _stored(chain) < full / 10, (usage, full)  # ~3 texts a turn, not ~turn
    assert _db(tmp_path, "SELECT count(*) FROM item_bodies") == 2 * 60 - 1
    db = tmp_path / RESPONSES_DB
    assert db.stat().st_size < 2 * usage + (4 << 20), db.stat().st_size  # pages, slack


def test_deleting_any_turn_keeps_the_others_identical(tmp_path: Path) -> None:
    chain = _chain(8, 300)

    async def body(s: ResponseStore) -> None:
        for rid, r, items in chain:
            await s.put(rid, "", r, items)
        before = {rid: await _views(s, rid) for rid, _, _ in chain}
        for gone in (3, 0, 7, 5):  # middle, first, last, then one between deleted ones
            assert await s.delete(chain[gone][0], "")
            before.pop(chain[gone][0])
            assert {rid: await _views(s, rid) for rid in before} == before
            assert await s.usage() == _stored([t for t in chain if t[0] in before])
    _with_store(tmp_path, body)


def test_bodies_go_with_their_last_reference(tmp_path: Path) -> None:
    mine = _chain(10, 500)  # and the same items under another owner
    theirs = [("x" + rid, r | {"id": "x" + rid}, items) for rid, r, items in mine]

    async def body(s: ResponseStore) -> None:
        for (rid, r, items), (rid2, r2, items2) in zip(mine, theirs, strict=True):
            await s.put(rid, "alice", r, items)
            await s.put(rid2, "bob", r2, items2)
        assert await s.usage() == _stored(mine) + _stored(theirs)
        order = list(range(10))
        random.Random(7).shuffle(order)
        left = set(order)
        for i in order:  # alice's turns in any order; bob's stay whole
            assert await s.delete(mine[i][0], "alice")
            left.discard(i)
            assert await s.usage() == _stored([mine[j] for j in left]) + _stored(theirs)
            assert await _conv(s, theirs[9][0], "bob") == theirs[9][1:]
        for rid, _, _ in theirs:
            assert await s.delete(rid, "bob")
        assert await s.usage() == 0 and await s.count() == 0
    _with_store(tmp_path, body)
    for table in ("item_bodies", "input_items", "responses"):
        assert _db(tmp_path, f"SELECT count(*) FROM {table}") == 0, table
    assert _db(tmp_path, "SELECT bytes FROM usage") == 0


def test_byte_bound_prunes_oldest_until_the_shared_bytes_fit(tmp_path: Path) -> None:
    a, b = _chain(40, 1024, "a"), _chain(40, 1024, "b")
    chain = [t for pair in zip(a, b, strict=True) for t in pair]  # two chats, turns alternating
    bound = 64 << 10

    async def body(s: ResponseStore) -> None:
        kept: list[Turn] = []
        most = 0
        for turn in chain:
            if _stored([turn]) > bound:  # its whole conversation alone: refused, evicts nothing
                assert not await s.put(turn[0], "", turn[1], turn[2])
                assert await s.get(turn[0], "") is None
                continue
            assert await s.put(turn[0], "", turn[1], turn[2])
            kept.append(turn)
            while _stored(kept) > bound:  # the rule: the oldest go until the rest fits
                kept.pop(0)
            assert [await s.get(rid, "") is not None for rid, _, _ in chain] == [
                t in kept for t in chain]
            assert await s.usage() == _stored(kept) <= bound
            most = max(most, len(kept))
        assert most >= 12, most  # full copies of each conversation would keep at most 7
        assert await _conv(s, kept[-1][0], "") == (kept[-1][1], kept[-1][2])
    _with_store(tmp_path, body, max_bytes=bound)


@pytest.mark.parametrize("layout", [V1, V2_FIRST], ids=["v1", "v2-first"])
def test_an_older_chain_is_upgraded_to_shared_items(tmp_path: Path, layout: list[str]) -> None:
    chain = _chain(6, 400)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:  # as rapid-mlx made it before items were shared
        db.execute("PRAGMA journal_mode=WAL")
        for stmt in layout:
            db.execute(stmt)
        for owner in ("", "k"):
            for rid, r, items in chain:
                seq = db.execute("INSERT INTO responses (id, owner, created_at, body) VALUES "
                                 "(?, ?, ?, ?)", (owner + rid, owner, r["created_at"],
                                                  msgspec.json.encode(r))).lastrowid
                db.executemany("INSERT INTO input_items VALUES (?, ?, ?, ?)",
                               [(seq, p, it["id"], msgspec.json.encode(it))
                                for p, it in enumerate(items)])
        db.execute("DELETE FROM responses WHERE seq = 12")  # the highest seq, gone: not reused
    (rid, r, items), last = chain[2], chain[-1]

    async def body(s: ResponseStore) -> None:
        assert await s.usage() == _stored(chain) + _stored(chain[:-1])  # per owner
        assert await _conv(s, rid, "") == (r, items)
        assert await _conv(s, "k" + rid, "k") == (r, items)
        page = await s.items(rid, "", 2, "asc", items[1]["id"])
        assert page == (items[2:4], True)
        await s.put("resp_new", "", r | {"id": "resp_new"}, items)
        assert await _conv(s, "resp_new", "") == (r | {"id": "resp_new"}, items)
        for old, _, _ in chain:
            await s.delete(old, "")
            await s.delete("k" + old, "k")
        assert await s.usage() == _stored([("resp_new", r | {"id": "resp_new"}, items)])
        assert await s.conversation(last[0], "") is None
    _with_store(tmp_path, body)
    assert _db(tmp_path, "PRAGMA user_version") == SCHEMA_VERSION
    assert _db(tmp_path, "SELECT seq FROM responses WHERE id = 'resp_new'") == 13
    assert _db(tmp_path, "SELECT count(*) FROM item_bodies") == len(items)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
