"""The worker's outer loop: move messages in, call ``engine.step()``, move results out."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq

from protocol import messages as m
from worker.engine import Engine, KVTooSmall, QueueFull
from worker.loader import LoadedModel
from worker.prompt import PromptError, render

log = logging.getLogger("rapid_mlx.worker")

HEARTBEAT_INTERVAL = 0.5


class WorkerLoop:
    """Runs one engine behind one DEALER socket until shut down or orphaned."""

    def __init__(
        self, engine: Engine, loaded: LoadedModel, sock: zmq.Socket[bytes], alias: str, boot_id: str,
        parent_pid: int | None = None, secret: str = "",
    ) -> None:
        self.engine = engine
        self.loaded = loaded
        self.sock = sock
        self.alias = alias
        self.boot_id = boot_id
        self.parent_pid = parent_pid
        self.secret = secret  # proves to the gateway that this worker may serve the alias
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
        self._send(self._ready())
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
        pool = self.engine.kv.pool
        self._send(m.Heartbeat(boot_id=self.boot_id, step=self.engine.stats.steps,
                               running=len(self.engine.running), waiting=len(self.engine.waiting),
                               kv_used=pool.num_used, kv_total=pool.total))

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
        except KVTooSmall as exc:
            self._fail(job.request_id, str(exc), "context_length_exceeded")

    def _on_abort(self, job: m.Abort) -> None:
        self.engine.abort(job.request_ids)

    def _ready(self) -> m.Ready:
        return m.Ready(alias=self.alias, boot_id=self.boot_id, pid=os.getpid(),
                       protocol_version=m.PROTOCOL_VERSION, facts=self.loaded.facts,
                       secret=self.secret)

    def _on_status(self, job: m.StatusQuery) -> None:
        if job.query_id == m.ADOPT_QUERY:  # a restarted gateway: say Ready again
            self._send(self._ready())
            return
        self._send(m.Status(boot_id=self.boot_id, query_id=job.query_id, body=self.status()))

    def _on_shutdown(self, job: m.Shutdown) -> None:
        log.info("shutdown requested: %s", job.reason or "no reason")
        self.running = False

    def status(self) -> dict[str, Any]:
        """A snapshot of this worker for operators."""
        e = self.engine
        now = time.monotonic()
        reqs = [{"id": r.id, "phase": r.phase, "prompt_tokens": r.prompt_len,
                 "tokens": r.generated, "age_s": round(now - r.arrival, 3)}
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
            "preemptions": e.stats.preemptions, **self._kv_status(),
            # lets a restarted gateway adopt this worker without a new Ready
            "protocol_version": m.PROTOCOL_VERSION, "facts": msgspec.to_builtins(self.loaded.facts),
        }

    def _kv_status(self) -> dict[str, Any]:
        e = self.engine
        fmt = e.kv.store.fmt
        s = e.stats
        return {
            "kv_format": fmt.kind, "kv_format_note": e.kv_note, "kv_page_size": fmt.page_size,
            "kv_pages_used": e.kv.pool.num_used, "kv_pages_free": e.kv.pool.num_free,
            "kv_pages_total": e.kv.pool.total,
            "kv_bytes_per_token": fmt.bytes_per_token_per_layer() * fmt.num_layers,
            "kv_bytes_per_token_per_layer": fmt.bytes_per_token_per_layer(),
            "kv_bytes_total": e.kv.store.nbytes(),
            "kv_full_precision_tail_pages": e.kv.tails.total if e.kv.tails else 0,
            "prefix_cache": e.kv.radix is not None,
            "prefix_cache_pages": e.kv.radix.num_pages if e.kv.radix else 0,
            "prefix_cache_queries": e.kv.stats.queries, "prefix_cache_hits": e.kv.stats.hits,
            "prefix_cache_hit_rate": round(e.kv.stats.hits / e.kv.stats.queries, 4)
            if e.kv.stats.queries else 0.0,
            "prefill_tokens_per_s": round(s.prompt_tokens_computed / s.prefill_seconds, 1)
            if s.prefill_seconds else 0.0,
            "decode_tokens_per_s": round(s.decode_rows / s.decode_seconds, 1)
            if s.decode_seconds else 0.0,
        }
