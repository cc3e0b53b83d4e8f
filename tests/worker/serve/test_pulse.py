"""The worker's pulse thread against a real ROUTER socket: it beats from its own routing id while
the main thread is busy in a step or blocked on a lock; the test hook's spec; a step's work."""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
import zmq

from protocol import messages as m
from worker.serve import testhook
from worker.serve.pulse import Pulse, plan_work


def _pulses(router: zmq.Socket, n: int) -> list[tuple[bytes, m.Pulse]]:  # type: ignore[type-arg]
    got = []
    while len(got) < n:
        assert router.poll(5000), "no pulse"
        ident, data = router.recv_multipart()
        ev = m.decode_event(data)
        assert isinstance(ev, m.Pulse)
        got.append((ident, ev))
    return got


def test_the_pulse_beats_while_the_main_thread_works_or_blocks() -> None:
    ctx = zmq.Context()
    with tempfile.TemporaryDirectory(prefix="rmlx-p-") as d:
        address = f"ipc://{Path(d) / 'gw'}"
        router = ctx.socket(zmq.ROUTER)
        router.bind(address)
        pulse = Pulse(ctx, address, m.pulse_id(b"a:boot1:tag"), "boot1", interval=0.05)
        pulse.start()
        try:
            ident, idle = _pulses(router, 1)[0]
            assert ident == b"a:boot1:tag:pulse" and idle.running_for == 0.0
            pulse.clock.begin(7)
            pulse.clock.planned(512, 512 * 1024)
            testhook._burn(0.5)  # a CPU-bound step on this thread: the pulse beats meanwhile
            during = [p for _, p in _pulses(router, 3)]
            while router.poll(0):
                during += [p for _, p in _pulses(router, 1)]
            during = [p for p in during if p.running_for]
            assert len(during) >= 2, during
            busy = during[-1]
            assert (busy.step, busy.work_tokens, busy.work_pairs) == (7, 512, 512 * 1024)
            assert busy.running_for > during[0].running_for and busy.cpu > during[0].cpu
            blocked = threading.Lock()
            blocked.acquire()
            assert not blocked.acquire(timeout=0.5)  # this thread stuck on a lock: it beats on
            stuck = _pulses(router, 3)
            assert stuck[-1][1].running_for > busy.running_for
            pulse.clock.end(8)
            after = _pulses(router, 1)[0][1]
            while after.running_for:  # beats sent before end()
                after = _pulses(router, 1)[0][1]
            assert (after.step, after.running_for, after.work_tokens) == (8, 0.0, 0)
        finally:
            pulse.close()
            router.close(0)
            ctx.term()


def test_plan_work_counts_tokens_and_attention_pairs() -> None:
    dec = [SimpleNamespace(computed=99), SimpleNamespace(computed=9)]
    chunk = (SimpleNamespace(computed=1000), 512)
    assert plan_work(dec, [chunk]) == (2 + 512, 100 + 10 + 512 * 1512)
    assert plan_work([], []) == (0, 0)


def test_the_step_hook_is_off_unless_asked_and_fires_once(monkeypatch: pytest.MonkeyPatch,
                                                          tmp_path: Path) -> None:
    monkeypatch.delenv(testhook.HOOK_ENV, raising=False)
    assert testhook.step_hook() is None
    burned: list[float] = []
    monkeypatch.setattr(testhook, "_burn", burned.append)
    monkeypatch.setenv(testhook.HOOK_ENV, "slow:7.5")
    once = tmp_path / "fired"
    monkeypatch.setenv(testhook.ONCE_ENV, str(once))
    hook = testhook.step_hook()
    assert hook is not None
    hook()
    assert once.exists() and burned == [7.5]
    hook()  # a second process (or call) finds the file: nothing happens
    assert burned == [7.5]
    monkeypatch.setenv(testhook.HOOK_ENV, "nonsense")
    with pytest.raises(SystemExit):
        testhook.step_hook()
    os.unlink(once)
