"""A real WorkerLoop (with a TextRunner) on a thread behind a real DEALER, driven by a plain ROUTER as the gateway."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import zmq

from protocol import messages as m
from worker.engine.attention import install
from worker.engine.core import Engine, model_dtype
from worker.kv.setup import plan_kv
from worker.model.load import LoadedModel
from worker.serve.loop import WorkerLoop
from worker.serve.text_runner import TextRunner

IDENTITY = b"worker"


class LoopRig:
    """Starts the loop, sends jobs and raw frames, and collects what comes back with arrival times."""

    def __init__(self, loaded: LoadedModel, chars_per_token: int = 16, **engine_kw: Any) -> None:
        install()
        ctx_len = loaded.facts.context_length
        plan = plan_kv(loaded.model, model_dtype(loaded.model), kind="none", memory="64MiB",
                       page_size=16, group_size=32, max_batch=16, context_length=ctx_len)
        self.engine = Engine(loaded.model, loaded.tokenizer, plan.store, context_length=ctx_len,
                             max_batch=16, **engine_kw)
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        address = f"inproc://loop-{uuid.uuid4().hex}"
        self.router.bind(address)
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, IDENTITY)
        dealer.connect(address)
        self.runner = TextRunner(self.engine, loaded, chars_per_token=chars_per_token)
        self.loop = WorkerLoop(self.runner, dealer, "default", "boot-1")
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="worker-loop", daemon=True)
        self.thread.start()
        self.outputs: dict[str, list[tuple[float, m.RequestOutput]]] = {}
        self.others: list[m.Event] = []
        ready = self.wait(lambda: any(isinstance(e, m.Ready) for e in self.others), 30)
        assert ready, "no Ready from the loop"

    def _run(self) -> None:
        try:
            self.loop.run()
        except BaseException as exc:  # the test asserts on it
            self.error = exc
        finally:
            self.loop.sock.close(linger=0)

    def send(self, job: m.Generate | m.Abort | m.StatusQuery | m.Shutdown) -> None:
        """Send one job as the gateway does."""
        self.router.send_multipart([IDENTITY, m.encode(job)])

    @contextmanager
    def held(self) -> Iterator[None]:
        """Park the loop where it next waits for jobs (idle); jobs sent in the block queue in its
        socket, and the loop takes them all at once when the block ends."""
        parked, release = threading.Event(), threading.Event()
        drain = self.loop._drain

        def gate(timeout_ms: int) -> bool:
            parked.set()
            release.wait()
            return drain(timeout_ms)

        self.loop._drain = gate  # type: ignore[method-assign]
        try:
            assert parked.wait(30), "the loop did not come back to wait for jobs"
            yield
        finally:
            self.loop._drain = drain  # type: ignore[method-assign]
            release.set()

    def send_raw(self, *frames: bytes) -> None:
        """Send arbitrary frames to the worker."""
        self.router.send_multipart([IDENTITY, *frames])

    def pump(self, timeout: float = 0.05) -> None:
        """Collect events that arrive within TIMEOUT seconds."""
        if not self.router.poll(int(timeout * 1000)):
            return
        while True:
            try:
                _, frame = self.router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            event = m.decode_event(frame)
            now = time.monotonic()
            if isinstance(event, m.StepOutputs):
                for out in event.outputs:
                    self.outputs.setdefault(out.request_id, []).append((now, out))
            else:
                self.others.append(event)

    def wait(self, done: Callable[[], bool], timeout: float = 60.0) -> bool:
        """Pump until DONE() holds; False on timeout."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            self.pump()
        return True

    def finished(self, rid: str) -> bool:
        """True once RID has a terminal output."""
        return any(o.finish_reason is not None for _, o in self.outputs.get(rid, []))

    def final(self, rid: str) -> m.RequestOutput:
        """RID's terminal output."""
        return next(o for _, o in self.outputs[rid] if o.finish_reason is not None)

    def tokens(self, rid: str) -> list[int]:
        """Every token RID produced."""
        return [t for _, o in self.outputs.get(rid, []) for t in o.token_ids]

    def close(self) -> None:
        """Shut the loop down and free the sockets."""
        self.send(m.Shutdown(reason="test over"))
        self.thread.join(timeout=30)
        self.router.close(linger=0)
        self.ctx.term()
