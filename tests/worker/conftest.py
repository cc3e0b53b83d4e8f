"""Fixtures of the worker loop tests: the demo model loaded once per module, and a LoopRig on it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.worker.serve.loop_harness import LoopRig
from worker.model.embedded import embedded_model_path
from worker.model.load import LoadedModel, load_model


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    """The demo model (modules that load another model define their own ``loaded``)."""
    return load_model(str(embedded_model_path()))


@pytest.fixture
def rig(loaded: LoadedModel) -> Iterator[LoopRig]:
    """A worker loop on LOADED behind a real socket, closed after the test."""
    r = LoopRig(loaded)
    yield r
    r.close()
