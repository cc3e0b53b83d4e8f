"""tools/tiny_models/build.py: every config builds and loads in mlx-lm with finite logits, and
cached builds are reused only when the recipe is the same."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.tiny_models.build import RECIPE, cached_build, folder_name
from tools.tiny_models.configs import CONFIGS


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_each_config_loads_in_mlx_lm_with_finite_logits(model_type: str, tmp_path: Path) -> None:
    """The folder loads with mlx_lm.load and a short prompt gives finite, not all-equal logits."""
    import mlx.core as mx
    from mlx_lm import load

    model = load(str(cached_build(model_type, tmp_path)))[0]
    logits = model(mx.array([[11, 222, 333, 44]]))
    assert logits.shape[-1] == 4096
    assert bool(mx.all(mx.isfinite(logits))) and float(mx.std(logits[0, -1])) > 0.1


def test_cached_build_reuses_the_same_recipe_and_rebuilds_another(tmp_path: Path) -> None:
    """A second build of the same recipe keeps the folder; a changed recipe rebuilds it."""
    path = cached_build("qwen3", tmp_path, bits=4)
    assert path == tmp_path / folder_name("qwen3", 4) == tmp_path / "qwen3-4bit"
    assert json.loads((path / "config.json").read_text())["quantization"]["bits"] == 4
    weights = path / "model.safetensors"
    weights.write_bytes(b"marker")  # a rebuild would overwrite it
    assert cached_build("qwen3", tmp_path, bits=4) == path
    assert weights.read_bytes() == b"marker"
    (path / RECIPE).write_text("{}")  # built from something else
    cached_build("qwen3", tmp_path, bits=4)
    assert weights.read_bytes() != b"marker"
