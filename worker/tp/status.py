"""Rank 0's exit code, passed to the group's launcher through a file (mlx.launch drops it)."""

from __future__ import annotations

import contextlib
import os

from protocol.process import TP_DIR_ENV

STATUS_ENV = "RAPID_MLX_TP_STATUS"  # set by worker/tp/launch.py: the file rank 0 writes
DIR_ENV = TP_DIR_ENV  # worker/tp/launch.py's folder for the group (removed on its exit)


def write_status(code: int) -> None:
    """Rank 0: leave CODE where the launcher reads it (when it asked for it)."""
    path = os.environ.get(STATUS_ENV)
    if path and os.environ.get("MLX_RANK", "0") == "0":
        with contextlib.suppress(OSError), open(path, "w") as f:
            f.write(str(code))


def read_status(path: str, default: int) -> int:
    """The code rank 0 left in PATH, or DEFAULT when it left none (it was killed)."""
    with contextlib.suppress(OSError, ValueError), open(path) as f:
        return int(f.read().strip())
    return default
