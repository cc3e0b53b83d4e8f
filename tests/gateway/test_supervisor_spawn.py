"""A worker that cannot be spawned (EMFILE, EAGAIN, ENOMEM) is retried: the supervision of its
alias does not end (the real Hub and Supervisor; only the spawn is made to fail once)."""

from __future__ import annotations

import asyncio
import errno
import sys
import tempfile
from typing import Any

import pytest

from gateway.plane import supervisor as sup
from gateway.plane.hub import Hub
from gateway.plane.supervisor import Supervisor, WorkerSpec


def test_a_failed_spawn_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Old code: the OSError ended the alias's supervision task; the alias was never restarted,
    even once fds were free again (found with 20000 client connections and a killed worker)."""
    real = asyncio.create_subprocess_exec
    calls: list[str] = []

    async def spawn(*args: Any, **kwargs: Any) -> Any:
        calls.append("spawn")
        if len(calls) == 1:
            raise OSError(errno.EMFILE, "Too many open files")
        kwargs.pop("env", None)
        return await real(sys.executable, "-c", "import time; time.sleep(60)", **kwargs)

    monkeypatch.setattr(sup.asyncio, "create_subprocess_exec", spawn)

    async def main() -> None:
        hub = Hub(f"ipc://{tempfile.mkdtemp()}/gw")
        hub.add_alias("a", "demo")
        s = Supervisor(hub, [WorkerSpec("a", "demo")], backoff=0.01, backoff_max=0.02)
        s.start()
        task = s.procs["a"][0].task
        assert task is not None
        for _ in range(500):
            if len(calls) == 2 and s.pid("a") is not None:
                break
            await asyncio.sleep(0.01)
        assert calls == ["spawn", "spawn"] and not task.done(), task
        assert list(hub.aliases["a"].replicas) == [s.procs["a"][0].boot_id]  # no stale entry
        await s.stop()
        await hub.close()  # a Context left to the garbage collector can block its term()

    asyncio.run(main())
