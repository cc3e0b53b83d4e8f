"""One Parakeet transcription in progress: 30 s chunks through mlx-audio's Parakeet decode_chunk.

Untested against real weights (none can be had from a package registry here)."""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import numpy as np

from protocol import messages as m
from worker.kinds.stt.audio_io import AudioDecoder, AudioError

SAMPLE_RATE = 16000
CHUNK = 30 * SAMPLE_RATE


class ParakeetJob:
    """Same shape as WhisperJob: ``advance()`` transcribes the next 30 s of the upload."""

    def __init__(self, model: Any, job: m.Transcribe, decoder: AudioDecoder) -> None:
        self.model, self.job, self.decoder = model, job, decoder
        self.language = job.language or "en"
        self.offset = 0  # samples transcribed
        self.buf = np.zeros(0, np.float32)
        self.next_id = 0
        self.finished = False

    @property
    def duration(self) -> float:
        """Seconds of audio decoded so far."""
        return (self.offset + self.buf.size) / SAMPLE_RATE

    def advance(self) -> list[m.Segment]:
        """Transcribe the next chunk; the sentences it produced, as segments."""
        while not self.decoder.done and self.buf.size < CHUNK:
            self.buf = np.concatenate([self.buf, self.decoder.read(CHUNK)])
        if self.offset == 0 and self.buf.size == 0:
            raise AudioError("The file contains no audio samples.")
        chunk, self.buf = self.buf[:CHUNK], self.buf[CHUNK:]
        start = self.offset / SAMPLE_RATE
        self.offset += chunk.size
        self.finished = self.decoder.done and self.buf.size == 0
        if chunk.size == 0:
            return []
        result = self.model.decode_chunk(mx.array(chunk))
        out = []
        for sentence in getattr(result, "sentences", []):
            words = [m.Word(word=t.text, start=start + t.start, end=start + t.end)
                     for t in getattr(sentence, "tokens", [])] if self.job.word_timestamps else []
            out.append(m.Segment(id=self.next_id, start=start + sentence.start,
                                 end=start + sentence.end, text=" " + sentence.text.strip(),
                                 words=words))
            self.next_id += 1
        return out
