"""What the gateway tracks per alias and per request."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from gateway.plane.prefix_tree import PrefixTree
from protocol import messages as m

# CPU seconds a worker's process must add for its CPU time to count as advancing: far more than
# its pulse thread alone spends between two marks (a deadlocked worker's only CPU use)
CPU_MOVED = 0.05


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
    key: str = ""  # the route key (gateway/plane/routing.py)
    ns: str = ""  # the route key's namespace (the job's cache salt)
    tenant: str = ""  # whose job (gateway/plane/tenants.py): its key's digest or client address


@dataclass
class Parked:
    """A job that could not reach a worker that just left: sent to the next one, or expired."""

    stream: Stream
    frame: bytes
    deadline: float


@dataclass(eq=False)
class Replica:
    """One worker process serving an alias: its proof, its facts, its load and its requests."""

    boot_id: str
    name: str  # the metrics label: r0, r1... for spawned workers, the boot id's start otherwise
    secret: str | None = None  # the per-boot secret a spawned worker must send
    identity: bytes | None = None  # set once its Ready is accepted
    user_id: str | None = None  # CURVE key (z85), when CURVE is on
    pid: int | None = None
    address: str = ""  # the worker's IP (tcp workers), as ZeroMQ saw it
    facts: m.ModelFacts | None = None
    state: str = "starting"  # starting, ready, draining
    ready_at: float | None = None
    last_seen: float = 0.0
    last_step: int = -1
    last_progress: float = 0.0
    busy_since: float = 0.0
    heartbeat: m.Heartbeat | None = None
    pulse: m.Pulse | None = None  # the last pulse (worker/serve/pulse.py), None: it sends none
    pulse_at: float = 0.0  # when it came
    cpu_mark: float = 0.0  # the worker's CPU seconds when they last moved by CPU_MOVED ...
    cpu_moved_at: float = 0.0  # ... and when that was
    streams: dict[str, Stream] = field(default_factory=dict)
    tree: PrefixTree = field(default_factory=PrefixTree)
    routed_chars: int = 0  # route-key characters sent here ...
    matched_chars: int = 0  # ... and how many of them its tree already held (prefix hit rate)

    @property
    def routable(self) -> bool:
        """True when new requests may go here."""
        return self.state == "ready" and self.identity is not None

    @property
    def load(self) -> int:
        """In-flight requests, or the worker's running + waiting when larger (other gateways)."""
        hb = self.heartbeat
        return max(len(self.streams), hb.running + hb.waiting if hb else 0)

    @property
    def hit_rate(self) -> float | None:
        """Share of the routed text that matched this replica's tree (the gateway's estimate)."""
        return round(self.matched_chars / self.routed_chars, 4) if self.routed_chars else None


@dataclass
class AliasState:
    """What the gateway knows about one alias and its replicas (worker processes)."""

    alias: str
    model: str
    state: str = "starting"  # starting, ready, draining, stopped, failed
    facts: m.ModelFacts | None = None  # of the last replica that became ready
    revision: str | None = None
    ready_at: float | None = None  # when a replica last became ready
    restarts: int = 0
    last_exit: str | None = None
    restarting: bool = False  # a worker that served is being replaced: new requests wait
    replicas: dict[str, Replica] = field(default_factory=dict)  # by boot id
    departed: int = 0  # external replicas that left and were not replaced yet (restart count)
    parked: list[Parked] = field(default_factory=list)  # jobs waiting for the next worker
    ready_event: asyncio.Event = field(default_factory=asyncio.Event)

    def ready_replicas(self) -> list[Replica]:
        """The replicas that take new requests, oldest first."""
        return sorted((r for r in self.replicas.values() if r.routable),
                      key=lambda r: r.ready_at or 0.0)

    @property
    def primary(self) -> Replica | None:
        """The oldest ready replica, else any (loading) one: the alias's single-worker view."""
        ready = self.ready_replicas()
        if ready:
            return ready[0]
        live = [r for r in self.replicas.values() if r.identity is not None]
        return live[0] if live else next(iter(self.replicas.values()), None)

    @property
    def identity(self) -> bytes | None:
        """The primary replica's routing identity (None: no connected worker)."""
        r = self.primary
        return r.identity if r else None

    @property
    def boot_id(self) -> str | None:
        """The primary replica's boot id."""
        r = self.primary
        return r.boot_id if r else None

    @property
    def pid(self) -> int | None:
        """The primary replica's pid."""
        r = self.primary
        return r.pid if r else None

    @property
    def heartbeat(self) -> m.Heartbeat | None:
        """The primary replica's last heartbeat."""
        r = self.primary
        return r.heartbeat if r else None

    @property
    def last_seen(self) -> float:
        """When the primary replica last sent anything."""
        r = self.primary
        return r.last_seen if r else 0.0

    @property
    def streams(self) -> dict[str, Stream]:
        """Every in-flight request of the alias, over all replicas (a copy: read only)."""
        out: dict[str, Stream] = {}
        for r in self.replicas.values():
            out.update(r.streams)
        return out
