"""Timeline marks for ``bench.turnover`` (loaded only through its PYTHONPATH; never in serving).

With ``RAPID_TRACE=<folder>`` set, every process that imports this module wraps a few functions
of the gateway (connection data, chat handler, submit, first output, first token chunk, [DONE])
and of the worker (job read, intake's prepare, admit, engine steps, first and last outputs sent)
and appends ``<event> <key> <CLOCK_MONOTONIC seconds>`` lines to ``<folder>/<pid>.txt``.
The wrapping happens as those modules are imported; nothing else changes.
"""

from __future__ import annotations

import atexit
import contextvars
import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import threading
import time
from collections.abc import Sequence
from types import ModuleType
from typing import Any

_DIR = os.environ.get("RAPID_TRACE")
_buf: list[str] = []
_lock = threading.Lock()


def _ev(kind: str, key: object, t: float | None = None) -> None:
    _buf.append(f"{kind} {key} {time.monotonic() if t is None else t:.6f}\n")


def _flush() -> None:
    with _lock:  # appends (any thread) go past n meanwhile: none is lost
        n = len(_buf)
        lines = _buf[:n]
        del _buf[:n]
        if lines and _DIR:
            with open(os.path.join(_DIR, f"{os.getpid()}.txt"), "a") as f:
                f.writelines(lines)


def _flusher() -> None:
    while True:
        time.sleep(1.0)
        _flush()


def _patch_gateway() -> None:
    from gateway.edge import http_protocol
    from gateway.openai import chat
    from gateway.plane import events, hub

    entered: contextvars.ContextVar[float] = contextvars.ContextVar("entered", default=0.0)
    handle, submit, stream = chat.ChatEndpoint.handle, hub.Hub.submit, chat.ChatEndpoint._stream
    received, on_step = http_protocol.GuardedH11Protocol.data_received, events._on_step
    seen: set[str] = set()

    async def t_handle(self: Any, request: Any) -> Any:
        entered.set(time.monotonic())
        return await handle(self, request)

    def t_submit(self: Any, alias: str, job: Any) -> Any:
        if entered.get():
            _ev("G_handle", job.request_id, entered.get())
        out = submit(self, alias, job)
        _ev("G_submit", job.request_id)
        return out

    async def t_stream(self: Any, cid: str, *a: Any, **k: Any) -> Any:
        n = 0
        async for b in stream(self, cid, *a, **k):
            n += 1
            if n == 2:
                _ev("G_first", f"{cid}-0")
            if b.startswith(b"data: [DONE]"):
                _ev("G_done", f"{cid}-0")
            yield b

    def t_received(self: Any, data: bytes) -> None:
        if data[:5] == b"POST ":
            _ev("G_recv", f"{id(self)}:{time.monotonic_ns()}")
        received(self, data)

    def t_on_step(h: Any, r: Any, ev: Any, now: float) -> None:
        for o in ev.outputs:
            if o.request_id not in seen:
                seen.add(o.request_id)
                _ev("G_out", o.request_id)
        on_step(h, r, ev, now)

    chat.ChatEndpoint.handle = t_handle  # type: ignore[method-assign]
    hub.Hub.submit = t_submit  # type: ignore[method-assign]
    chat.ChatEndpoint._stream = t_stream  # type: ignore[method-assign]
    http_protocol.GuardedH11Protocol.data_received = t_received  # type: ignore[method-assign]
    events._on_step = t_on_step  # type: ignore[assignment]


def _patch_worker() -> None:
    from worker.engine import core as engine
    from worker.serve import intake, loop, text_runner

    cls, text, eng = loop.WorkerLoop, text_runner.TextRunner, engine.Engine
    admit, add, send_outputs = text._admit, text.add, cls.send_outputs
    prepare_job, step = intake.prepare_job, eng.step
    seen: set[str] = set()

    def t_admit(self: Any, p: Any) -> None:
        _ev("W_admit", p.job.request_id)
        admit(self, p)

    def t_add(self: Any, job: Any) -> None:
        _ev("W_read", job.request_id)
        add(self, job)

    def t_send_outputs(self: Any, outputs: list[Any]) -> None:
        for o in [*self._pending, *outputs]:
            if o.request_id not in seen:
                seen.add(o.request_id)
                _ev("W_first", o.request_id)
            if o.finish_reason is not None:
                _ev("W_last", o.request_id)
        send_outputs(self, outputs)

    def t_prepare_job(tok: Any, job: Any, *a: Any, **k: Any) -> Any:
        _ev("W_prep0", job.request_id)
        try:
            return prepare_job(tok, job, *a, **k)
        finally:
            _ev("W_prep1", job.request_id)

    def t_step(self: Any) -> Any:
        _ev("W_step0", len(self.running))
        try:
            return step(self)
        finally:
            _ev("W_step1", len(self.running))

    text._admit = t_admit  # type: ignore[method-assign]
    text.add = t_add  # type: ignore[method-assign]
    cls.send_outputs = t_send_outputs  # type: ignore[method-assign]
    intake.prepare_job = t_prepare_job  # type: ignore[assignment]
    eng.step = t_step  # type: ignore[method-assign]


_GROUPS = {"gateway": ({"gateway.openai.chat", "gateway.plane.hub", "gateway.plane.events",
                        "gateway.edge.http_protocol"}, _patch_gateway),
           "worker": ({"worker.serve.loop", "worker.serve.text_runner", "worker.serve.intake",
                       "worker.engine.core"}, _patch_worker)}
_loaded: set[str] = set()


class _Hook(importlib.abc.MetaPathFinder):
    """Wraps a traced group's functions once all its modules have been executed."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        """Find NAME with the other finders; patch the loader of a traced module."""
        if not any(name in mods for mods, _ in _GROUPS.values()):
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _loaded.add(name)
            for group, (mods, patch) in _GROUPS.items():
                if mods <= _loaded and group not in _loaded:
                    _loaded.add(group)
                    patch()

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


if _DIR:
    atexit.register(_flush)
    threading.Thread(target=_flusher, name="trace-flush", daemon=True).start()
    sys.meta_path.insert(0, _Hook())
