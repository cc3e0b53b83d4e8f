"""One Whisper transcription in progress: audio buffer, seek position, one bounded piece per call."""

from __future__ import annotations

import math
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_audio.stt.models.whisper.audio import log_mel_spectrogram, pad_or_trim
from mlx_audio.stt.models.whisper.decoding import DecodingOptions, DecodingResult
from mlx_audio.stt.models.whisper.timing import add_word_timestamps

from protocol import messages as m
from worker.kinds.stt.audio_io import AudioDecoder, AudioError
from worker.kinds.stt.segments import HOP_LENGTH, N_FRAMES, SAMPLE_RATE, segment_dicts, split_window
from worker.kinds.stt.token_steps import StepDecode

N_SAMPLES = N_FRAMES * HOP_LENGTH
READ_SAMPLES = 60 * SAMPLE_RATE  # decode the upload a minute at a time
FALLBACK = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # OpenAI: temperature 0 raises it on a failed window
COMPRESSION_MAX, LOGPROB_MIN, NO_SPEECH_MIN = 2.4, -1.0, 0.6
LOGPROB_FLOOR = -100.0  # reported for a window whose mean log-probability is not a number (JSON
# has no NaN or infinity: the answer would fail to encode)
TOKENS_PER_STEP = 48  # sampled tokens per advance(): keeps one step to a few seconds


class WhisperJob:
    """Transcribes one upload window by window; ``advance()`` does one bounded piece of work."""

    def __init__(self, model: Any, job: m.Transcribe, decoder: AudioDecoder) -> None:
        self.model, self.job, self.decoder = model, job, decoder
        self.language = job.language or ("" if model.is_multilingual else "en")
        self.buf = np.zeros(0, np.float32)
        self.buf_start = 0  # sample index of buf[0]
        self.seek = 0  # mel frames consumed
        self.next_id = 0
        self.temps = FALLBACK if job.temperature == 0 else (job.temperature,)
        self.attempt = 0
        self.features: mx.array | None = None
        self.decoding: StepDecode | None = None
        self.mel: mx.array | None = None
        self.segment_size = 0
        self.last_speech = 0.0
        tok = self._tokenizer()
        self.prompt_tokens = tok.encode(" " + job.prompt.strip()) if job.prompt.strip() else []
        self.context = list(self.prompt_tokens)
        self.reset_since = 0
        self.finished = False

    def _tokenizer(self) -> Any:
        return self.model.get_tokenizer(language=self.language or None, task=self.job.task)

    @property
    def duration(self) -> float:
        """Seconds of audio decoded so far (the whole file once finished)."""
        return (self.buf_start + self.buf.size) / SAMPLE_RATE

    def _fill(self) -> None:
        """Decode more of the upload until a full window past ``seek`` is buffered (or EOF)."""
        start = self.seek * HOP_LENGTH
        if start > self.buf_start:  # drop what earlier windows consumed
            self.buf = self.buf[start - self.buf_start:]
            self.buf_start = start
        while not self.decoder.done and self.buf.size < N_SAMPLES:
            self.buf = np.concatenate([self.buf, self.decoder.read(READ_SAMPLES)])
        if self.decoder.done and self.buf_start + self.buf.size == 0:
            raise AudioError("The file contains no audio samples.")

    def advance(self) -> list[m.Segment]:
        """One bounded piece: encode the next window and start decoding it, or sample more of its
        tokens, or retry it hotter; the segments it finished (``finished`` after the last)."""
        if self.features is None:
            self._fill()
            remaining = self.buf.size
            if self.decoder.done and remaining <= 0:
                self.finished = True
                return []
            chunk = mx.array(self.buf[:N_SAMPLES])
            self.segment_size = min(N_FRAMES, math.ceil(remaining / HOP_LENGTH))
            mel = log_mel_spectrogram(chunk, n_mels=self.model.dims.n_mels,
                                      padding=N_SAMPLES - chunk.shape[0])
            # frames past the audio are zeros in mel space, as Whisper pads the last window
            self.mel = pad_or_trim(mel[:self.segment_size], N_FRAMES, axis=-2).astype(self.model.dtype)
            self.features = self.model.encoder(self.mel[None])[0]
            mx.eval(self.features)
            self.attempt = 0
            self.decoding = None
        if self.decoding is None:
            self.decoding = StepDecode(self.model, self.features, DecodingOptions(
                task=self.job.task, language=self.language or None,
                temperature=self.temps[self.attempt], prompt=self.context[self.reset_since:],
                fp16=self.model.dtype == mx.float16))
        if not self.decoding.run(TOKENS_PER_STEP):
            return []
        return self._judge(self.decoding.result())

    def _judge(self, result: DecodingResult) -> list[m.Segment]:
        """Whisper's fallback rule: a repetitive or unlikely window is decoded again hotter."""
        self.decoding = None
        if not self.language:
            self.language = result.language
        # a NaN/-inf mean log-probability (a token the filters had ruled out) fails the window too
        failed = (result.compression_ratio > COMPRESSION_MAX or result.avg_logprob < LOGPROB_MIN
                  or not math.isfinite(result.avg_logprob))
        silent = result.no_speech_prob > NO_SPEECH_MIN and result.avg_logprob < LOGPROB_MIN
        if failed and not silent and self.attempt + 1 < len(self.temps):
            self.attempt += 1
            return []  # the next call retries this window hotter
        return self._accept(result, silent)

    def _accept(self, result: Any, silent: bool) -> list[m.Segment]:
        tok = self._tokenizer()
        seek, size = self.seek, self.segment_size
        self.features = None
        if silent:
            self.seek += size
            self._check_end()
            return []
        parts, self.seek, single = split_window(list(result.tokens), tok.timestamp_begin, seek, size)
        segs = [s for s in segment_dicts(parts, seek, result, tok.decode, tok.eot)
                if s["end"] > s["start"] and s["text"].strip()]
        if self.job.word_timestamps and segs:
            add_word_timestamps(segments=segs, model=self.model, tokenizer=tok, mel=self.mel,
                                num_frames=size, last_speech_timestamp=self.last_speech)
            ends = [w["end"] for s in segs for w in s["words"]]
            if ends and not single and ends[-1] > seek / 100:
                self.seek = max(self.seek, round(ends[-1] * 100))
            if ends:
                self.last_speech = ends[-1]
        self.mel = None
        for s in segs:
            self.context.extend(s["tokens"])
        if result.temperature > 0.5:
            self.reset_since = len(self.context)
        self._check_end()
        return [self._segment(s) for s in segs]

    def _check_end(self) -> None:
        if self.decoder.done and self.seek * HOP_LENGTH >= self.buf_start + self.buf.size:
            self.finished = True

    def _segment(self, s: dict[str, Any]) -> m.Segment:
        seg = m.Segment(id=self.next_id, start=round(s["start"], 3), end=round(s["end"], 3),
                        text=s["text"], tokens=s["tokens"], temperature=s["temperature"],
                        avg_logprob=_finite(s["avg_logprob"], LOGPROB_FLOOR),
                        compression_ratio=_finite(s["compression_ratio"], 0.0),
                        no_speech_prob=_finite(s["no_speech_prob"], 0.0), seek=s["seek"],
                        words=[m.Word(word=w["word"], start=w["start"], end=w["end"])
                               for w in s.get("words", [])])
        self.next_id += 1
        return seg


def _finite(value: float, fallback: float) -> float:
    """VALUE, or FALLBACK when it is NaN or infinite (JSON cannot carry them)."""
    return value if math.isfinite(value) else fallback
