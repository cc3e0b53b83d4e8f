"""gateway/storage: over a bound, the owner (API key) holding the most gives way, oldest first."""

from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore
from gateway.storage.schema import BODY_ROW, ITEM_ROW, RESPONSE_ROW, SCHEMA_VERSION, sha256
from tests.gateway.store_helpers import V2, recount, stored_bytes
from tests.gateway.store_helpers import with_store as _with_store

KIB = 1024


def _resp(rid: str) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": int(time.time())}


def _items(rid: str, size: int, shared: int = 0) -> list[dict[str, Any]]:
    """One item of its own (SIZE bytes of text) and SHARED items every response of the owner
    repeats (as the turns of a chain do)."""
    own = [{"id": f"msg_{rid}", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "x" * size}]}]
    return [{"id": f"msg_s{i}", "type": "message", "role": "user",
             "content": [{"type": "input_text", "text": "s" * 300}]} for i in range(shared)] + own


def _size(rid: str, size: int) -> int:
    return stored_bytes([(_resp(rid), _items(rid, size))])


async def _kept(s: ResponseStore, rids: list[tuple[str, str]]) -> list[bool]:
    return [await s.get(rid, owner) is not None for rid, owner in rids]


def _owners(path: Path) -> tuple[dict[str, tuple[int, int]], dict[str, tuple[int, int]]]:
    """The per-owner (bytes, responses) the triggers kept, and the same recomputed from rows."""
    with sqlite3.connect(path / RESPONSES_DB) as db:
        kept = {o: (b, n) for o, b, n in db.execute("SELECT owner, bytes, count FROM owners")
                if (b, n) != (0, 0)}
        rows = recount(path)
        total = db.execute("SELECT bytes, count FROM usage").fetchone()
        assert tuple(total) == (sum(b for b, _ in rows.values()), sum(n for _, n in rows.values()))
        assert db.execute("SELECT count(*) FROM responses r WHERE items != (SELECT count(*) "
                          "FROM input_items i WHERE i.response_seq = r.seq)").fetchone()[0] == 0
    return kept, rows


def test_a_heavy_owner_evicts_its_own_oldest_not_a_light_ones(tmp_path: Path) -> None:
    one = _size("resp_a00", 4 * KIB)
    light = [(f"resp_b{i:02}", "light") for i in range(3)]
    heavy = [(f"resp_a{i:02}", "heavy") for i in range(30)]

    async def body(s: ResponseStore) -> None:
        for rid, owner in light + heavy:  # the light key first: the oldest in the store
            assert await s.put(rid, owner, _resp(rid), _items(rid, 4 * KIB))
            assert await s.usage() <= 10 * one
        assert await _kept(s, light) == [True] * 3  # lost nothing
        assert await _kept(s, heavy) == [False] * 23 + [True] * 7  # its 23 oldest went
        assert await s.usage() == 10 * one
        for i in range(3, 30):  # now the light one grows: it gives way once it holds more
            rid = f"resp_b{i:02}"
            assert await s.put(rid, "light", _resp(rid), _items(rid, 4 * KIB))
        assert await _kept(s, heavy) == [False] * 25 + [True] * 5  # down to the light one's level
        assert await _kept(s, [(f"resp_b{i:02}", "light") for i in range(30)]) == \
            [False] * 25 + [True] * 5
    _with_store(tmp_path, body, max_bytes=10 * one + one // 2)


def test_count_bound_takes_from_the_owner_with_most_responses(tmp_path: Path) -> None:
    light = [(f"resp_b{i}", "light") for i in range(2)]
    heavy = [(f"resp_a{i:02}", "heavy") for i in range(12)]

    async def body(s: ResponseStore) -> None:
        for rid, owner in light + heavy:
            assert await s.put(rid, owner, _resp(rid), _items(rid, 10))
        assert await _kept(s, light) == [True, True]
        assert await _kept(s, heavy) == [False] * 9 + [True] * 3
        assert await s.count() == 5
    _with_store(tmp_path, body, max_count=5)
    kept, rows = _owners(tmp_path)
    assert kept == rows and kept["heavy"][1] == 3 and kept["light"][1] == 2


def test_the_response_just_stored_is_kept_when_its_owner_is_the_heaviest(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        for i in range(3):
            assert await s.put(f"resp_b{i}", "light", _resp(f"resp_b{i}"), _items(str(i), KIB))
        assert await s.put("resp_big", "heavy", _resp("resp_big"), _items("big", 6 * KIB))
        assert await s.get("resp_big", "heavy") is not None  # put said True: it is there
        assert await _kept(s, [(f"resp_b{i}", "light") for i in range(3)]) == [False, True, True]
    big = stored_bytes([(_resp("resp_big"), _items("big", 6 * KIB))])
    light = stored_bytes([(_resp("resp_b0"), _items("0", KIB))])
    _with_store(tmp_path, body, max_bytes=big + 2 * light + light // 2)


@pytest.mark.parametrize("bound", ["bytes", "count"])
def test_one_owner_still_loses_its_oldest_first(tmp_path: Path, bound: str) -> None:
    rng = random.Random(5)
    sizes = [rng.randrange(200, 3000) for _ in range(60)]
    limit = 12 * KIB if bound == "bytes" else 7

    def stored(i: int) -> int:
        return stored_bytes([(_resp(f"resp_{i}"), _items(str(i), sizes[i]))])

    async def body(s: ResponseStore) -> None:
        kept: list[int] = []
        for i, size in enumerate(sizes):
            assert await s.put(f"resp_{i}", "k", _resp(f"resp_{i}"), _items(str(i), size))
            kept.append(i)
            while (sum(stored(j) for j in kept) if bound == "bytes" else len(kept)) > limit:
                kept.pop(0)  # the rule before owners counted: the oldest go until the rest fits
            assert await _kept(s, [(f"resp_{j}", "k") for j in range(60)]) == [
                j in kept for j in range(60)]
    _with_store(tmp_path, body, **{f"max_{bound}": limit})


def _random_items(rng: random.Random, rid: str, prev: list[dict[str, Any]] | None
                  ) -> list[dict[str, Any]]:
    """A new conversation (its own item and up to 3 shared ones), or the continuation of PREV
    (its items again, as a previous_response_id turn names them, then a new one), some repeated:
    many rows, few bodies."""
    if prev is None or rng.random() < 0.5:
        items = _items(rid, rng.randrange(100, 4 * KIB), rng.randrange(4))
    else:
        items = prev + _items(rid, rng.randrange(10, 300))[-1:]
    reps = rng.randrange(30) if rng.random() < 0.95 else rng.randrange(200, 700)  # rows alone
    return items + items[:1 + rng.randrange(2)] * reps  # may outgrow the per-key bound


def test_per_owner_totals_follow_random_puts_deletes_and_evictions(tmp_path: Path) -> None:
    rng = random.Random(11)
    owners = ["", "key_a", "key_b", "key_c"]
    weight = [1, 6, 2, 1]  # key_a writes the most
    bound = 40 * KIB

    async def body(s: ResponseStore) -> None:
        live: dict[str, str] = {}
        order: dict[str, list[str]] = {o: [] for o in owners}
        convs: dict[str, list[dict[str, Any]]] = {}
        seen = {"refused": 0, "evicted": 0, "rows": 0}
        for step in range(400):
            owner = rng.choices(owners, weight)[0]
            if live and rng.random() < 0.15:
                rid = rng.choice(sorted(live))
                assert await s.delete(rid, live.pop(rid))
                continue
            if live and rng.random() < 0.05:  # a re-put replaces (and becomes the newest)
                rid = rng.choice(sorted(live))
                owner = live[rid]
            else:
                rid = f"resp_{step}"
            mine = [r for r in order[owner] if r in live]
            items = _random_items(rng, rid, convs.get(rng.choice(mine)) if mine else None)
            if not await s.put(rid, owner, _resp(rid), items):  # a chain outgrew a bound
                assert stored_bytes([(_resp(rid), items)]) > min(bound, s.max_bytes_per_key)
                assert (await s.get(rid, owner) is None) == (rid not in live)  # nothing changed
                seen["refused"] += 1
                continue
            live[rid], convs[rid] = owner, items
            order[owner] = [r for r in order[owner] if r != rid] + [rid]
            assert await s.get(rid, owner) is not None  # the one just stored stays
            for o in owners:  # evictions within an owner: its oldest first
                here = [await s.get(r, o) is not None for r in order[o] if r in live]
                assert here == sorted(here), (o, here)
            for gone in [r for r, o in live.items() if await s.get(r, o) is None]:
                live.pop(gone)
                seen["evicted"] += 1
            seen["rows"] = max(seen["rows"], len(items))
            assert await s.usage() <= bound
            if step % 50 == 0:  # the totals kept equal a recount, while the store is open too
                kept, rows = _owners(tmp_path)
                assert kept == rows, step
        assert await s.count() == len(live)
        assert seen["refused"] > 0 and seen["evicted"] > 50 and seen["rows"] > 100, seen
    _with_store(tmp_path, body, max_bytes=bound, max_count=60, max_bytes_per_key=16 * KIB)
    kept, rows = _owners(tmp_path)
    assert kept == rows and len(rows) >= 3
    assert max(b for b, _ in rows.values()) <= 16 * KIB

    async def usage(s: ResponseStore) -> int:
        return await s.usage()
    for bounds in ({"max_bytes_per_key": 8 * KIB}, {"max_bytes": 12 * KIB}, {"max_count": 4}):
        left = _with_store(tmp_path, usage, **bounds)  # smaller bounds apply at open
        kept, rows = _owners(tmp_path)
        assert kept == rows and left == sum(b for b, _ in rows.values())
        assert sum(n for _, n in rows.values()) <= bounds.get("max_count", 60)
        assert left <= bounds.get("max_bytes", bound)
        assert max(b for b, _ in rows.values()) <= 8 * KIB
    assert rows and left > 0  # something is left to check


def _v2_store(path: Path) -> dict[str, list[str]]:
    """A version-2 database (as an earlier rapid-mlx left it) with two owners' responses,
    filled through its own triggers; the response ids of each owner, oldest first."""
    made: dict[str, list[str]] = {"a": [], "b": []}
    with sqlite3.connect(path / RESPONSES_DB) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        for stmt in V2:
            db.execute(stmt)
        shared = msgspec.json.encode(_items("x", 10, 1)[0])
        for i in range(9):
            owner = "b" if i < 2 else "a"
            rid = f"resp_{owner}{i}"
            made[owner].append(rid)
            own = msgspec.json.encode(_items(rid, 2 * KIB)[0])
            ids = []
            for b in (shared, own):
                db.execute("INSERT OR IGNORE INTO item_bodies (owner, hash, item_id, size, body) "
                           "VALUES (?, ?, 'msg', ?, ?)", (owner, sha256(b), len(b), b))
                ids.append(db.execute("SELECT id FROM item_bodies WHERE owner = ? AND hash = ?",
                                      (owner, sha256(b))).fetchone()[0])
            body = msgspec.json.encode(_resp(rid))
            seq = db.execute("INSERT INTO responses (id, owner, created_at, size, body) VALUES "
                             "(?, ?, ?, ?, ?)", (rid, owner, int(time.time()),
                                                 len(body) + len(shared) + len(own), body)
                             ).lastrowid
            db.executemany("INSERT INTO input_items VALUES (?, ?, ?)",
                           [(seq, p, bid) for p, bid in enumerate(ids)])
    return made


def test_a_version_2_database_is_upgraded_with_per_owner_totals(tmp_path: Path) -> None:
    made = _v2_store(tmp_path)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        before = db.execute("SELECT bytes FROM usage").fetchone()[0]  # the JSON alone then
        before += sum(n * cost for n, cost in zip(db.execute(
            "SELECT (SELECT count(*) FROM responses), (SELECT count(*) FROM input_items), "
            "(SELECT count(*) FROM item_bodies)").fetchone(), (RESPONSE_ROW, ITEM_ROW, BODY_ROW),
            strict=True))  # and now the rows' costs

    async def body(s: ResponseStore) -> None:
        assert await s.usage() == before and await s.count() == 9
        bound = s.max_bytes = before - KIB  # the next put is over the bound: key a gives way
        rid = "resp_a9"
        assert await s.put(rid, "a", _resp(rid), _items(rid, 2 * KIB))
        assert await s.usage() <= bound
        assert await _kept(s, [(r, "b") for r in made["b"]]) == [True, True]
        assert await _kept(s, [(r, "a") for r in made["a"]]) == [False, False] + [True] * 5
    _with_store(tmp_path, body)
    kept, rows = _owners(tmp_path)
    assert kept == rows and rows["a"][1] == 6 and rows["b"][1] == 2
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        plan = " ".join(r[3] for r in db.execute(
            "EXPLAIN QUERY PLAN SELECT seq, size FROM responses WHERE owner = 'a' AND seq < 9 "
            "ORDER BY seq"))
        assert "responses_owner" in plan, plan  # the eviction walks the index, not the table



def test_the_per_key_bound_caps_one_owner_alone(tmp_path: Path) -> None:
    one = _size("resp_a00", 3 * KIB)
    others = [(f"resp_b{i:02}", "b") for i in range(2)]
    mine = [(f"resp_a{i:02}", "a") for i in range(10)]

    async def body(s: ResponseStore) -> None:
        for rid, owner in others + mine:
            assert await s.put(rid, owner, _resp(rid), _items(rid, 3 * KIB))
        assert await _kept(s, others) == [True, True]
        assert await _kept(s, mine) == [False] * 7 + [True] * 3  # its 3 newest fit the cap
        before = await s.usage()
        assert not await s.put("resp_a99", "a", _resp("resp_a99"), _items("resp_a99", 4 * one))
        assert await s.usage() == before and await _kept(s, mine[-3:]) == [True] * 3
    _with_store(tmp_path, body, max_bytes_per_key=3 * one + one // 2)
    assert _owners(tmp_path)[0] == {"a": (3 * one, 3), "b": (2 * one, 2)}

    async def reopened(s: ResponseStore) -> list[bool]:
        return await _kept(s, others + mine[-3:])
    assert _with_store(tmp_path, reopened, max_bytes_per_key=one + one // 2) == [False, True] + \
        [False, False, True]  # a smaller cap applies at open, to each owner above it
    kept, rows = _owners(tmp_path)
    assert kept == rows == {"a": (one, 1), "b": (one, 1)}


def test_of_owners_holding_as_much_the_one_with_the_oldest_gives_way(tmp_path: Path) -> None:
    rids = [("resp_b1", "b"), ("resp_b2", "b"), ("resp_a1", "a"), ("resp_a2", "a")]

    async def body(s: ResponseStore) -> None:
        for rid, owner in rids:  # the last put makes it 2 and 2: b holds the oldest
            assert await s.put(rid, owner, _resp(rid), _items(rid, 10))
        assert await _kept(s, rids) == [False, True, True, True]
    _with_store(tmp_path, body, max_count=3)
