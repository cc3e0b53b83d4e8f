"""The speech-to-text Runner in-process on the real converted tiny.en: admission, errors, steps."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import pytest

from protocol import messages as m
from tests.audio.wer import wer
from worker.kinds.stt.runner import SttRunner, load_runner
from worker.serve.runner import QueueFull


@pytest.fixture(scope="module")
def runner(whisper_dir: Path) -> SttRunner:
    config = json.loads((whisper_dir / "config.json").read_text())
    return load_runner("whisper", whisper_dir, config,
                       argparse.Namespace(max_batch=2, max_waiting=2, max_audio_seconds=20))


def _drain(r: SttRunner, limit_s: float = 300) -> tuple[dict[str, list[m.RequestOutput]], float]:
    """Step R until idle: the outputs by request, and the most CPU time one step took.

    CPU time of this process (all its threads: the model runs on BLAS threads), not wall time:
    other processes on the cores do not count in it. Beside two busy loops on a loaded 2-core
    machine one step of a 3 s clip took 36 s of wall time but 4.6 s of CPU time. On an idle
    machine a step's CPU time is at least its wall time (less only what it waits), so a CPU
    bound is as strict as the same wall bound there."""
    outs: dict[str, list[m.RequestOutput]] = {}
    longest = 0.0
    deadline = time.monotonic() + limit_s
    while r.has_work and time.monotonic() < deadline:
        t = time.process_time()
        for o in r.step():
            outs.setdefault(o.request_id, []).append(o)
        longest = max(longest, time.process_time() - t)
    assert not r.has_work
    return outs, longest


def test_facts(runner: SttRunner) -> None:
    assert runner.facts.kind == "transcribe" and runner.facts.model_type == "whisper"
    assert "translation" not in runner.facts.capabilities  # tiny.en is English-only
    assert "word_timestamps" in runner.facts.capabilities


def test_bad_requests_fail_alone(runner: SttRunner, speech: list[tuple[str, Path]]) -> None:
    text, wav = speech[0]
    runner.add(m.Transcribe(request_id="garbage", audio=b"not audio at all" * 64))
    runner.add(m.Transcribe(request_id="fr", audio=wav.read_bytes(), language="fr"))
    runner.add(m.Transcribe(request_id="task", audio=wav.read_bytes(), task="summarize"))
    runner.add(m.Transcribe(request_id="ok", audio=wav.read_bytes(), word_timestamps=True))
    outs, longest = _drain(runner)
    for rid, param in (("garbage", "file"), ("fr", "language"), ("task", "task")):
        (last,) = outs[rid]
        assert last.finish_reason == "error" and last.error_param == param, last
        assert last.error_code == "invalid_request_error"
    ok = outs["ok"]
    assert [o.finish_reason for o in ok].count("stop") == 1 and ok[-1].finish_reason == "stop"
    assert all(o.finish_reason is None for o in ok[:-1])
    got = "".join(o.text for o in ok)
    assert wer(text, got) <= 0.4, got
    words = [w for o in ok for s in o.segments for w in s.words]
    assert words and ok[-1].duration > 1 and ok[-1].language == "english"
    assert longest < 30  # the gateway's watchdog bound for one step (CPU time: see _drain)


def test_queue_bound_and_abort(runner: SttRunner, speech: list[tuple[str, Path]]) -> None:
    data = speech[1][1].read_bytes()
    runner.add(m.Transcribe(request_id="a", audio=data))
    runner.add(m.Transcribe(request_id="b", audio=data))
    with pytest.raises(QueueFull):
        runner.add(m.Transcribe(request_id="c", audio=data))
    assert runner.waiting == 2 and runner.running == 0
    runner.step()  # admits both (max_batch 2), works on one (which may finish: a short clip)
    assert runner.waiting == 0 and runner.running >= 1
    runner.abort(["a", "b"])
    assert not runner.has_work and runner.running == 0


def test_duration_limit_is_400(runner: SttRunner, tmp_path: Path) -> None:
    from tests.audio.media import speak

    long_wav = speak("This sentence is spoken again and again. " * 12, tmp_path / "long.wav")
    runner.add(m.Transcribe(request_id="long", audio=long_wav.read_bytes()))
    outs, _ = _drain(runner)
    last = outs["long"][-1]
    assert last.finish_reason == "error" and last.error_param == "file"
    assert "longer than" in (last.error or "")
