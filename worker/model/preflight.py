"""Checks before loading a model that fail at once, with one line, instead of deep inside mlx-lm."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from worker.model.fetch import CannotLoad

SKIP_MEMORY_ENV = "RAPID_MLX_SKIP_MEMORY_CHECK"
_GIB = 2**30


def check_architecture(model: str, config: dict[str, Any]) -> None:
    """Raise CannotLoad when mlx-lm has no implementation of the model's architecture."""
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CannotLoad(model, "its config.json has no model_type",
                         "pass a Hugging Face model folder made for mlx-lm")
    try:
        from mlx_lm.utils import _get_classes
    except ImportError:  # mlx-lm moved it: let the load itself tell
        return
    try:
        _get_classes(config)
    except ValueError as exc:
        from importlib.metadata import version

        raise CannotLoad(model, f"model type '{model_type}' is not supported by mlx-lm "
                         f"{version('mlx-lm')}", "pick another model (see 'rapid-mlx models') "
                         "or upgrade mlx-lm") from exc


def weights_bytes(path: Path) -> int:
    """Bytes of the model's weight files (*.safetensors) in PATH."""
    return sum(f.stat().st_size for f in path.glob("*.safetensors"))


def available_memory() -> int:
    """Bytes of memory available to a new model now (MemAvailable on Linux), else total RAM."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def check_memory(model: str, path: Path) -> None:
    """Raise CannotLoad when the weights alone are larger than the memory available."""
    if os.environ.get(SKIP_MEMORY_ENV, "") in ("1", "true"):
        return
    need, have = weights_bytes(path), available_memory()
    if need > have:
        raise CannotLoad(model, f"its weights take {need / _GIB:.1f} GiB but only "
                         f"{have / _GIB:.1f} GiB of memory is available",
                         "pick a smaller or more quantized model (see 'rapid-mlx models'), free "
                         f"memory, or set {SKIP_MEMORY_ENV}=1 to try anyway")
