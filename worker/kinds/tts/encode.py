"""One incremental audio encoder per speech request (PyAV): float samples in, file bytes out.

The bytes of every `feed()` and the final `finish()` concatenated are the whole file, so a
streamed response and a buffered one are the same bytes. WAV is written as a streaming WAV
(RIFF and data sizes 0xFFFFFFFF, as a stream cannot know its length up front) in both cases;
pcm is raw 16-bit little-endian mono, as OpenAI's.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac",
                 "flac": "audio/flac", "wav": "audio/wav", "pcm": "audio/pcm"}
# response_format -> (container, codec, rate the codec runs at: None = the model's)
_AV = {"mp3": ("mp3", "libmp3lame", None), "opus": ("ogg", "libopus", 48000),
       "aac": ("adts", "aac", None), "flac": ("flac", "flac", None)}


def _s16(samples: np.ndarray) -> bytes:
    return bytes((np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes())


def wav_header(rate: int) -> bytes:
    """A mono 16-bit PCM WAV header with open-ended (0xFFFFFFFF) RIFF and data sizes."""
    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    return (b"RIFF" + struct.pack("<I", 0xFFFFFFFF) + b"WAVE" + b"fmt " + struct.pack("<I", 16)
            + fmt + b"data" + struct.pack("<I", 0xFFFFFFFF))


class _Sink:
    """A write-only, non-seekable file for PyAV: what the muxer wrote since the last take()."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: Any) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def seekable(self) -> bool:
        return False

    def take(self) -> bytes:
        out, self.chunks = b"".join(self.chunks), []
        return out


class Encoder:
    """Encode one mono float32 stream at RATE into FORMAT, a piece at a time."""

    def __init__(self, fmt: str, rate: int) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown response_format {fmt!r}; use one of {', '.join(FORMATS)}")
        self.fmt, self.rate, self.started = fmt, rate, False
        self.samples = 0
        if fmt in _AV:
            self._open_av(*_AV[fmt])

    def _open_av(self, container: str, codec: str, codec_rate: int | None) -> None:
        import av

        self._sink = _Sink()
        self._out = av.open(self._sink, mode="w", format=container,
                            options={"fflags": "+bitexact"})  # same input, same bytes
        stream: Any = self._out.add_stream(codec, rate=codec_rate or self.rate)
        stream.layout = "mono"
        self._stream = stream
        fmt = stream.codec_context.codec.audio_formats[0].name
        frame_size = stream.codec_context.frame_size or 1024
        self._resampler = av.AudioResampler(format=fmt, layout="mono",
                                            rate=codec_rate or self.rate, frame_size=frame_size)

    def feed(self, samples: np.ndarray) -> bytes:
        """Encode these samples (float32 in [-1, 1]); return the file bytes ready so far."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        self.samples += samples.size
        head = b""
        if not self.started:
            self.started = True
            head = wav_header(self.rate) if self.fmt == "wav" else b""
        if self.fmt in ("wav", "pcm"):
            return head + _s16(samples)
        return self._encode(samples)

    def _encode(self, samples: np.ndarray | None) -> bytes:
        import av

        frame = None
        if samples is not None and samples.size:
            frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="flt",
                                               layout="mono")
            frame.sample_rate = self.rate
        for resampled in self._resampler.resample(frame):
            for packet in self._stream.encode(resampled):
                self._out.mux(packet)
        if samples is None:  # the end: flush the encoder and the container's trailer
            for packet in self._stream.encode(None):
                self._out.mux(packet)
            self._out.close()
        return self._sink.take()

    def finish(self) -> bytes:
        """The last bytes of the file (encoder delay, trailer); call once, after the last feed."""
        if self.fmt in ("wav", "pcm"):
            return b"" if self.started else self.feed(np.zeros(0, np.float32))
        return self._encode(None)

    @property
    def seconds(self) -> float:
        """Seconds of audio fed so far."""
        return self.samples / self.rate
