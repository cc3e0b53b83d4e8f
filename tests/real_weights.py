"""The real pretrained GGUF checkpoints `make test` fetches (deploy/ensure-real-weights.sh) and
their converted folders; tests skip, naming the command, when they are absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOL = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
FETCH = ("`make test` (or `PYTHON=.venv/bin/python sh deploy/ensure-real-weights.sh "
         ".venv/real-weights`) fetches it")


def weights_dir() -> Path:
    """$RAPID_MLX_REAL_WEIGHTS, else .venv/real-weights."""
    return Path(os.environ.get("RAPID_MLX_REAL_WEIGHTS") or ROOT / ".venv" / "real-weights")


def cache_env() -> dict[str, str]:
    """Environment for a server that serves the GGUF files from the converted cache."""
    return {"RAPID_MLX_GGUF_CACHE": str(weights_dir() / "converted")}


def gguf_or_skip(name: str) -> Path:
    """The GGUF file NAME, or skip the test saying how to fetch it."""
    path = weights_dir() / name
    if not path.is_file():
        pytest.skip(f"{path} is absent: {FETCH}")
    return path


def converted_or_skip(name: str) -> Path:
    """The converted MLX folder of the GGUF file NAME (converting it if the cache has none)."""
    os.environ.setdefault("RAPID_MLX_GGUF_CACHE", cache_env()["RAPID_MLX_GGUF_CACHE"])
    from worker.model.gguf.cache import ensure_converted

    return ensure_converted(gguf_or_skip(name))
