"""The worker's pulse: a thread that says, every PULSE_INTERVAL, which step is running, for how
long, with how much planned work, and how much CPU time the process has used.

The loop's heartbeats go out between steps, so a step of many seconds (a long prompt chunk) is
silence to them. The pulse thread does not need the loop: it reads the ``StepClock`` the loop
writes (one tuple, replaced whole), and sends on a DEALER socket of its own (ZeroMQ sockets are
not thread-safe), whose routing id is ``m.pulse_id`` of the loop's. It holds the GIL only to
build and send one small frame; MLX releases the GIL while it computes. A stopped process
(SIGSTOP) stops beating; a deadlocked one beats with its CPU time frozen: the gateway's
watchdog tells both from a slow step (gateway/plane/watchdog.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import zmq

from protocol import messages as m

log = logging.getLogger("rapid_mlx.worker")

PULSE_INTERVAL = 0.5  # seconds between two beats


class StepClock:
    """The step in progress, as the loop tells it: (step, started, work tokens, work pairs).

    STARTED is a monotonic time, 0.0 between steps. The loop replaces the tuple whole, so the
    pulse thread never reads half an update."""

    def __init__(self) -> None:
        self.now: tuple[int, float, int, int] = (0, 0.0, 0, 0)

    def begin(self, step: int) -> None:
        """A step starts now (its work is not planned yet)."""
        self.now = (step, time.monotonic(), 0, 0)

    def planned(self, tokens: int, pairs: int) -> None:
        """The running step's planned work: TOKENS computed, PAIRS of attention."""
        step, started, _, _ = self.now
        self.now = (step, started, tokens, pairs)

    def end(self, step: int) -> None:
        """The step ended; STEP is the step count now."""
        self.now = (step, 0.0, 0, 0)


class Pulse:
    """A daemon thread beating on its own socket until closed."""

    def __init__(self, ctx: zmq.Context[Any], address: str, identity: bytes, boot_id: str,
                 configure: Callable[[zmq.Socket[Any]], None] | None = None,
                 interval: float = PULSE_INTERVAL) -> None:
        self.clock = StepClock()
        self.ctx = ctx
        self.address = address
        self.identity = identity
        self.boot_id = boot_id
        self.configure = configure
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pulse", daemon=True)

    def start(self) -> None:
        """Start beating."""
        self._thread.start()

    def close(self) -> None:
        """Stop beating and close the socket (before the context terminates)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5.0)

    def beat(self) -> m.Pulse:
        """The pulse to send now."""
        step, started, tokens, pairs = self.clock.now
        running_for = max(time.monotonic() - started, 1e-6) if started else 0.0
        return m.Pulse(boot_id=self.boot_id, step=step, running_for=running_for,
                       work_tokens=tokens, work_pairs=pairs, cpu=time.process_time())

    def _run(self) -> None:
        sock = self.ctx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.ROUTING_ID, self.identity)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, 8)  # a gateway that reads nothing gets no backlog
            if self.configure is not None:
                self.configure(sock)
            sock.connect(self.address)
            while True:  # the first beat at once: the gateway knows the pulse from the start
                try:
                    sock.send(m.encode(self.beat()), zmq.NOBLOCK)
                except zmq.Again:
                    pass  # not connected yet, or the gateway is behind: the next beat tries
                if self._stop.wait(self.interval):
                    break
        except Exception:  # a dead pulse reads as a frozen worker: say why
            log.exception("the pulse thread stopped")
        finally:
            sock.close(0)


def plan_work(decodes: list[Any], prefills: list[tuple[Any, int]]) -> tuple[int, int]:
    """(tokens, attention pairs) of a step: a decode row is one token attending to its computed
    positions; a prompt chunk of N tokens attends to its computed positions and itself."""
    tokens = len(decodes) + sum(n for _, n in prefills)
    pairs = sum(r.computed + 1 for r in decodes)
    pairs += sum(n * (r.computed + n) for r, n in prefills)
    return tokens, pairs
