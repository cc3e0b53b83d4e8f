"""gateway/storage: the data directory and the stored-responses database (no server)."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from gateway.storage.paths import RESPONSES_DB, default_data_dir, prepare_data_dir
from gateway.storage.responses import ResponseStore, UnknownItem
from gateway.storage.schema import SCHEMA_VERSION, SchemaError
from tests.gateway.store_helpers import with_store as _with_store

ROOT = Path(__file__).resolve().parents[2]


def _resp(rid: str, created_at: int | None = None) -> dict[str, Any]:
    return {"id": rid, "object": "response", "created_at": created_at or int(time.time()),
            "output": [{"id": f"msg_out_{rid}", "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "hi"}]}]}


def _items(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"id": f"msg_{tag}{i}", "type": "message", "role": "user",
             "content": [{"type": "input_text", "text": str(i)}]} for i in range(n)]


def test_data_dir_created_private_and_narrowed(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    made = prepare_data_dir(tmp_path / "a" / "b")
    assert made.is_dir() and stat.S_IMODE(made.stat().st_mode) == 0o700
    wide = tmp_path / "wide"
    wide.mkdir(mode=0o755)
    wide.chmod(0o755)
    assert stat.S_IMODE(prepare_data_dir(wide).stat().st_mode) == 0o700
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "rapid-mlx"
    monkeypatch.setenv("XDG_DATA_HOME", "relative/ignored")  # the XDG spec: absolute only
    assert default_data_dir() == Path.home() / ".local" / "share" / "rapid-mlx"
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        prepare_data_dir(tmp_path / "file" / "sub")


def test_put_get_owner_delete(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        await s.put("resp_1", "alice", _resp("resp_1"), _items(3))
        assert (await s.get("resp_1", "alice")) == _resp("resp_1") | {
            "created_at": (await s.get("resp_1", "alice") or {})["created_at"]}
        assert await s.get("resp_1", "bob") is None  # another owner sees nothing
        assert await s.get("resp_2", "alice") is None
        found = await s.conversation("resp_1", "alice")
        assert found is not None and found[1] == _items(3)
        assert not await s.delete("resp_1", "bob")
        assert await s.delete("resp_1", "alice")
        assert await s.get("resp_1", "alice") is None
        assert not await s.delete("resp_1", "alice")
        assert await s.count() == 0
    _with_store(tmp_path, body)


def test_item_pages(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        await s.put("resp_1", "", _resp("resp_1"), _items(5))
        ids = [f"msg_{i}" for i in range(5)]
        page = await s.items("resp_1", "", 2, "asc", None)
        assert page is not None and [it["id"] for it in page[0]] == ids[:2] and page[1]
        page = await s.items("resp_1", "", 2, "asc", "msg_3")
        assert page is not None and [it["id"] for it in page[0]] == ["msg_4"] and not page[1]
        page = await s.items("resp_1", "", 20, "desc", None)
        assert page is not None and [it["id"] for it in page[0]] == ids[::-1] and not page[1]
        page = await s.items("resp_1", "", 2, "desc", "msg_3")
        assert page is not None and [it["id"] for it in page[0]] == ["msg_2", "msg_1"]
        assert page[1]
        assert await s.items("resp_1", "other", 2, "asc", None) is None
        with pytest.raises(UnknownItem):
            await s.items("resp_1", "", 2, "asc", "msg_nope")
    _with_store(tmp_path, body)


def test_count_bound_prunes_oldest_with_their_items(tmp_path: Path) -> None:
    async def body(s: ResponseStore) -> None:
        for i in range(5):
            await s.put(f"resp_{i}", "", _resp(f"resp_{i}"), _items(2, tag=str(i)))
        assert [await s.get(f"resp_{i}", "") is not None for i in range(5)] == [
            False, False, True, True, True]
        assert await s.count() == 3
    _with_store(tmp_path, body, max_count=3)
    with sqlite3.connect(tmp_path / RESPONSES_DB) as db:
        assert db.execute("SELECT count(*) FROM input_items").fetchone()[0] == 6  # cascaded


def test_count_bound_applies_at_open(tmp_path: Path) -> None:
    async def fill(s: ResponseStore) -> None:
        for i in range(5):
            await s.put(f"resp_{i}", "k1" if i % 2 else "k2", _resp(f"resp_{i}"), _items(1))
    _with_store(tmp_path, fill)  # no bound: all five kept

    async def check(s: ResponseStore) -> None:
        assert await s.count() == 2  # a smaller bound prunes at once, the heaviest key first
        kept = [i for i in range(5) if await s.get(f"resp_{i}", "k1" if i % 2 else "k2")]
        assert kept == [3, 4]  # k2 (0, 2, 4) gives 0; at 2 each, k1 (oldest: 1) then k2 (2)
    _with_store(tmp_path, check, max_count=2)


def test_age_bound(tmp_path: Path) -> None:
    old = int(time.time()) - 3 * 86400

    async def fill(s: ResponseStore) -> None:
        await s.put("resp_old", "", _resp("resp_old", old), _items(1))
        await s.put("resp_new", "", _resp("resp_new"), _items(1))
        assert await s.count() == 2
    _with_store(tmp_path, fill)  # no bound: both kept

    async def check(s: ResponseStore) -> None:
        assert await s.get("resp_old", "") is None  # pruned when the store opened
        assert await s.get("resp_new", "") is not None
    _with_store(tmp_path, check, max_age=86400)


def test_schema_wal_and_versions(tmp_path: Path) -> None:
    async def on_thread(s: ResponseStore) -> str:
        return await s._run(lambda: threading.current_thread().name)
    name = _with_store(tmp_path, on_thread)
    assert name.startswith("rapid-mlx-store") and name != threading.current_thread().name
    db = sqlite3.connect(tmp_path / RESPONSES_DB)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    db.close()
    with pytest.raises(SchemaError):
        _with_store(tmp_path, on_thread)


WRITER = """
import asyncio, sys, time
from pathlib import Path
from gateway.storage.responses import ResponseStore

async def main():
    store = ResponseStore(Path(sys.argv[1]))
    await store.open()
    for i in range(10_000):
        rid = f"resp_{i}"
        await store.put(rid, "", {"id": rid, "created_at": int(time.time())}, [])
        print(rid, flush=True)  # reported only once committed

asyncio.run(main())
"""


def test_sigkill_loses_no_committed_row(tmp_path: Path) -> None:
    path = tmp_path / RESPONSES_DB
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    reported = []
    for line in proc.stdout:
        reported.append(line.strip())
        if len(reported) == 300:
            os.kill(proc.pid, signal.SIGKILL)
            break
    reported += [line.strip() for line in proc.stdout if line.strip()]
    proc.wait(10)

    async def check(s: ResponseStore) -> list[str]:
        return [rid for rid in reported if await s.get(rid, "") is None]
    assert _with_store(tmp_path, check) == []


def test_reads_never_wait_for_a_write(tmp_path: Path) -> None:
    """Old code: one thread ran every job, so another key's GET waited for a put of 10,000 items
    (0.4-1 s). Now reads have their own connection and thread: a write holding the writer's
    thread (here, blocked on purpose) delays no read, and a read sees the last commit."""
    async def body(s: ResponseStore) -> None:
        await s.put("resp_1", "bob", _resp("resp_1"), _items(3))
        release = threading.Event()
        held = asyncio.ensure_future(s._run(release.wait, 30))  # the writer's thread, busy
        try:
            got = await asyncio.wait_for(s.get("resp_1", "bob"), 5)
            assert got is not None and got["id"] == "resp_1"
            found = await asyncio.wait_for(s.conversation("resp_1", "bob"), 5)
            assert found is not None and found[1] == _items(3)
            page = await asyncio.wait_for(s.items("resp_1", "bob", 2, "asc", None), 5)
            assert page is not None and len(page[0]) == 2
            assert not held.done()
        finally:
            release.set()
            await held
        await s.put("resp_2", "bob", _resp("resp_2"), _items(1))  # committed when put returns
        assert await s.get("resp_2", "bob") is not None
        assert await s.delete("resp_2", "bob") and await s.get("resp_2", "bob") is None
    _with_store(tmp_path, body)


def test_a_read_sees_one_commit_even_if_a_prune_lands_between_its_statements(
        tmp_path: Path) -> None:
    """A conversation read is two statements (the response, then its items). Between them, a
    delete committed by the writer (here by another connection, as a prune would) must not be
    seen: without one read transaction the turn came back with no history at all."""
    async def body(s: ResponseStore) -> None:
        await s.put("resp_1", "bob", _resp("resp_1"), _items(3))
        seq = s._seq

        def seq_then_delete(rid: str, owner: str) -> tuple[int, bytes] | None:
            found = seq(rid, owner)
            other = sqlite3.connect(tmp_path / RESPONSES_DB, isolation_level=None)
            other.execute("PRAGMA foreign_keys=ON")
            other.execute("DELETE FROM responses WHERE id = 'resp_1'")  # its items go too
            other.close()
            return found

        s._seq = seq_then_delete  # type: ignore[method-assign]
        found = await s.conversation("resp_1", "bob")
        s._seq = seq  # type: ignore[method-assign]
        assert found is not None and found[1] == _items(3)
        assert await s.conversation("resp_1", "bob") is None  # the delete is seen afterwards
    _with_store(tmp_path, body)
