"""Load a speech-to-text model folder with mlx-audio (Whisper in float32 on CPU, as fp16 is slow there)."""

from __future__ import annotations

import glob
import json
from pathlib import Path
from typing import Any

import mlx.core as mx

from worker.kinds.stt.cpu_softmax import use_numpy_softmax
from worker.kinds.stt.whisper_vocab import tokenizer_folder

PARAKEET_TYPES = {"parakeet", "parakeet_tdt", "parakeet_ctc", "parakeet_rnnt", "parakeet_tdt_ctc"}


def family(config: dict[str, Any]) -> str:
    """'whisper' or 'parakeet' for a model folder's config."""
    model_type = str(config.get("model_type", "")).lower()
    archs = " ".join(str(a) for a in config.get("architectures") or []).lower()
    if model_type in PARAKEET_TYPES or "parakeet" in archs or "parakeet" in str(config.get("target", "")).lower():
        return "parakeet"
    return "whisper"


def whisper_dtype() -> mx.Dtype:
    """float16 on a GPU; float32 on the CPU, where MLX's float16 matmuls run about 9x slower."""
    return mx.float16 if mx.default_device() == mx.gpu else mx.float32


def load_whisper(path: Path, config: dict[str, Any], dtype: mx.Dtype | None = None) -> Any:
    """mlx-audio's Whisper Model with its weights, quantization and processor (tokenizer); reads
    mlx-audio's folders and mlx-whisper's (no model_type, weights.npz, no tokenizer files)."""
    from mlx_audio.stt.models.whisper import whisper as mw
    from mlx_audio.utils import apply_quantization

    dtype = dtype or whisper_dtype()
    model = mw.Model(mw.ModelDimensions.from_dict(config), dtype)
    weights: dict[str, mx.array] = {}
    files = sorted(glob.glob(str(path / "*.safetensors"))) or sorted(glob.glob(str(path / "*.npz")))
    for file in files:  # mlx-whisper's layout: weights.safetensors or weights.npz
        loaded: Any = mx.load(file)
        weights.update(loaded)
    if not weights:
        raise FileNotFoundError(f"no *.safetensors or *.npz weights in {path}")
    weights = model.sanitize(weights)
    apply_quantization(model, config, weights, None)  # only if config has "quantization"
    model.load_weights(list(weights.items()), strict=True)
    mx.eval(model.parameters())
    model.eval()
    # mlx-whisper's folders carry no tokenizer files: build them from Whisper's vocabularies
    tokenizer = path if (path / "tokenizer.json").exists() else tokenizer_folder(config)
    model = mw.Model.post_load_hook(model, tokenizer)
    if getattr(model, "_processor", None) is None:
        raise FileNotFoundError(f"{path} has no Whisper tokenizer files (tokenizer.json, "
                                "tokenizer_config.json, preprocessor_config.json)")
    use_numpy_softmax(model)  # CPU only: numpy's SIMD exp for the encoder's attention
    gen = path / "generation_config.json"
    if gen.exists() and json.loads(gen.read_text()).get("alignment_heads"):
        model.set_alignment_heads(json.loads(gen.read_text())["alignment_heads"])
    return model


def load_parakeet(path: Path) -> Any:
    """mlx-audio's Parakeet (TDT/CTC/RNNT) through its own loader. Untested here: no weights."""
    from mlx_audio.stt.utils import load

    return load(str(path))
