"""Shared test helpers: paths of the models the tests use."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from worker.model.rlimit import import_mlx_lm

ROOT = Path(__file__).resolve().parent.parent
SHARED_MODELS = ROOT.parent / "shared" / "models"

# no test writes to the real data dir: `serve` started by any test (subprocess or CliRunner)
# defaults its --data-dir under this temporary XDG_DATA_HOME
_DATA_HOME = tempfile.mkdtemp(prefix="rapid-mlx-test-xdg-")
os.environ["XDG_DATA_HOME"] = _DATA_HOME
atexit.register(shutil.rmtree, _DATA_HOME, ignore_errors=True)

# mlx-lm's import would set this process's open-file limits to (2048, 4096) for good (a test that
# imports it first decides what every later test may open): import it as the worker does
import_mlx_lm()


def shared_model(name: str) -> Path:
    """Path of a model in ../shared/models, or skip the test when that folder is absent."""
    path = SHARED_MODELS / name
    if not (path / "config.json").exists():
        pytest.skip(f"../shared/models/{name} is absent (only CI and dev machines have it)")
    return path
