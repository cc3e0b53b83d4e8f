"""The subtitle and JSON renderers of gateway/audio/formats.py."""

from __future__ import annotations

import msgspec

from gateway.audio import formats
from protocol.messages import Segment, Word

SEGS = [Segment(id=0, start=0.0, end=2.5, text=" Hello there.", seek=0,
                words=[Word(word=" Hello", start=0.0, end=0.8), Word(word=" there.", start=0.9, end=2.5)]),
        Segment(id=1, start=3661.007, end=3662.0, text=" Second line.", seek=366100)]


def test_timestamps() -> None:
    assert formats.timestamp(0, ",") == "00:00:00,000"
    assert formats.timestamp(3661.007, ".") == "01:01:01.007"
    assert formats.timestamp(59.9996, ",") == "00:01:00,000"  # rounds into the next second
    assert formats.timestamp(-0.01, ",") == "00:00:00,000"


def test_srt() -> None:
    assert formats.srt(SEGS) == ("1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
                                 "2\n01:01:01,007 --> 01:01:02,000\nSecond line.\n\n")
    assert formats.srt([]) == ""


def test_vtt() -> None:
    assert formats.vtt(SEGS) == ("WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n"
                                 "01:01:01.007 --> 01:01:02.000\nSecond line.\n")
    assert formats.vtt([]) == "WEBVTT\n\n"


def test_verbose_json() -> None:
    body = msgspec.to_builtins(formats.verbose("transcribe", "english", 3662.4, SEGS, words=True))
    assert body["text"] == "Hello there. Second line."
    assert body["usage"] == {"type": "duration", "seconds": 3663}
    assert [s["seek"] for s in body["segments"]] == [0, 366100]
    assert body["words"] == [{"word": "Hello", "start": 0.0, "end": 0.8},
                             {"word": "there.", "start": 0.9, "end": 2.5}]
    assert "words" not in msgspec.to_builtins(
        formats.verbose("transcribe", "english", 1.0, SEGS, words=False))
