"""The msgspec schemas of POST /v1/audio/transcriptions and /translations: the multipart form's
fields, the JSON answers and the SSE events (OpenAI's CreateTranscriptionRequest and friends)."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
Granularity = Literal["segment", "word"]


class TranscriptionForm(msgspec.Struct, kw_only=True):
    """The multipart/form-data fields of a transcription or translation (documentation only:
    `gateway/audio/upload.py` reads and checks the form)."""

    file: Annotated[bytes, msgspec.Meta(description="The audio file (wav, flac, mp3, ogg, webm, "
                                                    "m4a, ...), at most 25 MB")]
    model: str
    language: Annotated[str, msgspec.Meta(description="ISO-639-1 code of the spoken language "
                                                      "(transcriptions only)")] = ""
    prompt: str = ""
    temperature: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.0
    response_format: ResponseFormat = "json"
    timestamp_granularities: Annotated[list[Granularity], msgspec.Meta(
        description="Sent as `timestamp_granularities[]`; needs `verbose_json`")] = []
    stream: Annotated[bool, msgspec.Meta(description="Server-sent `transcript.text.delta` "
                                                     "events, then `transcript.text.done`")] = False


class DurationUsage(msgspec.Struct, tag_field="type", tag="duration"):
    """Usage of a transcription: the audio's length in whole seconds, rounded up."""

    seconds: int


class Transcription(msgspec.Struct):
    """The `json` answer."""

    text: str
    usage: DurationUsage


class TranscriptionWord(msgspec.Struct):
    """One word with its time span (seconds)."""

    word: str
    start: float
    end: float


class TranscriptionSegment(msgspec.Struct):
    """One segment of a `verbose_json` answer, as Whisper reports it."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionVerbose(msgspec.Struct, omit_defaults=True):
    """The `verbose_json` answer (`words` with `timestamp_granularities[]=word`)."""

    task: Literal["transcribe", "translate"]
    language: str
    duration: float
    text: str
    segments: list[TranscriptionSegment]
    usage: DurationUsage
    words: list[TranscriptionWord] | msgspec.UnsetType = msgspec.UNSET


class TranscriptTextDelta(msgspec.Struct, tag_field="type", tag="transcript.text.delta"):
    """More transcribed text (streaming)."""

    delta: str


class TranscriptTextDone(msgspec.Struct, tag_field="type", tag="transcript.text.done"):
    """The whole transcript, with usage: the stream's last event."""

    text: str
    usage: DurationUsage


TRANSCRIPT_EVENTS = (TranscriptTextDelta, TranscriptTextDone)
