"""Shared test helpers: paths of the models the tests use."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_MODELS = ROOT.parent / "shared" / "models"


def shared_model(name: str) -> Path:
    """Path of a model in ../shared/models, or skip the test when that folder is absent."""
    path = SHARED_MODELS / name
    if not (path / "config.json").exists():
        pytest.skip(f"../shared/models/{name} is absent (only CI and dev machines have it)")
    return path
