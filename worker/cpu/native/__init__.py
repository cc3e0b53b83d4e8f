"""worker/cpu/native's MLX extensions (built by ``python -m worker.cpu.native.build``) and their loader."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

import mlx.core as mx

log = logging.getLogger("rapid_mlx.worker")


def load(name: str, what: str, instead: str, fma: bool = True) -> Any | None:
    """worker.cpu.native.NAME when it imports, was built for the running MLX and (FMA: a kernel
    that needs them) this CPU has AVX2/FMA; else None, with one log line naming WHAT and what
    runs INSTEAD."""
    try:
        module: Any = importlib.import_module(f"worker.cpu.native.{name}")
    except ImportError as exc:
        log.info("native %s not available (%s); %s", what, exc, instead)
        return None
    running = getattr(mx, "__version__", "")
    if getattr(module, "built_for", None) != running:  # its C++ view of MLX's arrays
        log.warning("native %s was built for mlx %s, running %s (make install rebuilds it); %s",
                    what, getattr(module, "built_for", "?"), running, instead)
        return None
    if not fma:
        return module
    try:
        fma = bool(module.fma_cpu())
    except Exception as exc:  # an ABI mismatch with this MLX shows up here: keep MLX's ops
        log.warning("native %s failed to answer (%r); %s", what, exc, instead)
        return None
    if not fma:
        log.info("native %s: this CPU has no AVX2/FMA; %s", what, instead)
        return None
    return module


def load_checked(name: str, what: str, instead: str, check: Callable[[Any], bool],
                 fma: bool = True) -> Any | None:
    """``load``, then CHECK(module) (a bit-comparison with MLX's own ops): the module, or None
    with one warning when the check fails or raises (an ABI mismatch with this MLX shows up
    there)."""
    module = load(name, what, instead, fma)
    if module is None:
        return None
    try:
        if not check(module):
            log.warning("native %s differs from MLX's on its check; %s", what, instead)
            return None
    except Exception as exc:
        log.warning("native %s failed its check (%r); %s", what, exc, instead)
        return None
    return module
