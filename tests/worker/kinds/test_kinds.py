"""Worker kinds: detection from config files, the missing-extra failure, and the worker loop moving
jobs and outputs over a real ZeroMQ pair (the runner here is a fake: the real runners have their
own tests with real weights)."""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec
import pytest
import zmq

from protocol import messages as m
from worker.kinds import registry
from worker.kinds.detect import detect_kind
from worker.model.fetch import CannotLoad
from worker.serve.loop import WorkerLoop
from worker.serve.runner import BadInput, BasicRunner, QueueFull


@pytest.mark.parametrize(("files", "config", "kind"), [
    ({"modules.json": "[]"}, {"model_type": "gemma3_text"}, "embed"),
    ({}, {"model_type": "bert", "architectures": ["BertModel"]}, "embed"),
    ({}, {"model_type": "whisper"}, "transcribe"),
    ({}, {"architectures": ["ParakeetTDT"]}, "transcribe"),
    ({}, {"model_type": "kokoro"}, "speech"),
    ({}, {"istftnet": {}, "model_type": ""}, "speech"),
    ({}, {"model_type": "llama"}, "generate"),
    ({}, {}, "generate"),
])
def test_detect_kind(tmp_path: Path, files: dict[str, str], config: dict[str, Any],
                     kind: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert detect_kind(tmp_path, config) == kind


def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(CannotLoad) as info:
        registry.load_runner("transcribe", "whisper-x", tmp_path, {}, argparse.Namespace())
    text = str(info.value)
    assert "speech-to-text" in text and "pip install 'rapid-mlx[audio]'" in text
    with pytest.raises(CannotLoad, match=r"rapid-mlx\[embeddings\]"):
        registry.load_runner("embed", "minilm", tmp_path, {}, argparse.Namespace())


class FakeRunner(BasicRunner):
    """Embeds each input as its length, one request per step; refuses empty inputs."""

    def __init__(self, bound: int = 2) -> None:
        self.facts = m.ModelFacts(model="fake", kind="embed", embedding_dimensions=1)
        self.queue: list[m.Embed] = []
        self.bound = bound
        self.aborted: list[str] = []

    def add(self, job: m.Work) -> None:
        assert isinstance(job, m.Embed)
        if not job.inputs:
            raise BadInput("input must not be empty", param="input")
        if len(self.queue) >= self.bound:
            raise QueueFull("too many requests")
        self.queue.append(job)

    def abort(self, request_ids: list[str]) -> None:
        self.aborted += request_ids
        self.queue = [j for j in self.queue if j.request_id not in request_ids]

    def step(self) -> list[m.RequestOutput]:
        self.steps += 1
        job = self.queue.pop(0)
        vecs = [msgspec.msgpack.encode(float(len(x))) for x in job.inputs]
        return [m.RequestOutput(request_id=job.request_id, embeddings=vecs, finish_reason="stop")]

    @property
    def has_work(self) -> bool:
        return bool(self.queue)

    @property
    def running(self) -> int:
        return min(len(self.queue), 1)

    @property
    def waiting(self) -> int:
        return max(len(self.queue) - 1, 0)

    def numbers(self) -> dict[str, Any]:
        return {"queued": len(self.queue)}


class Rig:
    """A WorkerLoop on a thread behind a DEALER, and a ROUTER playing the gateway."""

    def __init__(self, runner: FakeRunner) -> None:
        self.ctx = zmq.Context()
        self.router = self.ctx.socket(zmq.ROUTER)
        address = f"inproc://kind-{uuid.uuid4().hex}"
        self.router.bind(address)
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, b"w")
        dealer.connect(address)
        self.loop = WorkerLoop(runner, dealer, "emb", "boot-1")
        self.thread = threading.Thread(target=self.loop.run, daemon=True)
        self.thread.start()
        self.events: list[m.Event] = []

    def send(self, job: m.Job | bytes) -> None:
        self.router.send_multipart([b"w", job if isinstance(job, bytes) else m.encode(job)])

    def until(self, pred: Any, timeout: float = 5.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.router.poll(50):
                self.events.append(m.decode_event(self.router.recv_multipart()[1]))
            if pred():
                return True
        return False

    def outputs(self) -> dict[str, m.RequestOutput]:
        return {o.request_id: o for e in self.events if isinstance(e, m.StepOutputs)
                for o in e.outputs}

    def close(self) -> None:
        self.send(m.Shutdown(reason="test"))
        self.thread.join(5)
        self.loop.sock.close(0)
        self.router.close(0)
        self.ctx.term()


def test_kind_loop_moves_jobs_and_outputs() -> None:
    runner = FakeRunner(bound=2)
    rig = Rig(runner)
    try:
        assert rig.until(lambda: any(isinstance(e, m.Ready) for e in rig.events))
        ready = next(e for e in rig.events if isinstance(e, m.Ready))
        assert ready.facts.kind == "embed" and ready.alias == "emb"
        rig.send(m.Embed(request_id="ok", inputs=["abc", [1, 2]]))
        rig.send(m.Embed(request_id="empty", inputs=[]))
        rig.send(b"\x92\xa5embed\xc1")  # garbage: dropped, the loop lives on
        assert rig.until(lambda: {"ok", "empty"} <= set(rig.outputs()))
        outs = rig.outputs()
        assert [msgspec.msgpack.decode(v) for v in outs["ok"].embeddings] == [3.0, 2.0]
        assert outs["empty"].error_code == "invalid_request_error"
        assert outs["empty"].error_param == "input"
        assert "empty" in (outs["empty"].error or "")
        rig.send(m.StatusQuery(query_id="q1"))
        assert rig.until(lambda: any(isinstance(e, m.Status) for e in rig.events))
        body = next(e for e in rig.events if isinstance(e, m.Status)).body
        assert body["kind"] == "embed" and body["queued"] == 0 and body["steps"] == 1
        assert msgspec.convert(body["facts"], m.ModelFacts).kind == "embed"  # as adopt reads it
        assert body["protocol_version"] == m.PROTOCOL_VERSION
        rig.send(m.StatusQuery(query_id=m.ADOPT_QUERY))
        assert rig.until(lambda: sum(isinstance(e, m.Ready) for e in rig.events) == 2)
        assert rig.until(lambda: any(isinstance(e, m.Heartbeat) for e in rig.events), 2)
        beat = next(e for e in rig.events if isinstance(e, m.Heartbeat))
        assert beat.kv_total == 0 and beat.preparing == 0  # a text runner's extras only
    finally:
        rig.close()
    assert not rig.thread.is_alive()


def test_kind_loop_queue_full_and_abort() -> None:
    runner = FakeRunner(bound=1)
    runner.step = lambda: []  # type: ignore[method-assign]  # never finishes: the queue stays full
    rig = Rig(runner)
    try:
        rig.send(m.Embed(request_id="a", inputs=["x"]))
        rig.send(m.Embed(request_id="b", inputs=["y"]))
        assert rig.until(lambda: "b" in rig.outputs())
        assert rig.outputs()["b"].error_code == "queue_full"
        rig.send(m.Abort(request_ids=["a"]))
        assert rig.until(lambda: runner.aborted == ["a"])
        assert not runner.has_work
    finally:
        rig.close()
