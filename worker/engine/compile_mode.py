"""The `--compile-decode auto|on|off` setting: which decode steps run through the compiled step."""

from __future__ import annotations

import os
from typing import Any

MODES = ("auto", "on", "off")
ENV = "RAPID_MLX_COMPILE_DECODE"  # a test and bench override: 1 (auto) or 0 (off)
ROWS_ENV = "RAPID_MLX_COMPILE_DECODE_MAX_ROWS"  # a test and bench override of auto's row limit
# auto's row limit: on stories260K the compiled step was faster at 1 and 8 rows and slower at
# 32 (plain and compiled steps in turns)
AUTO_MAX_ROWS = 8
# auto's weight limit: compiling pays at 1-8 rows where a step is dispatch-bound (stories260K,
# 1 MB: 1.41x vs 1.14x plain at 1 stream; the demo model, 9 MB: 0.67-0.82x the CPU per step).
# Above it only 1-row steps compile: the Qwen3 bench model (116 MB, K8V4) measured 0.93-0.94x
# per step compiled at 1 row and 0.97-1.09x at 8 (measured)
MAX_WEIGHT_BYTES = 32 << 20
AUTO_LARGE_MAX_ROWS = 1


def mode_in_force(mode: str) -> str:
    """MODE, or what RAPID_MLX_COMPILE_DECODE says when it is set (1: auto, 0: off)."""
    env = os.environ.get(ENV)
    if env is not None:
        mode = {"1": "auto", "0": "off"}.get(env, env)
    if mode not in MODES:
        raise ValueError(f"compile_decode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def compiled_rows(mode: str, max_batch: int, weight_bytes: int = 0) -> int:
    """Most rows a decode step runs compiled with (0: never).

    auto: up to AUTO_MAX_ROWS rows (or RAPID_MLX_COMPILE_DECODE_MAX_ROWS) for a model whose weights
    are at most MAX_WEIGHT_BYTES, AUTO_LARGE_MAX_ROWS above it (the env override skips that check);
    on: every decode batch; off: none. Either way only batches the compiled step fits (``CompiledDecode.fits``) run
    compiled.
    """
    mode = mode_in_force(mode)
    if mode == "off":
        return 0
    if mode == "on":
        return max_batch
    rows = os.environ.get(ROWS_ENV)
    if rows is not None:
        return int(rows)
    return AUTO_MAX_ROWS if weight_bytes <= MAX_WEIGHT_BYTES else AUTO_LARGE_MAX_ROWS


def rows_for(mode: str, max_batch: int, model: Any) -> int:
    """``compiled_rows`` for MODEL (its weights' size decides auto)."""
    from worker.cpu.blas import weight_bytes

    return compiled_rows(mode, max_batch, weight_bytes(model))


def compile_status(mode: str, compiled: Any) -> dict[str, Any]:
    """The worker status fields of the setting: its mode, row limit and compiled functions."""
    return {
        "compile_decode": mode,
        "compile_decode_max_rows": compiled.max_rows if compiled is not None else 0,
        "compiled_decode_functions": len(compiled.fns) if compiled is not None else 0,
    }
