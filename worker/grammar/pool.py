"""The threads grammar compiles run on: a slow compile steps aside instead of locking others out.

A compile cannot be interrupted (the library's first mask runs in native code, and one hostile
schema's took 9.3 s and ~300 MB), and a fixed pool of two threads let two such schemas refuse
every other request's structured output: a trivial schema waited behind them and was refused
at its deadline. Here FAST compiles may start at once; a compile running for SLOW_S seconds
stops counting among them (it goes on, on its own thread, and finishes or is dropped unused),
so another starts in its place; at most MOST threads compile at once, bounding the memory and
CPU the slow ones take (past that, compiles wait for one to end, as before).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

FAST = 2  # compiles that may be under way at once while none has been running SLOW_S
SLOW_S = 1.0  # a compile running this long no longer holds one of the FAST places
MOST = 4  # threads compiling at once, slow ones included


class CompilePool:
    """Runs jobs each on a thread of its own, at most `fast` of them younger than `slow_s`
    seconds and at most `most` in all; the others wait in order."""

    def __init__(self, fast: int = FAST, most: int = MOST, slow_s: float = SLOW_S,
                 name: str = "grammar") -> None:
        self.fast, self.most, self.slow_s, self.name = fast, most, slow_s, name
        self._lock = threading.Lock()
        self._queue: deque[tuple[Future[Any], Callable[[], Any]]] = deque()
        self._started: dict[Future[Any], float] = {}  # running jobs: when each started
        self._timer: threading.Timer | None = None
        self._closed = False

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        """Queue FN(*ARGS); its future holds the result (a queued one may be cancelled)."""
        fut: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("the compile pool is closed")
            self._queue.append((fut, lambda: fn(*args)))
            self._start_locked()
        return fut

    @property
    def running(self) -> int:
        """Jobs running now, slow ones included."""
        return len(self._started)

    def _start_locked(self) -> None:
        """Start queued jobs while there is room; when only slow ones would make room, look
        again once the oldest young one turns slow."""
        now = time.monotonic()
        while self._queue and len(self._started) < self.most:
            young = [t for t in self._started.values() if now - t < self.slow_s]
            if len(young) >= self.fast:
                self._wake_at(min(young) + self.slow_s - now)
                return
            fut, job = self._queue.popleft()
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled while it waited (its request was refused or aborted)
            self._started[fut] = now
            threading.Thread(target=self._run, args=(fut, job), daemon=True,
                             name=f"{self.name}-{len(self._started)}").start()

    def _wake_at(self, delay: float) -> None:
        if self._timer is None:
            self._timer = threading.Timer(max(delay, 0.0) + 0.001, self._wake)
            self._timer.daemon = True
            self._timer.start()

    def _wake(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._start_locked()

    def _run(self, fut: Future[Any], job: Callable[[], Any]) -> None:
        try:
            result = job()
        except BaseException as exc:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
        finally:
            with self._lock:
                del self._started[fut]
                if not self._closed:
                    self._start_locked()

    def shutdown(self) -> None:
        """Take no more jobs and cancel the queued ones; running ones finish on their own."""
        with self._lock:
            self._closed = True
            for fut, _ in self._queue:
                fut.cancel()
            self._queue.clear()
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
