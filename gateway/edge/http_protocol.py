"""uvicorn's h11 protocol with the edge's bounds: a request head deadline, the connection bound
and its evictions, the body budget, the stalled-send watch, and answers to broken requests in
their path's error shape. Its collaborators: answers.py, conntimers.py, bodycharge.py (with
bodybudget.py), bodychunks.py, idle.py, slowbody.py."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from gateway.edge.answers import cancel, error_answer, request_path
from gateway.edge.bodybudget import RELEASE_KEY, BodyBudget
from gateway.edge.bodycharge import BodyCharge
from gateway.edge.bodychunks import TOO_SMALL, CountedConnection
from gateway.edge.connlimit import OverloadLog
from gateway.edge.conntimers import HeadTimer, SendWatch
from gateway.edge.idle import FRESH_S, IdleConnections
from gateway.edge.shapes import OPENAI_ONLY, ErrorShapes
from gateway.edge.slowbody import Body, SlowBodies

log = logging.getLogger("rapid_mlx.gateway")

MAX_HEADER_BYTES = 64 * 1024  # request line + headers; a larger head gets 431
HEADER_TIMEOUT = 15.0  # seconds a connection may take to send a complete request head
LINGER = 2.0  # seconds a refused connection's remaining input is read and dropped
SEND_STALL = 60.0  # seconds a client may take none of an answer the server is held up sending
# (nginx's send_timeout): then the connection is reset, its request's app sees the client gone
REFUSAL_WAIT = 0.5  # seconds a refused connection may take to send its request line (its path
# picks the 503's error shape: Anthropic's on /v1/messages); then it gets the OpenAI shape


class Refusals:
    """The connections past the bound being refused right now (each lingers a moment to read
    its request, so that the 503 reaches the client instead of a reset), and their log."""

    def __init__(self) -> None:
        self.lingering = 0
        self.log = OverloadLog()


class GuardedH11Protocol(H11Protocol):
    """Drop a connection whose request head is not complete within `header_timeout` seconds
    (slowloris), answer an oversized or malformed head in its path's error shape; past
    `max_connections` open ones, a new connection evicts the one idle the longest (no request
    head yet, gateway/edge/idle.py), else the one whose request body has stalled the most
    (gateway/edge/slowbody.py), or, when every connection is serving a request or receiving
    its body at a fair rate, gets a 503. A request whose body does not fit under the server's
    budget of held body bytes gets a 503 before its body is read (gateway/edge/bodybudget.py)."""

    header_timeout: float = HEADER_TIMEOUT
    max_connections: int | None = None  # open client connections; past it: 503 and close
    refusals: Refusals = Refusals()  # a subclass per server gets its own (gateway/server.py)
    idle: IdleConnections[GuardedH11Protocol] = IdleConnections()  # per server too
    bodies: SlowBodies[GuardedH11Protocol] = SlowBodies()  # per server too
    budget: BodyBudget = BodyBudget()  # per server too
    shapes: ErrorShapes = OPENAI_ONLY  # the error shape per path (gateway/server.py: the app's)
    linger_slots: int = 32  # refused connections that may linger at once; more are reset at once
    send_stall: float = SEND_STALL
    _head: HeadTimer  # the request head's deadline (set in connection_made)
    _charge: BodyCharge  # the current request's charge to the body budget (connection_made)
    _send_watch: SendWatch | None = None  # made when writing first pauses
    _lingering = False
    _refused = False  # refused or evicted: not among the server's connections, closing
    _refusal: asyncio.TimerHandle | None = None  # refused, its request line awaited
    _line = b""  # the start of the request head being read (a refused one's: before its 503)
    _line_read = False  # _line holds the request line (or 8 KiB): no more is kept
    _ending: asyncio.TimerHandle | None = None  # closes (or resets) a lingering one at the end

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # h11's connection, each body's parsing work bounded (gateway/edge/bodychunks.py)
        self.conn = CountedConnection(h11.SERVER, self.conn._max_incomplete_event_size)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A new connection: within the bound it joins, else it makes room or is refused."""
        self._head = HeadTimer(self.loop, transport, self.header_timeout, self._head_timed_out)
        self._charge = BodyCharge(self.budget, self)
        if self.max_connections is not None and len(self.connections) >= self.max_connections:
            if not self._make_room():  # every connection is serving a request (or reading one)
                self._refuse(transport)
                return
        super().connection_made(transport)
        self._head.arm()
        self.idle.add(self)

    # ---- the connection bound: evictions and refusals ----------------------------------

    def _evict(self, waited: float) -> None:
        """Close this idle connection to make room for a new one: a 408 if it had sent part of
        a request head, else just a close (as an idle keep-alive timeout does). It leaves the
        server's connections at once; its fd is counted with the lingering refusals until
        connection_lost (the same reserve), reset at once when those slots are full, and after
        LINGER seconds if its client does not read what is left to send."""
        self._leave_bound()
        self.idle.log.hit("evicting idle connections: %d open, the most allowed "
                          "(--max-connections); this one idle %.1fs", self.max_connections,
                          waited)
        if self.conn.trailing_data[0]:
            self.transport.write(self._answer(
                408, "Request Timeout", "The server needed this connection for another client: "
                f"the request head was not complete after {waited:.1f}s.", "connection_evicted",
                path=request_path(self._line)))
        if self.refusals.lingering > self.linger_slots:
            self.transport.abort()  # lingering evictions would eat the fds kept in reserve
            return
        self.transport.close()  # a keep-alive one's last answer is still sent out first...
        if self.transport.get_write_buffer_size():
            self._end_later(self.transport.abort)  # ...for a moment

    def _leave_bound(self) -> None:
        """Leave the server's connections at once, evicted; the fd counts with the lingering
        refusals until connection_lost (the same reserve)."""
        self._head.disarm()
        self.connections.discard(self)
        self._refused = True
        self.refusals.lingering += 1  # until connection_lost

    def _make_room(self) -> bool:
        """Evict one connection for this new one: the one idle the longest unless it connected
        only just (FRESH_S: its head is likely on the way) and a stalled body can go instead;
        False when no connection may go."""
        age = self.idle.oldest_age()
        if age is None or age < FRESH_S:
            stalled = self.bodies.pop_stalled(GuardedH11Protocol.body_evictable)
            if stalled is not None:
                stalled[0].evict_body(stalled[1])
                return True
        oldest = self.idle.pop_oldest()
        if oldest is None:
            return False
        oldest[0]._evict(oldest[1])
        return True

    def body_evictable(self) -> bool:
        """Whether the client alone holds this connection's request body up: not while its
        answer is being sent, the server has paused reading, or the client waits for a 100
        Continue."""
        cycle = self.cycle
        if self._refused or self._lingering or cycle is None or self.transport.is_closing():
            return False
        if cycle.response_started and not cycle.response_complete:
            return False  # being answered (a response may start before the body is complete)
        return not (cycle.waiting_for_100_continue or self.flow.read_paused)

    def evict_body(self, body: Body, for_budget: bool = False) -> None:
        """Close this connection, whose request body has stalled, to make room for a new one
        (FOR_BUDGET: its charge, given back at once): a 408 in its path's error shape (none if
        its answer was already sent), then closed as a refused one is; the app reading the body
        sees the client gone."""
        self._leave_bound()
        waited = time.monotonic() - body.start
        what = "this connection"
        if for_budget:
            what = "the memory held for this request"
            self.budget.eviction_log.hit(
                "evicting requests whose body stalled: %d bytes held, at most %d "
                "(--max-body-memory); this one %d of %d bytes in %.1fs", self.budget.in_use,
                self.budget.total, body.bytes, self._charge.charged, waited)
            self._charge.release()
        else:
            self.bodies.log.hit("evicting connections whose request body stalled: %d open, the "
                                "most allowed (--max-connections); this one %d bytes in %.1fs",
                                self.max_connections, body.bytes, waited)
        out = b""
        cycle = self.cycle
        if not cycle.response_complete:
            cycle.disconnected = True  # its receive() answers http.disconnect, its send() drops
            cycle.message_event.set()
            out = self._answer(408, "Request Timeout", f"The server needed {what} for another "
                               f"client: the request body was arriving too slowly ({body.bytes} "
                               f"bytes in {waited:.1f}s).", "connection_evicted",
                               path=self.scope["path"])
        if self.refusals.lingering > self.linger_slots:
            self.transport.write(out)
            self.transport.abort()  # lingering evictions would eat the fds kept in reserve
            return
        self._linger(out)

    def _refuse(self, transport: asyncio.Transport) -> None:
        """Answer a connection past the bound with a 503, reading no more of its request than
        the request line (its path picks the error shape); it never joins the server's
        connections."""
        self.transport = transport
        self._refused = True
        self.refusals.lingering += 1  # until connection_lost
        self.refusals.log.hit("refusing connections: %d open, the most allowed "
                              "(--max-connections)", len(self.connections))
        if self.refusals.lingering > self.linger_slots:
            transport.write(self._unavailable(""))
            transport.abort()  # lingering refusals would eat the fds kept in reserve
            return
        self._refusal = self.loop.call_later(REFUSAL_WAIT, self._answer_refusal)

    def _unavailable(self, path: str) -> bytes:
        """The 503 of a refused connection, in PATH's error shape."""
        return self._answer(503, "Service Unavailable", "The server has too many open "
                            f"connections (at most {self.max_connections}). Retry soon.",
                            "too_many_connections", kind="server_error",
                            extra="retry-after: 1\r\n", path=path)

    def _answer_refusal(self) -> None:
        """Send a refused connection its 503, shaped for the path of its request line (when it
        arrived), and linger."""
        cancel(self._refusal)
        self._refusal = None
        if self.transport.is_closing():
            return
        self._linger(self._unavailable(request_path(self._line)))

    # ---- reading requests --------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Read DATA: track the head's line and deadline, idleness, the body's pace and charge."""
        if self._refusal is not None:  # refused: its request line picks the 503's shape
            self._line += data[:8192]
            if b"\n" in self._line or len(self._line) >= 8192:
                self._answer_refusal()
            return
        if self._lingering or self._refused:
            return  # the request was refused; its remaining bytes are dropped
        if not self._line_read and self.conn.their_state is h11.IDLE:  # a head's first bytes:
            self._line += data[:8192]  # its path picks the shape of an error about the head
            self._line_read = b"\n" in data[:8192] or len(self._line) >= 8192
        charge = self._charge
        if charge.metered and charge.cycle is self.cycle \
                and self.conn.their_state is h11.SEND_BODY:
            charge.received += len(data)
        super().data_received(data)
        if charge.metered and charge.received > charge.charged and not self._lingering:
            self._charge_more()
        state = self.conn.their_state
        if state is h11.IDLE and not self._lingering:
            self._head.arm()  # a new request head began (or continues): it keeps its deadline
            self.idle.add(self)  # (kept in its place if already idle)
            self._untrack()
            return
        self._head.disarm()
        self.idle.discard(self)  # a request is being read or served: not idle
        if state is h11.SEND_BODY and not self._lingering and not self.flow.read_paused:
            # its body is arriving: evictable if slow (of the chunk that ended the head, only
            # the body bytes count: those still buffered for the app)
            n = len(data) if self in self.bodies else len(self.cycle.body)
            self.bodies.received(self, n)
            if charge.charged:  # it holds part of the body budget: evictable if slow for its size
                self.budget.pending.received(self, n, charge.pace)
        else:
            self._untrack()  # complete (being served: never evicted), or the server
            # paused reading it (its clock starts again when reading resumes)

    def handle_events(self) -> None:
        """h11's events; a new request head is admitted under the body budget."""
        before = self.cycle
        super().handle_events()
        cycle = self.cycle
        if cycle is not before and cycle is not None and not (self._lingering or self._refused):
            self._admit(cycle)  # a new request head: its app has not run yet

    def _untrack(self) -> None:
        """This connection's body is no longer arriving (complete, paused, or closing)."""
        self.bodies.discard(self)
        self.budget.pending.discard(self)

    # ---- the body budget ---------------------------------------------------------------

    def _admit(self, cycle: RequestResponseCycle) -> None:
        """Charge the new request CYCLE's body to the budget, or refuse it with a 503 before its
        app reads any of it (the app sees the client gone)."""
        refused = self._charge.admit(cycle, self.headers, self.scope["path"], len(cycle.body))
        if refused is not None:
            self._refuse_body(cycle, refused)
            return
        extensions: dict[str, Any] = cast(Any, self.scope).setdefault("extensions", {})
        extensions[RELEASE_KEY] = lambda: self._body_done(cycle)

    def _body_done(self, cycle: RequestResponseCycle) -> None:
        """CYCLE's app holds nothing of its (complete) body any more: give its charge back now
        rather than when its answer completes (bodybudget.release_body)."""
        if self._charge.cycle is cycle and self.conn.their_state is not h11.SEND_BODY:
            self._charge.release()

    def _charge_more(self) -> None:
        """Charge the bytes of a metered body received past its charge, or refuse its request
        (a 503) when they do not fit."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete:
            return
        refused = self._charge.more(cycle)
        if refused is not None:
            self._refuse_body(cycle, refused)

    def _refuse_body(self, cycle: RequestResponseCycle, want: int) -> None:
        """Answer CYCLE with the 503 of a full body budget (WANT bytes did not fit) in its
        path's shape, unless part of its answer is out; its app sees the client gone."""
        path = self.scope["path"]
        self.budget.refusal(path, want)
        started = cycle.response_started
        cycle.disconnected = True  # its receive() answers http.disconnect, its send() drops
        cycle.message_event.set()
        self.flow.resume_reading()  # the rest of its body is read and dropped while lingering
        self._linger(b"" if started else self._answer(
            503, "Service Unavailable", "The server holds too much request data right now "
            f"(at most {self.budget.total} bytes of request bodies at once). Retry soon.",
            "request_bodies_full", kind="server_error", extra="retry-after: 1\r\n", path=path))

    # ---- the end of requests and connections -------------------------------------------

    def connection_lost(self, exc: Exception | None) -> None:
        """Give back the charge, leave every set and timer, then uvicorn's own cleanup."""
        self._charge.release()
        self.idle.discard(self)
        self._untrack()
        cancel(self._ending)  # a closed transport must not be reset: once its buffer drained,
        self._ending = None  # asyncio's abort() raised AttributeError on it
        if self._send_watch is not None:
            self._send_watch.stop()
        cancel(self._refusal)
        self._refusal = None
        if self._refused:
            self.refusals.lingering -= 1
            if self.flow is None:
                return  # refused: it never joined the server's connections
        self._head.disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        """The answer is complete: its charge goes back, the connection is idle again; one
        answered before its body was read (a 401, a 413) closes: the rest is dropped unparsed."""
        self._charge.release()  # before the next pipelined request is admitted
        self._line, self._line_read = b"", False  # the next request's line is kept anew
        if self.conn.their_state is h11.SEND_BODY and not self.transport.is_closing():
            super().on_response_complete()  # (its body unread: no next request is parsed)
            self._linger(b"")  # parsing the rest (uvicorn's way, to keep the connection) cost
            return  # 15 s of loop time for a 7.8 MB body of one-byte chunks sent with no key
        super().on_response_complete()
        self._head.disarm()  # idle keep-alive connections are uvicorn's timeout_keep_alive's
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.idle.add(self)  # waiting for its next request: evictable

    def _head_timed_out(self) -> None:
        """The request head was not complete in time: hang up, or a 408 if part of it came."""
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if not self.conn.trailing_data[0]:
                self.transport.close()  # nothing sent at all: just hang up
                return
            self._linger(self._answer(408, "Request Timeout", "The request headers were not "
                                      f"complete within {self.header_timeout:g}s.",
                                      "header_timeout", path=request_path(self._line)))

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark unsent: from now on, a client that
        takes none of it for `send_stall` seconds is reset (a closing connection's answer too:
        close() waits for it). Without this an unread answer held its memory and its connection,
        never idle, never evicted, for as long as the client kept the socket open."""
        super().pause_writing()
        if self._send_watch is None:
            self._send_watch = SendWatch(self.loop, self.transport, self.send_stall)
        self._send_watch.paused()

    def resume_writing(self) -> None:
        """The client takes the answer again: stop the stalled-send watch."""
        super().resume_writing()
        if self._send_watch is not None:
            self._send_watch.stop()

    def _should_upgrade(self) -> bool:
        """Never: the gateway serves no WebSocket, and uvicorn's upgrade hands the socket to a
        protocol outside the bound (a traceback from this one's bookkeeping): an Upgrade header
        is ignored, as HTTP allows."""
        return False

    def send_400_response(self, msg: str) -> None:
        """A broken head or body framing: a 400 (431 for a head too large) in its path's shape."""
        self._head.disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:  # its body broke the framing:
            cycle.disconnected = True  # its app sees the client gone, its answer is dropped
            cycle.message_event.set()  # (it must not write after this 400 and the EOF)
            if cycle.response_started:
                self._linger(b"")  # part of its answer is out: a 400 now would corrupt it
                return
        head = bytes(self.conn.trailing_data[0])
        path = self.scope["path"] if cycle is not None and not cycle.response_complete \
            else request_path(self._line or head)  # a broken body, else a broken head: its line
        if isinstance(self.conn, CountedConnection) and self.conn.over_budget:
            out = self._answer(400, "Bad Request", TOO_SMALL, "body_chunks_too_small", path=path)
        elif len(head) > MAX_HEADER_BYTES:
            out = self._answer(431, "Request Header Fields Too Large", "The request line and "
                               f"headers must fit in {MAX_HEADER_BYTES} bytes.",
                               "headers_too_large", path=path)
        else:
            out = self._answer(400, "Bad Request", f"Malformed HTTP request: {msg}",
                               "invalid_http", path=path)
        self._linger(out)

    def _answer(self, status: int, reason: str, message: str, code: str,
                kind: str = "invalid_request_error", extra: str = "", path: str = "") -> bytes:
        """An error answer of this server in PATH's error shape (answers.error_answer)."""
        return error_answer(self.shapes, status, reason, message, code, kind, extra, path)

    def _linger(self, out: bytes) -> None:
        """Answer, half-close, and read (and drop) what the client still sends for a moment:
        closing with unread input would reset the connection and lose the answer."""
        self._lingering = True
        self.idle.discard(self)  # closing anyway: it counts until closed, but is not evicted
        self._untrack()
        if out:
            self.transport.write(out)
        if self.transport.is_closing() or not self.transport.can_write_eof():
            self.transport.close()
            return
        try:
            self.transport.write_eof()
        except OSError:  # the client is already gone (ENOTCONN): nothing to linger for
            self.transport.close()
            return
        self._end_later(self._close_lingering)

    def _close_lingering(self) -> None:
        """Close after the linger; reset LINGER seconds later if the client still leaves part
        of the answer unread (close() alone would wait for it forever, the slot kept)."""
        self.transport.close()
        if self.transport.get_write_buffer_size():
            self._end_later(self.transport.abort)

    def _end_later(self, end: Callable[[], None]) -> None:
        """END (the transport's close or abort) after LINGER seconds, unless the connection is
        lost before."""
        cancel(self._ending)
        self._ending = self.loop.call_later(LINGER, end)
