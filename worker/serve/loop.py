"""The worker's one loop: jobs in, ``runner.step()``, outputs out, heartbeats. It moves messages;
the runner (text generation, embeddings, speech...) does the work."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq

from protocol import messages as m
from worker.serve.pulse import Pulse, StepClock
from worker.serve.runner import QueueFull, Runner
from worker.serve.sigterm import SigtermDrain
from worker.serve.testhook import step_hook
from worker.serve.validate import read_job

log = logging.getLogger("rapid_mlx.worker")

HEARTBEAT_INTERVAL = 0.5
# plain ints: pyzmq's enum members cost microseconds per call, once per step here
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)


class WorkerLoop:
    """Runs one runner behind one DEALER socket until shut down or orphaned."""

    def __init__(self, runner: Runner, sock: zmq.Socket[bytes], alias: str, boot_id: str,
                 parent_pid: int | None = None, secret: str = "",
                 pulse: Pulse | None = None) -> None:
        self.runner = runner
        self.sock = sock
        self.alias = alias
        self.boot_id = boot_id
        self.parent_pid = parent_pid
        self.secret = secret  # proves to the gateway that this worker may serve the alias
        self.started = time.time()
        self.running = True
        self.stop_reason = "shutdown"
        self.sigterm = SigtermDrain()
        self.pulse = pulse  # beats while a step runs (None: heartbeats between steps only)
        self.clock = pulse.clock if pulse is not None else StepClock()
        self._hook = step_hook()  # test-only (worker/serve/testhook.py); None when serving
        self._last_beat = 0.0
        self._pending: list[m.RequestOutput] = []
        self._fd = runner.fd
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        if self._fd is not None:
            self._poller.register(self._fd, zmq.POLLIN)
        runner.attach(self)

    def run(self) -> None:
        """Say ready, then loop: jobs in, one step, outputs out, heartbeat."""
        self._send(self._ready())
        self.sigterm.install()
        runner = self.runner
        if self.pulse is not None:
            self.pulse.start()
        try:
            while self.running:
                if runner.has_work:  # between steps: no system call unless a job waits
                    woke = self._take_jobs()
                else:
                    woke = self._drain(timeout_ms=int(HEARTBEAT_INTERVAL * 1000))
                runner.collect(woke)
                self.send_outputs(self._step() if runner.has_work else [])
                self._maybe_heartbeat()
                if self.sigterm.finished(not (runner.busy or self._pending)):
                    self.running, self.stop_reason = False, "drained after SIGTERM"
        finally:
            runner.close()
            if self.pulse is not None:
                self.pulse.close()

    def _step(self) -> list[m.RequestOutput]:
        """One runner step, told to the pulse: which step runs, since when."""
        runner, clock = self.runner, self.clock
        clock.begin(runner.steps)
        try:
            if self._hook is not None:
                hook, self._hook = self._hook, None
                hook()
            return runner.step()
        finally:
            clock.end(runner.steps)

    # ---- the Outlet the runner uses -----------------------------------------------------

    def send_outputs(self, outputs: list[m.RequestOutput]) -> None:
        """Send the outputs waiting here and OUTPUTS (a runner may call it mid-step too)."""
        outputs, self._pending = self._pending + outputs, []
        if outputs:
            self._send(m.StepOutputs(boot_id=self.boot_id, step=self.runner.steps,
                                     outputs=outputs))

    def fail(self, request_id: str, message: str, code: str, param: str | None = None) -> None:
        """Answer REQUEST_ID with an error, sent with the next outputs."""
        self._pending.append(m.RequestOutput(request_id=request_id, finish_reason="error",
                                             error=message, error_code=code, error_param=param))

    def planned(self, tokens: int, pairs: int) -> None:
        """The running step's planned work: TOKENS to compute, PAIRS of attention (the gateway
        gives a step a deadline that grows with them)."""
        self.clock.planned(tokens, pairs)

    def wait(self, timeout_ms: int) -> bool:
        """Wait up to TIMEOUT_MS for a job (handled) or the runner's fd; False once stopping."""
        if self.running:
            self._drain(timeout_ms)
        return self.running

    # ---- socket side --------------------------------------------------------------------

    def _send(self, msg: Any) -> None:
        self.sock.send(m.encode(msg), copy=False)

    def _drain(self, timeout_ms: int) -> bool:
        """Wait up to TIMEOUT_MS for a job or the runner's fd; handle every job waiting.

        True when the runner's fd woke the loop (its prepared work is to be collected)."""
        events = dict(self._poller.poll(timeout_ms))
        if not events:
            return False
        if self.sock in events:
            self._take_jobs()
        return self._fd in events

    def _take_jobs(self) -> bool:
        """Handle every job frame waiting in the socket, without blocking; always False."""
        while self.running and int(self.sock.get(_EVENTS)) & _POLLIN:
            try:
                frame = self.sock.recv(_NOBLOCK)
            except zmq.Again:
                break
            self._on_frame(frame)
        return False

    def _on_frame(self, frame: bytes) -> None:
        """Handle one job frame; a bad one fails its own request (if it names one), nothing else."""
        job = read_job(frame, self.fail)
        if job is None:
            return
        try:
            if isinstance(job, m.Abort):
                self.runner.abort(job.request_ids)
            elif isinstance(job, m.StatusQuery):
                self._on_status(job)
            elif isinstance(job, m.Shutdown):
                self._on_shutdown(job)
            else:
                self._add(job)
        except Exception:  # one job's trouble must not end the others
            log.exception("job %s failed", type(job).__name__)

    def _add(self, job: m.Work) -> None:
        """Hand a request to the runner, or answer the error it refuses it with."""
        try:
            self.runner.add(job)
        except QueueFull as exc:
            self.fail(job.request_id, str(exc), "queue_full")
        except ValueError as exc:  # the runner refused this job's input (BadInput names the field)
            self.fail(job.request_id, str(exc), "invalid_request_error",
                      getattr(exc, "param", None))
        except Exception as exc:  # admitting one request must not end the others
            log.exception("request %s could not be admitted", job.request_id)
            self.fail(job.request_id, f"the worker could not accept this request: {exc}",
                      "internal_error")

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
        r = self.runner
        self._send(m.Heartbeat(boot_id=self.boot_id, step=r.steps, running=r.running,
                               waiting=r.waiting, draining=self.sigterm.draining,
                               **r.heartbeat()))

    # ---- control jobs -------------------------------------------------------------------

    def _ready(self) -> m.Ready:
        return m.Ready(alias=self.alias, boot_id=self.boot_id, pid=os.getpid(),
                       protocol_version=m.PROTOCOL_VERSION, facts=self.runner.facts,
                       secret=self.secret)

    def _on_status(self, job: m.StatusQuery) -> None:
        if job.query_id == m.ADOPT_QUERY:  # a restarted gateway: say Ready again
            self._send(self._ready())
            return
        self._send(m.Status(boot_id=self.boot_id, query_id=job.query_id, body=self.status()))

    def _on_shutdown(self, job: m.Shutdown) -> None:
        log.log(logging.ERROR if job.reason.startswith("refused") else logging.INFO,
                "shutdown requested: %s", job.reason or "no reason")
        self.running = False

    def status(self) -> dict[str, Any]:
        """A snapshot of this worker for operators (the runner adds its own numbers)."""
        return {
            "alias": self.alias, "boot_id": self.boot_id, "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3), **self.runner.status(),
            # lets a restarted gateway adopt this worker without a new Ready
            "protocol_version": m.PROTOCOL_VERSION, "facts": msgspec.to_builtins(self.runner.facts),
        }
