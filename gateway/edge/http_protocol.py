"""uvicorn's h11 protocol with a header read timeout and OpenAI-shaped answers to broken requests."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any, cast

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle

from gateway.edge.bodybudget import RELEASE_KEY, BodyBudget, pace, upfront
from gateway.edge.connlimit import OverloadLog
from gateway.edge.errors import APIError
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


def _error(shapes: ErrorShapes, status: int, reason: str, message: str, code: str,
           kind: str = "invalid_request_error", extra: str = "", path: str = "") -> bytes:
    """A whole HTTP/1.1 error answer (closing the connection) in PATH's error shape."""
    err = APIError(status, message, type=kind, code=code)
    body = json.dumps(shapes.body(err, path)).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n{extra}connection: close\r\n\r\n")
    return head.encode() + body


def _cancel(timer: asyncio.TimerHandle | None) -> None:
    """Cancel TIMER, if there is one."""
    if timer is not None:
        timer.cancel()


def _path(head: bytes) -> str:
    """The path of the request line at the start of HEAD (the error shape follows it: Anthropic's
    on /v1/messages), or '' before a whole line."""
    line = head.split(b"\n", 1)[0].split(b" ")
    target = line[1] if len(line) > 2 else b""
    return target.split(b"?", 1)[0].decode("latin-1")


class Refusals:
    """The connections past the bound being refused right now (each lingers a moment to read
    its request, so that the 503 reaches the client instead of a reset), and their log."""

    def __init__(self) -> None:
        self.lingering = 0
        self.log = OverloadLog()


class GuardedH11Protocol(H11Protocol):
    """Drop a connection whose request head is not complete within `header_timeout` seconds
    (slowloris), answer an oversized or malformed head in the OpenAI error shape; past
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
    _head_timer: asyncio.TimerHandle | None = None
    _lingering = False
    _refused = False  # refused or evicted: not among the server's connections, closing
    _refusal: asyncio.TimerHandle | None = None  # refused, its request line awaited
    _line = b""  # the start of the request head being read (a refused one's: before its 503)
    _line_read = False  # _line holds the request line (or 8 KiB): no more is kept
    _ending: asyncio.TimerHandle | None = None  # closes (or resets) a lingering one at the end
    send_stall: float = SEND_STALL
    _send_watch: asyncio.TimerHandle | None = None  # while writing is paused: is it taken?
    _unsent = 0  # bytes left to send when the watch last looked
    _charged = 0  # body bytes of the current request charged to the budget
    _charged_cycle: object = None  # that request's cycle, until its answer is complete
    _metered = False  # its body's size was not declared (or is past any route's): charged as
    _received = 0  # it arrives, these bytes (with chunk framing) so far
    _pace = 0.0  # bytes a second its body must keep up while it holds budget (bodybudget.pace)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        if self.max_connections is not None and len(self.connections) >= self.max_connections:
            if not self._make_room():  # every connection is serving a request (or reading one)
                self._refuse(transport)
                return
        super().connection_made(transport)
        self._arm()
        self.idle.add(self)

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
            self.transport.write(_error(
                self.shapes, 408, "Request Timeout", "The server needed this connection for another client: "
                f"the request head was not complete after {waited:.1f}s.", "connection_evicted",
                path=_path(self._line)))
        if self.refusals.lingering > self.linger_slots:
            self.transport.abort()  # lingering evictions would eat the fds kept in reserve
            return
        self.transport.close()  # a keep-alive one's last answer is still sent out first...
        if self.transport.get_write_buffer_size():
            self._end_later(self.transport.abort)  # ...for a moment

    def _leave_bound(self) -> None:
        """Leave the server's connections at once, evicted; the fd counts with the lingering
        refusals until connection_lost (the same reserve)."""
        self._disarm()
        self.connections.discard(self)
        self._refused = True
        self.refusals.lingering += 1  # until connection_lost

    def _make_room(self) -> bool:
        """Evict one connection for this new one: the one idle the longest unless it connected
        only just (FRESH_S: its head is likely on the way) and a stalled body can go instead;
        False when no connection may go."""
        age = self.idle.oldest_age()
        if age is None or age < FRESH_S:
            stalled = self.bodies.pop_stalled(GuardedH11Protocol._body_evictable)
            if stalled is not None:
                stalled[0]._evict_body(stalled[1])
                return True
        oldest = self.idle.pop_oldest()
        if oldest is None:
            return False
        oldest[0]._evict(oldest[1])
        return True

    def _body_evictable(self) -> bool:
        """Whether the client alone holds this connection's request body up: not while its
        answer is being sent, the server has paused reading, or the client waits for a 100
        Continue."""
        cycle = self.cycle
        if self._refused or self._lingering or cycle is None or self.transport.is_closing():
            return False
        if cycle.response_started and not cycle.response_complete:
            return False  # being answered (a response may start before the body is complete)
        return not (cycle.waiting_for_100_continue or self.flow.read_paused)

    def _evict_body(self, body: Body, for_budget: bool = False) -> None:
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
                self.budget.total, body.bytes, self._charged, waited)
            self._release()
        else:
            self.bodies.log.hit("evicting connections whose request body stalled: %d open, the "
                                "most allowed (--max-connections); this one %d bytes in %.1fs",
                                self.max_connections, body.bytes, waited)
        out = b""
        cycle = self.cycle
        if not cycle.response_complete:
            cycle.disconnected = True  # its receive() answers http.disconnect, its send() drops
            cycle.message_event.set()
            out = _error(self.shapes, 408, "Request Timeout", f"The server needed {what} for another "
                         f"client: the request body was arriving too slowly ({body.bytes} bytes "
                         f"in {waited:.1f}s).", "connection_evicted", path=self.scope["path"])
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
        return _error(self.shapes, 503, "Service Unavailable", f"The server has too many open connections "
                      f"(at most {self.max_connections}). Retry soon.", "too_many_connections",
                      kind="server_error", extra="retry-after: 1\r\n", path=path)

    def _answer_refusal(self) -> None:
        """Send a refused connection its 503, shaped for the path of its request line (when it
        arrived), and linger."""
        _cancel(self._refusal)
        self._refusal = None
        if self.transport.is_closing():
            return
        self._linger(self._unavailable(_path(self._line)))

    def data_received(self, data: bytes) -> None:
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
        if self._metered and self._charged_cycle is self.cycle \
                and self.conn.their_state is h11.SEND_BODY:
            self._received += len(data)
        super().data_received(data)
        if self._metered and self._received > self._charged and not self._lingering:
            self._charge_more()
        state = self.conn.their_state
        if state is h11.IDLE and not self._lingering:
            self._arm()  # a new request head began (or continues): it keeps its first deadline
            self.idle.add(self)  # (kept in its place if already idle)
            self._untrack()
            return
        self._disarm()
        self.idle.discard(self)  # a request is being read or served: not idle
        if state is h11.SEND_BODY and not self._lingering and not self.flow.read_paused:
            # its body is arriving: evictable if slow (of the chunk that ended the head, only
            # the body bytes count: those still buffered for the app)
            n = len(data) if self in self.bodies else len(self.cycle.body)
            self.bodies.received(self, n)
            if self._charged:  # it holds part of the body budget: evictable if slow for its size
                self.budget.pending.received(self, n, self._pace)
        else:
            self._untrack()  # complete (being served: never evicted), or the server
            # paused reading it (its clock starts again when reading resumes)

    def handle_events(self) -> None:
        before = self.cycle
        super().handle_events()
        cycle = self.cycle
        if cycle is not before and cycle is not None and not (self._lingering or self._refused):
            self._admit(cycle)  # a new request head: its app has not run yet

    def _admit(self, cycle: RequestResponseCycle) -> None:
        """Charge the new request CYCLE's body to the budget, or refuse it with a 503 before its
        app reads any of it (the app sees the client gone)."""
        want, metered = upfront(self.headers)
        if not self._take(want):
            self._refuse_body(cycle, want)
            return
        self._charged, self._charged_cycle, self._metered = want, cycle, metered
        self._received = len(cycle.body)
        self._pace = pace(want, self.scope["path"])
        extensions: dict[str, Any] = cast(Any, self.scope).setdefault("extensions", {})
        extensions[RELEASE_KEY] = lambda: self._body_done(cycle)

    def _body_done(self, cycle: RequestResponseCycle) -> None:
        """CYCLE's app holds nothing of its (complete) body any more: give its charge back now
        rather than when its answer completes (bodybudget.release_body)."""
        if self._charged_cycle is cycle and self.conn.their_state is not h11.SEND_BODY:
            self._release()

    def _take(self, n: int) -> bool:
        """Charge N more bytes to the budget, evicting first, while they do not fit, the other
        requests whose bodies have fallen furthest behind their pace; False if they still do
        not fit (nothing charged)."""
        while not self.budget.take(n):
            stalled = self.budget.pending.pop_stalled(
                lambda c: c is not self and GuardedH11Protocol._body_evictable(c))
            if stalled is None:
                return False
            stalled[0]._evict_body(stalled[1], for_budget=True)
        return True

    def _untrack(self) -> None:
        """This connection's body is no longer arriving (complete, paused, or closing)."""
        self.bodies.discard(self)
        self.budget.pending.discard(self)

    def _charge_more(self) -> None:
        """Charge the bytes of a metered body received past its charge, or refuse its request
        (a 503) when they do not fit."""
        cycle = self.cycle
        if cycle is None or cycle.response_complete or self._charged_cycle is not cycle:
            return
        if self._take(self._received - self._charged):
            self._charged = self._received
            return
        self._refuse_body(cycle, self._received)

    def _refuse_body(self, cycle: RequestResponseCycle, want: int) -> None:
        """Answer CYCLE with the 503 of a full body budget (WANT bytes did not fit) in its
        path's shape, unless part of its answer is out; its app sees the client gone."""
        path = self.scope["path"]
        self.budget.refusal(path, want)
        started = cycle.response_started
        cycle.disconnected = True  # its receive() answers http.disconnect, its send() drops
        cycle.message_event.set()
        self.flow.resume_reading()  # the rest of its body is read and dropped while lingering
        self._linger(b"" if started else _error(
            self.shapes, 503, "Service Unavailable", "The server holds too much request data right now "
            f"(at most {self.budget.total} bytes of request bodies at once). Retry soon.",
            "request_bodies_full", kind="server_error", extra="retry-after: 1\r\n", path=path))

    def _release(self) -> None:
        """Give the current request's charge back to the budget."""
        self.budget.pending.discard(self)
        self.budget.give_back(self._charged)
        self._charged, self._charged_cycle, self._metered = 0, None, False

    def connection_lost(self, exc: Exception | None) -> None:
        self._release()
        self.idle.discard(self)
        self._untrack()
        _cancel(self._ending)  # a closed transport must not be reset: once its buffer drained,
        self._ending = None  # asyncio's abort() raised AttributeError on it
        self._unwatch_send()
        _cancel(self._refusal)
        self._refusal = None
        if self._refused:
            self.refusals.lingering -= 1
            if self.flow is None:
                return  # refused: it never joined the server's connections
        self._disarm()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        self._release()  # before the next pipelined request is admitted
        self._line, self._line_read = b"", False  # the next request's line is kept anew
        super().on_response_complete()
        self._disarm()  # idle keep-alive connections are uvicorn's timeout_keep_alive's business
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.idle.add(self)  # waiting for its next request: evictable

    def _arm(self) -> None:
        if self._head_timer is None and not self.transport.is_closing():
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        _cancel(self._head_timer)
        self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            if not self.conn.trailing_data[0]:
                self.transport.close()  # nothing sent at all: just hang up
                return
            self._linger(_error(self.shapes, 408, "Request Timeout", "The request headers were not complete "
                                f"within {self.header_timeout:g}s.", "header_timeout",
                                path=_path(self._line)))

    def pause_writing(self) -> None:
        """The transport holds more than its high-water mark unsent: from now on, a client that
        takes none of it for `send_stall` seconds is reset (a closing connection's answer too:
        close() waits for it). Without this an unread answer held its memory and its connection,
        never idle, never evicted, for as long as the client kept the socket open."""
        super().pause_writing()
        if self._send_watch is None:
            self._unsent = self.transport.get_write_buffer_size()
            self._send_watch = self.loop.call_later(self.send_stall, self._check_send)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unwatch_send()

    def _unwatch_send(self) -> None:
        _cancel(self._send_watch)
        self._send_watch = None

    def _check_send(self) -> None:
        """Reset the connection if its client has taken nothing since the last look."""
        self._send_watch = None
        left = self.transport.get_write_buffer_size()
        if left and left >= self._unsent:
            self.transport.abort()
        elif left:
            self._unsent = left
            self._send_watch = self.loop.call_later(self.send_stall, self._check_send)

    def _should_upgrade(self) -> bool:
        """Never: the gateway serves no WebSocket, and uvicorn's upgrade hands the socket to a
        protocol outside the bound (a traceback from this one's bookkeeping): an Upgrade header
        is ignored, as HTTP allows."""
        return False

    def send_400_response(self, msg: str) -> None:
        self._disarm()
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:  # its body broke the framing:
            cycle.disconnected = True  # its app sees the client gone, its answer is dropped
            cycle.message_event.set()  # (it must not write after this 400 and the EOF)
            if cycle.response_started:
                self._linger(b"")  # part of its answer is out: a 400 now would corrupt it
                return
        head = bytes(self.conn.trailing_data[0])
        path = self.scope["path"] if cycle is not None and not cycle.response_complete \
            else _path(self._line or head)  # a broken body, else a broken head: its line
        if len(head) > MAX_HEADER_BYTES:
            out = _error(self.shapes, 431, "Request Header Fields Too Large", "The request line and headers "
                         f"must fit in {MAX_HEADER_BYTES} bytes.", "headers_too_large", path=path)
        else:
            out = _error(self.shapes, 400, "Bad Request", f"Malformed HTTP request: {msg}", "invalid_http",
                         path=path)
        self._linger(out)

    def _linger(self, out: bytes) -> None:
        """Answer, half-close, and read (and drop) what the client still sends for a moment:
        closing with unread input would reset the connection and lose the answer."""
        self._lingering = True
        self.idle.discard(self)  # closing anyway: it counts until closed, but is not evicted
        self._untrack()
        if out:
            self.transport.write(out)
        if self.transport.can_write_eof():
            self.transport.write_eof()
            self._end_later(self._close_lingering)
        else:
            self.transport.close()

    def _close_lingering(self) -> None:
        """Close after the linger; reset LINGER seconds later if the client still leaves part
        of the answer unread (close() alone would wait for it forever, the slot kept)."""
        self.transport.close()
        if self.transport.get_write_buffer_size():
            self._end_later(self.transport.abort)

    def _end_later(self, end: Callable[[], None]) -> None:
        """END (the transport's close or abort) after LINGER seconds, unless the connection is
        lost before."""
        _cancel(self._ending)
        self._ending = self.loop.call_later(LINGER, end)
