"""What the tests of worker/cpu/native's extensions share: where they run, and bits to compare."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np


def fma_cpu() -> bool:
    """True on Linux x86-64 with AVX2 and FMA: where make install builds and the worker uses them."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return False
    flags = Path("/proc/cpuinfo").read_text().split()
    return "avx2" in flags and "fma" in flags


def bits(a: mx.array) -> np.ndarray:
    """A float32 array's bits, for exact comparisons."""
    return np.array(mx.view(a, mx.uint32))
