"""The speech Runner with the real Kokoro weights, without the server: the queue bound, requests
taking turns a piece at a time, abort, one failing request, and one finish per request."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from protocol import messages as m
from tests.audio.tts_setup import KOKORO_JS, build_kokoro
from worker.kinds.tts.runner import SpeechRunner, load_runner
from worker.serve.runner import QueueFull

VOICE = "jm_kumo"


@pytest.fixture(scope="module")
def runner() -> Iterator[SpeechRunner]:
    path = build_kokoro()
    yield load_runner("kokoro", path, {"model_type": "kokoro"},
                      argparse.Namespace(max_batch=2, max_waiting=1))


def speak(rid: str, text: str, **kw: Any) -> m.Speak:
    return m.Speak(request_id=rid, text=text, voice=VOICE, audio_format="pcm", **kw)


def next_outputs(r: SpeechRunner) -> list[m.RequestOutput]:
    """Step until a step has news (a piece takes longer than one step waits)."""
    while True:
        outs = r.step()
        if outs:
            return outs


def drain(r: SpeechRunner) -> list[m.RequestOutput]:
    outs: list[m.RequestOutput] = []
    while r.has_work:
        outs += r.step()
    return outs


def test_facts_name_the_kind_voices_and_rate(runner: SpeechRunner) -> None:
    assert runner.facts.kind == "speech" and runner.facts.sample_rate == 24000
    assert VOICE in runner.facts.voices
    assert len(runner.facts.voices) == (54 if KOKORO_JS.exists() else 5)
    assert runner.facts.voices[0] == ("af_heart" if KOKORO_JS.exists() else "jf_alpha")


def test_queue_bound_then_turns_then_one_finish_each(runner: SpeechRunner) -> None:
    runner.add(speak("a", "One. Two."))
    runner.add(speak("b", "Three. Four."))
    runner.add(speak("c", "Five."))  # max_batch 2 running + 1 waiting
    with pytest.raises(QueueFull):
        runner.add(speak("d", "Six."))
    outs = drain(runner)
    order = [o.request_id for o in outs]
    assert order[:4] == ["a", "b", "a", "b"]  # a piece each, in turn
    assert order[4:] == ["c"]
    for rid in "abc":
        mine = [o for o in outs if o.request_id == rid]
        assert [o.finish_reason for o in mine][-1] == "stop"
        assert sum(o.finish_reason is not None for o in mine) == 1
        assert all(o.audio for o in mine) and mine[0].queue_s >= 0
        assert mine[-1].duration == pytest.approx(sum(len(o.audio) for o in mine) / 2 / 24000,
                                                  abs=1e-3)


def test_abort_stops_a_request_and_the_other_goes_on(runner: SpeechRunner) -> None:
    runner.add(speak("x", "First part. Second part. Third part."))
    first = next_outputs(runner)
    assert [o.request_id for o in first] == ["x"] and first[0].finish_reason is None
    runner.add(speak("y", "Only one."))
    runner.abort(["x"])
    outs = drain(runner)
    assert [o.request_id for o in outs] == ["y"] and outs[0].finish_reason == "stop"


def test_one_failing_request_fails_alone(runner: SpeechRunner, monkeypatch: Any) -> None:
    real = runner.tts

    class Flaky:
        vocab, context_length, sample_rate = real.vocab, real.context_length, real.sample_rate

        def __call__(self, piece: str, ref: Any, speed: float) -> Any:
            if speed == 1.5:
                raise RuntimeError("boom")
            return real(piece, ref, speed)

    monkeypatch.setattr(runner, "tts", Flaky())
    runner.add(speak("bad", "This one fails.", speed=1.5))
    runner.add(speak("good", "This one works."))
    outs = {o.request_id: o for o in drain(runner)}
    assert outs["bad"].finish_reason == "error" and "boom" in (outs["bad"].error or "")
    assert outs["good"].finish_reason == "stop" and outs["good"].audio


def test_steps_stay_short_while_a_piece_is_spoken(runner: SpeechRunner, monkeypatch: Any) -> None:
    """Steps return, empty, while a piece is still being spoken: the worker's loop keeps beating
    (heartbeats, new jobs, aborts) however long a piece takes. By order, not by the clock: the
    piece is held until the steps are done (a step that waited for it would get its audio)."""
    from worker.kinds.tts import runner as runner_module

    real = runner.tts
    release, spoken = threading.Event(), threading.Event()

    class Held:
        vocab, context_length, sample_rate = real.vocab, real.context_length, real.sample_rate

        def __call__(self, piece: str, ref: Any, speed: float) -> Any:
            release.wait(30)  # held until the test lets go (the 30 s pass only if a step waits)
            spoken.set()
            return real(piece, ref, speed)

    monkeypatch.setattr(runner, "tts", Held())
    monkeypatch.setattr(runner_module, "STEP_WAIT_S", 0.05)
    runner.add(speak("s", "Slow."))
    try:
        for _ in range(6):  # the loop beats on while the piece is held
            assert runner.step() == [] and not spoken.is_set()
    finally:
        release.set()
        outs = drain(runner)  # the module's runner is left idle for the next test
    assert spoken.is_set() and [o.finish_reason for o in outs] == ["stop"]


def test_bad_jobs_are_refused_at_add(runner: SpeechRunner) -> None:
    with pytest.raises(ValueError, match="voices are"):
        runner.add(m.Speak(request_id="v", text="Hi.", voice="alloy"))
    with pytest.raises(ValueError, match="cannot take"):
        runner.add(m.Embed(request_id="e", inputs=["x"]))
    with pytest.raises(ValueError, match="no text"):
        runner.add(speak("p", "... !!"))
    assert not runner.has_work


def test_pieces_are_shorter_for_slow_speech(runner: SpeechRunner) -> None:
    assert runner.piece_limit(0.25) < runner.piece_limit(1.0) <= runner.piece_limit(4.0)
    text = "One sentence here, with a clause. " * 3
    pieces = runner.phonemizer.pieces(text, "en-us", runner.piece_limit(1.0))
    assert pieces == runner.phonemizer.pieces(text, "en-us", runner.piece_limit(1.0))
