"""Location of the embedded default model (and its speculative-decoding draft) shipped with rapid-mlx."""

from __future__ import annotations

import pathlib

_HERE = pathlib.Path(__file__).resolve().parent / "demo"
_WEIGHTS = _HERE / "weights"
_DRAFT = _HERE / "draft"
_REQUIRED = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


def _checked(folder: pathlib.Path, what: str, preset: str) -> pathlib.Path:
    missing = [name for name in _REQUIRED if not (folder / name).is_file()]
    if missing:
        raise FileNotFoundError(
            f"embedded {what} is missing from {folder} (no {', '.join(missing)}); "
            f"rebuild it with `python -m tools.demo_model.train --preset {preset} --out "
            f"worker/model/demo/{folder.name}`"
        )
    return folder


def embedded_model_path() -> pathlib.Path:
    """Return the folder of the embedded demo model (loadable with ``mlx_lm.load``)."""
    return _checked(_WEIGHTS, "demo model", "demo")


def embedded_draft_path() -> pathlib.Path:
    """Return the folder of the demo model's trained draft (``--draft-model demo-draft``)."""
    return _checked(_DRAFT, "demo draft model", "draft")
