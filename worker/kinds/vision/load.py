"""Load a multimodal model folder (config.json with vision_config) through mlx-vlm."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from protocol.messages import ModelFacts
from worker.model.fetch import CannotLoad

VISION = "vision"  # the capability the gateway looks for (gateway/images/intake.py)
FAMILIES = {"gemma3", "qwen2_vl", "qwen2_5_vl"}  # mlx-vlm model types the engine serves with images


def is_vision(config: dict[str, Any]) -> bool:
    """True when CONFIG describes a multimodal model this engine serves with images; other
    multimodal folders load their text model through mlx-lm (text only, no vision)."""
    return isinstance(config.get("vision_config"), dict) and config.get("model_type") in FAMILIES


def load_vision(model: str, path: Path, config: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(VisionLM, tokenizer wrapper, processor) of the model at PATH, or CannotLoad."""
    try:
        from mlx_vlm.utils import load as vlm_load
    except ImportError as exc:
        raise CannotLoad(model, "it is a vision model and mlx-vlm is not installed",
                         "install the [vision] extra: pip install 'rapid-mlx[vision]'") from exc
    from mlx_lm.utils import load_tokenizer

    from worker.kinds.vision.model import VisionLM

    vlm, processor = vlm_load(str(path))
    eos = config.get("eos_token_id", config.get("text_config", {}).get("eos_token_id"))
    eos_ids = [eos] if isinstance(eos, int) else list(eos) if isinstance(eos, list) else None
    tokenizer = load_tokenizer(path, eos_token_ids=eos_ids)  # type: ignore[no-untyped-call]
    return VisionLM(vlm), tokenizer, processor


def vision_facts(facts: ModelFacts) -> ModelFacts:
    """FACTS with the vision capability."""
    if VISION not in facts.capabilities:
        facts.capabilities = [*facts.capabilities, VISION]
    return facts
