"""worker/kinds/stt/audio_io.py: PyAV decoding of uploads, its errors and the duration limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.audio.media import ENCODINGS, encode
from worker.kinds.stt.audio_io import SAMPLE_RATE, AudioDecoder, AudioError


@pytest.fixture(scope="module")
def tone(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tone")
    t = np.arange(int(2.0 * 22050)) / 22050
    samples = (0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32)
    return {ext: encode(samples, 22050, folder / f"tone.{ext}", ext) for ext in ENCODINGS}


@pytest.mark.parametrize("ext", sorted(ENCODINGS))
def test_formats_decode_to_16k_mono(tone: dict[str, Path], ext: str) -> None:
    d = AudioDecoder(tone[ext].read_bytes(), 7200)
    x = d.read(10 * SAMPLE_RATE)
    assert d.done and x.dtype == np.float32
    assert abs(x.size / SAMPLE_RATE - 2.0) < 0.1, x.size
    assert 0.2 < float(np.abs(x).max()) < 0.4


def test_reads_in_bounded_pieces(tone: dict[str, Path]) -> None:
    d = AudioDecoder(tone["flac"].read_bytes(), 7200)
    first = d.read(SAMPLE_RATE // 2)
    assert not d.done and SAMPLE_RATE // 2 <= first.size < SAMPLE_RATE
    rest = d.read(10 * SAMPLE_RATE)
    assert d.done and abs((first.size + rest.size) / SAMPLE_RATE - 2.0) < 0.1


@pytest.mark.parametrize("data", [b"garbage" * 100, b"RIFF" + b"\0" * 60, bytes(range(256)) * 4])
def test_garbage_is_refused(data: bytes) -> None:
    with pytest.raises(AudioError) as err:
        AudioDecoder(data, 7200).read(SAMPLE_RATE)
    assert err.value.param == "file"


def test_duration_limit(tone: dict[str, Path]) -> None:
    with pytest.raises(AudioError, match="longer than"):
        AudioDecoder(tone["wav" if "wav" in tone else "flac"].read_bytes(), 0.5).read(10 * SAMPLE_RATE)


def test_an_upload_cannot_name_files_on_the_server(tone: dict[str, Path],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A playlist upload (FFmpeg's concat demuxer) would read audio files below the worker's
    working directory and transcribe them: only self-contained containers are opened."""
    monkeypatch.chdir(tone["flac"].parent)  # tone.flac is right there, a safe relative name
    with pytest.raises(AudioError) as err:
        AudioDecoder(b"ffconcat version 1.0\nfile tone.flac\n", 7200).read(10 * SAMPLE_RATE)
    assert err.value.param == "file"


def _zero_total_samples(flac: bytes) -> bytes:
    """FLAC bytes whose STREAMINFO says 0 samples ("unknown"): the header states no duration."""
    data = bytearray(flac)
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO is the first block
    data[21] &= 0xF0  # the low 36 bits of STREAMINFO bytes 10-17 are the total samples
    data[22:26] = b"\0\0\0\0"
    return bytes(data)


def test_a_zeroed_flac_header_does_not_skip_the_duration_limit(
        tmp_path: Path, tone: dict[str, Path]) -> None:
    """A long FLAC whose header claims no length is refused before a sample is decoded (its
    packets are counted), and a short one still decodes whole."""
    t = np.arange(int(30.0 * 16000)) / 16000
    long = encode((0.3 * np.sin(2 * np.pi * 440 * t)).astype(np.float32), 16000,
                  tmp_path / "long.flac", "flac")
    with pytest.raises(AudioError, match="longer than"):
        AudioDecoder(_zero_total_samples(long.read_bytes()), 10)  # refused at open
    d = AudioDecoder(_zero_total_samples(tone["flac"].read_bytes()), 10)
    x = d.read(10 * SAMPLE_RATE)
    assert d.done and abs(x.size / SAMPLE_RATE - 2.0) < 0.1
