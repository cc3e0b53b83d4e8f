"""Operations for a non-generate worker kind (a speech-to-text alias, Whisper tiny.en converted
by our command): /v1/workers and /v1/models show its kind, /metrics counts its requests, a
SIGKILL restarts it, a hot swap replaces it, and SIGTERM drains a transcription in flight."""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.audio.conftest import SENTENCES, converted_whisper
from tests.audio.media import speak
from tests.audio.wer import wer
from tests.e2e.harness import Server
from tests.ops.harness import scrape, wait_for

pytestmark = pytest.mark.slow
KEY = "admin-secret"


@pytest.fixture(scope="module")
def whisper_dir() -> Path:
    """Whisper tiny.en converted by our command (shared with tests/audio)."""
    return converted_whisper()


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder swaps may load new weights from (--swap-allow-path)."""
    return tmp_path_factory.mktemp("stt-models")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """One spoken sentence (espeak-ng)."""
    return SENTENCES[4], speak(SENTENCES[4], tmp_path_factory.mktemp("clip") / "s.wav")


@pytest.fixture(scope="module")
def srv(whisper_dir: Path, allowed: Path) -> Iterator[Server]:
    s = Server(str(whisper_dir), "--served-model-name", "stt", "--admin-key", KEY,
               "--swap-allow-path", str(allowed)).wait_ready(timeout=180)
    yield s
    s.stop()


def _transcribe(srv: Server, clip: tuple[str, Path], timeout: float = 120) -> str:
    r = httpx.post(f"{srv.url}/audio/transcriptions", data={"model": "stt"},
                   files={"file": ("s.wav", clip[1].read_bytes(), "audio/wav")}, timeout=timeout)
    assert r.status_code == 200, r.text
    text = r.json()["text"]
    assert wer(clip[0], text) <= 0.25, text
    return str(text)


def _success(srv: Server) -> float:
    return sum(v for (name, labels), v in scrape(srv.base).items()
               if name == "rapid_mlx_request_success_total" and ("model_name", "stt") in labels)


def test_kind_is_shown_and_counted(srv: Server, clip: tuple[str, Path]) -> None:
    card = httpx.get(f"{srv.url}/models/stt", timeout=10).json()
    assert card["kind"] == "transcribe" and "transcriptions" in card["capabilities"]
    assert srv.worker("stt")["kind"] == "transcribe"
    before = _success(srv)
    _transcribe(srv, clip)
    assert wait_for(lambda: _success(srv) >= before + 1, timeout=10)
    live = srv.worker("stt")["live"]
    assert live and live["kind"] == "transcribe" and live["steps"] > 0


def test_sigkill_restarts_the_worker(srv: Server, clip: tuple[str, Path]) -> None:
    before = srv.worker("stt")
    os.kill(before["pid"], signal.SIGKILL)
    after = wait_for(lambda: (w := srv.worker("stt"))["state"] == "ready"
                     and w["boot_id"] != before["boot_id"] and w, timeout=120)
    assert after["restarts"] == before["restarts"] + 1
    _transcribe(srv, clip)


def test_hot_swap_replaces_the_worker(srv: Server, whisper_dir: Path, allowed: Path,
                                      clip: tuple[str, Path]) -> None:
    target = allowed / "whisper-copy"  # "new weights on disk": same files, another folder
    if not target.exists():
        shutil.copytree(whisper_dir, target)
    before = srv.worker("stt")
    r = httpx.post(f"{srv.base}/admin/swap/stt", json={"model": str(target)},
                   headers={"Authorization": f"Bearer {KEY}"}, timeout=180)
    assert r.status_code == 200, r.text
    w = wait_for(lambda: (x := srv.worker("stt"))["state"] == "ready"
                 and x["model"] == str(target) and x, timeout=120)
    assert w["kind"] == "transcribe" and w["boot_id"] != before["boot_id"]
    _transcribe(srv, clip)


def test_sigterm_drains_a_transcription_in_flight(whisper_dir: Path, tmp_path: Path) -> None:
    long_text = " ".join(SENTENCES * 2)  # about 30 s of speech: several decode steps
    audio = speak(long_text, tmp_path / "long.wav")
    s = Server(str(whisper_dir), "--served-model-name", "stt",
               "--shutdown-timeout", "120").wait_ready(timeout=180)
    result: dict[str, httpx.Response] = {}

    def post() -> None:
        result["r"] = httpx.post(f"{s.url}/audio/transcriptions", data={"model": "stt"},
                                 files={"file": ("l.wav", audio.read_bytes(), "audio/wav")},
                                 timeout=180)

    t = threading.Thread(target=post)
    t.start()
    try:
        wait_for(lambda: s.worker("stt")["running"] >= 1, timeout=30, every=0.05)
        s.proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        t.join(180)
        r = result["r"]
        assert r.status_code == 200, r.text
        assert wer(long_text, r.json()["text"]) <= 0.25
        assert s.proc.wait(60) == 0
        print(f"drained a transcription {time.monotonic() - started:.1f}s after SIGTERM")
    finally:
        s.stop()
