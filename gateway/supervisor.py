"""Start one worker process per alias, restart it with backoff when it dies, stop it cleanly."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field

from gateway.hub import Hub

log = logging.getLogger("rapid_mlx.gateway")


@dataclass
class WorkerSpec:
    """How to start the worker of one alias."""

    alias: str
    model: str
    extra_args: list[str] = field(default_factory=list)


@dataclass
class _Proc:
    spec: WorkerSpec
    proc: asyncio.subprocess.Process | None = None
    boot_id: str | None = None
    started_at: float = 0.0
    crashes_at_start: int = 0
    task: asyncio.Task[None] | None = None
    restart_now: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    """Owns worker processes for a Hub; restarts crashed ones with exponential backoff."""

    def __init__(self, hub: Hub, specs: list[WorkerSpec], *, max_start_crashes: int = 5,
                 backoff_max: float = 30.0, stop_timeout: float = 10.0) -> None:
        self.hub = hub
        self.procs = {s.alias: _Proc(s) for s in specs}
        self.max_start_crashes = max_start_crashes
        self.backoff_max = backoff_max
        self.stop_timeout = stop_timeout
        self.stopping = False
        hub.on_hung = self.kill

    def start(self) -> None:
        """Launch every worker and its watcher task."""
        for p in self.procs.values():
            self.hub.aliases[p.spec.alias].restarts = 0
            p.task = asyncio.create_task(self._run(p), name=f"supervise-{p.spec.alias}")

    def pid(self, alias: str) -> int | None:
        """The pid of the alias's current worker process."""
        p = self.procs.get(alias)
        return p.proc.pid if p and p.proc and p.proc.returncode is None else None

    def kill(self, alias: str) -> None:
        """SIGKILL the alias's worker (hung); the watcher restarts it."""
        p = self.procs.get(alias)
        if p and p.proc and p.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                p.proc.kill()

    def _command(self, p: _Proc) -> list[str]:
        return [sys.executable, "-m", "worker", "--alias", p.spec.alias, "--model", p.spec.model,
                "--connect", self.hub.address, "--boot-id", p.boot_id or "",
                "--parent-pid", str(os.getpid()), *p.spec.extra_args]

    async def _run(self, p: _Proc) -> None:
        st = self.hub.aliases[p.spec.alias]
        delay = 0.5
        while not self.stopping:
            p.boot_id = uuid.uuid4().hex
            st.boot_id = p.boot_id
            if st.state != "draining":
                st.state = "starting"
            p.started_at = time.monotonic()
            p.proc = await asyncio.create_subprocess_exec(*self._command(p), stdin=asyncio.subprocess.DEVNULL)
            st.pid = p.proc.pid
            code = await p.proc.wait()
            reason = f"exit code {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
            self.hub.worker_gone(p.spec.alias, p.boot_id, reason)
            if self.stopping:
                break
            was_ready = st.ready_at is not None and st.ready_at >= p.started_at
            p.crashes_at_start = 0 if was_ready else p.crashes_at_start + 1
            if p.crashes_at_start >= self.max_start_crashes:
                st.state = "failed"
                log.error("worker for %s failed %d times at start-up: giving up (%s)",
                          p.spec.alias, p.crashes_at_start, reason)
                await p.restart_now.wait()
                p.restart_now.clear()
                p.crashes_at_start = 0
                continue
            delay = 0.5 if was_ready else min(delay * 2, self.backoff_max)
            st.restarts += 1
            log.warning("worker for %s exited (%s); restarting in %.1fs", p.spec.alias, reason, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(p.restart_now.wait(), delay)
            p.restart_now.clear()

    async def stop(self) -> None:
        """Stop every worker: ask, then SIGTERM, then SIGKILL."""
        self.stopping = True
        for alias in self.procs:
            self.hub.send_shutdown(alias, "gateway stopping")
        procs = [p.proc for p in self.procs.values() if p.proc and p.proc.returncode is None]
        deadline = time.monotonic() + self.stop_timeout
        for sig_step in ("wait", "term", "kill"):
            for proc in procs:
                if proc.returncode is None and sig_step != "wait":
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(signal.SIGTERM if sig_step == "term" else signal.SIGKILL)
            pending = [asyncio.create_task(pr.wait()) for pr in procs if pr.returncode is None]
            if not pending:
                break
            timeout = max(0.1, min(deadline - time.monotonic(), 3.0))
            _, still = await asyncio.wait(pending, timeout=timeout)
            for t in still:
                t.cancel()
        for p in self.procs.values():
            if p.task:
                p.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await p.task
