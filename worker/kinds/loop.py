"""The loop of a non-generate worker: jobs in, ``runner.step()``, outputs out, heartbeats."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq

from protocol import messages as m
from worker.kinds.runner import QueueFull, Runner
from worker.serve.sigterm import SigtermDrain
from worker.serve.validate import read_job

log = logging.getLogger("rapid_mlx.worker")

HEARTBEAT_INTERVAL = 0.5


class KindLoop:
    """Runs one runner behind one DEALER socket until shut down or orphaned."""

    def __init__(self, runner: Runner, sock: zmq.Socket[bytes], alias: str, boot_id: str,
                 parent_pid: int | None = None, secret: str = "", path: str = "") -> None:
        self.runner = runner
        self.sock = sock
        self.alias = alias
        self.boot_id = boot_id
        self.parent_pid = parent_pid
        self.secret = secret
        self.path = path
        self.started = time.time()
        self.running = True
        self.stop_reason = "shutdown"
        self.sigterm = SigtermDrain()
        self.steps = 0
        self.failed = 0
        self._last_beat = 0.0
        self._pending: list[m.RequestOutput] = []

    def run(self) -> None:
        """Say ready, then loop: jobs in, one step, outputs out, heartbeat."""
        self._send(self._ready())
        self.sigterm.install()
        while self.running:
            self._drain(0 if self.runner.has_work else int(HEARTBEAT_INTERVAL * 1000))
            outputs, self._pending = self._pending, []
            if self.runner.has_work:
                outputs += self.runner.step()
                self.steps += 1
            if outputs:
                self._send(m.StepOutputs(boot_id=self.boot_id, step=self.steps, outputs=outputs))
            self._maybe_heartbeat()
            if self.sigterm.finished(not (self.runner.has_work or self._pending)):
                self.running, self.stop_reason = False, "drained after SIGTERM"

    def _send(self, msg: Any) -> None:
        self.sock.send(m.encode(msg), copy=False)

    def _drain(self, timeout_ms: int) -> None:
        if not self.sock.poll(timeout_ms, zmq.POLLIN):
            return
        while self.running:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._on_frame(frame)

    def _on_frame(self, frame: bytes) -> None:
        """Handle one job frame; a bad one fails its own request (if it names one), nothing else."""
        job = read_job(frame, self._fail)
        if job is None:
            return
        if isinstance(job, m.Abort):
            self.runner.abort(job.request_ids)
        elif isinstance(job, m.StatusQuery):
            self._on_status(job)
        elif isinstance(job, m.Shutdown):
            log.log(logging.ERROR if job.reason.startswith("refused") else logging.INFO,
                    "shutdown requested: %s", job.reason or "no reason")
            self.running = False
        else:
            self._add(job)

    def _add(self, job: m.Work) -> None:
        try:
            self.runner.add(job)
        except QueueFull as exc:
            self._fail(job.request_id, str(exc), "queue_full")
        except ValueError as exc:  # the runner refused this job's input (BadInput names the field)
            self._fail(job.request_id, str(exc), "invalid_request_error",
                       getattr(exc, "param", None))
        except Exception as exc:  # admitting one request must not end the others
            log.exception("request %s could not be admitted", job.request_id)
            self._fail(job.request_id, f"the worker could not start this request: {exc}",
                       "internal_error")

    def _fail(self, request_id: str, message: str, code: str, param: str | None = None) -> None:
        self._pending.append(m.RequestOutput(request_id=request_id, finish_reason="error",
                                             error=message, error_code=code, error_param=param))

    def _maybe_heartbeat(self) -> None:
        now = time.monotonic()
        since = self.sigterm.since  # the first draining heartbeat goes out at once
        if now - self._last_beat < HEARTBEAT_INTERVAL and not (
                since is not None and self._last_beat < since):
            return
        self._last_beat = now
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.error("parent process %s is gone; exiting", self.parent_pid)
            self.running = False
            return
        self._send(m.Heartbeat(boot_id=self.boot_id, step=self.steps,
                               running=self.runner.running, waiting=self.runner.waiting,
                               draining=self.sigterm.draining))

    def _ready(self) -> m.Ready:
        return m.Ready(alias=self.alias, boot_id=self.boot_id, pid=os.getpid(),
                       protocol_version=m.PROTOCOL_VERSION, facts=self.runner.facts,
                       secret=self.secret)

    def _on_status(self, job: m.StatusQuery) -> None:
        if job.query_id == m.ADOPT_QUERY:  # a restarted gateway: say Ready again
            self._send(self._ready())
            return
        self._send(m.Status(boot_id=self.boot_id, query_id=job.query_id, body=self.status()))

    def status(self) -> dict[str, Any]:
        """A snapshot of this worker for operators (the runner adds its own numbers)."""
        facts = self.runner.facts
        return {
            "alias": self.alias, "boot_id": self.boot_id, "pid": os.getpid(),
            "kind": facts.kind, "model": facts.model, "path": self.path,
            "uptime_s": round(time.time() - self.started, 3), "dtype": facts.dtype,
            "running": self.runner.running, "waiting": self.runner.waiting, "steps": self.steps,
            **self.runner.status(),
            # lets a restarted gateway adopt this worker without a new Ready
            "protocol_version": m.PROTOCOL_VERSION, "facts": msgspec.to_builtins(facts),
        }
