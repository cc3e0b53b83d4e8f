"""The worker's outer loop: move messages in, call ``engine.step()``, move results out."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import zmq

from protocol import messages as m
from worker.engine import Engine, QueueFull
from worker.loader import LoadedModel
from worker.prompt import PromptError, render

log = logging.getLogger("rapid_mlx.worker")

HEARTBEAT_INTERVAL = 0.5


class WorkerLoop:
    """Runs one engine behind one DEALER socket until shut down or orphaned."""

    def __init__(
        self, engine: Engine, loaded: LoadedModel, sock: zmq.Socket[bytes], alias: str, boot_id: str,
        parent_pid: int | None = None,
    ) -> None:
        self.engine = engine
        self.loaded = loaded
        self.sock = sock
        self.alias = alias
        self.boot_id = boot_id
        self.parent_pid = parent_pid
        self.started = time.time()
        self.running = True
        self._last_beat = 0.0
        self._pending: list[m.RequestOutput] = []
        self._dispatch: dict[type, Any] = {
            m.Generate: self._on_generate,
            m.Abort: self._on_abort,
            m.StatusQuery: self._on_status,
            m.Shutdown: self._on_shutdown,
        }

    def run(self) -> None:
        """Say ready, then loop: jobs in, one step, outputs out, heartbeat."""
        self._send(m.Ready(alias=self.alias, boot_id=self.boot_id, pid=os.getpid(),
                           protocol_version=m.PROTOCOL_VERSION, facts=self.loaded.facts))
        while self.running:
            self._drain(timeout_ms=0 if self.engine.has_work else int(HEARTBEAT_INTERVAL * 1000))
            outputs = self._pending + (self.engine.step() if self.engine.has_work else [])
            self._pending = []
            if outputs:
                self._send(m.StepOutputs(boot_id=self.boot_id, step=self.engine.stats.steps,
                                         outputs=outputs))
            self._maybe_heartbeat()

    # ---- socket side --------------------------------------------------------------------

    def _send(self, msg: Any) -> None:
        self.sock.send(m.encode(msg), copy=False)

    def _drain(self, timeout_ms: int) -> None:
        if not self.sock.poll(timeout_ms):
            return
        while self.running:
            try:
                frame = self.sock.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                job = m.decode_job(frame)
            except Exception as exc:  # a malformed frame must never kill the worker
                log.error("dropping undecodable job frame: %s", exc)
                continue
            self._dispatch[type(job)](job)

    def _maybe_heartbeat(self) -> None:
        now = time.monotonic()
        if now - self._last_beat < HEARTBEAT_INTERVAL:
            return
        self._last_beat = now
        if self.parent_pid is not None and os.getppid() != self.parent_pid:
            log.error("parent process %s is gone; exiting", self.parent_pid)
            self.running = False
            return
        self._send(m.Heartbeat(boot_id=self.boot_id, step=self.engine.stats.steps,
                               running=len(self.engine.running), waiting=len(self.engine.waiting)))

    # ---- handlers -----------------------------------------------------------------------

    def _fail(self, request_id: str, message: str, code: str) -> None:
        self._pending.append(m.RequestOutput(request_id=request_id, finish_reason="error",
                                             error=message, error_code=code))

    def _on_generate(self, job: m.Generate) -> None:
        try:
            ids, think_opened = render(self.loaded.tokenizer, job)
        except PromptError as exc:
            self._fail(job.request_id, str(exc), "invalid_request_error")
            return
        ctx = self.engine.context_length
        params = job.params
        if params.max_tokens <= 0:
            params.max_tokens = max(ctx - len(ids), 0)
        if not ids or len(ids) + params.max_tokens > ctx or len(ids) >= ctx:
            if not ids:
                self._fail(job.request_id, "the prompt is empty", "invalid_request_error")
                return
            self._fail(job.request_id,
                       f"This model's maximum context length is {ctx} tokens. However, you "
                       f"requested {len(ids) + params.max_tokens} tokens ({len(ids)} in the "
                       f"messages, {params.max_tokens} in the completion). Please reduce the "
                       "length of the messages or completion.", "context_length_exceeded")
            return
        try:
            self.engine.add(job.request_id, ids, params, think_opened)
        except QueueFull as exc:
            self._fail(job.request_id, str(exc), "queue_full")

    def _on_abort(self, job: m.Abort) -> None:
        self.engine.abort(job.request_ids)

    def _on_status(self, job: m.StatusQuery) -> None:
        self._send(m.Status(boot_id=self.boot_id, query_id=job.query_id, body=self.status()))

    def _on_shutdown(self, job: m.Shutdown) -> None:
        log.info("shutdown requested: %s", job.reason or "no reason")
        self.running = False

    def status(self) -> dict[str, Any]:
        """A snapshot of this worker for operators."""
        e = self.engine
        now = time.monotonic()
        reqs = [{"id": r.id, "phase": r.phase, "prompt_tokens": len(r.prompt_ids),
                 "tokens": len(r.output_ids), "age_s": round(now - r.arrival, 3)}
                for r in [*e.running, *e.waiting]]
        return {
            "alias": self.alias, "boot_id": self.boot_id, "pid": os.getpid(),
            "model": self.loaded.facts.model, "path": str(self.loaded.path),
            "uptime_s": round(time.time() - self.started, 3), "dtype": self.loaded.facts.dtype,
            "running": len(e.running), "waiting": len(e.waiting), "requests": reqs,
            "steps": e.stats.steps, "generated_tokens": e.stats.generated_tokens,
            "prompt_tokens_computed": e.stats.prompt_tokens_computed,
            "decode_rows": e.stats.decode_rows, "finished": e.stats.finished,
            "last_step_at": e.stats.last_step_at, "max_batch": e.max_batch,
        }
