"""A long previous_response_id chain under a small --responses-max-bytes: the real gateway and
worker, the demo model, the openai SDK. Each turn names the whole conversation so far again (an
input_items row per item, repeated at every turn): the byte bound counts those rows, so the chain's
oldest turns are pruned and the database file stays within a small factor of the bound."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

BOUND = 3 << 20  # bytes
TURNS = 80
PAD = 60  # empty reasoning items a turn (they reach no prompt): many rows, a short prompt
FACTOR = 1.5  # the file (after a checkpoint) against the bound: pages, free-page slack


def _file(db: Path) -> int:
    """The database file's size once the WAL is checkpointed into it (and truncated)."""
    for _ in range(50):  # the store's own reads may hold the WAL briefly
        with sqlite3.connect(db) as conn:
            if conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0:
                return db.stat().st_size
        time.sleep(0.1)
    raise AssertionError("no checkpoint")


def test_a_long_chain_is_pruned_and_the_file_follows_the_bound() -> None:
    srv = Server("--responses-max-bytes", str(BOUND)).wait_ready()
    try:
        client = openai.OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        made: list[Any] = []
        for t in range(TURNS):
            pad: list[Any] = [{"type": "reasoning", "summary": []}] * PAD
            made.append(client.responses.create(
                model="default", input=[*pad, {"role": "user", "content": f"Hi {t}"}],
                max_output_tokens=1, temperature=0, reasoning={"effort": "none"},
                previous_response_id=made[-1].id if made else None))
            assert made[-1].store is True, t  # each turn alone fits: the chain goes on
        kept = []
        for r in made:
            try:
                kept.append(client.responses.retrieve(r.id).id == r.id)
            except openai.NotFoundError:
                kept.append(False)
        assert not kept[0] and kept[-1] and kept == sorted(kept), kept  # the oldest went
        items = client.responses.input_items.list(made[-1].id, limit=100, order="asc")
        assert items.data[PAD].type == "message"  # the newest still holds the whole chain
        db = Path(srv.own_data_dir or "") / "responses.sqlite3"
        with sqlite3.connect(db) as conn:
            counted, rows = conn.execute("SELECT (SELECT bytes FROM usage), "
                                         "(SELECT count(*) FROM input_items)").fetchone()
        size = _file(db)
        print(f"turns kept {sum(kept)}/{TURNS}, input_items rows {rows}, counted {counted}, "
              f"file {size} ({size / BOUND:.2f}x the bound)")
        assert counted <= BOUND
        # old code: nothing pruned, 200,800 rows, 6.8 MB (2.2x the bound) for 0.46 MB counted
        assert size <= FACTOR * BOUND and size <= 2 * counted, (size, counted, rows)
    finally:
        srv.stop()
