"""Test audio: espeak-ng speech as WAV, re-encoded with PyAV into the other upload formats."""

from __future__ import annotations

import subprocess
from pathlib import Path

import av
import numpy as np

# container format, codec, sample rate, file extension
ENCODINGS = {"mp3": ("mp3", "libmp3lame", 22050), "flac": ("flac", "flac", 22050),
             "ogg": ("ogg", "libopus", 48000), "webm": ("webm", "libopus", 48000),
             "m4a": ("ipod", "aac", 22050)}


def speak(text: str, path: Path, voice: str = "en-us", speed: int = 150) -> Path:
    """TEXT spoken by espeak-ng into the WAV file PATH."""
    subprocess.run(["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(path), text], check=True)
    return path


def decode_mono(path: Path) -> tuple[np.ndarray, int]:
    """The file's samples as mono float32 and its sample rate."""
    with av.open(str(path)) as c:
        stream = c.streams.audio[0]
        rate = stream.rate
        res = av.AudioResampler(format="flt", layout="mono", rate=rate)
        parts = [f.to_ndarray().reshape(-1) for fr in c.decode(stream) for f in res.resample(fr)]
    return np.concatenate(parts), rate


def encode(samples: np.ndarray, rate: int, path: Path, ext: str) -> Path:
    """Write mono float32 SAMPLES (at RATE) to PATH as the upload format EXT."""
    fmt, codec, out_rate = ENCODINGS[ext]
    with av.open(str(path), "w", format=fmt) as c:
        stream = c.add_stream(codec, rate=out_rate, layout="mono")
        res = av.AudioResampler(format=stream.codec_context.format.name, layout="mono", rate=out_rate)
        frame_size = 1024
        pts = 0
        for start in range(0, len(samples), frame_size):
            chunk = samples[start:start + frame_size].astype(np.float32)[None, :]
            frame = av.AudioFrame.from_ndarray(chunk, format="flt", layout="mono")
            frame.sample_rate, frame.pts = rate, pts
            pts += chunk.shape[1]
            for f in res.resample(frame):
                for packet in stream.encode(f):
                    c.mux(packet)
        for f in res.resample(None):
            for packet in stream.encode(f):
                c.mux(packet)
        for packet in stream.encode(None):
            c.mux(packet)
    return path


def convert(wav: Path, ext: str) -> Path:
    """The WAV file re-encoded as EXT next to it."""
    samples, rate = decode_mono(wav)
    return encode(samples, rate, wav.with_suffix("." + ext), ext)
