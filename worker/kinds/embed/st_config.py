"""How a model folder wants its embeddings made, read from its sentence-transformers files."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

POOLING_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_mean_tokens": "mean",
                "pooling_mode_max_tokens": "max", "pooling_mode_mean_sqrt_len_tokens":
                "mean_sqrt_len", "pooling_mode_lasttoken": "lasttoken",
                "pooling_mode_weightedmean_tokens": "weightedmean"}
POOLINGS = {"mean", "cls", "max", "mean_sqrt_len", "lasttoken"}  # the ones we compute

# What a family's embedding models do when the folder lacks the sentence-transformers files
# (their model cards): Qwen3-Embedding pools the last token, EmbeddingGemma mean-pools then
# applies two Dense layers; both normalize.
FAMILY_DEFAULTS = {"qwen3": ("lasttoken", ["Transformer", "Pooling", "Normalize"]),
                   "gemma3_text": ("mean", ["Transformer", "Pooling", "Dense", "Dense",
                                            "Normalize"])}

# Models trained for truncation (Matryoshka): config_sentence_transformers.json may name the
# sizes as "matryoshka_dims" (our key; `convert-embeddings --matryoshka-dims` writes it). Else
# these families, recognised by model_type in a sentence-transformers folder, are known to be:
# EmbeddingGemma (768/512/256/128, per its model card); Qwen3-Embedding (any size 32..hidden).
KNOWN_MATRYOSHKA = {"gemma3_text": [768, 512, 256, 128], "qwen3": "32.."}


class BadFolder(ValueError):
    """The folder's sentence-transformers files ask for something we cannot do."""


@dataclass
class EmbedConfig:
    """Pooling, normalization, length and truncation sizes of one embedding model."""

    pooling: str = "mean"
    normalize: bool = False
    max_length: int = 512
    dense: bool = False  # Dense modules after pooling: the model class applies them itself
    dims: list[int] = field(default_factory=list)  # sizes `dimensions` may ask for; []: none
    prompt: str = ""  # the default prompt put before every text input
    modules: list[str] = field(default_factory=list)


def _json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _modules(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads((path / "modules.json").read_text())
    except (OSError, ValueError):
        return []
    return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []


def pooling_mode(cfg: dict[str, Any]) -> str:
    """The pooling a 1_Pooling/config.json asks for (mean when it says nothing)."""
    mode = cfg.get("pooling_mode")
    if isinstance(mode, str):
        return mode.replace("_tokens", "").replace("_token", "")
    chosen = [name for key, name in POOLING_KEYS.items() if cfg.get(key)]
    if len(chosen) > 1:
        raise BadFolder(f"several pooling modes at once ({', '.join(chosen)}) are not supported")
    return chosen[0] if chosen else "mean"


def matryoshka_dims(st: dict[str, Any], model_type: str, hidden: int) -> list[int]:
    """The output sizes the model was trained to be truncated to (empty: none)."""
    explicit = st.get("matryoshka_dims")
    if isinstance(explicit, list):
        return sorted({int(d) for d in explicit if 0 < int(d) <= hidden}, reverse=True)
    known = KNOWN_MATRYOSHKA.get(model_type)
    if known == "32..":
        return list(range(hidden, 31, -1))
    return [d for d in known if d <= hidden] if isinstance(known, list) else []


def read_embed_config(path: Path, config: dict[str, Any]) -> EmbedConfig:
    """The EmbedConfig of the model folder PATH (whose config.json is CONFIG)."""
    modules = _modules(path)
    types = [str(m.get("type", "")).rsplit(".", 1)[-1] for m in modules]
    model_type = str(config.get("model_type", "")).replace("-", "_")
    pool_dir = next((m.get("path", "") for m in modules if str(m.get("type", "")).endswith("Pooling")),
                    "1_Pooling")
    pooling = pooling_mode(_json(path / str(pool_dir) / "config.json"))
    if not modules and model_type in FAMILY_DEFAULTS:
        pooling, types = FAMILY_DEFAULTS[model_type]
    if pooling not in POOLINGS:
        raise BadFolder(f"pooling mode '{pooling}' is not supported (we do {', '.join(sorted(POOLINGS))})")
    st = _json(path / "config_sentence_transformers.json")
    bert = _json(path / "sentence_bert_config.json")
    text: dict[str, Any] = config.get("text_config") or {}
    positions = int(config.get("max_position_embeddings") or text.get("max_position_embeddings") or 512)
    if config.get("model_type") in ("roberta", "xlm-roberta", "xlm_roberta"):
        positions -= 2  # RoBERTa positions start after the padding index
    max_length = min(int(bert.get("max_seq_length") or positions), positions)
    hidden = int(config.get("hidden_size") or text.get("hidden_size") or 0)
    prompts: dict[str, Any] = st.get("prompts") or {}
    default = st.get("default_prompt_name")
    return EmbedConfig(
        pooling=pooling, normalize="Normalize" in types, max_length=max_length,
        dense="Dense" in types, prompt=str(prompts.get(default, "")) if default else "",
        dims=matryoshka_dims(st, model_type, hidden) if types else [], modules=types)
