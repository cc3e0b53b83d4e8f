"""Use an optimized BLAS on Linux: the mlx[cpu] wheel ships the slow reference one."""

from __future__ import annotations

import os
import sys
from pathlib import Path

CANDIDATES = [
    "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/openblas-pthread/libopenblas.so.0",
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
    "/usr/lib/libopenblas.so.0",
]


def find_openblas() -> str | None:
    """Return the path of a system OpenBLAS, honouring RAPID_MLX_BLAS (a path, or 'off')."""
    choice = os.environ.get("RAPID_MLX_BLAS", "")
    if choice == "off":
        return None
    if choice:
        return choice if Path(choice).exists() else None
    return next((c for c in CANDIDATES if Path(c).exists()), None)


def reexec_with_openblas() -> None:
    """Restart this process with OpenBLAS preloaded, once, on Linux, when one is installed."""
    if not sys.platform.startswith("linux") or os.environ.get("_RAPID_MLX_BLAS_DONE"):
        return
    lib = find_openblas()
    if lib is None:
        return
    env = dict(os.environ, _RAPID_MLX_BLAS_DONE="1")
    preload = env.get("LD_PRELOAD", "")
    if lib not in preload.split(":"):
        env["LD_PRELOAD"] = f"{lib}:{preload}" if preload else lib
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


if __name__ == "__main__":
    print(find_openblas() or "")
