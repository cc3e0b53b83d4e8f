"""The watchdog against a worker's pulse (worker/serve/pulse.py), with bare ZeroMQ peers: a long
step whose CPU time advances is slow, not hung; one whose CPU time is frozen past its deadline,
or whose pulse stops, is hung; pulses come only from the worker's pulse socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from gateway.plane.hub import Hub, Stream, Terminal
from gateway.plane.watchdog import step_deadline
from protocol import messages as m
from tests.gateway.test_hub_plane import Peer, _hub, _until
from tests.gateway.test_hub_plane import address as address  # the fixture
from tests.gateway.test_hub_replicas import _out, _ready, _recv

TIMEOUT = 0.5  # the hub's hang timeout in these tests


@asynccontextmanager
async def _worker(address: str) -> AsyncIterator[tuple[Hub, Peer, Peer, Stream]]:
    """A hub, a ready worker (its loop's socket and its pulse socket) and one request on it."""
    hub = await _hub(address, external=True, insecure=True, hang_timeout=TIMEOUT)
    loop, pulse = Peer(address, b"a:boot1"), Peer(address, m.pulse_id(b"a:boot1"))
    try:
        loop.send(_ready("boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        stream = hub.submit("a", m.Generate(request_id="r0", params=m.SamplingParams(max_tokens=4),
                                            prompt="hi"))
        assert isinstance(await _recv(loop), m.Generate)
        yield hub, loop, pulse, stream
    finally:
        loop.close()
        pulse.close()
        await hub.close()


def _pulse(running_for: float, cpu: float, tokens: int = 0, step: int = 3) -> bytes:
    return m.encode(m.Pulse(boot_id="boot1", step=step, running_for=running_for,
                            work_tokens=tokens, cpu=cpu))


async def _beat(pulse: Peer, stream: Stream, seconds: float, *, cpu_per_s: float,
                tokens: int = 0, started: float | None = None, cpu0: float = 1.0) -> float:
    """Pulse a running step every 0.05 s for SECONDS (or until STREAM ends); CPU time grows
    by CPU_PER_S per second of it. Returns when the step started."""
    started = time.monotonic() if started is None else started
    end = time.monotonic() + seconds
    while stream.queue.empty() and time.monotonic() < end:
        ran = time.monotonic() - started
        pulse.send(_pulse(ran, cpu0 + cpu_per_s * ran, tokens))
        await asyncio.sleep(0.05)
    return started


async def test_a_long_step_with_cpu_time_advancing_is_not_hung(address: str) -> None:
    async with _worker(address) as (hub, loop, pulse, stream):
        await _beat(pulse, stream, 8 * TIMEOUT, cpu_per_s=1.0)  # 8 hang timeouts, one step
        assert stream.queue.empty() and "boot1" in hub.aliases["a"].replicas
        loop.send(_out("boot1", "r0", "done", "stop"))
        out = await asyncio.wait_for(stream.queue.get(), 2)
        assert isinstance(out, m.RequestOutput) and out.text == "done"


async def test_a_step_with_cpu_time_frozen_is_hung_past_its_planned_deadline(address: str) -> None:
    async with _worker(address) as (hub, loop, pulse, stream):
        tokens = 150  # planned work: its deadline is TIMEOUT + 1.5 s
        limit = step_deadline(TIMEOUT, tokens, 0)
        assert limit == TIMEOUT + 150 * 0.01
        started = await _beat(pulse, stream, limit - 0.3, cpu_per_s=0.0, tokens=tokens)
        assert stream.queue.empty(), "hung before its step's deadline"
        await _beat(pulse, stream, 10.0, cpu_per_s=0.0, tokens=tokens, started=started)
        end = stream.queue.get_nowait()
        assert isinstance(end, Terminal) and "hung" in end.message and "CPU" in end.message, end
        bye = await _recv(loop)
        assert isinstance(bye, m.Shutdown) and bye.reason == "hung"


async def test_a_worker_whose_pulse_stops_is_hung(address: str) -> None:
    async with _worker(address) as (hub, loop, pulse, stream):
        await _beat(pulse, stream, 4 * TIMEOUT, cpu_per_s=1.0)
        assert stream.queue.empty()
        # stopped (SIGSTOP): nothing at all comes any more
        end = await asyncio.wait_for(stream.queue.get(), 5)
        assert isinstance(end, Terminal) and "no pulse" in end.message, end


async def test_pulses_come_only_from_the_pulse_socket(address: str) -> None:
    async with _worker(address) as (hub, loop, pulse, stream):
        r = hub.aliases["a"].replicas["boot1"]
        loop.send(_pulse(1.0, 5.0))  # the loop's own socket may not say Pulse ...
        pulse.send(m.encode(m.Heartbeat(boot_id="boot1", step=9, running=1, waiting=0)))  # ... nor
        # the pulse socket anything else
        stranger = Peer(address, m.pulse_id(b"a:boot2"))  # nor a worker that is none
        stranger.send(m.encode(m.Pulse(boot_id="boot2", step=1)))
        await _until(lambda: _not_owner(hub) >= 3)
        stranger.close()
        assert r.pulse is None and r.last_step != 9
        pulse.send(_pulse(1.0, 5.0))
        await _until(lambda: r.pulse is not None)
        assert r.pulse is not None and r.pulse.cpu == 5.0


def _not_owner(hub: Hub) -> float:
    return sum(s.value for metric in hub.metrics.plane_rejected.collect() for s in metric.samples
               if s.name.endswith("_total") and s.labels.get("reason") == "not_owner")
