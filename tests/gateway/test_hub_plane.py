"""The hub's worker socket against real ZeroMQ peers: sends that fail, forged and malformed
frames, per-boot secrets, missed heartbeats. No model: the peers are bare DEALER sockets."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import zmq

from gateway.edge.errors import APIError
from gateway.plane.hub import Hub, Terminal
from protocol import messages as m

FACTS = m.ModelFacts(model="demo", context_length=64, vocab_size=16)


def _job(i: int = 0) -> m.Generate:
    return m.Generate(request_id=f"r{i}", params=m.SamplingParams(max_tokens=4), prompt="hi")


def _ready(alias: str, boot: str, secret: str = "") -> bytes:
    return m.encode(m.Ready(alias=alias, boot_id=boot, pid=1, protocol_version=m.PROTOCOL_VERSION,
                            facts=FACTS, secret=secret))


def _rejected(hub: Hub) -> float:
    return sum(s.value for metric in hub.metrics.plane_rejected.collect() for s in metric.samples
               if s.name.endswith("_total"))


class Peer:
    """A worker-side DEALER with a chosen routing id."""

    def __init__(self, address: str, identity: bytes, rcvhwm: int = 1000) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.ROUTING_ID, identity)
        self.sock.setsockopt(zmq.RCVHWM, rcvhwm)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(address)

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames))

    def recv(self, timeout: float = 2.0) -> m.Job | None:
        if not self.sock.poll(int(timeout * 1000)):
            return None
        return m.decode_job(self.sock.recv())

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


async def _until(pred, timeout: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "condition not met"
        await asyncio.sleep(0.01)


@pytest.fixture
async def address() -> AsyncIterator[str]:
    with tempfile.TemporaryDirectory(prefix="rmlx-t-") as d:
        yield f"ipc://{Path(d) / 'gw'}"


async def _hub(address: str, **kw) -> Hub:  # type: ignore[no-untyped-def]
    hub = Hub(address, **kw)
    hub.add_alias("a", "demo")
    hub.start()
    return hub


async def test_spawned_worker_needs_its_boot_secret(address: str) -> None:
    hub = await _hub(address)
    hub.expect_worker("a", "boot1", "s3cret")
    # the visible part of the id (alias:boot) without the tag only its secret gives
    forger = Peer(address, b"a:boot1")
    worker = Peer(address, m.routing_id("a", "boot1", "s3cret"))
    try:
        forger.send(_ready("a", "boot1", "s3cret"))  # right secret, wrong identity
        worker.send(_ready("a", "boot1", "guess"))  # right identity, wrong secret
        await _until(lambda: _rejected(hub) >= 2)
        assert not hub.serving(hub.aliases["a"])
        assert isinstance(forger.recv(), m.Shutdown)
        worker.recv()
        worker.send(_ready("a", "boot1", "s3cret"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        assert hub.aliases["a"].identity == m.routing_id("a", "boot1", "s3cret")
    finally:
        forger.close()
        worker.close()
        await hub.close()


async def test_events_only_from_the_owner_and_the_reader_survives_anything(address: str) -> None:
    hub = await _hub(address, external=True, insecure=True)
    worker, forger = Peer(address, b"a:boot1"), Peer(address, b"a:evil")
    try:
        worker.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        stream = hub.submit("a", _job())
        assert isinstance(worker.recv(), m.Generate)
        out = m.RequestOutput(request_id="r0", text="EVIL", token_ids=[1], finish_reason="stop")
        before = _rejected(hub)
        for frames in ([m.encode(m.StepOutputs(boot_id="boot1", step=9, outputs=[out]))],
                       [m.encode(m.Dead(alias="a", boot_id="boot1", reason="forged"))],
                       [m.encode(m.Heartbeat(boot_id="boot1", step=9, running=0, waiting=0))],
                       [b"x", b"y"], [b"1", b"2", b"3"], [b"\xc1\xc1 garbage"], [b""],
                       [m.encode(m.Status(boot_id="boot1", query_id="q", body={}))]):
            forger.send(*frames)
        worker.send(b"two", b"frames")  # even the owner's malformed frames are only dropped
        await _until(lambda: _rejected(hub) >= before + 9)
        assert hub.reader_alive() and hub.serving(hub.aliases["a"])
        assert stream.queue.empty() and "r0" in hub.aliases["a"].streams
        good = m.RequestOutput(request_id="r0", text="ok", token_ids=[2], finish_reason="stop")
        worker.send(m.encode(m.StepOutputs(boot_id="boot1", step=1, outputs=[good])))
        got = await asyncio.wait_for(stream.queue.get(), 2)
        assert isinstance(got, m.RequestOutput) and got.text == "ok"
    finally:
        worker.close()
        forger.close()
        await hub.close()


def _drops(hub: Hub, reason: str) -> float:
    return sum(s.value for metric in hub.metrics.plane_rejected.collect() for s in metric.samples
               if s.name.endswith("_total") and s.labels.get("reason") == reason)


async def test_a_peer_that_is_no_worker_is_refused_before_its_frame_is_decoded(
        address: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A forged StepOutputs or an oversized Ready from a stranger is dropped by its head and
    size (never decoded), and a flood of strangers logs a bounded number of lines."""
    decoded: list[int] = []
    real = m.decode_event

    def counting(data: bytes) -> m.Event:
        decoded.append(len(data))
        return real(data)

    monkeypatch.setattr(m, "decode_event", counting)
    hub = await _hub(address, external=True, insecure=True)
    worker, forger = Peer(address, b"a:boot1"), Peer(address, b"a:evil")
    nobody = Peer(address, b"nobody:1")
    try:
        worker.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        decoded.clear()
        outs = [m.RequestOutput(request_id="r", token_ids=[1])] * 200_000
        big = m.encode(m.StepOutputs(boot_id="boot1", step=9, outputs=outs))
        huge_facts = m.ModelFacts(model="x", special_tokens=["t"] * 3_000_000)
        huge_ready = m.encode(m.Ready(alias="a", boot_id="evil", pid=1, facts=huge_facts,
                                      protocol_version=m.PROTOCOL_VERSION))
        assert len(huge_ready) > (4 << 20)
        before = (_drops(hub, "not_owner"), _drops(hub, "oversized"))
        forger.send(big)
        forger.send(huge_ready)
        nobody.send(big)
        await _until(lambda: (_drops(hub, "not_owner"), _drops(hub, "oversized"))
                     == (before[0] + 1, before[1] + 1) and _drops(hub, "unknown_alias") >= 1)
        assert decoded == []  # none of the three was decoded
        worker.send(m.encode(m.Heartbeat(boot_id="boot1", step=1, running=0, waiting=0)))
        await _until(lambda: decoded != [])  # the worker's own frames still are
        assert hub.reader_alive() and hub.serving(hub.aliases["a"])
    finally:
        worker.close()
        forger.close()
        nobody.close()
        await hub.close()


def test_dropped_frames_log_a_bounded_number_of_lines(caplog: pytest.LogCaptureFixture) -> None:
    """300 peers dropping frames in one interval log GLOBAL_LINES lines, not 300."""
    from gateway.plane.metrics import Metrics
    from gateway.plane.peers import GLOBAL_LINES, Rejections

    rejections = Rejections(Metrics(lambda: []))
    with caplog.at_level("WARNING", logger="rapid_mlx.gateway"):
        for i in range(300):
            rejections.drop(f"a:forged{i}".encode(), "not_owner")
    assert len(caplog.records) == GLOBAL_LINES


async def test_a_full_send_queue_is_a_503_at_once(address: str) -> None:
    hub = Hub(address, external=True, insecure=True)
    hub.add_alias("a", "demo")
    hub.sock.setsockopt(zmq.SNDHWM, 2)
    hub.start()
    worker = Peer(address, b"a:boot1", rcvhwm=2)  # connected, but never reads
    try:
        worker.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        started = time.monotonic()
        with pytest.raises(APIError) as err:
            for i in range(10_000):
                hub.submit("a", _job(i))
        assert err.value.status == 503 and err.value.code == "worker_unreachable"
        assert time.monotonic() - started < 1.0
        assert "Retry-After" in (err.value.headers or {})
    finally:
        worker.close()
        await hub.close()


async def test_a_job_for_a_worker_that_left_waits_for_the_next(address: str) -> None:
    hub = await _hub(address, external=True, insecure=True, swap_wait=5.0)
    old = Peer(address, b"a:boot1")
    try:
        old.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        old.close()  # gone; the hub has not noticed yet
        await asyncio.sleep(0.2)  # the disconnect reaches the ROUTER
        stream = hub.submit("a", _job())  # no 503: it waits
        assert hub.aliases["a"].parked and not hub.serving(hub.aliases["a"])
        new = Peer(address, b"a:boot2")
        new.send(_ready("a", "boot2"))
        job = await asyncio.to_thread(new.recv, 3.0)
        assert isinstance(job, m.Generate) and job.request_id == "r0"
        assert stream.boot_id == "boot2" and "r0" in hub.aliases["a"].streams
        new.close()
    finally:
        await hub.close()


async def test_a_job_sent_just_before_the_worker_died_goes_to_the_next(address: str) -> None:
    hub = await _hub(address, external=True, insecure=True, swap_wait=5.0)
    old = Peer(address, b"a:boot1")
    try:
        old.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        stream = hub.submit("a", _job())  # queued to the old worker, which dies unheard
        old.close()
        await _until(lambda: not hub.serving(hub.aliases["a"]))
        assert stream.queue.empty() and hub.aliases["a"].parked
        new = Peer(address, b"a:boot2")
        new.send(_ready("a", "boot2"))
        job = await asyncio.to_thread(new.recv, 3.0)
        assert isinstance(job, m.Generate) and job.request_id == "r0"
        new.close()
        await _until(lambda: not hub.serving(hub.aliases["a"]))
        got = await asyncio.wait_for(stream.queue.get(), 2)  # resent once only
        assert isinstance(got, Terminal) and got.code == "worker_failed"
    finally:
        await hub.close()


async def test_a_parked_job_expires_with_a_503(address: str) -> None:
    hub = await _hub(address, external=True, insecure=True, swap_wait=0.5)
    try:
        stream = hub.submit("a", _job())  # nobody serves `a`
        got = await asyncio.wait_for(stream.queue.get(), 2)
        assert isinstance(got, Terminal) and got.code == "model_not_ready"
        hub.aliases["a"].state = "failed"
        with pytest.raises(APIError) as err:
            hub.submit("a", _job(1))  # failed: no waiting
        assert err.value.status == 503
    finally:
        await hub.close()


_PEER = """
import sys, time, zmq
from protocol import messages as m
sock = zmq.Context().socket(zmq.DEALER)
sock.setsockopt(zmq.ROUTING_ID, b"a:boot1")
sock.connect(sys.argv[1])
sock.send(m.encode(m.Ready(alias="a", boot_id="boot1", pid=1, protocol_version=m.PROTOCOL_VERSION,
                           facts=m.ModelFacts(model="demo"))))
print("ready", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGSTOP, signal.SIGKILL])
async def test_a_stopped_or_killed_external_worker_is_gone_within_2s(address: str,
                                                                     how: int) -> None:
    hub = await _hub(address, external=True, insecure=True)
    peer = subprocess.Popen([sys.executable, "-c", _PEER, address], stdout=subprocess.PIPE,
                            text=True, cwd=Path(__file__).resolve().parents[2])
    try:
        await _until(lambda: hub.serving(hub.aliases["a"]), timeout=30)
        stream = hub.submit("a", _job())
        await asyncio.sleep(1.0)  # alive and connected: not declared gone
        assert hub.serving(hub.aliases["a"])
        os.kill(peer.pid, how)
        gone_at = time.monotonic()
        got = await asyncio.wait_for(stream.queue.get(), 5)
        assert isinstance(got, Terminal) and "connection was lost" in got.message, got
        assert time.monotonic() - gone_at < 2.0
        assert not hub.serving(hub.aliases["a"]) and hub.aliases["a"].state == "starting"
    finally:
        peer.kill()
        peer.wait()
        await hub.close()


async def test_external_workers_need_proof(address: str) -> None:
    hub = await _hub(address, external=True, worker_token="t0ken")
    worker = Peer(address, m.routing_id("a", "boot1", "t0ken"))
    plain = Peer(address, b"a:boot1")
    try:
        worker.send(_ready("a", "boot1", "wrong"))
        worker.send(_ready("a", "boot2", "t0ken"))  # the id of boot1 claims boot2
        plain.send(_ready("a", "boot1", "t0ken"))  # the token, from an id it does not imply
        await _until(lambda: _rejected(hub) >= 3)
        assert not hub.serving(hub.aliases["a"])
        worker.send(_ready("a", "boot1", "t0ken"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
    finally:
        worker.close()
        plain.close()
        await hub.close()


async def test_the_reader_ending_fails_livez(address: str) -> None:
    from gateway.ops.health import HealthEndpoints

    hub = await _hub(address)
    health = HealthEndpoints(hub)
    try:
        assert (await health.livez(None)).status_code == 200  # type: ignore[arg-type]
        assert hub._reader_task is not None
        hub._reader_task.cancel()
        await asyncio.sleep(0.05)
        assert not hub.reader_alive()
        assert (await health.livez(None)).status_code == 503  # type: ignore[arg-type]
    finally:
        await hub.close()
