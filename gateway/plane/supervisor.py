"""Start N worker processes (replicas) per alias, restart each with backoff when it dies, swap
them, stop them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from gateway.edge.errors import APIError
from gateway.plane.drain import settle
from gateway.plane.hub import AliasState, Hub, Terminal
from gateway.plane.tp_group import group_command, group_folder, is_group
from protocol.messages import SECRET_ENV
from protocol.process import EXIT_CANNOT_LOAD

log = logging.getLogger("rapid_mlx.gateway")

_ASKED_TO_STOP = (0, -signal.SIGTERM, -signal.SIGINT)  # exits of a worker told to stop


@dataclass
class WorkerSpec:
    """How to start the worker of one alias."""

    alias: str
    model: str
    extra_args: list[str] = field(default_factory=list)
    revision: str | None = None


@dataclass
class _Proc:
    spec: WorkerSpec
    slot: int = 0  # which replica of the alias (its metrics label is r<slot>)
    proc: asyncio.subprocess.Process | None = None
    boot_id: str | None = None
    started_at: float = 0.0
    crashes_at_start: int = 0
    swapping: bool = False
    swap_exit: bool = False
    cannot_load: bool = False  # the last exit said the model cannot be loaded (not restarted)
    task: asyncio.Task[None] | None = None
    restart_now: asyncio.Event = field(default_factory=asyncio.Event)


class Supervisor:
    """Owns worker processes for a Hub; restarts crashed ones with exponential backoff."""

    def __init__(self, hub: Hub, specs: list[WorkerSpec], *, max_start_crashes: int = 5,
                 backoff: float = 0.5, backoff_max: float = 30.0, stop_timeout: float = 5.0,
                 replicas: int = 1) -> None:
        self.hub = hub
        self.procs = {s.alias: [_Proc(s, slot) for slot in range(max(replicas, 1))]
                      for s in specs}
        self.max_start_crashes = max_start_crashes
        self.backoff = backoff
        self.backoff_max = backoff_max
        self.stop_timeout = stop_timeout
        self.stopping = False
        self.gave_up = False  # every alias failed to start: the server should exit (on_all_failed)
        self.final_failures: list[tuple[str, str, bool]] = []  # failures() when it gave up
        self.on_all_failed: Callable[[], None] | None = None
        hub.on_hung = self.kill

    def start(self) -> None:
        """Launch every worker and its watcher task."""
        for alias, ps in self.procs.items():
            self.hub.aliases[alias].restarts = 0
            for p in ps:
                p.task = asyncio.create_task(self._run(p), name=f"supervise-{alias}-{p.slot}")

    def _all(self) -> list[_Proc]:
        return [p for ps in self.procs.values() for p in ps]

    def pid(self, alias: str) -> int | None:
        """The pid of the alias's first live worker process."""
        return next((p.proc.pid for p in self.procs.get(alias, [])
                     if p.proc and p.proc.returncode is None), None)

    def kill(self, alias: str, boot_id: str | None = None) -> None:
        """SIGKILL the alias's worker BOOT_ID (hung; default: every one); the watcher restarts it."""
        for p in self.procs.get(alias, []):
            if p.proc and p.proc.returncode is None and boot_id in (None, p.boot_id):
                with contextlib.suppress(ProcessLookupError):
                    if is_group(p.spec.extra_args):  # every rank of a tensor-parallel group
                        os.killpg(p.proc.pid, signal.SIGKILL)
                    else:
                        p.proc.kill()

    async def swap(self, alias: str, model: str | None, revision: str | None,
                   drain_timeout: float) -> None:
        """Restart ALIAS's workers (optionally on another MODEL) once its requests drained."""
        ps = self.procs[alias]
        if self.stopping or self.hub.draining:
            raise APIError(503, "The server is shutting down.", type="server_error",
                           code="server_shutting_down")
        if any(p.swapping for p in ps):
            raise APIError(409, f"A swap of '{alias}' is already in progress.", code="swap_in_progress")
        st = self.hub.aliases[alias]
        for p in ps:
            p.swapping = True
        try:
            if model:
                for p in ps:
                    p.spec.model, p.spec.revision = model, revision
            st.restarting = True
            live = [p for p in ps if p.proc is not None and p.proc.returncode is None]
            for p in ps:
                if p not in live:  # failed or between restarts
                    p.restart_now.set()
            if not live:
                st.state = "starting"
                return
            st.state = "draining"
            st.ready_event.clear()
            for r in st.replicas.values():
                if r.state == "ready":
                    r.state = "draining"  # no new work; the restarted ones come up ready
            left = await settle([st], drain_timeout)
            if left:
                self.hub.fail_streams(st, Terminal(
                    f"The model '{alias}' is being swapped; this request was ended after "
                    f"{drain_timeout:g}s.", code="model_swapped"))
            for p in live:
                p.swap_exit = True
                if not self.hub.send_shutdown(alias, "swap", p.boot_id) and p.proc is not None:
                    with contextlib.suppress(ProcessLookupError):
                        p.proc.terminate()  # still loading: it cannot read a Shutdown yet
            await asyncio.gather(*(_terminate(p.proc, self.stop_timeout) for p in live
                                   if p.proc is not None))
        finally:
            for p in ps:
                p.swapping = False

    def _command(self, p: _Proc) -> list[str]:
        cmd = [sys.executable, "-m", "worker", "--alias", p.spec.alias, "--model", p.spec.model,
               "--connect", self.hub.address, "--boot-id", p.boot_id or "",
               "--parent-pid", str(os.getpid()), *p.spec.extra_args]
        if self.hub.curve is not None:
            cmd += self.hub.curve.client_args()
        cmd += ["--revision", p.spec.revision] if p.spec.revision else []
        return group_command(cmd) if is_group(p.spec.extra_args) else cmd

    async def _run(self, p: _Proc) -> None:
        alias = p.spec.alias
        st = self.hub.aliases[alias]
        delay = self.backoff
        while not self.stopping:
            p.boot_id = uuid.uuid4().hex
            secret = secrets.token_hex(32)  # this boot's proof; in the environment, not argv
            self.hub.expect_worker(alias, p.boot_id, secret, f"r{p.slot}")
            st.model, st.revision = p.spec.model, p.spec.revision
            if not self.hub.draining and not st.ready_replicas():
                st.state = "starting"
            p.started_at = time.monotonic()
            # Own session: a terminal's Ctrl-C is the gateway's to handle (it stops its workers;
            # a worker still starting Python would print a KeyboardInterrupt traceback), and
            # killpg reaches every rank of a tensor-parallel group.
            with group_folder(p.spec.extra_args) as folder:  # removed once the group is gone
                try:
                    p.proc = await asyncio.create_subprocess_exec(
                        *self._command(p), stdin=asyncio.subprocess.DEVNULL,
                        env={**os.environ, SECRET_ENV: secret, **folder}, start_new_session=True)
                except OSError as exc:  # out of fds, processes or memory: not the model's fault
                    p.proc = None
                    st.replicas.pop(p.boot_id, None)  # never started: not a replica
                    delay = min(delay * 2, self.backoff_max)
                    log.error("cannot start a worker for %s (%s); retrying in %.1fs", alias, exc,
                              delay)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(p.restart_now.wait(), delay)
                    p.restart_now.clear()
                    continue
                self.hub.spawned(alias, p.boot_id, p.proc.pid)
                code = await p.proc.wait()
            reason = f"exit code {code}" if code >= 0 else f"killed by {signal.Signals(-code).name}"
            swapped, p.swap_exit = p.swap_exit, False
            self.hub.worker_gone(alias, p.boot_id, f"swapped ({reason})" if swapped else reason)
            if not swapped and code in _ASKED_TO_STOP:
                await self._settle(1.0)  # a signal to our whole cgroup (systemd) reaches us too
            if self.stopping or self.hub.draining:
                break
            was_ready = p.boot_id in self.hub.accepted
            if swapped:
                p.crashes_at_start, delay = 0, self.backoff
                self.hub.count_restart(alias)
                continue
            p.crashes_at_start = 0 if was_ready else p.crashes_at_start + 1
            if not was_ready:
                st.restarting = False  # it never came up: do not make clients wait for it
            cannot_load = code == EXIT_CANNOT_LOAD
            if cannot_load:
                await self._await_dead(st, reason)
                st.last_exit = _load_failure(st.last_exit, reason)
            if cannot_load or p.crashes_at_start >= self.max_start_crashes:
                if not st.ready_replicas():  # other replicas serve on: only this one waits
                    st.state = "failed"
                p.cannot_load = cannot_load
                self._failed(p, reason)
                await p.restart_now.wait()
                p.restart_now.clear()
                p.crashes_at_start, p.cannot_load = 0, False
                self.hub.count_restart(alias)
                continue
            delay = self.backoff if was_ready else min(delay * 2, self.backoff_max)
            self.hub.count_restart(alias)
            log.warning("worker for %s exited (%s); restarting in %.1fs", alias, reason, delay)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(p.restart_now.wait(), delay)
            p.restart_now.clear()

    async def _await_dead(self, st: AliasState, reason: str, timeout: float = 0.5) -> None:
        """The exit may be seen before the worker's Dead message is read: wait for it a little."""
        deadline = time.monotonic() + timeout
        while st.last_exit == reason and time.monotonic() < deadline:
            await asyncio.sleep(0.02)

    async def _settle(self, timeout: float) -> None:
        """Give a gateway shutdown that is under way TIMEOUT seconds to show (stopping/draining)."""
        deadline = time.monotonic() + timeout
        while not (self.stopping or self.hub.draining) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)

    def _failed(self, p: _Proc, reason: str) -> None:
        """P's alias is failed: say so once; when no alias could start at all, give up."""
        alias = p.spec.alias
        if self.all_failed and not self.served_once:
            self.gave_up, self.final_failures = True, self.failures()
            if self.on_all_failed is not None:
                self.on_all_failed()
            return
        if p.cannot_load:
            log.error("%s is failed and not restarted (the other models keep serving): %s",
                      alias, self.hub.aliases[alias].last_exit)
        else:
            log.error("worker for %s failed %d times at start-up: giving up (%s)",
                      alias, p.crashes_at_start, reason)

    @property
    def served_once(self) -> bool:
        """True once any alias has been ready: later failures (a bad swap) leave the server up."""
        return any(self.hub.aliases[a].ready_at is not None for a in self.procs)


    @property
    def all_failed(self) -> bool:
        """True when every alias is failed: nothing is left to serve."""
        return all(self.hub.aliases[a].state == "failed" for a in self.procs)

    def failures(self) -> list[tuple[str, str, bool]]:
        """(alias, last exit, could not load) of every failed alias."""
        return [(a, self.hub.aliases[a].last_exit or "unknown", any(p.cannot_load for p in ps))
                for a, ps in self.procs.items() if self.hub.aliases[a].state == "failed"]

    async def stop(self) -> None:
        """Stop every worker: ask, then SIGTERM, then SIGKILL."""
        self.stopping = True
        for p in self._all():
            if not self.hub.send_shutdown(p.spec.alias, "gateway stopping", p.boot_id) \
                    and p.proc is not None and p.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    p.proc.terminate()  # still loading: it cannot read a Shutdown yet
        procs = [p.proc for p in self._all() if p.proc and p.proc.returncode is None]
        await asyncio.gather(*(_terminate(pr, self.stop_timeout) for pr in procs))
        for p in self._all():
            self.hub.aliases[p.spec.alias].state = "stopped"
            if p.task:
                p.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await p.task


def _load_failure(last_exit: str | None, reason: str) -> str:
    """The worker's one-line reason (its Dead message) without the exit code, or a stand-in."""
    last_exit = last_exit or ""
    if last_exit.endswith(f", then {reason}"):
        return last_exit[: -len(f", then {reason}")]
    if last_exit.startswith(f"{reason}, then "):
        return last_exit[len(f"{reason}, then "):]
    return (f"{reason}: the model cannot be loaded (run with --log-level debug to see the "
            "worker's reason)")


async def _terminate(proc: asyncio.subprocess.Process, timeout: float) -> None:
    """Wait for PROC to exit (it was asked to); SIGTERM after TIMEOUT, then SIGKILL after 3 s."""
    for sig, wait in ((None, timeout), (signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        if proc.returncode is not None:
            return
        if sig is not None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), wait)
