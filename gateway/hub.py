"""The gateway's side of the wire: one bound ROUTER socket, aliases, and per-request streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq
import zmq.asyncio

from gateway.errors import APIError, unavailable
from protocol import messages as m

log = logging.getLogger("rapid_mlx.gateway")


@dataclass
class Terminal:
    """The end of a request that did not come from the worker (worker died, hung, drained)."""

    message: str
    code: str = "worker_failed"


@dataclass
class Stream:
    """The outputs of one request, in order, ending with a finish or a Terminal."""

    request_id: str
    alias: str
    boot_id: str
    queue: asyncio.Queue[m.RequestOutput | Terminal] = field(default_factory=asyncio.Queue)
    done: bool = False


@dataclass
class AliasState:
    """What the gateway knows about one alias and its current worker."""

    alias: str
    model: str
    state: str = "starting"  # starting, ready, draining, stopped, failed
    boot_id: str | None = None
    identity: bytes | None = None
    pid: int | None = None
    facts: m.ModelFacts | None = None
    ready_at: float | None = None
    last_seen: float = 0.0
    last_step: int = -1
    last_progress: float = 0.0
    restarts: int = 0
    last_exit: str | None = None
    heartbeat: m.Heartbeat | None = None
    streams: dict[str, Stream] = field(default_factory=dict)
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)


class Hub:
    """Binds the worker socket, routes jobs to workers and events back to request streams."""

    def __init__(self, address: str, *, hang_timeout: float = 30.0) -> None:
        self.address = address
        self.hang_timeout = hang_timeout
        self.aliases: dict[str, AliasState] = {}
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self._tasks: list[asyncio.Task[Any]] = []
        self._status_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.on_hung: Callable[[str], None] | None = None
        self.on_ready: Callable[[AliasState], None] | None = None

    # ---- lifecycle ----------------------------------------------------------------------

    def add_alias(self, alias: str, model: str) -> AliasState:
        """Register an alias the gateway serves."""
        state = AliasState(alias=alias, model=model)
        self.aliases[alias] = state
        return state

    def start(self) -> None:
        """Bind and start reading events."""
        self.sock.bind(self.address)
        self._tasks.append(asyncio.create_task(self._reader(), name="hub-reader"))
        self._tasks.append(asyncio.create_task(self._watchdog(), name="hub-watchdog"))

    async def close(self) -> None:
        """Stop reading and release the socket."""
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self.sock.close(0)
        self.ctx.term()

    # ---- requests -----------------------------------------------------------------------

    def require_ready(self, alias: str) -> AliasState:
        """Return the alias state or raise 404 (unknown) / 503 (not ready)."""
        st = self.aliases.get(alias)
        if st is None:
            names = ", ".join(sorted(self.aliases)) or "none"
            raise APIError(404, f"The model '{alias}' does not exist. Available models: {names}.",
                           param="model", code="model_not_found")
        if st.state != "ready" or st.identity is None:
            raise unavailable(f"The model '{alias}' is not ready (state: {st.state}). Retry soon.")
        return st

    def submit(self, alias: str, job: m.Generate) -> Stream:
        """Send a Generate job to the alias's worker; return the stream of its outputs."""
        st = self.require_ready(alias)
        assert st.identity is not None and st.boot_id is not None
        stream = Stream(job.request_id, alias, st.boot_id)
        st.streams[job.request_id] = stream
        try:
            self.sock.send_multipart([st.identity, m.encode(job)], flags=zmq.NOBLOCK)
        except zmq.ZMQError as exc:
            st.streams.pop(job.request_id, None)
            raise unavailable(f"The worker of '{alias}' is unreachable ({exc}). Retry soon.") from exc
        return stream

    def abort(self, stream: Stream) -> None:
        """Tell the worker to drop a request the client no longer wants."""
        st = self.aliases.get(stream.alias)
        if st is None or st.streams.pop(stream.request_id, None) is None:
            return
        if st.identity is not None and st.boot_id == stream.boot_id:
            with contextlib.suppress(zmq.ZMQError):
                self.sock.send_multipart([st.identity, m.encode(m.Abort(request_ids=[stream.request_id]))],
                                         flags=zmq.NOBLOCK)

    async def worker_status(self, alias: str, timeout: float = 2.0) -> dict[str, Any] | None:
        """Ask the alias's worker for its live status; None if it does not answer in time."""
        st = self.aliases.get(alias)
        if st is None or st.identity is None:
            return None
        qid = uuid.uuid4().hex
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._status_waiters[qid] = fut
        try:
            self.sock.send_multipart([st.identity, m.encode(m.StatusQuery(query_id=qid))],
                                     flags=zmq.NOBLOCK)
            return await asyncio.wait_for(fut, timeout)
        except (zmq.ZMQError, TimeoutError):
            return None
        finally:
            self._status_waiters.pop(qid, None)

    def send_shutdown(self, alias: str, reason: str) -> bool:
        """Ask the alias's worker to exit; False if it cannot be reached."""
        st = self.aliases.get(alias)
        if st is None or st.identity is None:
            return False
        try:
            self.sock.send_multipart([st.identity, m.encode(m.Shutdown(reason=reason))],
                                     flags=zmq.NOBLOCK)
            return True
        except zmq.ZMQError:
            return False

    # ---- worker lifecycle ---------------------------------------------------------------

    def worker_gone(self, alias: str, boot_id: str | None, reason: str) -> None:
        """The worker with BOOT_ID left: end its in-flight requests at once."""
        st = self.aliases.get(alias)
        if st is None or (boot_id is not None and st.boot_id not in (None, boot_id)):
            return
        st.identity = None
        st.last_exit = reason
        st.ready_event.clear()
        if st.state not in ("failed", "stopped", "draining"):
            st.state = "starting"
        self.fail_streams(st, Terminal(f"The worker serving '{alias}' stopped: {reason}"))

    def fail_streams(self, st: AliasState, terminal: Terminal) -> None:
        """End every in-flight request of the alias with a terminal error."""
        streams, st.streams = st.streams, {}
        for s in streams.values():
            s.queue.put_nowait(terminal)

    # ---- event side ---------------------------------------------------------------------

    async def _reader(self) -> None:
        while True:
            identity, frame = await self.sock.recv_multipart()
            try:
                event = m.decode_event(frame)
            except Exception as exc:
                log.error("undecodable frame from %r: %s", identity, exc)
                continue
            try:
                self._on_event(identity, event)
            except Exception:
                log.exception("error handling %s", type(event).__name__)

    def _on_event(self, identity: bytes, ev: m.Event) -> None:
        alias = identity.decode(errors="replace").split(":", 1)[0]
        st = self.aliases.get(alias)
        if st is None:
            log.warning("event from unknown alias %r ignored", alias)
            return
        now = time.monotonic()
        if isinstance(ev, m.Ready):
            self._on_ready(st, identity, ev, now)
            return
        if ev.boot_id != st.boot_id:
            if isinstance(ev, m.Dead):
                log.info("stale worker %s of %s died: %s", ev.boot_id, alias, ev.reason)
            return
        st.last_seen = now
        if isinstance(ev, m.StepOutputs):
            self._on_step(st, ev, now)
        elif isinstance(ev, m.Heartbeat):
            st.heartbeat = ev
            if ev.step != st.last_step:
                st.last_step, st.last_progress = ev.step, now
        elif isinstance(ev, m.Status):
            fut = self._status_waiters.get(ev.query_id)
            if fut is not None and not fut.done():
                fut.set_result(ev.body)
        elif isinstance(ev, m.Dead):
            self.worker_gone(alias, ev.boot_id, ev.reason)

    def _on_ready(self, st: AliasState, identity: bytes, ev: m.Ready, now: float) -> None:
        if ev.protocol_version != m.PROTOCOL_VERSION:
            log.error("worker %s speaks protocol %d, gateway %d: refused", ev.boot_id,
                      ev.protocol_version, m.PROTOCOL_VERSION)
            with contextlib.suppress(zmq.ZMQError):
                self.sock.send_multipart([identity, m.encode(m.Shutdown(reason="protocol mismatch"))])
            return
        if st.boot_id is not None and st.boot_id != ev.boot_id and st.streams:
            self.fail_streams(st, Terminal(f"The worker serving '{st.alias}' was replaced"))
        st.identity, st.boot_id, st.pid, st.facts = identity, ev.boot_id, ev.pid, ev.facts
        st.last_seen = st.last_progress = st.ready_at = now
        st.last_step = -1
        if st.state != "draining":
            st.state = "ready"
        st.ready_event.set()
        log.info("worker for %s ready (pid %d, boot %s)", st.alias, ev.pid, ev.boot_id)
        if self.on_ready is not None:
            self.on_ready(st)

    def _on_step(self, st: AliasState, ev: m.StepOutputs, now: float) -> None:
        st.last_step, st.last_progress = ev.step, now
        for out in ev.outputs:
            stream = st.streams.get(out.request_id)
            if stream is None:
                continue
            stream.queue.put_nowait(out)
            if out.finish_reason is not None:
                st.streams.pop(out.request_id, None)

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for st in self.aliases.values():
                if st.identity is None or not st.streams:
                    continue
                if now - st.last_seen > self.hang_timeout:
                    log.error("worker of %s silent for %.1fs with work: hung", st.alias,
                              now - st.last_seen)
                    self.worker_gone(st.alias, st.boot_id, "hung (no progress)")
                    if self.on_hung is not None:
                        self.on_hung(st.alias)
