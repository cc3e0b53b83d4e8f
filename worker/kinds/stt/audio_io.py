"""Decode an uploaded audio file (any container PyAV/FFmpeg reads) into 16 kHz mono float32, in pieces."""

from __future__ import annotations

import io
from collections.abc import Iterator

import av
import numpy as np

SAMPLE_RATE = 16000
# FFmpeg demuxers an upload may use: self-contained containers only. Playlist demuxers (concat,
# HLS...) open the files and URLs they name, so an upload would read audio off the server's disk.
DEMUXERS = "wav,w64,mp3,flac,ogg,matroska,mov,aac,aiff,caf"


class AudioError(ValueError):
    """The upload is not decodable audio, or breaks a limit; the message says which."""

    def __init__(self, message: str, param: str = "file", code: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.param = param
        self.code = code


def _too_long(limit_s: float) -> AudioError:
    return AudioError(f"The audio is longer than this server's limit of {limit_s:g} seconds "
                      f"({limit_s / 60:g} minutes); split it into shorter files.")


class AudioDecoder:
    """Pulls 16 kHz mono float32 samples out of one uploaded file, a bounded amount per call."""

    def __init__(self, data: bytes, limit_s: float) -> None:
        self.limit_s = limit_s
        self.decoded = 0  # samples handed out so far
        self.done = False
        self._open(data)
        declared = self._declared_seconds()
        if declared is None or declared <= 0:  # no header duration (or a zeroed one): measure
            declared = self._demuxed_seconds()
            self.close()
            self._open(data)  # from the start again, for decoding
            self.done = False
        if declared is not None and declared > limit_s + 1.0:
            self.close()
            raise _too_long(limit_s)
        self._resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
        self._frames: Iterator[av.AudioFrame] = self._container.decode(self._stream)

    def _open(self, data: bytes) -> None:
        """Open DATA's container and its first audio stream (AudioError when it has none)."""
        try:
            self._container = av.open(io.BytesIO(data), mode="r", metadata_errors="ignore",
                                      container_options={"format_whitelist": DEMUXERS})
            streams = self._container.streams.audio
            if not streams:
                raise AudioError("The file has no audio stream.")
            self._stream = streams[0]
        except AudioError:
            raise
        except Exception as exc:  # FFmpeg's many errors (InvalidDataError, ...) mean "not audio"
            raise AudioError(f"The file could not be decoded as audio ({_brief(exc)}). Supported "
                             "formats: wav, mp3, flac, m4a, ogg, webm (any FFmpeg reads).") from exc

    def _demuxed_seconds(self) -> float | None:
        """The packets' summed durations (demuxed, not decoded: milliseconds for hours of audio),
        stopping past the limit; None when the packets carry none (then decoding counts)."""
        time_base = self._stream.time_base
        if time_base is None:
            return None
        total, stop = 0, (self.limit_s + 1.0) / float(time_base)
        try:
            for packet in self._container.demux(self._stream):
                total += packet.duration or 0
                if total > stop:
                    break
        except Exception:  # a damaged tail: decoding keeps what is sound and counts it
            pass
        return float(total * time_base) if total else None

    def _declared_seconds(self) -> float | None:
        """The duration the container states, if any (checked again while decoding)."""
        if self._stream.duration is not None and self._stream.time_base is not None:
            return float(self._stream.duration * self._stream.time_base)
        if self._container.duration is not None:
            return float(self._container.duration) / av.time_base
        return None

    def read(self, max_samples: int) -> np.ndarray:
        """Up to about MAX_SAMPLES more samples (fewer at the end); sets ``done`` at the end."""
        pieces: list[np.ndarray] = []
        got = 0
        while got < max_samples and not self.done:
            try:
                frame = next(self._frames)
            except StopIteration:
                pieces += self._flush()
                self.done = True
                break
            except Exception as exc:
                if self.decoded + got == 0:
                    raise AudioError(f"The file could not be decoded as audio ({_brief(exc)}).") from exc
                self.done = True  # a truncated tail: keep what decoded cleanly
                break
            for out in self._resampler.resample(frame):
                piece = out.to_ndarray().reshape(-1).astype(np.float32, copy=False)
                pieces.append(piece)
                got += piece.size
        samples = np.concatenate(pieces) if pieces else np.zeros(0, np.float32)
        self.decoded += samples.size
        if self.decoded > (self.limit_s + 1.0) * SAMPLE_RATE:
            self.close()
            raise _too_long(self.limit_s)
        if self.done:
            self.close()
        return samples

    def _flush(self) -> list[np.ndarray]:
        return [o.to_ndarray().reshape(-1).astype(np.float32) for o in self._resampler.resample(None)]

    def close(self) -> None:
        """Free FFmpeg's state (safe to call twice)."""
        self.done = True
        try:
            self._container.close()
        except Exception:  # closing a half-broken container must not fail the request twice
            pass


def _brief(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 160 else text[:157] + "..."
