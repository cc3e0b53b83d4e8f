"""The gateway's side of the wire: one bound ROUTER socket, aliases, and per-request streams."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

import zmq
import zmq.asyncio

from gateway.adopt import on_stranger
from gateway.curve import CurveServer
from gateway.errors import APIError, unavailable
from gateway.metrics import Metrics
from gateway.peers import PeerAuth, Rejections
from gateway.state import AliasState, Parked, Stream, Terminal
from protocol import messages as m

__all__ = ["AliasState", "Hub", "Stream", "Terminal"]  # the state types are re-exported

log = logging.getLogger("rapid_mlx.gateway")

MAX_EVENT_BYTES = 64 << 20  # a peer sending a larger message is disconnected by ZeroMQ
HEARTBEAT_TIMEOUT = 1.0  # seconds a worker's connection may leave a ZeroMQ ping unanswered
SILENCE_LIMIT = 10.0  # seconds an external worker may send no event at all (it beats every 0.5 s)
RESEND_WINDOW = 0.5  # a job sent this recently to a worker that died unheard goes to the next one
_PROBE = m.encode(m.Abort(request_ids=[]))  # a no-op job: can its connection still be routed?


class Hub:
    """Binds the worker socket, routes jobs to workers and events back to request streams."""

    def __init__(self, address: str, *, hang_timeout: float = 30.0, swap_wait: float = 30.0,
                 external: bool = False, curve: CurveServer | None = None,
                 worker_token: str | None = None, insecure: bool = False,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT) -> None:
        self.address = address
        self.hang_timeout = hang_timeout
        self.swap_wait = swap_wait
        self.external = external  # workers are started by someone else (--no-spawn-workers)
        self.aliases: dict[str, AliasState] = {}
        self.metrics = Metrics(lambda: list(self.aliases.values()))
        self.draining = False
        self.started_up = False  # every alias has been ready at once (latched)
        self.retired: set[str] = set()  # boot ids declared gone; never accepted again
        self.nudged: dict[str, float] = {}
        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, MAX_EVENT_BYTES)
        # ZeroMQ pings each connection; the worker's I/O thread answers even during a long engine
        # step, so a connection drops only when the worker is gone (killed, stopped, cut off)
        self.sock.setsockopt(zmq.HEARTBEAT_IVL, 250)
        self.sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, max(int(heartbeat_timeout * 1000), 100))
        self.heartbeat_timeout = heartbeat_timeout
        self.peers = PeerAuth(external=external, curve=curve, token=worker_token,
                              insecure=insecure)
        self.rejections = Rejections(self.metrics)
        self._reader_task: asyncio.Task[None] | None = None
        self._closing = False
        self._tasks: list[asyncio.Task[Any]] = []
        self._status_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.on_hung: Callable[[str], None] | None = None
        self.on_ready: Callable[[AliasState], None] | None = None
        self.curve = curve

    # ---- lifecycle ----------------------------------------------------------------------

    def add_alias(self, alias: str, model: str, revision: str | None = None) -> AliasState:
        """Register an alias the gateway serves."""
        state = AliasState(alias=alias, model=model, revision=revision)
        self.aliases[alias] = state
        self.metrics.declare(alias)
        return state

    def start(self) -> None:
        """Bind and start reading events."""
        if self.curve is not None:
            self.curve.apply(self.ctx, self.sock, spawned=not self.external)
        elif self.address.startswith("tcp://"):
            log.warning("workers connect over %s without CURVE (--insecure-worker-transport): "
                        "anyone who can reach it can read prompts and answers", self.address)
        self.sock.bind(self.address)
        self._reader_task = asyncio.create_task(self._reader(), name="hub-reader")
        self._reader_task.add_done_callback(self._reader_ended)
        self._tasks.append(self._reader_task)
        self._tasks.append(asyncio.create_task(self._watchdog(), name="hub-watchdog"))

    async def close(self) -> None:
        """Stop reading and release the socket."""
        self._closing = True
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self.curve is not None:
            self.curve.stop()
        self.sock.close(0)
        self.ctx.term()

    def start_drain(self) -> None:
        """Stop admitting requests: every alias turns `draining`, new requests get 503."""
        self.draining = True
        for st in self.aliases.values():
            if st.state not in ("failed", "stopped"):
                st.state = "draining"
            self.expire_parked(st, float("inf"), "The server is shutting down.",
                               "server_shutting_down")

    def count_restart(self, alias: str) -> None:
        """Record one restart of the alias's worker."""
        self.aliases[alias].restarts += 1
        self.metrics.restarted(alias)

    # ---- requests -----------------------------------------------------------------------

    def lookup(self, alias: str) -> AliasState:
        """The alias state, or a 404 naming the served models."""
        st = self.aliases.get(alias)
        if st is None:
            names = ", ".join(sorted(self.aliases)) or "none"
            raise APIError(404, f"The model '{alias}' does not exist. Available models: {names}.",
                           param="model", code="model_not_found")
        return st

    def serving(self, st: AliasState) -> bool:
        """True when the alias takes new requests now."""
        return st.state == "ready" and st.identity is not None and not self.draining

    def _not_ready(self, st: AliasState) -> APIError:
        if self.draining:
            self.metrics.rejected(st.alias, "server_shutting_down")
            return unavailable("The server is shutting down and takes no new requests.",
                               retry_after=5, code="server_shutting_down")
        self.metrics.rejected(st.alias, "model_not_ready")
        why = f" Last exit: {st.last_exit}." if st.state == "failed" and st.last_exit else ""
        return unavailable(f"The model '{st.alias}' is not ready (state: {st.state}).{why} "
                           "Retry soon.", retry_after=2 if st.state != "failed" else 10)

    def require_ready(self, alias: str) -> AliasState:
        """Return the alias state or raise 404 (unknown) / 503 (not ready)."""
        st = self.lookup(alias)
        if not self.serving(st):
            raise self._not_ready(st)
        return st

    def _waitable(self, st: AliasState) -> bool:
        """True when the alias may serve soon: starting, restarting or swapping (not failed)."""
        return not self.draining and st.state not in ("failed", "stopped")

    async def wait_ready(self, alias: str, timeout: float | None = None) -> AliasState:
        """Like require_ready, but while the alias's worker starts or is replaced wait (bounded)."""
        st = self.lookup(alias)
        started = time.monotonic()
        deadline = started + (self.swap_wait if timeout is None else timeout)
        while not self.serving(st):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._waitable(st):
                raise self._not_ready(st)
            if st.ready_event.is_set():
                await asyncio.sleep(min(remaining, 0.05))
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(st.ready_event.wait(), min(remaining, 0.25))
        self.metrics.queued(alias, time.monotonic() - started)
        return st

    def submit(self, alias: str, job: m.Generate) -> Stream:
        """Send a Generate job to the alias's worker; return the stream of its outputs.

        When the worker just left (or the alias is between workers) the job waits for the next
        worker, up to the swap wait; a send that fails otherwise (queue full) is a 503 at once.
        """
        st = self.lookup(alias)
        if not self._waitable(st):
            raise self._not_ready(st)
        frame = m.encode(job)
        stream = Stream(job.request_id, alias, st.boot_id or "", frame=frame)
        if self.serving(st):
            assert st.identity is not None
            try:
                self._send(st.identity, frame)
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    self.metrics.rejected(alias, "worker_unreachable")
                    raise unavailable(f"The worker of '{alias}' cannot take this request now "
                                      f"({exc.strerror}). Retry soon.", retry_after=1,
                                      code="worker_unreachable") from exc
                self.worker_gone(alias, st.boot_id, "its connection closed")
            else:
                if not st.streams:
                    st.busy_since = stream.submitted_at
                st.streams[job.request_id] = stream
                return stream
        st.parked.append(Parked(stream, frame, time.monotonic() + self.swap_wait))
        return stream

    def _flush_parked(self, st: AliasState) -> None:
        """Send the jobs that waited for this alias's new worker."""
        parked, st.parked = st.parked, []
        for p in parked:
            p.stream.boot_id = st.boot_id or ""
            try:
                assert st.identity is not None
                self._send(st.identity, p.frame)
            except zmq.ZMQError as exc:
                self._end(p.stream, Terminal(f"The worker of '{st.alias}' cannot take this "
                                             f"request now ({exc.strerror}).",
                                             code="worker_unreachable"))
                continue
            if not st.streams:
                st.busy_since = time.monotonic()
            st.streams[p.stream.request_id] = p.stream

    def expire_parked(self, st: AliasState, now: float, message: str,
                      code: str = "model_not_ready") -> None:
        """End the parked jobs whose wait is over at NOW."""
        if not st.parked:
            return
        keep = [p for p in st.parked if p.deadline > now]
        for p in st.parked:
            if p.deadline <= now:
                self._end(p.stream, Terminal(message, code=code))
        st.parked = keep

    def _end(self, stream: Stream, terminal: Terminal) -> None:
        stream.queue.put_nowait(terminal)
        self.metrics.ended(stream, terminal.code, time.monotonic())

    def abort(self, stream: Stream) -> None:
        """Tell the worker to drop a request the client no longer wants."""
        st = self.aliases.get(stream.alias)
        if st is None:
            return
        if st.streams.pop(stream.request_id, None) is None:
            before = len(st.parked)
            st.parked = [p for p in st.parked if p.stream is not stream]
            if len(st.parked) != before:
                self.metrics.ended(stream, "abort", time.monotonic())
            return
        self.metrics.ended(stream, "abort", time.monotonic())
        if st.identity is not None and st.boot_id == stream.boot_id:
            self.send_to(st.identity, m.Abort(request_ids=[stream.request_id]))

    async def worker_status(self, alias: str, timeout: float = 2.0) -> dict[str, Any] | None:
        """Ask the alias's worker for its live status; None if it does not answer in time."""
        st = self.aliases.get(alias)
        if st is None or st.identity is None:
            return None
        qid = uuid.uuid4().hex
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._status_waiters[qid] = fut
        try:
            self._send(st.identity, m.encode(m.StatusQuery(query_id=qid)))
            return await asyncio.wait_for(fut, timeout)
        except (zmq.ZMQError, TimeoutError):
            return None
        finally:
            self._status_waiters.pop(qid, None)

    def send_shutdown(self, alias: str, reason: str) -> bool:
        """Ask the alias's worker to exit; False if it cannot be reached."""
        st = self.aliases.get(alias)
        return st is not None and st.identity is not None and self.send_to(st.identity, m.Shutdown(reason=reason))

    def send_to(self, identity: bytes, job: m.Job) -> bool:
        """Send JOB to one worker identity without blocking; False when it cannot be routed."""
        try:
            self._send(identity, m.encode(job))
            return True
        except zmq.ZMQError:
            return False

    def _send(self, identity: bytes, frame: bytes) -> None:
        """Queue one frame for IDENTITY now; raise zmq.ZMQError at once if it cannot be queued.

        zmq.asyncio reports a failed send in the returned future, not as an exception: with
        NOBLOCK and no blocked send before it (the hub never blocks), that future is already
        done, so its error is read here instead of being lost.
        """
        fut = cast("asyncio.Future[Any]",
                   self.sock.send_multipart([identity, frame], flags=zmq.NOBLOCK))
        if not fut.done():  # cannot happen without a blocking send; never leave it unread
            fut.add_done_callback(_log_send_error)
            return
        exc = fut.exception()
        if exc is not None:
            raise exc

    # ---- worker lifecycle ---------------------------------------------------------------

    def expect_worker(self, alias: str, boot_id: str, secret: str) -> None:
        """The supervisor spawns BOOT_ID for ALIAS with SECRET: only its Ready will count."""
        st = self.aliases[alias]
        st.boot_id, st.secret = boot_id, secret

    def worker_gone(self, alias: str, boot_id: str | None, reason: str) -> None:
        """The worker with BOOT_ID left: end its in-flight requests at once."""
        st = self.aliases.get(alias)
        if st is None or (boot_id is not None and st.boot_id not in (None, boot_id)):
            return
        if boot_id is not None and boot_id in self.retired:  # known gone: add how it ended
            if st.last_exit and reason not in st.last_exit:
                st.last_exit = f"{st.last_exit}, then {reason}"
            return
        if boot_id is not None:
            self.retired.add(boot_id)
        if st.identity is not None:
            st.restarting = True
        st.identity = st.user_id = None
        st.last_exit = reason
        st.ready_event.clear()
        if st.state not in ("failed", "stopped", "draining"):
            st.state = "starting"
        self._park_unheard(st)
        self.fail_streams(st, Terminal(f"The worker serving '{alias}' stopped: {reason}"))

    def _park_unheard(self, st: AliasState) -> None:
        """Keep for the next worker the jobs sent just before the worker died, that it never
        acknowledged (it sent nothing since): they likely sat in its socket. Once per job."""
        now = time.monotonic()
        for rid, s in list(st.streams.items()):
            if (s.frame and not s.retried and s.submitted_at >= st.last_seen
                    and now - s.submitted_at < RESEND_WINDOW):
                s.retried = True
                del st.streams[rid]
                st.parked.append(Parked(s, s.frame, now + self.swap_wait))

    def fail_streams(self, st: AliasState, terminal: Terminal) -> None:
        """End every in-flight request of the alias with a terminal error."""
        streams, st.streams = st.streams, {}
        now = time.monotonic()
        for s in streams.values():
            s.queue.put_nowait(terminal)
            self.metrics.ended(s, terminal.code, now)

    def reader_alive(self) -> bool:
        """True while the task reading worker events runs (/livez fails otherwise)."""
        return self._reader_task is not None and not self._reader_task.done()

    # ---- event side ---------------------------------------------------------------------

    def _reader_ended(self, task: asyncio.Task[None]) -> None:
        if self._closing:
            return
        exc = None if task.cancelled() else task.exception()
        log.critical("the worker event reader stopped (%s): no worker can be heard; /livez now "
                     "fails", exc or "cancelled", exc_info=exc)

    async def _reader(self) -> None:
        while True:
            try:
                frames = await self.sock.recv_multipart(copy=False)
            except zmq.ZMQError as exc:
                if self._closing:
                    return
                log.error("worker socket receive failed: %s", exc)
                await asyncio.sleep(0.05)
                continue
            try:
                self._on_frames(frames)
            except Exception as exc:  # a frame must never end the reader
                self.rejections.drop(frames[0].bytes if frames else b"", "handler_error",
                                     f"a frame that raised {type(exc).__name__}: {exc}")

    def _on_frames(self, frames: list[zmq.Frame]) -> None:
        identity = frames[0].bytes
        if len(frames) != 2:
            self.rejections.drop(identity, "malformed", f"a {len(frames) - 1}-part message")
            return
        try:
            event = m.decode_event(frames[1].bytes)
        except Exception as exc:
            self.rejections.drop(identity, "undecodable", f"an undecodable frame ({exc})")
            return
        user_id = None
        if self.curve is not None:
            with contextlib.suppress(zmq.ZMQError):
                user_id = str(frames[1].get("User-Id"))
        self._on_event(identity, user_id, event)

    def _on_event(self, identity: bytes, user_id: str | None, ev: m.Event) -> None:
        alias = identity.decode(errors="replace").split(":", 1)[0]
        st = self.aliases.get(alias)
        if st is None:
            self.rejections.drop(identity, "unknown_alias", f"a {type(ev).__name__}")
            return
        now = time.monotonic()
        if isinstance(ev, m.Ready):
            self.accept_ready(st, identity, user_id, ev, now)
            return
        if ev.boot_id != st.boot_id or not self.peers.owns(st, identity, user_id):
            on_stranger(self, st, identity, user_id, ev, now)
            return
        st.last_seen = now
        if isinstance(ev, m.Dead):
            self.worker_gone(alias, ev.boot_id, ev.reason)
        elif isinstance(ev, m.StepOutputs):
            self._on_step(st, ev, now)
        elif isinstance(ev, m.Heartbeat):
            st.heartbeat = ev
            if ev.step != st.last_step:
                st.last_step, st.last_progress = ev.step, now
        elif isinstance(ev, m.Status):
            fut = self._status_waiters.get(ev.query_id)
            if fut is not None and not fut.done():
                fut.set_result(ev.body)

    def accept_ready(self, st: AliasState, identity: bytes, user_id: str | None, ev: m.Ready,
                     now: float) -> None:
        """Make the sender the alias's worker, if its Ready proves it may be."""
        if ev.protocol_version != m.PROTOCOL_VERSION:
            why: str | None = "protocol_version"
        elif ev.boot_id in self.retired:
            why = "retired_boot"
        else:
            why = self.peers.refuse_ready(st, identity, user_id, ev)
        if why is not None:
            self.rejections.drop(identity, why, f"a Ready for {st.alias} (protocol "
                                 f"{ev.protocol_version}, gateway {m.PROTOCOL_VERSION})")
            self.send_to(identity, m.Shutdown(reason=f"refused by the gateway: {why}"))
            return
        if st.identity == identity and st.boot_id == ev.boot_id:
            return  # said Ready again (an adoption query crossed its first Ready)
        if st.boot_id is not None and st.boot_id != ev.boot_id and st.streams:
            self.fail_streams(st, Terminal(f"The worker serving '{st.alias}' was replaced"))
        if self.external and st.ready_at is not None and st.boot_id != ev.boot_id:
            self.count_restart(st.alias)
        st.identity, st.boot_id, st.pid, st.facts = identity, ev.boot_id, ev.pid, ev.facts
        st.user_id = user_id
        st.last_seen = st.last_progress = st.ready_at = now
        st.last_step = -1
        st.restarting = False
        if self.external:
            st.model = ev.facts.model or st.model
        if st.state != "draining":
            st.state = "ready"
        st.ready_event.set()
        self.started_up = self.started_up or all(map(self.serving, self.aliases.values()))
        log.info("worker for %s ready (pid %d, boot %s)", st.alias, ev.pid, ev.boot_id)
        if self.on_ready is not None:
            self.on_ready(st)
        self._flush_parked(st)

    def _on_step(self, st: AliasState, ev: m.StepOutputs, now: float) -> None:
        st.last_step, st.last_progress = ev.step, now
        for out in ev.outputs:
            stream = st.streams.get(out.request_id)
            if stream is None:
                continue
            stream.frame = b""  # answered: never resent
            stream.queue.put_nowait(out)
            self.metrics.output(stream, out, now)
            if out.finish_reason is not None:
                st.streams.pop(out.request_id, None)

    async def _watchdog(self) -> None:
        while True:
            await asyncio.sleep(0.25)
            now = time.monotonic()
            for st in self.aliases.values():
                gave_up = st.state in ("failed", "stopped")  # its parked jobs end now
                self.expire_parked(st, float("inf") if gave_up else now,
                                   f"The model '{st.alias}' did not become ready (state: "
                                   f"{st.state}). Retry soon.")
                if st.identity is None:
                    continue
                if self.external and self._lost(st, now):
                    continue
                if not st.streams:
                    continue
                stalled = now - max(st.last_progress, st.busy_since)
                if stalled > self.hang_timeout:
                    log.error("worker of %s made no progress for %.1fs with work: hung", st.alias,
                              stalled)
                    self.send_to(st.identity, m.Shutdown(reason="hung"))
                    self.worker_gone(st.alias, st.boot_id, f"hung (no progress for {stalled:.1f}s)")
                    if self.on_hung is not None:
                        self.on_hung(st.alias)


    def _lost(self, st: AliasState, now: float) -> bool:
        """Declare an external worker gone when its connection dropped or it fell silent."""
        assert st.identity is not None
        try:
            self._send(st.identity, _PROBE)
            why = None
        except zmq.ZMQError as exc:
            why = "its connection was lost" if exc.errno == zmq.EHOSTUNREACH else None
        silent = now - st.last_seen
        if why is None and silent > max(SILENCE_LIMIT, self.heartbeat_timeout):
            why = f"no heartbeat for {silent:.1f}s"
            self.send_to(st.identity, m.Shutdown(reason="missed heartbeats"))
        if why is None:
            return False
        log.error("worker %s of %s is gone: %s", st.boot_id, st.alias, why)
        self.worker_gone(st.alias, st.boot_id, why)
        return True


def _log_send_error(fut: asyncio.Future[Any]) -> None:
    exc = None if fut.cancelled() else fut.exception()
    if exc is not None:
        log.error("a send to a worker failed late: %s", exc)
