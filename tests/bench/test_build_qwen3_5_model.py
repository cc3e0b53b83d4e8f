"""The Qwen3.5 bench model's builder: deterministic, loadable by mlx-lm, Qwen3.5's layer pattern."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mlx_lm import load

from bench.build_qwen3_5_model import build, build_weights


def test_weights_are_deterministic() -> None:
    shapes = {"w.weight": (4, 3), "norm.weight": (3,), "x.A_log": (2,)}
    one, two = build_weights(0, shapes), build_weights(0, shapes)
    assert all(np.array_equal(one[k], two[k]) for k in shapes)
    assert not np.array_equal(one["w.weight"], build_weights(1, shapes)["w.weight"])
    assert (one["norm.weight"] == 1).all() and (np.exp(one["x.A_log"]) >= 1).all()


def test_builds_a_hybrid_mlx_lm_loads(tmp_path: Path) -> None:
    out = build(tmp_path / "m", quiet=True)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert build(out, quiet=True) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # current: reused, not rebuilt
    model, tok = load(str(out))[:2]
    assert [hasattr(layer, "linear_attn") for layer in model.layers] == [True, True, True, False]
    assert tok.eos_token_id == 2 and len(tok.encode("hello there")) > 0
