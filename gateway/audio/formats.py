"""Render a finished transcription as OpenAI's response formats: json, text, srt, vtt, verbose_json."""

from __future__ import annotations

import math

from gateway.audio.transcription_schemas import (
    DurationUsage,
    TranscriptionSegment,
    TranscriptionVerbose,
    TranscriptionWord,
)
from protocol.messages import Segment


def timestamp(seconds: float, sep: str) -> str:
    """HH:MM:SS<sep>mmm (SEP ',' for SRT, '.' for WebVTT)."""
    ms = max(0, round(seconds * 1000))
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{sep}{ms:03d}"


def srt(segments: list[Segment]) -> str:
    """SubRip subtitles, one cue per segment."""
    cues = [f"{i}\n{timestamp(s.start, ',')} --> {timestamp(s.end, ',')}\n{s.text.strip()}\n"
            for i, s in enumerate(segments, start=1)]
    return "\n".join(cues) + ("\n" if cues else "")


def vtt(segments: list[Segment]) -> str:
    """WebVTT subtitles, one cue per segment."""
    cues = [f"{timestamp(s.start, '.')} --> {timestamp(s.end, '.')}\n{s.text.strip()}\n"
            for s in segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def full_text(segments: list[Segment]) -> str:
    """The whole transcript (segments joined, outer whitespace stripped)."""
    return "".join(s.text for s in segments).strip()


def usage(duration: float) -> DurationUsage:
    """OpenAI's duration usage object (whole seconds, rounded up)."""
    return DurationUsage(seconds=math.ceil(duration))


def verbose(task: str, language: str, duration: float, segments: list[Segment],
            words: bool) -> TranscriptionVerbose:
    """The verbose_json body: segments with timestamps, and words when asked for."""
    body = TranscriptionVerbose(
        task="translate" if task == "translate" else "transcribe", language=language,
        duration=duration, text=full_text(segments),
        segments=[TranscriptionSegment(
            id=s.id, seek=s.seek, start=s.start, end=s.end, text=s.text, tokens=s.tokens,
            temperature=s.temperature, avg_logprob=s.avg_logprob,
            compression_ratio=s.compression_ratio, no_speech_prob=s.no_speech_prob)
            for s in segments],
        usage=usage(duration))
    if words:
        body.words = [TranscriptionWord(word=w.word.strip(), start=w.start, end=w.end)
                      for s in segments for w in s.words]
    return body
