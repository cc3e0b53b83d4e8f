"""Which kind of worker a model folder needs, read from its config files (no imports of mlx)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

EMBED_TYPES = {"bert", "xlm-roberta", "roberta", "modernbert", "nomic_bert", "distilbert"}
STT_TYPES = {"whisper", "parakeet", "parakeet_tdt", "parakeet_ctc", "parakeet_rnnt"}
TTS_TYPES = {"kokoro", "istftnet"}
# decoder families whose embedding models ship without sentence-transformers files in some MLX
# conversions (e.g. mlx-lm's Qwen3-Embedding): recognised by "embedding" in the folder's name
NAMED_EMBED_TYPES = {"qwen3", "gemma3_text"}
# mlx-whisper's config.json: Whisper's dimensions and no model_type (mlx-community/whisper-*)
WHISPER_DIMS = {"n_mels", "n_audio_state", "n_audio_layer", "n_text_state", "n_vocab"}


def is_mlx_whisper(config: dict[str, Any]) -> bool:
    """True for mlx-whisper's folder layout (config.json of dimensions, no model_type)."""
    return "model_type" not in config and WHISPER_DIMS <= set(config)


def detect_kind(path: Path, config: dict[str, Any]) -> str:
    """'embed', 'transcribe', 'speech' or 'generate' for the model folder PATH with CONFIG."""
    model_type = str(config.get("model_type", "")).lower()
    archs = " ".join(str(a) for a in config.get("architectures") or []).lower()
    if (path / "modules.json").exists() or (path / "config_sentence_transformers.json").exists():
        return "embed"  # a sentence-transformers folder (EmbeddingGemma, Qwen3-Embedding, MiniLM)
    if model_type in EMBED_TYPES or "formaskedlm" in archs:
        return "embed"
    if model_type in NAMED_EMBED_TYPES and "embedding" in str(path).lower():
        return "embed"  # e.g. .../models--mlx-community--Qwen3-Embedding-0.6B-4bit-DWQ/...
    if model_type in STT_TYPES or "whisper" in archs or "parakeet" in archs or is_mlx_whisper(config):
        return "transcribe"
    if model_type in TTS_TYPES or "istftnet" in config or "kokoro" in archs:
        return "speech"
    return "generate"
