"""Use an optimized BLAS on Linux (the mlx[cpu] wheel ships the slow reference one), and pick
its thread count for the loaded model.

OpenBLAS threads busy-wait between calls. MLX already keeps two threads busy in a decoding
worker (the Python host building the next step's graph, the CPU stream computing), so on a
small machine a second OpenBLAS thread takes a core from them, and a small model's matrix
products are too short to gain from splitting anyway: measured with bench/peers/decode_step.py
--threads (bench/README.md, "What we learned"). ``blas_threads`` is the policy;
``apply_blas_policy`` sets it at run time through ``openblas_set_num_threads``.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from pathlib import Path
from typing import Any

log = logging.getLogger("rapid_mlx.worker")

SMALL_MODEL_BYTES = 1 << 30  # weights below this: one OpenBLAS thread

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


def blas_threads(weight_bytes: int, cpus: int, env: dict[str, str]) -> int | None:
    """OpenBLAS threads for a model of WEIGHT_BYTES on CPUS cores; None keeps OpenBLAS's own.

    An explicit OPENBLAS_NUM_THREADS / RAPID_MLX_BLAS_THREADS (a number, or "auto") wins.
    """
    choice = env.get("RAPID_MLX_BLAS_THREADS", "auto")
    if choice != "auto":
        return max(int(choice), 1)
    if env.get("OPENBLAS_NUM_THREADS") or env.get("OMP_NUM_THREADS"):
        return None
    if weight_bytes < SMALL_MODEL_BYTES or cpus <= 2:
        return 1
    return None


def set_blas_threads(n: int) -> bool:
    """Set the loaded OpenBLAS's thread count; False when no OpenBLAS is loaded."""
    setter = getattr(ctypes.CDLL(None), "openblas_set_num_threads", None)
    if setter is None:
        return False
    setter(ctypes.c_int(n))
    return True


def get_blas_threads() -> int | None:
    """The loaded OpenBLAS's thread count (None when no OpenBLAS is loaded)."""
    getter = getattr(ctypes.CDLL(None), "openblas_get_num_threads", None)
    return int(getter()) if getter is not None else None


def weight_bytes(model: Any) -> int:
    """Bytes of MODEL's parameters."""
    from mlx.utils import tree_flatten

    params: list[tuple[str, Any]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    return sum(int(a.nbytes) for _, a in params)


def apply_blas_policy(model: Any) -> int | None:
    """Give the loaded OpenBLAS the thread count ``blas_threads`` picks for MODEL."""
    n = blas_threads(weight_bytes(model), os.cpu_count() or 1, dict(os.environ))
    if n is not None and set_blas_threads(n):
        log.info("OpenBLAS threads: %d", n)
    return n


if __name__ == "__main__":
    print(find_openblas() or "")
