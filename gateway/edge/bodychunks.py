"""A bound on the parsing work one request body may cost: h11 events per body byte.

h11 turns every chunk of a chunked body (and every read of any body) into one Data event, at
~14 us of Python each on the event loop. A body of one-byte chunks ("1\\r\\nx\\r\\n", 6 bytes on the
wire) cost the gateway 18.6 s of loop time for 7.8 MB: every other stream and /livez stalled,
before the request's API key was even looked at. So a request's body may produce FREE_EVENTS
events, plus one per MIN_EVENT_BYTES body bytes received; past that its body is refused with a
400 `body_chunks_too_small` and the connection closes (http_protocol.py). A client writes a JSON
body in one go (one chunk, or one per socket write of a streamed upload, kilobytes each); TCP
segments carry ~1.4 KB, so a slow link's reads stay under the bound too. The worst a request may
cost is then MAX_BODY_BYTES / MIN_EVENT_BYTES events (~0.2 s for 8 MiB, spread over its reads,
at most ~7 ms per 256 KiB read), like a body sent in ordinary chunks.
"""

from __future__ import annotations

from typing import Any

import h11

FREE_EVENTS = 1024  # Data events a body may produce whatever its size
MIN_EVENT_BYTES = 512  # each further event must come with this many body bytes on average
TOO_SMALL = ("The request body arrives in chunks too small to parse cheaply: send it in "
             f"chunks of at least {MIN_EVENT_BYTES} bytes on average (or with a "
             "Content-Length).")


class ChunkedTooFinely(h11.RemoteProtocolError):
    """A request body broke its event budget (caught where h11's errors are: a 400)."""


class CountedConnection(h11.Connection):
    """h11's server connection, counting each request body's Data events against its budget."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.body_events = 0  # the current request's Data events so far
        self.body_bytes = 0  # and their bytes

    def next_event(self) -> Any:
        """h11's next event; raises ChunkedTooFinely when the body's events pass the budget."""
        event = super().next_event()
        if type(event) is h11.Data:
            self.body_events += 1
            self.body_bytes += len(event.data)
            if self.body_events > FREE_EVENTS + self.body_bytes // MIN_EVENT_BYTES:
                raise ChunkedTooFinely(TOO_SMALL)
        elif type(event) is h11.Request:
            self.body_events = self.body_bytes = 0
        return event

    @property
    def over_budget(self) -> bool:
        """True when the current request's body broke the budget."""
        return self.body_events > FREE_EVENTS + self.body_bytes // MIN_EVENT_BYTES
