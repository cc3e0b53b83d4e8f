"""A Whisper folder rewritten in mlx-whisper's layout (mlx-community's Whisper repos): config.json
of dimensions without model_type, weights.npz, no tokenizer or generation files."""

from __future__ import annotations

import json
from pathlib import Path


def mlx_whisper_copy(src: Path, dst: Path) -> Path:
    """DST holding SRC's Whisper (our converted layout) in mlx-whisper's layout."""
    import mlx.core as mx

    dst.mkdir(parents=True, exist_ok=True)
    config = json.loads((src / "config.json").read_text())
    config.pop("model_type", None)
    (dst / "config.json").write_text(json.dumps(config))
    mx.savez(str(dst / "weights.npz"), **mx.load(str(src / "model.safetensors")))  # type: ignore[arg-type]
    return dst
