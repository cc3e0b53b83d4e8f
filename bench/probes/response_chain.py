"""Bytes on disk and put time of one long `previous_response_id` chain in the response store.

.venv/bin/python -m bench.probes.response_chain [--turns 200] [--text 4096] [--dir DIR]

Stores TURNS turns as POST /v1/responses does (gateway/responses/stored.py): each turn's items
are the previous turn's items, its output replayed (history.replay), then a new user message of
TEXT characters; its response has one assistant message of TEXT characters. Prints the file size
(database + WAL, after close), the store's byte total, the new text stored, and the put time of
the first and last ten turns and the read of the last ten conversations (medians, ms). Run with PYTHONPATH at another tree to measure it.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics as stats
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from gateway.responses.history import replay
from gateway.storage.paths import RESPONSES_DB
from gateway.storage.responses import ResponseStore


def _message(role: str, text: str) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"id": f"msg_{uuid.uuid4().hex}", "type": "message", "role": role,
            "content": [{"type": kind, "text": text}]}


async def chain(path: Path, turns: int, text: int) -> dict[str, float]:
    """Store the chain in a new database at PATH; the numbers."""
    store = ResponseStore(path, max_count=0, max_age=0, max_bytes=0)
    await store.open()
    items: list[dict[str, Any]] = []
    prev: dict[str, Any] | None = None
    times, reads, new = [], [], 0
    for turn in range(turns):
        if prev is not None:
            t0 = time.perf_counter()
            found = await store.conversation(prev["id"], "")
            reads.append(time.perf_counter() - t0)
            assert found is not None
            items = found[1] + replay(found[0])
        user = _message("user", f"{turn:05d} " + "u" * text)
        items = items + [user]
        rid = f"resp_{uuid.uuid4().hex}"
        response = {"id": rid, "object": "response", "created_at": int(time.time()),
                    "status": "completed", "previous_response_id": prev and prev["id"],
                    "output": [_message("assistant", f"{turn:05d} " + "a" * text)]}
        new += 2 * text
        t0 = time.perf_counter()
        assert await store.put(rid, "", response, items)
        times.append(time.perf_counter() - t0)
        prev = response
    usage = await store.usage()
    await store.close()
    files = sum(p.stat().st_size for p in path.parent.glob(path.name + "*"))
    return {"file_mib": files / 2**20, "usage_mib": usage / 2**20, "new_mib": new / 2**20,
            "put_first_ms": 1e3 * stats.median(times[:10]),
            "put_last_ms": 1e3 * stats.median(times[-10:]),
            "put_total_s": sum(times), "read_last_ms": 1e3 * stats.median(reads[-10:])}


def main() -> None:
    """Run one chain and print its numbers."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--text", type=int, default=4096)
    ap.add_argument("--dir", type=Path, default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        out = asyncio.run(chain(Path(d) / RESPONSES_DB, a.turns, a.text))
    print(" ".join(f"{k}={v:.2f}" for k, v in out.items()))


if __name__ == "__main__":
    main()
