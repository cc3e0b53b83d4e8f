"""`--compile-decode auto|on|off`: the rows each mode compiles, the test override, the engine."""

from __future__ import annotations

from typing import Any

import pytest
from mlx_lm import load

from gateway.aliases import AliasEntry, spec_args
from tests.worker.engine.test_engine import make_engine
from worker.engine.compile_mode import (
    AUTO_LARGE_MAX_ROWS,
    AUTO_MAX_ROWS,
    MAX_WEIGHT_BYTES,
    compiled_rows,
    mode_in_force,
    rows_for,
)
from worker.model.embedded import embedded_model_path


@pytest.fixture(autouse=True)
def _no_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAPID_MLX_COMPILE_DECODE", raising=False)
    monkeypatch.delenv("RAPID_MLX_COMPILE_DECODE_MAX_ROWS", raising=False)


def test_rows_per_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compiled_rows("auto", 32) == AUTO_MAX_ROWS
    assert compiled_rows("on", 32) == 32
    assert compiled_rows("off", 32) == 0
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "0")  # tests and benches override the mode
    assert mode_in_force("on") == "off" and compiled_rows("on", 32) == 0
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "1")
    assert mode_in_force("off") == "auto"
    with pytest.raises(ValueError):
        monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE", "sometimes")
        compiled_rows("auto", 32)


def test_auto_compiles_small_models_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """auto compiles only 1-row steps of weight-bound models (above MAX_WEIGHT_BYTES)."""
    import mlx.nn as nn

    assert compiled_rows("auto", 32, MAX_WEIGHT_BYTES) == AUTO_MAX_ROWS
    assert compiled_rows("auto", 32, MAX_WEIGHT_BYTES + 1) == AUTO_LARGE_MAX_ROWS == 1
    assert compiled_rows("on", 32, MAX_WEIGHT_BYTES + 1) == 32
    big = nn.Linear(4096, 4096)  # 64 MiB of float32 weights (never evaluated)
    assert rows_for("auto", 32, big) == 1 and rows_for("auto", 32, nn.Linear(64, 64)) == AUTO_MAX_ROWS
    monkeypatch.setenv("RAPID_MLX_COMPILE_DECODE_MAX_ROWS", "4")  # benches force the rows
    assert rows_for("auto", 32, big) == 4


def test_alias_setting_becomes_a_worker_argument() -> None:
    assert spec_args(AliasEntry(repo="x", compile_decode="on"), {}) == ["--compile-decode", "on"]
    assert spec_args(AliasEntry(repo="x"), {}) == []


@pytest.mark.parametrize(("mode", "rows"), [("auto", AUTO_MAX_ROWS), ("on", 16), ("off", 0)])
def test_engine_takes_the_mode(mode: str, rows: int) -> None:
    mdl, tok = load(str(embedded_model_path()))[:2]
    engine: Any = make_engine(mdl, tok, max_batch=16, compile_decode=mode)
    compiled = engine.compiled
    assert engine.compile_decode == mode
    assert (compiled.max_rows if compiled is not None else 0) == rows


@pytest.mark.slow
def test_on_compiles_past_eight_rows_with_the_same_tokens() -> None:
    """`on` runs 12-row decode batches compiled; greedy tokens equal the uncompiled engine's."""
    from protocol.messages import SamplingParams
    from tests.worker.engine.test_engine import PROMPTS, _run

    mdl, tok = load(str(embedded_model_path()))[:2]
    prompts = {f"p{i}": tok.encode(p) for i, p in enumerate(PROMPTS[:12])}
    greedy = SamplingParams(max_tokens=32, temperature=0.0)
    plain = _run(make_engine(mdl, tok, compile_decode="off"), prompts, greedy)
    engine: Any = make_engine(mdl, tok, compile_decode="on")
    assert _run(engine, prompts, greedy) == plain
    assert any(key[2][0] > 8 for key in engine.compiled.fns), "no step of > 8 rows compiled"
