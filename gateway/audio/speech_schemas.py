"""The msgspec schemas of POST /v1/audio/speech (OpenAI's CreateSpeechRequest) and its SSE events."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

SpeechFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class CustomVoice(msgspec.Struct, forbid_unknown_fields=True):
    """A voice named by an object, `{"id": "..."}`."""

    id: str


class SpeechRequest(msgspec.Struct, forbid_unknown_fields=True):
    """POST /v1/audio/speech: text in, audio out."""

    model: str
    input: Annotated[str, msgspec.Meta(max_length=4096)]
    voice: str | CustomVoice
    response_format: SpeechFormat = "mp3"
    speed: Annotated[float, msgspec.Meta(ge=0.25, le=4.0)] = 1.0
    instructions: Annotated[str, msgspec.Meta(max_length=4096)] = ""
    stream_format: Literal["audio", "sse"] | None = None  # unset: the whole file at once

    @property
    def voice_id(self) -> str:
        """The voice's name, given as a string or as {"id": ...}."""
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SpeechUsage(msgspec.Struct):
    """Tokens of a speech request: phonemes in, audio frames (40 per second) out."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class SpeechAudioDelta(msgspec.Struct, tag_field="type", tag="speech.audio.delta"):
    """One chunk of the encoded audio, base64."""

    audio: str


class SpeechAudioDone(msgspec.Struct, tag_field="type", tag="speech.audio.done"):
    """The end of the audio, with usage."""

    usage: SpeechUsage


SPEECH_EVENTS = (SpeechAudioDelta, SpeechAudioDone)


class SpeechVoices(msgspec.Struct):
    """One text-to-speech alias's voices."""

    model: str
    voices: list[str]
    default_voice: str | None
    sample_rate: int


class SpeechVoiceList(msgspec.Struct):
    """GET /v1/audio/voices."""

    data: list[SpeechVoices]
    object: str = "list"
