"""Load a model with mlx-lm (after checking it can be: architecture, memory) and pick its CPU dtype."""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm import load as mlx_load

from protocol.messages import ModelFacts
from worker.kinds.vision.load import is_vision, load_vision, vision_facts
from worker.model.fetch import CannotLoad, resolve
from worker.model.preflight import check_architecture, check_memory

log = logging.getLogger("rapid_mlx.worker")


@dataclass
class LoadedModel:
    """A loaded model with its tokenizer and the facts the gateway needs."""

    model: Any
    tokenizer: Any
    path: Path
    config: dict[str, Any]
    facts: ModelFacts
    processor: Any = None  # a vision model's image processor (mlx-vlm); None for text models


def _on_cpu() -> bool:
    return mx.default_device() == mx.cpu or not mx.metal.is_available()


def choose_dtype(model: Any) -> str:
    """On CPU, upcast half-precision weights to float32 when they fit: half matmuls are slow there."""
    params: list[mx.array] = [p for _, p in tree_flatten(model.parameters())]  # type: ignore[misc,str-unpack]
    float_bytes = sum(p.nbytes for p in params if p.dtype in (mx.float16, mx.bfloat16))
    if not _on_cpu() or not float_bytes:
        return str(params[0].dtype).replace("mlx.core.", "") if params else ""
    total_ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if float_bytes * 2 < total_ram * 0.5:
        model.set_dtype(mx.float32)
        return "float32"
    log.warning("keeping half-precision weights: float32 would not fit in memory")
    return "float16"


def read_config(model: str, path: Path) -> dict[str, Any]:
    """MODEL's config.json (at PATH) as a dict, or CannotLoad saying what is wrong."""
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise CannotLoad(model, f"cannot read {path / 'config.json'} ({exc})",
                         "fix or replace the model folder") from exc
    if not isinstance(config, dict):
        raise CannotLoad(model, "its config.json is not a JSON object", "fix the model folder")
    return config


def load_model(model: str, revision: str | None = None) -> LoadedModel:
    """Resolve, load and prepare MODEL; return it with its facts."""
    path = resolve(model, revision)
    config = read_config(model, path)
    vision = is_vision(config)
    if not vision:
        check_architecture(model, config)
    if not any(path.glob("*.safetensors")):
        raise CannotLoad(model, f"{path} has no *.safetensors weight files",
                         "pass a complete model folder (or delete the partial download and pull "
                         "it again)")
    check_memory(model, path)
    processor = None
    if vision:
        mdl, tok, processor = load_vision(model, path, config)
        dtype = choose_dtype(mdl.vlm)
    else:
        mdl, tok = mlx_load(str(path))[:2]
        dtype = choose_dtype(mdl)
    text_cfg = config.get("text_config", config)
    ctx = int(text_cfg.get("max_position_embeddings") or config.get("max_position_embeddings") or 4096)
    template = getattr(tok, "chat_template", None)
    model_type = str(config.get("model_type", ""))
    facts = ModelFacts(
        model=model,
        model_type=model_type,
        context_length=ctx,
        vocab_size=int(text_cfg.get("vocab_size", 0)),
        num_layers=len(mdl.layers),
        dtype=dtype,
        is_moe=any(k in text_cfg for k in ("num_experts", "n_routed_experts", "num_local_experts")),
        is_hybrid=any(k in text_cfg for k in ("layer_types", "linear_attention", "ssm_cfg"))
        and not all(t == "full_attention" for t in text_cfg.get("layer_types", ["x"])),
        chat_template=template if isinstance(template, str) else None,
        special_tokens=[str(t) for t in getattr(tok, "all_special_tokens", [])][:200],
    )
    if vision:
        facts = vision_facts(facts)
    return LoadedModel(mdl, tok, path, config, facts, processor)
