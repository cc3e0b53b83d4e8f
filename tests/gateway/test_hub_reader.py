"""The hub's event reader against a real ZeroMQ peer: every frame arrives, in order, while the hub
keeps sending on the same socket (a send can take the descriptor's edge the reader waits on)."""

from __future__ import annotations

import asyncio
import threading
import time

from gateway.plane.hub import Hub
from protocol import messages as m
from tests.gateway.test_hub_plane import Peer, _ready, _until, address  # noqa: F401 - fixture

N = 3000


async def test_every_frame_arrives_in_order_while_the_hub_sends(address: str) -> None:  # noqa: F811
    hub = Hub(address, external=True, insecure=True)
    hub.add_alias("a", "demo")
    hub.start()
    peer = Peer(address, b"a:boot1", rcvhwm=100_000)
    try:
        peer.send(_ready("a", "boot1"))
        await _until(lambda: hub.serving(hub.aliases["a"]))
        stream = hub.submit("a", m.Generate(request_id="r0", prompt="hi",
                                            params=m.SamplingParams(max_tokens=N + 1)))
        assert isinstance(peer.recv(), m.Generate)
        frames = [m.encode(m.StepOutputs(boot_id="boot1", step=i, outputs=[
            m.RequestOutput(request_id="r0", token_ids=[i], text="x")])) for i in range(N)]

        def worker(part: list[bytes]) -> None:  # one token per frame, in bursts and trickles
            for i, f in enumerate(part):
                peer.sock.send(f)
                if i % 7 == 0:
                    time.sleep(0.0002)

        async def receive(n: int) -> list[int]:
            got: list[int] = []
            for _ in range(n):
                out = await asyncio.wait_for(stream.queue.get(), 5.0)
                assert isinstance(out, m.RequestOutput)
                got.extend(out.token_ids)
            return got

        # first the reader alone: a burst must not stall it (the descriptor signals edges only)
        t = threading.Thread(target=worker, args=(frames[:N // 2],))
        t.start()
        try:
            assert await receive(N // 2) == list(range(N // 2))
        finally:
            t.join()
        # then while the hub keeps sending to the worker on the same socket
        identity = hub.aliases["a"].replicas["boot1"].identity
        assert identity is not None
        sending = True

        async def hub_sends() -> None:
            n = 0
            while sending:
                hub.send_to(identity, m.StatusQuery(query_id=f"q{n}"))
                n += 1
                await asyncio.sleep(0)

        talker = asyncio.create_task(hub_sends())
        t = threading.Thread(target=worker, args=(frames[N // 2:],))
        t.start()
        try:
            assert await receive(N - N // 2) == list(range(N // 2, N))
        finally:
            sending = False
            await talker
            t.join()
        assert hub.reader_alive()
    finally:
        peer.close()
        await hub.close()
