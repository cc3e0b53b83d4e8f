"""Location of the embedded default model shipped with rapid-mlx."""

from __future__ import annotations

import pathlib

_WEIGHTS = pathlib.Path(__file__).resolve().parent / "demo_model" / "weights"
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def embedded_model_path() -> pathlib.Path:
    """Return the folder of the embedded demo model (loadable with ``mlx_lm.load``)."""
    missing = [name for name in _REQUIRED if not (_WEIGHTS / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"embedded demo model is missing from {_WEIGHTS} (no {', '.join(missing)}); "
            "rebuild it with `python -m worker.demo_model.train --out worker/demo_model/weights`"
        )
    return _WEIGHTS
