"""One bound on the request-body bytes the gateway holds at once, over every connection.

Each body is bounded (gateway/edge/limits.py MAX_BODY_BYTES, images' MAX_IMAGE_BODY_BYTES,
audio's MAX_FILE_BYTES) and so are the connections, but N connections each sending a body just
under its limit held N times that limit: 10,000 connections of 64 MiB image bodies, 640 GB.
So a request's body is charged to one budget per server from its complete head until its
answer is complete (or its connection closes): its declared Content-Length at once, before any
of it is read (a body of undeclared size, chunked, is charged MAX_BODY_BYTES at once and its
bytes past that as they arrive; a Content-Length over LARGEST_BODY, which every route refuses
unread with a 413, is charged only what arrives). The charge covers the body as the gateway
holds it, raw then decoded, for as long as the request holds it: a handler that no longer does
(a streamed chat answer, once it started) gives it back early with release_body.

A request that does not fit first makes room by evicting the requests whose charged bodies
have fallen behind their pace (`pace`: what completes them within their read timeout; so a
client declaring large bodies and sending them slowly cannot hold the budget cheaply: it must
send budget / 30 s, ~9 MB/s for the default), as slowbody's stalled bodies give way at the
connection bound: each gets a 408 `connection_evicted`. When none has, the newcomer gets a 503
with Retry-After at once, before any of its body is read, in its path's error shape
(gateway/edge/http_protocol.py). A request accepted with a declared length keeping its pace is
never refused later.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.edge.connlimit import OverloadLog
from gateway.edge.limits import BODY_READ_TIMEOUT_S, MAX_BODY_BYTES
from gateway.edge.slowbody import MIN_RATE, SlowBodies
from gateway.images.limits import MAX_IMAGE_BODY_BYTES

# the largest body any route reads (images'; an audio upload is at most 25 MiB + 256 KiB, an
# admin body 64 KiB); larger: 413 unread
LARGEST_BODY = max(MAX_BODY_BYTES, MAX_IMAGE_BODY_BYTES)
DEFAULT_BUDGET = 4 * LARGEST_BODY  # 256 MiB: 4 image bodies, or 32 text ones, at their limits
MIN_BUDGET = LARGEST_BODY  # a smaller budget would refuse a body every route accepts, forever
UPLOAD_PACE_S = 300.0  # audio uploads' whole-body timeout (gateway/audio/upload.py UPLOAD_TIMEOUT_S)


def pace(charge: int, path: str) -> float:
    """Bytes a second a body charged CHARGE bytes must arrive at, on average after slowbody's
    GRACE_S, to keep its charge when the budget is full: what finishes it within its read
    timeout (30 s; an audio upload's 300 s), at least slowbody's MIN_RATE."""
    window = UPLOAD_PACE_S if path.startswith("/v1/audio/") else BODY_READ_TIMEOUT_S
    return max(MIN_RATE, charge / window)


class BodyBudget:
    """The request-body bytes charged right now, out of `total`."""

    def __init__(self, total: int = DEFAULT_BUDGET) -> None:
        self.total = total
        self.in_use = 0
        self.refused = 0  # requests refused so far
        self.log = OverloadLog()  # refusals
        self.eviction_log = OverloadLog()
        self.pending: SlowBodies[Any] = SlowBodies()  # charged bodies still arriving

    def take(self, n: int) -> bool:
        """Charge N more bytes if they fit; False (nothing charged) when they do not."""
        if self.in_use + n > self.total:
            return False
        self.in_use += n
        return True

    def give_back(self, n: int) -> None:
        """Release N bytes charged before."""
        self.in_use -= n

    def refusal(self, path: str, want: int) -> None:
        """Count (and log, once per interval) a request of WANT body bytes refused."""
        self.refused += 1
        self.log.hit("refusing request bodies: %d bytes held, at most %d (--max-body-memory); "
                     "this one %d bytes to %s", self.in_use, self.total, want, path[:100])


def upfront(headers: list[tuple[bytes, bytes]]) -> tuple[int, bool]:
    """The bytes a request with HEADERS (h11-checked, lower-case names) is charged before its
    body is read, and whether its bytes past them are charged as they arrive: its Content-Length
    (none past it), MAX_BODY_BYTES when chunked (h11 then ignores a Content-Length), nothing
    when its Content-Length is past LARGEST_BODY (every route refuses it unread)."""
    if any(name == b"transfer-encoding" for name, _ in headers):
        return MAX_BODY_BYTES, True
    for name, value in headers:
        if name == b"content-length":
            declared = int(value) if len(value) <= 18 else LARGEST_BODY + 1
            return (declared, False) if declared <= LARGEST_BODY else (0, True)
    return 0, False


RELEASE_KEY = "rapid_mlx.release_body"  # in a request's scope["extensions"]: gives its charge back


def release_body(scope: Mapping[str, Any]) -> None:
    """Give the request's body charge back before its answer completes: call it once its handler
    holds nothing of the body (raw or decoded) but what the context length bounds, e.g. when a
    streamed answer starts. A no-op outside the guarded server (in-process test clients)."""
    hook = scope.get("extensions", {}).get(RELEASE_KEY)
    if hook is not None:
        hook()


class BudgetGauge(Collector):
    """Scrape-time gauges of a BodyBudget for the gateway's /metrics."""

    def __init__(self, budget: BodyBudget) -> None:
        self.budget = budget

    def collect(self) -> Any:
        """The bytes held and the bound, and the requests refused so far."""
        held = GaugeMetricFamily("rapid_mlx_request_body_bytes",
                                 "Request-body bytes the gateway holds (charged) right now.")
        held.add_metric([], self.budget.in_use)
        bound = GaugeMetricFamily("rapid_mlx_request_body_bytes_max",
                                  "The bound on held request-body bytes (--max-body-memory).")
        bound.add_metric([], self.budget.total)
        refused = CounterMetricFamily("rapid_mlx_request_body_refusals",
                                      "Requests refused (503) because their body did not fit "
                                      "under --max-body-memory.")
        refused.add_metric([], self.budget.refused)
        yield from (held, bound, refused)
