"""The `--compile-decode auto|on|off` setting: which decode steps run through the compiled step."""

from __future__ import annotations

import os
from typing import Any

from worker.compiled_decode import MAX_ROWS

MODES = ("auto", "on", "off")
ENV = "RAPID_MLX_COMPILE_DECODE"  # a test and bench override: 1 (auto) or 0 (off)


def mode_in_force(mode: str) -> str:
    """MODE, or what RAPID_MLX_COMPILE_DECODE says when it is set (1: auto, 0: off)."""
    env = os.environ.get(ENV)
    if env is not None:
        mode = {"1": "auto", "0": "off"}.get(env, env)
    if mode not in MODES:
        raise ValueError(f"compile_decode must be one of {', '.join(MODES)}, not {mode!r}")
    return mode


def compiled_rows(mode: str, max_batch: int) -> int:
    """Most rows a decode step runs compiled with (0: never).

    auto: up to the rows where the compiled step measured faster (MAX_ROWS, or
    RAPID_MLX_COMPILE_DECODE_MAX_ROWS); on: every decode batch; off: none. Either way only
    batches the compiled step fits (``CompiledDecode.fits``) run compiled.
    """
    mode = mode_in_force(mode)
    if mode == "off":
        return 0
    if mode == "on":
        return max_batch
    return int(os.environ.get("RAPID_MLX_COMPILE_DECODE_MAX_ROWS", MAX_ROWS))


def compile_status(mode: str, compiled: Any) -> dict[str, Any]:
    """The worker status fields of the setting: its mode, row limit and compiled functions."""
    return {
        "compile_decode": mode,
        "compile_decode_max_rows": compiled.max_rows if compiled is not None else 0,
        "compiled_decode_functions": len(compiled.fns) if compiled is not None else 0,
    }
