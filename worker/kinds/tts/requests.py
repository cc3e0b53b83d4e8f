"""One speech request inside the worker: its checked job, phoneme pieces, voice and encoder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from protocol import messages as m
from worker.kinds.tts.encode import FORMATS, Encoder

MAX_INPUT_CHARS = 4096  # OpenAI's limit for /v1/audio/speech
MIN_SPEED, MAX_SPEED = 0.25, 4.0


class BadSpeech(ValueError):
    """A request the worker refuses, naming the request field at fault."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


def check(job: m.Speak, voices: list[str]) -> str:
    """The voice JOB is spoken with (its own or the default); BadSpeech when a field is wrong."""
    if not job.text.strip():
        raise BadSpeech("input is empty: give the text to speak", "input")
    if len(job.text) > MAX_INPUT_CHARS:
        raise BadSpeech(f"input is {len(job.text)} characters; the limit is {MAX_INPUT_CHARS}",
                        "input")
    if not MIN_SPEED <= job.speed <= MAX_SPEED:
        raise BadSpeech(f"speed must be between {MIN_SPEED} and {MAX_SPEED} (got {job.speed})",
                        "speed")
    if job.audio_format not in FORMATS:
        raise BadSpeech(f"response_format {job.audio_format!r} is not one of "
                        f"{', '.join(FORMATS)}", "response_format")
    voice = job.voice or voices[0]
    if voice not in voices:
        raise BadSpeech(f"voice {voice!r} is not a voice of this model; its voices are: "
                        f"{', '.join(voices)}", "voice")
    return voice


@dataclass
class Speech:
    """A request being spoken: the next piece to synthesize and what was produced so far."""

    job: m.Speak
    voice: str
    pieces: list[str]
    encoder: Encoder
    queued_at: float = field(default_factory=time.monotonic)
    next_piece: int = 0
    outputs: int = 0

    @property
    def phonemes(self) -> int:
        """Phonemes in the whole request (reported as its input tokens)."""
        return sum(len(p) for p in self.pieces)

    @property
    def done(self) -> bool:
        """True once every piece was synthesized."""
        return self.next_piece >= len(self.pieces)
