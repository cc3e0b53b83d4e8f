"""The OpenBLAS thread policy of the worker: one thread for small models or small machines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from worker.cpu.blas import SMALL_MODEL_BYTES, blas_threads, find_openblas, weight_bytes

BIG = 4 * SMALL_MODEL_BYTES


def test_small_models_get_one_thread_on_any_machine() -> None:
    assert blas_threads(10 << 20, 64, {}) == 1
    assert blas_threads(SMALL_MODEL_BYTES - 1, 8, {}) == 1


def test_big_models_keep_openblas_default_unless_the_machine_is_small() -> None:
    assert blas_threads(BIG, 8, {}) is None
    assert blas_threads(BIG, 2, {}) == 1


def test_explicit_settings_win() -> None:
    assert blas_threads(10 << 20, 8, {"OPENBLAS_NUM_THREADS": "4"}) is None
    assert blas_threads(10 << 20, 8, {"OMP_NUM_THREADS": "3"}) is None
    assert blas_threads(BIG, 8, {"RAPID_MLX_BLAS_THREADS": "3"}) == 3
    assert blas_threads(10 << 20, 8, {"RAPID_MLX_BLAS_THREADS": "2",
                                      "OPENBLAS_NUM_THREADS": "1"}) == 2
    assert blas_threads(BIG, 8, {"RAPID_MLX_BLAS_THREADS": "auto"}) is None


def test_weight_bytes_counts_parameters() -> None:
    import mlx.core as mx
    import mlx.nn as nn

    layer = nn.Linear(16, 8)
    assert weight_bytes(layer) == (16 * 8 + 8) * mx.float32.size


ROOT = str(Path(__file__).resolve().parents[3])
PROBE = ("import mlx.nn as nn\n"
         "from worker.cpu.blas import apply_blas_policy, get_blas_threads\n"
         "before = get_blas_threads()\n"
         "n = apply_blas_policy(nn.Linear(4, 4))\n"
         "print(before, n, get_blas_threads())\n")


def _probe(preload: str) -> list[str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "RAPID_MLX_BLAS_THREADS")}
    env["LD_PRELOAD"] = preload
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                          text=True, check=True, cwd=ROOT).stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux") or find_openblas() is None,
                    reason="needs a system OpenBLAS")
def test_the_policy_reaches_the_preloaded_openblas() -> None:
    """In a process started with OpenBLAS preloaded (as the worker re-executes itself)."""
    assert _probe(find_openblas() or "")[1:] == ["1", "1"]


def test_without_openblas_the_policy_is_harmless() -> None:
    assert _probe("") == ["None", "1", "None"]
