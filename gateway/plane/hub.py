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

from gateway.edge.errors import APIError, unavailable
from gateway.plane.curve import CurveServer
from gateway.plane.events import read_events, reader_ended
from gateway.plane.metrics import Metrics
from gateway.plane.peers import PeerAuth, Rejections
from gateway.plane.routing import Router, RoutingConfig, route_key, route_namespace
from gateway.plane.state import AliasState, Parked, Replica, Stream, Terminal
from gateway.plane.tenants import DEFAULT_MOST, TenantLimit
from gateway.plane.watchdog import default_prepare_limit, watchdog
from protocol import messages as m

__all__ = ["AliasState", "Hub", "Replica", "Stream", "Terminal"]  # the state types are re-exported

log = logging.getLogger("rapid_mlx.gateway")

MAX_EVENT_BYTES = 64 << 20  # a peer sending a larger message is disconnected by ZeroMQ
HEARTBEAT_TIMEOUT = 1.0  # seconds a worker's connection may leave a ZeroMQ ping unanswered
RESEND_WINDOW = 0.5  # a job sent this recently to a worker that died unheard goes to the next one


class Hub:
    """Binds the worker socket, routes jobs to workers and events back to request streams."""

    def __init__(self, address: str, *, hang_timeout: float = 30.0, swap_wait: float = 30.0,
                 external: bool = False, curve: CurveServer | None = None,
                 worker_token: str | None = None, insecure: bool = False,
                 heartbeat_timeout: float = HEARTBEAT_TIMEOUT,
                 routing: RoutingConfig | None = None,
                 prepare_limit: float | None = None,
                 per_tenant: int = DEFAULT_MOST) -> None:
        self.address = address
        self.tenants = TenantLimit(per_tenant)  # each tenant's share of a model's jobs
        self.hang_timeout = hang_timeout
        # a prompt preparing this long in a worker's intake is stuck, not slow (events.py)
        self.prepare_limit = (prepare_limit if prepare_limit is not None
                              else default_prepare_limit(hang_timeout))
        self.swap_wait = swap_wait
        self.external = external  # workers are started by someone else (--no-spawn-workers)
        self.aliases: dict[str, AliasState] = {}
        self.metrics = Metrics(lambda: list(self.aliases.values()))
        self.draining = False
        self.exit_reasons_public = True  # False with API keys: a failed worker's reason (paths,
        # exceptions) is operator data, not in tenants' 503s
        self.started_up = False  # every alias has been ready at once (latched)
        self.retired: set[str] = set()  # boot ids declared gone; never accepted again
        self.accepted: set[str] = set()  # boot ids whose Ready was accepted (they served)
        self.router = Router(routing)
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
        self.closing = False
        self._tasks: list[asyncio.Task[Any]] = []
        self.status_waiters: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.on_hung: Callable[[str, str], None] | None = None  # (alias, boot id)
        self.on_ready: Callable[[AliasState], None] | None = None
        self.curve = curve
        self.wake_reader: Callable[[], None] | None = None  # set by the event reader (events.py)

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
        self._reader_task = asyncio.create_task(read_events(self), name="hub-reader")
        self._reader_task.add_done_callback(lambda t: reader_ended(self, t))
        self._tasks.append(self._reader_task)
        self._tasks.append(asyncio.create_task(watchdog(self), name="hub-watchdog"))

    async def close(self) -> None:
        """Stop reading and release the socket."""
        self.closing = True
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
        """True when the alias takes new requests now (some replica is ready)."""
        return st.state == "ready" and not self.draining and any(
            r.routable for r in st.replicas.values())

    def _not_ready(self, st: AliasState) -> APIError:
        if self.draining:
            self.metrics.rejected(st.alias, "server_shutting_down")
            return unavailable("The server is shutting down and takes no new requests.",
                               retry_after=5, code="server_shutting_down")
        self.metrics.rejected(st.alias, "model_not_ready")
        why = f" Last exit: {st.last_exit}." if st.state == "failed" and st.last_exit else ""
        if why and not self.exit_reasons_public:
            why = " Why is in the server's log (and /v1/health with the admin key)."
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

    def admit(self, alias: str, tenant: str, n: int) -> None:
        """Raise the 503 `tenant_limit` when N more jobs would take TENANT past its share of the
        alias's in-flight jobs (gateway/plane/tenants.py)."""
        self.tenants.check(self.lookup(alias), tenant, n)

    def submit(self, alias: str, job: m.Work, tenant: str = "") -> Stream:
        """Send a request job (Generate, Embed, ...) to a replica of the alias (the router picks
        it); return its output stream.

        When no replica is ready (the worker just left, or the alias is between workers) the job
        waits for the next one, up to the swap wait; a send that fails otherwise (queue full) is
        a 503 at once.
        """
        st = self.lookup(alias)
        if not self._waitable(st):
            raise self._not_ready(st)
        frame = m.encode(job)
        stream = Stream(job.request_id, alias, "", frame=frame, key=route_key(job),
                        ns=route_namespace(job), tenant=tenant)
        while self.serving(st):
            r = self.router.pick(st.ready_replicas(), stream.key, stream.ns)
            assert r.identity is not None
            try:
                self.send_now(r.identity, frame)
            except zmq.ZMQError as exc:
                if exc.errno != zmq.EHOSTUNREACH:
                    self.metrics.rejected(alias, "worker_unreachable")
                    raise unavailable(f"The worker of '{alias}' cannot take this request now "
                                      f"({exc.strerror}). Retry soon.", retry_after=1,
                                      code="worker_unreachable") from exc
                self.worker_gone(alias, r.boot_id, "its connection closed")
            else:
                self._attach(r, stream)
                return stream
        st.parked.append(Parked(stream, frame, time.monotonic() + self.swap_wait))
        return stream

    def _attach(self, r: Replica, stream: Stream) -> None:
        """STREAM was sent to replica R: its outputs come from there."""
        stream.boot_id = r.boot_id
        if not r.streams:
            r.busy_since = time.monotonic()
        r.streams[stream.request_id] = stream
        self.metrics.routed(stream.alias, r.name)

    def flush_parked(self, st: AliasState) -> None:
        """Send the jobs that waited for a ready replica of this alias."""
        parked, st.parked = st.parked, []
        for p in parked:
            if not self.serving(st):
                st.parked.append(p)  # the replica left meanwhile: wait for the next
                continue
            r = self.router.pick(st.ready_replicas(), p.stream.key, p.stream.ns)
            try:
                assert r.identity is not None
                self.send_now(r.identity, p.frame)
            except zmq.ZMQError as exc:
                self._end(p.stream, Terminal(f"The worker of '{st.alias}' cannot take this "
                                             f"request now ({exc.strerror}).",
                                             code="worker_unreachable"))
                continue
            self._attach(r, p.stream)

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
        r = st.replicas.get(stream.boot_id)
        if r is None or r.streams.pop(stream.request_id, None) is None:
            before = len(st.parked)
            st.parked = [p for p in st.parked if p.stream is not stream]
            if len(st.parked) != before:
                self.metrics.ended(stream, "abort", time.monotonic())
            return
        self.metrics.ended(stream, "abort", time.monotonic())
        if r.identity is not None:
            self.send_to(r.identity, m.Abort(request_ids=[stream.request_id]))

    async def worker_status(self, alias: str, timeout: float = 2.0,
                            boot_id: str | None = None) -> dict[str, Any] | None:
        """Ask a replica (default: the primary) for its live status; None if it does not answer
        in time."""
        st = self.aliases.get(alias)
        r = None if st is None else st.replicas.get(boot_id) if boot_id else st.primary
        if r is None or r.identity is None:
            return None
        qid = uuid.uuid4().hex
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.status_waiters[qid] = fut
        try:
            self.send_now(r.identity, m.encode(m.StatusQuery(query_id=qid)))
            return await asyncio.wait_for(fut, timeout)
        except (zmq.ZMQError, TimeoutError):
            return None
        finally:
            self.status_waiters.pop(qid, None)

    def send_shutdown(self, alias: str, reason: str, boot_id: str | None = None) -> bool:
        """Ask the alias's replica BOOT_ID (default: every replica) to exit; False if none can
        be reached."""
        st = self.aliases.get(alias)
        if st is None:
            return False
        sent = False
        for r in list(st.replicas.values()):
            if r.identity is not None and boot_id in (None, r.boot_id):
                sent = self.send_to(r.identity, m.Shutdown(reason=reason)) or sent
        return sent

    def send_to(self, identity: bytes, job: m.Job) -> bool:
        """Send JOB to one worker identity without blocking; False when it cannot be routed."""
        try:
            self.send_now(identity, m.encode(job))
            return True
        except zmq.ZMQError:
            return False

    def send_now(self, identity: bytes, frame: bytes) -> None:
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
        if self.wake_reader is not None:  # the send may have taken the descriptor's edge
            self.wake_reader()

    # ---- worker lifecycle ---------------------------------------------------------------

    def expect_worker(self, alias: str, boot_id: str, secret: str, name: str = "r0") -> None:
        """The supervisor spawns BOOT_ID for ALIAS with SECRET: only its Ready will count."""
        self.aliases[alias].replicas[boot_id] = Replica(boot_id, name, secret=secret)

    def spawned(self, alias: str, boot_id: str, pid: int) -> None:
        """The supervisor started BOOT_ID as process PID."""
        r = self.aliases[alias].replicas.get(boot_id)
        if r is not None:
            r.pid = r.pid or pid

    def worker_gone(self, alias: str, boot_id: str | None, reason: str) -> None:
        """The replica BOOT_ID left: end its in-flight requests at once (requests it never
        answered go to another replica, once)."""
        st = self.aliases.get(alias)
        if st is None:
            return
        if boot_id is None:
            boot_id = st.boot_id
        if boot_id is not None and boot_id in self.retired:  # known gone: add how it ended
            if st.last_exit and reason not in st.last_exit:
                st.last_exit = f"{st.last_exit}, then {reason}"
            return
        r = st.replicas.pop(boot_id, None) if boot_id is not None else None
        if boot_id is not None:
            self.retired.add(boot_id)
        if r is None:
            return
        was_live = r.identity is not None
        r.identity = r.user_id = None
        r.state = "gone"
        r.tree.clear()
        st.last_exit = reason
        if self.external and was_live:
            st.departed += 1
        terminal = Terminal(f"The worker serving '{alias}' stopped: {reason}")
        if self.serving(st):  # other replicas serve on
            log.warning("replica %s of %s left (%s); %d replica(s) serve on", r.name, alias,
                        reason, len(st.ready_replicas()))
            self._park_unheard(st, r, window=float("inf"))
            self.fail_streams(r, terminal)
            self.flush_parked(st)
            return
        if was_live:
            st.restarting = True
        st.ready_event.clear()
        if st.state not in ("failed", "stopped", "draining"):
            st.state = "starting"
        self._park_unheard(st, r)
        self.fail_streams(r, terminal)

    def _park_unheard(self, st: AliasState, r: Replica, window: float = RESEND_WINDOW) -> None:
        """Keep for another replica the jobs R never answered (the client saw nothing of them),
        once per job. With no other replica, only those sent within WINDOW of its death (they
        likely sat in its socket) wait for the next worker; the rest fail fast."""
        now, anywhere = time.monotonic(), window == float("inf")
        for rid, s in list(r.streams.items()):
            if (s.frame and not s.retried and (anywhere or s.submitted_at >= r.last_seen)
                    and now - s.submitted_at < window):
                s.retried = True
                del r.streams[rid]
                st.parked.append(Parked(s, s.frame, now + self.swap_wait))
                self.metrics.retried(st.alias)

    def fail_streams(self, owner: AliasState | Replica, terminal: Terminal) -> None:
        """End every in-flight request of an alias (all replicas) or of one replica."""
        replicas = list(owner.replicas.values()) if isinstance(owner, AliasState) else [owner]
        now = time.monotonic()
        for r in replicas:
            streams, r.streams = r.streams, {}
            for s in streams.values():
                s.queue.put_nowait(terminal)
                self.metrics.ended(s, terminal.code, now)

    def reader_alive(self) -> bool:
        """True while the task reading worker events runs (/livez fails otherwise)."""
        return self._reader_task is not None and not self._reader_task.done()


def _log_send_error(fut: asyncio.Future[Any]) -> None:
    exc = None if fut.cancelled() else fut.exception()
    if exc is not None:
        log.error("a send to a worker failed late: %s", exc)
