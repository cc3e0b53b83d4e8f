"""What the gateway tracks per alias and per request."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from protocol import messages as m


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
    submitted_at: float = field(default_factory=time.monotonic)
    first_token_at: float | None = None
    last_token_at: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    frame: bytes = b""  # the encoded job, until the worker answers (to resend it once)
    retried: bool = False


@dataclass
class Parked:
    """A job that could not reach a worker that just left: sent to the next one, or expired."""

    stream: Stream
    frame: bytes
    deadline: float


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
    revision: str | None = None
    ready_at: float | None = None
    last_seen: float = 0.0
    last_step: int = -1
    last_progress: float = 0.0
    busy_since: float = 0.0
    restarts: int = 0
    last_exit: str | None = None
    restarting: bool = False  # a worker that served is being replaced: new requests wait
    heartbeat: m.Heartbeat | None = None
    secret: str | None = None  # the per-boot secret of the worker being spawned for boot_id
    user_id: str | None = None  # CURVE key (z85) of the current worker, when CURVE is on
    streams: dict[str, Stream] = field(default_factory=dict)
    parked: list[Parked] = field(default_factory=list)  # jobs waiting for the next worker
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)
