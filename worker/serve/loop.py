"""The worker's outer loop: move messages in, call ``engine.step()``, move results out."""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import msgspec
import zmq

from protocol import messages as m
from worker.engine.compile_mode import compile_status
from worker.engine.core import Engine, KVTooSmall, QueueFull
from worker.grammar.compiler import GrammarCompiler
from worker.kv.dense import dense_status
from worker.kv.pages import page_status
from worker.kv.rows import row_write_status
from worker.kv.working import working_set_status
from worker.model.load import LoadedModel
from worker.serve.intake import CHARS_PER_TOKEN, Intake, Prepared
from worker.serve.sigterm import SigtermDrain
from worker.serve.validate import read_job

log = logging.getLogger("rapid_mlx.worker")

HEARTBEAT_INTERVAL = 0.5
# before a step, the loop waits up to this long for prompts intake is still preparing, so a
# burst of requests starts in one prefill step instead of one that holds only the first
INTAKE_WAIT = 0.02
# plain ints: pyzmq's enum members cost microseconds per call, once per step here
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)


class WorkerLoop:
    """Runs one engine behind one DEALER socket until shut down or orphaned."""

    def __init__(
        self, engine: Engine, loaded: LoadedModel, sock: zmq.Socket[bytes], alias: str, boot_id: str,
        parent_pid: int | None = None, chars_per_token: int = CHARS_PER_TOKEN,
        secret: str = "",
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
        self.stop_reason = "shutdown"
        self.sigterm = SigtermDrain()
        self._last_beat = 0.0
        self._pending: list[m.RequestOutput] = []
        self.intake = Intake(loaded.tokenizer, vocab_size(loaded), engine.context_length,
                             chars_per_token, grammar_compiler(loaded, engine),
                             vision_of(loaded))
        engine.on_outputs = self._send_outputs  # tokens go out as soon as they are read back
        self._poller = zmq.Poller()
        self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self.intake.fd, zmq.POLLIN)
        self._dispatch: dict[type, Any] = {
            m.Generate: self._on_generate,
            m.Abort: self._on_abort,
            m.StatusQuery: self._on_status,
            m.Shutdown: self._on_shutdown,
        }

    def run(self) -> None:
        """Say ready, then loop: jobs in, one step, outputs out, heartbeat."""
        self._send(self._ready())
        self.sigterm.install()
        try:
            while self.running:
                if self.engine.has_work:  # between steps: no system call unless a job waits
                    woke = self._take_jobs()
                else:
                    woke = self._drain(timeout_ms=int(HEARTBEAT_INTERVAL * 1000))
                if woke or self.intake.has_news or self.intake.preparing:
                    self._collect()
                # jobs waiting in intake would wait forever: let the supervisor restart us
                if self.intake.pending and not self.intake.alive:
                    raise RuntimeError("the intake thread died")
                self._send_outputs(self.engine.step() if self.engine.has_work else [])
                self._maybe_heartbeat()
                idle = not (self.engine.has_work or self.intake.pending or self._pending)
                if self.sigterm.finished(idle):
                    self.running, self.stop_reason = False, "drained after SIGTERM"
        finally:
            self.intake.close()

    def _collect(self) -> None:
        """Admit the prepared prompts, first waiting (bounded) for those intake is on now
        (jobs arriving meanwhile join intake too)."""
        deadline = time.monotonic() + INTAKE_WAIT
        while self.intake.preparing and self.intake.alive and self.running:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            events = dict(self._poller.poll(max(int(left * 1000), 1)))
            if self.sock in events:
                self._take_jobs()
            for prepared in self.intake.ready():
                self._admit(prepared)
        for prepared in self.intake.ready():
            self._admit(prepared)

    # ---- socket side --------------------------------------------------------------------

    def _send(self, msg: Any) -> None:
        self.sock.send(m.encode(msg), copy=False)

    def _send_outputs(self, outputs: list[m.RequestOutput]) -> None:
        """Send the outputs waiting here and OUTPUTS (the engine calls it mid-step too)."""
        outputs, self._pending = self._pending + outputs, []
        if outputs:
            self._send(m.StepOutputs(boot_id=self.boot_id, step=self.engine.stats.steps,
                                     outputs=outputs))

    def _drain(self, timeout_ms: int) -> bool:
        """Wait up to TIMEOUT_MS for a job or a prepared prompt; handle every job waiting.

        True when intake woke the loop (its prepared prompts are to be collected)."""
        events = dict(self._poller.poll(timeout_ms))
        if not events:
            return False
        if self.sock in events:
            self._take_jobs()
        return self.intake.fd in events

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
        job = read_job(frame, self._fail)
        if job is None:
            return
        try:
            self._dispatch[type(job)](job)
        except Exception as exc:
            log.exception("job %s failed", type(job).__name__)
            if isinstance(job, m.Generate):
                self._fail(job.request_id, f"the worker could not accept this request: {exc}",
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
        pool = self.engine.kv.pool
        self._send(m.Heartbeat(boot_id=self.boot_id, step=self.engine.stats.steps,
                               running=len(self.engine.running), waiting=len(self.engine.waiting),
                               kv_used=pool.num_used, kv_total=pool.total,
                               draining=self.sigterm.draining,
                               preparing=self.intake.preparing,
                               preparing_for=self.intake.preparing_for))

    # ---- handlers -----------------------------------------------------------------------

    def _fail(self, request_id: str, message: str, code: str) -> None:
        self._pending.append(m.RequestOutput(request_id=request_id, finish_reason="error",
                                             error=message, error_code=code))

    def _on_generate(self, job: m.Generate) -> None:
        """Hand the job to intake: checks, template and tokenizer run off this loop."""
        self.intake.submit(job)

    def _admit(self, p: Prepared) -> None:
        """Queue a prepared job in the engine, or answer its error."""
        rid = p.job.request_id
        if p.error is not None:
            self._fail(rid, str(p.error), p.error.code)
            return
        try:
            self.engine.add(rid, p.ids, p.job.params, p.think_opened, p.grammar, p.vision,
                            p.job.cache_salt)
        except QueueFull as exc:
            self._fail(rid, str(exc), "queue_full")
        except KVTooSmall as exc:
            self._fail(rid, str(exc), "context_length_exceeded")
        except Exception as exc:  # admitting one request must not end the others
            log.exception("request %s could not be admitted", rid)
            self._fail(rid, f"the worker could not start this request: {exc}", "internal_error")

    def _on_abort(self, job: m.Abort) -> None:
        self.intake.cancel(job.request_ids)
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
        log.log(logging.ERROR if job.reason.startswith("refused") else logging.INFO,
                "shutdown requested: %s", job.reason or "no reason")
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
            "tokenizing": self.intake.pending, "failed_steps": e.failed_steps,
            "steps": e.stats.steps, "overlapped_steps": e.stats.overlapped_steps,
            "sync_step_seconds": round(e.stats.sync_seconds, 3), "generated_tokens": e.stats.generated_tokens,
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
            **working_set_status(e.kv.store), **dense_status(f.dense for f in e.forwards().values()),
            **row_write_status(), **page_status(),
            "prefix_cache": e.kv.radix is not None,
            "prefix_cache_pages": e.kv.radix.num_pages if e.kv.radix else 0,
            "prefix_cache_queries": e.kv.stats.queries, "prefix_cache_hits": e.kv.stats.hits,
            "prefix_cache_hit_rate": round(e.kv.stats.hits / e.kv.stats.queries, 4)
            if e.kv.stats.queries else 0.0,
            "prefill_tokens_per_s": round(s.prompt_tokens_computed / s.prefill_seconds, 1)
            if s.prefill_seconds else 0.0,
            "decode_tokens_per_s": round(s.decode_rows / s.decode_seconds, 1)
            if s.decode_seconds else 0.0,
            "grammar_mask_seconds": round(s.mask_seconds, 4),
            "speculative": e.spec.name if e.spec is not None else None,
            "spec_draft_tokens": s.drafted_tokens, "spec_accepted_tokens": s.accepted_tokens,
            "spec_acceptance_rate": round(s.accepted_tokens / s.drafted_tokens, 4)
            if s.drafted_tokens else None,
            **compile_status(e.compile_decode, getattr(e, "compiled", None)),
        }


def grammar_compiler(loaded: LoadedModel, engine: Engine) -> GrammarCompiler | None:
    """The compiler for structured output, or None (logged) when this tokenizer cannot have one."""
    try:
        return GrammarCompiler(loaded.tokenizer, vocab_size(loaded), sorted(engine.eos_ids))
    except Exception as exc:
        log.warning("structured output is off for this model: %r", exc)
        return None


def vision_of(loaded: LoadedModel) -> tuple[Any, int] | None:
    """(processor, image token id) of a vision model, else None."""
    if loaded.processor is None:
        return None
    return loaded.processor, int(loaded.model.image_token_id)


def vocab_size(loaded: LoadedModel) -> int:
    """Rows of the model's embedding table: token ids at or beyond it would crash the forward."""
    inner = getattr(loaded.model, "model", None)
    embed = getattr(inner, "embed_tokens", None)
    weight = getattr(embed, "weight", None)
    rows = int(weight.shape[0]) if weight is not None and getattr(weight, "ndim", 0) == 2 else 0
    facts = loaded.facts.vocab_size
    return min(x for x in (rows, facts) if x > 0) if rows or facts else len(loaded.tokenizer)
