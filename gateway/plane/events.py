"""The gateway's event side: read every frame from the worker socket, drop what is not from an
alias's current worker, and route the rest (Ready, step outputs, heartbeats, status, death)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import zmq
import zmq.asyncio

from gateway.plane.adopt import AdoptingHub, on_stranger
from gateway.plane.metrics import Metrics
from gateway.plane.state import CPU_MOVED, AliasState, Replica
from protocol import messages as m

log = logging.getLogger("rapid_mlx.gateway")

# what a peer that is not (yet) an alias's worker may send, and how large (a Ready carries the
# model's facts, chat template included); anything else is dropped before it is decoded
STRANGER_TAGS = frozenset({"ready", "hb", "dead"})
STRANGER_MAX_BYTES = 4 << 20


class EventHub(AdoptingHub, Protocol):
    """What reading and routing worker events needs of the hub (gateway.plane.hub.Hub has it)."""

    wake_reader: Callable[[], None] | None
    started_up: bool

    @property
    def address(self) -> str:
        """The worker socket's address."""
        ...
    @property
    def closing(self) -> bool:
        """True once the hub is stopping."""
        ...
    @property
    def sock(self) -> zmq.asyncio.Socket:
        """The bound ROUTER socket the workers connect to."""
        ...
    @property
    def aliases(self) -> dict[str, AliasState]:
        """The served aliases' states by name."""
        ...
    @property
    def metrics(self) -> Metrics:
        """The worker plane's Prometheus metrics."""
        ...
    @property
    def prepare_limit(self) -> float:
        """Seconds one prompt may prepare in a worker's intake before it counts as hung."""
        ...
    @property
    def accepted(self) -> set[str]:
        """Boot ids whose Ready was accepted."""
        ...
    @property
    def status_waiters(self) -> dict[str, asyncio.Future[dict[str, Any]]]:
        """Futures of status queries in flight, by query id."""
        ...
    @property
    def on_ready(self) -> Callable[[AliasState], None] | None:
        """Called when an alias's replica becomes ready."""
        ...

    def serving(self, st: AliasState) -> bool:
        """True when the alias takes new requests now (some replica is ready)."""
        ...

    def count_restart(self, alias: str) -> None:
        """Record one restart of the alias's worker."""
        ...

    def flush_parked(self, st: AliasState) -> None:
        """Send the jobs that waited for a ready replica of this alias."""
        ...


def reader_ended(hub: EventHub, task: asyncio.Task[None]) -> None:
    """Log the end of the reader task (only a stopping hub ends it on purpose)."""
    if hub.closing:
        return
    exc = None if task.cancelled() else task.exception()
    log.critical("the worker event reader stopped (%s): no worker can be heard; /livez now "
                 "fails", exc or "cancelled", exc_info=exc)


async def read_events(hub: EventHub) -> None:
    """Read the worker socket forever; no frame and no handler error ends this loop.

    The socket's file descriptor wakes this task (no pyzmq future per message); every frame
    waiting is then read without blocking. ZeroMQ's descriptor only signals edges, and a send
    on the socket may take the edge, so the hub wakes this task after each send too."""
    raw: zmq.Socket[Any] = zmq.Socket.shadow(hub.sock.underlying)  # same socket, plain calls
    wake = asyncio.Event()
    loop = asyncio.get_running_loop()
    fd = int(raw.getsockopt(zmq.FD))
    loop.add_reader(fd, wake.set)
    hub.wake_reader = wake.set
    try:
        while True:
            wake.clear()
            more = _drain(hub, raw)
            if more is None:  # the socket failed: over if the hub is closing, else try again soon
                if hub.closing:
                    return
                await asyncio.sleep(0.05)
            elif more:  # a full batch: let other tasks run, then read on
                await asyncio.sleep(0)
            else:
                await wake.wait()
    finally:
        hub.wake_reader = None
        loop.remove_reader(fd)


BATCH = 256  # frames handled before the reader lets other tasks run
# plain ints: pyzmq's enum members cost microseconds per call on this path
_EVENTS, _POLLIN, _NOBLOCK = int(zmq.EVENTS), int(zmq.POLLIN), int(zmq.NOBLOCK)


def _drain(hub: EventHub, raw: zmq.Socket[Any]) -> bool | None:
    """Handle the frames waiting in the socket: False when none is left, True after a full
    batch (more may wait), None when receiving failed."""
    for _ in range(BATCH):
        try:
            if not int(raw.get(_EVENTS)) & _POLLIN:
                return False
            frames = raw.recv_multipart(_NOBLOCK, copy=False)
        except zmq.Again:
            return False
        except zmq.ZMQError as exc:
            if not hub.closing:
                log.error("worker socket receive failed: %s", exc)
            return None
        try:
            on_frames(hub, frames)
        except Exception as exc:  # a frame must never end the reader
            hub.rejections.drop(frames[0].bytes if frames else b"", "handler_error",
                                f"a frame that raised {type(exc).__name__}: {exc}")
    return True


def on_frames(hub: EventHub, frames: list[zmq.Frame]) -> None:
    """Handle one multipart message: [identity, event] or dropped."""
    identity = frames[0].bytes
    if len(frames) != 2:
        hub.rejections.drop(identity, "malformed", f"a {len(frames) - 1}-part message")
        return
    data = frames[1].bytes
    if not _from_a_replica(hub, identity) and _refused_unread(hub, identity, data):
        return
    try:
        event = m.decode_event(data)
    except Exception as exc:
        hub.rejections.drop(identity, "undecodable", f"an undecodable frame ({exc})")
        return
    user_id = None
    if hub.curve is not None:
        with contextlib.suppress(zmq.ZMQError):
            user_id = str(frames[1].get("User-Id"))
    peer = ""
    if isinstance(event, m.Ready) and hub.address.startswith("tcp://"):
        with contextlib.suppress(zmq.ZMQError):
            peer = str(frames[1].get("Peer-Address"))  # tcp only: the worker's IP
    on_event(hub, identity, user_id, event, peer)


def _from_a_replica(hub: EventHub, identity: bytes) -> bool:
    """True when IDENTITY is the routing id of an accepted worker (its frames are decoded)."""
    st = hub.aliases.get(identity.decode(errors="replace").split(":", 1)[0])
    return st is not None and any(
        r.identity is not None and identity in (r.identity, m.pulse_id(r.identity))
        for r in st.replicas.values())


def _refused_unread(hub: EventHub, identity: bytes, data: bytes) -> bool:
    """Drop a frame from a peer that is no worker yet before decoding it (True when dropped):
    such a peer may only say Ready, Heartbeat or Dead, in a frame of bounded size, so a forged
    frame costs its size's read, never a decode of millions of elements."""
    if identity.decode(errors="replace").split(":", 1)[0] not in hub.aliases:
        hub.rejections.drop(identity, "unknown_alias", "a frame")
        return True
    tag = m.peek_tag(data)
    if tag not in STRANGER_TAGS:
        hub.rejections.drop(identity, "not_owner", f"a {tag!r} frame from a peer that is no worker")
        return True
    if len(data) > STRANGER_MAX_BYTES:
        hub.rejections.drop(identity, "oversized",
                            f"a {len(data)}-byte {tag} frame from a peer that is no worker")
        return True
    return False


def on_event(hub: EventHub, identity: bytes, user_id: str | None, ev: m.Event,
             peer: str = "") -> None:
    """Route one event, if it comes from a replica of the alias (Ready: if it proves itself)."""
    alias = identity.decode(errors="replace").split(":", 1)[0]
    st = hub.aliases.get(alias)
    if st is None:
        hub.rejections.drop(identity, "unknown_alias", f"a {type(ev).__name__}")
        return
    now = time.monotonic()
    if isinstance(ev, m.Ready):
        accept_ready(hub, st, identity, user_id, ev, now, peer)
        return
    r = st.replicas.get(ev.boot_id)
    if r is None or not hub.peers.owns(r, identity, user_id, pulse=isinstance(ev, m.Pulse)):
        on_stranger(hub, st, identity, user_id, ev, now)
        return
    r.last_seen = now
    if isinstance(ev, m.Pulse):
        on_pulse(r, ev, now)
    elif isinstance(ev, m.Dead):
        hub.worker_gone(alias, ev.boot_id, ev.reason)
    elif isinstance(ev, m.StepOutputs):
        _on_step(hub, r, ev, now)
    elif isinstance(ev, m.Heartbeat):
        r.heartbeat = ev
        if ev.draining and r.state == "ready":
            r.state = "draining"  # SIGTERM: it finishes its requests, then leaves
            log.warning("replica %s of %s drains (SIGTERM): no new work goes to it", r.name,
                        st.alias)
        if ev.step != r.last_step:
            r.last_step, r.last_progress = ev.step, now
        elif ev.preparing and ev.preparing_for < hub.prepare_limit:
            r.last_progress = now  # its loop beats and its intake works on prompts: not hung
    elif isinstance(ev, m.Status):
        fut = hub.status_waiters.get(ev.query_id)
        if fut is not None and not fut.done():
            fut.set_result(ev.body)


def revision_refusal(st: AliasState, ev: m.Ready) -> str | None:
    """Why a Ready's model differs from what the alias's ready replicas serve, or None.

    With a revision fingerprint on both sides only those are compared (two machines may keep
    the same weights in different folders); otherwise the model names must match."""
    ref = next((r.facts for r in st.ready_replicas() if r.facts and r.boot_id != ev.boot_id),
               None)
    if ref is None:
        return None
    new = ev.facts
    if ref.revision and new.revision:
        same = ref.revision == new.revision
    else:
        same = ref.model == new.model and ref.revision == new.revision
    if same:
        return None
    return (f"it serves {new.model} (revision {new.revision or 'unknown'}) but the replicas of "
            f"{st.alias} serve {ref.model} (revision {ref.revision or 'unknown'})")


def accept_ready(hub: EventHub, st: AliasState, identity: bytes, user_id: str | None, ev: m.Ready,
                 now: float, peer: str = "") -> None:
    """Make the sender a replica of the alias, if its Ready proves it may be."""
    if ev.protocol_version != m.PROTOCOL_VERSION:
        why: str | None = "protocol_version"
    elif ev.boot_id in hub.retired:
        why = "retired_boot"
    else:
        why = hub.peers.refuse_ready(st, identity, user_id, ev)
    mismatch = revision_refusal(st, ev) if why is None else None
    if mismatch is not None:
        why = "revision_mismatch"
        log.error("refused a worker for %s (boot %s): %s", st.alias, ev.boot_id, mismatch)
    if why is not None:
        hub.rejections.drop(identity, why, f"a Ready for {st.alias} (protocol "
                             f"{ev.protocol_version}, gateway {m.PROTOCOL_VERSION})")
        hub.send_to(identity, m.Shutdown(reason=f"refused by the gateway: {why}"))
        return
    r = st.replicas.get(ev.boot_id)
    if r is not None and r.identity == identity:
        return  # said Ready again (an adoption query crossed its first Ready)
    if r is None:  # an external worker joins the alias
        r = st.replicas[ev.boot_id] = Replica(ev.boot_id, ev.boot_id[:8])
        if st.departed:  # it replaces one that left
            st.departed -= 1
            hub.count_restart(st.alias)
    r.identity, r.pid, r.facts, r.user_id = identity, ev.pid, ev.facts, user_id
    r.address = peer
    r.last_seen = r.last_progress = r.ready_at = st.ready_at = now
    r.last_step = -1
    r.state = "ready"
    st.facts = ev.facts
    st.restarting = False
    hub.accepted.add(ev.boot_id)
    if hub.external:
        st.model = ev.facts.model or st.model
    if st.state != "draining":
        st.state = "ready"
    st.ready_event.set()
    hub.started_up = hub.started_up or all(map(hub.serving, hub.aliases.values()))
    log.info("worker for %s ready (pid %d, boot %s, replica %s, %d ready)", st.alias, ev.pid,
             ev.boot_id, r.name, len(st.ready_replicas()))
    if hub.on_ready is not None:
        hub.on_ready(st)
    hub.flush_parked(st)


def on_pulse(r: Replica, ev: m.Pulse, now: float) -> None:
    """Record a replica's pulse: a new step number is progress; CPU time that advanced by
    CPU_MOVED or more since the last mark moves the mark (gateway/plane/watchdog.py reads it)."""
    if r.pulse is None or ev.cpu - r.cpu_mark >= CPU_MOVED or ev.cpu < r.cpu_mark:
        r.cpu_mark, r.cpu_moved_at = ev.cpu, now
    r.pulse, r.pulse_at = ev, now
    if ev.step != r.last_step:  # steps ended since the last event: progress
        r.last_step, r.last_progress = ev.step, now


def _on_step(hub: EventHub, r: Replica, ev: m.StepOutputs, now: float) -> None:
    r.last_step, r.last_progress = ev.step, now
    for out in ev.outputs:
        stream = r.streams.get(out.request_id)
        if stream is None:
            continue
        stream.frame = b""  # answered: never resent
        stream.queue.put_nowait(out)
        hub.metrics.output(stream, out, now)
        if out.finish_reason is not None:
            r.streams.pop(out.request_id, None)
